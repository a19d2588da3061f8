"""Summary bullets: the section roles and the collection that merges bullets (SPEC §5.2).

:class:`Items` gathers the bullets of all eight sections with their priorities (and the
shorter variants a bullet may fall back to when the budget is short), the labelled values
and the keyword anchors; a bullet that says nothing new collapses into, or merges with, the
one already there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .text import code, leading_code, norm

__all__ = [
    "ANCHOR_KINDS",
    "CONCEPTS",
    "CRITICAL",
    "CURRENT",
    "ERRORS",
    "FACT_BULLETS",
    "FILES",
    "KEYWORDS",
    "NEXT",
    "NONE_TEXT",
    "N_SECTIONS",
    "PENDING",
    "REQUEST",
    "VALUES",
    "Item",
    "Items",
    "split_items",
    "statement_key",
]

# Section roles, in the order of prompts/summarize.md.
REQUEST, CONCEPTS, FILES, ERRORS, PENDING, CURRENT, NEXT, CRITICAL = range(8)
N_SECTIONS = 8
NONE_TEXT = "(none)"  # how older summaries marked an empty section (now left out)
# The labelled values and the keyword line (last in Critical Context) start so; the keyword
# line's anchor kinds, in order:
VALUES = "Values —"
FACT_BULLETS = ("Assistant (seq ", "Printed by `")
"""How the bullets of facts the assistant said or a tool printed start (see .notes)."""
KEYWORDS = "Keywords —"
ANCHOR_KINDS = ("errors", "paths", "values", "config", "ids", "names", "commands")


@dataclass
class Item:
    """One bullet (or one keyword anchor) with what decides whether it survives the budget."""

    section: int
    text: str
    priority: float
    order: int = 0
    anchor_kind: str | None = None
    """The keyword-line kind of an anchor (None for a bullet)."""
    label: str | None = None
    """The label of a labelled value (``cap`` of ``cap: `$450```), None for anything else."""
    value: str | None = None
    """The value of a labelled value (``$450``), None for anything else."""
    tokens: int = 0
    carried: bool = False
    """From a previous summary (as opposed to this span)."""
    variants: tuple[str, ...] = ()
    """Shorter texts, longest first, that may stand in for ``text`` when the budget is short."""
    shown: str | None = None
    """The text the fitted summary shows (``text`` or one of ``variants``)."""
    seq: int | None = None
    """Where a statement whose text cites no seq was said (an assistant's ``Decision: …``)."""


class Items:
    """The bullets of a summary in the making, in the order they were added."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self._seen: dict[tuple[int, str], Item] = {}
        self._said: dict[str, Item] = {}

    def add(
        self,
        section: int,
        text: str,
        priority: float,
        carried: bool = False,
        variants: tuple[str, ...] = (),
    ) -> Item | None:
        """Add a bullet unless it says nothing new; returns the new item, else None.

        Equal bullets collapse. Bullets about the same thing merge into the
        earlier one (see :func:`_subject`): a file's operation counts add up, a
        concept's or a repeated command's counts add up, and an error keeps its
        newest status.
        """
        text = text.strip()
        if not text or norm(text) == NONE_TEXT:
            return None
        existing = self._seen.get((section, norm(text)))
        subject = _subject(section, text)
        if subject is not None:
            same = self._seen.get((section, subject))
            # The same subject from the previous summary and from this span: two sets of
            # facts about one thing (counts add up). From one source: one fact, said once.
            if same is not None and (existing is None or same.carried != carried):
                same.text = _merge_bullets(section, same.text, text)
                existing = same
        said = statement_key(text) if section in _STATEMENT_SECTIONS else ""
        said = f"{section}\0{said}" if said else ""
        if existing is None and len(said) >= 14 and (same := self._said.get(said)) is not None:
            existing = same  # one statement said at two seqs: once, citing the latest
            seq, seen = _cited(text), _cited(same.text)
            if seq is not None and seen is not None and seq > seen:
                same.text = _cite(same.text, seq)
                same.variants = tuple(_cite(v, seq) for v in same.variants)
        if existing is not None:
            existing.priority = max(existing.priority, priority)
            return None
        shorter = tuple(v for v in dict.fromkeys(variants) if v and len(v) < len(text))
        item = Item(section, text, priority, len(self.items), carried=carried, variants=shorter)
        self.items.append(item)
        self._seen[(section, norm(text))] = item
        if len(said) >= 14:
            self._said[said] = item
        if subject is not None:
            self._seen[(section, subject)] = item
        return item

    def has(self, section: int) -> bool:
        """Whether ``section`` has a bullet (keyword anchors and labelled values do not count)."""
        return any(
            i.section == section and i.anchor_kind is None and i.label is None for i in self.items
        )

    def anchor(self, kind: str, text: str, priority: float) -> None:
        """Add a literal anchor of the keyword line (Critical Context), once per kind."""
        key = (-1, kind + "\0" + text)
        if key in self._seen:
            return
        item = Item(CRITICAL, text, priority, order=len(self.items), anchor_kind=kind)
        self.items.append(item)
        self._seen[key] = item

    def value(
        self, label: str, text: str, priority: float, carried: bool = False, value: str = ""
    ) -> None:
        """Add a labelled value (``cap: `$450` (was `$390`)``) of the Values line."""
        item = Item(
            CRITICAL, text, priority, len(self.items), label=label, carried=carried, value=value
        )
        self.items.append(item)

    def remove(self, item: Item) -> None:
        """Take a bullet out again (a statement a newer one superseded)."""
        self.items = [i for i in self.items if i is not item]
        for key in [k for k, v in self._seen.items() if v is item]:
            del self._seen[key]
        for said in [k for k, v in self._said.items() if v is item]:
            del self._said[said]


# A bullet's own words after its label and seq ("User rule (seq 4): …", "Decision: …").
_BULLET_HEAD = re.compile(
    r"^(?:(?:[A-Z][A-Za-z]*(?: [a-z]+){0,3}) \((?:seqs?) [^)]*\)(?:, (?:verbatim|excerpt))?:\s*|"
    r"(?:Decision|Next|To do|Task \(seq \d+\)): )"
)
_STATEMENT_SECTIONS = frozenset({REQUEST, PENDING, CRITICAL})
_SEQ = re.compile(r"\(seq (\d+)\)")


def statement_key(text: str) -> str:
    """What a bullet states, for comparison: its label, seq, quote marks, case, punctuation
    and whitespace left out."""
    body = _BULLET_HEAD.sub("", text, count=1)
    body = re.sub(r"^\s*>\s?", "", body, flags=re.M)
    body = _LEAD.sub("", body) if re.search(r"\w{3}", _LEAD.sub("", body)) else body
    return " ".join(re.sub(r"[^\w$€£%]+", " ", body.lower()).split())


_LEAD = re.compile(
    r"^(?:\s*(?:also|and|so|plus|ok|okay|oh|thanks|thank you|btw|by the way|fyi|one more "
    r"thing|reminder|again)\b[,:.!]*)+\s*",
    re.I,
)
"""Words that lead into a statement without being part of it ("Also: and never push to
main" states what "Never push to main" does)."""


def _cited(text: str) -> int | None:
    match = _SEQ.search(text[:80])
    return int(match.group(1)) if match else None


def _cite(text: str, seq: int) -> str:
    return _SEQ.sub(f"(seq {seq})", text, count=1)


_OPS_PART = re.compile(r"(\w+) ×(\d+)")
_COUNT = re.compile(r" \(×(\d+)\)$")
_RUN = re.compile(r"^Command run ×(\d+): (.*)$", re.S)


def _subject(section: int, text: str) -> str | None:
    """What a bullet is about, for the sections whose bullets merge by subject."""
    if section in (FILES, ERRORS, CONCEPTS):
        lead = leading_code(text)
        return None if lead is None else "\0code\0" + lead
    if section == CRITICAL and (run := _RUN.match(text)):
        lead = leading_code(run.group(2))
        return None if lead is None else "\0run\0" + lead
    return None


def _merge_bullets(section: int, old: str, new: str) -> str:
    """One bullet from an earlier and a newer bullet about the same subject."""
    if section == FILES:
        path = leading_code(new) or ""
        counts: dict[str, int] = {}
        for bullet in (old, new):
            head = bullet.split("; last edit:", 1)[0]
            for op, n in _OPS_PART.findall(head):
                counts[op] = counts.get(op, 0) + int(n)
        last = new if "; last edit:" in new else old
        text = f"{code(path)} — " + ", ".join(f"{op} ×{n}" for op, n in counts.items())
        if "; last edit:" in last:
            text += "; last edit:" + last.split("; last edit:", 1)[1]
        return text
    if section == CONCEPTS:
        total = sum(int(m.group(1)) if (m := _COUNT.search(b)) else 1 for b in (old, new))
        return f"{_COUNT.sub('', new)} (×{total})"
    if section == CRITICAL and (a := _RUN.match(old)) and (b := _RUN.match(new)):
        return f"Command run ×{int(a.group(1)) + int(b.group(1))}: {b.group(2)}"
    return new  # errors: the newer status wins


def split_items(
    items: Iterable[Item], section_of: Callable[[Item], int]
) -> tuple[dict[int, list[Item]], list[Item], dict[str, list[Item]]]:
    """``items`` as a renderer lays them out: the bullets by section (``section_of``), the
    labelled values (one ``Values —`` line) and the keyword anchors by kind, each in order."""
    by_section: dict[int, list[Item]] = {}
    values: list[Item] = []
    anchors: dict[str, list[Item]] = {}
    for item in items:
        if item.anchor_kind is not None:
            anchors.setdefault(item.anchor_kind, []).append(item)
        elif item.label is not None:
            values.append(item)
        else:
            by_section.setdefault(section_of(item), []).append(item)
    return by_section, values, anchors
