"""The state checkpoint: the working memory, merged from the previous state and the span
(SPEC §6.3).

The facts are gathered exactly as for a summary (:mod:`.sections`, :mod:`.anchors`), in the
summary's eight roles plus one, ``CONSTRAINTS``; :func:`state_role` and :func:`state_section`
translate between those roles and the sections of ``prompts/state.md``, so a previous state,
or an eight-section summary being adopted, merges bullet by bullet like a summary does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ...errors import SummarizerError
from ..base import SummaryRequest
from .anchors import add_anchors
from .items import (
    ANCHOR_KINDS,
    CONCEPTS,
    CRITICAL,
    CURRENT,
    ERRORS,
    FILES,
    KEYWORDS,
    N_SECTIONS,
    NEXT,
    NONE_TEXT,
    PENDING,
    REQUEST,
    Item,
    Items,
)
from .reading import Span, read_span
from .render import fit, parse_summary
from .sections import carry, carry_state, fill
from .text import code, leading_code, norm, one_line, sentences

__all__ = ["CONSTRAINTS", "N_STATE_SECTIONS", "state_role", "state_section", "state_text"]

CONSTRAINTS = N_SECTIONS
"""The role of a constraint bullet (the summary's eight roles have no place for them)."""
N_ROLES = N_SECTIONS + 1

# The sections of prompts/state.md, in order (their headings are read from the template).
GOAL, S_CONSTRAINTS, DECISIONS, CURRENT_STATE, KEY_VALUES, OPEN, NEXT_STEPS = range(7)
N_STATE_SECTIONS = 7

_DECISION = "Decision: "
_CONTEXT = "Context (seq "
_RUN = "Command run ×"
_STATE_WORDS = ("Last assistant message", "Ran ")
_FILE_BULLET = re.compile(r"^(?:`[^`]+`|`` .+? ``) — \w+ ×\d+")
_KIND_BULLET = re.compile(rf"^({'|'.join(ANCHOR_KINDS)}): (.*)$", re.S)
# What a user says when they set a rule rather than ask for work.
_CONSTRAINT = re.compile(
    r"\b(?:must(?:n't| not)?|never|always|do not|don't|does not|doesn't|should(?:n't| not)?|"
    r"only|without|keep|make sure|avoid|prefer\w*|instead|no longer|not allowed|"
    r"required?|at (?:most|least))\b",
    re.I,
)
# Within Current State: the newer state first, then what accumulates.
_CURRENT_ORDER = {CURRENT: 0, FILES: 1, ERRORS: 2}


def state_text(
    request: SummaryRequest,
    summary_headings: Sequence[str],
    state_headings: Sequence[str],
    *,
    anchors_per_kind: int,
    first_request_chars: int,
    request_chars: int,
    current_work_chars: int,
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
    items = Items()
    carry(items, old, span)
    for item in items.items:
        if item.section == CONSTRAINTS:
            item.priority += 25.0  # the user's rules outlive the work they came with
    limit = max(160, request.max_summary_tokens)
    fill(
        items,
        span,
        has_previous_request=any(o[REQUEST] for o in old),
        first_request_chars=min(first_request_chars, limit),
        request_chars=min(request_chars, limit),
        current_work_chars=current_work_chars,
    )
    _constraints(items, span, old)
    carry_state(items, old)
    add_anchors(items, span, old, anchors_per_kind)
    return fit(
        items, state_headings, request.count_tokens, request.max_summary_tokens, render_state
    )


def _constraints(items: Items, span: Span, old: list[list[list[str]]]) -> None:
    """The user's sentences that set a rule ("must", "do not", "instead", …).

    Read from the requests of the span and from the Goal bullets carried forward, so an
    adopted summary's requests give their constraints too.
    """
    texts = [_request_text(bullet) for parsed in old for bullet in parsed[REQUEST]]
    texts += [text for _, text in span.requests]
    found = [
        one_line(sentence, 240)
        for text in texts
        for sentence in sentences(text)
        if _CONSTRAINT.search(sentence) and "… [+" not in sentence
    ]
    unique = list(dict.fromkeys(found))[-8:]
    for i, sentence in enumerate(unique):
        items.add(CONSTRAINTS, "User: " + sentence, 75.0 + i * 0.5)


_REQUEST_LABEL = re.compile(
    r"^(?:Original request \(seq \d+\), verbatim:|Later request \([^)]*\):)[ \t]*\n?"
)


def _request_text(bullet: str) -> str:
    """A Goal bullet's request text, without its label and quote marks."""
    text = _REQUEST_LABEL.sub("", bullet)
    return "\n".join(re.sub(r"^\s*>[ ]?", "", line) for line in text.splitlines())


# --------------------------------------------------------------------------- roles ⇄ sections


def state_section(item: Item) -> int:
    """The section of ``state.md`` a bullet goes to, from its role and its text."""
    role, text = item.section, item.text
    if item.anchor_kind is not None or role == CONCEPTS:
        return KEY_VALUES
    if role == CRITICAL:
        if text.startswith(_DECISION):
            return DECISIONS
        if text.startswith(_RUN):
            return CURRENT_STATE
        if text.startswith(_CONTEXT) or _CONSTRAINT.search(text):
            return S_CONSTRAINTS
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
        return (CRITICAL if bullet.startswith(_CONTEXT) else CONSTRAINTS), bullet
    if section == DECISIONS:
        return CRITICAL, bullet if bullet.startswith(_DECISION) else _DECISION + bullet
    if section == CURRENT_STATE:
        if bullet.startswith(_RUN):
            return CURRENT, bullet  # how often a command ran so far is state: the newer wins
        if _FILE_BULLET.match(bullet):
            return FILES, bullet
        if leading_code(bullet) is not None:
            return ERRORS, bullet
        return CURRENT, bullet
    if section == KEY_VALUES:
        return (CRITICAL if _KIND_BULLET.match(bullet) else CONCEPTS), bullet
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
    """The Markdown of a state: a heading per section, its bullets, ``(none)`` when empty.

    Decisions lose their ``Decision:`` label (the heading says it); the keyword anchors
    make one ``kind: `a`, `b``` bullet per kind under Key Values.
    """
    by_section: list[list[Item]] = [[] for _ in headings]
    anchors: dict[str, list[Item]] = {}
    for item in items:
        if item.anchor_kind is not None:
            anchors.setdefault(item.anchor_kind, []).append(item)
        else:
            by_section[state_section(item)].append(item)
    blocks: list[str] = []
    for index, name in enumerate(headings):
        bullets = sorted(by_section[index], key=lambda i: (_current_rank(i), i.order))
        lines = [f"## {name}"]
        for item in bullets:
            text = item.text
            if index == DECISIONS and text.startswith(_DECISION):
                text = text[len(_DECISION) :]
            lines.append(f"- {text}")
        if index == KEY_VALUES:
            for kind in ANCHOR_KINDS:
                group = sorted(anchors.get(kind, []), key=lambda i: i.order)
                if group:
                    lines.append(f"- {kind}: " + ", ".join(code(a.text) for a in group))
        if len(lines) == 1:
            lines.append(f"- {NONE_TEXT}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
