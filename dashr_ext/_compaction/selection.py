"""Range selection: pure functions over units, balanced cuts and node sizes (SPEC 4.3).

Positions are surface positions. A *cut* at ``k`` separates ``surface[:k]`` (compacted)
from ``surface[k:]`` (kept). ``cuts[k]`` is True when that cut splits no tool call from its
result; a cut is only ever placed on a unit boundary, and never after the start of an open
(still executing) unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._checkpoints import is_checkpoint
from .._events import Event
from .._payloads import POINTER_SOURCE
from .._turns import Unit

__all__ = [
    "allowed_cuts",
    "has_new_content",
    "head_cut_for_overflow",
    "head_cut_for_retain",
    "tighten_cut",
]


def allowed_cuts(units: Sequence[Unit], cuts: Sequence[bool]) -> list[int]:
    """Unit boundaries that are balanced and do not pass an open unit, ascending."""
    allowed: list[int] = []
    for unit in units:
        if cuts[unit.start]:
            allowed.append(unit.start)
        if unit.is_open:
            return allowed
    end = units[-1].end if units else 0
    if cuts[end]:
        allowed.append(end)
    return allowed


def head_cut_for_retain(
    units: Sequence[Unit], cuts: Sequence[bool], node_tokens: Sequence[int], retain_tokens: int
) -> int:
    """The cut keeping the smallest tail of whole units whose size reaches ``retain_tokens``.

    Returns 0 when nothing can be compacted. When the exact cut is unbalanced the tail grows
    (the cut moves toward the head) until it is balanced.
    """
    allowed = allowed_cuts(units, cuts)
    if not allowed:
        return 0
    n = len(node_tokens)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + node_tokens[i]
    best = 0
    for k in allowed:
        if suffix[k] >= retain_tokens:
            best = k
    return best


def head_cut_for_overflow(
    units: Sequence[Unit], cuts: Sequence[bool], is_context: Sequence[bool] = ()
) -> int:
    """The largest balanced head reduction that still leaves the newest indivisible unit.

    ``is_context[k]`` marks units made only of injected context (e.g. a pointer); they ride
    along with the newest real unit instead of counting as it.
    """
    real = [i for i, _unit in enumerate(units) if not (i < len(is_context) and is_context[i])]
    if not real or real[-1] == 0:
        return 0
    newest = units[real[-1]].start
    allowed = [k for k in allowed_cuts(units, cuts) if k <= newest]
    return allowed[-1] if allowed else 0


def has_new_content(events: Iterable[Event]) -> bool:
    """True when ``events`` hold history beyond checkpoints and their pointers.

    A pass over only a previous checkpoint (and the pointer naming it) would condense a
    summary of a summary: no engine compacts such a range.
    """
    return any(
        not is_checkpoint(e)
        and not (e.type == "context/message" and e.message.source_kind == POINTER_SOURCE)
        for e in events
    )


def tighten_cut(
    units: Sequence[Unit], cuts: Sequence[bool], node_tokens: Sequence[int], cut: int, room: int
) -> int:
    """``cut`` moved toward the newest unit until the kept tail is at most ``room`` tokens.

    The retain rule keeps the smallest tail reaching the retain budget; when that tail (an
    oversize unit in it) leaves no room under the trigger for the checkpoint, fewer whole
    units are kept, never fewer than the newest one. Returns ``cut`` when it already fits.
    """
    n = len(node_tokens)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + node_tokens[i]
    if suffix[cut] <= room:
        return cut
    newest = units[-1].start if units else cut
    later = [k for k in allowed_cuts(units, cuts) if cut < k <= newest]
    for k in later:
        if suffix[k] <= room:
            return k
    return later[-1] if later else cut
