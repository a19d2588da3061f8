"""The pure steps of a compaction pass, without a store, a meter or a model.

``plan_pass`` and ``compose_pass`` are functions of the log, one measurement and the
summary text; ``summarize`` is the only step that calls a summarizer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from dashr_ext._compaction.compose import checkpoint_specs, compose_pass
from dashr_ext._compaction.plan import PassPlan, Region, check_explicit_range, plan_pass
from dashr_ext._compaction.summarize import summarize
from dashr_ext._events import Event, Replace
from dashr_ext._meter import Measurement
from dashr_ext._payloads import CHECKPOINT_SOURCE
from dashr_ext._session import Session
from dashr_ext._summarizers.base import SummaryRequest, SummaryResult
from dashr_ext.errors import SummarizerError, SurfaceError

T0 = 1_783_339_200_000


def _event(seq: int, kind: str, data: dict[str, Any], op: Any = "append", **extra: Any) -> Event:
    obj: dict[str, Any] = {"seq": seq, "type": kind, "time": T0 + seq, "data": data}
    if op is not None:
        obj["surfaceOp"] = op
    obj.update(extra)
    return Event.from_json(obj)


def _message(seq: int, role: str, text: str, **fields: Any) -> Event:
    kind = {"user": "user/message", "assistant": "assistant/message", "tool": "tool/result"}[role]
    source = {"user": {"kind": "user"}, "assistant": {"kind": "model"}, "tool": {"kind": "tool"}}
    message = {
        "id": f"m{seq}",
        "role": role,
        "source": source[role],
        "content": [{"type": "text", "text": text}],
        **fields,
    }
    return _event(seq, kind, {"message": message})


def _header() -> Event:
    data = {
        "sessionId": "steps",
        "createdAt": T0,
        "systemPrompt": "You are a coding agent.",
        "tools": None,
        "format": "dashr/1",
    }
    return _event(0, "session/header", data, op=None)


@pytest.fixture
def log() -> Session:
    """A store-less session: header, then four plain messages (seqs 1-4)."""
    return Session(
        [
            _header(),
            _message(1, "user", "Fix the failing retry tests."),
            _message(2, "assistant", "Reading retry.py first."),
            _message(3, "user", "The budget is 3, not 5."),
            _message(4, "assistant", "Changing the default to 3."),
        ]
    )


def _measurement(session: Session, tokens: dict[int, int], total: int = 500) -> Measurement:
    nodes = [(seq, tokens[seq]) for seq in session.surface]
    return Measurement(total=total, nodes=nodes, envelope=20, anchored=False, counted=total)


def _count(text: str) -> int:
    return len(text.split())


def test_plan_takes_region_sizes_from_the_one_measurement(log: Session) -> None:
    measurement = _measurement(log, {1: 10, 2: 20, 3: 30, 4: 40})
    plan = plan_pass(
        log,
        measurement,
        [(0, 2)],
        trigger="manual",
        engine="summary",
        max_summary_tokens=300,
        count_tokens=_count,
    )
    assert plan.regions == (Region(0, 2, (1, 2, 3), 60),)
    assert plan.shadowed_tokens == 60
    assert plan.measurement is measurement
    (request,) = plan.requests
    assert [e.seq for e in request.span] == [1, 2, 3]
    assert request.previous_summary is None
    assert request.max_summary_tokens == 300
    # From the head: the request prefix up to the end of the range, system prompt first.
    assert [m["role"] for m in request.prefix_messages] == ["system", "user", "assistant", "user"]
    assert request.prefix_messages[-1]["content"] == "The budget is 3, not 5."


def test_plan_of_an_inner_range_replays_the_system_prompt_then_just_the_range(
    log: Session,
) -> None:
    measurement = _measurement(log, {1: 10, 2: 20, 3: 30, 4: 40})
    plan = plan_pass(
        log, measurement, [(1, 2), (3, 3)], trigger="manual", engine="e",
        max_summary_tokens=300, count_tokens=_count,
    )  # fmt: skip
    assert [r.seqs for r in plan.regions] == [(2, 3), (4,)]
    assert [r.tokens for r in plan.regions] == [50, 40]
    first, second = plan.requests
    assert [m["role"] for m in first.prefix_messages] == ["system", "assistant", "user"]
    assert [m["content"] for m in second.prefix_messages[1:]] == ["Changing the default to 3."]


def test_plan_merges_the_summary_of_a_checkpoint_inside_the_range() -> None:
    summary = {
        "compactionId": "p5",
        "checkpoint": "c6",
        "trigger": "manual",
        "engine": "summary",
        "summary": "## Current Work\n- Retry budget fixed.",
        "shadowedRange": {"start": 1, "end": 2},
        "shadowedSeqs": [1, 2],
        "shadowedTokenCount": 30,
        "summarizer": {"kind": "scripted", "model": None},
        "archive": {},
    }
    node = {
        "id": "m7",
        "role": "user",
        "source": {"kind": CHECKPOINT_SOURCE, "checkpoint": "c6", "compactionId": "p5"},
        "content": [{"type": "text", "text": "framed"}],
    }
    session = Session(
        [
            _header(),
            _message(1, "user", "a"),
            _message(2, "assistant", "b"),
            _message(3, "user", "c"),
            _message(4, "assistant", "d"),
            _event(5, "compaction/start", {"compactionId": "p5", "trigger": "manual",
                                           "engine": "summary"}, op=None),
            _event(6, "compaction/summary", summary, op=None),
            _event(7, "user/message", {"message": node},
                   op={"op": "replace", "startSeq": 1, "endSeq": 2},
                   sourceEventSeqs=[1, 2, 5, 6]),
        ]
    )  # fmt: skip
    assert list(session.surface) == [7, 3, 4]
    plan = plan_pass(
        session, _measurement(session, {7: 5, 3: 10, 4: 10}), [(0, 1)], trigger="pressure",
        engine="summary", max_summary_tokens=200, count_tokens=_count,
    )  # fmt: skip
    assert plan.requests[0].previous_summary == "## Current Work\n- Retry budget fixed."


def test_an_explicit_range_must_be_current_ordered_and_balanced(log: Session) -> None:
    assert check_explicit_range(log, 2, 3) == (1, 2)
    with pytest.raises(SurfaceError, match="not on the current surface"):
        check_explicit_range(log, 0, 3)
    with pytest.raises(SurfaceError, match="comes after"):
        check_explicit_range(log, 4, 2)


def _plan(log: Session, tokens: int = 400) -> PassPlan:
    measurement = _measurement(log, {1: tokens, 2: tokens, 3: tokens, 4: tokens})
    return plan_pass(
        log, measurement, [(0, 1)], trigger="manual", engine="summary",
        max_summary_tokens=300, count_tokens=_count,
    )  # fmt: skip


def test_compose_builds_the_summary_payload_archive_entry_and_footer(log: Session) -> None:
    plan = _plan(log)
    composition = compose_pass(
        plan,
        [SummaryResult("  ## Current Work\n- Fixing retries.  ", "scripted", None)],
        plan.requests[0].span,
        compaction_id="p5",
        summary_seq=6,
        at_ms=T0 + 6,
        session_id="steps",
        archive_reasoning=True,
        count_tokens=_count,
    )
    assert composition.checkpoint == "c6"
    data = composition.data
    assert data["summary"] == "## Current Work\n- Fixing retries."
    assert data["shadowedSeqs"] == [1, 2]
    assert data["shadowedRange"] == {"start": 1, "end": 2}
    assert data["shadowedTokenCount"] == 800
    assert data["archive"]["user_requests"] == 1
    assert data["archive"]["assistant_responses"] == 1
    assert "archiveReasoning" not in data
    assert composition.entry["meta"]["checkpoint"] == "c6"
    assert composition.fits

    summary, node, end = checkpoint_specs(composition, start_seq=5, archive_error=None)
    assert (summary.type, summary.time, summary.data["checkpoint"]) == (
        "compaction/summary", T0 + 6, "c6",
    )  # fmt: skip
    assert node.surface_op == Replace(1, 2)
    assert node.source_event_seqs == (1, 2, 5, 6)
    text = node.data["message"]["content"][0]["text"]
    assert "<compacted-summary>\n## Current Work\n- Fixing retries.\n</compacted-summary>" in text
    marker = "[compaction archive]\nThe original context condensed here is stored verbatim"
    assert f'{marker} in kernel variable dashr_compaction_archive["c6"]' in text
    assert node.data["message"]["source"] == {
        "kind": CHECKPOINT_SOURCE, "checkpoint": "c6", "compactionId": "p5",
    }  # fmt: skip
    assert end.data == {"compactionId": "p5"}


def test_a_failed_archive_write_leaves_the_marker_out_and_records_the_error(
    log: Session,
) -> None:
    plan = _plan(log)
    composition = compose_pass(
        plan, [SummaryResult("short", "scripted", None)], plan.requests[0].span,
        compaction_id="p5", summary_seq=6, at_ms=T0, session_id="steps",
        archive_reasoning=False, count_tokens=_count,
    )  # fmt: skip
    summary, node, _end = checkpoint_specs(composition, start_seq=5, archive_error="OSError: x")
    assert summary.data["archive"] == {"error": "OSError: x"}
    assert summary.data["archiveReasoning"] is False
    text = node.data["message"]["content"][0]["text"]
    assert "[checkpoint c6:" in text
    assert "[compaction archive]" not in text
    # The composition itself is unchanged: a retry could still write the archive.
    assert composition.data["archive"]["user_requests"] == 1


def test_the_inflation_guard_refuses_a_checkpoint_not_smaller_than_its_span(
    log: Session,
) -> None:
    plan = _plan(log, tokens=5)
    composition = compose_pass(
        plan, [SummaryResult("word " * 50, "scripted", None)], plan.requests[0].span,
        compaction_id="p5", summary_seq=6, at_ms=T0, session_id="steps",
        archive_reasoning=True, count_tokens=_count,
    )  # fmt: skip
    assert not composition.fits
    assert composition.checkpoint_tokens >= composition.shadowed_tokens == 10
    assert "inflation guard" in composition.guard_message()


class _Slow:
    kind, model = "slow", None

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.add(threading.current_thread().name)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        return SummaryResult(f"summary of {len(request.span)}", self.kind, None)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def _request(n: int) -> SummaryRequest:
    return (
        SummaryRequest([], None, 100, [], _count)
        if n == 0
        else SummaryRequest([_message(i + 1, "user", "x") for i in range(n)], None, 100, [], _count)
    )


def test_summarize_runs_several_requests_concurrently_and_keeps_their_order() -> None:
    slow = _Slow()
    results = summarize(slow, [_request(1), _request(2), _request(3)])
    assert [r.text for r in results] == ["summary of 1", "summary of 2", "summary of 3"]
    assert slow.peak > 1


def test_summarize_runs_a_lone_request_on_the_calling_thread() -> None:
    slow = _Slow()
    summarize(slow, [_request(1)])
    assert slow.threads == {threading.current_thread().name}


def test_an_empty_summary_fails_the_step() -> None:
    class Empty(_Slow):
        def summarize(self, request: SummaryRequest) -> SummaryResult:
            return SummaryResult("  \n", "empty", None)

    with pytest.raises(SummarizerError, match="empty summarizer returned an empty summary"):
        summarize(Empty(), [_request(1)])
