"""The compaction protocol shared by every engine (SPEC 4).

One pass appends, in this order::

    compaction/start    log-only: takes the lock
    [summarize: slow, may fail]
    compaction/summary  log-only: provenance, raw summary, archive counts
    user/message        the checkpoint (source kind "compact-checkpoint"), surfaceOp replace
    compaction/end      log-only: releases the lock; carries "error" on a recoverable failure

The last three are one durable batch, so a crash leaves either the whole commit or an
orphan ``compaction/start`` (inert: the surface is unchanged). An engine subclass decides
*which* surface range a trigger compacts; this base owns everything else: the lock, the
inflation guard, archiving, footers and the commit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .. import archive as archive_mod
from ..config import MIN_SUMMARY_TOKENS
from ..errors import CompactionError, CompactionInProgressError, SummarizerError, SurfaceError
from ..events import Event, now_ms
from ..footers import frame_checkpoint
from ..meter import MESSAGE_OVERHEAD_TOKENS
from ..session import EventSpec, Session
from ..summarizers.base import Summarizer, SummaryRequest

if TYPE_CHECKING:
    from ..config import CompactionConfig
    from ..meter import Measurement, TokenMeter

__all__ = [
    "CHECKPOINT_SOURCE",
    "Checkpoint",
    "CheckpointIndex",
    "CompactionEngine",
    "CompactionResult",
    "CompactionWarning",
    "Trigger",
    "checkpoint_of",
    "checkpoints",
]

Trigger = Literal["pressure", "context-overflow", "manual"]
TRIGGERS: tuple[str, ...] = ("pressure", "context-overflow", "manual")
CHECKPOINT_SOURCE = "compact-checkpoint"


class CompactionWarning(UserWarning):
    """An automatic pass failed; the request goes out uncompacted."""


@dataclass(frozen=True)
class CompactionResult:
    checkpoint: str
    """The checkpoint id ``c<summarySeq>`` used in footers, archive keys and recall."""
    trigger: str
    shadowed_seqs: tuple[int, ...]
    tokens_before: int
    tokens_after: int
    archived: dict[str, int] | None
    """Archive bucket counts, or None when archiving failed."""
    summary_seq: int
    compaction_id: str


def checkpoint_of(event: Event) -> str | None:
    """The checkpoint id of a checkpoint node, or None for any other event."""
    if event.type != "user/message":
        return None
    source = event.message.source
    if source.get("kind") != CHECKPOINT_SOURCE:
        return None
    checkpoint = source.get("checkpoint")
    return checkpoint if isinstance(checkpoint, str) else None


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

    def update(self, session: Session) -> bool:
        """Fold the new events; True when a checkpoint was added or superseded."""
        events = session.events
        changed = False
        for seq in range(self._seen, len(events)):
            checkpoint = checkpoint_of(events[seq])
            summary_seq = _summary_seq(checkpoint)
            if checkpoint is None or summary_seq is None or summary_seq >= seq:
                continue
            summary = events[summary_seq]
            if summary.type != "compaction/summary" or summary.data["checkpoint"] != checkpoint:
                continue
            data = summary.data
            for shadowed in data["shadowedSeqs"]:
                i = self._by_node.get(shadowed)
                if i is not None:
                    self.items[i] = replace(self.items[i], superseded_by=checkpoint)
            self._by_node[seq] = len(self.items)
            self.items.append(
                Checkpoint(
                    id=checkpoint,
                    summary_seq=summary_seq,
                    shadowed_seqs=tuple(data["shadowedSeqs"]),
                    shadowed_tokens=int(data["shadowedTokenCount"]),
                    superseded_by=None,
                    time=summary.time,
                    preview=summary_preview(str(data["summary"]))[:120],
                    node_seq=seq,
                    trigger=str(data["trigger"]),
                )
            )
            changed = True
        self._seen = len(events)
        return changed


def _summary_seq(checkpoint: str | None) -> int | None:
    if checkpoint is None or not checkpoint[1:].isdigit():
        return None
    return int(checkpoint[1:])


def checkpoints(session: Session) -> list[Checkpoint]:
    """Committed checkpoints of a session, oldest first, with what superseded each."""
    index = CheckpointIndex()
    index.update(session)
    return index.items


def summary_preview(summary: str) -> str:
    """One line saying what a summary is about now.

    Prefers the first line of its "Current Work" section (what differs between successive
    merged checkpoints), else its first content line; list markers and labels are dropped.
    """
    lines = [ln.strip() for ln in summary.splitlines()]
    start = 0
    for i, line in enumerate(lines):
        if line.lstrip("#").strip().lower() == "current work":
            start = i + 1
            break
    for line in lines[start:]:
        text = line.lstrip("-*> ").strip()
        if text and not line.startswith("#") and not text.endswith(":"):
            return text
    return ""


class CompactionEngine:
    """Base engine: the pass protocol. Subclasses choose ranges (:meth:`select`)."""

    name = "base"

    def __init__(
        self,
        session: Session,
        config: CompactionConfig,
        meter: TokenMeter,
        summarizer: Summarizer,
        archive: MutableMapping[str, Any],
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.session = session
        self.config = config
        self.meter = meter
        self.summarizer = summarizer
        self.archive = archive
        self.clock = clock
        self.last_error: str | None = None
        self._active: str | None = None
        self.extra_envelope_tokens: Callable[[], int] = lambda: 0
        """Tokens the request envelope carries beyond the session header (e.g. tool schemas
        the harness adds); the controller sets it."""

    def measure(self) -> Measurement:
        """The meter's measurement of the next request, plus the extra envelope tokens.

        When the total is anchored on a provider's usage report, that report already
        counted the whole envelope and nothing is added.
        """
        measured = self.meter.measure(self.session)
        extra = 0 if measured.anchored else self.extra_envelope_tokens()
        if not extra:
            return measured
        return replace(
            measured,
            total=measured.total + extra,
            counted=measured.counted + extra,
            envelope=measured.envelope + extra,
        )

    # ------------------------------------------------------------------ hooks

    def select(self, trigger: str) -> tuple[int, int] | None:
        """Surface positions ``(first, last)`` (inclusive) this trigger compacts, or None."""
        raise NotImplementedError

    def select_overflow(self) -> tuple[int, int] | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ triggers

    @property
    def in_progress(self) -> bool:
        return self._active is not None

    def before_request(self) -> list[CompactionResult]:
        """The pressure trigger: compact while over the threshold (``compaction_retries`` more).

        Never raises for a failed pass: it is recorded (``compaction/end`` with ``error``),
        a :class:`CompactionWarning` is issued, and the request goes out uncompacted.
        """
        results: list[CompactionResult] = []
        if not self.config.auto or self.session.read_only:
            return results
        budget = self.config.max_summary_tokens
        for attempt in range(self.config.compaction_retries + 1):
            total = self.measure().total
            if not self.config.should_compact(total):
                break
            span = self.select("pressure") if attempt == 0 else self._select_retry()
            if span is None:
                break
            try:
                results.append(self.run_pass("pressure", span, max_summary_tokens=budget))
            except (CompactionError, SurfaceError) as exc:
                if isinstance(exc, CompactionInProgressError):
                    raise
                warnings.warn(
                    f"compaction pass failed, continuing uncompacted: {exc}",
                    CompactionWarning,
                    stacklevel=3,
                )
                break
            budget = max(MIN_SUMMARY_TOKENS, budget // 2)
        return results

    def _select_retry(self) -> tuple[int, int] | None:
        """After a pass that left the total above the threshold: the head range again."""
        return self.select("pressure-retry")

    def compact(
        self,
        trigger: str = "manual",
        *,
        start_seq: int | None = None,
        end_seq: int | None = None,
    ) -> CompactionResult | None:
        """Run one pass now; None when nothing is compactable. Failures raise."""
        if trigger not in TRIGGERS:
            raise CompactionError(
                f"trigger: expected one of {', '.join(TRIGGERS)}, got {trigger!r}"
            )
        if (start_seq is None) != (end_seq is None):
            raise CompactionError(
                "give both start_seq and end_seq for an explicit range, or neither"
            )
        if start_seq is not None and end_seq is not None:
            span: tuple[int, int] | None = self._explicit_range(start_seq, end_seq)
        elif trigger == "context-overflow":
            span = self.select_overflow()
        else:
            span = self.select(trigger)
        if span is None:
            return None
        return self.run_pass(trigger, span, max_summary_tokens=self.config.max_summary_tokens)

    def handle_overflow(self) -> bool:
        """Forced reduction after a provider's context-length error.

        Returns True when the surface changed, so the caller retries the request once.
        """
        before = self.session.surface_version
        span = self.select_overflow()
        if span is None:
            return False
        try:
            self.run_pass(
                "context-overflow", span, max_summary_tokens=self.config.max_summary_tokens
            )
        except (CompactionError, SurfaceError) as exc:
            if isinstance(exc, CompactionInProgressError):
                raise
            warnings.warn(f"overflow compaction failed: {exc}", CompactionWarning, stacklevel=2)
            return False
        return self.session.surface_version != before

    def _explicit_range(self, start_seq: int, end_seq: int) -> tuple[int, int]:
        s = self.session
        for seq in (start_seq, end_seq):
            if not s.is_current(seq):
                raise SurfaceError(
                    f"seq {seq} is not on the current surface; current seqs: "
                    f"{_describe_seqs(s.surface)}"
                )
        a, b = s.position(start_seq), s.position(end_seq)
        if a > b:
            raise SurfaceError(
                f"start_seq {start_seq} comes after end_seq {end_seq} on the surface"
            )
        cuts = s.balanced_cuts()
        if not (cuts[a] and cuts[b + 1]):
            raise SurfaceError(
                f"range {start_seq}..{end_seq} would split a tool call from its result"
            )
        executing = s.executing_seqs()
        if any(seq in executing for seq in s.surface[a : b + 1]):
            raise SurfaceError("the range includes the step executing right now")
        return a, b

    # ------------------------------------------------------------------ the pass

    def run_pass(
        self, trigger: str, span: tuple[int, int], *, max_summary_tokens: int
    ) -> CompactionResult:
        """Compact surface positions ``span`` (inclusive) into one checkpoint node."""
        if self._active is not None:
            raise CompactionInProgressError(
                f"compaction pass {self._active} is still running for session {self.session.id}; "
                "wait for it to finish"
            )
        s = self.session
        a, b = span
        shadowed = tuple(s.surface[a : b + 1])
        measurement = self.measure()
        tokens_by_seq = dict(measurement.nodes)
        shadowed_tokens = sum(tokens_by_seq[q] for q in shadowed)
        compaction_id = f"p{len(s)}"
        start = s.append_log(
            "compaction/start",
            {"compactionId": compaction_id, "trigger": trigger, "engine": self.name},
        )
        self._active = compaction_id
        version = s.surface_version
        undo: dict[str, Any] = {}
        try:
            span_events = [s.event(q) for q in shadowed]
            result = self.summarizer.summarize(
                SummaryRequest(
                    span=span_events,
                    previous_summary=self._previous_summary(span_events),
                    max_summary_tokens=max_summary_tokens,
                    prefix_messages=self._prefix_messages(a, b),
                    count_tokens=self.meter.count_text,
                    tools=s.tools,
                )
            )
            summary = result.text.strip()
            if not summary:
                raise SummarizerError(f"{result.kind} summarizer returned an empty summary")
            if s.surface_version != version:
                raise CompactionError("the surface changed while the pass was summarizing")
            summary_seq = len(s)
            checkpoint = f"c{summary_seq}"
            at_ms = self.clock()
            data: dict[str, Any] = {
                "compactionId": compaction_id,
                "checkpoint": checkpoint,
                "trigger": trigger,
                "engine": self.name,
                "summary": summary,
                "shadowedRange": {"start": min(shadowed), "end": max(shadowed)},
                "shadowedSeqs": list(shadowed),
                "shadowedTokenCount": shadowed_tokens,
                "summarizer": {"kind": result.kind, "model": result.model},
                "archive": {},
            }
            if not self.config.archive_reasoning:
                data["archiveReasoning"] = False
            entry = archive_mod.build_entry(
                span_events,
                checkpoint=checkpoint,
                at_ms=at_ms,
                reason=trigger,
                engine=self.name,
                tokens=shadowed_tokens,
                session_id=s.id,
                archive_reasoning=self.config.archive_reasoning,
            )
            counts = archive_mod.bucket_counts(entry)
            # The guard measures the longest text this pass can commit (with the marker).
            data["archive"] = counts
            worst = frame_checkpoint(summary, archive_mod.compose_footer(data))
            new_tokens = self.meter.count_text(worst) + MESSAGE_OVERHEAD_TOKENS
            if new_tokens >= shadowed_tokens:
                raise CompactionError(
                    f"inflation guard: the checkpoint (~{new_tokens} tokens) is not smaller than "
                    f"what it would shadow (~{shadowed_tokens} tokens); nothing was committed"
                )
            try:
                self._write_archive(checkpoint, entry, undo)
            except Exception as exc:  # any archive failure degrades, never blocks the pass
                _restore(self.archive, undo)
                data["archive"] = {"error": f"{type(exc).__name__}: {exc}"}
            text = frame_checkpoint(summary, archive_mod.compose_footer(data))
            message = {
                "role": "user",
                "source": {
                    "kind": CHECKPOINT_SOURCE,
                    "checkpoint": checkpoint,
                    "compactionId": compaction_id,
                },
                "content": [{"type": "text", "text": text}],
            }
            s.append(
                [
                    EventSpec("compaction/summary", data, time=at_ms),
                    EventSpec(
                        "user/message",
                        {"message": message},
                        _replace(shadowed),
                        (*shadowed, start.seq, summary_seq),
                    ),
                    EventSpec("compaction/end", {"compactionId": compaction_id}),
                ]
            )
        except BaseException as exc:
            self._active = None
            _restore(self.archive, undo)  # the archive matches the log again
            reason = _error_text(exc)
            self.last_error = reason
            s.append_log("compaction/end", {"compactionId": compaction_id, "error": reason})
            if isinstance(exc, CompactionError | SurfaceError):
                raise
            if isinstance(exc, Exception):
                raise CompactionError(f"compaction pass {compaction_id} failed: {reason}") from exc
            raise
        self._active = None
        self.last_error = None
        after = self.measure().total
        return CompactionResult(
            checkpoint=checkpoint,
            trigger=trigger,
            shadowed_seqs=shadowed,
            tokens_before=measurement.total,
            tokens_after=after,
            archived=None if "error" in data["archive"] else dict(data["archive"]),
            summary_seq=summary_seq,
            compaction_id=compaction_id,
        )

    def _write_archive(self, checkpoint: str, entry: dict[str, Any], undo: dict[str, Any]) -> None:
        """Store ``entry`` and evict past the cap; ``undo`` records every value replaced."""
        undo[checkpoint] = self.archive.get(checkpoint, _MISSING)
        self.archive[checkpoint] = entry
        for cid in archive_mod.apply_cap(self.archive, self.config.archive_max_bytes):
            undo.setdefault(cid, self.archive[cid])
            self.archive[cid] = archive_mod.evicted_stub(self.archive[cid])

    def _previous_summary(self, span: Sequence[Event]) -> str | None:
        summaries = []
        for event in span:
            checkpoint = checkpoint_of(event)
            if checkpoint is not None:
                summary_event = self.session.event(int(checkpoint[1:]))
                summaries.append(str(summary_event.data["summary"]))
        return "\n\n".join(summaries) if summaries else None

    def _prefix_messages(self, a: int, b: int) -> list[dict[str, Any]]:
        """The request as the model saw it, up to the end of the compacted range."""
        from ..formats.openai import event_to_openai

        messages = self.session.messages()
        offset = len(messages) - len(self.session.surface)
        return (
            messages[: offset + b + 1]
            if a == 0
            else [
                *messages[:offset],
                *(event_to_openai(self.session.event(q)) for q in self.session.surface[a : b + 1]),
            ]
        )


_MISSING: Any = object()


def _restore(archive: MutableMapping[str, Any], undo: dict[str, Any]) -> None:
    """Put back what a pass's archive write replaced (newest change first)."""
    for key, value in reversed(list(undo.items())):
        if value is _MISSING:
            archive.pop(key, None)
        else:
            archive[key] = value
    undo.clear()


def _replace(shadowed: Sequence[int]) -> Any:
    from ..events import Replace

    return Replace(shadowed[0], shadowed[-1])


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return (
        text if isinstance(exc, CompactionError | SurfaceError) else f"{type(exc).__name__}: {text}"
    )


def _describe_seqs(seqs: Sequence[int]) -> str:
    if len(seqs) <= 12:
        return ", ".join(map(str, seqs))
    return f"{', '.join(map(str, seqs[:6]))}, …, {', '.join(map(str, seqs[-6:]))}"


def rebuild_archive(
    session: Session, config: CompactionConfig, archive: MutableMapping[str, Any]
) -> None:
    """Rebuild the archive of every committed pass from the log (identical to the live one)."""
    committed = {
        checkpoint_of(e)
        for e in session.events
        if e.type == "user/message" and checkpoint_of(e) is not None
    }
    for event in session.events:
        if event.type != "compaction/summary":
            continue
        data = event.data
        if data["checkpoint"] not in committed or "error" in data["archive"]:
            continue
        span = [session.event(q) for q in data["shadowedSeqs"]]
        archive[data["checkpoint"]] = archive_mod.entry_for_summary(
            event,
            span,
            session_id=session.id,
            archive_reasoning=bool(data.get("archiveReasoning", True)),
        )
        for cid in archive_mod.apply_cap(archive, config.archive_max_bytes):
            archive[cid] = archive_mod.evicted_stub(archive[cid])
