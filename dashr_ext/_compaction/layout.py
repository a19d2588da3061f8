"""How one checkpoint's budget is spent: framing, pins, names, then the summary (SPEC §7.2).

Pure. Before a pass summarizes, :func:`plan_layout` decides

* the **form** of the code-composed text: the largest of ``full``, ``compact`` and
  ``minimal`` (:data:`~dashr_ext._footers.FOOTER_FORMS`) whose fixed text fits
  :func:`~dashr_ext._footers.framing_cap` of the budget;
* the **pinned statements**, carried first and verbatim;
* the **names block** (files, errors, code the work touched), given at most
  :data:`NAMES_SHARE` of what is left beyond :data:`NAMES_FLOOR`;
* the **summary's budget**: the rest.

The budget is never more than what the checkpoint shadows, less one token: a checkpoint is
never larger than the history it replaces. When even the smallest form cannot fit under it
(the span is too small, or the pins too large), the layout is declined with a reason and the
pass does not start.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._checkpoints import checkpoint_of, is_checkpoint
from .._events import Event
from .._footers import FOOTER_FORMS, FRAMING_SHARE, framing_cap, reads_as_checkpoint
from .._meter import MESSAGE_OVERHEAD_TOKENS
from .._names import WorkName, collect_names, merge_names, names_from_data, render_names
from .._payloads import summary_payload
from .._pins import Pin, PinFold, pins_block
from .compose import fixed_text
from .plan import PlanView

__all__ = [
    "MIN_LAYOUT_SUMMARY",
    "NAMES_FLOOR",
    "NAMES_SHARE",
    "Declined",
    "Layout",
    "layout_for",
    "plan_layout",
    "span_counter",
]

NAMES_SHARE = 0.35
"""The largest share of the content room (budget less framing and pins) the names take,
beyond :data:`NAMES_FLOOR`."""

NAMES_FLOOR = 64
"""Content room the summary keeps whole: the names share only what is beyond it, so a
small checkpoint spends its few tokens on the statements it summarizes."""

MIN_LAYOUT_SUMMARY = 16
"""The smallest summary budget a layout leaves; below it the pass is declined."""

_SEPARATOR_TOKENS = 2
"""Tokens of the blank line between two parts of a checkpoint's body."""


@dataclass(frozen=True)
class Layout:
    """The decided split of one checkpoint's budget."""

    form: str
    """``full``, ``compact`` or ``minimal``."""
    budget: int
    """Tokens the whole checkpoint may add (its node, and its pointer in the full form)."""
    fixed_tokens: int
    """Tokens of the code-composed framing text of that form (no message overheads)."""
    pins: tuple[Pin, ...]
    names: tuple[WorkName, ...]
    """Every name the work touched up to this pass (carried to the next one)."""
    names_block: str
    """The rendered names block (empty when nothing fits or nothing is new)."""
    summary_tokens: int
    """What the summarizer may write."""

    @property
    def pointer(self) -> bool:
        """Only the full form gets a separate pointer message."""
        return self.form == "full"

    @property
    def carried(self) -> str:
        """The code-composed body text besides the summary (pins, then names)."""
        return "\n\n".join(t for t in (pins_block(self.pins), self.names_block) if t)


@dataclass(frozen=True)
class Declined:
    """No checkpoint can fit: the reason says which sizes."""

    reason: str


MAX_DENSITY = 0.32
"""The most tokens per character :func:`span_counter` holds a checkpoint to: about the densest
the summaries' own prose (identifiers and values included) counts. A span of code, hashes or
logs counts more per character; its checkpoint's prose is not squeezed below its token budget
for that."""


class SpanMeter(Protocol):
    def count_text(self, text: str) -> int: ...
    def text_size(self, event: Event) -> tuple[int, int]: ...


def span_counter(meter: SpanMeter, view: PlanView, span: tuple[int, int]) -> Callable[[str], int]:
    """``count_tokens`` that also holds a text to the characters its count stands for in
    the history it replaces: a text of *c* characters counts at least *c* times the
    original history's tokens per character. A checkpoint sized by it is within its budget
    both by the meter and in characters at that density (prose counts fewer tokens per
    character than code, tool output and identifiers, so a meter budget alone lets a
    checkpoint take more of the text than the history it shadows gave it), the density
    capped at :data:`MAX_DENSITY`.

    The history is the nodes at surface positions ``span`` of ``view``, every checkpoint
    node among them read as the originals it stands for (its ``sourceEventSeqs``,
    recursively); a checkpoint's text recorded as a plain message (another session's output)
    is left out. ``meter.text_size`` gives an event's ``(characters, tokens)``
    (:meth:`~dashr_ext._meter.TokenMeter.text_size`). Pure."""
    count_tokens, event_of = meter.count_text, view.event
    events = [event_of(q) for q in view.surface[span[0] : span[1] + 1]]
    chars = tokens = 0
    seen: set[int] = set()
    stack = list(reversed(events))
    while stack:
        event = stack.pop()
        if event.seq in seen:
            continue
        seen.add(event.seq)
        if is_checkpoint(event):
            stack.extend(event_of(q) for q in reversed(event.source_event_seqs or ()))
        elif event.is_surface and not _reads_as_checkpoint(event):
            c, t = meter.text_size(event)
            chars, tokens = chars + c, tokens + t
    if chars <= 0 or tokens <= 0:
        return count_tokens
    density = min(tokens / chars, MAX_DENSITY)

    def count(value: str) -> int:
        return max(count_tokens(value), math.ceil(len(value) * density))

    return count


def plan_layout(
    *,
    budget: int,
    seqs: Sequence[int],
    shadowed_tokens: int,
    next_seq: int,
    count_tokens: Callable[[str], int],
    pins: Sequence[Pin] = (),
    names: Sequence[WorkName] = (),
    visible_text: str = "",
    pointer: bool = True,
    forms: Sequence[str] = FOOTER_FORMS,
    checkpoint_class: str | None = None,
    fixed_count: Callable[[str], int] | None = None,
) -> Layout | Declined:
    """Split ``budget`` for a checkpoint shadowing ``seqs`` (``shadowed_tokens``).

    ``fixed_count`` counts the code-composed framing and the pins (the meter, as a pin is
    admitted by it; default ``count_tokens``); ``count_tokens`` the names and the summary.

    ``pointer=False`` (pointers are off): the full form's pointer message is not counted.
    ``forms`` limits the choice (largest first). ``visible_text`` is what the request still
    shows verbatim after the pass (the system prompt and the kept tail): names in it are not
    repeated.
    """
    limit = min(budget, shadowed_tokens - 1)
    chosen = None
    for form in forms:
        text, messages = fixed_text(
            form, seqs, shadowed_tokens, next_seq=next_seq, checkpoint_class=checkpoint_class
        )
        if form == "full" and not pointer:
            text, messages = text.rsplit("\n", 1)[0], 1
        fixed = (fixed_count or count_tokens)(text)
        chosen = (form, fixed, messages)
        # The largest form within 12% of the budget; else the smallest (at most 64 tokens).
        if fixed <= min(framing_cap(limit), int(limit * FRAMING_SHARE)):
            break
    assert chosen is not None, "at least one form"
    form, fixed, messages = chosen
    overhead = fixed + messages * MESSAGE_OVERHEAD_TOKENS
    pinned = pins_block(pins)
    pin_tokens = (fixed_count or count_tokens)(pinned) + _SEPARATOR_TOKENS if pinned else 0
    content = limit - overhead - pin_tokens
    if content < MIN_LAYOUT_SUMMARY:
        return Declined(
            f"no checkpoint fits: the span holds ~{shadowed_tokens} tokens and the "
            f"checkpoint budget is {budget}, while its smallest framing takes ~{overhead}"
            + (f" and the pins ~{pin_tokens}" if pin_tokens else "")
            + f" tokens, leaving under {MIN_LAYOUT_SUMMARY} for the summary"
        )
    block = render_names(
        names,
        budget_tokens=int(max(0, content - NAMES_FLOOR) * NAMES_SHARE),
        count_tokens=count_tokens,
        visible_text=visible_text,
    )
    name_tokens = count_tokens(block) + _SEPARATOR_TOKENS if block else 0
    return Layout(
        form=form,
        budget=limit,
        fixed_tokens=fixed,
        pins=tuple(pins),
        names=tuple(names),
        names_block=block,
        summary_tokens=max(MIN_LAYOUT_SUMMARY, content - name_tokens),
    )


def layout_for(
    view: PlanView,
    span: tuple[int, int],
    shadowed_tokens: int,
    budget: int,
    *,
    count_tokens: Callable[[str], int],
    pointer: bool,
    checkpoint_class: str | None = None,
    whole_budget: bool = False,
    fixed_count: Callable[[str], int] | None = None,
) -> Layout | Declined:
    """:func:`plan_layout` for surface positions ``span`` of ``view``'s current surface.

    The pins are the session's current ones; the names (for a summary checkpoint) are those
    the span's work touched merged over those the checkpoints inside it carried, and the
    kept tail (positions after ``span``) and the system prompt are what stays visible.
    ``whole_budget`` (the state checkpoint of a recallable pass, which replaces more than
    ``span``) drops the rule that a checkpoint stays under what ``span`` holds.
    """
    a, b = span
    surface = view.surface
    seqs = surface[a : b + 1]
    names: list[WorkName] = []
    visible = ""
    if checkpoint_class is None:
        events = [view.event(q) for q in seqs]
        if len(events) == 1 and not whole_budget and _reads_as_checkpoint(events[0]):
            return Declined(
                "the span is one checkpoint and nothing else: a pass over it could only "
                "lose what it keeps"
            )
        names = merge_names(_carried_names(view, events), collect_names(events))
        visible = _visible_text(view, [view.event(q) for q in surface[b + 1 :]])
    return plan_layout(
        budget=budget,
        seqs=seqs,
        shadowed_tokens=budget + 1 if whole_budget else shadowed_tokens,
        next_seq=len(view.events),
        count_tokens=count_tokens,
        pins=_pins_of(view),
        names=names,
        visible_text=visible,
        pointer=pointer,
        forms=FOOTER_FORMS,
        checkpoint_class=checkpoint_class,
        fixed_count=fixed_count,
    )


def _reads_as_checkpoint(event: Any) -> bool:
    """A checkpoint node, or a user message holding a checkpoint's text (a checkpoint
    recorded as the input of another session)."""
    if is_checkpoint(event):
        return True
    return event.type == "user/message" and reads_as_checkpoint(event.message.text)


_FOLDS: weakref.WeakKeyDictionary[Any, PinFold] = weakref.WeakKeyDictionary()
"""One incremental pin fold per session: a pass reads only the events since the last one."""


def _pins_of(view: PlanView) -> tuple[Pin, ...]:
    try:
        fold = _FOLDS.setdefault(view, PinFold())
    except TypeError:  # a view that cannot be weakly referenced: fold it whole
        fold = PinFold()
    return fold.update(view.events)


def _carried_names(view: PlanView, span: Sequence[Event]) -> list[WorkName]:
    """The names the checkpoints inside ``span`` carried (their ``names``), oldest first."""
    carried: list[WorkName] = []
    for event in span:
        checkpoint = checkpoint_of(event, view.events)
        if checkpoint is None or not checkpoint[1:].isdigit():
            continue
        summary = view.event(int(checkpoint[1:]))
        if summary.type == "compaction/summary":
            carried = merge_names(carried, names_from_data(summary_payload(summary).get("names")))
    return carried


def _visible_text(view: PlanView, tail: Sequence[Event]) -> str:
    """The text the request still shows after the pass: system prompt and kept tail."""
    parts = [view.system_prompt or ""]
    for event in tail:
        if not event.is_surface:
            continue
        parts.append(event.message.text)
        parts += [f"{c.name} {c.arguments}" for c in event.message.tool_calls]
    return "\n".join(parts)
