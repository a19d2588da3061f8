"""Archive and footers wired into compaction: write, degrade, evict, rebuild (SPEC 7)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._archive import is_evicted
from dashr_ext._footers import archive_marker, compose_footer
from dashr_ext._meter import TokenMeter
from dashr_ext._session import Session


def make(tmp_path: Path, clock: Any, **cfg: Any) -> Dashr:
    config = CompactionConfig(
        context_window_tokens=100_000, recency_window_tokens=30_000, retain_tokens=6_000, **cfg
    )
    return Dashr.create(
        tmp_path / "s.jsonl",
        config=config,
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    )


def checkpoint_text(d: Dashr, checkpoint: str) -> str:
    (cp,) = [c for c in d.checkpoints() if c.id == checkpoint]
    return d.session.event(cp.node_seq).message.text


def test_a_pass_archives_every_shadowed_message_and_ends_with_the_footers(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock)
    record_steps(d, 20, chars=5000, user="Fix the failing retry tests.")
    result = d.compact()
    assert result is not None
    entry = d.archive[result.checkpoint]
    assert entry["meta"]["checkpoint"] == result.checkpoint
    assert entry["meta"]["seqs"] == list(result.shadowed_seqs)
    assert entry["meta"]["reason"] == "manual" and entry["meta"]["engine"] == "summary"
    assert entry["meta"]["session"] == d.session.id
    archived = sorted(
        item["seq"]
        for bucket in (
            "user_requests",
            "assistant_responses",
            "tool_results",
            "prior_checkpoints",
            "context",
        )
        for item in entry[bucket]
    )
    assert archived == sorted(result.shadowed_seqs)
    for item in entry["tool_results"]:
        assert item["text"] == d.session.event(item["seq"]).message.text
    assert result.archived == {k: len(v) for k, v in entry.items() if k != "meta"}
    summary_event = d.session.event(result.summary_seq)
    text = checkpoint_text(d, result.checkpoint)
    footer = compose_footer(summary_event.data)
    assert text.endswith(footer)
    first, last = min(result.shadowed_seqs), max(result.shadowed_seqs)
    tokens = summary_event.data["shadowedTokenCount"]
    assert (
        f"[checkpoint {result.checkpoint}: shadows conversation span #{first}–#{last} "
        f"({len(result.shadowed_seqs)} events, ~{tokens} tokens); originals retrievable via "
        f'history_read("{result.checkpoint}") or dashr_compaction_archive["{result.checkpoint}"]]'
    ) in text
    assert text.endswith(archive_marker(result.checkpoint, result.archived))
    assert "[compaction archive]" in text


def test_the_markers_print_example_runs_against_the_archive(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock)
    record_steps(d, 20, chars=5000, user="go")
    result = d.compact()
    assert result is not None
    text = checkpoint_text(d, result.checkpoint)
    (example,) = re.findall(r"^  (print\(dashr_compaction_archive.*\))$", text, flags=re.M)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(example, {"dashr_compaction_archive": d.archive})
    assert out.getvalue() == d.archive[result.checkpoint]["tool_results"][0]["text"] + "\n"


class RaisingArchive(dict[str, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def __setitem__(self, key: str, value: Any) -> None:
        if self.fail:
            raise MemoryError("archive is full")
        super().__setitem__(key, value)


def test_an_archive_failure_still_commits_without_the_marker(tmp_path: Path, clock: Any) -> None:
    archive = RaisingArchive()
    session = Session.create(tmp_path / "s.jsonl", clock=clock)
    d = Dashr(
        session,
        config=CompactionConfig(
            context_window_tokens=100_000, recency_window_tokens=30_000, retain_tokens=6_000
        ),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        archive=archive,
        clock=clock,
    )
    record_steps(d, 20, chars=5000, user="go")
    result = d.compact()
    assert result is not None and result.archived is None
    summary = d.session.event(result.summary_seq)
    assert summary.data["archive"] == {"error": "MemoryError: archive is full"}
    text = checkpoint_text(d, result.checkpoint)
    assert "[compaction archive]" not in text
    assert text.rstrip().endswith(f'dashr_compaction_archive["{result.checkpoint}"]]')
    assert result.checkpoint not in archive
    archive.fail = False
    record_steps(d, 20, chars=5000, first=100)
    later = d.compact()
    assert later is not None and later.archived is not None
    assert later.checkpoint in archive
    assert "[compaction archive]" in checkpoint_text(d, later.checkpoint)


def test_a_cap_evicts_the_oldest_entries_to_recovery_stubs(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, archive_max_bytes=9000)
    for i in range(3):
        record_steps(d, 20, chars=5000, first=100 * i, user=f"request {i}")
        d.compact()
    ids = [c.id for c in d.checkpoints()]
    assert len(ids) == 3
    evicted = [cid for cid in ids if is_evicted(d.archive[cid])]
    assert evicted and ids[-1] not in evicted
    stub = d.archive[evicted[0]]
    assert stub["recover"] == f'history_read("{evicted[0]}")'
    assert stub["meta"]["checkpoint"] == evicted[0]


def test_reopening_rebuilds_the_identical_archive_and_footers(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, archive_max_bytes=9000)
    for i in range(4):
        record_steps(d, 20, chars=5000, first=100 * i, user=f"request {i}")
        d.request_messages()
    assert len(d.checkpoints()) >= 3
    live_archive = dict(d.archive)
    live_texts = {c.id: checkpoint_text(d, c.id) for c in d.checkpoints()}
    d.close()
    with Dashr.open(
        tmp_path / "s.jsonl",
        config=CompactionConfig(
            context_window_tokens=100_000,
            recency_window_tokens=30_000,
            retain_tokens=6_000,
            archive_max_bytes=9000,
        ),
        meter=TokenMeter("chars"),
    ) as again:
        assert dict(again.archive) == live_archive
        assert any(is_evicted(v) for v in again.archive.values())
        for c in again.checkpoints():
            summary = again.session.event(c.summary_seq)
            assert checkpoint_text(again, c.id) == live_texts[c.id]
            assert checkpoint_text(again, c.id).endswith(compose_footer(summary.data))


def test_reasoning_archiving_can_be_turned_off(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, archive_reasoning=False)
    d.record_openai({"role": "user", "content": "go"})
    for i in range(20):
        d.record_openai(
            [
                {
                    "role": "assistant",
                    "content": f"step {i}",
                    "reasoning_content": f"secret plan {i}",
                    "tool_calls": [
                        {
                            "id": f"k{i}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"k{i}", "content": "x" * 4000},
            ]
        )
    result = d.compact()
    assert result is not None
    responses = d.archive[result.checkpoint]["assistant_responses"]
    assert responses and all(r["reasoning"] is None for r in responses)
    d.close()
    with Dashr.open(tmp_path / "s.jsonl", meter=TokenMeter("chars"), read_only=True) as again:
        assert again.archive == d.archive


def test_a_pass_whose_commit_fails_leaves_the_archive_as_it_was(
    tmp_path: Path, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashr_ext.errors import CompactionError, StoreError

    d = make(tmp_path, clock, archive_max_bytes=9000)
    for i in range(2):
        record_steps(d, 20, chars=5000, first=100 * i, user=f"request {i}")
        d.compact()
    record_steps(d, 20, chars=5000, first=300, user="request 3")
    before = {k: dict(v) for k, v in d.archive.items()}
    store = d.session._store
    assert store is not None
    real_append = store.append

    def failing_append(objs: Any) -> None:
        if any(o["type"] == "compaction/summary" for o in objs):
            raise StoreError("disk full")
        real_append(objs)

    monkeypatch.setattr(store, "append", failing_append)
    with pytest.raises(CompactionError):
        d.compact()
    assert d.archive == before  # no new entry, no eviction left behind
    monkeypatch.setattr(store, "append", real_append)
    d.close()
    with Dashr.open(tmp_path / "s.jsonl", config=d.config, meter=TokenMeter("chars")) as again:
        assert again.archive == before


class CapBreakingArchive(dict[str, Any]):
    """Accepts entries, but one of them cannot be sized (the cap check raises)."""


def test_an_archive_failure_in_the_cap_check_keeps_live_and_rebuilt_archives_equal(
    tmp_path: Path, clock: Any
) -> None:
    import datetime

    session = Session.create(tmp_path / "s.jsonl", clock=clock)
    archive = CapBreakingArchive(user_note={"meta": {}, "when": datetime.date(2026, 1, 1)})
    d = Dashr(
        session,
        config=CompactionConfig(
            context_window_tokens=100_000,
            recency_window_tokens=30_000,
            retain_tokens=6_000,
            archive_max_bytes=1000,
        ),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        archive=archive,
        clock=clock,
    )
    record_steps(d, 20, chars=5000, user="go")
    result = d.compact()
    assert result is not None and result.archived is None
    assert result.checkpoint not in archive
    assert "error" in d.session.event(result.summary_seq).data["archive"]
