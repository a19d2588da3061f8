"""Pruning: oversize outputs shrink in place, no model involved (SPEC §6.5).

A prune pass is one durable batch::

    compaction/start    {"compactionId", "trigger": "prune", "engine"}
    <one in-place replace per pruned node>   same type and pairing, head + marker + tail
    compaction/end      {"compactionId", "pruned": [{"seq", "replacedBy", "tokens"}, ...]}

Each original is archived verbatim under ``dashr_compaction_archive["p<seq>"]`` before the
batch is written. What is pruned:

* **oversize** nodes (above ``oversize_ratio × trigger``) wherever they are, the newest step
  included: a single output no compaction could otherwise bring under the window;
* in the retained tail, a unit above that share loses its largest outputs (above
  ``prune_threshold``) until it fits, so the tail never keeps one that large;
* **old** outputs (outside the retained tail, above ``prune_threshold``): only when asked
  (``prune()``, the overflow path) or when pruning them alone brings the request under the
  trigger; otherwise the summary pass condenses them from the originals.

Tool results and assistant texts are candidates (an assistant message keeps its tool
calls); a user message only when oversize (harnesses such as mini-swe-agent deliver tool
output as user messages; ordinary user text is what the user said). Checkpoints, pointers,
synthetic results and already-pruned nodes never are. Everything here but
:func:`prune_specs`' inputs is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._checkpoints import is_checkpoint
from .._events import Event, EventSpec, Replace
from .._pairing import SYNTHETIC_SOURCE
from .._pruned import Excerpt, archive_key, excerpt, is_pruned, pruned_message
from .._turns import Unit

__all__ = [
    "PruneItem",
    "PruneResult",
    "PrunedNode",
    "plan_prunes",
    "prunable_kind",
    "prune_specs",
    "pruned_nodes",
    "select_prunes",
]


@dataclass(frozen=True)
class PrunedNode:
    """One node a prune pass shrank."""

    seq: int
    """The original (shadowed; ``history_read(seq=…)`` shows it whole)."""
    replaced_by: int
    """The pruned node now on the surface."""
    role: str
    chars: int
    """Characters of the original's text."""
    tokens_before: int
    tokens_after: int
    archive_key: str | None
    """``p<seq>``, or None when the archive write failed (the log still has it)."""


@dataclass(frozen=True)
class PruneResult:
    """A committed prune pass."""

    compaction_id: str
    trigger: str
    pruned: tuple[PrunedNode, ...]
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class PruneItem:
    """A planned prune: the node at surface ``position`` and what of it stays."""

    position: int
    event: Event
    text: str
    part: Excerpt
    tokens_before: int
    tokens_after: int
    """Measured on the composed text (archive marker included)."""


def prunable_kind(event: Event) -> str | None:
    """``tool``, ``assistant`` or ``user`` for a node pruning may shrink, else None."""
    message = event.message
    if is_pruned(message) or is_checkpoint(event):
        return None
    if event.type == "tool/result":
        return None if message.source_kind == SYNTHETIC_SOURCE else "tool"
    if event.type == "assistant/message":
        return "assistant"
    if event.type == "user/message" and message.source_kind == "user":
        return "user"
    return None


def select_prunes(
    events: Sequence[Event],
    tokens: Sequence[int],
    units: Sequence[Unit],
    cut: int,
    *,
    threshold: int,
    oversize: int,
    keep_tokens: int,
    old: bool,
    span: tuple[int, int] | None = None,
) -> list[int]:
    """Surface positions to prune, ascending (see the module docstring for the rules).

    ``events``/``tokens`` are the surface's nodes and their measured sizes; ``cut`` the
    retain cut (positions before it are outside the retained tail); ``keep_tokens`` an
    estimate of a pruned node's size; ``old`` also takes old outputs above ``threshold``;
    ``span`` (inclusive positions) limits the choice to an explicit range, all of it old.
    """
    kinds = [prunable_kind(e) for e in events]
    lo, hi = span if span is not None else (0, len(events) - 1)
    chosen: set[int] = set()
    for unit in units:
        in_tail = span is None and unit.start >= cut
        for p in range(max(unit.start, lo), min(unit.end, hi + 1)):
            kind = kinds[p]
            if kind is None:
                continue
            if tokens[p] > oversize or (
                kind != "user" and tokens[p] > threshold and old and not in_tail
            ):
                chosen.add(p)
        if not in_tail:
            continue
        size = sum(keep_tokens if p in chosen else tokens[p] for p in range(unit.start, unit.end))
        larger = sorted(
            (
                p
                for p in range(unit.start, unit.end)
                if kinds[p] in ("tool", "assistant") and p not in chosen and tokens[p] > threshold
            ),
            key=lambda p: (-tokens[p], p),
        )
        for p in larger:
            if size <= oversize:
                break
            chosen.add(p)
            size -= tokens[p] - keep_tokens
    return sorted(chosen)


def plan_prunes(
    events: Sequence[Event],
    tokens: Sequence[int],
    positions: Sequence[int],
    *,
    keep_chars: int,
    count_tokens: Callable[[str], int],
) -> list[PruneItem]:
    """The items of ``positions`` that pruning actually makes smaller."""
    items: list[PruneItem] = []
    for p in positions:
        event = events[p]
        text = event.message.text
        part = excerpt(text, keep_chars)
        if part is None:
            continue
        message = pruned_message(
            event.message, event.seq, text, part, tokens=tokens[p], archived=True
        )
        body = count_tokens(message["content"][0]["text"])
        dropped = count_tokens(text) + count_tokens(event.message.reasoning)
        after = max(body, tokens[p] - dropped + body)  # the rest (calls, framing) stays
        if after < tokens[p]:
            items.append(PruneItem(p, event, text, part, tokens[p], after))
    return items


def prune_specs(
    items: Sequence[PruneItem],
    *,
    compaction_id: str,
    engine: str,
    next_seq: int,
    at_ms: int,
    archived: bool,
    archive_reasoning: bool = True,
) -> list[EventSpec]:
    """The pass's one batch: ``compaction/start``, the in-place replaces, ``compaction/end``.

    ``next_seq`` is the seq the start event gets; ``at_ms`` every event's time (the archive
    entries use it, so a rebuild from the log is identical).
    """
    start: dict[str, Any] = {"compactionId": compaction_id, "trigger": "prune", "engine": engine}
    if not archive_reasoning:
        start["archiveReasoning"] = False
    specs = [EventSpec("compaction/start", start, time=at_ms)]
    summary = []
    for i, item in enumerate(items):
        seq = item.event.seq
        message = pruned_message(
            item.event.message,
            seq,
            item.text,
            item.part,
            tokens=item.tokens_before,
            archived=archived,
            compaction_id=compaction_id,
        )
        specs.append(
            EventSpec(item.event.type, {"message": message}, Replace(seq, seq), (seq,), time=at_ms)
        )
        summary.append({"seq": seq, "replacedBy": next_seq + 1 + i, "tokens": item.tokens_before})
    specs.append(
        EventSpec("compaction/end", {"compactionId": compaction_id, "pruned": summary}, time=at_ms)
    )
    return specs


def pruned_nodes(
    items: Sequence[PruneItem], next_seq: int, *, archived: bool
) -> tuple[PrunedNode, ...]:
    """What a committed pass reports, one :class:`PrunedNode` per item."""
    return tuple(
        PrunedNode(
            seq=item.event.seq,
            replaced_by=next_seq + 1 + i,
            role=item.event.message.role,
            chars=len(item.text),
            tokens_before=item.tokens_before,
            tokens_after=item.tokens_after,
            archive_key=archive_key(item.event.seq) if archived else None,
        )
        for i, item in enumerate(items)
    )
