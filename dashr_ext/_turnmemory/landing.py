"""The landing plan of a rewritten turn: editor state → the exact events (SPEC §6.4, §4.1).

Pure: from the turn's original nodes and the editor's final nodes (:meth:`TurnEditor.as_data
<dashr_ext._turnmemory.editor.TurnEditor.as_data>`) it computes the one durable batch that
lands the rewrite, wrapped in the compaction protocol like a prune pass::

    compaction/start    trigger "turn", engine "turn-memory", the turn, the job, the
                        archive key "t<this seq>", what it shadows and the sizes
    <replace> × M'      one per changed node, over its own landing slice; sourceEventSeqs =
                        its semantic sources ∪ its landing seqs; source.kind "turn-memory"
    compaction/end      the turn, the job, the archive bucket counts (or the archive error)

Unchanged nodes keep their events. The archive entry ``t<seq>`` files every node the batch
shadows into the usual buckets (:func:`~dashr_ext._archive.build_entry`), and
:func:`turn_entry` rebuilds it from the log alone, byte for byte. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

from .. import _archive as archive_mod
from .._events import Event, EventSpec, Replace
from .._meter import MESSAGE_OVERHEAD_TOKENS
from .._payloads import TURN_ENGINE, TURN_SOURCE, TURN_TRIGGER, start_payload
from .nodes import TurnNode

__all__ = [
    "TYPE_BY_ROLE",
    "Landing",
    "TurnPassPayload",
    "plan_landing",
    "turn_archive_entries",
    "turn_entry",
    "turn_passes",
]

TYPE_BY_ROLE: Mapping[str, str] = {
    "user": "user/message",
    "assistant": "assistant/message",
    "tool": "tool/result",
}
"""The event type a produced node of each role lands as."""


class TurnPassPayload(TypedDict):
    """``compaction/start`` of a turn-memory landing (the pass protocol's keys, then its own)."""

    compactionId: str
    trigger: str
    """:data:`~dashr_ext._payloads.TURN_TRIGGER`."""
    engine: str
    """:data:`~dashr_ext._payloads.TURN_ENGINE`."""
    turn: int
    job: str
    checkpoint: str
    """``t<seq of this event>``: the archive key of what the landing shadows."""
    replaces: int
    """How many replace events the batch holds (a repair on open counts them)."""
    shadowedSeqs: list[int]
    """The surface nodes the batch shadows, in surface order."""
    shadowedTokenCount: int
    nodesBefore: int
    nodesAfter: int
    tokensBefore: int
    tokensAfter: int
    archiveReasoning: NotRequired[bool]
    """Written (as False) only when assistant reasoning was left out of the archive."""


@dataclass(frozen=True)
class Landing:
    """The batch that lands one rewritten turn, and what it reports."""

    compaction_id: str
    checkpoint: str
    """``t<start seq>``: the archive key (and the name ``turns()`` shows)."""
    start: EventSpec
    replaces: tuple[EventSpec, ...]
    shadowed: tuple[int, ...]
    entry: dict[str, Any]
    """The archive entry of the shadowed nodes."""
    nodes_before: int
    nodes_after: int
    tokens_before: int
    tokens_after: int

    def specs(self, archive_error: str | None = None) -> list[EventSpec]:
        """The whole batch; ``archive_error`` (the archive write failed) replaces the bucket
        counts on ``compaction/end``."""
        archive: dict[str, Any] = (
            {"error": archive_error}
            if archive_error is not None
            else archive_mod.bucket_counts(self.entry)
        )
        data = self.start.data
        end = EventSpec(
            "compaction/end",
            {
                "compactionId": self.compaction_id,
                "turn": data["turn"],
                "job": data["job"],
                "archive": archive,
            },
            time=self.start.time,
        )
        return [self.start, *self.replaces, end]


def plan_landing(
    originals: Sequence[TurnNode],
    nodes: Sequence[Mapping[str, Any]],
    *,
    turn: int,
    job: str,
    start_seq: int,
    at_ms: int,
    session_id: str,
    event_of: Callable[[int], Event],
    count_tokens: Callable[[str], int],
    archive_reasoning: bool = True,
) -> Landing | None:
    """The batch landing ``nodes`` (the editor's final :meth:`as_data`) over ``originals``.

    ``start_seq`` is the seq the batch's ``compaction/start`` gets (its archive key and
    compaction id follow from it); ``event_of`` gives the logged event of a seq (the archive
    entry files the shadowed ones); ``count_tokens`` counts a produced node's text (a
    produced node costs its text plus the message overhead, an unchanged one what the
    original cost). None when nothing changed or the rewrite is not strictly smaller.
    """
    changed = [n for n in nodes if n["changed"]]
    if not changed:
        return None
    tokens_before = sum(n.tokens or 0 for n in originals)
    by_seq = {n.seq: n for n in originals}
    tokens_after = 0
    for node in nodes:
        if node["changed"]:
            tokens_after += MESSAGE_OVERHEAD_TOKENS + sum(
                count_tokens(str(b.get("text", ""))) for b in node["content"]
            )
        else:
            tokens_after += by_seq[node["landingSeqs"][0]].tokens or 0
    if tokens_after >= tokens_before:
        return None
    compaction_id = f"p{start_seq}"
    checkpoint = f"t{start_seq}"
    source = {
        "kind": TURN_SOURCE,
        "turn": turn,
        "job": job,
        "compactionId": compaction_id,
        "checkpoint": checkpoint,
    }
    replaces: list[EventSpec] = []
    shadowed: list[int] = []
    for node in changed:
        seqs = [int(s) for s in node["landingSeqs"]]
        shadowed += seqs
        message: dict[str, Any] = {
            "role": node["role"],
            "source": dict(source),
            "content": [dict(b) for b in node["content"]],
        }
        if node["role"] == "tool":
            message |= {
                "toolCallId": node["toolCallId"],
                "toolName": node["toolName"],
                "isError": bool(node["isError"]),
            }
        replaces.append(
            EventSpec(
                TYPE_BY_ROLE[node["role"]],
                {"message": message},
                Replace(seqs[0], seqs[-1]),
                tuple(sorted({*map(int, node["sourceSeqs"]), *seqs})),
                time=at_ms,
            )
        )
    shadowed_tokens = sum(by_seq[s].tokens or 0 for s in shadowed)
    data: TurnPassPayload = {
        "compactionId": compaction_id,
        "trigger": TURN_TRIGGER,
        "engine": TURN_ENGINE,
        "turn": turn,
        "job": job,
        "checkpoint": checkpoint,
        "replaces": len(replaces),
        "shadowedSeqs": shadowed,
        "shadowedTokenCount": shadowed_tokens,
        "nodesBefore": len(originals),
        "nodesAfter": len(nodes),
        "tokensBefore": tokens_before,
        "tokensAfter": tokens_after,
    }
    if not archive_reasoning:
        data["archiveReasoning"] = False
    entry = archive_mod.build_entry(
        [event_of(s) for s in shadowed],
        checkpoint=checkpoint,
        at_ms=at_ms,
        reason=TURN_TRIGGER,
        engine=TURN_ENGINE,
        tokens=shadowed_tokens,
        session_id=session_id,
        archive_reasoning=archive_reasoning,
    )
    return Landing(
        compaction_id=compaction_id,
        checkpoint=checkpoint,
        start=EventSpec("compaction/start", dict(data), time=at_ms),
        replaces=tuple(replaces),
        shadowed=tuple(shadowed),
        entry=entry,
        nodes_before=len(originals),
        nodes_after=len(nodes),
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )


# --------------------------------------------------------------------------- from the log


def is_turn_pass(event: Event) -> bool:
    """Whether ``event`` is the ``compaction/start`` of a turn-memory landing."""
    return event.type == "compaction/start" and event.data.get("trigger") == TURN_TRIGGER


def turn_passes(events: Sequence[Event]) -> Iterator[tuple[Event, Event | None]]:
    """Every turn-memory landing in log order: its ``compaction/start`` and its
    ``compaction/end`` (None while the log holds none)."""
    started: dict[str, Event] = {}
    order: list[str] = []
    ends: dict[str, Event] = {}
    for event in events:
        if is_turn_pass(event):
            cid = start_payload(event)["compactionId"]
            started[cid] = event
            order.append(cid)
        elif event.type == "compaction/end":
            cid = str(event.data.get("compactionId"))
            if cid in started and cid not in ends:
                ends[cid] = event
    for cid in order:
        yield started[cid], ends.get(cid)


def turn_entry(start: Event, event_of: Callable[[int], Event], session_id: str) -> dict[str, Any]:
    """The archive entry of the landing ``start`` opens, from its payload alone (identical to
    the one written when it landed)."""
    data = cast(TurnPassPayload, start.data)
    return archive_mod.build_entry(
        [event_of(int(s)) for s in data["shadowedSeqs"]],
        checkpoint=str(data["checkpoint"]),
        at_ms=start.time,
        reason=TURN_TRIGGER,
        engine=TURN_ENGINE,
        tokens=int(data["shadowedTokenCount"]),
        session_id=session_id,
        archive_reasoning=bool(data.get("archiveReasoning", True)),
    )


def turn_archive_entries(
    events: Sequence[Event], session_id: str
) -> dict[int, tuple[str, dict[str, Any]]]:
    """The archive entry of every turn-memory landing that committed (its ``compaction/end``
    has no ``error``, and its archive write did not fail), keyed by the seq of the landing's
    ``compaction/start``: the live archive got the entry just before that batch was written
    (for :func:`~dashr_ext._compaction.commit.rebuild_archive`'s ``extra``)."""
    entries: dict[int, tuple[str, dict[str, Any]]] = {}
    for start, end in turn_passes(events):
        if end is None or "error" in end.data:
            continue
        recorded = end.data.get("archive")
        if isinstance(recorded, Mapping) and "error" in recorded:
            continue
        entry = turn_entry(start, events.__getitem__, session_id)
        entries[start.seq] = (entry["meta"]["checkpoint"], entry)
    return entries
