"""One controller shared by threads: atomic mutations, a log that always reopens (SPEC 12).

The realistic case is an agent recording from a background thread while the notebook runs
``%compact`` or asks for the next request. The clock these sessions use releases the GIL,
and a session calls it between giving an event its seq and writing it, so the other thread
gets to run in exactly the window where unlocked appends used to write out of order.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._meter import TokenMeter
from dashr_ext._payloads import POINTER_SOURCE
from dashr_ext._session import Session
from dashr_ext._summarizers.base import SummaryRequest, SummaryResult
from dashr_ext.errors import (
    CompactionError,
    CompactionInProgressError,
    CompactionWarning,
    StoreError,
    SurfaceError,
)

pytestmark = pytest.mark.filterwarnings("ignore::dashr_ext.errors.CompactionWarning")

CONFIG = CompactionConfig(
    context_window_tokens=100_000, recency_window_tokens=2000, retain_tokens=300
)
WAIT_S = 60  # only a deadlock ever waits this long


def yielding_clock() -> Callable[[], int]:
    """A deterministic clock that lets other threads run each time it is read."""
    ticks = itertools.count()

    def clock() -> int:
        time.sleep(0)  # releases the GIL
        return 1_783_339_200_000 + 1000 * next(ticks)

    return clock


def make(path: Path, summarizer: Any = None, config: CompactionConfig = CONFIG) -> Dashr:
    return Dashr.create(
        path,
        config=config,
        summarizer=summarizer or ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        durability="flush",
        clock=yielding_clock(),
    )


def state(d: Dashr) -> dict[str, Any]:
    """Everything a reopen must reproduce: the log, surface, request, archive, checkpoints."""
    return {
        "events": [e.to_json() for e in d.session.events],
        "surface": d.session.surface,
        "messages": d.session.messages(),
        "archive": dict(d.archive),
        "checkpoints": d.checkpoints(),
    }


def reopened_state(d: Dashr) -> dict[str, Any]:
    assert d.session.path is not None
    with Dashr.open(d.session.path, d.config, read_only=True, meter=TokenMeter("chars")) as again:
        return state(again)


def run_threads(*bodies: Callable[[], None]) -> list[BaseException]:
    """Run each body on its own thread, started together; the errors they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def run(body: Callable[[], None]) -> None:
        start.wait()
        try:
            body()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(body,)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive(), "a thread is stuck (deadlock?)"
    return errors


def passes(d: Dashr) -> tuple[list[str], list[str], list[str]]:
    """Ids of the passes started, of those ended, and of those ended with an error."""
    events = d.session.events
    started = [e.data["compactionId"] for e in events if e.type == "compaction/start"]
    ended = [e.data["compactionId"] for e in events if e.type == "compaction/end"]
    failed = [
        e.data["compactionId"] for e in events if e.type == "compaction/end" and "error" in e.data
    ]
    return started, ended, failed


def step_messages(name: str) -> list[dict[str, Any]]:
    """One tool-using step: the assistant's call and the tool's result."""
    return [
        {
            "role": "assistant",
            "content": f"Reading {name}.",
            "tool_calls": [
                {
                    "id": f"call_{name}",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": f"cat {name}"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{name}", "content": f"# {name}\n" + "x = 1\n" * 60},
    ]


# --------------------------------------------------------------------------- the regression


@pytest.mark.filterwarnings("ignore::dashr_ext.errors.UsageWarning")  # arbitrary reports
def test_an_agent_thread_and_a_notebook_thread_leave_a_log_that_reopens_to_the_live_state(
    tmp_path: Path,
) -> None:
    """The reported failure: record_openai on one thread, report_usage on another.

    Before every mutation was atomic, this wrote seqs out of order and every later open
    failed with ``CorruptLogError ... expected 4, got 5``.
    """
    d = make(tmp_path / "s.jsonl")
    record_steps(d, 6, user="Fix the failing retry tests.")
    rounds = 150
    expected_failures: list[CompactionError] = []

    def agent() -> None:
        for i in range(rounds):
            if i % 10 == 0:
                d.record_openai({"role": "user", "content": f"Next request {i}."})
            call, result = step_messages(f"a{i}.py")
            d.record_openai(call)  # the call and its result arrive separately, as they do
            d.record_openai(result)
            d.request_messages()
            d.report_usage(1000 + i, 50)

    def notebook() -> None:
        for i in range(rounds):
            try:
                d.compact()
            except CompactionError as exc:  # another pass runs, or the surface moved
                expected_failures.append(exc)
            d.report_usage(2000 + i)
            d.request_messages()
            d.measure()
            d.history_search("retry")

    assert run_threads(agent, notebook) == []
    for exc in expected_failures:
        assert "still running" in str(exc) or "surface changed" in str(exc)
    started, ended, _failed = passes(d)
    assert sorted(started) == sorted(ended)  # no pass left open
    assert d.checkpoints()  # passes did commit
    assert sum(e.type == "usage/report" for e in d.session.events) == 2 * rounds
    assert reopened_state(d) == state(d)
    d.close()
    with Dashr.open(tmp_path / "s.jsonl", CONFIG, meter=TokenMeter("chars")) as again:
        assert len(again.session) == len(d.session)  # a writer reopens it too


def test_two_threads_opening_a_turn_at_once_open_exactly_one(tmp_path: Path) -> None:
    """A check and the append it guards are one step: the loser sees the winner's turn."""
    session = Session.create(tmp_path / "s.jsonl", durability="flush", clock=yielding_clock())
    refused: list[SurfaceError] = []

    def open_turn() -> None:
        try:
            session.begin_turn()
        except SurfaceError as exc:
            refused.append(exc)

    for _ in range(25):
        assert run_threads(open_turn, open_turn) == []
        session.end_turn()
    session.close()

    assert len(refused) == 25
    assert all("is still open; end it first" in str(exc) for exc in refused)
    with Session.open(tmp_path / "s.jsonl", read_only=True) as again:
        assert [t.index for t in again.turns] == list(range(1, 26))


def test_planning_on_a_measurement_the_session_has_moved_past_is_refused(tmp_path: Path) -> None:
    """Another thread recorded between measuring and planning: the plan would mis-size."""
    d = make(tmp_path / "s.jsonl")
    record_steps(d, 12, chars=600, user="go")
    measured = d.measure()
    assert d.engine.plan("manual", measured) is not None
    d.record_openai({"role": "user", "content": "One more thing."})
    before = len(d.session)

    with pytest.raises(CompactionError, match="changed after it was measured; measure it again"):
        d.engine.plan("manual", measured)
    assert len(d.session) == before
    assert d.engine.plan("manual", d.measure()) is not None


# --------------------------------------------------------------------------- summarizing


class GatedSummarizer(ScriptedSummarizer):
    """Summarizes once ``release`` is set; sets ``summarizing`` when it starts waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.summarizing = threading.Event()
        self.release = threading.Event()

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.summarizing.set()
        if not self.release.wait(WAIT_S):
            raise AssertionError("never released: recording blocked while summarizing")
        return super().summarize(request)


@contextmanager
def pass_in_background(d: Dashr) -> Iterator[list[Any]]:
    """Run ``d.compact()`` on another thread; yields once its summarizer is waiting."""
    summarizer = d.summarizer
    assert isinstance(summarizer, GatedSummarizer)
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(d.compact())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert summarizer.summarizing.wait(WAIT_S)
        yield outcome
    finally:
        summarizer.release.set()
        thread.join(WAIT_S)
    assert not thread.is_alive()


def test_a_usage_report_recorded_while_a_pass_summarizes_lets_the_pass_commit(
    tmp_path: Path,
) -> None:
    d = make(tmp_path / "s.jsonl", GatedSummarizer())
    record_steps(d, 12, chars=600, user="go")
    with pass_in_background(d) as outcome:
        usage = d.report_usage(4321, 12)  # would block forever if summarizing held the lock
        assert d.measure().total == 4321  # the report anchors the measurement at once

    (result,) = outcome
    start = next(e for e in d.session.events if e.type == "compaction/start")
    assert start.seq < usage.seq < result.summary_seq
    assert d.session.event(result.summary_seq).type == "compaction/summary"
    assert d.session.surface[0] == result.summary_seq + 1  # the checkpoint node leads
    assert reopened_state(d) == state(d)


def test_a_message_recorded_while_a_pass_summarizes_follows_the_checkpoint(
    tmp_path: Path,
) -> None:
    d = make(tmp_path / "s.jsonl", GatedSummarizer())
    record_steps(d, 12, chars=600, user="go")
    surface = d.session.surface
    with pass_in_background(d) as outcome:
        recorded = d.record_openai({"role": "user", "content": "Also check the docs."})
        new = next(e for e in recorded if e.type == "user/message")

    (result,) = outcome
    assert result.checkpoint == d.checkpoints()[0].id
    assert not set(result.shadowed_seqs) & {new.seq}
    kept = surface[len(result.shadowed_seqs) :]
    assert d.session.surface == (result.summary_seq + 1, *kept, new.seq)
    last = d.session.events[-1]
    assert last.type == "compaction/end" and "error" not in last.data
    assert reopened_state(d) == state(d)


def test_a_pressure_check_while_another_thread_summarizes_sends_the_request_uncompacted(
    tmp_path: Path,
) -> None:
    d = make(tmp_path / "s.jsonl", GatedSummarizer())
    record_steps(d, 12, chars=600, user="go")
    with pass_in_background(d) as outcome:
        before = len(d.session)
        with pytest.warns(CompactionWarning, match="still running"):
            messages = d.request_messages()  # no second pass, no CompactionInProgressError
        assert len(d.session) == before  # nothing was written
        assert messages == d.session.messages()

    (result,) = outcome
    assert result.checkpoint == d.checkpoints()[0].id


@pytest.mark.parametrize("swap", ["config", "summarizer", "recall_config"])
def test_swapping_the_engine_while_a_pass_summarizes_does_not_start_a_second_pass(
    tmp_path: Path, swap: str
) -> None:
    # Large enough for the full form, whose pointer message the rebuilt engine must know.
    big = CompactionConfig(
        context_window_tokens=100_000, recency_window_tokens=30_000, retain_tokens=3_000
    )
    d = make(tmp_path / "s.jsonl", GatedSummarizer(), big)
    record_steps(d, 12, chars=12_000, user="go")
    with pass_in_background(d) as outcome:
        if swap == "config":
            d.config = d.config.with_changes(retain_tokens=250)
        elif swap == "summarizer":
            d.summarizer = ScriptedSummarizer()
        else:
            d.recall_config = d.recall_config.with_changes(read_max_events=50)
        before = len(d.session)
        with pytest.raises(CompactionInProgressError, match="still running"):
            d.compact()
        assert len(d.session) == before  # no second compaction/start
    (result,) = outcome
    starts = [e for e in d.session.events if e.type == "compaction/start"]
    assert len(starts) == 1 and result.compaction_id == starts[0].data["compactionId"]
    d.request_messages()  # the rebuilt engine knows the pointer the old one wrote
    pointers = [
        e.message.source["checkpoint"]
        for e in d.session.events
        if e.type == "context/message" and e.message.source_kind == POINTER_SOURCE
    ]
    assert pointers == [result.checkpoint]


# --------------------------------------------------------------------------- half-applied


def matched(search_text: str) -> int:
    """How many events a history_search result says matched."""
    found = re.search(r"(\d+) matched", search_text)
    assert found is not None, search_text
    return int(found[1])


def test_a_reader_never_sees_an_append_that_then_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append is applied in memory before it is written; readers must wait for both.

    Otherwise the meter and recall fold the doomed event into their caches, and the next
    event, which reuses its seq, is measured and searched as if it were the doomed one.
    """
    d = make(tmp_path / "s.jsonl")
    record_steps(d, 2, user="go")
    store = d.session._store
    assert store is not None
    real_append = store.append
    writing, release = threading.Event(), threading.Event()

    def slow_failing_append(objs: Sequence[dict[str, Any]]) -> None:
        if "doomed" in json.dumps(objs):
            writing.set()
            release.wait(WAIT_S)
            raise StoreError("disk full")
        real_append(objs)

    monkeypatch.setattr(store, "append", slow_failing_append)
    nothing_found = d.history_search("doomed").text
    assert matched(nothing_found) == 0
    seen: dict[str, Any] = {}

    def writer() -> None:
        with pytest.raises(StoreError, match="disk full"):
            d.record_openai({"role": "user", "content": "doomed " * 500})

    def reader() -> None:
        assert writing.wait(WAIT_S)
        seen["surface"] = d.session.surface
        seen["total"] = d.measure().total
        seen["hits"] = d.history_search("doomed").text

    def releaser() -> None:
        assert writing.wait(WAIT_S)
        time.sleep(0.2)  # give the reader time to read, if nothing stops it
        release.set()

    before, total_before = d.session.surface, d.measure().total
    assert run_threads(writer, reader, releaser) == []
    assert seen["surface"] == before
    assert seen["total"] == total_before
    assert seen["hits"] == nothing_found
    d.record_openai({"role": "user", "content": "short"})  # takes the doomed events' seqs
    assert matched(d.history_search("doomed").text) == 0
    with Dashr.open(
        tmp_path / "s.jsonl", CONFIG, read_only=True, meter=TokenMeter("chars")
    ) as again:
        assert d.measure() == again.measure()


# --------------------------------------------------------------------------- any interleaving

OPS = st.lists(st.sampled_from(["step", "user", "usage", "compact", "pointer"]), max_size=10)


def perform(d: Dashr, op: str, name: str) -> None:
    if op == "step":
        d.record_openai(step_messages(name))
    elif op == "user":
        d.record_openai({"role": "user", "content": f"Please also handle {name}."})
    elif op == "usage":
        d.report_usage(len(d.session) * 10, 7)
    elif op == "compact":
        with contextlib.suppress(CompactionError):  # a pass runs, or the surface moved
            d.compact()
    else:  # "pointer": the next request adds the pointer of a new checkpoint
        d.request_messages()


@pytest.mark.filterwarnings("ignore::dashr_ext.errors.UsageWarning")  # arbitrary reports
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=OPS, second=OPS)
def test_two_threads_in_any_interleaving_leave_a_log_that_reopens_to_the_live_state(
    first: list[str], second: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = make(Path(tmp) / "s.jsonl")
        try:
            record_steps(d, 8, chars=500, user="go")

            def thread(ops: list[str], prefix: str) -> Callable[[], None]:
                def body() -> None:
                    for i, op in enumerate(ops):
                        perform(d, op, f"{prefix}{i}")

                return body

            assert run_threads(thread(first, "a"), thread(second, "b")) == []
            started, ended, _failed = passes(d)
            assert sorted(started) == sorted(ended)
            assert reopened_state(d) == state(d)
        finally:
            d.close()


# --------------------------------------------------------------------------- lock-free readers


def lock_free_reads(s: Session, seq: int, call_id: str) -> dict[str, Any]:
    """What the readers that take no lock say about ``seq`` and ``call_id`` (or what they raise)."""
    reads: dict[str, Callable[[], Any]] = {
        "len": lambda: len(s),
        "events": lambda: len(s.events) > seq and s.events[seq].seq,
        "event": lambda: s.event(seq).to_json(),
        "id": lambda: s.id,
        "system_prompt": lambda: s.system_prompt,
        "tools": lambda: s.tools,
        "surface_version": lambda: s.surface_version,
        "position": lambda: s.position(seq),
        "is_current": lambda: s.is_current(seq),
        "tool_call": lambda: (s.tool_call_seq(call_id), s.tool_call_name(call_id)),
        "open_turn": lambda: s.open_turn,
    }
    out: dict[str, Any] = {}
    for name, read in reads.items():
        try:
            out[name] = read()
        except Exception as exc:  # a torn read is what the test looks for
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def test_readers_without_the_lock_never_see_a_failed_append_empty_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Undoing a failed batch rebuilds the folds aside and swaps them in; the live ones stay.

    The writer is held in the middle of that rebuild while another thread reads.
    """
    s = Session.create(
        tmp_path / "s.jsonl",
        system_prompt="You are terse.",
        tools=[{"type": "function", "function": {"name": "bash"}}],
        durability="flush",
    )
    s.record_openai([{"role": "user", "content": "go"}, *step_messages("a.py")])
    seq = len(s) - 1  # the tool result: durable long before the failed append
    before = lock_free_reads(s, seq, "call_a.py")
    surface_before = [e.to_json() for e in s.surface_events()]
    store = s._store
    assert store is not None
    real_append = store.append
    failing, rebuilding, read = threading.Event(), threading.Event(), threading.Event()
    during: dict[str, Any] = {}

    def failing_append(objs: Sequence[dict[str, Any]]) -> None:
        if "doomed" not in json.dumps(objs):
            real_append(objs)
            return
        during.update(lock_free_reads(s, seq, "call_a.py"))  # the batch, applied
        failing.set()
        raise StoreError("disk full")

    real_apply = Session._apply

    def pausing_apply(self: Session, event: Any) -> None:
        if failing.is_set() and not rebuilding.is_set():  # the rollback has begun
            rebuilding.set()
            assert read.wait(WAIT_S)
        real_apply(self, event)

    monkeypatch.setattr(store, "append", failing_append)
    monkeypatch.setattr(Session, "_apply", pausing_apply)
    seen: dict[str, Any] = {}

    def writer() -> None:
        with pytest.raises(StoreError, match="disk full"):
            s.record_openai(step_messages("doomed.py"))

    def reader() -> None:
        assert rebuilding.wait(WAIT_S)
        seen.update(lock_free_reads(s, seq, "call_a.py"))
        read.set()
        seen["surface_events"] = [e.to_json() for e in s.surface_events()]

    assert run_threads(writer, reader) == []
    assert during["len"] > before["len"]  # the doomed batch was applied, then undone
    for name, value in seen.items():
        if name != "surface_events":
            assert value in (before[name], during[name]), name
    assert seen["surface_events"] == surface_before  # a snapshot taken under the lock
    assert lock_free_reads(s, seq, "call_a.py") == before
    monkeypatch.undo()
    s.record_openai({"role": "user", "content": "next"})  # takes the doomed events' seqs
    assert s.path is not None
    with Session.open(s.path, read_only=True) as again:
        assert [e.to_json() for e in again.events] == [e.to_json() for e in s.events]
    s.close()


# --------------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_child_forked_while_another_thread_holds_the_session_lock_can_read_it(
    tmp_path: Path,
) -> None:
    """The child gets a fresh session lock: reads work, writes get the store's error."""
    d = make(tmp_path / "s.jsonl")
    record_steps(d, 2, user="go")
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with d.session.lock:
            holding.set()
            release.wait(WAIT_S)

    expected = {"len": len(d.session), "outline": d.history_outline().text}
    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(WAIT_S)
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's cleanup
            signal.alarm(WAIT_S)  # a hang ends the child instead of the test run
            report: dict[str, Any] = {"len": len(d.session), "outline": d.history_outline().text}
            try:
                d.record_openai({"role": "user", "content": "from the child"})
            except StoreError as exc:
                report["write"] = str(exc)
            report["len after"] = len(d.session)
            with d.session.lock:  # held by this thread: kept, so the release below is its own
                report["lock"] = "ok"
            os.write(write_fd, json.dumps(report).encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            got = pipe.read()
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        thread.join(WAIT_S)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the child hung or crashed"
    report = json.loads(got)
    assert report == {
        **expected,
        "write": "this store belongs to the parent process (the process forked)",
        "len after": expected["len"],
        "lock": "ok",
    }
    d.record_openai({"role": "user", "content": "from the parent"})  # the parent writes on
    assert reopened_state(d) == state(d)
    d.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_thread_that_forks_holding_the_session_lock_releases_it_in_the_child(
    tmp_path: Path,
) -> None:
    d = make(tmp_path / "s.jsonl")
    record_steps(d, 1, user="go")
    read_fd, write_fd = os.pipe()
    with d.session.lock:
        pid = os.fork()
        if pid == 0:
            signal.alarm(WAIT_S)
            try:
                with d.session.lock:  # re-entered by the thread that holds it
                    surface = list(d.session.surface)
            except BaseException as exc:
                os.write(write_fd, repr(exc).encode())
                os._exit(1)
    if pid == 0:
        os.write(write_fd, json.dumps(surface).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        got = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, got
    assert json.loads(got) == list(d.session.surface)
    d.close()
