"""Pinned statements: what every checkpoint carries verbatim, first, inside its budget.

A pin is recorded as a log-only ``pin/add`` event (``{"pin": "pin<seq>", "text": …}``, its
id named after the event's own seq) and unpinned by a ``pin/remove`` naming that id, so
the pins of a session are a fold of its log and survive a restart. This module is that
fold and the text a checkpoint carries for them; it reads nothing but its arguments::

    pins = current_pins(session.events)       # added and not removed, oldest first
    block = pins_block(pins)                  # "## Pinned\\n- …\\n- …" ("" without pins)

**The fit rule.** A pin set fits a checkpoint budget ``B`` when
``pins_tokens(pins, count) <= pin_room(B)``: the room is what the budget leaves beside the
code-composed framing (:func:`~dashr_ext._footers.framing_cap`). ``Dashr.pin`` refuses a
pin that would make the set not fit (:func:`fit_problem` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._events import Event
from ._footers import framing_cap, neutralize_summary
from ._jsontext import utf8_text
from ._payloads import PIN_ADD, PIN_REMOVE
from .errors import PinError

__all__ = [
    "PINS_HEADING",
    "PIN_RESERVE",
    "Pin",
    "PinFold",
    "current_pins",
    "fit_problem",
    "pin_room",
    "pin_text",
    "pins_block",
    "pins_tokens",
]

PINS_HEADING = "## Pinned"
"""The first line of the pins block."""


@dataclass(frozen=True, slots=True)
class Pin:
    """One pinned statement, as its ``pin/add`` event recorded it."""

    id: str
    """``pin<seq>``: what ``unpin`` takes."""
    text: str
    seq: int
    """The seq of its ``pin/add`` event."""


class PinFold:
    """The current pins of a log, folded incrementally.

    :meth:`update` looks only at the events appended since its last call, so asking once per
    request or compaction pass costs O(new events). A log that is not the one folded so far
    (shorter, or with another event where the fold stopped) is folded afresh.
    """

    __slots__ = ("_last", "_pins", "_seen", "_value")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._seen = 0
        self._last: Event | None = None
        self._value: tuple[Pin, ...] = ()

    def update(self, events: Sequence[Event]) -> tuple[Pin, ...]:
        """The pins of ``events`` (added and not removed), oldest first."""
        seen, end = self._seen, len(events)
        if end < seen or (seen and events[seen - 1] is not self._last):
            self._reset()  # another log, or one cut back: start over
            seen = 0
        if end == seen:
            return self._value
        pins = self._pins
        changed = False
        for index in range(seen, end):
            event = events[index]
            kind = event.type
            if kind == PIN_ADD:
                data = event.data
                pins[data["pin"]] = Pin(data["pin"], data["text"], event.seq)
                changed = True
            elif kind == PIN_REMOVE:
                # A remove naming no current pin changes nothing (the log accepts it).
                changed = pins.pop(event.data["pin"], None) is not None or changed
        self._seen, self._last = end, events[end - 1]
        if changed:
            self._value = tuple(pins.values())
        return self._value


def current_pins(events: Sequence[Event]) -> tuple[Pin, ...]:
    """The pins of a log: added and not removed, oldest first (see :class:`PinFold` to ask
    again and again as the log grows)."""
    return PinFold().update(events)


def pins_block(pins: Sequence[Pin]) -> str:
    """The code-composed text a checkpoint carries for ``pins``; ``""`` when there are none.

    ``## Pinned`` then one ``- TEXT`` line per pin, in order. Each text is carried as it was
    recorded, its lines neither indented nor rewritten, except that any shape that could pass
    for code-composed framing is neutralized (:func:`~dashr_ext._footers.neutralize_summary`):
    a pin cannot forge a footer.
    """
    if not pins:
        return ""
    return f"{PINS_HEADING}\n" + "\n".join(f"- {neutralize_summary(pin.text)}" for pin in pins)


def pins_tokens(pins: Sequence[Pin], count_tokens: Callable[[str], int]) -> int:
    """Tokens of :func:`pins_block` of ``pins`` (0 without pins)."""
    return count_tokens(pins_block(pins)) if pins else 0


PIN_RESERVE = 22
"""Tokens of a checkpoint budget the pins never take besides the framing: the message's own
overhead (4), the blank line after the pins (2) and the smallest summary a pass writes (16)."""


def pin_room(budget: int) -> int:
    """Tokens a checkpoint budget of ``budget`` leaves for the pins block: the budget less the
    code-composed framing allowance (:func:`~dashr_ext._footers.framing_cap`) and
    :data:`PIN_RESERVE`, so a pin set that fits always leaves a pass room to commit."""
    return budget - framing_cap(budget) - PIN_RESERVE


def pin_text(text: object) -> str:
    """``text`` as a pin records it: a string with something besides whitespace, stripped of
    the whitespace around it, made encodable as UTF-8 (lone surrogates become U+FFFD).

    Raises :class:`~dashr_ext.errors.PinError` for anything else. API keys are scrubbed by
    the caller, which knows the configured ones.
    """
    if not isinstance(text, str):
        raise PinError(f"pin text: expected a non-empty string, got {type(text).__name__}")
    cleaned = utf8_text(text.strip())
    if not cleaned:
        raise PinError(f"pin text: expected a non-empty string, got {text!r}")
    return cleaned


def fit_problem(
    pins: Sequence[Pin],
    budget: int,
    count_tokens: Callable[[str], int],
    *,
    max_summary_tokens: int | None,
) -> str | None:
    """Why ``pins`` do not fit a checkpoint budget of ``budget`` tokens, or None when they do.

    ``max_summary_tokens`` is the setting the budget comes from (None: derived from the
    trigger), named in the message with both sizes.
    """
    tokens, room = pins_tokens(pins, count_tokens), pin_room(budget)
    if tokens <= room:
        return None
    source = (
        f"max_summary_tokens = {budget}"
        if max_summary_tokens is not None
        else f"max_summary_tokens None, from the trigger = {budget}"
    )
    return (
        f"pins would take ~{tokens} tokens; the checkpoint budget ({source}) leaves "
        f"{room} tokens for them; unpin something or raise max_summary_tokens"
    )
