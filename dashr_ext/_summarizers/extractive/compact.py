"""The compact checklist a small budget gets: one line per item, no section headings
(SPEC §5.2).

Under :data:`COMPACT_TOKENS` the headings of eight sections would cost more than most of
what they head, so the summary is a flat list: the request first, then the user's
statements, pending asks, the next step, the current work, errors, files and concepts, the
values and the keyword line. Every line says what it is by how it starts (``Task (seq
N): …``, ``User rule (seq N): …``, ``Next: …``), so :func:`roles` reads a checklist back
into the sections it came from and a later pass merges it like a headed summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .anchors import typed_literals
from .items import (
    ANCHOR_KINDS,
    CONCEPTS,
    CRITICAL,
    CURRENT,
    ERRORS,
    FILES,
    KEYWORDS,
    NEXT,
    PENDING,
    REQUEST,
    VALUES,
    Item,
    split_items,
)
from .salience import label_of, score
from .text import code, leading_code

__all__ = [
    "COMPACT_TOKENS",
    "RECORD_CEILING",
    "compact_line",
    "compact_rank",
    "group_lines",
    "render_compact",
    "roles",
    "shown",
]

COMPACT_TOKENS = 320
"""A summary budget at or below this many tokens gets the compact checklist."""
_ORDER = (REQUEST, CRITICAL, PENDING, NEXT, CURRENT, ERRORS, FILES, CONCEPTS)
_QUOTE = re.compile(r"^Original request \(seq (\d+)\), (?:verbatim|excerpt):\n(.*)$", re.S)
_TASK = re.compile(r"^Task \(seq (\d+)\): (.*)$", re.S)
_NEXT_HEADS = ("Answer the request of seq", "Mind the ", "Continue from the last command")
_PENDING_HEADS = ("Request of seq", "The request of seq")
_CURRENT_HEADS = ("Last assistant message (seq", "Ran `", "Ran ``")
_REQUEST_HEADS = ("Original request (seq", "Request (seq", "Later request (seq")
_STATEMENT_HEAD = re.compile(
    r"^(?:User (?:rule|goal|decision|note)|Assistant|Printed by `[^`]*`|Context) \(seq \d+\): |"
    r"^Decision: "
)
"""The head of a statement bullet of Critical Context: a checklist shows the statement alone
(a line read back without a head is a statement, see :func:`role`)."""
_FILE_BULLET = re.compile(r"^(?:`[^`]+`|`` .+? ``) — \w+ ×\d+")
_CONCEPT = re.compile(r"^(?:`[^`]+`|`` .+? ``)(?: \(×\d+\))?$")


def shown(item: Item) -> str:
    return item.shown if item.shown is not None else item.text


def group_lines(values: Sequence[Item], anchors: dict[str, list[Item]]) -> list[str]:
    """The ``Values —`` line and the ``Keywords —`` line (each only when it has something)."""
    lines = []
    if values:
        ordered = sorted(values, key=lambda i: i.order)
        lines.append(f"- {VALUES} " + "; ".join(i.text for i in ordered))
    groups = [
        f"{kind}: " + ", ".join(code(a.text) for a in sorted(anchors[kind], key=lambda i: i.order))
        for kind in ANCHOR_KINDS
        if kind in anchors
    ]
    if groups:
        lines.append(f"- {KEYWORDS} " + "; ".join(groups))
    return lines


def compact_line(item: Item, text: str) -> str:
    """The one line ``text`` (what ``item`` shows) takes in a checklist."""
    quote = _QUOTE.match(text)
    if quote:
        body = " ".join(re.sub(r"^\s*>[ ]?", "", line) for line in quote.group(2).splitlines())
        text = f"Task (seq {quote.group(1)}): {body}"
    elif item.section == NEXT and not text.startswith(_NEXT_HEADS):
        text = "Next: " + text
    elif item.section == PENDING and not text.startswith(_PENDING_HEADS):
        text = "To do: " + text
    elif item.section == CRITICAL and item.label is None and item.anchor_kind is None:
        text = _STATEMENT_HEAD.sub("", text, count=1)
    return " ".join(text.split())


VALUE_PRIORITY = 93.0
"""A labelled value's least priority in a checklist: the pair is the cheapest way to keep it."""
RECORD_PRIORITY = 30.0
"""The most a record of the work (commands run, files, concepts, the last message without a
value) ranks in a checklist: the archive keeps it, the statements come first."""
RECORD_CEILING = RECORD_PRIORITY + 1.0
"""A record's priority in a checklist is at most this (see :func:`compact_rank`)."""
_RECORD = ("Ran `", "Ran ``", "Command run ×", "Last assistant message (seq")


_PRINTED = re.compile(r"^Printed by `[^`]*` \(seq \d+\): (.*)$", re.S)
_STATES = re.compile(r"[:=]|\b(?:is|are|was|were|must|never|always|should|will)\b", re.I)


def _row(text: str) -> bool:
    """A line a tool printed that is a row of a listing (``3f12d68 fix parser``,
    ``requests 2.31.0``), not a statement: it names no key and says nothing of it."""
    printed = _PRINTED.match(text)
    return printed is not None and _STATES.search(printed.group(1)) is None


_ASSISTANT = re.compile(r"^Assistant \(seq \d+\): (.*)$", re.S)
_TITLE_LABEL = re.compile(r"^[A-Z][a-z]+(?: [a-z]+)?: ")


def _says_little(text: str) -> bool:
    """A progress note that states nothing to keep ("Status: still reading the code"): no
    value or number, no rule, decision, goal or override, no upper-case label."""
    if re.search(r"\d", text) or typed_literals(text):
        return False
    salience = score(text)
    if salience.is_rule or salience.decision or salience.goal or salience.override:
        return False
    label = re.match(r"^\s*([A-Z][A-Z ]+[A-Z]):", text)
    return label is None


def _work_note(item: Item) -> bool:
    """A bullet of the record of the work, not of what to keep: the assistant's progress
    note, or (read back from a checklist without its head) a progress note or a listing row."""
    if item.section != CRITICAL or item.label is not None:
        return False
    said = _ASSISTANT.match(item.text)
    if said is not None:
        return _says_little(said.group(1))
    if not item.carried or _STATEMENT_HEAD.match(item.text) or item.text.startswith(_RECORD):
        return False
    if _TITLE_LABEL.match(item.text):
        return _says_little(item.text)
    return (
        _STATES.search(item.text) is None
        and label_of(item.text) is None
        and len(typed_literals(item.text)) >= 1
        and len(item.text.split()) <= 6
    )


def compact_rank(items: Iterable[Item]) -> None:
    """Re-rank ``items`` for a checklist: labelled values before statements, the record of
    the work (commands, files, concepts, a last message stating no value, a progress note,
    a listing row) after them."""
    for item in items:
        if item.anchor_kind is not None:
            continue
        if item.label is not None:
            item.priority = max(item.priority, VALUE_PRIORITY)
        elif (
            item.section in (FILES, CONCEPTS)
            or _row(item.text)
            or (item.text.startswith(_RECORD) and not typed_literals(item.text.split("): ", 1)[-1]))
            or _work_note(item)
        ):
            item.priority = min(item.priority, RECORD_PRIORITY + item.priority * 0.01)


def render_compact(headings: Sequence[str], items: Iterable[Item]) -> str:
    """The checklist of ``items`` (``headings`` unused: a checklist has none)."""
    by_section, values, anchors = split_items(items, lambda item: item.section)
    lines = [
        f"- {compact_line(item, shown(item))}"
        for section in _ORDER
        for item in sorted(by_section.get(section, []), key=lambda i: i.order)
    ]
    lines.extend(group_lines(values, anchors))
    return "\n".join(lines) + "\n" if lines else ""


def role(bullet: str) -> tuple[int, str]:
    """The section a checklist line came from, and its text there."""
    task = _TASK.match(bullet)
    if task:
        return REQUEST, f"Original request (seq {task.group(1)}), verbatim:\n  > {task.group(2)}"
    if bullet.startswith("Next: "):
        return NEXT, bullet[len("Next: ") :]
    if bullet.startswith("To do: "):
        return PENDING, bullet[len("To do: ") :]
    for section, heads in (
        (REQUEST, _REQUEST_HEADS),
        (PENDING, _PENDING_HEADS),
        (NEXT, _NEXT_HEADS),
        (CURRENT, _CURRENT_HEADS),
    ):
        if bullet.startswith(heads):
            return section, bullet
    if _FILE_BULLET.match(bullet):
        return FILES, bullet
    if _CONCEPT.match(bullet):
        return CONCEPTS, bullet
    if leading_code(bullet) is not None:
        return ERRORS, bullet
    return CRITICAL, bullet


def roles(bullets: Sequence[str], n_sections: int) -> list[list[str]]:
    """A checklist's lines by section (see :func:`role`)."""
    out: list[list[str]] = [[] for _ in range(n_sections)]
    for bullet in bullets:
        section, text = role(bullet)
        out[section].append(text)
    return out
