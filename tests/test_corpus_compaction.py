"""Real sessions replayed through request_messages() with the offline default (SPEC 6, 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import compacting_corpus_files, corpus_params, load_corpus, no_pass_ran
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


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(compacting_under=WINDOW))
def test_corpus_session_under_the_recallable_engine_keeps_its_layout(
    path: Path, tmp_path: Path
) -> None:
    """After every pass: ``[system][stubs…][state][tail]``, earlier stubs unchanged, no stub
    inside a later region, replay identical, and the superseded states' spans still found."""
    data = load_corpus(path)
    target = tmp_path / "s.jsonl"
    config = CompactionConfig(
        engine="recallable", recency_window_tokens=WINDOW, retain_tokens=RETAIN
    )
    texts: dict[str, str] = {}
    passes = 0
    with Dashr.create(target, config=config, tools=data["tools"], durability="flush") as d:
        for message in data["messages"]:
            d.record_openai(message)
            before = len(d.checkpoints())
            d.request_messages()
            if len(d.checkpoints()) == before:
                continue
            passes += 1
            current = {cp.node_seq: cp.role for cp in d.checkpoints() if not cp.superseded_by}
            roles = [current.get(q, "-") for q in d.session.surface]
            k = next(i for i, r in enumerate(roles) if r not in ("stub", "directory"))
            assert roles[k] == "state" and set(roles[k + 1 :]) <= {"-"}, roles
            for cp in d.checkpoints():
                text = d.session.event(cp.node_seq).message.text
                assert texts.setdefault(cp.id, text) == text
            assert not orphan_results(to_openai(d.session))
        checkpoints = d.checkpoints()
        stubs = {cp.node_seq for cp in checkpoints if cp.role == "stub"}
        for cp in checkpoints:  # every stub summarizes history (none indexes only a state)
            if cp.role == "stub":
                assert d.session.event(cp.summary_seq).data["summarizer"]["kind"] != "code"
        for cp in checkpoints:
            if cp.role != "directory":
                assert not stubs & set(cp.shadowed_seqs), cp.id
        for cp in checkpoints:
            if cp.role == "state" and cp.superseded_by:
                first = d.session.event(cp.shadowed_seqs[0]).message.text.strip()
                if first:
                    phrase = " ".join(first.split()[:6])
                    assert f"| shadowed | {cp.id} |" in d.history_search(phrase, limit=20) or (
                        "truncated true" in d.history_search(phrase, limit=20)
                    ), (cp.id, phrase)
        live = (list(d.session.surface), to_openai(d.session), dict(d.archive))
    assert passes > 0, no_pass_ran(path, WINDOW)
    with Dashr.open(target, config=config, read_only=True) as again:
        assert list(again.session.surface) == live[0]
        assert to_openai(again.session) == live[1]
        assert dict(again.archive) == live[2]


def compacting_windows() -> list[Any]:
    """``(path, window, retain)`` for each window and each session a pass runs in under it."""
    windows = [(20_000, 4_000), (8_000, 2_000)]
    cases = [
        pytest.param(p, w, r, id=f"{p.stem}-{w}-{r}")
        for w, r in windows
        for p in compacting_corpus_files(w)
    ]
    absent = pytest.mark.skip(reason="../shared/corpus is absent")
    return cases or [pytest.param(None, 0, 0, marks=absent)]


@pytest.mark.corpus
@pytest.mark.parametrize("path,window,retain", compacting_windows())
def test_after_every_pass_the_request_fits_the_window_with_one_pointer(
    path: Path, window: int, retain: int
) -> None:
    """The whole checkpoint fits its budget (SPEC §7.2): after every pass the request is
    under the window unless what the pass must keep cannot fit (the newest real unit with
    the envelope and the smallest checkpoint, or an oversize unit left in the tail); at
    most one pointer is live; no checkpoint carries an empty section."""
    from dashr_ext._payloads import POINTER_SOURCE

    data = load_corpus(path)
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=retain)
    passes = 0
    with Dashr.create(in_memory=True, config=config, tools=data["tools"]) as d:
        s = d.session
        for message in data["messages"]:
            d.record_openai(message)
            before = len(d.checkpoints())
            d.request_messages()
            if len(d.checkpoints()) == before:
                continue
            passes += 1
            measured = d.measure()
            nodes = dict(measured.nodes)
            pointers = [q for q in s.surface if s.event(q).message.source_kind == POINTER_SOURCE]
            assert len(pointers) <= 1
            current = [cp for cp in d.checkpoints() if cp.superseded_by is None]
            for cp in current:
                assert "(none)" not in s.event(cp.node_seq).message.text, cp.id
            if measured.total <= window:
                continue
            units = [
                sum(nodes[q] for q in s.surface[u.start : u.end])
                for u in s.units()
                if not all(s.event(q).type == "context/message" for q in s.surface[u.start : u.end])
            ]
            kept = units[-1] + measured.envelope + 256  # newest real unit + smallest checkpoint
            oversize = max(units[1:], default=0) > retain  # a big unit the tail had to keep
            assert kept > window or oversize, (passes, measured.total, units[-3:])
    assert passes > 0, no_pass_ran(path, window)
