"""The extractive turn compressor (SPEC §6.4): N→M through the working-turn editor."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from helpers import orphan_results
from hypothesis import HealthCheck, event, given, settings
from test_turn_editor import assistant, image, land, one_turn, tool, turns, user
from turn_memory_support import work_turn

from dashr_ext._controller import Dashr
from dashr_ext._meter import TokenMeter
from dashr_ext._turnmemory import TurnNode, turn_nodes
from dashr_ext._turnmemory.extractive import TurnCompression, completes_intent, compress_turn

# --------------------------------------------------------------------------- builders


def act(
    text: str, *calls: tuple[str, str, dict[str, Any]], reasoning: str | None = None
) -> dict[str, Any]:
    """An assistant message calling ``(id, tool, arguments)`` for each of ``calls``."""
    m: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    m["tool_calls"] = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for cid, name, args in calls
    ]
    return m


def bash(cid: str, command: str) -> tuple[str, str, dict[str, Any]]:
    return (cid, "bash", {"command": command})


def editor(cid: str, command: str, path: str, **extra: Any) -> tuple[str, str, dict[str, Any]]:
    return (cid, "str_replace_editor", {"command": command, "path": path, **extra})


def recorded(
    messages: Sequence[dict[str, Any]], *, meter: TokenMeter | None = None
) -> tuple[TurnNode, ...]:
    """The nodes of turn 1 of a ``Dashr`` session that recorded ``messages`` as one turn."""
    with Dashr.create(in_memory=True) as d:
        d.session.begin_turn()
        d.record_openai(list(messages))
        d.session.end_turn()
        return turn_nodes(d.session, 1, meter=meter)


def compressed(messages: Sequence[dict[str, Any]]) -> TurnCompression:
    result = compress_turn(recorded(messages))
    assert result is not None
    result.editor.validate_final()
    return result


def texts(result: TurnCompression) -> str:
    return "\n".join(n.text for n in result.editor.nodes)


REQUEST = "Fix the parser in src/parse.py so that empty input returns an empty list."
DECISION = (
    "I decided to cache the token table in src/cache.py because rebuilding it on every "
    "call cost 40 ms."
)
ERROR = "IndexError: list index out of range"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "src/parse.py", line 12, in parse\n'
    "    return tokens[0]\n"
    f"{ERROR}"
)
ANSWER = (
    "parse() now returns [] for empty input.\n\n"
    "- src/parse.py: guard before indexing\n- tests/test_parse.py: two new cases\n\n"
    "All 14 tests pass."
)


def long_turn(rounds: int = 30) -> list[dict[str, Any]]:
    """A long working turn with planted facts: a failure, a decision, repeats, a final answer."""
    out = [user(REQUEST)]
    out.append(act("Let me read the parser.", editor("v1", "view", "src/parse.py")))
    out.append(tool("v1", "def parse(text):\n    tokens = text.split()\n    return tokens[0]\n"))
    out.append(act("Reproducing first.", bash("p1", "python -c 'import parse; parse.parse(\"\")'")))
    out.append(tool("p1", TRACEBACK))
    out.append(act(DECISION, editor("e1", "str_replace", "src/parse.py", old_str="a", new_str="b")))
    out.append(tool("e1", "The file src/parse.py has been edited."))
    for k in range(rounds):
        out.append(
            act(
                f"Checking module {k} for callers of parse.",
                bash(f"g{k}", f"grep -rn parse src/mod{k}.py"),
            )
        )
        out.append(tool(f"g{k}", f"src/mod{k}.py:{k + 3}: parse(line)\n" + "context line\n" * 40))
    for k in range(3):  # the same command, the same outcome
        out.append(act("Running the tests.", bash(f"t{k}", "pytest -q tests/test_parse.py")))
        out.append(tool(f"t{k}", "." * 14 + "\n14 passed in 0.31s"))
    out.append(assistant(ANSWER))
    return out


# --------------------------------------------------------------------------- a long turn


def test_a_long_turn_of_tool_calls_compresses_to_a_few_valid_nodes() -> None:
    messages = long_turn()
    meter = TokenMeter()
    nodes = recorded(messages, meter=meter)
    result = compress_turn(nodes, count_tokens=meter.count_text)
    assert result is not None
    result.editor.validate_final()
    assert result.nodes_before == len(messages) >= 70
    assert [n.role for n in result.editor.nodes] == ["user", "assistant", "assistant"]
    assert result.tokens_before == sum(n.tokens or 0 for n in nodes)
    assert result.ratio < 0.35
    work = result.editor.nodes[1].text
    assert result.editor.nodes[0].text == REQUEST and not result.editor.nodes[0].changed
    assert result.editor.nodes[2].text == ANSWER and not result.editor.nodes[2].changed
    for fact in (DECISION, ERROR, "src/parse.py", "src/cache.py", "grep -rn parse src/mod17.py"):
        assert fact in work, fact
    assert "`pytest -q tests/test_parse.py` → 14 passed in 0.31s (×3)" in work
    assert work.count("pytest -q tests/test_parse.py") == 1  # a repeat is said once
    assert "context line" not in work  # raw output is dropped


def test_a_compressed_turn_lands_with_every_call_answered() -> None:
    session = one_turn(long_turn(5))
    result = compress_turn(turn_nodes(session, 1))
    assert result is not None
    land(session, result.editor)
    messages = session.messages()
    assert orphan_results(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[-1]["content"] == ANSWER


def test_the_final_answer_ends_the_last_phase_when_the_turn_ends_with_a_call() -> None:
    messages = long_turn(4)[:-1]
    messages.append(act(ANSWER, ("f1", "finish", {})))
    messages.append(tool("f1", "ok"))
    result = compressed(messages)
    last = result.editor.nodes[-1]
    assert last.role == "assistant" and last.text.endswith("\n\n" + ANSWER)
    assert "`finish()`" in last.text


# --------------------------------------------------------------------------- steers

COMPLETING = "Also make sure the empty-string case is covered by a test."
CHANGING = "Scratch that: instead write a README section about the CLI flags."


def test_a_completing_steer_is_merged_and_a_goal_change_stays_its_own_node() -> None:
    messages = [
        user(REQUEST),
        act("Reading it.", bash("c1", "cat src/parse.py")),
        tool("c1", "def parse(text): ...\n" * 30),
        user(COMPLETING),
        act("Adding the test.", editor("c2", "create", "tests/test_parse.py", file_text="x" * 800)),
        tool("c2", "File created successfully at: tests/test_parse.py"),
        user(CHANGING),
        act("Looking at the CLI.", bash("c3", "python -m tool --help")),
        tool("c3", "usage: tool [--verbose] [--out FILE]\n" + "  option help\n" * 30),
        assistant("Added a README section on --verbose and --out."),
    ]
    result = compressed(messages)
    nodes = result.editor.nodes
    users = [n for n in nodes if n.role == "user"]
    assert len(users) == 2
    assert users[0].text == f"{REQUEST}\n\n{COMPLETING}"  # both verbatim, in order
    assert users[1].text == CHANGING
    roles = [n.role for n in nodes]
    assert roles[0] == "user" and roles.index("user", 1) > roles.index("assistant")
    assert roles[-1] == "assistant" and nodes[-1].text == messages[-1]["content"]
    text = texts(result)
    for fact in ("cat src/parse.py", "tests/test_parse.py", "python -m tool --help"):
        assert fact in text


@pytest.mark.parametrize(
    ("steer", "completes"),
    [
        ("Also handle tabs.", True),
        ("Sorry, I meant src/lexer.py, not src/parse.py.", True),
        ("continue", True),
        ("Please make sure it stays under 50 ms.", True),
        ("The parser should accept a trailing newline.", True),
        ("Scratch that, let's go with the regex approach.", False),
        ("Never mind the parser; instead profile the exporter.", False),
        ("Write a changelog entry for the release notes.", False),
    ],
)
def test_which_steers_complete_the_intent(steer: str, completes: bool) -> None:
    assert completes_intent(steer, [REQUEST]) is completes


# --------------------------------------------------------------------------- calls, reasoning


def test_parallel_tool_calls_are_absorbed_with_all_their_results() -> None:
    calls = [bash(f"c{k}", f"wc -l src/part{k}.py") for k in range(3)]
    messages = [
        user(REQUEST),
        act("Counting lines in all three.", *calls),
        tool("c2", "40 src/part2.py"),
        tool("c0", "10 src/part0.py"),
        tool("c1", "Traceback (most recent call last):\nFileNotFoundError: src/part1.py"),
        act(
            "Part 1 is missing; reading part 0 and 2.",
            bash("d0", "cat src/part0.py"),
            bash("d2", "cat src/part2.py"),
        ),
        tool("d2", "y = 2\n" * 60),
        tool("d0", "x = 1\n" * 60),
        assistant("Part 1 does not exist; parts 0 and 2 are fine."),
    ]
    result = compressed(messages)
    assert [n.role for n in result.editor.nodes] == ["user", "assistant", "assistant"]
    work = result.editor.nodes[1]
    assert work.landing == tuple(range(1, 8))
    for k in range(3):
        assert f"wc -l src/part{k}.py" in work.text
    assert "FileNotFoundError: src/part1.py" in work.text
    assert "`wc -l src/part0.py` → `10 src/part0.py`" in work.text


THOUGHT = "PRIVATE-CHAIN: maybe the tokenizer drops the last token"


def test_raw_reasoning_never_lands_and_its_nodes_are_all_rewritten() -> None:
    messages = [
        user(REQUEST),
        act("Reading.", bash("c1", "cat src/parse.py"), reasoning=THOUGHT + " (1)"),
        tool("c1", "def parse(text): ...\n" * 20),
        assistant("Thinking it over.", reasoning=THOUGHT + " (2)"),
        act("Testing.", bash("c2", "pytest -q"), reasoning=THOUGHT + " (3)"),
        tool("c2", "3 passed in 0.1s"),
        assistant(ANSWER, reasoning=THOUGHT + " (4)"),
    ]
    result = compressed(messages)
    originals = result.editor.originals
    owner = {p: n for n in result.editor.nodes for p in n.landing}
    assert all(owner[o.position].changed for o in originals if o.has_reasoning)
    text = texts(result)
    assert "PRIVATE-CHAIN" not in text and "<reasoning>" not in text
    last = result.editor.nodes[-1]
    assert last.changed and last.text == ANSWER and last.landing == (6,)  # its text alone
    assert "reasoning" not in json.dumps(result.editor.as_data())


def test_every_image_reference_of_the_sources_is_kept() -> None:
    shot = {"role": "user", "content": [{"type": "text", "text": COMPLETING}, image("steer-shot")]}
    messages = [
        user(REQUEST, "request-shot"),
        act("Rendering.", bash("c1", "python render.py")),
        tool("c1", "rendered\n" * 40),
        shot,
        assistant("Here is the render.", images=["render-shot"]),
        act("Checking.", bash("c2", "pytest -q")),
        tool("c2", "1 passed in 0.1s"),
        assistant(ANSWER, reasoning="done"),
    ]
    result = compressed(messages)
    text = texts(result)
    markers = [m for o in result.editor.originals for m in o.image_markers]
    assert len(markers) == 3
    for marker in markers:
        assert marker in text
    assert result.editor.nodes[0].text.startswith(REQUEST + "\n" + markers[0])


# --------------------------------------------------------------------------- determinism, no-ops


def test_the_same_turn_gives_byte_identical_output() -> None:
    messages = long_turn(12)
    runs = [compressed(messages) for _ in range(2)]
    dumps = [json.dumps(r.editor.as_data(), sort_keys=True) for r in runs]
    assert dumps[0] == dumps[1]
    assert [n.text for n in runs[0].editor.nodes] == [n.text for n in runs[1].editor.nodes]
    assert (runs[0].tokens_before, runs[0].tokens_after) == (
        runs[1].tokens_before,
        runs[1].tokens_after,
    )


@pytest.mark.parametrize(
    "messages",
    [
        [user("What is 2 + 2?"), assistant("4.")],
        [
            user("List the files."),
            act("Listing.", bash("c1", "ls")),
            tool("c1", "a.py"),
            assistant("a.py"),
        ],
        [user("Hello?")],
        [
            user("Run it."),
            act("Running.", bash("c1", "make")),
            tool("c1", "ok"),
            user("Now deploy to staging."),
        ],
    ],
)
def test_a_compact_or_unsuitable_turn_has_nothing_to_gain(messages: list[dict[str, Any]]) -> None:
    assert compress_turn(recorded(messages)) is None


# --------------------------------------------------------------------------- properties

_REASONING = re.compile(r"think t\d+")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=turns())
def test_any_turn_compresses_to_a_valid_turn_without_raw_reasoning(
    turn: list[dict[str, Any]],
) -> None:
    session = one_turn(turn)
    nodes = turn_nodes(session, 1)
    result = compress_turn(nodes)
    event("compressed" if result is not None else "nothing to gain")
    if result is None:
        return
    ed = result.editor
    assert ed.final_problems() == ()
    assert result.tokens_after < result.tokens_before
    assert result.nodes_after == len(ed.nodes) <= len(nodes)
    for n in ed.nodes:
        if n.changed:
            assert not _REASONING.search(n.text) and "<reasoning>" not in n.text
    assert compress_turn(nodes) is not None
    assert [n.text for n in compress_turn(nodes).editor.nodes] == [n.text for n in ed.nodes]  # type: ignore[union-attr]
    land(session, ed)
    messages = session.messages()
    assert orphan_results(messages) == []
    assert not any("reasoning_content" in m for m in messages)


# ------------------------------------------------------------------ where the originals are

HEADER = re.compile(r"^\[Condensed work: (\d+) messages?(?:, (\d+) tool calls?)?(?:; (.*))?\]$")


def test_the_condensed_node_names_the_read_of_the_turns_originals() -> None:
    nodes = turn_nodes(one_turn(long_turn(5)), 1)
    assert {n.turn for n in nodes} == {1}
    result = compress_turn(nodes)
    assert result is not None
    work = result.editor.nodes[1].text
    first = work.split("\n", 1)[0]
    m = HEADER.match(first)
    assert m is not None, first
    assert m[3] == "originals: history_read(turn=1)"
    assert work.count("history_read(") == 1  # named once, in the header


def test_the_turn_number_is_the_nodes_own_and_the_rewrite_stays_deterministic() -> None:
    with Dashr.create(in_memory=True) as d:
        for k in range(3):
            d.session.begin_turn()
            d.record_openai(work_turn(k))  # its own call ids
            d.session.end_turn()
        for turn in (1, 2, 3):
            nodes = turn_nodes(d.session, turn)
            first = compress_turn(nodes)
            again = compress_turn(turn_nodes(d.session, turn))
            assert first is not None and again is not None
            header = first.editor.nodes[1].text.split("\n", 1)[0]
            assert header.endswith(f"; originals: history_read(turn={turn})]")
            assert [n.text for n in first.editor.nodes] == [n.text for n in again.editor.nodes]


def test_nodes_that_know_no_turn_get_no_read_hint() -> None:
    """Nodes built without a session turn (``TurnNode.turn`` None) keep the bare header."""
    nodes = tuple(replace(n, turn=None) for n in recorded(long_turn(5)))
    result = compress_turn(nodes)
    assert result is not None
    header = result.editor.nodes[1].text.split("\n", 1)[0]
    m = HEADER.match(header)
    assert m is not None and m[3] is None and "history_read" not in header
