"""Checkpoints as the log records them: which node is one, and what each replaced (SPEC §4.1).

A pass commits a ``compaction/summary`` event and a checkpoint node (a ``user/message``
whose ``source.kind`` is ``"compact-checkpoint"``); everything here is a pure fold of those
events, so recall, the plot, the agent, the CLI and the compaction protocol read
checkpoints without depending on any engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ._events import Event
from ._payloads import CHECKPOINT_SOURCE, checkpoint_class, summary_payload

__all__ = [
    "Checkpoint",
    "CheckpointIndex",
    "checkpoint_of",
    "checkpoints",
    "clipped",
    "is_checkpoint",
    "summary_of",
    "summary_preview",
    "summary_seq",
]


class EventLog(Protocol):
    """What a fold over the log needs: the events, index == seq."""

    @property
    def events(self) -> Sequence[Event]: ...


def is_checkpoint(event: Event) -> bool:
    """True for a checkpoint node (a compaction summary standing in for older history)."""
    return event.type == "user/message" and event.message.source_kind == CHECKPOINT_SOURCE


def checkpoint_of(event: Event, events: Sequence[Event] | None = None) -> str | None:
    """The checkpoint id of a checkpoint node, or None for any other event.

    The id is the node's ``source.checkpoint``. A node that carries only the source kind (the
    minimum SPEC §3.1.1 requires, as other tools writing this vocabulary do) gets the id of
    its pass's ``compaction/summary`` event, found in the log's ``events`` when given. Given
    the events, a recorded id that does not name an earlier ``compaction/summary`` of that
    id (``cX``, ``c-1``, a seq past the node or of another event) counts as absent, so every
    id returned names the summary event at its seq; without them it is taken as recorded.
    """
    if event.type != "user/message":
        return None
    source = event.message.source
    if source.get("kind") != CHECKPOINT_SOURCE:
        return None
    checkpoint = source.get("checkpoint")
    if events is None:
        return checkpoint if isinstance(checkpoint, str) else None
    if isinstance(checkpoint, str) and _names_summary(checkpoint, event.seq, events):
        return checkpoint
    return _derived_checkpoint(event, events)


def summary_of(event: Event, events: Sequence[Event]) -> Event | None:
    """The ``compaction/summary`` event of checkpoint node ``event``, or None (any other event,
    or a node whose pass's summary cannot be found)."""
    seq = summary_seq(checkpoint_of(event, events))
    return None if seq is None else events[seq]


def summary_seq(checkpoint: str | None) -> int | None:
    """The seq a checkpoint id ``c<seq>`` names (ASCII digits only), or None."""
    if checkpoint is None or checkpoint[:1] != "c":
        return None
    digits = checkpoint[1:]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def _names_summary(checkpoint: str, node_seq: int, events: Sequence[Event]) -> bool:
    """Whether ``checkpoint`` is ``c<seq>`` of a ``compaction/summary`` before ``node_seq``
    that records that id (``c014`` names no summary: a summary records ``c14``)."""
    seq = summary_seq(checkpoint)
    if seq is None or seq >= min(node_seq, len(events)):
        return False
    summary = events[seq]
    return summary.type == "compaction/summary" and summary.data.get("checkpoint") == checkpoint


def _derived_checkpoint(node: Event, events: Sequence[Event]) -> str | None:
    """``c<seq>`` of the ``compaction/summary`` event behind a checkpoint node without an id.

    That is the summary event among the seqs the node's ``sourceEventSeqs`` name (this package
    lists it there), else the nearest earlier summary of the same pass (back to its
    ``compaction/start``) whose ``shadowedSeqs`` the node replaces.
    """
    sources = node.source_event_seqs or ()
    for seq in sorted(sources, reverse=True):
        if 0 <= seq < node.seq and events[seq].type == "compaction/summary":
            return f"c{seq}"
    replaced = set(sources)
    for seq in range(min(node.seq, len(events)) - 1, -1, -1):
        event = events[seq]
        if event.type == "compaction/start":
            break
        if event.type == "compaction/summary":
            shadowed = event.data.get("shadowedSeqs")
            if (
                isinstance(shadowed, list)
                and shadowed
                and all(type(s) is int for s in shadowed)
                and replaced.issuperset(shadowed)
            ):
                return f"c{seq}"
    return None


@dataclass(frozen=True)
class Checkpoint:
    id: str
    summary_seq: int
    shadowed_seqs: tuple[int, ...]
    shadowed_tokens: int
    superseded_by: str | None
    time: int
    """Epoch ms of the pass's ``compaction/summary`` event."""
    preview: str
    node_seq: int
    """Seq of the checkpoint's surface node (the replacement ``user/message``)."""
    trigger: str
    role: str = "summary"
    """``checkpointClass`` of its pass: ``summary``, ``stub``, ``state`` or ``directory``."""
    form: str = "full"
    """The form of its code-composed text (``footer`` of its pass): ``full``, ``compact`` or
    ``minimal``; only a full checkpoint gets a pointer message (SPEC §7.2)."""


class CheckpointIndex:
    """Committed checkpoints of one session, folded incrementally as its log grows.

    :meth:`update` reads only the events appended since the last call: a checkpoint node
    adds its checkpoint and marks every earlier checkpoint whose node it shadows as
    superseded. Events never change once appended, so nothing else needs revisiting.
    """

    def __init__(self) -> None:
        self.items: list[Checkpoint] = []
        self._seen = 0
        self._by_node: dict[int, int] = {}

    def update(
        self, log: EventLog, only: Iterable[int] | None = None, previews: bool = True
    ) -> bool:
        """Fold the new events; True when a checkpoint was added or superseded.

        ``only`` (ascending seqs) limits the fold to those of the new events, for a caller
        that knows no other new event is a checkpoint node; without ``previews`` every
        checkpoint's preview is left empty (a caller that never shows it).
        """
        events = log.events
        changed = False
        new = range(self._seen, len(events))
        for seq in new if only is None else (s for s in only if s in new):
            checkpoint = checkpoint_of(events[seq], events)
            at = summary_seq(checkpoint)
            if checkpoint is None or at is None:
                continue
            summary = events[at]
            data = summary_payload(summary)
            if data["checkpoint"] != checkpoint:  # a derived id whose summary records another
                continue
            for shadowed in data["shadowedSeqs"]:
                i = self._by_node.get(shadowed)
                if i is not None:
                    self.items[i] = replace(self.items[i], superseded_by=checkpoint)
            self._by_node[seq] = len(self.items)
            self.items.append(
                Checkpoint(
                    id=checkpoint,
                    summary_seq=at,
                    shadowed_seqs=tuple(data["shadowedSeqs"]),
                    shadowed_tokens=int(data["shadowedTokenCount"]),
                    superseded_by=None,
                    time=summary.time,
                    preview=clipped(summary_preview(str(data["summary"])), 120) if previews else "",
                    node_seq=seq,
                    trigger=str(data["trigger"]),
                    role=checkpoint_class(data),
                    form=_form(data.get("footer")),
                )
            )
            changed = True
        self._seen = len(events)
        return changed


def _form(value: object) -> str:
    return value if isinstance(value, str) and value in ("compact", "minimal") else "full"


def checkpoints(log: EventLog) -> list[Checkpoint]:
    """Committed checkpoints of a session, oldest first, with what superseded each."""
    index = CheckpointIndex()
    index.update(log)
    return index.items


def summary_preview(summary: str) -> str:
    """One line saying what a summary is about now.

    Prefers the first line of its "Current Work" (a summary) or "Current State" (a state
    checkpoint) section, what differs between successive merged checkpoints, else its
    first content line; list markers and labels are dropped.
    """
    lines = [ln.strip() for ln in summary.splitlines()]
    start = 0
    for i, line in enumerate(lines):
        if line.lstrip("#").strip().lower() in ("current work", "current state"):
            start = i + 1
            break
    for line in lines[start:]:
        text = line.lstrip("-*> ").strip()
        if text and not line.startswith("#") and not text.endswith(":"):
            return text
    return ""


def clipped(text: str, limit: int) -> str:
    """``text`` when it fits ``limit`` characters, else its words that fit with ``…`` after
    them (cut inside a word only when no word boundary lies in the last half)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if not text[limit - 1].isspace():
        space = cut.rfind(" ")
        if space >= limit // 2:
            cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"
