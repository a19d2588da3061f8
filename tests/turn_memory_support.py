"""Builders shared by the turn-memory tests: turns, a simple compressor, the log's passes."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from dashr_ext import CompactionConfig
from dashr_ext._controller import Dashr
from dashr_ext._events import Event
from dashr_ext._turnmemory import TurnEditor, TurnNode

ON = CompactionConfig(turn_memory=True, turn_min_tokens=50)
"""Turn memory on, every turn of a few tool outputs eligible."""

CLIP = 300


def call(cid: str, command: str) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }


def work_turn(i: int, *, lines: int = 60) -> list[dict[str, Any]]:
    """User request, a step with two calls and their long outputs, a final answer."""
    out = "\n".join(f"row {k} of run {i}: value {k * (i + 1)}" for k in range(lines))
    return [
        {"role": "user", "content": f"Task {i}: make the parser accept case {i}."},
        {
            "role": "assistant",
            "content": f"Checking case {i}.",
            "tool_calls": [call(f"a{i}", f"pytest -k case{i}"), call(f"b{i}", f"cat log{i}")],
        },
        {"role": "tool", "tool_call_id": f"a{i}", "content": out + "\nFAILED: IndexError"},
        {"role": "tool", "tool_call_id": f"b{i}", "content": out},
        {"role": "assistant", "content": f"Case {i} is fixed: parse() checks empty input."},
    ]


def simple_compressor(nodes: Sequence[TurnNode]) -> TurnEditor | None:
    """Rewrite the user node one to one and the working nodes between it and the final
    answer into one assistant node holding their text, clipped (two replaces)."""
    editor = TurnEditor(nodes)
    if len(nodes) < 3:
        return None
    middle = "\n".join(n.text for n in nodes[1:-1])
    editor.replace(f"n2..n{len(nodes) - 1}", [{"role": "assistant", "content": middle[:CLIP]}])
    editor.replace("n1", [{"role": "user", "content": nodes[0].text[:CLIP]}])
    return editor


class Gate:
    """A compressor that waits to be let through (``entered`` is set while it waits)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, nodes: Sequence[TurnNode]) -> TurnEditor | None:
        self.calls.append(tuple(n.seq for n in nodes))
        self.entered.set()
        assert self.release.wait(60), "the test never released the compressor"
        return simple_compressor(nodes)


def turn_passes(d: Dashr) -> list[tuple[Event, Event | None]]:
    """Every turn landing in the log: its compaction/start and compaction/end."""
    events = d.session.events
    out = []
    for e in events:
        if e.type == "compaction/start" and e.data["trigger"] == "turn":
            end = next(
                (
                    x
                    for x in events[e.seq + 1 :]
                    if x.type == "compaction/end"
                    and x.data["compactionId"] == e.data["compactionId"]
                ),
                None,
            )
            out.append((e, end))
    return out


def landed(d: Dashr) -> list[int]:
    """The turns of the landings that committed, in log order."""
    return [s.data["turn"] for s, e in turn_passes(d) if e is not None and "error" not in e.data]


def orphan_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Calls without a result right after their message, and results without their call."""
    problems: list[str] = []
    waiting: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            if m["tool_call_id"] in waiting:
                waiting.remove(m["tool_call_id"])
            else:
                problems.append(f"result {m['tool_call_id']} without its call")
            continue
        problems += [f"call {c} unanswered" for c in waiting]
        waiting = [c["id"] for c in m.get("tool_calls") or []]
    return problems + [f"call {c} unanswered" for c in waiting]
