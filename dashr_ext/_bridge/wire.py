"""The bridge's result values as JSON and back: pure, so both ends use one definition.

The kernel turns what the controller returns (events, measurements, compaction and prune
results, a dry run's plan) into the camelCase JSON of ``docs/bridge.md``; the client turns it
back into the same dataclasses, so :class:`~dashr_ext.bridge.KernelSession` returns what
:class:`~dashr_ext.Dashr` returns. A measurement crosses without its per-node list
(``nodes`` comes back empty): it is as long as the surface and no caller of the bridge needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._compaction import CompactionResult, PrunedNode, PruneResult
from .._compaction.plan import PassPlan
from .._events import Event
from .._meter import Measurement

__all__ = [
    "compaction_from_json",
    "compaction_json",
    "event_json",
    "events_from_json",
    "measurement_from_json",
    "measurement_json",
    "plan_json",
    "prune_from_json",
    "prune_json",
]


def event_json(event: Event) -> dict[str, Any]:
    """The event's log line as an object (exactly what the session file holds)."""
    return dict(event.to_json())


def events_from_json(items: object) -> list[Event]:
    """Events back from :func:`event_json` objects (validated like a log line)."""
    return [Event.from_json(item) for item in items] if isinstance(items, list) else []


def measurement_json(m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "total": m.total,
        "envelope": m.envelope,
        "counted": m.counted,
        "anchored": m.anchored,
    }
    if m.anchored:
        out["anchorSeq"] = m.anchor_seq
        out["promptTokens"] = m.prompt_tokens
    return out


def measurement_from_json(obj: Mapping[str, Any]) -> Measurement:
    return Measurement(
        total=int(obj["total"]),
        nodes=[],
        envelope=int(obj["envelope"]),
        anchored=bool(obj["anchored"]),
        counted=int(obj["counted"]),
        anchor_seq=obj.get("anchorSeq"),
        prompt_tokens=obj.get("promptTokens"),
    )


def prune_json(r: PruneResult) -> dict[str, Any]:
    return {
        "compactionId": r.compaction_id,
        "trigger": r.trigger,
        "pruned": [
            {
                "seq": n.seq,
                "replacedBy": n.replaced_by,
                "role": n.role,
                "chars": n.chars,
                "tokensBefore": n.tokens_before,
                "tokensAfter": n.tokens_after,
                "archiveKey": n.archive_key,
            }
            for n in r.pruned
        ],
        "tokensBefore": r.tokens_before,
        "tokensAfter": r.tokens_after,
    }


def prune_from_json(obj: Mapping[str, Any] | None) -> PruneResult | None:
    if obj is None:
        return None
    return PruneResult(
        compaction_id=obj["compactionId"],
        trigger=obj["trigger"],
        pruned=tuple(
            PrunedNode(
                seq=n["seq"],
                replaced_by=n["replacedBy"],
                role=n["role"],
                chars=n["chars"],
                tokens_before=n["tokensBefore"],
                tokens_after=n["tokensAfter"],
                archive_key=n["archiveKey"],
            )
            for n in obj["pruned"]
        ),
        tokens_before=obj["tokensBefore"],
        tokens_after=obj["tokensAfter"],
    )


def compaction_json(r: CompactionResult) -> dict[str, Any]:
    return {
        "checkpoint": r.checkpoint,
        "checkpoints": list(r.checkpoints),
        "trigger": r.trigger,
        "shadowedSeqs": list(r.shadowed_seqs),
        "tokensBefore": r.tokens_before,
        "tokensAfter": r.tokens_after,
        "summarySeq": r.summary_seq,
        "compactionId": r.compaction_id,
        "archived": None if r.archived is None else dict(r.archived),
        "pruned": None if r.pruned is None else prune_json(r.pruned),
    }


def compaction_from_json(obj: Mapping[str, Any] | None) -> CompactionResult | None:
    if obj is None:
        return None
    archived = obj["archived"]
    return CompactionResult(
        checkpoint=obj["checkpoint"],
        trigger=obj["trigger"],
        shadowed_seqs=tuple(obj["shadowedSeqs"]),
        tokens_before=obj["tokensBefore"],
        tokens_after=obj["tokensAfter"],
        archived=None if archived is None else dict(archived),
        summary_seq=obj["summarySeq"],
        compaction_id=obj["compactionId"],
        checkpoints=tuple(obj["checkpoints"]),
        pruned=prune_from_json(obj["pruned"]),
    )


def plan_json(plan: PassPlan, tokens_now: int) -> dict[str, Any]:
    """What a dry run reports: the regions a pass would replace, nothing committed."""
    return {
        "engine": plan.engine,
        "trigger": plan.trigger,
        "regions": [{"seqs": list(r.seqs), "tokens": r.tokens} for r in plan.regions],
        "shadowedSeqs": [q for r in plan.regions for q in r.seqs],
        "shadowedTokens": plan.shadowed_tokens,
        "tokensNow": tokens_now,
    }
