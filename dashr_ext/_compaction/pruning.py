"""The prune pass of an engine: choose (pure, :mod:`.prune`), archive, append (SPEC §6.5).

No model call, so the whole pass runs holding the session's lock: measure, choose, write the
archive entries (undoable), append one batch. It respects the engine's pass slot: while
another thread's pass summarizes, pruning would change the surface under it, so it waits
its turn like any pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _archive as archive_mod
from .._pruned import archive_key
from ..errors import CompactionInProgressError
from .commit import ArchiveUndo, restore_archive, write_archive
from .prune import PruneItem, PruneResult, plan_prunes, prune_specs, pruned_nodes, select_prunes

if TYPE_CHECKING:
    from .._meter import Measurement
    from .engine import CompactionEngine, ExtraEnvelope

__all__ = ["Pruner"]

_MARKER_TOKENS = 64
"""About what a pruned node adds besides its excerpt (the marker line)."""


class Pruner:
    """Prune passes for one engine (its session, config, meter, archive and pass slot)."""

    def __init__(self, engine: CompactionEngine) -> None:
        self.engine = engine
        self._task: int | None = None
        """Seq of the session's first user message (the task statement), once seen."""
        self._scanned = 0

    def _task_position(self) -> int | None:
        """Surface position of the task statement, if it is still there whole."""
        s = self.engine.session
        events = s.events
        while self._task is None and self._scanned < len(events):
            event = events[self._scanned]
            self._scanned += 1
            if event.type == "user/message" and event.message.source_kind == "user":
                self._task = event.seq
        if self._task is None or not s.is_current(self._task):
            return None
        return s.position(self._task)

    def items(
        self, measurement: Measurement, *, old: bool, span: tuple[int, int] | None = None
    ) -> list[PruneItem]:
        """What a pass over the measured surface would prune (see :func:`.select_prunes`)."""
        engine, config = self.engine, self.engine.config
        s = engine.session
        events = [s.event(seq) for seq, _tokens in measurement.nodes]
        tokens = [t for _seq, t in measurement.nodes]
        positions = select_prunes(
            events,
            tokens,
            s.units(),
            engine._retain_cut(measurement),
            threshold=config.prune_threshold,
            oversize=config.oversize_tokens,
            keep_tokens=config.prune_keep_chars // 2 + _MARKER_TOKENS,
            old=old,
            span=span,
            task=self._task_position(),
            task_limit=config.trigger_tokens,
        )
        return plan_prunes(
            events,
            tokens,
            positions,
            keep_chars=config.prune_keep_chars,
            count_tokens=engine.meter.count_text,
        )

    def before_summary(self, extra: ExtraEnvelope, *, old: bool | None) -> PruneResult | None:
        """The prune pass a trigger runs before summarizing, when the request is over.

        ``old=None`` (pressure): old outputs only when pruning alone brings the request
        under the trigger, else only oversize ones; ``True`` (overflow) all candidates;
        ``False`` (manual) only oversize ones. Does nothing with ``prune=False``.
        """
        engine = self.engine
        if not engine.config.prune:
            return None
        with engine.session.lock:
            measurement = engine.measure(extra)
            if old is None and not engine.config.should_compact(measurement.total):
                return None
            if old is not None:
                return self.run(measurement, extra, old=old)
            every = self.items(measurement, old=True)
            saved = sum(i.tokens_before - i.tokens_after for i in every)
            if not engine.config.should_compact(measurement.total - saved):
                return self.run(measurement, extra, old=True, planned=every)  # planned once
            return self.run(measurement, extra, old=False)

    def run(
        self,
        measurement: Measurement,
        extra: ExtraEnvelope,
        *,
        old: bool,
        span: tuple[int, int] | None = None,
        planned: list[PruneItem] | None = None,
    ) -> PruneResult | None:
        """Choose and commit one prune pass; None when nothing is prunable.

        ``planned``: the items :meth:`items` already chose on this measurement.
        """
        engine = self.engine
        s = engine.session
        with s.lock:
            engine._check_measured(measurement)
            items = planned if planned is not None else self.items(measurement, old=old, span=span)
            if not items:
                return None
            slot = engine._slot
            if slot.compaction_id is not None:
                raise CompactionInProgressError(
                    f"compaction pass {slot.compaction_id} is still running for session "
                    f"{s.id}; wait for it to finish"
                )
            engine._report("pruning", f"{len(items)} oversize output(s)")
            next_seq = len(s)
            compaction_id = f"p{next_seq}"
            at_ms = engine.clock()
            undo: ArchiveUndo = {}
            archived = self._archive(items, at_ms, undo)
            specs = prune_specs(
                items,
                compaction_id=compaction_id,
                engine=engine.name,
                next_seq=next_seq,
                at_ms=at_ms,
                archived=archived,
                archive_reasoning=engine.config.archive_reasoning,
            )
            try:
                s.append(specs)
            except BaseException:
                restore_archive(engine.archive, undo)  # the archive matches the log again
                raise
            after = engine.measure(extra)
        return PruneResult(
            compaction_id=compaction_id,
            trigger="prune",
            pruned=pruned_nodes(items, next_seq, archived=archived),
            tokens_before=measurement.total,
            tokens_after=after.total,
        )

    def _archive(self, items: list[PruneItem], at_ms: int, undo: ArchiveUndo) -> bool:
        """Archive every original; False (and nothing written) when that fails."""
        engine = self.engine
        try:
            for item in items:
                key = archive_key(item.event.seq)
                entry: dict[str, Any] = archive_mod.entry_for_pruned(
                    item.event,
                    key=key,
                    at_ms=at_ms,
                    tokens=item.tokens_before,
                    engine=engine.name,
                    session_id=engine.session.id,
                    archive_reasoning=engine.config.archive_reasoning,
                )
                write_archive(engine.archive, key, entry, engine.config.archive_max_bytes, undo)
        except Exception:  # any archive failure degrades, never blocks the pass
            restore_archive(engine.archive, undo)
            return False
        return True
