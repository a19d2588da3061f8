"""Step 3 of a pass, ``compose``: the exact events a pass will append (SPEC §4.1, §7).

Pure: from the plan, the summarizer's text and the ids the log will assign, it builds the
``compaction/summary`` payload, the archive entry, the checkpoint node (framing, summary,
code-composed footers) and the inflation guard's verdict. The commit step only writes
what this returns. The summary is neutralised first (``neutralize_summary``): whatever a
summarizer copied from tool output, only code-composed text carries checkpoint ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _archive as archive_mod
from .._events import Event, EventSpec, Replace
from .._footers import (
    compose_footer,
    footer_form,
    frame_checkpoint,
    frame_compact,
    frame_stub,
    neutralize_summary,
)
from .._meter import MESSAGE_OVERHEAD_TOKENS
from .._names import names_to_data
from .._payloads import CHECKPOINT_SOURCE, SummarizerInfo, SummaryPayload, checkpoint_class
from .._pins import Pin, pins_block
from .._pointer import pointer_for
from .._summarizers.base import SummaryResult
from .plan import PassPlan

__all__ = [
    "MIN_SUMMARY_BODY",
    "Composition",
    "checkpoint_body",
    "checkpoint_specs",
    "checkpoint_text",
    "compose_pass",
    "compose_region",
    "fixed_text",
    "layout_data",
]


@dataclass(frozen=True)
class Composition:
    """One composed checkpoint: what the commit step writes, and the guard's verdict."""

    compaction_id: str
    checkpoint: str
    """``c<summary seq>``: the id in footers, archive keys and recall arguments."""
    at_ms: int
    data: SummaryPayload
    """The ``compaction/summary`` payload, with the archive bucket counts."""
    entry: dict[str, Any]
    """The archive entry (the shadowed originals, bucketed)."""
    shadowed: tuple[int, ...]
    shadowed_tokens: int
    checkpoint_tokens: int
    """Size of the longest checkpoint text this pass can commit (with the archive marker)."""

    @property
    def fits(self) -> bool:
        """The inflation guard: the checkpoint must be strictly smaller than what it shadows."""
        return self.checkpoint_tokens < self.shadowed_tokens

    def guard_message(self) -> str:
        return (
            f"inflation guard: the checkpoint (~{self.checkpoint_tokens} tokens) is not smaller "
            f"than what it would shadow (~{self.shadowed_tokens} tokens); nothing was committed"
        )


def compose_pass(
    plan: PassPlan,
    summaries: Sequence[SummaryResult],
    span: Sequence[Event],
    *,
    compaction_id: str,
    summary_seq: int,
    at_ms: int,
    session_id: str,
    archive_reasoning: bool,
    count_tokens: Callable[[str], int],
) -> Composition:
    """Compose the checkpoint of a one-region plan from its summary."""
    (region,) = plan.regions
    (result,) = summaries
    return compose_region(
        region.seqs,
        region.tokens,
        span,
        result.text,
        {"kind": result.kind, "model": result.model},
        trigger=plan.trigger,
        engine=plan.engine,
        compaction_id=compaction_id,
        summary_seq=summary_seq,
        at_ms=at_ms,
        session_id=session_id,
        archive_reasoning=archive_reasoning,
        count_tokens=count_tokens,
        extra=None if plan.layout is None else layout_data(plan.layout),
    )


def compose_region(
    shadowed: tuple[int, ...],
    shadowed_tokens: int,
    span: Sequence[Event],
    text: str,
    summarizer: SummarizerInfo,
    *,
    trigger: str,
    engine: str,
    compaction_id: str,
    summary_seq: int,
    at_ms: int,
    session_id: str,
    archive_reasoning: bool,
    count_tokens: Callable[[str], int],
    checkpoint_class: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Composition:
    """Compose one checkpoint shadowing the surface nodes ``shadowed`` (events ``span``).

    ``checkpoint_class`` (``stub``, ``state``, ``directory``) is recorded on the summary
    event and picks the framing; ``None`` is the summary engine's checkpoint (no key
    written, so its logs stay as they were). ``extra`` adds keys to the summary event.
    """
    # Stored as framed: the log, recall and the next pass's merge see what the model saw.
    # A directory's listing is composed by code from neutralised parts (see _rollup).
    summary = text if checkpoint_class == "directory" else neutralize_summary(text.strip())
    checkpoint = f"c{summary_seq}"
    data: SummaryPayload = {
        "compactionId": compaction_id,
        "checkpoint": checkpoint,
        "trigger": trigger,
        "engine": engine,
        "summary": summary,
        "shadowedRange": {"start": min(shadowed), "end": max(shadowed)},
        "shadowedSeqs": list(shadowed),
        "shadowedTokenCount": shadowed_tokens,
        "summarizer": summarizer,
        "archive": {},
    }
    if checkpoint_class is not None:
        data["checkpointClass"] = checkpoint_class
    if extra:
        data.update(extra)  # type: ignore[typeddict-item]
    if not archive_reasoning:
        data["archiveReasoning"] = False
    entry = archive_mod.build_entry(
        span,
        checkpoint=checkpoint,
        at_ms=at_ms,
        reason=trigger,
        engine=engine,
        tokens=shadowed_tokens,
        session_id=session_id,
        archive_reasoning=archive_reasoning,
    )
    data["archive"] = archive_mod.bucket_counts(entry)
    # The guard measures the longest text this pass can commit (with the marker).
    worst = checkpoint_text(data)
    return Composition(
        compaction_id=compaction_id,
        checkpoint=checkpoint,
        at_ms=at_ms,
        data=data,
        entry=entry,
        shadowed=shadowed,
        shadowed_tokens=shadowed_tokens,
        checkpoint_tokens=count_tokens(worst) + MESSAGE_OVERHEAD_TOKENS,
    )


MIN_SUMMARY_BODY = 64
"""The smallest summary-text budget a pass asks for, whatever its overhead."""


def fixed_text(
    form: str,
    seqs: Sequence[int],
    tokens: int,
    *,
    next_seq: int,
    checkpoint_class: str | None = None,
) -> tuple[str, int]:
    """The widest code-composed text a ``form`` checkpoint over ``seqs`` can get, and how
    many messages it takes (the pointer is a second message of the full form).

    Sized before the pass: the id is as wide as the log can make it, and the archive marker
    names every bucket with counts as wide as the span.
    """
    width = len(str(next_seq + 2 * len(seqs) + 16))
    checkpoint = "c" + "9" * width
    data: SummaryPayload = {
        "compactionId": "p0",
        "checkpoint": checkpoint,
        "trigger": "manual",
        "engine": "summary",
        "summary": "",
        "shadowedRange": {"start": min(seqs), "end": max(seqs)},
        "shadowedSeqs": list(seqs),
        "shadowedTokenCount": tokens,
        "summarizer": {"kind": "extractive", "model": None},
        "archive": dict.fromkeys(archive_mod.BUCKETS, len(seqs)),
    }
    if checkpoint_class is not None:
        data["checkpointClass"] = checkpoint_class
    if form != "full":
        data["footer"] = form
    text = checkpoint_text(data)
    if form == "full":
        return f"{text}\n{pointer_for(checkpoint, len(seqs), tokens)}", 2
    return text, 1


def layout_data(layout: Any) -> dict[str, Any]:
    """The ``compaction/summary`` keys that make the checkpoint text of a :class:`~.layout.Layout`.

    Written only when they differ from an old log's defaults (a full form without pins
    or names writes nothing), so logs of earlier versions compose as they did.
    """
    data: dict[str, Any] = {}
    if layout.form != "full":
        data["footer"] = layout.form
    if layout.pins:
        data["pins"] = [{"pin": p.id, "text": p.text} for p in layout.pins]
    if layout.names:
        data["names"] = names_to_data(layout.names)
    if layout.names_block:
        data["namesBlock"] = layout.names_block
    return data


def checkpoint_text(data: SummaryPayload) -> str:
    """The checkpoint node's text: framing, the tagged summary, then the footers.

    An index stub has no preamble (it is one of many short entries); a directory is its
    code-composed listing followed by its own footer.
    """
    role = checkpoint_class(data)
    if role == "stub":
        return frame_stub(data["summary"], compose_footer(data))
    if role == "directory":
        return f"{data['summary']}\n\n{compose_footer(data)}"
    body = checkpoint_body(data)
    form = footer_form(data)
    if form == "full":
        return frame_checkpoint(body, compose_footer(data))
    return frame_compact(body, compose_footer(data), tags=form == "compact")


def checkpoint_body(data: Mapping[str, Any]) -> str:
    """What a checkpoint's tags enclose: its pinned statements first (verbatim), the
    summary, then the names block; each part only when it says something.

    Composed from the ``compaction/summary`` payload alone (``pins``, ``summary``,
    ``namesBlock``), so a replay composes the same bytes.
    """
    pins = data.get("pins")
    pinned = ""
    if isinstance(pins, list):
        pinned = pins_block(
            [
                Pin(str(p["pin"]), p["text"], 0)
                for p in pins
                if isinstance(p, Mapping) and isinstance(p.get("text"), str) and "pin" in p
            ]
        )
    names = data.get("namesBlock")
    summary = str(data.get("summary", ""))
    parts = (pinned, summary, names if isinstance(names, str) else "")
    return "\n\n".join(part for part in parts if part)


def checkpoint_specs(
    composition: Composition, *, start_seq: int, archive_error: str | None, close: bool = True
) -> list[EventSpec]:
    """The pass's closing batch: ``compaction/summary``, the checkpoint node, ``compaction/end``.

    ``close=False`` leaves ``compaction/end`` out (a pass committing several regions
    closes once, after the last). ``archive_error`` (the archive write failed) replaces
    the bucket counts on the summary event, and the footer then leaves out the marker.
    """
    data: SummaryPayload = dict(composition.data)  # type: ignore[assignment]
    if archive_error is not None:
        data["archive"] = {"error": archive_error}
    shadowed = composition.shadowed
    summary_seq = int(composition.checkpoint[1:])
    message = {
        "role": "user",
        "source": {
            "kind": CHECKPOINT_SOURCE,
            "checkpoint": composition.checkpoint,
            "compactionId": composition.compaction_id,
            **({"checkpointClass": data["checkpointClass"]} if "checkpointClass" in data else {}),
        },
        "content": [{"type": "text", "text": checkpoint_text(data)}],
    }
    specs = [
        EventSpec("compaction/summary", dict(data), time=composition.at_ms),
        EventSpec(
            "user/message",
            {"message": message},
            Replace(shadowed[0], shadowed[-1]),
            (*shadowed, start_seq, summary_seq),
        ),
    ]
    if close:
        specs.append(EventSpec("compaction/end", {"compactionId": composition.compaction_id}))
    return specs
