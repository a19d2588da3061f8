"""The state checkpoint: the working memory, merged from the previous state and the span
(SPEC §6.3).

The facts are gathered exactly as for a summary (:mod:`.gather`), in the summary's eight
roles plus one, ``CONSTRAINTS``; :func:`state_role` and :func:`state_section` translate
between those roles and the sections of ``prompts/state.md``, so a previous state, or an
eight-section summary being adopted, merges bullet by bullet like a summary does. The
user's rules go to Constraints, the labelled values and anchors to Key Values; a section
with nothing to record is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ...errors import SummarizerError
from ..base import SummaryRequest
from .gather import Limits, gather
from .items import (
    CONCEPTS,
    CRITICAL,
    CURRENT,
    ERRORS,
    FILES,
    KEYWORDS,
    N_SECTIONS,
    NEXT,
    PENDING,
    REQUEST,
    VALUES,
    Item,
    split_items,
)
from .reading import read_span
from .render import Layout, fit, group_lines, parse_summary, shown
from .requests import RULE_LABEL, USER_DECISION_LABEL, USER_NOTE_LABEL
from .text import leading_code, norm

__all__ = ["CONSTRAINTS", "N_STATE_SECTIONS", "state_role", "state_section", "state_text"]

CONSTRAINTS = N_SECTIONS
"""The role of a constraint bullet of an older state (``User: …``)."""
N_ROLES = N_SECTIONS + 1

# The sections of prompts/state.md, in order (their headings are read from the template).
GOAL, S_CONSTRAINTS, DECISIONS, CURRENT_STATE, KEY_VALUES, OPEN, NEXT_STEPS = range(7)
N_STATE_SECTIONS = 7

_DECISION = "Decision: "
_CONTEXT = "Context (seq "
_RUN = "Command run ×"
_FILE_BULLET = re.compile(r"^(?:`[^`]+`|`` .+? ``) — \w+ ×\d+")
_KIND_BULLET = re.compile(
    r"^(errors|paths|values|numbers|config|ids|identifiers|names|commands): (.*)$", re.S
)
# Within Current State: the newer state first, then what accumulates.
_CURRENT_ORDER = {CURRENT: 0, FILES: 1, ERRORS: 2}


def state_text(
    request: SummaryRequest,
    summary_headings: Sequence[str],
    state_headings: Sequence[str],
    limits: Limits,
) -> str:
    """The state checkpoint of ``request``: the previous state merged with the span.

    ``request.previous_summary`` may be a previous state (``state_headings``) or an
    eight-section summary (``summary_headings``), whichever headings it matches more of.
    """
    if len(state_headings) != N_STATE_SECTIONS:
        raise SummarizerError(
            f"extractive summarizer: state.md lists {len(state_headings)} sections "
            f"({', '.join(state_headings)}); it fills exactly {N_STATE_SECTIONS}"
        )
    span = read_span(request)
    previous = [request.previous_summary] if request.previous_summary else []
    previous += span.previous
    old = [_roles_of(text, summary_headings, state_headings) for text in previous]
    items = gather(span, old, limits)
    layout = Layout(state_headings, state_section, render_state, index=True)
    return fit(items, layout, request.count_tokens, request.max_summary_tokens)


# --------------------------------------------------------------------------- roles ⇄ sections


def state_section(item: Item) -> int:
    """The section of ``state.md`` a bullet goes to, from its role and its text."""
    role, text = item.section, item.text
    if item.anchor_kind is not None or item.label is not None or role == CONCEPTS:
        return KEY_VALUES
    if role == CRITICAL:
        if text.startswith((RULE_LABEL, _CONTEXT)):
            return S_CONSTRAINTS
        if text.startswith(_RUN):
            return CURRENT_STATE
        return DECISIONS
    return {
        REQUEST: GOAL,
        CONSTRAINTS: S_CONSTRAINTS,
        FILES: CURRENT_STATE,
        ERRORS: CURRENT_STATE,
        CURRENT: CURRENT_STATE,
        PENDING: OPEN,
        NEXT: NEXT_STEPS,
    }[role]


def state_role(section: int, bullet: str) -> tuple[int, str]:
    """The role (and the text in that role) of a bullet read under a state section."""
    if section == GOAL:
        return REQUEST, bullet
    if section == S_CONSTRAINTS:
        return (CRITICAL if bullet.startswith((_CONTEXT, RULE_LABEL)) else CONSTRAINTS), bullet
    if section == DECISIONS:
        if bullet.startswith((_DECISION, USER_DECISION_LABEL, USER_NOTE_LABEL)):
            return CRITICAL, bullet
        return CRITICAL, _DECISION + bullet
    if section == CURRENT_STATE:
        if bullet.startswith(_RUN):
            return CURRENT, bullet  # how often a command ran so far is state: the newer wins
        if _FILE_BULLET.match(bullet):
            return FILES, bullet
        if leading_code(bullet) is not None:
            return ERRORS, bullet
        return CURRENT, bullet
    if section == KEY_VALUES:
        keyed = _KIND_BULLET.match(bullet) or bullet.startswith(VALUES)
        return (CRITICAL if keyed else CONCEPTS), bullet
    if section == OPEN:
        return PENDING, bullet
    return NEXT, bullet


def _roles_of(
    text: str, summary_headings: Sequence[str], state_headings: Sequence[str]
) -> list[list[str]]:
    """A previous state or summary as bullets by role (``N_ROLES`` lists)."""
    found = {norm(h) for h in _headings(text)}
    as_summary = sum(norm(h) in found for h in summary_headings)
    if as_summary > sum(norm(h) in found for h in state_headings):
        return [*parse_summary(text, summary_headings), []]  # an adopted summary
    # Text under no known heading lands in an extra last bucket: kept, as context.
    parsed = parse_summary(text, [*state_headings, "\0unheaded"])
    roles: list[list[str]] = [[] for _ in range(N_ROLES)]
    kinds: list[str] = []
    for section, bullets in enumerate(parsed):
        for bullet in bullets:
            if section == N_STATE_SECTIONS:
                role, moved = CRITICAL, bullet
            else:
                role, moved = state_role(section, bullet)
            if role == CRITICAL and _KIND_BULLET.match(moved):
                kinds.append(moved)
            else:
                roles[role].append(moved)
    if kinds:  # the anchors merge as one keyword line, as in a summary
        roles[CRITICAL].append(f"{KEYWORDS} " + "; ".join(kinds))
    return roles


def _headings(text: str) -> list[str]:
    return [
        re.sub(r"^\s*\d+[.)]\s*", "", m.group(1)).strip().strip("*_: ").strip()
        for m in re.finditer(r"^\s{0,3}#{1,6}\s+(.*)$", text, re.M)
    ]


# --------------------------------------------------------------------------- rendering


def _current_rank(item: Item) -> int:
    if item.text.startswith(_RUN):  # last in Current State, whichever role it came with
        return 3
    return _CURRENT_ORDER.get(item.section, 0)


def render_state(headings: Sequence[str], items: Iterable[Item]) -> str:
    """The Markdown of a state: a heading per section that has something, then its bullets.

    A section with nothing to record is left out. Decisions lose their ``Decision:`` label
    (the heading says it); under Key Values the labelled values make one ``Values —``
    bullet and the keyword anchors one ``kind: `a`, `b``` bullet per kind.
    """
    by_section, values, anchors = split_items(items, state_section)
    blocks: list[str] = []
    for index, name in enumerate(headings):
        bullets = sorted(by_section.get(index, []), key=lambda i: (_current_rank(i), i.order))
        keyword = group_lines(values, anchors) if index == KEY_VALUES else []
        lines = keyword[:1] if values else []
        for item in bullets:
            text = shown(item)
            if index == DECISIONS and text.startswith(_DECISION):
                text = text[len(_DECISION) :]
            lines.append(f"- {text}")
        if index == KEY_VALUES and anchors:  # one bullet per kind, not the summary's line
            line = keyword[-1][len(f"- {KEYWORDS} ") :]
            lines.extend(f"- {group}" for group in re.split(r"; (?=[a-z]+: )", line))
        if lines:
            blocks.append("\n".join([f"## {name}", *lines]))
    return "\n\n".join(blocks) + "\n" if blocks else ""
