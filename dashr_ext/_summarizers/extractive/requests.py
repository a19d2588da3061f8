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
from .salience import (
    Salience,
    excerpt,
    is_trivial,
    reads_as_request,
    score,
    scored_sentences,
    states_goal,
    substance,
)
from .text import clip, norm, one_line, words

__all__ = [
    "LOW_SALIENCE",
    "RULE_LABEL",
    "USER_DECISION_LABEL",
    "USER_GOAL_LABEL",
    "USER_NOTE_LABEL",
    "add_pending_asks",
    "add_requests",
    "add_rules",
    "relevant_rules",
    "statement_priority",
    "unanswered",
]

RULE_LABEL = "User rule"
_MAX_RULES = 10
LOW_SALIENCE = 5.0
"""A request whose best sentence gives less (:func:`~.salience.substance`) asks for nothing:
no rule, goal, decision or value (chit-chat, "keep going", a pasted log)."""
USER_DECISION_LABEL = "User decision"
USER_GOAL_LABEL = "User goal"
USER_NOTE_LABEL = "User note"
"""A statement the user labelled ("GOAL STATE: …", "FACT: …") or one of where the task stands."""
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
    """Primary Request bullets: the first request verbatim, later ones by salience.

    The first message that reads as a request (an imperative, a question, "I need …",
    "please …"; see :func:`~.salience.reads_as_request`), unless a previous summary already
    holds one, is quoted verbatim, with shorter variants made of its most salient
    sentences; a greeting or a plain statement before it is an ordinary bullet. Later
    requests rank by the salience of their best sentence, the newer of equals first;
    identical ones (a harness repeating itself) become one bullet. A request shows what it
    says beyond filler and beyond the statements that are bullets of their own
    (:func:`add_rules`); one that says nothing more is left out.
    """
    requests = list(span.requests)
    original_done = has_previous_request
    original_seq = -1 if has_previous_request else None
    grouped: dict[str, list[tuple[int, str]]] = {}
    for seq, text in requests:
        if not original_done and not is_trivial(text) and reads_as_request(text):
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
        pieces = [(t, s) for t, s in scored_sentences(group[-1][1]) if not _sets(t, s)]
        if all(s.trivial for _, s in pieces):
            continue  # filler, or only statements that have bullets of their own
        whole = len(pieces) == len(scored_sentences(group[-1][1]))
        text = group[-1][1] if whole else " ".join(t for t, _ in pieces)
        head = f"{word} ({label} {seqs}{times}): "
        best = max((s.score for _, s in pieces), default=0.0)
        given = max((substance(s) for _, s in pieces), default=0.0)
        recency = (i + 1) / n
        if given < LOW_SALIENCE:  # chatter: anything says more
            priority = 12.0 + min(given, 3.0) + 4 * recency - 5.0 * (len(group) > 1)
        else:
            priority = 50.0 + 2.5 * min(best, 12.0) + 4 * recency - 5.0 * (len(group) > 1)
        variants = tuple(
            head + short
            for limit, keep in ((200, 0), (100, 1))
            if (short := excerpt(text, limit, keep)) is not None
        )
        variants += (head + one_line(text, 100),)
        short = excerpt(text, later_limit) if len(text) > later_limit else None
        body = text if len(text) <= later_limit else short or one_line(text, later_limit)
        items.add(REQUEST, head + body, priority, variants=variants)


def _sets(sentence: str, salience: Salience) -> bool:
    """Whether :func:`add_rules` makes a bullet of a user's sentence."""
    return _kind(sentence, salience) is not None


def _kind(sentence: str, salience: Salience) -> tuple[str, float] | None:
    """The bullet label and base priority of a user's statement, None for anything else.

    Labelled statements, rules and preferences, goals, where the task stands, decisions and
    overrides, in that order.
    """
    if salience.trivial:
        return None
    if salience.label is not None and salience.label.isupper() and not salience.task_state:
        return USER_NOTE_LABEL, 91.0
    if salience.is_rule:
        return RULE_LABEL, 90.0
    if states_goal(sentence):
        return USER_GOAL_LABEL, 88.0
    if salience.task_state:
        return USER_NOTE_LABEL, 86.0
    if salience.override or (salience.decision and not salience.goal):
        return USER_DECISION_LABEL, 84.0
    return None


def statement_priority(sentence: str) -> float | None:
    """The priority of a user's statement bullet, from what it says alone (a bullet read
    back from a previous summary ranks as it did when first kept); None for no statement."""
    salience = score(sentence)
    found = _kind(sentence, salience)
    if found is None:
        return None
    return found[1] + min(salience.rule, 15.0) * 0.2 + min(substance(salience), 20.0) * 0.02


def add_rules(items: Items, span: Span) -> None:
    """The user's statements that set a rule, a preference or a goal, say where the task
    stands, carry a label ("FACT: …") or decide: Critical Context.

    A rule ("never deploy on Fridays", "the cap is $390", "keep the backoff at 250 ms") ranks
    just below the original request, so it outlives the work it came with. A statement said
    again is one bullet, citing its latest seq.
    """
    found: dict[str, tuple[float, str]] = {}
    for seq, text in span.requests:
        for sentence, salience in scored_sentences(text):
            kind = _kind(sentence, salience)
            if kind is None:
                continue
            bullet = f"{kind[0]} (seq {seq}): {one_line(sentence, 300)}"
            priority = statement_priority(sentence) or kind[1]
            key = _statement_key(sentence)
            found.pop(key, None)
            found[key] = (priority + seq * 1e-6, bullet)  # said again: the newer seq
    # The most salient rules (a harness's long instructions set many), shown in their order.
    kept = sorted(found.items(), key=lambda kv: -kv[1][0])[:_MAX_RULES]
    order = {key: i for i, key in enumerate(found)}
    for _, (priority, bullet) in sorted(kept, key=lambda kv: order[kv[0]]):
        variants = (clip(bullet, 160),) if len(bullet) > 180 else ()
        items.add(CRITICAL, bullet, priority, variants=variants)


def _statement_key(sentence: str) -> str:
    return " ".join(re.sub(r"[^\w$€£%./:-]+", " ", sentence.lower()).split()).strip(" .")


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
    """Next Step: a pointer to each of the user's rules (at most two) that share a content
    word with the next step."""
    words = {w.lower() for w in _WORD.findall(step)} - _COMMON
    if not words:
        return
    count = 0
    for item in list(items.items):
        if item.section != CRITICAL or not item.text.startswith(RULE_LABEL + " (seq"):
            continue
        rule = item.text.split("): ", 1)[-1]
        stems = {w.lower()[:5] for w in _WORD.findall(rule)} - {c[:5] for c in _COMMON}
        if stems & {w[:5] for w in words}:  # a pointer: the rule itself is said once
            seq = item.text[len(RULE_LABEL) + 6 :].split(")", 1)[0]
            items.add(NEXT, f"Mind the user rule of seq {seq} (Critical Context)", 79.0 - count)
            count += 1
            if count == 2:
                return
