"""The recall tools join the request from the first committed turn landing on (SPEC §6.4, 8):
the model can then read the originals of a rewritten turn with ``history_read(turn=N)``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from inprocess import cli
from turn_memory_support import ON, simple_compressor, work_turn

from dashr_ext import Dashr
from dashr_ext._payloads import TURN_ENGINE, TURN_TRIGGER
from dashr_ext._plot import pressure_series
from dashr_ext._recall.tools import TOOL_NAMES, tool_schemas
from dashr_ext._turnmemory.editor import TurnEditor
from dashr_ext._turnmemory.nodes import TurnNode


def names(tools: Sequence[dict[str, object]]) -> list[str]:
    return [str(t["function"]["name"]) for t in tools]  # type: ignore[index]


def chat(i: int) -> list[dict[str, object]]:
    """A turn of two messages: nothing for the compressor to rewrite (a no-op)."""
    return [
        {"role": "user", "content": f"Say hello to parser {i}."},
        {"role": "assistant", "content": f"Hello, parser {i}."},
    ]


def failing(nodes: Sequence[TurnNode]) -> TurnEditor | None:
    raise RuntimeError("the compressor broke")


def test_a_committed_landing_offers_the_recall_tools(tmp_path: Path) -> None:
    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.turn_compressor = simple_compressor
        d.record_openai(chat(0))
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["no-op"]
        assert d.tool_schemas() == [] and d.request_tools() == []
        assert not d.engine.has_checkpoint()
        before = d.measure()
        d.record_openai(work_turn(1))
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["no-op", "landed"]
        assert d.checkpoints() == []  # nothing but the turn landing is recallable
        assert names(d.tool_schemas()) == list(TOOL_NAMES)
        assert d.request_tools() == tool_schemas(d.recall_config)
        assert d.engine.has_checkpoint()
        read = d.call_tool("history_read", {"turn": 2})
        assert read == str(d.history_read(turn=2))
    with Dashr.open(tmp_path / "s.jsonl", ON, read_only=True) as cold:
        assert names(cold.tool_schemas()) == list(TOOL_NAMES)  # folded from the log
        assert cold.engine.has_checkpoint()
        assert cold.measure().envelope == before.envelope + cold.extra_envelope()[1]


def test_the_measurement_counts_the_tools_from_the_landing_on() -> None:
    with Dashr.create(in_memory=True, config=ON) as d:
        d.turn_compressor = simple_compressor
        _extra, recall = d.extra_envelope()
        base = d.measure().envelope  # no recall tools yet
        d.record_openai(work_turn(0))
        assert d.wait_for_turns(60)
        measured = d.measure()
        assert recall > 0 and measured.envelope == base + recall
        series = pressure_series(d.session, d.meter, d.config, recall_tokens=recall)
        assert series.tokens[-1] == measured.counted  # the plot counts them from there too


def test_a_failed_job_offers_no_recall_tools() -> None:
    with Dashr.create(in_memory=True, config=ON) as d:
        d.turn_compressor = failing
        d.record_openai(work_turn(0))
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["failed"]
        assert d.tool_schemas() == [] and not d.engine.has_checkpoint()
        assert d.measure().envelope == Dashr.create(in_memory=True).measure().envelope


def test_a_landing_closed_with_an_error_offers_no_recall_tools() -> None:
    """A landing cut short is closed on reopen with an ``error``: it never committed."""
    with Dashr.create(in_memory=True, config=ON) as d:
        d.record_openai(chat(0))
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["no-op"]
        seq = len(d.session)
        shadowed = [e.seq for e in d.session.events if e.is_surface]
        cid = "turn-cut"
        d.session.append_log(
            "compaction/start",
            {
                "compactionId": cid,
                "trigger": TURN_TRIGGER,
                "engine": TURN_ENGINE,
                "checkpoint": f"t{seq}",
                "shadowedSeqs": shadowed,
            },
        )
        d.session.append_log("compaction/end", {"compactionId": cid, "error": "interrupted"})
        assert d.tool_schemas() == [] and not d.engine.has_checkpoint()
        assert d.measure().envelope == Dashr.create(in_memory=True).measure().envelope
        page = str(d.history_search("parser 0"))
        assert f"t{seq}" not in page and "(visible)" in page


# --------------------------------------------------------------------------- search owners

HIT = re.compile(r"^\d+\. seq (\d+) \| (\w+) \| (\S+) \|", re.M)


def owners(page: str) -> dict[int, tuple[str, str]]:
    """Each hit's seq → (state, owner)."""
    return {int(m[1]): (m[2], m[3]) for m in HIT.finditer(page)}


def test_search_names_the_landing_that_shadowed_a_turns_originals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path, ON) as d:
        d.turn_compressor = simple_compressor
        for i in range(2):
            d.record_openai(work_turn(i))
        assert d.wait_for_turns(60)
        keys = [r.checkpoint for r in d.turns()]
        assert all(k is not None and k.startswith("t") for k in keys) and len(set(keys)) == 2
        found = {}
        for i, key in enumerate(keys):
            page = str(d.history_search(f"row 59 of run {i}"))  # clipped from the rewrite
            hits = owners(page)
            assert hits and set(hits.values()) == {("shadowed", key)}, page
            found[i] = page
        visible = owners(str(d.history_search("case 1 is fixed")))
        assert ("visible", "(visible)") in visible.values()
    with Dashr.open(path, ON, read_only=True) as cold:  # the scan of the replayed file
        for i in range(2):
            assert str(cold.history_search(f"row 59 of run {i}")) == found[i]
    code, out, _ = cli(capsys, "search", str(path), "row 59 of run 0")  # the file alone
    assert code == 0 and set(owners(out).values()) == {("shadowed", keys[0])}, out


def test_the_condensed_turn_names_a_read_the_offered_tools_answer() -> None:
    """The extractive rewrite says ``history_read(turn=N)``, and that call is offered and
    answered with the turn's originals."""
    with Dashr.create(in_memory=True, config=ON) as d:  # the default, extractive compressor
        for i in range(2):
            d.record_openai(work_turn(i))
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["landed", "landed"]
        texts = [str(m.get("content")) for m in d.request_messages()]
        for turn in (1, 2):
            named = [t for t in texts if f"originals: history_read(turn={turn})]" in t]
            assert len(named) == 1, texts
            page = d.call_tool("history_read", {"turn": turn})
            assert f"row 59 of run {turn - 1}" in page  # an original the rewrite dropped
            assert f"row 59 of run {turn - 1}" not in named[0]
        assert "history_read" in names(d.request_tools())
