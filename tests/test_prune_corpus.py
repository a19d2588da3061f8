"""Real sessions at small windows: no request stays above the trigger after compaction unless
its newest unit alone is larger and cannot be pruned further (SPEC §6.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus
from helpers import orphan_results

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._compaction.prune import prunable_kind
from dashr_ext._pruned import excerpt


def newest_unit_excuse(d: Dashr) -> str | None:
    """Why the request may stay above the trigger: its newest unit alone is, and nothing in
    it can be pruned further. None when there is no such excuse."""
    s, config = d.session, d.config
    measured = dict(d.measure().nodes)
    real = [
        u
        for u in s.units()
        if any(s.event(q).type != "context/message" for q in s.surface[u.start : u.end])
    ]
    newest = real[-1]
    seqs = s.surface[newest.start : newest.end]
    if sum(measured[q] for q in seqs) <= config.trigger_tokens:
        return None
    for q in seqs:
        event = s.event(q)
        kind = prunable_kind(event)
        big = measured[q] > config.oversize_tokens or (
            kind != "user" and measured[q] > config.prune_threshold
        )
        if kind is not None and big and excerpt(event.message.text, config.prune_keep_chars):
            return None  # it could have been pruned: no excuse
    return f"newest unit seqs {seqs[0]}-{seqs[-1]}"


@pytest.mark.corpus
@pytest.mark.parametrize("window", [20_000, 8_000])
@pytest.mark.parametrize("path", corpus_params())
def test_no_request_stays_above_the_window_after_compaction(
    path: Path, window: int, tmp_path: Path
) -> None:
    data = load_corpus(path)
    target = tmp_path / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=window // 5)
    over: list[tuple[int, int]] = []
    with Dashr.create(target, config=config, tools=data["tools"], durability="flush") as d:
        for message in data["messages"]:
            if message["role"] == "assistant":  # the model is asked: the request goes out
                d.request_messages()
                total = d.measure().total
                if total > d.config.trigger_tokens and newest_unit_excuse(d) is None:
                    over.append((len(d.session), total))
                assert not orphan_results(d.session.messages())
            d.record_openai(message)
        d.request_messages()  # the request after the session's last message
        total = d.measure().total
        if total > d.config.trigger_tokens and newest_unit_excuse(d) is None:
            over.append((len(d.session), total))
        live_messages = d.session.messages()
        live_archive: dict[str, Any] = dict(d.archive)
        pruned = [k for k in live_archive if "pruned" in live_archive[k]["meta"]]
        for key in pruned:  # every pruned original is archived byte for byte
            entry = live_archive[key]
            seq = entry["meta"]["pruned"]
            original = d.session.event(seq).message
            texts = [
                x["text"]
                for b in ("tool_results", "assistant_responses", "user_requests")
                for x in entry[b]
            ]
            assert texts == [original.text]
    assert over == [], f"requests above the {window}-token trigger with no excuse: {over}"
    with Dashr.open(target, config=config, read_only=True) as again:
        assert again.session.messages() == live_messages
        assert dict(again.archive) == live_archive
