"""Real sessions replayed through request_messages() with the offline default (SPEC 6, 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus
from helpers import orphan_results

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._archive import MESSAGE_BUCKETS
from dashr_ext._formats.openai import to_openai

WINDOW, RETAIN = 20_000, 4_000


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_session_compacts_correctly_with_the_offline_default(
    path: Path, tmp_path: Path
) -> None:
    data = load_corpus(path)
    target = tmp_path / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=WINDOW, retain_tokens=RETAIN)
    oversized_tails = 0
    with Dashr.create(target, config=config, tools=data["tools"], durability="flush") as d:
        assert d.summarizer.kind == "extractive"
        for message in data["messages"]:
            d.record_openai(message)
            passes = len(d.checkpoints())
            d.request_messages()
            if len(d.checkpoints()) == passes:
                continue
            measured = d.measure()
            if measured.total >= WINDOW:
                # Only an indivisible newest unit larger than the window may keep it above:
                # the surface is then the checkpoint, that unit and injected context only.
                s = d.session
                kinds = [
                    {s.event(q).type for q in s.surface[u.start : u.end]} for u in s.units()[1:]
                ]
                real = [k for k in kinds if k != {"context/message"}]
                assert len(real) == 1, "more than one real unit is left above the window"
                oversized_tails += 1
            assert not orphan_results(to_openai(d.session))
        live_surface = d.session.surface
        live_messages = to_openai(d.session)
        live_archive: dict[str, Any] = dict(d.archive)
        checkpoints = d.checkpoints()
        for seq in range(len(d.session)):
            assert d.session.event(seq).seq == seq
    assert oversized_tails <= 1
    with Dashr.open(target, config=config, read_only=True) as again:
        assert again.session.surface == live_surface
        assert to_openai(again.session) == live_messages
        assert dict(again.archive) == live_archive
        owner: dict[int, str] = {}
        for cp in checkpoints:
            entry = live_archive[cp.id]
            seen = [item["seq"] for bucket in MESSAGE_BUCKETS for item in entry[bucket]]
            assert sorted(seen) == sorted(cp.shadowed_seqs), cp.id  # exactly one bucket each
            for seq in cp.shadowed_seqs:
                assert seq not in owner, f"seq {seq} archived by {owner.get(seq)} and {cp.id}"
                owner[seq] = cp.id
            for item in entry["tool_results"]:
                assert item["text"] == again.session.event(item["seq"]).message.text
