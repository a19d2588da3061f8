"""The ``summary`` engine: one head-anchored checkpoint, merged forward (SPEC §6.1).

Every pass compacts from the surface head, so the previous checkpoint (always at the head)
is merged with the newly stale history into a single new checkpoint. The recency window
(SPEC §6.2) is a trigger rule of :class:`~dashr_ext._config.CompactionConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._checkpoints import is_checkpoint
from .engine import CompactionEngine
from .selection import has_new_content, head_cut_for_retain, tighten_cut

if TYPE_CHECKING:
    from .._meter import Measurement

__all__ = ["SummaryEngine"]


class SummaryEngine(CompactionEngine):
    name = "summary"

    def select(self, measurement: Measurement, *, retry: bool = False) -> tuple[int, int] | None:
        s = self.session
        tokens = [t for _seq, t in measurement.nodes]
        units, cuts = s.units(), s.balanced_cuts()
        cut = head_cut_for_retain(units, cuts, tokens, self.config.retain_budget)
        # Leave room under the trigger for the checkpoint: a tail swollen by an oversize unit
        # keeps fewer whole units (never fewer than the newest).
        checkpoint = self.config.summary_budget + self._pass_extra_tokens()
        room = self.config.trigger_tokens - measurement.envelope - checkpoint - 1
        cut = tighten_cut(units, cuts, tokens, cut, room)
        if not has_new_content(s.event(q) for q in s.surface[:cut]):
            return None  # only the previous checkpoint (and its pointer): nothing new
        deferred = self._deferred_until()
        if deferred is not None and sum(tokens[:cut]) <= deferred:
            return None  # the guard refused this much; wait until the span has grown
        return 0, cut - 1

    def select_overflow(self) -> tuple[int, int] | None:
        s = self.session
        cut = self._overflow_cut()
        if cut == 0 or (cut == 1 and is_checkpoint(s.event(s.surface[0]))):
            return None  # nothing left to reduce but the newest unit (and its checkpoint)
        return 0, cut - 1
