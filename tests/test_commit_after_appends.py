"""A pass commits onto a surface that grew while it summarized (SPEC §4.1, §12).

Recording goes on while the summarizer runs. What is appended after the span the pass read
follows its checkpoint, in order; only a change inside that span (a node replaced, or
something landing between two of its nodes) makes the pass fail recoverably.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._events import Event
from dashr_ext._footers import compose_footer
from dashr_ext._meter import TokenMeter
from dashr_ext._payloads import POINTER_SOURCE, summary_payload
from dashr_ext._summarizers.base import SummaryRequest, SummaryResult
from dashr_ext.errors import CompactionError

pytestmark = pytest.mark.filterwarnings("ignore::dashr_ext.errors.CompactionWarning")

WAIT_S = 60  # only a deadlock ever waits this long
CHANGED = "the surface changed while the pass was summarizing"
ENGINES = {
    "summary": CompactionConfig(
        context_window_tokens=100_000, recency_window_tokens=2000, retain_tokens=300
    ),
    "recallable": CompactionConfig(
        engine="recallable",
        context_window_tokens=100_000,
        recency_window_tokens=2000,
        retain_tokens=300,
    ),
}


class CallbackSummarizer(ScriptedSummarizer):
    """Runs ``during`` once, from inside the first summarize call of a pass, then summarizes."""

    def __init__(self) -> None:
        super().__init__()
        self.during: Callable[[], object] | None = None
        self._once = threading.Lock()

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        with self._once:  # the recallable engine summarizes its regions concurrently
            during, self.during = self.during, None
        if during is not None:
            during()
        return super().summarize(request)


def make(path: Path, summarizer: Any, config: CompactionConfig) -> Dashr:
    return Dashr.create(
        path,
        config=config,
        summarizer=summarizer,
        meter=TokenMeter("chars"),
        durability="flush",
    )


def step(name: str) -> list[dict[str, Any]]:
    """One tool-using step: the assistant's call and the tool's result."""
    return [
        {
            "role": "assistant",
            "content": f"Reading {name}.",
            "tool_calls": [
                {
                    "id": f"call_{name}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat {name}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{name}", "content": f"# {name}\nok = True\n"},
    ]


def surface_seqs(recorded: list[Event]) -> list[int]:
    return [e.seq for e in recorded if e.is_surface]


def originals(d: Dashr) -> list[int]:
    """Seqs of every message recorded (not made by a pass: no checkpoints, no pointers)."""
    return [
        e.seq
        for e in d.session.events
        if e.is_surface
        and e.message.source_kind not in ("compact-checkpoint", POINTER_SOURCE)
        and e.surface_op == "append"
    ]


def pointer_seqs(d: Dashr) -> set[int]:
    return {
        e.seq
        for e in d.session.events
        if e.type == "context/message" and e.message.source_kind == POINTER_SOURCE
    }


def state(d: Dashr) -> dict[str, Any]:
    return {
        "events": [e.to_json() for e in d.session.events],
        "surface": list(d.session.surface),
        "messages": json.dumps(d.session.messages()),
        "archive": dict(d.archive),
    }


def reopened_state(d: Dashr) -> dict[str, Any]:
    assert d.session.path is not None
    with Dashr.open(d.session.path, d.config, read_only=True, meter=TokenMeter("chars")) as again:
        return state(again)


# --------------------------------------------------------------------------- appends commit


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_messages_recorded_while_summarizing_follow_the_checkpoint_and_nothing_is_lost(
    tmp_path: Path, engine: str
) -> None:
    summarizer = CallbackSummarizer()
    d = make(tmp_path / "s.jsonl", summarizer, ENGINES[engine])
    record_steps(d, 12, chars=600, user="Fix the failing retry tests.")
    planned_surface = list(d.session.surface)
    new: list[int] = []

    def record_meanwhile() -> None:  # the same controller, from inside the pass
        new.extend(surface_seqs(d.record_openai({"role": "user", "content": "Also the docs."})))
        new.extend(surface_seqs(d.record_openai(step("docs/retry.md"))))

    summarizer.during = record_meanwhile
    result = d.compact()

    assert result is not None and len(new) == 3
    assert all(e.data.get("error") is None for e in d.session.events if e.type == "compaction/end")
    shadowed = list(result.shadowed_seqs)
    assert shadowed == planned_surface[: len(shadowed)]  # the span it read, and only that
    assert not set(new) & set(shadowed)
    # The checkpoint(s) took the span's place; the retained tail, then the new messages follow.
    kept = planned_surface[len(shadowed) :]
    checkpoints = result.checkpoints or (result.checkpoint,)
    nodes = [int(checkpoint[1:]) + 1 for checkpoint in checkpoints]
    messages = d.request_messages()  # adds the pointer
    surface = [q for q in d.session.surface if q not in pointer_seqs(d)]
    assert surface == [*nodes, *kept, *new]
    # The request shows the new messages after the checkpoint, in order.
    texts = [m.get("content") for m in messages]
    at = [texts.index(d.session.event(q).message.text) for q in [nodes[-1], *new]]
    assert at == sorted(at) and len(set(at)) == len(at)
    # Archive and footers count exactly the shadowed nodes.
    archived: list[int] = []
    for checkpoint in checkpoints:
        summary = d.session.event(int(checkpoint[1:]))
        data = summary_payload(summary)
        entry = d.archive[checkpoint]
        assert entry["meta"]["seqs"] == data["shadowedSeqs"]
        counts = [int(n) for bucket, n in data["archive"].items() if bucket != "file_ops"]
        assert sum(counts) == len(data["shadowedSeqs"])  # one item per shadowed node
        node = d.session.event(int(checkpoint[1:]) + 1)
        assert node.message.text.endswith(compose_footer(data))
        assert data["shadowedRange"] == {
            "start": min(data["shadowedSeqs"]),
            "end": max(data["shadowedSeqs"]),
        }
        archived += data["shadowedSeqs"]
    assert archived == shadowed
    # Nothing lost: every message recorded is archived by the pass or still on the surface.
    for seq in originals(d):
        assert seq in archived or d.session.is_current(seq), seq
    assert reopened_state(d) == state(d)


def test_the_log_replays_to_byte_identical_request_messages_after_such_a_pass(
    tmp_path: Path,
) -> None:
    summarizer = CallbackSummarizer()
    path = tmp_path / "s.jsonl"
    d = make(path, summarizer, ENGINES["summary"])
    record_steps(d, 12, chars=600, user="Fix the failing retry tests.")
    summarizer.during = lambda: d.record_openai(
        [{"role": "user", "content": "Also the docs."}, *step("docs/retry.md")]
    )
    assert d.compact() is not None
    live = json.dumps(d.request_messages()).encode()
    archive = dict(d.archive)
    d.close()

    with Dashr.open(path, ENGINES["summary"], read_only=True, meter=TokenMeter("chars")) as again:
        assert json.dumps(again.request_messages()).encode() == live
        assert dict(again.archive) == archive
    with Dashr.open(path, ENGINES["summary"], meter=TokenMeter("chars")) as writer:
        assert json.dumps(writer.request_messages()).encode() == live


# --------------------------------------------------------------------------- steady recording


class Recorder:
    """Records a message every few ms on its own thread until stopped (or ``limit``)."""

    def __init__(self, d: Dashr, limit: int) -> None:
        self.d = d
        self.limit = limit
        self.count = 0
        self.finished = False
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            for i in range(self.limit):
                if self.stop.is_set():
                    break
                if i % 3 == 2:
                    self.d.record_openai(step(f"notes/{i}.md"))
                else:
                    text = f"Note {i}: the retry loop must back off. " + "detail " * 20
                    self.d.record_openai({"role": "user", "content": text})
                with self.changed:
                    self.count += 1
                    self.changed.notify_all()
                self.stop.wait(0.002)  # pacing only: a message every few ms
        finally:
            with self.changed:
                self.finished = True
                self.changed.notify_all()

    def wait_for(self, count: int) -> int:
        """Block until ``count`` messages are recorded (or the recorder ended); the count."""
        with self.changed:
            ok = self.changed.wait_for(lambda: self.count >= count or self.finished, WAIT_S)
            assert ok, "the recorder is stuck"
            return self.count


class SlowSummarizer(ScriptedSummarizer):
    """Returns only after the recorder has recorded ``per_call`` more messages."""

    def __init__(self, per_call: int) -> None:
        super().__init__()
        self.per_call = per_call
        self.recorder: Recorder | None = None

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        assert self.recorder is not None
        self.recorder.wait_for(self.recorder.count + self.per_call)
        return super().summarize(request)


def test_steady_recording_during_a_slow_summarizer_lets_passes_commit_and_bounds_the_request(
    tmp_path: Path,
) -> None:
    config = ENGINES["summary"]
    summarizer = SlowSummarizer(per_call=4)
    d = make(tmp_path / "s.jsonl", summarizer, config)
    record_steps(d, 4, chars=400, user="Fix the failing retry tests.")
    recorder = Recorder(d, limit=600)
    summarizer.recorder = recorder
    peak = 0
    recorder.thread.start()
    try:
        while len(d.checkpoints()) < 5 and not recorder.finished:
            seen = recorder.count
            d.request_messages()  # the pressure check: compacts when over the trigger
            peak = max(peak, d.measure().total)
            recorder.wait_for(seen + 1)
    finally:
        recorder.stop.set()
        recorder.thread.join(WAIT_S)
    assert not recorder.thread.is_alive()

    failed = [
        e.data["error"]
        for e in d.session.events
        if e.type == "compaction/end" and "error" in e.data
    ]
    assert CHANGED not in failed
    assert len(d.checkpoints()) >= 5  # several passes committed while recording went on
    assert peak < 2 * config.trigger_tokens
    for seq in originals(d):  # nothing lost
        archived = any(seq in entry["meta"]["seqs"] for entry in d.archive.values())
        assert archived or d.session.is_current(seq), seq
    assert reopened_state(d) == state(d)


# --------------------------------------------------------------------------- a changed span


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_node_of_the_span_replaced_while_summarizing_makes_the_pass_fail_recoverably(
    tmp_path: Path, engine: str
) -> None:
    """A late tool result takes the place of the synthetic one inside the span."""
    summarizer = CallbackSummarizer()
    d = make(tmp_path / "s.jsonl", summarizer, ENGINES[engine])
    record_steps(d, 2, chars=600, user="Fix the failing retry tests.")
    call, _result = step("slow.log")
    d.record_openai(call)  # its result is late: the next request closes the call
    d.record_openai({"role": "user", "content": "Skip that log, read the tests."})
    synthetic = d.session.tool_result_seq("call_slow.log")
    assert synthetic is not None and d.session.interrupted_tool_calls() == ["call_slow.log"]
    record_steps(d, 10, chars=600, first=2)
    events_before = len(d.session)
    archive_before = dict(d.archive)
    late: list[int] = []

    def late_result() -> None:
        recorded = d.record_openai(
            {"role": "tool", "tool_call_id": "call_slow.log", "content": "slow.log: 3 lines"}
        )
        late.extend(surface_seqs(recorded))

    summarizer.during = late_result
    with pytest.raises(CompactionError) as raised:
        d.compact()

    assert str(raised.value) == CHANGED
    (real,) = late
    assert not d.session.is_current(synthetic) and d.session.is_current(real)
    start = next(e for e in d.session.events[events_before:] if e.type == "compaction/start")
    assert any(synthetic in [e.seq for e in r.span] for r in summarizer.requests)  # it read it
    assert d.session.events[-1].type == "compaction/end"
    assert d.session.events[-1].data == {
        "compactionId": start.data["compactionId"],
        "error": CHANGED,
    }
    assert [e.type for e in d.session.events[events_before:]] == [
        "compaction/start",
        "tool/result",
        "compaction/end",
    ]
    assert d.checkpoints() == [] and dict(d.archive) == archive_before
    assert reopened_state(d) == state(d)
