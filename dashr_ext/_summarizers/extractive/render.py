"""The summary's Markdown: rendering bullets, fitting the token budget, parsing a summary
back into bullets (SPEC §5.2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ...errors import SummarizerError
from .compact import (
    COMPACT_TOKENS,
    RECORD_CEILING,
    compact_line,
    compact_rank,
    group_lines,
    render_compact,
    roles,
    shown,
)
from .items import (
    CRITICAL,
    CURRENT,
    KEYWORDS,
    N_SECTIONS,
    NEXT,
    NONE_TEXT,
    PENDING,
    REQUEST,
    VALUES,
    Item,
    Items,
    split_items,
    statement_key,
)
from .text import clip, code, norm

__all__ = ["Layout", "fit", "group_lines", "parse_summary", "render", "shown", "summary_layout"]

FILLER_PRIORITY = 20.0
"""Items ranked below this say nothing the work needs (chatter, a filler message)."""
_SALIENT_PRIORITY = 60.0
"""While an item ranked at least this is left out, no filler takes a slot."""


def parse_summary(text: str, sections: Sequence[str]) -> list[list[str]]:
    """Split a summary into per-section bullet lists (bullets keep their continuation lines).

    Headings are matched to ``sections`` by name (case, numbering and bold marks
    ignored); a section may be missing (an empty one is left out). Text under an unknown
    heading or before any heading goes to the last section; a summary without any heading
    (the compact checklist of :mod:`.compact`) is sorted by how its lines start.
    ``(none)`` bullets are dropped.
    """
    wanted = {norm(s): i for i, s in enumerate(sections)}
    out: list[list[str]] = [[] for _ in sections]
    current = len(sections) - 1
    bullet: list[str] | None = None
    headed = False

    def flush() -> None:
        nonlocal bullet
        if bullet is not None:
            joined = "\n".join(bullet).rstrip()
            if joined and norm(joined) != NONE_TEXT:
                out[current].append(joined)
        bullet = None

    for raw in text.splitlines():
        line = raw.rstrip()
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*)$", line)
        if heading:
            flush()
            headed = True
            name = re.sub(r"^\s*\d+[.)]\s*", "", heading.group(1)).strip().strip("*_: ").strip()
            current = wanted.get(norm(name), len(sections) - 1)
            continue
        if not line.strip():
            continue
        item = re.match(r"^\s{0,1}[-*•]\s+(.*)$", line)
        if item:
            flush()
            bullet = [item.group(1)]
        elif bullet is not None and (line.startswith("  ") or line.startswith("\t")):
            bullet.append(line)
        else:
            flush()
            bullet = [line.strip()]
    flush()
    if not headed and len(sections) == N_SECTIONS:
        return roles(out[-1], N_SECTIONS)
    return out


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """Where items go and how they are written: a summary's or a state's sections."""

    headings: Sequence[str]
    section_of: Callable[[Item], int]
    """The index in ``headings`` of the section an item is shown under."""
    write: Callable[[Sequence[str], Iterable[Item]], str]
    """The Markdown of the items (each shows :attr:`Item.shown`, else its text)."""
    headed: bool = True
    """Whether sections get headings (a compact checklist has none)."""
    line: Callable[[Item, str], str] | None = None
    """How an item's text is written as a bullet (None: as it is)."""
    index: bool = False
    """Whether the labelled values and keyword anchors are an index kept whole (a state's
    Key Values), even where a bullet shows them too."""


def render(sections: Sequence[str], items: Iterable[Item]) -> str:
    """The Markdown of ``items``: a heading per section that has something, then its bullets.

    A section with nothing to record is left out. The labelled values make one ``Values —``
    bullet and the keyword anchors one ``Keywords —`` bullet, both last in Critical Context.
    """
    by_section, values, anchors = split_items(items, lambda item: item.section)
    blocks: list[str] = []
    for index, name in enumerate(sections):
        lines = [
            f"- {shown(item)}" for item in sorted(by_section.get(index, []), key=lambda i: i.order)
        ]
        if index == CRITICAL:
            lines.extend(group_lines(values, anchors))
        if lines:
            blocks.append("\n".join([f"## {name}", *lines]))
    return "\n\n".join(blocks) + "\n" if blocks else ""


def summary_layout(sections: Sequence[str], budget: int | None = None) -> Layout:
    """The eight headed sections; at a budget of :data:`~.compact.COMPACT_TOKENS` or less,
    the compact checklist."""
    if budget is not None and budget <= COMPACT_TOKENS:
        return Layout(sections, lambda item: item.section, render_compact, False, compact_line)
    return Layout(sections, lambda item: item.section, render)


# --------------------------------------------------------------------------- the budget

_MIN_CLIP_CHARS = 24


def fit(
    items: Items,
    layout: Layout,
    count: Callable[[str], int],
    budget: int,
    carried: str = "",
) -> str:
    """The Markdown of the most salient ``items`` within ``budget`` tokens by ``count``.

    Items are taken by priority (the earlier of equals first): each takes the longest of its
    texts (:attr:`Item.variants`) that fits in what is left and in half of it, unless only its
    shortest fits, and an item that fits in no way is skipped for the smaller ones after it.
    A bullet whose statement a kept one, or ``carried`` (the text the checkpoint carries
    besides the summary), already holds is left out; filler (below
    :data:`FILLER_PRIORITY`) takes no slot while a salient item
    is left out. A section shows up with its first item. The rendered text is then counted
    exactly: over budget, the lowest-priority items go; with room left, skipped items get
    another chance. When not even the first item fits whole it is clipped; raises
    :class:`~dashr_ext.errors.SummarizerError` when a heading and a short bullet cannot fit.
    """
    said = _Said(carried, quoting=not layout.headed)
    if not layout.headed:
        compact_rank(items.items)
    ranked = [i for i in sorted(items.items, key=lambda i: (-i.priority, i.order))]
    if not ranked:
        return _nothing(layout, count, budget)
    costs = _Costs(layout, count)
    kept: list[Item] = []
    used = 0
    skipped: list[Item] = []
    for item in ranked:
        if said.holds(item):
            continue
        took = costs.take(item, budget - used, halve=True)
        if took is None:
            skipped.append(item)
            continue
        used += took
        kept.append(item)
        said.add(item)
    if not layout.headed or any(i.priority >= _SALIENT_PRIORITY for i in skipped):
        kept = [i for i in kept if i.priority >= FILLER_PRIORITY]
        skipped = [i for i in skipped if i.priority >= FILLER_PRIORITY]
    if not layout.headed and any(i.priority > RECORD_CEILING for i in skipped):
        # The record of the work (the archive keeps it) takes no slot of a checklist while
        # a statement or value is left out: it gets one again only with room to spare.
        record = [i for i in kept if i.priority <= RECORD_CEILING]
        kept = [i for i in kept if i.priority > RECORD_CEILING]
        skipped = [i for i in skipped if i.priority > RECORD_CEILING] + record
    if not layout.headed:  # a checklist has no room to say a value twice
        kept = _values_unsaid(kept)
    text = layout.write(layout.headings, _unrepeated(kept, layout))
    for _ in range(4):
        actual = count(text)
        if actual > budget:
            kept = _shed(kept, actual - budget)
        else:
            room = budget - actual
            added = False
            for item in list(skipped):
                if said.holds(item):
                    continue
                took = costs.take(item, room, halve=False)
                if took is not None:
                    said.add(item)
                    room -= took
                    kept.append(item)
                    skipped.remove(item)
                    added = True
            if not added:
                break
        text = layout.write(layout.headings, _unrepeated(kept, layout))
    while kept and count(text) > budget:
        kept = _shed(kept, 1)
        text = layout.write(layout.headings, _unrepeated(kept, layout))
    if kept:
        return text
    return _clipped(ranked[0], layout, count, budget)


_STATEMENTS = frozenset({REQUEST, PENDING, NEXT, CURRENT, CRITICAL})


def _unrepeated(kept: list[Item], layout: Layout) -> list[Item]:
    """``kept`` without the labelled values and keyword anchors a kept bullet already shows:
    a fact is said once, in the words it was said in (a value with its earlier ones,
    ``show_superseded``, stays). A later pass reads the value back from that bullet."""
    if layout.index:
        return kept
    bullets = " ".join(
        shown(i).casefold() for i in kept if i.anchor_kind is None and i.label is None
    )
    if not bullets:
        return kept

    def shows(value: str) -> bool:
        value = value.casefold()
        return value in bullets and (
            len(value) >= 6
            or re.search(rf"(?<![\w.$€£¥]){re.escape(value)}(?!\w|\.\d)", bullets) is not None
        )

    return [
        i
        for i in kept
        if (i.anchor_kind is not None and not shows(i.text))
        or (i.anchor_kind is None and i.label is None)
        or (i.label is not None and (" (was " in i.text or not shows(i.value or "\0")))
    ]


def _values_unsaid(kept: list[Item]) -> list[Item]:
    """``kept`` without the labelled values a kept statement or request already states (the
    value once, in the words it was said in)."""
    said = [
        shown(i)
        for i in kept
        if i.label is None and i.anchor_kind is None and i.section in (CRITICAL, REQUEST)
    ]
    return [
        i
        for i in kept
        if i.label is None
        or not i.value
        or "(was " in i.text  # shown with what it replaced (show_superseded)
        or not any(i.value in t for t in said)
    ]


class _Said:
    """What the kept bullets (and the carried text) state, to leave out what they hold."""

    def __init__(self, carried: str, *, quoting: bool = False) -> None:
        self.by_quote = quoting
        """A checklist: a statement a kept request quotes whole is said (a headed summary
        keeps it under its own heading, Constraints or Critical Context)."""
        self.carried = " ".join(re.sub(r"[^\w$€£%]+", " ", carried.lower()).split())
        self.keys: list[str] = []
        """Of the kept statements (Critical Context): what they hold is said."""
        self.others: set[str] = set()
        """Of the other kept bullets (a request or a message may quote a statement whole)."""
        self.quoting: list[str] = []
        """Of the kept requests (carried forward like statements): a statement they quote
        whole is said (not so the current work or a pending job: a later pass drops them)."""

    def holds(self, item: Item) -> bool:
        if item.anchor_kind is not None or item.label is not None:
            return False
        if item.section not in _STATEMENTS:
            return False  # a file, an error, a concept: a thing, not a statement
        key = statement_key(shown(item))
        if len(key) < 12:
            return False
        if self.carried and key in self.carried:
            return True
        return (
            key in self.others
            or any(key in k for k in self.keys)
            or any(key in q for q in self.quoting)
        )

    def add(self, item: Item) -> None:
        if item.anchor_kind is None and item.label is None:
            key = statement_key(shown(item))
            if item.section == CRITICAL:
                self.keys.append(key)
            else:
                self.others.add(key)
                if item.section == REQUEST and self.by_quote:
                    self.quoting.append(key)


class _Costs:
    """Token costs of items and of the lines and headings they open, cached."""

    def __init__(self, layout: Layout, count: Callable[[str], int]) -> None:
        self.layout = layout
        self.count = count
        self.opened: set[object] = set()
        self._cache: dict[str, int] = {}

    def tokens(self, text: str) -> int:
        cost = self._cache.get(text)
        if cost is None:
            cost = self._cache[text] = self.count(text)
        return cost

    def _opens(self, item: Item) -> list[tuple[object, int]]:
        section = self.layout.section_of(item)
        out: list[tuple[object, int]] = []
        if self.layout.headed:
            heading = f"## {self.layout.headings[section]}\n"
            out.append((("section", section), self.tokens(heading) + 1))
        if item.anchor_kind is not None:
            out.append(("keywords", self.tokens(f"- {KEYWORDS} ") + 1))
            out.append((("kind", item.anchor_kind), self.tokens(f"{item.anchor_kind}: ") + 1))
        elif item.label is not None:
            out.append(("values", self.tokens(f"- {VALUES} ") + 1))
        return [(key, cost) for key, cost in out if key not in self.opened]

    def _cost(self, item: Item, text: str) -> int:
        if item.anchor_kind is not None:
            return self.tokens(code(text)) + 1
        if item.label is not None:
            return self.tokens(text) + 1
        if self.layout.line is not None:
            text = self.layout.line(item, text)
        return self.tokens(f"- {text}\n")

    def take(self, item: Item, room: int, *, halve: bool) -> int | None:
        """Choose the text ``item`` shows within ``room``; its cost, or None when none fits."""
        opens = self._opens(item)
        room -= sum(cost for _, cost in opens)
        if room <= 0:
            return None
        texts = (item.text, *item.variants)
        cap = max(room // 2, 1) if halve and len(texts) > 1 else room
        chosen: tuple[str, int] | None = None
        for text in texts:
            cost = self._cost(item, text)
            if cost <= cap:
                chosen = (text, cost)
                break
        if chosen is None:
            last = texts[-1]
            cost = self._cost(item, last)
            if cost > room:
                return None
            chosen = (last, cost)
        item.shown = chosen[0]
        item.tokens = chosen[1]
        self.opened.update(key for key, _ in opens)
        return chosen[1] + sum(cost for _, cost in opens)


def _shed(kept: list[Item], over: int) -> list[Item]:
    """``kept`` without its lowest-priority items (the later of equals first), ``over`` tokens'
    worth."""
    dropped: set[int] = set()
    saved = 0
    for victim in sorted(kept, key=lambda i: (i.priority, -i.order)):
        if saved >= over:
            break
        dropped.add(id(victim))
        saved += max(victim.tokens, 1)
    return [i for i in kept if id(i) not in dropped]


def _clipped(top: Item, layout: Layout, count: Callable[[str], int], budget: int) -> str:
    """The top item alone, clipped until it fits; an error when not even a stub of it does."""
    texts = (top.text, *top.variants)
    limit = len(texts[-1])
    while limit >= _MIN_CLIP_CHARS:
        top.shown = clip(" ".join(texts[-1].split()), limit)
        text = layout.write(layout.headings, [top])
        if count(text) <= budget:
            return text
        limit = limit * 3 // 4
    what = "a section heading and one bullet" if layout.headed else "one bullet"
    raise SummarizerError(
        f"max_summary_tokens={budget} cannot hold {what} of {_MIN_CLIP_CHARS} characters"
    )


def _nothing(layout: Layout, count: Callable[[str], int], budget: int) -> str:
    """What a span with nothing to record gives: one Current Work bullet that says so."""
    note = Item(CURRENT, "Nothing to record: no request, command or message text.", 0.0)
    return _clipped(note, layout, count, budget)
