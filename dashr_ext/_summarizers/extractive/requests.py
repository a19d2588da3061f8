"""What the user asked and set: requests, rules, asks not done yet (SPEC §5.2).

Every user sentence is scored by :mod:`.salience`. Requests are ranked by what they say, not
by where they stand: a request that is only a greeting is not pinned, and a long one falls
back to its most salient sentences when the budget is short. Sentences that set a rule or
a constraint become Critical Context bullets of their own; the asks of a request without a
final answer become Pending Jobs.
"""

from __future__ import annotations

import re

from .items import CRITICAL, NEXT, PENDING, REQUEST, Items
from .reading import Span
from .salience import Salience, excerpt, is_trivial, scored_sentences, states_goal, substance
from .text import clip, norm, one_line, words

__all__ = [
    "LOW_SALIENCE",
    "RULE_LABEL",
    "USER_DECISION_LABEL",
    "USER_GOAL_LABEL",
    "add_pending_asks",
    "add_requests",
    "add_rules",
    "relevant_rules",
    "unanswered",
]

RULE_LABEL = "User rule"
_MAX_RULES = 10
LOW_SALIENCE = 5.0
"""A request whose best sentence gives less (:func:`~.salience.substance`) asks for nothing:
no rule, goal, decision or value (chit-chat, "keep going", a pasted log)."""
USER_DECISION_LABEL = "User decision"
USER_GOAL_LABEL = "User goal"
_WORD = re.compile(r"[A-Za-z][A-Za-z_-]{3,}")
_COMMON = words(
    "this that with from have will would should could what when where which there their "
    "them then than they your about into also just like make sure please need want only "
    "keep does done doing been being were after before each every some other more most "
    "such very much many still again here those these over under first last next"
)


def _quote(text: str) -> str:
    return "\n".join(f"  > {line}" if line.strip() else "  >" for line in text.splitlines())


def add_requests(
    items: Items, span: Span, has_previous_request: bool, first_limit: int, later_limit: int
) -> None:
    """Primary Request bullets: the first salient request verbatim, later ones by salience.

    The first request that is more than a greeting (unless a previous summary already holds
    one) is quoted verbatim, with shorter variants made of its most salient sentences; a
    greeting before it is an ordinary, low-priority bullet. Later requests rank by the
    salience of their best sentence, the newer of equals first; identical ones (a harness
    repeating itself) become one bullet.
    """
    requests = list(span.requests)
    original_done = has_previous_request
    original_seq = -1 if has_previous_request else None
    grouped: dict[str, list[tuple[int, str]]] = {}
    for seq, text in requests:
        if not original_done and not is_trivial(text):
            original_done = True
            original_seq = seq
            body = re.sub(r"\n{3,}", "\n\n", text)
            full = f"Original request (seq {seq}), verbatim:\n" + _quote(clip(body, first_limit))
            variants = tuple(
                f"Original request (seq {seq}), excerpt:\n" + _quote(short)
                for limit, keep in ((600, 0), (240, 0), (120, 1))
                if limit < len(body) and (short := excerpt(body, limit, keep)) is not None
            )
            variants += (f"Original request (seq {seq}), excerpt:\n" + _quote(clip(body, 100)),)
            items.add(REQUEST, full, 100.0, variants=variants)
            continue
        grouped.setdefault(norm(text), []).append((seq, text))
    n = len(grouped)
    for i, group in enumerate(grouped.values()):
        seqs = ", ".join(str(seq) for seq, _ in group)
        times = f"; ×{len(group)}" if len(group) > 1 else ""
        label = "seqs" if len(group) > 1 else "seq"
        later = original_seq is not None and group[0][0] > original_seq
        word = "Later request" if later else "Request"
        text = group[-1][1]
        head = f"{word} ({label} {seqs}{times}): "
        best = max((s.score for _, s in scored_sentences(text)), default=0.0)
        pieces = scored_sentences(text)
        given = max((substance(s) for _, s in pieces), default=0.0)
        recency = (i + 1) / n
        if given < LOW_SALIENCE:  # chatter: anything says more
            priority = 14.0 + min(given, 4.0) + 4 * recency - 5.0 * (len(group) > 1)
        elif all(_sets(t, s) for t, s in pieces if substance(s) >= LOW_SALIENCE):
            # What it gives is a rule, goal or decision bullet already (see add_rules).
            priority = 30.0 + min(given, 12.0) + 4 * recency
        else:
            priority = 50.0 + 2.5 * min(best, 12.0) + 4 * recency - 5.0 * (len(group) > 1)
        variants = tuple(
            head + short
            for limit, keep in ((200, 0), (100, 1))
            if (short := excerpt(" ".join(text.split()), limit, keep)) is not None
        )
        variants += (head + one_line(text, 100),)
        flat = " ".join(text.split())
        short = excerpt(flat, later_limit) if len(flat) > later_limit else None
        body = flat if len(flat) <= later_limit else short or one_line(text, later_limit)
        items.add(REQUEST, head + body, priority, variants=variants)


def _sets(sentence: str, salience: Salience) -> bool:
    """Whether :func:`add_rules` makes a bullet of a user's sentence."""
    return salience.is_rule or states_goal(sentence) or (salience.decision and not salience.goal)


def add_rules(items: Items, span: Span) -> None:
    """The user's sentences that set a rule or constraint, or decide: Critical Context.

    A rule ("never deploy on Fridays", "the cap is $390", "keep the backoff at 250 ms") ranks
    just below the original request, so it outlives the work it came with.
    """
    found: dict[str, tuple[float, str]] = {}
    n = max(len(span.requests), 1)
    for i, (seq, text) in enumerate(span.requests):
        for sentence, salience in scored_sentences(text):
            if salience.is_rule:
                label, base = RULE_LABEL, 90.0
            elif states_goal(sentence):
                label, base = USER_GOAL_LABEL, 88.0
            elif salience.decision and not salience.goal:
                label, base = USER_DECISION_LABEL, 84.0
            else:
                continue
            bullet = f"{label} (seq {seq}): {one_line(sentence, 300)}"
            priority = base + min(salience.rule, 15.0) * 0.2 + (i + 1) / n
            found[norm(sentence)] = (priority, bullet)  # said again: the newer seq
    # The most salient rules (a harness's long instructions set many), shown in their order.
    kept = sorted(found.items(), key=lambda kv: -kv[1][0])[:_MAX_RULES]
    for _, (priority, bullet) in sorted(kept, key=lambda kv: list(found).index(kv[0])):
        variants = (clip(bullet, 160),) if len(bullet) > 180 else ()
        items.add(CRITICAL, bullet, priority, variants=variants)


def unanswered(span: Span) -> list[tuple[int, str]]:
    """The requests after the last final answer."""
    return [(seq, text) for seq, text in span.requests if seq > span.last_final_seq]


def _asks(text: str, limit: int) -> str:
    """What a request asks for: its salient sentences, greetings left out."""
    short = excerpt(" ".join(text.split()), limit)
    return short if short is not None else one_line(text, limit)


def add_pending_asks(items: Items, span: Span) -> None:
    """Pending Jobs: each request without a final answer, by what it asks."""
    waiting = [(seq, text) for seq, text in unanswered(span) if not is_trivial(text)]
    for i, (seq, text) in enumerate(waiting):
        head = f"Request of seq {seq}, not answered yet: "
        # Primary Request quotes it too: here what it asks, short.
        variants = (head + _asks(text, 60), head.removesuffix(": "))
        items.add(PENDING, head + _asks(text, 140), 84.0 + i * 0.1, variants=variants)


def relevant_rules(items: Items, step: str) -> None:
    """Next Step: the user's rules that share a content word with the next step."""
    words = {w.lower() for w in _WORD.findall(step)} - _COMMON
    if not words:
        return
    count = 0
    for item in list(items.items):
        if item.section != CRITICAL or not item.text.startswith(RULE_LABEL + " (seq"):
            continue
        rule = item.text.split("): ", 1)[-1]
        stems = {w.lower()[:5] for w in _WORD.findall(rule)} - {c[:5] for c in _COMMON}
        if stems & {w[:5] for w in words}:
            items.add(NEXT, f"Mind the {item.text[0].lower()}{item.text[1:]}", 79.0 - count)
            count += 1
            if count == 2:
                return
