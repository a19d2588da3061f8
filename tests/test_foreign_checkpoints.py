"""Checkpoint nodes that carry only ``source.kind`` (SPEC §3.1.1), as other tools write them.

Such a node's id is derived from its pass's ``compaction/summary`` event: the one its
``sourceEventSeqs`` name, else the nearest earlier summary of the pass whose
``shadowedSeqs`` the node replaces.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._checkpoints import checkpoint_of
from dashr_ext._events import SURFACE_TYPES
from dashr_ext._meter import TokenMeter

FILLER = "\n".join(f"line {i}: scheduler bookkeeping for attempt {i}" for i in range(40))


def write_session(path: Path, clock: Callable[[], int]) -> list[str]:
    """Two turns, each compacted by hand: c<seq> ids, the second superseding the first."""
    summarizer = ScriptedSummarizer(text="## Progress\n- Retry helper inspected.")
    with Dashr.create(
        path,
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        summarizer=summarizer,
        meter=TokenMeter("chars"),
        clock=clock,
    ) as d:
        d.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        d.record_openai(
            {"role": "assistant", "content": "The retry budget is 3 attempts.\n" + FILLER}
        )
        d.record_openai({"role": "user", "content": "Make the budget configurable."})
        d.record_openai({"role": "assistant", "content": "Added config.retry.maxAttempts."})
        first = d.compact(start_seq=d.session.surface[0], end_seq=d.session.surface[1])
        d.record_openai({"role": "user", "content": "Now run the whole suite."})
        d.record_openai({"role": "assistant", "content": "All 42 tests pass.\n" + FILLER})
        d.record_openai({"role": "user", "content": "Thanks, and the docs?"})
        d.record_openai({"role": "assistant", "content": "Docs updated too."})
        second = d.compact(start_seq=d.session.surface[0], end_seq=d.session.surface[-3])
        assert first is not None and second is not None
        return [first.checkpoint, second.checkpoint]


def strip_ids(path: Path, keep_summary_seq: bool = True) -> None:
    """Rewrite the log as a tool that writes only the kind would: no ``source.checkpoint``.

    Without ``keep_summary_seq`` the nodes' ``sourceEventSeqs`` name only what they shadow.
    """
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        obj: dict[str, Any] = json.loads(line)
        source = obj.get("data", {}).get("message", {}).get("source", {})
        if source.get("kind") == "compact-checkpoint":
            obj["data"]["message"]["source"] = {"kind": "compact-checkpoint"}
            if not keep_summary_seq:
                obj["sourceEventSeqs"] = [s for s in obj["sourceEventSeqs"] if _is_node(lines, s)]
        lines.append(obj)
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")


def _is_node(objs: list[dict[str, Any]], seq: int) -> bool:
    return objs[seq]["type"] in SURFACE_TYPES


@pytest.mark.parametrize("keep_summary_seq", [True, False], ids=["named", "matched"])
def test_a_checkpoint_node_with_only_its_kind_is_a_checkpoint_everywhere(
    tmp_path: Path, clock: Callable[[], int], keep_summary_seq: bool
) -> None:
    path = tmp_path / "foreign.jsonl"
    ids = write_session(path, clock)
    with Dashr.open(path, read_only=True) as reference:
        outline = str(reference.history_outline())
        read = str(reference.history_read(ids[1]))
        archive = json.dumps(reference.archive, sort_keys=True)
        archive = archive.replace(f'"checkpoint": "{ids[0]}", "seq"', '"checkpoint": null, "seq"')
    strip_ids(path, keep_summary_seq)
    with Dashr.open(path, read_only=True) as d:
        node = d.session.event(d.session.surface[0])
        assert "checkpoint" not in node.message.source
        assert [(c.id, c.superseded_by) for c in d.checkpoints()] == [
            (ids[0], ids[1]),
            (ids[1], None),
        ]
        assert [t["function"]["name"] for t in d.tool_schemas()] == [
            "history_outline",
            "history_read",
            "history_search",
        ]
        assert str(d.history_outline()) == outline
        assert "nothing compacted" not in str(d.history_outline())
        assert str(d.history_read(ids[1])) == read
        assert f"Checkpoint {ids[0]} (seq " in read
        # The archive is rebuilt under the derived ids (a prior checkpoint's entry, built from
        # the node alone, has no id to show).
        assert json.dumps(d.archive, sort_keys=True) == archive
        hit = str(d.history_search("retry budget"))
        assert f"| shadowed | {ids[0]} |" in hit
        assert checkpoint_of(node) is None  # the node alone does not say
        assert checkpoint_of(node, d.session.events) == ids[1]
