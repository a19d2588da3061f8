"""The compaction protocol shared by every engine: triggers and the four steps of a pass.

One pass appends, in this order (SPEC §4.1)::

    compaction/start    log-only: takes the lock
    [summarize: slow, may fail]
    compaction/summary  log-only: provenance, raw summary, archive counts
    user/message        the checkpoint (source kind "compact-checkpoint"), surfaceOp replace
    compaction/end      log-only: releases the lock; carries "error" on a recoverable failure

and reads as four steps: :func:`~.plan.plan_pass` (pure) → :func:`~.summarize.summarize`
(the model) → :func:`~.compose.compose_pass` (pure) → commit (archive, append, pointer).
An engine subclass only decides *which* surface ranges a trigger compacts.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._checkpoints import CheckpointIndex
from .._config import MIN_SUMMARY_TOKENS
from .._events import now_ms
from .._payloads import TRIGGERS
from .._session import Session
from .._summarizers.base import Summarizer
from ..errors import (
    CompactionError,
    CompactionInProgressError,
    CompactionWarning,
    SurfaceError,
)
from .commit import Pointers, commit_pass, restore_archive
from .compose import compose_pass
from .plan import PassPlan, check_explicit_range, plan_pass
from .summarize import summarize

if TYPE_CHECKING:
    from .._config import CompactionConfig
    from .._meter import Measurement, TokenMeter

__all__ = ["CompactionEngine", "CompactionResult", "ExtraEnvelope"]


@dataclass(frozen=True)
class ExtraEnvelope:
    """Request tokens beyond the session header's system prompt and tools.

    ``tools_tokens`` are always sent (e.g. a harness's ``run_cell`` schema);
    ``recall_tokens`` (the recall tools' schemas) only once a checkpoint exists.
    """

    tools_tokens: int = 0
    recall_tokens: int = 0


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
        pointers: bool = True,
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
        self._checkpoints = CheckpointIndex()
        self._pointers = Pointers(session) if pointers else None

    # ------------------------------------------------------------------ measuring

    def has_checkpoint(self) -> bool:
        """True once the session has a committed checkpoint (the recall tools are offered)."""
        self._checkpoints.update(self.session)
        return bool(self._checkpoints.items)

    def measure(self, extra: ExtraEnvelope = ExtraEnvelope()) -> Measurement:
        """The meter's measurement of the next request, plus the ``extra`` envelope tokens.

        When the total is anchored on a provider's usage report, that report already
        counted the whole envelope and nothing is added.
        """
        measured = self.meter.measure(self.session)
        if measured.anchored:
            return measured
        tokens = extra.tools_tokens + (extra.recall_tokens if self.has_checkpoint() else 0)
        if not tokens:
            return measured
        return replace(
            measured,
            total=measured.total + tokens,
            counted=measured.counted + tokens,
            envelope=measured.envelope + tokens,
        )

    # ------------------------------------------------------------------ range choice

    def select(self, measurement: Measurement, *, retry: bool = False) -> tuple[int, int] | None:
        """Surface positions ``(first, last)`` (inclusive) a pressure or manual pass compacts.

        ``retry``: a pass already ran and the request is still over the threshold.
        """
        raise NotImplementedError

    def select_overflow(self) -> tuple[int, int] | None:
        """The range of the forced reduction after a context-length error."""
        raise NotImplementedError

    def plan(
        self,
        trigger: str,
        measurement: Measurement,
        span: tuple[int, int] | None = None,
        *,
        retry: bool = False,
        max_summary_tokens: int | None = None,
    ) -> PassPlan | None:
        """Step 1: the plan of a pass for ``trigger`` (``span`` overrides the selection)."""
        if span is None:
            span = (
                self.select_overflow()
                if trigger == "context-overflow"
                else self.select(measurement, retry=retry)
            )
        if span is None:
            return None
        return plan_pass(
            self.session,
            measurement,
            [span],
            trigger=trigger,
            engine=self.name,
            max_summary_tokens=max_summary_tokens or self.config.max_summary_tokens,
            count_tokens=self.meter.count_text,
        )

    # ------------------------------------------------------------------ triggers

    def before_request(self, extra: ExtraEnvelope = ExtraEnvelope()) -> list[CompactionResult]:
        """The pressure trigger: compact while over the threshold (``compaction_retries`` more).

        Never raises for a failed pass: it is recorded (``compaction/end`` with ``error``),
        a :class:`CompactionWarning` is issued, and the request goes out uncompacted.
        """
        results: list[CompactionResult] = []
        if not self.config.auto or self.session.read_only:
            self._add_pointers()
            return results
        budget = self.config.max_summary_tokens
        measurement = self.measure(extra)
        for attempt in range(self.config.compaction_retries + 1):
            if not self.config.should_compact(measurement.total):
                break
            plan = self.plan("pressure", measurement, retry=attempt > 0, max_summary_tokens=budget)
            if plan is None:
                break
            try:
                result, measurement = self._run(plan, extra)
            except (CompactionError, SurfaceError) as exc:
                if isinstance(exc, CompactionInProgressError):
                    raise
                warnings.warn(
                    f"compaction pass failed, continuing uncompacted: {exc}",
                    CompactionWarning,
                    stacklevel=3,
                )
                break
            results.append(result)
            budget = max(MIN_SUMMARY_TOKENS, budget // 2)
        self._add_pointers()
        return results

    def compact(
        self,
        trigger: str = "manual",
        *,
        start_seq: int | None = None,
        end_seq: int | None = None,
        extra: ExtraEnvelope = ExtraEnvelope(),
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
        span = None
        if start_seq is not None and end_seq is not None:
            span = check_explicit_range(self.session, start_seq, end_seq)
        plan = self.plan(trigger, self.measure(extra), span)
        result = None if plan is None else self.run_pass(plan, extra)
        self._add_pointers()
        return result

    def handle_overflow(self, extra: ExtraEnvelope = ExtraEnvelope()) -> bool:
        """Forced reduction after a provider's context-length error.

        Returns True when the surface changed, so the caller retries the request once.
        """
        before = self.session.surface_version
        changed = False
        plan = self.plan("context-overflow", self.measure(extra))
        if plan is not None:
            try:
                self.run_pass(plan, extra)
            except (CompactionError, SurfaceError) as exc:
                if isinstance(exc, CompactionInProgressError):
                    raise
                warnings.warn(f"overflow compaction failed: {exc}", CompactionWarning, stacklevel=2)
            else:
                changed = self.session.surface_version != before
        self._add_pointers()
        return changed

    def _add_pointers(self) -> None:
        if self._pointers is not None:
            self._checkpoints.update(self.session)
            self._pointers.inject(self._checkpoints.items)

    # ------------------------------------------------------------------ the pass

    def run_pass(self, plan: PassPlan, extra: ExtraEnvelope = ExtraEnvelope()) -> CompactionResult:
        """Run ``plan``: summarize, compose, commit. The log records a failure; it raises."""
        return self._run(plan, extra)[0]

    def _run(self, plan: PassPlan, extra: ExtraEnvelope) -> tuple[CompactionResult, Measurement]:
        """:meth:`run_pass`, also returning the measurement of the request after the pass."""
        if self._active is not None:
            raise CompactionInProgressError(
                f"compaction pass {self._active} is still running for session {self.session.id}; "
                "wait for it to finish"
            )
        s = self.session
        compaction_id = f"p{len(s)}"
        start = s.append_log(
            "compaction/start",
            {"compactionId": compaction_id, "trigger": plan.trigger, "engine": self.name},
        )
        self._active = compaction_id
        version = s.surface_version
        undo: dict[str, Any] = {}
        try:
            # step 1, plan, ran before the lock was taken: ``plan`` is its result.
            summaries = summarize(self.summarizer, plan.requests)  # step 2: the model
            if s.surface_version != version:
                raise CompactionError("the surface changed while the pass was summarizing")
            composition = compose_pass(  # step 3: pure
                plan,
                summaries,
                plan.requests[0].span,
                compaction_id=compaction_id,
                summary_seq=len(s),
                at_ms=self.clock(),
                session_id=s.id,
                archive_reasoning=self.config.archive_reasoning,
                count_tokens=self.meter.count_text,
            )
            if not composition.fits:
                raise CompactionError(composition.guard_message())
            archive_error = commit_pass(  # step 4: archive and log
                s,
                self.archive,
                composition,
                start_seq=start.seq,
                archive_max_bytes=self.config.archive_max_bytes,
                undo=undo,
            )
        except BaseException as exc:
            self._active = None
            restore_archive(self.archive, undo)  # the archive matches the log again
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
        after = self.measure(extra)
        result = CompactionResult(
            checkpoint=composition.checkpoint,
            trigger=plan.trigger,
            shadowed_seqs=composition.shadowed,
            tokens_before=plan.measurement.total,
            tokens_after=after.total,
            archived=None if archive_error is not None else dict(composition.data["archive"]),  # type: ignore[arg-type]
            summary_seq=int(composition.checkpoint[1:]),
            compaction_id=compaction_id,
        )
        return result, after


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return (
        text if isinstance(exc, CompactionError | SurfaceError) else f"{type(exc).__name__}: {text}"
    )
