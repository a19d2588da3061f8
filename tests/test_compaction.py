"""The compaction protocol, range selection, triggers and failure classes (SPEC 4, 6.1, 6.2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, orphan_results, record_steps

from dashr_ext import CompactionConfig, CompactionWarning, Dashr
from dashr_ext._compaction import ExtraEnvelope
from dashr_ext._config import MIN_SUMMARY_TOKENS
from dashr_ext._formats.openai import to_openai
from dashr_ext._meter import TokenMeter
from dashr_ext.errors import (
    CompactionError,
    CompactionInProgressError,
    ConfigError,
    SummarizerError,
)

ROOT = Path(__file__).resolve().parents[1]


def make(tmp_path: Path, clock: Any, summarizer: Any = None, **cfg: Any) -> Dashr:
    config = CompactionConfig(**{"context_window_tokens": 100_000, **cfg})
    return Dashr.create(
        tmp_path / "s.jsonl",
        config=config,
        summarizer=summarizer or ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    )


def types_after(d: Dashr, seq: int) -> list[str]:
    return [e.type for e in d.session.events[seq:]]


# --------------------------------------------------------------------------- configuration


def test_recency_window_triggers_below_the_model_threshold() -> None:
    big = CompactionConfig(
        context_window_tokens=1_000_000, recency_window_tokens=500_000, retain_tokens=50_000
    )
    assert big.trigger_tokens == 500_000
    assert not big.should_compact(500_000) and big.should_compact(500_001)
    small = CompactionConfig(
        context_window_tokens=250_000, recency_window_tokens=500_000, retain_tokens=50_000
    )
    assert small.trigger_tokens == 200_000  # 0.8 × 250k comes first
    assert not small.should_compact(200_000) and small.should_compact(200_001)
    assert CompactionConfig().trigger_tokens == int(0.8 * 128_000)


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        (
            {"threshold_ratio": 1.5},
            "threshold_ratio",
            "threshold_ratio: expected a number in (0, 1), got 1.5",
        ),
        ({"retain_ratio": 0}, "retain_ratio", "expected a number in (0, 1), got 0"),
        ({"retain_ratio": 0.9}, "retain_ratio", "a ratio below threshold_ratio (0.8), got 0.9"),
        ({"retain_tokens": 200_000}, "retain_tokens", "fewer tokens than the threshold"),
        (
            {"recency_window_tokens": 20_000},
            "retain_tokens",
            "an absolute token count when recency_window_tokens is set",
        ),
        (
            {"recency_window_tokens": 20_000, "retain_tokens": 20_000},
            "retain_tokens",
            "fewer tokens than recency_window_tokens (20000), got 20000",
        ),
        ({"engine": "magic"}, "engine", "expected one of 'summary', 'recallable', got 'magic'"),
        ({"compaction_retries": 11}, "compaction_retries", "an integer in [0, 10], got 11"),
        ({"context_window_tokens": "big"}, "context_window_tokens", "got 'big'"),
        ({"auto": "yes"}, "auto", "expected True or False, got 'yes'"),
        (
            {"max_summary_tokens": 47},
            "max_summary_tokens",
            "max_summary_tokens: expected an integer >= 48, got 47",
        ),
        ({"max_summary_tokens": 16}, "max_summary_tokens", "expected an integer >= 48, got 16"),
    ],
)
def test_bad_configuration_names_field_range_and_value(
    kwargs: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(ConfigError) as info:
        CompactionConfig(**kwargs)
    assert info.value.field == field
    assert text in str(info.value)
    assert isinstance(info.value, ValueError)


def test_the_smallest_max_summary_tokens_still_compacts_with_the_default_summarizer() -> None:
    config = CompactionConfig(
        recency_window_tokens=3000,
        retain_tokens=500,
        max_summary_tokens=MIN_SUMMARY_TOKENS,
        compaction_retries=0,
    )
    d = Dashr.create(in_memory=True, config=config)  # the extractive summarizer
    record_steps(d, 20, 400, user="Fix it")
    d.record_openai({"role": "assistant", "content": "done"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompactionWarning)
        d.request_messages()
    [checkpoint] = d.checkpoints()
    [summary] = [e for e in d.session.events if e.type == "compaction/summary"]
    assert summary.data["checkpoint"] == checkpoint.id
    assert d.meter.count_text(summary.data["summary"]) <= MIN_SUMMARY_TOKENS


# --------------------------------------------------------------------------- a pass


def test_a_pressure_pass_writes_the_protocol_and_shrinks_the_request(
    tmp_path: Path, clock: Any
) -> None:
    # Large enough for the full form (framing, marker and pointer fit 12% of the budget).
    d = make(tmp_path, clock, recency_window_tokens=30_000, retain_tokens=8_000)
    record_steps(d, 32, chars=4000, user="Fix the failing retry tests.")
    before_total = d.measure().total
    assert before_total > 30_000
    mark = len(d.session)
    d.request_messages()
    assert types_after(d, mark) == [
        "compaction/start",
        "compaction/summary",
        "user/message",
        "compaction/end",
        "context/message",
    ]
    start, summary, node, end, pointer = d.session.events[mark:]
    assert pointer.message.source == {"kind": "history-access", "checkpoint": f"c{summary.seq}"}
    assert f"c{summary.seq}" in pointer.message.text
    assert "history_read" in pointer.message.text and "history_search" in pointer.message.text
    assert summary.data["checkpoint"] == f"c{summary.seq}"
    assert summary.data["trigger"] == "pressure" and summary.data["engine"] == "summary"
    assert node.message.source["kind"] == "compact-checkpoint"
    assert node.message.source["checkpoint"] == f"c{summary.seq}"
    assert set(node.source_event_seqs or ()) >= {
        *summary.data["shadowedSeqs"],
        start.seq,
        summary.seq,
    }
    assert "error" not in end.data
    assert d.session.surface[0] == node.seq
    text = node.message.text
    assert "<compacted-summary>\nFix" not in text  # the framing is the template's, summary verbatim
    assert "## Primary Request and Intent\n- Fix the failing retry tests." in text
    assert f'history_read("c{summary.seq}")' in text
    after = d.measure()
    assert after.total < 30_000
    tail_tokens = sum(t for seq, t in after.nodes[1:])
    assert tail_tokens >= 800
    assert not orphan_results(to_openai(d.session))
    d.close()
    with Dashr.open(tmp_path / "s.jsonl", read_only=True, meter=TokenMeter("chars")) as again:
        assert again.session.surface == d.session.surface
        assert to_openai(again.session) == to_openai(d.session)


def test_recency_window_off_leaves_the_engine_unchanged(clock: Any) -> None:
    import itertools

    def run(recency: int | None) -> list[dict[str, Any]]:
        ticks = itertools.count()
        cfg = CompactionConfig(
            context_window_tokens=4000, retain_tokens=800, recency_window_tokens=recency
        )
        d = Dashr.create(
            config=cfg,
            in_memory=True,
            summarizer=ScriptedSummarizer(),
            meter=TokenMeter("chars"),
            session_id="same",
            clock=lambda: 1_000 + next(ticks),
        )
        for i in range(4):
            record_steps(d, 10, chars=400, first=100 * i, user=f"request {i}")
            d.request_messages()
        return [e.to_json() for e in d.session.events]

    plain = run(None)
    inactive_window = run(50_000)  # larger than 0.8 × window: never the binding trigger
    assert any(e["type"] == "compaction/summary" for e in plain)
    assert plain == inactive_window


def test_the_retained_tail_never_starts_with_an_orphaned_tool_result(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, recency_window_tokens=2000, retain_tokens=300)
    record_steps(d, 12, chars=600, user="go")
    result = d.compact()
    assert result is not None
    messages = to_openai(d.session)
    assert messages[0]["role"] == "user"  # the checkpoint (no system prompt here)
    assert messages[0]["content"].endswith(f'dashr_compaction_archive["{result.checkpoint}"]]')
    assert messages[1]["role"] == "assistant"  # the tail starts on a whole step
    assert not orphan_results(messages)


def test_an_open_step_is_never_compacted(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=2000, retain_tokens=100)
    record_steps(d, 4, chars=600, user="go")
    d.record_openai(
        {
            "role": "assistant",
            "content": "running",
            "tool_calls": [
                {
                    "id": "c_open",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "{}"},
                }
            ],
        }
    )
    executing = d.session.executing_seqs()
    assert executing == {d.session.surface[-1]}
    result = d.compact()
    assert result is not None
    assert not executing & set(result.shadowed_seqs)
    assert executing <= set(d.session.surface)
    # What is left is the checkpoint, the newest closed step reaching the retain budget and
    # the executing step: nothing new is compactable.
    assert d.compact() is None


def test_nothing_compactable_returns_none_and_writes_nothing(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=2000, retain_tokens=1500)
    d.record_openai({"role": "user", "content": "hello"})
    mark = len(d.session)
    assert d.compact() is None
    assert d.request_messages() == to_openai(d.session)
    assert len(d.session) == mark


# --------------------------------------------------------------------------- failures


def test_a_failing_summarizer_records_the_error_and_changes_nothing(
    tmp_path: Path, clock: Any
) -> None:
    summarizer = ScriptedSummarizer(fail=SummarizerError("endpoint returned HTTP 500"))
    d = make(tmp_path, clock, summarizer, recency_window_tokens=2000, retain_tokens=300)
    record_steps(d, 12, chars=600, user="go")
    surface, messages, mark = d.session.surface, to_openai(d.session), len(d.session)
    with pytest.warns(CompactionWarning, match="endpoint returned HTTP 500"):
        assert d.request_messages() == messages
    assert types_after(d, mark) == ["compaction/start", "compaction/end"]
    assert d.session.events[-1].data["error"] == "endpoint returned HTTP 500"
    assert d.session.surface == surface
    with pytest.raises(SummarizerError):
        d.compact()
    assert d.session.surface == surface and d.archive == {}
    summarizer.fail = None
    assert d.compact() is not None  # a later pass is not blocked


def test_an_unexpected_summarizer_exception_is_wrapped(tmp_path: Path, clock: Any) -> None:
    d = make(
        tmp_path,
        clock,
        ScriptedSummarizer(fail=RuntimeError("boom")),
        recency_window_tokens=2000,
        retain_tokens=300,
    )
    record_steps(d, 12, chars=600, user="go")
    with pytest.raises(CompactionError, match="RuntimeError: boom"):
        d.compact()
    assert d.session.events[-1].data["error"] == "RuntimeError: boom"


def test_the_inflation_guard_commits_nothing(tmp_path: Path, clock: Any) -> None:
    d = make(
        tmp_path,
        clock,
        ScriptedSummarizer(text="word " * 5000),
        recency_window_tokens=2000,
        retain_tokens=300,
    )
    record_steps(d, 12, chars=600, user="go")
    surface, mark = d.session.surface, len(d.session)
    with pytest.raises(CompactionError, match="inflation guard"):
        d.compact()
    assert types_after(d, mark) == ["compaction/start", "compaction/end"]
    assert "inflation guard" in d.session.events[-1].data["error"]
    assert d.session.surface == surface and d.archive == {}


def test_a_second_pass_while_one_runs_is_refused(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=2000, retain_tokens=300)
    record_steps(d, 12, chars=600, user="go")
    seen: list[BaseException] = []

    class Reentrant(ScriptedSummarizer):
        def summarize(self, request: Any) -> Any:
            try:
                d.compact()
            except CompactionInProgressError as exc:
                seen.append(exc)
            return super().summarize(request)

    d.summarizer = Reentrant()
    assert d.engine.summarizer is d.summarizer
    assert d.compact() is not None
    assert len(seen) == 1 and "still running" in str(seen[0])


def test_empty_summary_is_a_recoverable_failure(tmp_path: Path, clock: Any) -> None:
    d = make(
        tmp_path,
        clock,
        ScriptedSummarizer(text="   "),
        recency_window_tokens=2000,
        retain_tokens=300,
    )
    record_steps(d, 12, chars=600, user="go")
    with pytest.raises(SummarizerError, match="empty summary"):
        d.compact()


@pytest.mark.slow
def test_an_orphan_start_from_a_killed_process_never_blocks(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from helpers import ScriptedSummarizer, record_steps
        from dashr_ext import Dashr, CompactionConfig
        from dashr_ext._meter import TokenMeter
        d = Dashr.create({str(path)!r}, config=CompactionConfig(context_window_tokens=100_000,
                         recency_window_tokens=2000, retain_tokens=300),
                         summarizer=ScriptedSummarizer(delay_s=60), meter=TokenMeter("chars"))
        record_steps(d, 12, chars=600, user="go")
        print("ready", flush=True)
        d.compact()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 30
        while b"compaction/start" not in path.read_bytes():
            assert time.monotonic() < deadline, "the writer never started its pass"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[-1]["type"] == "compaction/start"
    with pytest.warns(UserWarning, match="never finished"):
        d = Dashr.open(
            path,
            config=CompactionConfig(
                context_window_tokens=100_000, recency_window_tokens=2000, retain_tokens=300
            ),
            meter=TokenMeter("chars"),
            summarizer=ScriptedSummarizer(),
        )
    with d:
        assert d.session.events[-1].type == "compaction/end"
        assert "interrupted" in d.session.events[-1].data["error"]
        surface_before = [
            e for e in d.session.events if e.type == "user/message" and e.surface_op != "append"
        ]
        assert surface_before == []  # the orphan landed nothing
        result = d.compact()
        assert result is not None and result.checkpoint in d.archive


# --------------------------------------------------------------------------- overflow and retries


def test_overflow_leaves_only_the_newest_unit_and_is_one_shot(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=90_000, retain_tokens=50_000)
    record_steps(d, 8, chars=600, user="go")
    d.record_openai({"role": "assistant", "content": "All done."})
    last_unit = d.session.units()[-1]
    newest = d.session.surface[last_unit.start : last_unit.end]
    assert d.handle_overflow() is True
    surface = d.session.surface
    assert surface[1 : 1 + len(newest)] == newest and len(surface) == 1 + len(newest)
    assert d.session.event(surface[0]).message.source["kind"] == "compact-checkpoint"
    # A small span gets the compact form: its footer line is the one pointer back (no message).
    assert d.checkpoints()[-1].form != "full"
    assert d.checkpoints()[-1].trigger == "context-overflow"
    # Nothing but the newest unit and its checkpoint is left: the caller must give up.
    mark = len(d.session)
    assert d.handle_overflow() is False
    assert len(d.session) == mark


def test_a_retry_never_condenses_only_the_previous_checkpoint(tmp_path: Path, clock: Any) -> None:
    # The newest unit alone keeps the request over the trigger after the first pass: the
    # retry finds nothing new before it and does not summarize the summary again.
    summarizer = ScriptedSummarizer(size_from_budget=True)
    d = make(
        tmp_path,
        clock,
        summarizer,
        context_window_tokens=10_000,
        retain_tokens=6_000,
        max_summary_tokens=1500,
        compaction_retries=3,
        prune=False,  # else the newest output is pruned (test_prune.py)
    )
    record_steps(d, 24, chars=1600, user="go")
    record_steps(d, 1, chars=40_000, first=24)  # ~10k tokens: over the trigger on its own
    d.request_messages()
    (only,) = d.checkpoints()
    assert d.config.should_compact(d.measure().total)  # still over: the newest unit is large
    assert len(summarizer.requests) == 1  # three retries allowed, none taken
    assert only.superseded_by is None
    for _ in range(3):  # later passes always condense new history with the checkpoint
        record_steps(d, 2, chars=1600, first=100 + len(d.session))
        d.request_messages()
    for request in summarizer.requests:
        assert any(
            e.message.source_kind != "compact-checkpoint" and e.type != "context/message"
            for e in request.span
        )


def test_a_guard_failure_defers_the_summary_engine_until_the_span_has_grown(
    tmp_path: Path, clock: Any
) -> None:
    summarizer = ScriptedSummarizer(text="word " * 20_000)  # never smaller than its span
    d = make(tmp_path, clock, summarizer, context_window_tokens=10_000, retain_tokens=3_000)

    def starts() -> int:
        return types_after(d, 0).count("compaction/start")

    record_steps(d, 24, chars=1600, user="go")
    with pytest.warns(CompactionWarning, match="inflation guard"):
        d.request_messages()
    end = [e for e in d.session.events if e.type == "compaction/end"][-1]
    assert end.data["deferredStaleTokens"] > 0 and starts() == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second attempt, so no second warning
        d.request_messages()
        record_steps(d, 1, chars=100, first=24)
        d.request_messages()
    assert starts() == 1
    record_steps(d, 4, chars=1600, first=25)  # the span grows by more than the margin
    with pytest.warns(CompactionWarning, match="inflation guard"):
        d.request_messages()
    assert starts() == 2


def test_manual_compaction_of_an_explicit_range(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=90_000, retain_tokens=50_000)
    record_steps(d, 6, chars=600, user="go")
    s = d.session
    first, last = s.units()[2], s.units()[4]
    start, end = s.surface[first.start], s.surface[last.end - 1]
    expected = s.surface[first.start : last.end]
    result = d.compact(start_seq=start, end_seq=end)
    assert result is not None and result.shadowed_seqs == expected
    assert result.trigger == "manual"
    assert s.surface.index(result.summary_seq + 1) == first.start
    with pytest.raises(Exception, match="would split a tool call"):
        d.compact(start_seq=s.surface[-2], end_seq=s.surface[-2])
    with pytest.raises(CompactionError, match="give both"):
        d.compact(start_seq=1)


def test_checkpoint_preview_prefers_current_work_then_the_first_content_line() -> None:
    from dashr_ext._checkpoints import summary_preview

    merged = (
        "## Primary Request and Intent\n- Original request:\n  > Fix it\n"
        "## Current Work\n- Editing retry.py\n"
    )
    assert summary_preview(merged) == "Editing retry.py"
    assert summary_preview("## Primary Request and Intent\n- Label:\n  > Fix the retry tests") == (
        "Fix the retry tests"
    )
    assert summary_preview("") == ""


def test_usage_is_anchored_on_the_last_request_not_on_the_reply(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=90_000, retain_tokens=50_000)
    d.record_openai({"role": "user", "content": "hello there"})
    d.request_messages()
    request_end = d.session.surface[-1]
    (reply,) = [
        e for e in d.record_openai({"role": "assistant", "content": "hi " * 50}) if e.is_surface
    ]
    usage = d.report_usage(prompt_tokens=1234, completion_tokens=51)
    assert usage.data == {"promptTokens": 1234, "completionTokens": 51, "atSeq": request_end}
    measured = d.measure()
    assert measured.anchored
    assert measured.total == 1234 + dict(measured.nodes)[reply.seq]  # the reply counted once


def test_tools_sent_beyond_the_header_are_measured(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, recency_window_tokens=90_000, retain_tokens=50_000)
    d.record_openai({"role": "user", "content": "hello"})
    bare = d.measure().total
    schema = {
        "type": "function",
        "function": {
            "name": "run_cell",
            "description": "Run Python code in the kernel.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
    d.extra_tools.append(schema)
    assert d.request_tools() == [schema]
    text = json.dumps([schema], ensure_ascii=False, separators=(",", ":"))
    assert d.measure().total == bare + d.meter.count_text(text)
    assert d.engine.measure(ExtraEnvelope(d.meter.count_text(text))).total == d.measure().total
    assert d.engine.measure().total == bare


def test_a_pointer_that_cannot_be_written_does_not_fail_the_committed_pass(
    tmp_path: Path, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashr_ext.errors import StoreError

    d = make(tmp_path, clock, recency_window_tokens=30_000, retain_tokens=3_000)
    record_steps(d, 12, chars=12_000, user="go")  # the full form: it has a pointer message
    store = d.session._store
    assert store is not None
    real_append = store.append

    def no_pointers(objs: Any) -> None:
        if any(o["type"] == "context/message" for o in objs):
            raise StoreError("disk full")
        real_append(objs)

    monkeypatch.setattr(store, "append", no_pointers)
    with pytest.warns(CompactionWarning, match="could not add the pointer"):
        result = d.compact()
    assert result is not None and d.session.surface[0] == result.summary_seq + 1
    monkeypatch.setattr(store, "append", real_append)
    d.request_messages()  # the pointer goes out with the next request instead
    last = d.session.event(d.session.surface[-1])
    assert last.message.source == {"kind": "history-access", "checkpoint": result.checkpoint}


def test_a_pass_cut_after_its_checkpoint_landed_is_completed_on_open(
    tmp_path: Path, clock: Any
) -> None:
    from dashr_ext import RecallConfig

    path = tmp_path / "s.jsonl"
    config = CompactionConfig(
        context_window_tokens=100_000, recency_window_tokens=2000, retain_tokens=300
    )
    with Dashr.create(
        path,
        config=config,
        recall=RecallConfig(pointer="off"),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    ) as d:
        record_steps(d, 12, chars=600, user="go")
        result = d.compact()
        assert result is not None
    lines = path.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "compaction/end"
    path.write_text("".join(lines[:-1]))  # the crash cut the closing event only
    with pytest.warns(UserWarning, match="committed but was not closed"):
        again = Dashr.open(
            path, config=config, meter=TokenMeter("chars"), summarizer=ScriptedSummarizer()
        )
    with again:
        end = again.session.events[-1]
        assert end.type == "compaction/end" and "error" not in end.data
        assert [c.id for c in again.checkpoints()] == [result.checkpoint]
        assert result.checkpoint in again.archive


def test_a_refused_controller_leaves_no_session_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with pytest.raises(ConfigError, match="summarizer"):
        Dashr.create(path, summarizer="magic")
    assert not path.exists()


def test_the_checkpoint_index_folds_only_new_events_and_equals_a_full_scan(
    tmp_path: Path, clock: Any
) -> None:
    from dashr_ext._checkpoints import CheckpointIndex, checkpoints

    d = make(tmp_path, clock, recency_window_tokens=3000, retain_tokens=600)
    index = CheckpointIndex()
    for i in range(3):
        record_steps(d, 20, chars=500, first=100 * i, user=f"request {i}")
        assert index.update(d.session) is False  # plain messages add no checkpoint
        d.compact()
        assert index.update(d.session) is True
        assert index.items == checkpoints(d.session)
    first, second, third = index.items
    assert (first.superseded_by, second.superseded_by, third.superseded_by) == (
        second.id,
        third.id,
        None,
    )


@pytest.mark.parametrize("cut", ["inside the checkpoint line", "after the summary line"])
def test_a_commit_cut_short_by_a_crash_reopens_as_a_failed_pass(
    tmp_path: Path, clock: Any, cut: str
) -> None:
    """The closing batch is one write, but a crash can still cut it: never a half checkpoint."""
    d = make(tmp_path, clock, ScriptedSummarizer(), recency_window_tokens=2000, retain_tokens=300)
    record_steps(d, 12, chars=600, user="go")
    path = d.session.path
    assert path is not None
    before_surface = list(d.session.surface)
    before_messages = d.session.messages()
    result = d.compact()
    assert result is not None
    d.close()
    raw = path.read_bytes()
    lines = raw.splitlines(keepends=True)
    summary_line = next(i for i, ln in enumerate(lines) if b'"compaction/summary"' in ln)
    kept = b"".join(lines[: summary_line + 1])
    if cut == "inside the checkpoint line":
        kept += lines[summary_line + 1][:40]  # a torn tail: the checkpoint node never landed
    path.write_bytes(kept)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = Dashr.open(path, config=d.config, summarizer=ScriptedSummarizer())
    with again:
        assert any("never finished" in str(w.message) for w in caught)
        assert list(again.session.surface) == before_surface
        assert again.session.messages() == before_messages
        assert again.checkpoints() == []
        assert again.archive == {}
        last = again.session.events[-1]
        assert last.type == "compaction/end" and "interrupted" in last.data["error"]
        # The repaired session compacts again as usual.
        assert again.compact() is not None


def test_at_most_one_pointer_is_live_a_new_pass_replaces_the_old_one(
    tmp_path: Path, clock: Any
) -> None:
    from dashr_ext._payloads import POINTER_SOURCE

    # A retain budget large enough that the first pointer is still in the tail at pass two.
    d = make(tmp_path, clock, context_window_tokens=100_000, retain_tokens=50_000)
    record_steps(d, 24, chars=16_000, user="go")
    d.request_messages()
    record_steps(d, 8, chars=16_000, first=24)
    d.request_messages()
    assert len(d.checkpoints()) == 2
    live = [
        q for q in d.session.surface if d.session.event(q).message.source_kind == POINTER_SOURCE
    ]
    assert len(live) == 1
    assert d.session.event(live[0]).message.source["checkpoint"] == d.checkpoints()[-1].id
    assert d.session.event(live[0]).surface_op != "append"  # it replaced the first in place
    assert (
        sum(
            1
            for m in d.request_messages()
            if "was condensed into checkpoint" in str(m.get("content"))
        )
        <= 1
    )
    with Dashr.open(d.session.path, read_only=True) as again:  # replays to the same surface
        assert again.session.surface == d.session.surface
