"""Dangling tool calls: a call left without a result is closed by a synthetic one (SPEC §6.5).

A newer user or assistant message closes the calls still waiting (reason ``superseded``), a
writer reopening a log closes the calls its last writer left waiting (reason ``reopened``),
and a real result recorded later takes the synthetic one's place. Logs written by other
tools may hold a call with no result and newer messages after it: such a call is abandoned
and blocks no cut. Either way balanced cuts exist again, so compaction brings the request
back under the trigger (the issue's small case grew 15,402 → 15,752 tokens instead).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, load_corpus
from helpers import orphan_results, record_steps, tool_output

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._events import Event, EventSpec, Replace, block_to_json
from dashr_ext._pairing import SYNTHETIC_SOURCE
from dashr_ext._session import Session
from dashr_ext.agent import Agent
from dashr_ext.errors import FormatError, SurfaceError
from dashr_ext.testing import ScriptedServer, answer

ROOT = Path(__file__).resolve().parents[1]
WINDOW = CompactionConfig(recency_window_tokens=3000, retain_tokens=600)
SUPERSEDED = "[no result recorded: a newer message arrived before this tool call returned"
REOPENED = "[no result recorded: the session was reopened while this tool call was still waiting"


# --------------------------------------------------------------------------- helpers


def call(call_id: str, name: str = "bash", **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None, *calls: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


TWO_CALLS = [
    user("Run the tests and show the diff."),
    assistant("Running both.", call("A", command="pytest -q"), call("B", command="git diff")),
    tool("A", "3 passed"),
    user("Stop, look at the README instead."),
]


def assert_valid_openai(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool call is answered by the tool messages right after its assistant message,
    and every tool message answers a call of the assistant message just before them."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"message {i}: a tool message with no call right before it"
        i += 1
        calls = [c["id"] for c in m.get("tool_calls") or []] if m["role"] == "assistant" else []
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        assert answered == calls, f"message {i}: calls {calls} answered by {answered}"


def synthetic_results(session: Session) -> list[Event]:
    return [
        e
        for e in session.events
        if e.type == "tool/result" and e.message.source_kind == SYNTHETIC_SOURCE
    ]


def unit_of(session: Session, seq: int) -> tuple[int, int]:
    """(start, end) surface positions of the unit holding ``seq``."""
    at = session.position(seq)
    [unit] = [u for u in session.units() if u.start <= at < u.end]
    return unit.start, unit.end


def step_of(session: Session, seq: int) -> tuple[int, int] | None:
    """(turn, step) whose range of seqs holds ``seq`` (a step implied by message order starts
    at its assistant message's seq, one marked in the log at its marker's)."""
    for turn in session.turns:
        for step in turn.steps:
            if step.start_seq <= seq and (step.end_seq is None or seq < step.end_seq):
                return turn.index, step.index
    return None


def message_spec(role: str, text: str, *calls: tuple[str, str]) -> EventSpec:
    types = {"user": "user/message", "assistant": "assistant/message"}
    source = {"kind": "model", "model": None} if role == "assistant" else {"kind": "user"}
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "tool-call", "id": c, "name": n, "arguments": "{}"} for c, n in calls]
    return EventSpec(
        types[role], {"message": {"role": role, "source": source, "content": content}}, "append"
    )


def result_spec(call_id: str, text: str, name: str = "bash") -> EventSpec:
    message = {
        "role": "tool",
        "source": {"kind": "tool"},
        "content": [{"type": "text", "text": text}],
        "toolCallId": call_id,
        "toolName": name,
        "isError": False,
    }
    return EventSpec("tool/result", {"message": message}, "append")


def replayed(path: Path) -> tuple[Any, ...]:
    """Everything a reader folds from the file: surface, messages, units, turns, pairing."""
    with Session.open(path, read_only=True) as s:
        return state(s)


def state(s: Session) -> tuple[Any, ...]:
    return (
        tuple(s.surface),
        json.dumps(s.messages()),
        s.units(),
        s.turns,
        s.pending_tool_calls(),
        s.interrupted_tool_calls(),
        s.balanced_cuts(),
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.jsonl"


# --------------------------------------------------------------------------- 1. arrival


def check_superseded_b(s: Session, new: Sequence[Event]) -> Event:
    """The batch closed call B with a synthetic result right before the newer user message."""
    surface = [e for e in new if e.is_surface]
    assert [(e.type, e.message.tool_call_id) for e in surface] == [
        ("user/message", None),
        ("assistant/message", None),
        ("tool/result", "A"),
        ("tool/result", "B"),
        ("user/message", None),
    ]
    synth = surface[3]
    assert synth.surface_op == "append"
    assert synth.message.source == {"kind": SYNTHETIC_SOURCE, "reason": "superseded"}
    assert synth.message.is_error is True
    assert synth.message.tool_name == "bash"
    assert synth.message.text.startswith(SUPERSEDED)
    assert s.tool_result_seq("B") == synth.seq
    assert s.pending_tool_calls() == []
    assert s.interrupted_tool_calls() == ["B"]
    # It belongs to its call's step: the call, both results are one unit, the new user
    # message another.
    call_seq = s.tool_call_seq("B")
    assert call_seq is not None
    assert step_of(s, synth.seq) == step_of(s, call_seq) == (1, 1)
    assert unit_of(s, synth.seq) == unit_of(s, call_seq) == (1, 4)
    assert unit_of(s, surface[4].seq) == (4, 5)
    messages = s.messages()
    assert_valid_openai(messages)
    assert messages[-2] == {"role": "tool", "tool_call_id": "B", "content": synth.message.text}
    cuts = s.balanced_cuts()
    assert cuts == [True, True, False, False, True, True]
    assert cuts[-1]
    return synth


@pytest.mark.parametrize("batched", [True, False], ids=["one-batch", "one-by-one"])
def test_a_newer_user_message_closes_the_unanswered_call_first(
    path: Path, clock: Callable[[], int], batched: bool
) -> None:
    with Session.create(path, clock=clock) as s:
        if batched:
            new = s.record_openai(TWO_CALLS)
        else:
            new = [e for m in TWO_CALLS for e in s.record_openai(m)]
        synth = check_superseded_b(s, new)
        # The event order: the synthetic result comes after A's result and before the markers
        # and the message its arrival implies.
        kinds = [(e.type, e.message.tool_call_id if e.is_surface else None) for e in new]
        assert kinds == [
            ("turn/start", None),
            ("user/message", None),
            ("step/start", None),
            ("assistant/message", None),
            ("tool/result", "A"),
            ("tool/result", "B"),
            ("step/end", None),
            ("turn/end", None),
            ("turn/start", None),
            ("user/message", None),
        ]
        assert new[7].data == {"turn": 1, "reason": "interrupted", "inferred": True}
        live = state(s)
    assert replayed(path) == live
    assert synth.to_json() == json.loads(path.read_text().splitlines()[synth.seq])


def test_a_newer_assistant_message_closes_the_unanswered_call_too(
    path: Path, clock: Callable[[], int]
) -> None:
    with Session.create(path, clock=clock) as s:
        s.record_openai(TWO_CALLS[:3])
        new = s.record_openai(assistant("Done."))
        [synth, reply] = [e for e in new if e.is_surface]
        assert (synth.type, synth.message.tool_call_id) == ("tool/result", "B")
        assert new[0] is synth  # before the markers the new message implies
        assert synth.message.source_kind == SYNTHETIC_SOURCE
        assert reply.type == "assistant/message"
        assert step_of(s, synth.seq) == (1, 1)
        assert step_of(s, reply.seq) == (1, 2)
        assert_valid_openai(s.messages())
        assert all(s.balanced_cuts()[k] for k in (0, 1, 4, 5))


def test_explicit_event_specs_without_markers(path: Path, clock: Callable[[], int]) -> None:
    with Session.create(path, clock=clock) as s:
        new = s.append(
            [
                message_spec("user", "Run the tests and show the diff."),
                message_spec("assistant", "Running both.", ("A", "bash"), ("B", "bash")),
                result_spec("A", "3 passed"),
                message_spec("user", "Stop, look at the README instead."),
            ]
        )
        assert [e.is_surface for e in new] == [True] * 5  # no markers: turns come from order
        check_superseded_b(s, new)
        live = state(s)
    assert replayed(path) == live


@pytest.mark.parametrize("then", ["same-step", "next-step", "next-turn"])
def test_explicit_turn_and_step_markers(path: Path, clock: Callable[[], int], then: str) -> None:
    """The harness marks steps itself. Wherever the newer message lands (the same step, a
    new step, a new turn), the synthetic result is one unit with its call."""
    with Session.create(path, clock=clock) as s:
        s.begin_turn()
        s.record_openai(user("Run the tests and show the diff."))
        s.begin_step()
        s.record_openai(TWO_CALLS[1:3])
        if then == "next-step":
            s.end_step()
            s.begin_step()
            newer = assistant("Looking at the README.")
        elif then == "next-turn":
            s.end_turn("interrupted")
            s.begin_turn()
            newer = user("Look at the README instead.")
        else:
            newer = user("Look at the README instead.")
        [synth, reply] = s.record_openai(newer)
        assert synth.message.tool_call_id == "B"
        assert synth.message.source == {"kind": SYNTHETIC_SOURCE, "reason": "superseded"}
        call_seq = s.tool_call_seq("B")
        assert call_seq is not None
        if then == "same-step":  # the harness put the newer message in the same step
            assert unit_of(s, synth.seq) == unit_of(s, reply.seq) == (1, 5)
        else:
            assert unit_of(s, synth.seq) == unit_of(s, call_seq) == (1, 4)
            assert unit_of(s, reply.seq) == (4, 5)
            assert s.balanced_cuts()[4]  # the step before the newer message can be compacted
        if then == "next-step":
            assert s.executing_seqs() == {reply.seq}
        assert_valid_openai(s.messages())
        live = state(s)
    assert replayed(path) == live


# --------------------------------------------------------------------------- 2. late result


def late_result(s: Session, how: str) -> Event:
    if how == "append_tool_result":
        return s.append_tool_result("B", "diff --git a/x b/x")
    [event] = s.record_openai(tool("B", "diff --git a/x b/x"))
    return event


@pytest.mark.parametrize("how", ["append_tool_result", "record_openai"])
def test_a_late_real_result_takes_the_synthetic_ones_place(
    path: Path, clock: Callable[[], int], how: str
) -> None:
    with Session.create(path, clock=clock) as s:
        synth = check_superseded_b(s, s.record_openai(TWO_CALLS))
        at = s.position(synth.seq)
        units_before, cuts_before = s.units(), s.balanced_cuts()
        real = late_result(s, how)
        assert real.surface_op == Replace(synth.seq, synth.seq)
        assert real.source_event_seqs == (synth.seq,)
        assert real.message.source_kind == "tool" and real.message.is_error is False
        assert s.position(real.seq) == at
        assert not s.is_current(synth.seq)
        assert s.event(synth.seq) is synth  # shadowed, still in the log
        assert s.tool_result_seq("B") == real.seq
        assert s.interrupted_tool_calls() == [] and s.pending_tool_calls() == []
        assert s.units() == units_before and s.balanced_cuts() == cuts_before
        assert unit_of(s, real.seq) == (1, 4)
        messages = s.messages()
        assert_valid_openai(messages)
        assert messages[-2] == {
            "role": "tool",
            "tool_call_id": "B",
            "content": "diff --git a/x b/x",
        }
        live = state(s)
    assert replayed(path) == live
    with Session.open(path) as again:  # a writer reopening it finds nothing waiting
        assert state(again) == live


# --------------------------------------------------------------------------- 3. replay


def test_a_reopened_session_with_synthetic_results_emits_identical_messages(
    path: Path, clock: Callable[[], int]
) -> None:
    config = WINDOW
    with Dashr.create(path, config=config, clock=clock) as d:
        d.record_openai(TWO_CALLS)
        d.record_openai([assistant("Reading.", call("C", command="cat README")), tool("C", "# x")])
        d.record_openai(assistant("And more.", call("D", command="ls")))
        d.record_openai(user("Never mind the listing."))  # closes D
        assert [e.message.tool_call_id for e in synthetic_results(d.session)] == ["B", "D"]
        live = json.dumps(d.session.messages()).encode()
        surface = d.session.surface
    raw = path.read_bytes()
    for read_only in (True, False):
        with Dashr.open(path, config=config, read_only=read_only, clock=clock) as again:
            assert json.dumps(again.session.messages()).encode() == live
            assert again.session.surface == surface
    assert path.read_bytes() == raw  # nothing was waiting: the writer appended nothing


# --------------------------------------------------------------------------- 4. crash


CHILD = r"""
import sys
from pathlib import Path

from dashr_ext import CompactionConfig, Dashr
from dashr_ext.agent import Agent
from dashr_ext.testing import ScriptedServer, call_run_cell

path, ready, window, retain = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def batch_cell(i):
    return (
        "import random\n"
        f"rng = random.Random({i})\n"
        f"for k in range(30):\n"
        f"    print(f'batch {i} row {{k:02d}} value={{rng.randint(1000, 9999)}}')"
    )


blocking = f"open({ready!r}, 'w').write('running')\nimport time\ntime.sleep(600)"
config = CompactionConfig(recency_window_tokens=window, retain_tokens=retain, auto=False)
with ScriptedServer() as server:
    server.script(*(call_run_cell(batch_cell(i)) for i in range(10)), call_run_cell(blocking))
    d = Dashr.create(path, config=config, session_id="crashed-mid-call")
    Agent(d, base_url=server.base_url, model="scripted-model").run_turn("Load the batches.")
raise SystemExit("the blocking cell returned")
"""

CRASH_WINDOW, CRASH_RETAIN = 3000, 600


def wait_for(ready: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    """Wait until ``ready`` exists; fail with the child's output if it ended first."""
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"{what} ended ({proc.returncode}) before blocking:\n{out!r}\n{err!r}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what} never reached the blocking cell")
        time.sleep(0.02)


def check_reopened_after_crash(
    path: Path, config: CompactionConfig, server: ScriptedServer
) -> None:
    """Reopen a log whose writer was killed inside run_cell; compact; go on; recall."""
    raw = path.read_bytes()
    with Session.open(path, read_only=True) as before:
        [waiting] = before.pending_tool_calls()
        last = before.event(before.surface[-1])
        assert last.type == "assistant/message"
        assert [c.id for c in last.message.tool_calls] == [waiting]
        assert before.open_step is not None  # the step was executing when the process died
        surface_before = before.surface
    with Dashr.open(path, config=config) as d:
        s = d.session
        assert path.read_bytes().startswith(raw)  # appended after, nothing rewritten
        [synth] = synthetic_results(s)
        assert synth.seq == len(raw.splitlines())  # the only new event
        assert len(s) == synth.seq + 1
        assert synth.message.tool_call_id == waiting
        assert synth.message.tool_name == "run_cell"
        assert synth.message.source == {"kind": SYNTHETIC_SOURCE, "reason": "reopened"}
        assert synth.message.is_error is True
        assert synth.message.text.startswith(REOPENED)
        assert s.surface == (*surface_before, synth.seq)
        assert s.pending_tool_calls() == [] and s.interrupted_tool_calls() == [waiting]
        assert s.balanced_cuts()[-1]
        trigger = d.config.trigger_tokens
        before_tokens = d.measure().total
        assert before_tokens > trigger
        result = d.compact()
        assert result is not None
        after_tokens = d.measure().total
        assert after_tokens < trigger
        assert result.tokens_before == before_tokens
        assert s.is_current(synth.seq)  # the crashed step is the newest unit: kept
        messages = s.messages()
        assert_valid_openai(messages)
        assert orphan_results(messages) == []
        shown = [m for m in messages if m.get("tool_call_id") == synth.message.tool_call_id]
        assert shown == [{"role": "tool", "tool_call_id": waiting, "content": synth.message.text}]
        # Recall leaves out the step that was executing (the model sees it in the request);
        # the next turn ends that step, and recall then shows the synthetic result.
        assert s.executing_seqs() >= {synth.seq}
        server.script(answer("Starting over."))
        agent = Agent(d, base_url=server.base_url, model="scripted-model")
        assert agent.run_turn("Start over.") == "Starting over."
        assert [t.reason for t in s.turns] == ["interrupted", "completed"]
        assert s.event(s.surface[s.position(synth.seq)]) is synth
        assert_valid_openai(server.model_requests[-1].messages)
        read = d.history_read(seq=synth.seq)
        assert f"Tool result (seq {synth.seq}, error)" in read
        assert REOPENED in read
        found = d.history_search("no result recorded")
        assert f"seq {synth.seq}" in found
        live = state(s)
        grown = path.read_bytes()
    assert replayed(path) == live
    with Dashr.open(path, config=config) as again:  # nothing waits any more: nothing appended
        assert state(again.session) == live
    assert path.read_bytes() == grown


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
def test_a_process_killed_inside_run_cell_leaves_a_call_reopening_closes(
    tmp_path: Path, server: ScriptedServer
) -> None:
    path, ready = tmp_path / "crashed.jsonl", tmp_path / "ready"
    args = [str(path), str(ready), str(CRASH_WINDOW), str(CRASH_RETAIN)]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(ready, proc, "the child process")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    config = CompactionConfig(recency_window_tokens=CRASH_WINDOW, retain_tokens=CRASH_RETAIN)
    check_reopened_after_crash(path, config, server)


KERNEL_CELL = r"""
from dashr_ext import CompactionConfig, Dashr
from dashr_ext.agent import Agent
from dashr_ext.testing import ScriptedServer, call_run_cell

def batch_cell(i):
    return (
        "import random\n"
        f"rng = random.Random({i})\n"
        f"for k in range(30):\n"
        f"    print(f'batch {i} row {{k:02d}} value={{rng.randint(1000, 9999)}}')"
    )

blocking = f"open({READY!r}, 'w').write('running')\nimport time\ntime.sleep(600)"
config = CompactionConfig(recency_window_tokens=WINDOW, retain_tokens=RETAIN, auto=False)
server = ScriptedServer().__enter__()
server.script(*(call_run_cell(batch_cell(i)) for i in range(10)), call_run_cell(blocking))
d = Dashr.create(PATH, config=config, session_id="kernel-killed-mid-call")
Agent(d, base_url=server.base_url, model="scripted-model", shell=get_ipython()).run_turn("Go.")
"""


@pytest.mark.slow
def test_a_kernel_killed_inside_run_cell_leaves_a_call_reopening_closes(
    tmp_path: Path, server: ScriptedServer
) -> None:
    from helpers import ThisInterpreter
    from jupyter_client.manager import KernelManager

    path, ready = tmp_path / "kernel.jsonl", tmp_path / "ready"
    manager = KernelManager(kernel_name="tests", kernel_spec_manager=ThisInterpreter())
    manager.start_kernel(env={**child_env(), "DASHR_HOME": str(tmp_path / "home")})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        names = f"PATH, READY, WINDOW, RETAIN = {str(path)!r}, {str(ready)!r}, "
        names += f"{CRASH_WINDOW}, {CRASH_RETAIN}\n"
        client.execute(names + KERNEL_CELL)
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert manager.is_alive(), "the kernel died before the blocking cell"
            if time.monotonic() > deadline:
                pytest.fail("the kernel never reached the blocking cell")
            time.sleep(0.02)
        manager.signal_kernel(signal.SIGKILL)
        while manager.is_alive():
            time.sleep(0.02)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    config = CompactionConfig(recency_window_tokens=CRASH_WINDOW, retain_tokens=CRASH_RETAIN)
    check_reopened_after_crash(path, config, server)


# --------------------------------------------------------------------------- 5. imports


def import_and_reopen(
    path: Path, messages: Sequence[Mapping[str, Any]], config: CompactionConfig, tools: Any = None
) -> None:
    """Import ``messages`` (ending in an unanswered call) as a harness would, reopen, compact."""
    last = messages[-1]
    assert last["role"] == "assistant" and last.get("tool_calls")
    with Dashr.create(path, config=config, tools=tools, durability="flush") as d:
        d.record_openai(list(messages))
        assert d.session.pending_tool_calls() == [c["id"] for c in last["tool_calls"]]
    check_reopened_import(path, config, [c["id"] for c in last["tool_calls"]])


def check_reopened_import(path: Path, config: CompactionConfig, waiting: list[str]) -> None:
    raw = path.read_bytes()
    with Dashr.open(path, config=config, durability="flush") as d:
        s = d.session
        new = s.events[len(raw.splitlines()) :]
        assert [(e.type, e.message.tool_call_id) for e in new] == [
            ("tool/result", c) for c in waiting
        ]
        assert all(
            e.message.source == {"kind": SYNTHETIC_SOURCE, "reason": "reopened"} for e in new
        )
        assert s.pending_tool_calls() == [] and s.balanced_cuts()[-1]
        trigger = d.config.trigger_tokens
        assert d.measure().total > trigger
        assert d.compact() is not None
        assert d.measure().total < trigger
        messages = s.messages()
        assert_valid_openai(messages)
        assert orphan_results(messages) == []
        live = state(s)
    assert replayed(path) == live


def imported_steps(steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [user("Port the retry module to the new client.")]
    for i in range(steps):
        out.append(
            assistant(f"Step {i}: reading file {i}.", call(f"call_{i}", command=f"cat m{i}.py"))
        )
        out.append(tool(f"call_{i}", tool_output(i, 400)))
    out.append(assistant("Writing the patch.", call("last", command="apply patch")))
    return out


def test_an_imported_session_ending_in_an_unanswered_call(path: Path) -> None:
    import_and_reopen(path, imported_steps(40), WINDOW)


CORPUS_FILES = [
    "swe-gemini/django__django-11087.json",
    "swe-gym-openhands/getmoto__moto-6387_0.json",
]


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_FILES)
def test_a_corpus_session_imported_up_to_an_unanswered_call(path: Path, name: str) -> None:
    source = CORPUS / name
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    data = load_corpus(source)
    messages = data["messages"]
    last_call = max(
        i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")
    )
    config = CompactionConfig(recency_window_tokens=8000, retain_tokens=1500)
    import_and_reopen(path, messages[: last_call + 1], config, tools=data["tools"])


# --------------------------------------------------------------------------- 6. request grew


def test_a_call_left_dangling_early_no_longer_stops_compaction(
    path: Path, clock: Callable[[], int]
) -> None:
    """The issue's case: a call without a result early in the session, lots of history
    after it. Every request stays under the trigger and the pass shadows the call."""
    with Dashr.create(path, config=WINDOW, clock=clock) as d:
        d.record_openai(TWO_CALLS)
        dangling = d.session.tool_call_seq("B")
        assert dangling is not None
        peaks = []
        for i in range(40):
            record_steps(d, 1, 400, first=i)
            d.request_messages()
            peaks.append(d.measure().total)
        trigger = d.config.trigger_tokens
        assert d.checkpoints(), "no pass ever ran"
        assert max(peaks) <= trigger  # a pass runs once a request would exceed it
        assert not d.session.is_current(dangling)
        first = d.checkpoints()[0]
        assert dangling in first.shadowed_seqs
        assert_valid_openai(d.session.messages())
        # A manual pass on top brings it well under the trigger, the tail near the retain budget.
        d.compact()
        assert d.measure().total < 0.6 * trigger


# --------------------------------------------------------------------------- 7. foreign logs


T0 = 1_783_339_200_000


def foreign_line(seq: int, role: str, *content: dict[str, Any]) -> str:
    source = {"kind": "model", "model": None} if role == "assistant" else {"kind": "user"}
    message = {"id": f"m{seq}", "role": role, "source": source, "content": list(content)}
    event = {"seq": seq, "type": f"{role}/message", "time": T0 + seq, "surfaceOp": "append"}
    return json.dumps({**event, "data": {"message": message}})


def text_block(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def foreign_log(path: Path, fillers: int) -> None:
    """A log another tool wrote, by hand: call A (seq 2) gets no result, newer messages follow."""
    header = {"sessionId": "foreign", "createdAt": T0, "systemPrompt": "You help."}
    header |= {"tools": None, "format": "dashr/1"}
    call_a = {"type": "tool-call", "id": "A", "name": "bash", "arguments": '{"command":"pytest"}'}
    lines = [
        json.dumps({"seq": 0, "type": "session/header", "time": T0, "data": header}),
        foreign_line(1, "user", text_block("Run the tests.")),
        foreign_line(2, "assistant", call_a),
        foreign_line(3, "user", text_block("Forget the tests; explain the retry module.")),
    ]
    for i in range(fillers):
        lines.append(foreign_line(len(lines), "assistant", text_block(tool_output(i, 600))))
        lines.append(foreign_line(len(lines), "user", text_block(f"And part {i + 1}?")))
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")


def test_a_foreign_log_with_an_abandoned_call_replays_unchanged(path: Path) -> None:
    foreign_log(path, 20)
    raw = path.read_bytes()
    for read_only in (True, False):
        with Session.open(path, read_only=read_only) as s:
            assert len(s) == len(raw.splitlines())
            assert s.pending_tool_calls() == []  # abandoned: nothing waits for it
            assert s.interrupted_tool_calls() == []
            assert s.tool_result_seq("A") is None
            assert all(s.balanced_cuts())
            assert s.close_dangling_calls() == []
        assert path.read_bytes() == raw


def test_a_foreign_log_with_an_abandoned_call_compacts_under_the_trigger(path: Path) -> None:
    foreign_log(path, 20)
    raw = path.read_bytes()
    with Dashr.open(path, config=WINDOW) as d:
        s = d.session
        assert path.read_bytes() == raw  # no synthetic result at the end, far from its call
        assert synthetic_results(s) == []
        trigger = d.config.trigger_tokens
        assert d.measure().total > trigger
        result = d.compact()
        assert result is not None
        assert 2 in result.shadowed_seqs  # the abandoned call went with the head
        assert d.measure().total < trigger
        assert_valid_openai(s.messages())
        # Its result can no longer be recorded: it would sit apart from its call.
        grown = path.read_bytes()
        with pytest.raises(SurfaceError, match="'A'"):
            s.append_tool_result("A", "late")
        with pytest.raises(FormatError, match="tool_call_id"):
            s.record_openai(tool("A", "late"))
        assert path.read_bytes() == grown
        live = state(s)
    assert replayed(path) == live


def test_a_foreign_log_refuses_a_late_result_for_an_abandoned_call(path: Path) -> None:
    foreign_log(path, 2)
    raw = path.read_bytes()
    with Session.open(path) as s:
        refused(
            s,
            lambda: s.append_tool_result("A", "late"),
            SurfaceError,
            r"tool call 'A' \(seq 2\) was abandoned: newer messages followed it without a "
            "result.*calls awaiting a result: none",
        )
        refused(
            s,
            lambda: s.record_openai(tool("A", "late")),
            FormatError,
            "no tool call 'A' is awaiting a result",
        )
        # A newer message closes nothing: the abandoned call is not closed at the end.
        new = s.record_openai(user("Thanks."))
        assert [e.type for e in new if e.is_surface] == ["user/message"]
        assert synthetic_results(s) == []
        assert all(s.balanced_cuts())
    assert path.read_bytes().startswith(raw)


def test_pruning_an_abandoned_calls_message_in_place_keeps_it_abandoned(path: Path) -> None:
    foreign_log(path, 2)
    with Session.open(path) as s:
        old = s.event(2).message
        call_a = block_to_json(old.tool_calls[0])
        msg = {
            "role": "assistant",
            "source": old.source,
            "content": [text_block("[pruned]"), call_a],
        }
        pruned = s.replace(2, 2, msg, source_event_seqs=[2], type="assistant/message")
        assert s.tool_call_seq("A") == pruned.seq
        assert s.pending_tool_calls() == []
        assert all(s.balanced_cuts())
        assert s.close_dangling_calls() == []


# --------------------------------------------------------------------------- 8. bad input


@pytest.fixture
def answered(path: Path, clock: Callable[[], int]) -> Iterator[Session]:
    """A session where A has a real result and B a synthetic one, then a real one."""
    with Session.create(path, clock=clock) as s:
        s.record_openai(TWO_CALLS)
        s.append_tool_result("B", "diff")
        s.record_openai(assistant("Reading.", call("C")))
        yield s


def refused(s: Session, attempt: Callable[[], object], error: type[Exception], match: str) -> None:
    """``attempt`` raises ``error``; the log file and every fold are exactly as they were."""
    assert s.path is not None
    raw, before, n = s.path.read_bytes(), state(s), len(s)
    with pytest.raises(error, match=match):
        attempt()
    assert s.path.read_bytes() == raw
    assert len(s) == n and state(s) == before


def test_a_result_for_a_call_never_issued_is_refused(answered: Session) -> None:
    s = answered
    refused(
        s,
        lambda: s.append_tool_result("nope", "x"),
        SurfaceError,
        "unknown tool call id 'nope'; calls awaiting a result: C",
    )
    refused(
        s,
        lambda: s.record_openai(tool("nope", "x")),
        FormatError,
        r"tool_call_id.*'nope'.*awaiting: C",
    )
    refused(s, lambda: s.append([result_spec("nope", "x")]), SurfaceError, "unknown tool call id")


def test_a_second_real_result_is_refused(answered: Session) -> None:
    s = answered
    for cid in ("A", "B"):  # A answered at once, B answered late in the synthetic's place
        refused(
            s,
            lambda c=cid: s.append_tool_result(c, "again"),
            SurfaceError,
            f"tool call '{cid}' already has a result",
        )
        refused(
            s,
            lambda c=cid: s.record_openai(tool(c, "again")),
            FormatError,
            f"no tool call '{cid}' is awaiting a result",
        )


def test_a_bad_batch_writes_no_synthetic_result_either(answered: Session) -> None:
    """The newer message would close C, but the batch fails later: nothing is written."""
    s = answered
    assert s.pending_tool_calls() == ["C"]
    refused(
        s,
        lambda: s.record_openai([user("Next."), tool("nope", "x")]),
        FormatError,
        r"messages\[1\]\.tool_call_id",
    )
    refused(
        s,
        lambda: s.append([message_spec("user", "Next."), result_spec("nope", "x")]),
        SurfaceError,
        "unknown tool call id",
    )
    assert s.pending_tool_calls() == ["C"] and synthetic_results(s)[-1].message.tool_call_id == "B"
