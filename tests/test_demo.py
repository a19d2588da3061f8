"""The deterministic demo session generator (dashr_ext._demo)."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from dashr_ext._demo import (
    DEMO_SYSTEM_PROMPT,
    DEMO_TOOLS,
    MIN_STEPS_PER_TURN,
    builder,
    demo_facts,
    demo_messages,
)
from dashr_ext._formats.openai import to_openai
from dashr_ext._session import Session

EARLY_FACTS = ("error", "secret_value", "commit", "magic_number")
CONFIGS: list[dict[str, int]] = [
    {},
    {"seed": 0},
    {"seed": 123},
    {"turns": 1},
    {"turns": 6, "seed": 3},
    {"steps_per_turn": MIN_STEPS_PER_TURN},
    {"steps_per_turn": 20, "seed": 11},
    {"output_chars": 200},
    {"output_chars": 6000},
]


def config_id(kwargs: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"


def text_of(message: dict[str, Any]) -> str:
    """Everything a message carries as text: content plus tool-call arguments."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        parts.append(call["function"]["arguments"])
        parts.append(json.dumps(json.loads(call["function"]["arguments"]), ensure_ascii=False))
        parts.extend(str(v) for v in json.loads(call["function"]["arguments"]).values())
    return "\n".join(parts)


def turns_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The conversation after the system message, split at each user message."""
    turns: list[list[dict[str, Any]]] = []
    for m in messages[1:]:
        if m["role"] == "user":
            turns.append([])
        turns[-1].append(m)
    return turns


def step_message(messages: list[dict[str, Any]], call_id: str, role: str) -> dict[str, Any]:
    """The assistant message that made ``call_id`` or the tool message answering it."""
    for m in messages:
        if role == "tool" and m.get("tool_call_id") == call_id:
            return m
        if role == "assistant" and any(c["id"] == call_id for c in m.get("tool_calls") or []):
            return m
    raise AssertionError(f"no {role} message for {call_id}")


def structure(messages: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...], str | None]]:
    return [
        (m["role"], tuple(c["id"] for c in m.get("tool_calls") or []), m.get("tool_call_id"))
        for m in messages
    ]


def total_chars(messages: list[dict[str, Any]]) -> int:
    return sum(
        len(m.get("content") or "")
        + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls") or [])
        for m in messages
    )


# --------------------------------------------------------------------------- determinism


def test_same_arguments_give_identical_sessions() -> None:
    assert demo_messages() == demo_messages()
    kwargs = {"turns": 5, "steps_per_turn": 15, "seed": 42, "output_chars": 2500}
    assert demo_messages(**kwargs) == demo_messages(**kwargs)


@pytest.mark.parametrize("steps_per_turn", [12, 20])
def test_a_different_seed_changes_content_not_structure(steps_per_turn: int) -> None:
    a = demo_messages(seed=7, steps_per_turn=steps_per_turn)
    b = demo_messages(seed=8, steps_per_turn=steps_per_turn)
    assert a != b
    assert structure(a) == structure(b)
    assert [m["content"] for m in a if m["role"] == "user"] == [
        m["content"] for m in b if m["role"] == "user"
    ]


def test_the_result_is_a_fresh_list_each_time() -> None:
    first = demo_messages()
    first[1]["content"] = "changed"
    assert demo_messages()[1]["content"] != "changed"


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("kwargs", CONFIGS, ids=config_id)
def test_messages_form_a_valid_openai_conversation(kwargs: dict[str, int]) -> None:
    turns = kwargs.get("turns", 3)
    steps = kwargs.get("steps_per_turn", 12)
    messages = demo_messages(**kwargs)
    assert messages[0] == {"role": "system", "content": DEMO_SYSTEM_PROMPT}
    assert messages[1]["role"] == "user"
    assert len(messages) == 1 + turns * (2 + 2 * steps)

    answered: dict[str, int] = {}
    pending: list[str] = []
    previous = "system"
    for i, m in enumerate(messages[1:], 1):
        role = m["role"]
        if pending:
            assert role == "tool", f"message {i}: a {role} message while calls are unanswered"
        if role == "user":
            assert previous in {"system", "assistant"}
            assert isinstance(m["content"], str) and m["content"]
        elif role == "assistant":
            assert previous in {"user", "tool"}
            assert isinstance(m["content"], str) and m["content"]
            calls = m.get("tool_calls")
            if calls is not None:
                assert len(calls) == 1
                pending = [c["id"] for c in calls]
        else:
            assert role == "tool" and previous in {"assistant", "tool"}
            assert m["tool_call_id"] in pending
            pending.remove(m["tool_call_id"])
            answered[m["tool_call_id"]] = answered.get(m["tool_call_id"], 0) + 1
            assert set(m) == {"role", "tool_call_id", "content"}
            assert isinstance(m["content"], str) and m["content"]
        previous = role
    assert not pending
    assert set(answered.values()) == {1}

    for t, turn in enumerate(turns_of(messages), 1):
        assert turn[0]["role"] == "user"
        closing = turn[-1]
        assert closing["role"] == "assistant" and "tool_calls" not in closing
        assert closing["content"].strip()
        ids = [c["id"] for m in turn for c in m.get("tool_calls") or []]
        assert ids == [f"call_{t}_{s}" for s in range(1, steps + 1)]
        assert ids == list(answered)[(t - 1) * steps : t * steps]


def test_tool_calls_use_the_declared_tools_with_json_string_arguments() -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in DEMO_TOOLS}
    assert set(schemas) == {"bash", "read_file", "write_file", "run_cell"}
    assert all(t["type"] == "function" for t in DEMO_TOOLS)
    assert schemas["write_file"]["required"] == ["path", "content"]
    used: set[str] = set()
    for kwargs in CONFIGS:
        for m in demo_messages(**kwargs):
            for call in m.get("tool_calls") or []:
                assert call["type"] == "function"
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                assert isinstance(arguments, str)
                args = json.loads(arguments)
                assert set(args) == set(schemas[name]["required"])
                assert all(isinstance(v, str) and v for v in args.values())
                used.add(name)
    assert used == set(schemas)
    assert {
        c["function"]["name"] for m in demo_messages() for c in m.get("tool_calls") or []
    } == set(schemas)


def test_the_session_is_plain_json_data() -> None:
    messages = demo_messages(turns=4)
    assert json.loads(json.dumps(messages)) == messages
    assert json.loads(json.dumps(DEMO_TOOLS)) == DEMO_TOOLS


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"turns": 0}, "turns"),
        ({"steps_per_turn": MIN_STEPS_PER_TURN - 1}, "steps_per_turn"),
        ({"output_chars": 10}, "output_chars"),
        ({"seed": "7"}, "seed"),
        ({"turns": True}, "turns"),
    ],
)
def test_bad_arguments_are_rejected_with_the_field_name(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        demo_messages(**kwargs)


# --------------------------------------------------------------------------- content


def test_the_session_reads_like_the_documented_story() -> None:
    messages = demo_messages()
    first, _, third = turns_of(messages)
    assert first[0]["content"].startswith("Fix the failing retry tests in tests/test_retry.py")
    commands = [
        json.loads(c["function"]["arguments"]).get("command", "")
        for m in first
        for c in m.get("tool_calls") or []
    ]
    assert any(c.startswith("ls -R") for c in commands)
    assert any(c.startswith("grep -rn") for c in commands)
    assert any("pytest" in c for c in commands)
    assert any(c.startswith("sed -i") for c in commands)
    joined = "\n".join(text_of(m) for m in messages)
    for literal in ("RetryPolicy", "compute_backoff", "250 ms", "30 s", "8000 ms"):
        assert literal in joined
    assert 'open("reports/retry_report.md", "w")' in "\n".join(text_of(m) for m in third)
    assert "xxxx" not in joined.lower()


@pytest.mark.parametrize("steps_per_turn", [12, 13, 25])
def test_every_planted_fact_is_where_the_docstring_says(steps_per_turn: int) -> None:
    facts = demo_facts()
    assert set(facts) == {
        "error",
        "file",
        "secret_value",
        "commit",
        "magic_number",
        "config_key",
        "correction",
        "report_path",
    }
    assert all(isinstance(v, str) and v for v in facts.values())
    messages = demo_messages(steps_per_turn=steps_per_turn)

    failing = step_message(messages, "call_1_2", "tool")["content"]
    assert f"E   {facts['error']}" in failing
    assert facts["file"] in failing
    assert re.search(r"^src/payments/retry\.py:\d+: in retry_call$", failing, re.MULTILINE)
    assert re.search(r"^tests/test_retry\.py:\d+: in test_gives_up_after_budget$", failing, re.M)
    assert facts["secret_value"] in step_message(messages, "call_1_6", "tool")["content"]
    assert facts["commit"] in step_message(messages, "call_1_7", "tool")["content"]
    assert facts["magic_number"] in step_message(messages, "call_1_8", "tool")["content"]

    _, second, _ = turns_of(messages)
    assert second[0] == {"role": "user", "content": facts["correction"]}
    assert facts["config_key"] in facts["correction"]
    assert "max_attempts" in facts["correction"] and "RetryPolicy" in facts["correction"]

    report_call = step_message(messages, "call_3_7", "assistant")["tool_calls"][0]["function"]
    assert report_call["name"] == "run_cell"
    assert facts["report_path"] in json.loads(report_call["arguments"])["code"]


def test_the_traceback_line_numbers_match_the_file_that_was_read() -> None:
    messages = demo_messages()
    failing = step_message(messages, "call_1_2", "tool")["content"]
    match = re.search(r"^src/payments/retry\.py:(\d+): in retry_call\n(.*)$", failing, re.M)
    assert match is not None
    line, source = int(match.group(1)), match.group(2).strip()
    listing = step_message(messages, "call_1_4", "tool")["content"].splitlines()
    number, _, text = listing[line - 1].partition("\t")
    assert (int(number), text.strip()) == (line, source)


@pytest.mark.parametrize("kwargs", CONFIGS, ids=config_id)
def test_early_facts_appear_only_in_the_first_turn(kwargs: dict[str, int]) -> None:
    facts = demo_facts()
    messages = demo_messages(**kwargs)
    turns = turns_of(messages)
    first = "\n".join(text_of(m) for m in turns[0])
    later = "\n".join(text_of(m) for turn in turns[1:] for m in turn)
    assert facts["config_key"] not in first
    assert facts["correction"] not in first
    for key in EARLY_FACTS:
        assert facts[key] in first, key
        assert facts[key] not in later, key
    assert facts["file"] in first
    if len(turns) >= 2:
        assert facts["config_key"] in later
        assert sum(text_of(m).count(facts["correction"]) for m in messages) == 1
        assert facts["file"] in later
    if len(turns) >= 3:
        assert facts["report_path"] in "\n".join(text_of(m) for m in turns[2])
    for key in EARLY_FACTS:
        hits = [i for i, m in enumerate(messages) if facts[key] in text_of(m)]
        assert hits and all(messages[i]["role"] == "tool" for i in hits), key


def test_demo_facts_is_stable_and_returns_a_copy() -> None:
    facts = demo_facts()
    facts["error"] = "changed"
    assert demo_facts()["error"] == "AssertionError: expected retry budget 3, got 5"
    assert demo_facts()["config_key"] == "retry.max_attempts"
    assert demo_facts()["file"] == "src/payments/retry.py"


# --------------------------------------------------------------------------- size


def test_default_size_is_in_the_documented_range() -> None:
    assert 60_000 <= total_chars(demo_messages()) <= 120_000


def test_size_grows_with_output_chars_and_turns() -> None:
    small = total_chars(demo_messages(output_chars=800))
    default = total_chars(demo_messages())
    large = total_chars(demo_messages(output_chars=4000))
    assert small < default < large
    assert large > 1.5 * default
    assert total_chars(demo_messages(turns=1)) < default < total_chars(demo_messages(turns=6))
    assert default < total_chars(demo_messages(steps_per_turn=20))


def test_tool_outputs_scale_with_output_chars() -> None:
    def outputs(chars: int) -> list[int]:
        return [len(m["content"]) for m in demo_messages(output_chars=chars) if m["role"] == "tool"]

    small, large = outputs(1000), outputs(5000)
    assert sum(large) > 2.5 * sum(small)
    assert sorted(small)[len(small) // 2] >= 500


# --------------------------------------------------------------------------- the session log


@pytest.mark.parametrize("kwargs", [{}, {"turns": 5, "steps_per_turn": 9, "seed": 2}])
def test_a_session_records_the_demo_and_derives_it_back(kwargs: dict[str, int]) -> None:
    messages = demo_messages(**kwargs)
    session = Session.create(in_memory=True)
    session.record_openai(messages)
    assert to_openai(session) == messages
    assert session.system_prompt == DEMO_SYSTEM_PROMPT
    assert len(session.turns) == kwargs.get("turns", 3)
    assert all(turn.reason == "completed" for turn in session.turns)
    steps = kwargs.get("steps_per_turn", 12)
    assert [len(turn.steps) for turn in session.turns] == [steps + 1] * len(session.turns)
    assert session.pending_tool_calls() == []


# --------------------------------------------------------------------------- the packaged data


def _templates_named_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["template"]} if isinstance(value.get("template"), str) else set()
        return found.union(*(_templates_named_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_templates_named_in(v) for v in value))
    return set()


def test_the_scenario_and_its_texts_load_as_package_resources() -> None:
    package = files("dashr_ext._demo")
    data = json.loads(package.joinpath("scenario.json").read_text(encoding="utf-8"))
    assert data["system_prompt"] == DEMO_SYSTEM_PROMPT
    assert list(data["tools"]) == [t["function"]["name"] for t in DEMO_TOOLS]
    assert data["facts"] == demo_facts()
    names = set(data["files"].values()) | _templates_named_in(data)
    assert {"retry_v1", "test_retry_v2", "docs_v2", "report"} <= names
    for name in names:
        text = package.joinpath("texts", f"{name}.txt").read_text(encoding="utf-8")
        assert text.strip(), name


def test_every_data_file_of_the_demo_package_is_declared_as_package_data() -> None:
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    assert "dashr_ext._demo" in config["setuptools"]["packages"]
    patterns = config["setuptools"]["package-data"]["dashr_ext._demo"]
    folder = root / "dashr_ext" / "_demo"
    data = [
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    ]
    assert "scenario.json" in data
    for name in data:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_multi_line_texts_are_stored_as_lists_of_lines_and_loaded_as_text() -> None:
    raw = json.loads(files("dashr_ext._demo").joinpath("scenario.json").read_text("utf-8"))
    stored = raw["turns"][2]["steps"][-1]["output"]
    assert stored["lines"][:2] == [" M docs/retry.md", " M {{file}}"]
    assert builder.scenario()["turns"][2]["steps"][-1]["output"] == "\n".join(stored["lines"])


def test_placeholders_fill_text_and_a_lone_one_stands_for_its_value() -> None:
    ctx = {"file": "src/a.py", "n": 3, "paths": ["x", "y"]}
    assert builder.render("cat {{file}} ({{n}} lines)", ctx) == "cat src/a.py (3 lines)"
    assert builder.render('f"{len(report)}" {x}', ctx) == 'f"{len(report)}" {x}'
    assert builder.resolve({"pytest": "{{paths}}", "say": ["{{file}}!"]}, ctx) == {
        "pytest": ["x", "y"],
        "say": ["src/a.py!"],
    }
    with pytest.raises(KeyError, match="missing"):
        builder.render("{{missing}}", ctx)


def test_fit_drops_optional_steps_from_the_end_or_inserts_fillers_at_the_marked_step() -> None:
    a, b, d = {"id": "a", "required": True}, {"id": "b"}, {"id": "d"}
    c = {"id": "c", "required": True, "fillers_before": True}
    assert builder.fit([a, b, c, d], 4) == [a, b, c, d]
    assert builder.fit([a, b, c, d], 3) == [a, b, c]
    assert builder.fit([a, b, c, d], 2) == [a, c]
    assert builder.fit([a, b, c, d], 6) == [a, b, None, None, c, d]
    assert builder.fit([a, b, d], 4) == [a, b, d, None]
