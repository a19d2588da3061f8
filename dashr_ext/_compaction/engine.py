"""The compaction protocol shared by every engine: triggers and the four steps of a pass.

One pass appends, in this order (SPEC §4.1)::

    compaction/start    log-only: takes the lock
    [summarize: slow, may fail]
    compaction/summary  log-only: provenance, raw summary, archive counts
    user/message        the checkpoint (source kind "compact-checkpoint"), surfaceOp replace
    compaction/end      log-only: releases the lock; carries "error" on a recoverable failure

The last three go out as one batch (one write, one fsync); a torn write leaves at most a
``compaction/summary`` without its node, which :func:`~.commit.close_orphan_passes` closes
as failed (the surface never holds half a checkpoint).

Four steps: :func:`~.plan.plan_pass` (pure) → :func:`~.summarize.summarize` (the model) →
:func:`~.compose.compose_pass` (pure) → commit; a subclass decides *which* ranges.

Threads: every step but summarize holds the session's lock; other threads keep recording
while the model summarizes (after the checkpoint; a change inside the span fails the pass).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from .._checkpoints import CheckpointIndex
from .._config import MIN_SUMMARY_TOKENS
from .._events import now_ms
from .._payloads import TRIGGERS, TURN_TRIGGER
from .._session import Session
from .._summarizers.base import Summarizer
from ..errors import (
    CompactionError,
    CompactionInProgressError,
    CompactionWarning,
    SurfaceError,
)
from .commit import ArchiveUndo, Pointers, check_span_current, commit_pass, restore_archive
from .compose import MIN_SUMMARY_BODY, compose_pass
from .layout import Declined, Layout, layout_for, span_counter
from .plan import PassPlan, check_explicit_range, plan_pass
from .prune import PruneItem, PruneResult
from .pruning import Pruner
from .selection import head_cut_for_overflow, head_cut_for_retain
from .summarize import summarize

if TYPE_CHECKING:
    from .._config import CompactionConfig
    from .._meter import Measurement, TokenMeter

__all__ = ["CompactionEngine", "CompactionResult", "ExtraEnvelope", "GuardFailure", "PassSlot"]


@dataclass(frozen=True)
class ExtraEnvelope:
    """Request tokens beyond the session header's system prompt and tools.

    ``tools_tokens`` are always sent (e.g. a harness's ``run_cell`` schema);
    ``recall_tokens`` (the recall tools' schemas) once anything is recallable (has_checkpoint).
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
    checkpoints: tuple[str, ...] = ()
    """Every checkpoint the pass committed, left to right (the recallable engine's stubs,
    then its state checkpoint); empty means just :attr:`checkpoint`."""
    pruned: PruneResult | None = None
    """The prune pass that ran just before this one, if any (SPEC §6.5)."""


@dataclass(frozen=True)
class _Started:
    """A pass whose ``compaction/start`` is in the log."""

    plan: PassPlan
    compaction_id: str
    start_seq: int


@dataclass
class PassSlot:
    """The pass running on one session, if any (SPEC §4.2: one pass at a time).

    A controller gives the same slot to every engine it builds, so swapping the engine or
    its settings while a pass summarizes on another thread cannot start a second pass.
    """

    compaction_id: str | None = None
    thread: int | None = None


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
        pointers: bool | Pointers = True,
        slot: PassSlot | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.session = session
        self.config = config
        self.meter = meter
        self.summarizer = summarizer
        self.archive = archive
        self.clock = clock
        self.last_error: str | None = None
        self._slot = slot if slot is not None else PassSlot()
        self._checkpoints = CheckpointIndex()
        # A controller passes one Pointers to every engine it builds (like the slot), so an
        # engine rebuilt while a pass runs knows the pointers the old one wrote.
        self._pointers: Pointers | None = (
            pointers if isinstance(pointers, Pointers) else Pointers(session) if pointers else None
        )
        self._ends_seen = 0
        self._deferred: int | None = None
        self._recallable = False  # a pruned output, or a committed turn landing (SPEC §6.4)
        self._turn_passes: set[str] = set()  # compaction ids of turn landings (SPEC §6.4)
        self._extra = ExtraEnvelope()
        """The envelope of the last measurement (the recall tools join it with a checkpoint)."""
        self._pruner = Pruner(self)
        self.progress: Callable[[str, str], None] | None = None
        """Called with ``(phase, detail)`` as a pass goes: ``pruning``, ``summarizing``,
        ``committing``, ``done``. For progress displays; an exception it raises is ignored."""
        self.last_prune: PruneResult | None = None
        """The prune pass the latest trigger ran (pressure, manual, overflow or prune())."""
        self.last_decline: str | None = None
        """Why the latest plan made no checkpoint although history was compactable."""

    # ------------------------------------------------------------------ measuring

    def has_checkpoint(self) -> bool:
        """True once anything is recallable: a committed checkpoint, a pruned output or a
        committed turn landing (the recall tools are offered from then on)."""
        with self.session.lock:
            self._checkpoints.update(self.session)
            self._deferred_until()  # folds the pass ends, prune and turn passes among them
            return bool(self._checkpoints.items) or self._recallable

    def measure(self, extra: ExtraEnvelope = ExtraEnvelope()) -> Measurement:
        """The meter's measurement of the next request, plus the ``extra`` envelope tokens.

        When the total is anchored on a provider's usage report, that report already
        counted the whole envelope and nothing is added.
        """
        with self.session.lock:
            self._extra = extra
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

    # ------------------------------------------------------------------ deferral

    def _deferral_margin(self) -> int:
        """How much the compactable span must grow after a guard failure before a retry.

        Half the summary budget: a checkpoint that did not fit under the refused span needs
        at least that much more history to condense before it can.
        """
        return max(256, self.config.summary_budget // 2)

    def _deferred_until(self) -> int | None:
        """Compactable tokens a pass must exceed after a guard failure (None: no deferral).

        The latest ``compaction/end`` decides: one carrying ``deferredStaleTokens`` (the
        span the guard refused) defers until the span is larger by :meth:`_deferral_margin`;
        any later pass end lifts it. Folded from the log: it survives a restart.
        """
        events = self.session.events
        for seq in range(self._ends_seen, len(events)):
            event = events[seq]
            cid = event.data.get("compactionId")
            if event.type == "compaction/start" and event.data.get("trigger") == TURN_TRIGGER:
                self._turn_passes.add(str(cid))
            if event.type != "compaction/end" or cid in self._turn_passes:
                self._recallable |= event.type == "compaction/end" and "error" not in event.data
                continue  # a turn landing (SPEC §6.4) neither sets nor lifts a deferral
            if "pruned" in event.data:
                self._recallable = True  # a prune pass never lifts a deferral
            else:
                value = event.data.get("deferredStaleTokens")
                self._deferred = value if isinstance(value, int) else None
        self._ends_seen = len(events)
        if self._deferred is None:
            return None
        return self._deferred + self._deferral_margin()

    # ------------------------------------------------------------------ range choice

    def select(self, measurement: Measurement, *, retry: bool = False) -> tuple[int, int] | None:
        """Surface positions ``(first, last)`` (inclusive) a pressure or manual pass compacts.

        ``retry``: a pass already ran and the request is still over the threshold.
        """
        raise NotImplementedError

    def select_overflow(self) -> tuple[int, int] | None:
        """The range of the forced reduction after a context-length error."""
        raise NotImplementedError

    def _overflow_cut(self) -> int:
        """The largest balanced head cut that leaves the newest real unit (SPEC §4.4)."""
        s = self.session
        units = s.units()
        surface = s.surface
        is_context = [
            all(s.event(q).type == "context/message" for q in surface[u.start : u.end])
            for u in units
        ]
        return head_cut_for_overflow(units, s.balanced_cuts(), is_context)

    def _retain_cut(self, measurement: Measurement) -> int:
        """The retain rule's cut (SPEC §4.3): positions before it lie outside the kept tail."""
        s = self.session
        tokens = [t for _seq, t in measurement.nodes]
        return head_cut_for_retain(s.units(), s.balanced_cuts(), tokens, self.config.retain_budget)

    def _check_measured(self, measurement: Measurement) -> None:
        """Raise unless ``measurement`` describes the current surface."""
        if [seq for seq, _tokens in measurement.nodes] != list(self.session.surface):
            raise CompactionError(
                "the session changed after it was measured; measure it again and plan "
                "with the new measurement"
            )

    def plan(
        self,
        trigger: str,
        measurement: Measurement,
        span: tuple[int, int] | None = None,
        *,
        retry: bool = False,
        max_summary_tokens: int | None = None,
    ) -> PassPlan | None:
        """Step 1: the plan of a pass for ``trigger`` (``span`` overrides the selection).

        ``measurement`` must describe the current surface (measure and plan holding
        ``session.lock`` when other threads record); otherwise :class:`CompactionError`.
        """
        with self.session.lock:
            self._check_measured(measurement)
            if span is None:
                span = (
                    self.select_overflow()
                    if trigger == "context-overflow"
                    else self.select(measurement, retry=retry)
                )
            if span is None:
                return None
            budget = max_summary_tokens or self.config.summary_budget
            count = span_counter(self.meter, self.session, span)
            layout = self._summary_room(span, measurement, budget, count_tokens=count)
            if isinstance(layout, Declined):
                self.last_decline = layout.reason
                if trigger == "pressure":
                    return None
                raise CompactionError(f"compaction declined: {layout.reason}")
            return plan_pass(
                self.session,
                measurement,
                [span],
                trigger=trigger,
                engine=self.name,
                max_summary_tokens=layout.summary_tokens,
                count_tokens=count,
                show_superseded=self.config.show_superseded,
                layout=layout,
            )

    def _pass_extra_tokens(self) -> int:
        """Request tokens a pass adds besides its checkpoint: the recall tools' schemas, which
        the request carries from the first checkpoint on."""
        return 0 if self.has_checkpoint() else self._extra.recall_tokens

    def _summary_room(
        self,
        span: tuple[int, int],
        measurement: Measurement,
        budget: int,
        checkpoint_class: str | None = None,
        *,
        fit_room: bool = True,
        count_tokens: Callable[[str], int] | None = None,
    ) -> Layout | Declined:
        """How ``budget`` splits for a checkpoint over ``span`` (:func:`~.layout.plan_layout`).

        One budget bounds all a pass adds to the request (SPEC §7.2): the framing, footer,
        archive marker, pointer, pins and names come out of it first. ``fit_room=False``
        skips the room rule (a recallable pass replaces several regions, not just ``span``).
        """
        a, b = span
        tokens = sum(t for _seq, t in measurement.nodes[a : b + 1])
        # What the pass keeps (envelope and retained tail) stays: the checkpoint gets at most
        # the room left under the trigger, so the request after the pass fits — unless even
        # the smallest checkpoint cannot, and then it keeps its whole budget. The recall
        # tools' schemas join the envelope with the first checkpoint: room, not budget.
        kept = measurement.total - tokens + self._pass_extra_tokens()
        room = self.config.trigger_tokens - kept - 1
        if fit_room and room >= MIN_SUMMARY_BODY:
            budget = min(budget, room)
        return layout_for(
            self.session,
            span,
            tokens,
            budget,
            count_tokens=count_tokens or self.meter.count_text,
            fixed_count=self.meter.count_text,
            pointer=self._pointers is not None,
            checkpoint_class=checkpoint_class,
            whole_budget=not fit_room,
        )

    # ------------------------------------------------------------------ triggers

    def before_request(self, extra: ExtraEnvelope = ExtraEnvelope()) -> list[CompactionResult]:
        """The pressure trigger: compact while over the threshold (``compaction_retries`` more).

        Never raises for a failed pass: it is recorded (``compaction/end`` with ``error``),
        a :class:`CompactionWarning` is issued, and the request goes out uncompacted. So it
        does while another thread's pass is summarizing.
        """
        results: list[CompactionResult] = []
        self.last_prune = None
        if not self.config.auto or self.session.read_only:
            self._add_pointers()
            return results
        s = self.session
        budget = self.config.summary_budget
        measurement: Measurement | None = None
        measured_at = -1  # the log length ``measurement`` describes
        try:  # cheap, deterministic reductions first (SPEC §6.5)
            self.last_prune = self._pruner.before_summary(extra, old=None)
        except CompactionInProgressError as exc:
            if self._slot.thread == threading.get_ident():
                raise
            _warn_uncompacted(exc)
            self._add_pointers()
            return results
        for attempt in range(self.config.compaction_retries + 1):
            with s.lock:  # measure, plan and start on one state
                if measurement is None or measured_at != len(s):
                    measurement = self.measure(extra)
                if not self.config.should_compact(measurement.total):
                    break
                plan = self.plan(
                    "pressure", measurement, retry=attempt > 0, max_summary_tokens=budget
                )
                if plan is None:
                    break
                try:
                    started = self._start(plan)
                except CompactionInProgressError as exc:
                    if self._slot.thread == threading.get_ident():
                        raise  # a pass inside a pass (e.g. its summarizer asks for a request)
                    _warn_uncompacted(exc)
                    break
            try:
                result, measurement, measured_at = self._finish(started, extra)
            except (CompactionError, SurfaceError) as exc:
                _warn_uncompacted(exc)
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
        """Run one pass now; None when nothing is compactable. Failures raise.

        Without an explicit range, oversize outputs are pruned first (:attr:`last_prune`,
        and :attr:`CompactionResult.pruned` when a summary pass follows).
        """
        if trigger not in TRIGGERS:
            hint = " (prune with prune())" if trigger == "prune" else ""
            raise CompactionError(
                f"trigger: expected one of {', '.join(TRIGGERS)}, got {trigger!r}{hint}"
            )
        if (start_seq is None) != (end_seq is None):
            raise CompactionError(
                "give both start_seq and end_seq for an explicit range, or neither"
            )
        self.last_prune = None
        with self.session.lock:  # measure, plan and start on one state
            span = None
            if start_seq is not None and end_seq is not None:
                span = check_explicit_range(self.session, start_seq, end_seq)
            else:
                self.last_prune = self._pruner.before_summary(extra, old=False)
            plan = self.plan(trigger, self.measure(extra), span)
            started = None if plan is None else self._start(plan)
        result = None if started is None else self._finish(started, extra)[0]
        self._add_pointers()
        if result is not None and self.last_prune is not None:
            result = replace(result, pruned=self.last_prune)
        return result

    def prune(
        self,
        *,
        start_seq: int | None = None,
        end_seq: int | None = None,
        extra: ExtraEnvelope = ExtraEnvelope(),
    ) -> PruneResult | None:
        """One prune pass now (SPEC §6.5): every candidate, old outputs included.

        ``start_seq``/``end_seq`` limit it to an explicit range, which must be balanced and
        leave the executing step alone (else :class:`~dashr_ext.errors.SurfaceError`, log
        untouched). None when nothing is prunable.
        """
        if (start_seq is None) != (end_seq is None):
            raise CompactionError(
                "give both start_seq and end_seq for an explicit range, or neither"
            )
        with self.session.lock:
            span = None
            if start_seq is not None and end_seq is not None:
                span = check_explicit_range(self.session, start_seq, end_seq)
            self.last_prune = self._pruner.run(self.measure(extra), extra, old=True, span=span)
        self._add_pointers()
        return self.last_prune

    def plan_prune(self, measurement: Measurement, *, old: bool) -> list[PruneItem]:
        """What a prune pass over ``measurement`` would prune; commits nothing.

        ``old=False`` is the pass :meth:`compact` runs first, ``True`` the one :meth:`prune`
        runs. ``measurement`` must describe the current surface.
        """
        with self.session.lock:
            self._check_measured(measurement)
            return self._pruner.items(measurement, old=old)

    def handle_overflow(self, extra: ExtraEnvelope = ExtraEnvelope()) -> bool:
        """Forced reduction after a provider's context-length error.

        Returns True when the surface changed, so the caller retries the request once.
        """
        changed = False
        self.last_prune = None
        try:
            with self.session.lock:  # measure, plan and start on one state
                self.last_prune = self._pruner.before_summary(extra, old=True)
                measurement = self.measure(extra)
                if self.last_prune is not None and not self.config.should_compact(
                    measurement.total
                ):
                    self._add_pointers()
                    return True  # pruning alone made the request fit
                changed = self.last_prune is not None
                plan = self.plan("context-overflow", measurement)
                started = None if plan is None else self._start(plan)
            if started is not None:
                self._finish(started, extra)
                changed = True
        except (CompactionError, SurfaceError) as exc:
            if isinstance(exc, CompactionInProgressError) and (
                self._slot.thread == threading.get_ident()
            ):
                raise
            warnings.warn(f"overflow compaction failed: {exc}", CompactionWarning, stacklevel=2)
        self._add_pointers()
        return changed

    def _add_pointers(self) -> None:
        if self._pointers is not None:
            with self.session.lock:
                self._checkpoints.update(self.session)
                self._pointers.inject(self._checkpoints.items)

    # ------------------------------------------------------------------ the pass

    def _start(self, plan: PassPlan) -> _Started:
        """Append ``compaction/start``: the pass holds the session's compaction lock from here.

        The caller holds ``session.lock`` and made ``plan`` on the current surface.
        """
        s = self.session
        if self._slot.compaction_id is not None:
            raise CompactionInProgressError(
                f"compaction pass {self._slot.compaction_id} is still running for session {s.id}; "
                "wait for it to finish"
            )
        compaction_id = f"p{len(s)}"
        start = s.append_log(
            "compaction/start",
            {"compactionId": compaction_id, "trigger": plan.trigger, "engine": self.name},
        )
        self._slot.compaction_id, self._slot.thread = compaction_id, threading.get_ident()
        return _Started(plan, compaction_id, start.seq)

    def _finish(
        self, started: _Started, extra: ExtraEnvelope
    ) -> tuple[CompactionResult, Measurement, int]:
        """Summarize (unlocked), then compose and commit holding the lock.

        Returns the result, the measurement of the request after the pass, and the log
        length that measurement describes.
        """
        s = self.session
        plan = started.plan
        undo: ArchiveUndo = {}
        self._report("summarizing", _regions(len(plan.requests)))
        try:
            summaries = summarize(self.summarizer, plan.requests)  # step 2: the model
        except BaseException as exc:
            self._fail(started, exc, undo)
        self._report("committing", f"compaction pass {started.compaction_id}")
        with s.lock:
            try:
                check_span_current(s, plan.regions)  # appends after the span are fine
                composition = compose_pass(  # step 3: pure
                    plan,
                    summaries,
                    plan.requests[0].span,
                    compaction_id=started.compaction_id,
                    summary_seq=len(s),
                    at_ms=self.clock(),
                    session_id=s.id,
                    archive_reasoning=self.config.archive_reasoning,
                    count_tokens=self.meter.count_text,
                )
                if not composition.fits:
                    raise GuardFailure(composition.guard_message(), plan.shadowed_tokens)
                archive_error = commit_pass(  # step 4: archive and log
                    s,
                    self.archive,
                    composition,
                    start_seq=started.start_seq,
                    archive_max_bytes=self.config.archive_max_bytes,
                    undo=undo,
                )
            except GuardFailure as exc:
                self._fail(started, exc, undo, {"deferredStaleTokens": exc.stale_tokens})
            except BaseException as exc:
                self._fail(started, exc, undo)
            self._slot.compaction_id = self._slot.thread = None
            self.last_error = None
            after = self.measure(extra)
            measured_at = len(s)
        result = CompactionResult(
            checkpoint=composition.checkpoint,
            trigger=plan.trigger,
            shadowed_seqs=composition.shadowed,
            tokens_before=plan.measurement.total,
            tokens_after=after.total,
            archived=None if archive_error is not None else dict(composition.data["archive"]),  # type: ignore[arg-type]
            summary_seq=int(composition.checkpoint[1:]),
            compaction_id=started.compaction_id,
        )
        self._report(
            "done", f"{result.checkpoint}: ~{result.tokens_before} -> ~{after.total} tokens"
        )
        return result, after, measured_at

    def _report(self, phase: str, detail: str) -> None:
        """Tell :attr:`progress` where the pass is (never lets it break the pass)."""
        if self.progress is not None:
            with contextlib.suppress(Exception):
                self.progress(phase, detail)

    def _fail(
        self,
        started: _Started,
        exc: BaseException,
        undo: ArchiveUndo,
        extra: dict[str, Any] | None = None,
    ) -> NoReturn:
        """Record a failed pass (``compaction/end`` with ``error``, plus ``extra``) and raise."""
        with self.session.lock:
            self._slot.compaction_id = self._slot.thread = None
            restore_archive(self.archive, undo)  # the archive matches the log again
            reason = _error_text(exc)
            self.last_error = reason
            self.session.append_log(
                "compaction/end",
                {"compactionId": started.compaction_id, "error": reason, **(extra or {})},
            )
        if isinstance(exc, CompactionError | SurfaceError):
            raise exc
        if isinstance(exc, Exception):
            raise CompactionError(
                f"compaction pass {started.compaction_id} failed: {reason}"
            ) from exc
        raise exc


class GuardFailure(CompactionError):
    """The inflation guard refused a pass; ``stale_tokens`` is the span it would have shadowed."""

    def __init__(self, message: str, stale_tokens: int) -> None:
        super().__init__(message)
        self.stale_tokens = stale_tokens


def _regions(n: int) -> str:
    return "1 region" if n == 1 else f"{n} regions"


def _warn_uncompacted(exc: BaseException) -> None:
    warnings.warn(
        f"compaction pass failed, continuing uncompacted: {exc}", CompactionWarning, stacklevel=4
    )


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    known = isinstance(exc, CompactionError | SurfaceError)
    return text if known else f"{type(exc).__name__}: {text}"
