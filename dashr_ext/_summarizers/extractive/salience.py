"""Salience: how much a sentence matters to the work that continues (SPEC §5.2).

A sentence is scored by what it says, never by where it stands: rules and constraints
(``never``, ``must``, ``at most``, deadlines, limits), safety and policy, goals and
acceptance criteria, decisions and their reasons, updates of a value, errors and fixes,
and the literal values it carries (:func:`~.anchors.typed_literals`). Greetings, thanks and
acknowledgements score nothing. Where two sentences score the same, the caller breaks the
tie by recency.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .anchors import LITERAL_WEIGHTS, Literal, bounded, clear_literal_cache, typed_literals
from .text import clear_sentence_cache, sentences

__all__ = [
    "RULE_SCORE",
    "Salience",
    "clear_caches",
    "excerpt",
    "is_filler",
    "is_trivial",
    "label_of",
    "reads_as_request",
    "says_decision",
    "score",
    "scored_sentences",
    "states_goal",
    "substance",
]

_STRONG_RULE = re.compile(
    r"^only\b|(?:^|[,;:]\s*|\bplease\s+|\band\s+)(?:do not|don't)\b|"
    r"\b(?:never|must(?:n't| not)?|always|"
    r"under no circumstances|not allowed|forbidden|prohibited|no (?:more|less|fewer|later|"
    r"earlier) than|at (?:most|least)|mandatory|required|make sure|ensure|only ever|"
    r"not (?:exceed|go (?:above|over|below))|hard (?:limit|cap|constraint)|no exceptions?|"
    r"(?:i|we)(?:'d| would)?(?: really)? prefer|(?:i|we)(?:'d| would) rather|(?:i|we) always want|"
    r"a preference|"
    r"my preference|your preference|please (?:always|never|keep)|in every (?:commit|pr|change|"
    r"message)|(?:i|we) (?:(?:really|do|would|'d) )?like (?!to\b)|(?:noted|noting) the rule)\b",
    re.I,
)
_WEAK_RULE = re.compile(
    r"\b(?:only|should(?:n't| not)?|avoid|keep|without|prefer\w*|limit\w*|caps?|capped|"
    r"max(?:imum)?|min(?:imum)?|budget|quota|threshold|rate[- ]limit\w*|policy|rule|"
    r"convention|style)\b",
    re.I,
)
# A limit stated as such ("the cap is $390", "keep the backoff at 250 ms").
_LIMIT = re.compile(
    r"\b(?:cap|limit|budget|quota|maximum|minimum|threshold|deadline|timeout|ceiling|floor)"
    r"\s+(?:is|are|was|of|at|=|:|stays|remains|must|should|will be|now)\b(?=[^.;]{0,40}[§\d])"
    r"|\bkeep\b[^.;]{0,60}\b(?:at|to|under|below|above|within)\s+(?:the\s+)?[§\d$]"
    r"|\b(?:stay|remain)s?\s+(?:at|under|below|above|within)\b",
    re.I,
)
_DEADLINE = re.compile(
    r"\b(?:deadline|due (?:on|by|date)|by (?:end of (?:day|week|month)|eod|eow|tomorrow|tonight|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|noon|midnight)|"
    r"(?:before|until|after) (?:the )?(?:release|launch|freeze|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday|tomorrow|\d|§)|on (?:mondays|tuesdays|wednesdays|thursdays|fridays|"
    r"saturdays|sundays|weekends)|code freeze|freeze)\b",
    re.I,
)
_SAFETY = re.compile(
    r"\b(?:secrets?|credentials?|passwords?|api[ _-]?keys?|tokens?|private key|production|prod|"
    r"deploy\w*|releas\w*|security|vulnerab\w*|pii|personal data|gdpr|hipaa|compliance|"
    r"approv\w*|sign[- ]off|licen[cs]e\w*|backups?|data loss|rollback|roll back|migrations?|"
    r"customers?|public api|breaking change|force[- ]push|main branch|master branch)\b",
    re.I,
)
_GOAL = re.compile(
    r"\b(?:goal|objective|acceptance|done when|success(?:ful)?|the task|requirements?|"
    r"need(?:s|ed)? to|want(?:s|ed)? (?:to|you)|please|so that|expect(?:ed|s)?|should pass|"
    r"make (?:the|it|sure)|i'd like|we need|your job)\b",
    re.I,
)
_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:fix|add|implement|write|create|update|remove|delete|refactor|make|run|"
    r"document|investigate|find|change|revert|test|deploy|migrate|build|set|use|rename|move|"
    r"bump|release|keep(?!\s+(?:going|on\b|at it))|check|ensure|replace|support|handle|drop|"
    r"upgrade|downgrade|configure|"
    r"install|debug|profile|optimi[sz]e|measure|clean|split|merge|port|convert|generate|"
    r"send|report|review|verify|investigate|restore|rollback|roll)\b",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:decid\w*|decision|instead of|rather than|because|since (?:the|it|we)|we(?:'ll| will) "
    r"use|let's use|(?<!keep )go(?:ing)? with (?!the work)|chose|chosen|opt(?:ed)? for|"
    r"switch(?:ed)? to|the (?:root "
    r"cause|cause|issue|problem|bug|fix|solution) (?:is|was|here is|lies)|trade-?off|this means|"
    r"so that|the correct (?:fix|approach|behaviou?r))\b",
    re.I,
)
_UPDATE = re.compile(
    r"\b(?:now|instead|changed? to|no longer|updated?|raised? to|lowered? to|increased? to|"
    r"decreased? to|reduced? to|bump(?:ed)? to|moved? to|switch(?:ed)? to|from now on|actually|"
    r"correction|new value|not \S+ but)\b",
    re.I,
)
_ERROR = re.compile(
    r"\b(?:error|exception|traceback|fail(?:s|ed|ing|ure)?|broken|crash\w*|regression|bug|"
    r"fix(?:es|ed)?|root cause|workaround|flaky)\b",
    re.I,
)
_TRIVIAL = re.compile(
    r"^(?:(?:hi|hello|hey|yo|thanks|thank you|thx|ty|great|good|ok|okay|cool|nice|perfect|"
    r"awesome|sure|yes|yep|no|nope|right|alright|fine|got it|sounds good|looks good|lgtm|"
    r"understood|well done|good job|nice work|cheers|please|go ahead|continue|go on|"
    r"carry on|morning|good morning|hope you(?:'re| are) (?:well|doing well)|how are you|"
    r"can you help(?: me)?(?: with something| out)?|could you help(?: me)?|i need (?:some )?help|"
    r"help me|quick question|one more thing|thanks a lot|many thanks|appreciate it|again|"
    r"there|all|team|folks|everyone|now|so|and|also|then|ha|haha|hah|heh|lol|lmao|acknowledged|"
    r"noted|roger|will do|on it|copy that|continuing|no problem|of course|anyway|oh|"
    r"keep (?:going|at it|it up)|carry on|go for it|proceed|next|status|any (?:progress|"
    r"updates?|news|luck)|what(?:'s| is) (?:next|the status|new)|what now|how(?:'s| is) it "
    r"going|how are we doing|where are we(?: at)?|and now|done yet|still there|ping)"
    r"[\s,.!?:;)(-]*)+$",
    re.I,
)
# An upper-case label opening a line or sentence ("RULE:", "GOAL STATE:", "USER PREFERENCE:"),
# or a task-state label in any case ("Next step:", "Open question:", "Done so far:").
_LABEL = re.compile(
    r"^[\s>*_#-]*(?P<label>[A-Z][A-Z0-9]+(?:[ _/&-][A-Z0-9]+){0,3}|(?i:current task|task|"
    r"status|next steps?|steps? done|done so far|completed|progress|open questions?|"
    r"blocked(?: on)?|waiting on|remaining|to ?do|question for you|decision|constraint))"
    r"[*_]*\s*:\s*\S"
)
_GENERIC_LABELS = frozenset({"NOTE", "IMPORTANT", "FACT", "INFO", "FYI", "PS", "NB"})
# An override of an earlier statement ("scratch that", "let's go with X instead").
_OVERRIDE = re.compile(
    r"^(?:quick |small |one )?(?:update|correction|change of plans?|new plan|edit)\s*[:,-]|"
    r"\b(?:scratch that|change of plans?|on second thought|never ?mind|forget (?:that|what i said)|"
    r"(?:let's|we(?:'ll| will)|i(?:'ll| will)) go with|switch(?:ing)? (?:it |that )?to|"
    r"(?:switch|chang|bump|mov)(?:e|es|ing|s)? (?:the |our |my |its )(?:[\w.-]+ ){0,2}[\w.-]+"
    r"(?: to|(?=:))|"
    r"instead|no longer|from now on|actually(?=,)|(?:is|are) (?:now )?replaced|"
    r"not \S+ (?:any ?more|after all))\b",
    re.I,
)
_TASK_STATE = re.compile(
    r"\b(?:awaiting (?:your|the user'?s?)|waiting (?:for|on) (?:your|you)|open question|"
    r"still (?:to do|open|pending)|(?:steps?|tasks?) (?:done|completed|remaining)|"
    r"next step|(?:i )?still owe you an answer|can you (?:tell|let) me|let me know (?:if|"
    r"whether|which|what|when)|i(?:'ll| will) hold until|(?:that|this) (?:part|step) is "
    r"(?:finished|done|complete)|i(?:'ve| have) (?:finished|completed)|next,? we|then,? we|"
    r"(?:i|we)(?:'ve| have)? already \w+)\b",
    re.I,
)
# Conversational filler: acknowledgements, small talk, asides, "continuing".
_FILLER = re.compile(
    r"^(?:acknowledged|noted|understood|roger|will do|on it|copy that|sure thing|"
    r"(?:ok(?:ay)?|alright|sure|great|got it|thanks),?\s*(?:continuing|will do|noted|"
    r"on it|understood)|continuing(?: (?:with|on) (?:the )?(?:plan|work|task))?|"
    r"happy to help|glad to help|no problem|of course|you're welcome|"
    r"ha(?:ha)*|lol|heh|just kidding|jk|hope (?:you(?:'re| are)|your) [^.!?]{0,40}|"
    r"have a (?:good|great|nice) [^.!?]{0,20}|what are we working on(?: today)?|"
    r"how can i help(?: you)?(?: today)?|what can i do for you|"
    r"(?:random|off[- ]topic|unrelated|aside|side note|fun fact|btw|by the way|lol|haha|anyway)"
    r"\b[:,]?(?![^.!?]*\b(?:never|always|must|don't|do not|please|need)\b).*|"
    r"i keep hearing about [^.!?]*|what'?s the weather[^.!?]*|how(?:'s| is) (?:your|the) "
    r"(?:day|weekend|week|weather)[^.!?]*)[\s,.!?:;)(-]*$",
    re.I,
)
RULE_SCORE = 6.0
"""A sentence scoring this much on rule cues states a rule or constraint."""


@dataclass(frozen=True)
class Salience:
    """What a sentence says, and how much that weighs."""

    score: float
    rule: float
    """Rule, constraint, deadline and safety weight (a rule at :data:`RULE_SCORE`)."""
    goal: bool
    decision: bool
    update: bool
    values: int
    """How many typed literal values it carries (money, dates, versions, ids, hosts, …)."""
    trivial: bool
    label: str | None = None
    """The label a statement opens with (``GOAL STATE`` of "GOAL STATE: …"), if any."""
    override: bool = False
    """It overrides an earlier statement ("scratch that", "instead", "update:")."""
    task_state: bool = False
    """It states where the task stands (next step, steps done, an open question)."""

    @property
    def is_rule(self) -> bool:
        return self.rule >= RULE_SCORE


@functools.lru_cache(maxsize=16384)
def score(sentence: str) -> Salience:
    """The salience of one sentence (see the module docstring)."""
    text = sentence.strip()
    if not text or _TRIVIAL.match(text):
        return Salience(0.0, 0.0, False, False, False, 0, True)
    found = _LABEL.match(text)
    label = found.group("label").upper() if found else None
    if label is None and _FILLER.match(text):
        return Salience(0.0, 0.0, False, False, False, 0, True)
    literals = typed_literals(text)
    values = sum(1 for lit in literals if LITERAL_WEIGHTS[lit.type] >= 4)
    words = _masked(text, literals)  # a path "src/limits.py" sets no limit
    rule = 0.0
    if _STRONG_RULE.search(words):
        rule += 6.0
    if _LIMIT.search(words):
        rule += 6.0
    elif _WEAK_RULE.search(words):
        rule += 4.0 if (values or re.search(r"\d", text)) else 2.0
    if _DEADLINE.search(words):
        rule += 5.0
    safety = bool(_SAFETY.search(words))
    if safety and rule:
        rule += 2.0
    goal = bool(_GOAL.search(words) or _IMPERATIVE.match(words))
    override = bool(_OVERRIDE.search(words))
    decision = bool(_DECISION.search(words)) or override
    update = bool(_UPDATE.search(words)) and bool(literals)
    task_state = bool(_TASK_STATE.search(words)) or (label is not None and not label.isupper())
    total = rule
    total += 6.0 if label is not None else 0.0
    total += 3.0 if task_state else 0.0
    total += 3.0 if goal else 0.0
    total += 4.0 if decision else 0.0
    total += 3.0 if update else 0.0
    total += 1.0 if safety else 0.0
    total += 2.0 if _ERROR.search(text) else 0.0
    total += min(sum(LITERAL_WEIGHTS[lit.type] for lit in literals) * 0.5, 6.0)
    total += min(len(text), 200) / 100  # a little for saying more
    return Salience(total, rule, goal, decision, update, values, False, label, override, task_state)


_OVERRIDE_WORDS = (
    "update", "correction", "chang", "plan", "bump", "move", "moving", "edit", "scratch", "thought",
    "mind", "forget", "go with", "switch", "instead", "longer", "now on", "actually",
    "replaced", "more", "all",
)  # fmt: skip
"""Words every override cue holds (:data:`_OVERRIDE`): a text holding none has no cue."""


@functools.lru_cache(maxsize=16384)  # each sentence is asked again by several readers
def overrides(text: str) -> bool:
    """Whether ``text`` holds an override cue ("scratch that", "instead", "update:"): a cheap
    test before its sentences are scored."""
    lower = text.lower()
    if not any(word in lower for word in _OVERRIDE_WORDS):
        return False
    return _OVERRIDE.search(text) is not None


def label_of(sentence: str) -> str | None:
    """The label a sentence opens with, upper-cased (``GOAL STATE`` of "GOAL STATE: …")."""
    found = _LABEL.match(sentence.strip())
    return found.group("label").upper() if found else None


def is_generic_label(label: str) -> bool:
    """A label that says what kind of statement follows, not what it is about (``NOTE``)."""
    return label in _GENERIC_LABELS


def is_filler(sentence: str) -> bool:
    """Whether a sentence is conversational filler (an acknowledgement, small talk, an aside)."""
    return score(sentence).trivial


_ASKS = re.compile(
    r"\?\s*$|\b(?:i|we) (?:need|want|would like|'d like)\b|\bplease\b|\b(?:can|could|would|will) "
    r"you\b|\bhelp me\b|\blet's\b|\byour (?:task|job|goal)\b|\b(?:the )?(?:task|goal) is\b|"
    r"\bi(?:'m| am) (?:trying|looking) to\b|\bmake sure\b|\bwe should\b",
    re.I,
)


_PAST_QUESTION = re.compile(r"^(?:did|have|has|were|was) (?:you|we|they|it)\b[^?]*\?$", re.I)


def reads_as_request(text: str) -> bool:
    """Whether a message asks for something: an imperative, a question, "I need", "please …".

    A greeting or a plain statement ("The webhook retries three times") asks for nothing.
    Of a long message (a pasted task description) the asks may stand anywhere: its lines
    are read too, not only the sentences of its head and tail.
    """
    for sentence, salience in scored_sentences(text):
        if salience.trivial:
            continue
        body = _LABEL.sub("", sentence, count=1) if salience.label else sentence
        if _PAST_QUESTION.match(body.strip()) and not substance(salience):
            continue  # "did you see …?": a question about what happened, not an ask
        if _IMPERATIVE.match(body.strip()) or _ASKS.search(body):
            return True
    if len(text) <= len(bounded(text)):
        return False
    return any(
        _IMPERATIVE.match(line.strip(" \t>*-#")) or _ASKS.search(line)
        for line in text.splitlines()
        if len(line) > 12 and not score(line).trivial
    )


_GOAL_STATE = re.compile(r"\b(?:goal|objective|target)\b[^.;]{0,40}\b(?:is|are)\b", re.I)


def substance(salience: Salience) -> float:
    """What a sentence gives the work: rules, goals, decisions, updates and values, not its
    length. A sentence carrying three or more weighty values is a dump (a log line, a
    listing row) and gives nothing."""
    if salience.trivial or salience.values >= 3:
        return 0.0
    return (
        salience.rule
        + (6.0 if salience.label is not None else 0.0)
        + (3.0 if salience.task_state else 0.0)
        + (3.0 if salience.goal else 0.0)
        + (2.0 if salience.decision else 0.0)
        + (3.0 if salience.update else 0.0)
        + 2.0 * salience.values
    )


def states_goal(sentence: str) -> bool:
    """Whether a sentence states the goal ("the goal for this week is …")."""
    return _GOAL_STATE.search(sentence) is not None


def _masked(text: str, literals: tuple[Literal, ...]) -> str:
    """``text`` with each literal replaced by ``§`` (cue words are read around them)."""
    if not literals:
        return text
    parts: list[str] = []
    end = 0
    for lit in literals:
        parts.append(text[end : lit.start] + "§")
        end = lit.end
    parts.append(text[end:])
    return "".join(parts)


def says_decision(sentence: str) -> bool:
    """Whether a sentence has a decision cue (cheaper than :func:`score`)."""
    return _DECISION.search(sentence) is not None


def is_trivial(text: str) -> bool:
    """Whether a message says nothing but greetings, thanks or a bare request for help."""
    pieces = scored_sentences(text)
    return all(salience.trivial for _, salience in pieces) if pieces else True


def scored_sentences(text: str) -> tuple[tuple[str, Salience], ...]:
    """The sentences of ``text`` with their salience, in order (of a long text, those of its
    head and tail: see :func:`~.anchors.bounded`)."""
    return _scored(bounded(text))


@functools.lru_cache(maxsize=512)
def _scored(text: str) -> tuple[tuple[str, Salience], ...]:
    return tuple((s, score(s)) for s in sentences(text, min_chars=1))


def excerpt(text: str, limit: int, keep: int = 0) -> str | None:
    """The most salient sentences of ``text`` within ``limit`` characters, in their order.

    Sentences are taken by salience (the earlier of equals first) while they fit; gaps are
    marked `` … ``. ``keep`` caps how many are taken (0: as many as fit). None when ``text``
    has no sentence that fits, or when the excerpt would be the whole text anyway.
    """
    pieces = scored_sentences(text)
    if len(pieces) <= 1 and keep != 1:
        return None
    ranked = sorted(range(len(pieces)), key=lambda i: (-pieces[i][1].score, i))
    chosen: list[int] = []
    size = 0
    texts = [sentence for sentence, _ in pieces]
    for i in ranked:
        if pieces[i][1].trivial:
            break  # the rest says nothing
        if not chosen and len(texts[i]) + 3 > limit:  # the most salient, cut to fit
            cut = texts[i][: max(limit - 5, 20)]
            texts[i] = (cut.rsplit(" ", 1)[0] if " " in cut[10:] else cut).rstrip() + " …"
        length = len(texts[i]) + 3
        if size + length > limit:
            continue
        chosen.append(i)
        size += length
        if keep and len(chosen) >= keep:
            break
    if not chosen or len(chosen) == len(pieces):
        return None
    chosen.sort()
    out: list[str] = []
    previous = -1
    for i in chosen:
        if i > previous + 1:
            out.append("…")
        out.append(texts[i])
        previous = i
    if previous != len(pieces) - 1 and not out[-1].endswith("…"):
        out.append("…")
    return " ".join(out)


def clear_caches() -> None:
    """Forget the memoized scores and literals (a benchmark measures a cold start).

    The memos only save work: sentences and messages recur within a summary and across
    passes. Their output is the same with or without them.
    """
    score.cache_clear()
    overrides.cache_clear()
    _scored.cache_clear()
    clear_literal_cache()
    clear_sentence_cache()
