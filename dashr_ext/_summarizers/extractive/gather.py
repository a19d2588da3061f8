"""Gathering a summary's items: carried bullets, the span's bullets, labelled values and
anchors, with stale values resolved (SPEC §5.2). Summary and state mode share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .anchors import add_anchors, parse_keywords
from .facts import SAID, Facts, replaced_anchors
from .items import CRITICAL, KEYWORDS, REQUEST, Items
from .reading import Span
from .sections import carry, carry_state, fill, read_facts
from .updates import purge, supersede

__all__ = ["Limits", "gather"]

# How many labelled values of each source a summary keeps at most: a previous summary, the
# user, the assistant, tool output.
_VALUE_LIMITS = {0: 16, 1: 24, 2: 8, 4: 10, SAID: 0}


@dataclass(frozen=True)
class Limits:
    """The summarizer's options that bound individual bullets."""

    first_request_chars: int
    request_chars: int
    current_work_chars: int
    anchors_per_kind: int
    show_superseded: bool = False
    """Show a superseded value as ``(was …)`` (else only current values are shown)."""


def gather(span: Span, old: list[list[list[str]]], limits: Limits) -> Items:
    """Every item the summary may show, with its priority, before the budget is applied.

    ``old`` holds the previous summaries' bullets by role, oldest first.
    """
    facts = Facts()
    items = Items()
    carry(items, old, span, facts)
    fill(  # long bullets have shorter variants: the budget picks (see .render.fit)
        items,
        span,
        has_previous_request=any(o[REQUEST] for o in old),
        first_request_chars=limits.first_request_chars,
        request_chars=limits.request_chars,
        current_work_chars=limits.current_work_chars,
    )
    carry_state(items, old, span)
    read_facts(facts, span)
    facts.add_to(items, _VALUE_LIMITS, limits.show_superseded)
    said = {old for old, fact in facts.stale().items() if fact.source in (0, 1, 2)}
    stale = facts.resolve(items, limits.show_superseded)
    carried = [
        a
        for parsed in old
        for bullet in parsed[CRITICAL]
        if bullet.startswith(KEYWORDS)
        for a in parse_keywords(bullet).get("values", [])
    ]
    stale |= replaced_anchors(facts, carried)
    replaced = supersede(items, limits.show_superseded)
    stale |= replaced
    if not limits.show_superseded:  # what the user replaced is shown nowhere
        purge(items, {v for v in (said | replaced) - facts.current() if len(v) >= 4})
    add_anchors(
        items, span, old, limits.anchors_per_kind, exclude=frozenset(stale), pairs=facts.pairs()
    )
    return items
