"""Labelled values: what a named thing was set to, and what a later statement changed it to
(SPEC §5.2).

A statement gives a label and a value: a config key with its value (``retry.max_attempts =
5``, ``RETRY_CAP=40``, a ``key = value`` line under a ``[section]`` of printed settings), or a
user's sentence that names a thing and a typed literal (:func:`~.anchors.typed_literals`):
"the cap is $390", "keep the gateway timeout at 30 s", "raise the cap from $390 to $450".
The values are kept as labelled pairs (``cap: `$450```), so a value survives when the
sentence that stated it does not fit. A later statement about the same label replaces the
value: the older one is kept only as ``(was `$390`)``, and a bullet that still quotes it
as current is rewritten (or dropped when that statement was all it said). A previous
summary's ``Values —`` line is read back into the same pairs, so a later pass updates a
value instead of quoting the old one again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .anchors import Literal, bounded, typed_literals
from .cues import CHOOSES, EARLIER, FOR_LABEL, LABEL_AFTER, MONEY_HEADS
from .items import CRITICAL, NEXT, PENDING, REQUEST, VALUES, Items
from .rewriting import only_stale, rewrite, rewrite_item, without_stale_sentences
from .salience import overrides, score
from .text import SECRET_KEY, code, sentences, words

__all__ = [
    "Fact",
    "Facts",
    "parse_values",
    "render_fact",
    "replaced_anchors",
    "rewrite",
    "statements",
]

# The literal types a sentence may give a label as its value.
_FACT_TYPES = frozenset(
    {"money", "number", "date", "time", "timezone", "region", "version", "host", "branch",
     "person", "ticket", "email", "uuid", "hash", "path"}
)  # fmt: skip
_BARE_NUMBER = re.compile(r"(?<![\w.$€£¥/:-])\d+(?:\.\d+)?(?![\w%/:-]|\.\d)")
_LINK_WORDS = (
    r"is|are|was|were|stays?|remains?|becomes?|equals?|should be|must be|must stay(?: at)?|"
    r"will be|to be|has to be|needs to be|(?:is |was )?(?:set|changed|moved|raised|lowered|"
    r"increased|decreased|reduced|bumped|switched|updated|pinned|fixed) to|goes to|at|of|to|"
    r"now|currently|still|no longer|not|exactly|only|starts|begins|ends|opens|closes|is due|"
    r"capped at|limited to|under|below|at most|no more than"
)
# The end of the text before a value: a label, then link words ("the cap is now", "region:").
_LINK = re.compile(
    r"(?:^|(?<=[\s(]))(?P<label>[A-Za-z_][\w.'/-]*(?:[ \t]+[A-Za-z_][\w.'/-]*){0,4}?)[ \t]*"
    rf"(?P<link>(?:(?:\b(?:{_LINK_WORDS})\b|[=:])[ \t]*)+)$",
    re.I,
)
_CLAUSE = re.compile(
    r"[,;()\[\]]|—|–|\b(?:and|but|or|while|which|that|who|where|so|then|when|if|says|said|"
    r"confirms|confirmed|reports|reported|mentioned|noted)\b",
    re.I,
)
# Words that introduce a thing ("the cap", "keep the backoff", "raise our limit").
_INTRODUCERS = words(
    "the a an our my your its their this these those keep set raise raised lower lowered "
    "increase increased decrease decreased reduce reduced bump bumped change changed move "
    "moved switch switched update updated pin pinned make use"
)
_LEAD_WORDS = _INTRODUCERS | words(
    "please we i you they also just then now actually let's lets should must will can to "
    "from with for in on by is are be new current default"
)
# A value after these is stated of whatever came before ("the cap is", "region:"); after a
# preposition only of a thing the sentence introduced ("keep the backoff at 250 ms", not
# "compute_backoff starts at 250 ms").
_COPULA = re.compile(
    r"\b(?:is|are|was|were|stays?|remains?|becomes?|equals?|be|set|changed|moved|raised|"
    r"lowered|increased|decreased|reduced|bumped|switched|updated|pinned|fixed)\b|[=:]",
    re.I,
)
_PRONOUNS = words("it this that which they he she there here what these those one")
_NEGATED = re.compile(r"\b(?:no longer|not)\b", re.I)
_UPDATE_CUE = re.compile(
    r"\b(?:now|instead|changed?|no longer|updated?|raised?|lowered?|increased?|decreased?|"
    r"reduced?|bump(?:ed|s)?|moved?|switch(?:ed|es)?|from now on|actually|correction)\b",
    re.I,
)
_FROM = re.compile(r"\bfrom[ \t]+$", re.I)
SAID = 3
"""The source of a value the assistant's prose stated first: never shown as a value."""
_SHOWN_FIRST = {1: 0, 0: 1, 2: 2, 4: 3, SAID: 4}
_VALUE_PRIORITY = {0: 84.0, 1: 88.0, 2: 66.0, 4: 70.0, SAID: 60.0}
_LITERAL_VALUE = re.compile(
    r"[-+]?\d[\d_.,]*[A-Za-z%]{0,3}|\"[^\"]*\"|'[^']*'|true|false|yes|no|on|off|none|null",
    re.I,
)
_PLAIN_VALUE = re.compile(r"[\w.:/@+%~-]+|\"[^\"]*\"|'[^']*'")
_DOER = re.compile(r"^([A-Z][a-z]+(?: [A-Z][a-z'-]+){1,2}) ([a-z]{3,}s)\b(?! (?:to|that)\b)")
_TO = re.compile(r"^[ \t]+to[ \t]+$", re.I)


@dataclass
class Fact:
    """The current value of one label, and the values it had before."""

    label: str
    key: tuple[str, ...]
    value: str
    order: float
    source: int
    """Who stated it last: 0 a previous summary, 1 the user, 2 the assistant, 4 tool output."""
    was: list[str] = field(default_factory=list)


_REPLACES = re.compile(
    r"\b(?:scratch that|change of plans?|on second thought|correction|forget (?:that|what i "
    r"said))\b",
    re.I,
)
"""A cue that what follows replaces something already said (not merely a new statement)."""


def _key(label: str) -> tuple[str, ...]:
    return tuple(w for w in re.split(r"[\s._-]+", label.lower().strip("-")) if w)


_PREPOSITIONS = words("for of in on per at to with from by about")


def _head(key: tuple[str, ...]) -> str:
    """The head noun of a label: "cap" of "cap for the new jobs" and of "spend cap"."""
    for i, word in enumerate(key):
        if i and word in _PREPOSITIONS:
            return key[i - 1]
    return key[-1]


def _stem(word: str) -> str:
    """ "review" of "reviewer" and of "reviews"."""
    return word[:6]


def _modifiers(key: tuple[str, ...]) -> set[str]:
    """The words before a label's head ("marketing" of "marketing budget"; none of "cap for
    the new jobs": what follows the head says what it applies to, not which one it is)."""
    head = _head(key)
    words_before = key[: key.index(head)] if head in key else ()
    return {w for w in words_before if w not in _PREPOSITIONS and w not in ("the", "a", "an")}


def _qualified_apart(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Two labels whose head is qualified differently ("marketing budget", "hardware budget")."""
    qa, qb = _modifiers(a), _modifiers(b)
    return bool(qa and qb and not qa & qb)


def _is_config(label: str) -> bool:
    return bool(re.search(r"[._]|^[A-Z0-9-]+$", label.strip("-")))


class Facts:
    """The labelled values stated so far, in statement order."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.cued: list[str] = []
        """Values the span stated with an update cue ("switch the cap to 858 MB")."""

    def state(
        self,
        label: str,
        value: str,
        order: float,
        source: int,
        cue: bool = False,
        was: tuple[str, ...] = (),
    ) -> None:
        """Record that ``label`` is ``value`` as of ``order`` (``was``: values it had)."""
        key = _key(label)
        if not key or not value:
            return
        fact = self._find(key, label, cue or source == 0, value)
        if fact is None:
            self.facts.append(Fact(label, key, value, order, source, list(was)))
            return
        if value == fact.value:  # said again: the weightier source, the later time
            fact.order = max(fact.order, order)
            fact.source = min(fact.source, source, key=_SHOWN_FIRST.__getitem__)
            fact.was = [w for w in dict.fromkeys([*fact.was, *was]) if w != value][-2:]
            return
        if order < fact.order:  # an older statement: at most a value it used to have
            if value not in fact.was:
                fact.was.insert(0, value)
            return
        for old in (*was, fact.value):
            if old != value and old not in fact.was:
                fact.was.append(old)
        fact.was = [w for w in fact.was if w != value][-2:]
        if len(label) > len(fact.label) and not _is_config(fact.label):
            fact.label = label
        fact.value, fact.order = value, order
        fact.source = source if source else fact.source

    def _find(self, key: tuple[str, ...], label: str, loose: bool, value: str = "") -> Fact | None:
        for fact in reversed(self.facts):
            if fact.key == key:
                return fact
        if not loose or _is_config(label):
            return None
        for fact in reversed(self.facts):  # "the cap" is "the spending cap" when it changes
            if _is_config(fact.label):
                continue
            short, long_ = sorted((key, fact.key), key=len)
            if long_[-len(short) :] == short or (len(short) > 1 and long_[: len(short)] == short):
                return fact  # "the freeze" or "the code freeze" is "the code freeze date"
            same_type = bool(value) and _type_of(value) == _type_of(fact.value)
            if same_type and len(short) == 1 and long_[0].rstrip("s") == short[0].rstrip("s"):
                return fact  # "switch staging to https://…" updates "the staging URL"
            if _stem(_head(key)) == _stem(_head(fact.key)) and not _qualified_apart(key, fact.key):
                return fact
            if (
                same_type
                and _type_of(value) == "money"
                and {_head(key), _head(fact.key)} <= MONEY_HEADS
                and _modifiers(key) & _modifiers(fact.key)
            ):
                return fact  # "travel spend is capped at $5,400" updates "the travel budget"
        return None

    def pairs(self) -> frozenset[str]:
        """``label=value`` of every fact, spaces removed (to leave their literals out)."""
        return frozenset(re.sub(r"\s", "", f"{f.label}={f.value}") for f in self.facts)

    def current(self) -> set[str]:
        return {f.value for f in self.facts}

    def stale(self) -> dict[str, Fact]:
        """Old values (no label's current value) → the fact whose value replaced them."""
        now = self.current()
        return {w: f for f in self.facts for w in f.was if w not in now}

    def read(self, text: str, order: float, source: int) -> None:
        """Record every statement of ``text`` (see :func:`statements`); an update that names
        its subject in other words updates the one earlier value of the same shape."""
        # Of the assistant's prose only updates and config-like values count (below): a
        # sentence with no cue and nothing config-like in it is not read at all.
        found = statements(text, source, sieve=source == 2)
        if source in (0, 1, 2):
            found += self._updates(text, {v for _, v, _, _ in found})
        for i, (label, value, was, cue) in enumerate(found):
            if cue and source in (1, 2):
                self.cued.append(value)
            known = self._find(_key(label), label, True, value) is not None
            if cue and not known:
                named = self._named(text, value, _key(label)) or self._renamed(text, label, value)
                label, known = named or label, named is not None
            if (
                source == 2
                and not (known and (cue or _is_config(label)))
                and not (_is_config(label) and "=" in text)
            ):
                # The assistant's prose updates a value; a new one it states is a fact
                # kept out of sight (its own bullet shows it), so that a later statement
                # of the same thing supersedes it there.
                if not known:
                    self.state(label, value, order + i * 1e-4, SAID, cue, was)
                continue
            self.state(label, value, order + i * 1e-4, source, cue, was)

    def _updates(self, text: str, taken: set[str]) -> list[tuple[str, str, tuple[str, ...], bool]]:
        """The updates of ``text`` that :func:`statements` reads no label for ("let's go with
        2027-10-17 for the freeze instead"): a sentence saying it overrides, holding one
        value, whose shape (:func:`_shape_of`) an earlier value has."""
        out: list[tuple[str, str, tuple[str, ...], bool]] = []
        if not self.facts or not overrides(text):
            return out
        for sentence in sentences(bounded(text)):
            if not overrides(sentence) or not score(sentence).override:
                continue
            literals = typed_literals(sentence)
            values = [_whole(sentence, lit) for lit in literals if lit.type in _FACT_TYPES]
            if len(values) != 1 or values[0] in taken:
                continue
            label = self._named(sentence, values[0])
            if label is not None:
                out.append((label, values[0], (), True))
        return out

    def _renamed(self, text: str, label: str, value: str) -> str | None:
        """The label an explicit change of plan renames ("scratch that, the query timeout
        is 84 s" after "the database timeout is 82 s"): a label never stated before, in a
        sentence that says it replaces what was said, of the one earlier value with the
        same head noun and the same shape. A new thing is not introduced by "scratch that";
        with two candidates it stays apart."""
        key = _key(label)
        if not key or _is_config(label) or not _REPLACES.search(text):
            return None
        shape = _shape_of(value)
        alike = {
            f.label
            for f in self.facts
            if f.key != key
            and f.value != value
            and _stem(_head(f.key)) == _stem(_head(key))
            and _shape_of(f.value) == shape
        }
        return alike.pop() if len(alike) == 1 else None

    def _named(self, text: str, value: str, key: tuple[str, ...] = ()) -> str | None:
        """The label of a value of the same type that an update names by its key word ("we
        move the deployment to eu-central-1; plan against that region" updates ``region``)."""
        kind = _type_of(value)
        if kind is None:
            return None
        said = {w.lower() for w in re.findall(r"[A-Za-z]\w+", text)}
        for fact in reversed(self.facts):
            if fact.key[-1] in said and _type_of(fact.value) == kind:
                if key and _qualified_apart(key, fact.key):
                    continue  # "the hardware budget" is not "the marketing budget"
                return fact.label
        # No key word: the one earlier value of the same shape (the subject words it shares,
        # among several), as "switch the reads to db-9.internal" updates the one db host.
        shape = _shape_of(value)
        alike = [f for f in self.facts if _shape_of(f.value) == shape and f.value != value]
        if key:  # "the travel budget" names another budget than "the project budget"
            alike = [
                f for f in alike if _head(f.key) != _head(key) or not _qualified_apart(key, f.key)
            ]
        if (earlier := EARLIER.search(text)) is not None:
            # "the earlier code freeze date no longer applies; …": the value of that thing,
            # not the one other date
            named = {_stem(w) for w in _key(earlier.group(1))}
            alike = [f for f in alike if named & {_stem(w) for w in f.key}]
        for pool in ([f for f in alike if said & set(f.key)], alike):
            labels = {f.label for f in pool}
            if len(labels) == 1:
                return labels.pop()
        return None

    def add_to(self, items: Items, limits: dict[int, int], show_superseded: bool = False) -> None:
        """Add the labelled values as items: at most ``limits[source]`` of each source (the
        newest), shown the user's first, each source in statement order; with
        ``show_superseded`` each with its earlier values as ``(was …)``."""
        chosen: list[Fact] = []
        counts: dict[int, int] = {}
        for fact in sorted(self.facts, key=lambda f: -f.order):
            counts[fact.source] = counts.get(fact.source, 0) + 1
            if counts[fact.source] <= limits.get(fact.source, 8):
                chosen.append(fact)
        newest = {id(f): rank for rank, f in enumerate(sorted(chosen, key=lambda f: f.order))}
        for fact in sorted(chosen, key=lambda f: (_SHOWN_FIRST.get(f.source, 9), f.order)):
            priority = _VALUE_PRIORITY.get(fact.source, 46.0) + (4.0 if fact.was else 0.0)
            priority += newest[id(fact)] * 0.01  # the later of equals outlives the earlier
            text = render_fact(fact, show_superseded)
            items.value(fact.label, text, priority, carried=fact.source == 0, value=fact.value)

    def resolve(self, items: Items, show_superseded: bool = False) -> set[str]:
        """Rewrite or drop bullets that quote a replaced value as current; the stale values.

        A bullet of the user's rules, decisions, later requests, pending jobs or next step
        that said nothing but the old value is dropped; any other bullet gets the new value in
        place of the old one (``new (was old)`` with ``show_superseded``), outside inline
        code, in sentences that name the label and do not already hold the new value.
        """
        stale = self.stale()
        if not stale:
            return set()
        for item in list(items.items):
            if item.anchor_kind is not None or item.label is not None:
                continue
            if not any(old in item.text for old in stale):
                continue
            droppable = item.section in (CRITICAL, PENDING, NEXT) or (
                item.section == REQUEST and not item.text.startswith("Original request")
            )  # a later request that said nothing but a value since replaced
            if droppable and only_stale(item.text, stale, statements):
                items.remove(item)
                continue
            if item.text.startswith("Original request") and not show_superseded:
                # The task quoted verbatim: a sentence of it that states only a replaced
                # value leaves the quote (the newer statement says the value); the rest stays.
                text = without_stale_sentences(item.text, stale, statements)
                if text is None:
                    items.remove(item)
                    continue
                if text != item.text:
                    item.text, item.variants = text, ()
                    continue
            rewrite_item(item, stale, show_superseded)
        return set(stale)


def _type_of(value: str) -> str | None:
    found = typed_literals(value)
    return found[0].type if len(found) == 1 and _whole(value, found[0]) == value else None


def _shape_of(value: str) -> str | None:
    """What kind of value ``value`` is, finely: its type, with a number's unit and a host's
    or address's leading name ("number ms", "host pg")."""
    kind = _type_of(value)
    if kind is None:
        return None
    if kind == "number":
        return kind + " " + re.sub(r"[\d.,\s]+", "", value).lower()
    if kind in ("host", "email", "path"):
        lead = re.match(r"(?:\w+://)?/?([A-Za-z]+)", value)
        return kind + " " + (lead.group(1).lower() if lead else "")
    return kind


def replaced_anchors(facts: Facts, anchors: Iterable[str]) -> set[str]:
    """The carried value anchors (a previous summary's keyword line, labels lost) an update
    replaced: for each value the span stated with an update cue, the one carried anchor of
    its shape ("702 MB" when "switch the upload cap to 858 MB"); with two of one shape,
    neither (which one it was is unclear)."""
    current = facts.current()
    pool = [a for a in dict.fromkeys(anchors) if a not in current]
    out: set[str] = set()
    for value in facts.cued:
        shape = _shape_of(value)
        same = [a for a in pool if a != value and shape is not None and _shape_of(a) == shape]
        if len(same) == 1:
            out.add(same[0])
    return out


def render_fact(fact: Fact, show_superseded: bool = True) -> str:
    """``label: `value```, with ``show_superseded`` and up to two earlier values as
    ``(was `a`, `b`)``."""
    text = f"{fact.label}: {code(fact.value)}"
    if fact.was and show_superseded:
        text += " (was " + ", ".join(code(w) for w in fact.was[-2:]) + ")"
    return text


_CODE = r"(?:``\s.+?\s``|`[^`]+`)"
_PAIR = re.compile(
    rf"^(?P<label>[^:;`]+?): (?P<value>{_CODE})(?: \(was (?P<was>{_CODE}(?:, {_CODE})*)\))?$"
)


def _uncode(text: str) -> str:
    match = re.fullmatch(r"``\s(.+?)\s``|`([^`]+)`", text.strip())
    return (match.group(1) or match.group(2)) if match else text.strip()


def parse_values(bullet: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The ``(label, value, was)`` pairs of a ``Values —`` line."""
    body = bullet[len(VALUES) :].strip() if bullet.startswith(VALUES) else bullet
    out = []
    for part in re.split(rf"; (?=[^;`]+: {_CODE})", body):
        match = _PAIR.match(part.strip())
        if match:
            was = tuple(_uncode(w) for w in re.findall(_CODE, match.group("was") or ""))
            out.append((match.group("label").strip(), _uncode(match.group("value")), was))
    return out


# --------------------------------------------------------------------------- statements


_CONFIG_LIKE = re.compile(r"=|\d|\w[._]\w|\b[A-Z][A-Z0-9]*[-_A-Z0-9]\b")
"""Something a config-like label (see :func:`_is_config`) may be made of."""


def _whole(text: str, lit: Literal) -> str:
    """A literal's value as a fact states it: an address whole (``https://stg.acme.dev``, of
    which the keyword line keeps the host)."""
    if lit.type == "host" and "://" in (said := text[lit.start : lit.end]):
        return said
    return lit.value


def statements(
    text: str, source: int = 1, sieve: bool = False
) -> list[tuple[str, str, tuple[str, ...], bool]]:
    """``(label, value, was, update cue)`` of every statement of a value in ``text``.

    Config literals (``key = value``) count from anyone; a sentence that names a thing and
    then a value ("the cap is $390", "region: eu-west-1") counts from the user (``source``
    1), the assistant's prose (2) and a previous summary (0). "(was …)" notes are not statements.
    ``sieve``: only sentences with an update cue or something config-like (``=``,
    ``max_retries``, ``MAX``) are read.
    """
    text = re.sub(rf"\s\(was {_CODE}(?:, {_CODE})*\)|\s\(was [^()\n]{{1,80}}\)", "", text)
    out: list[tuple[str, str, tuple[str, ...], bool]] = []
    prose = source in (0, 1, 2)
    text = bounded(text)
    overriding = said_before = False
    for sentence in sentences(text, min_chars=4) if prose else [text]:
        # An update cue in the sentence, or an override in it or just before it on its own
        # ("Scratch that. The cap is $450."); not one anywhere in a long message.
        overriding = prose and overrides(sentence) and score(sentence).override
        cue = bool(_UPDATE_CUE.search(sentence)) or overriding or said_before
        said_before = overriding and len(sentence) <= 40
        if sieve and not cue and not _CONFIG_LIKE.search(sentence):
            continue
        literals = typed_literals(sentence)
        for lit in literals:
            if lit.type == "config" and "=" in lit.value and not lit.value.startswith("--"):
                key, _, value = lit.value.partition("=")
                key, value = key.strip(), value.strip().strip("'\"")
                if _config_fact(key, value, prose):
                    out.append((key, value, (), cue))
        if not prose:
            continue
        if (doer := _DOER.match(sentence)) is not None:  # "Dana Whitfield reviews …"
            out.append((doer.group(2), doer.group(1), (), cue))
        values = [
            (lit.start, lit.end, _whole(sentence, lit))
            for lit in literals
            if lit.type in _FACT_TYPES
        ]
        taken = [(lit.start, lit.end) for lit in literals]
        values += [
            (m.start(), m.end(), m.group(0))
            for m in _BARE_NUMBER.finditer(sentence)
            if not any(a <= m.start() < b for a, b in taken)
        ]
        values.sort()
        last_label: str | None = None
        previous_end = 0
        previous_value: str | None = None
        for start, end, value in values:
            before = sentence[previous_end:start]
            if (
                previous_value is not None
                and _TO.match(before)
                and out
                and out[-1][1] == previous_value
            ):
                # "from $390 to $450": the statement just read gave the old value
                label, _, _, _ = out.pop()
                out.append((label, value, (previous_value,), True))
                previous_end, previous_value = end, value
                continue
            found = _label_before(sentence[max(0, start - 80) : start])
            if found is None:  # "use 2027-03-28 as the code freeze date", "… is the replica host"
                after = LABEL_AFTER.match(sentence, end)
                if after is None and CHOOSES.search(sentence, 0, start):
                    after = FOR_LABEL.match(sentence, end)  # "go with X for read traffic"
                found = (after.group(1).strip(), False) if after else None
            previous_end, previous_value = end, value
            if found is None:
                continue
            label, negated = found
            if label.lower() in _PRONOUNS:
                if last_label is None:
                    last_label = _antecedent(sentence[:start])
                if last_label is None:
                    continue
                label = last_label
            last_label = label
            if negated:  # "the cap is no longer $390": an old value, not a current one
                out.append((label, "", (value,), True))
                continue
            out.append((label, value, (), cue))
    return _fold_negations(out)


_ANTECEDENT = re.compile(
    r"\b(?:the|our|a|an)\s+([A-Za-z][\w-]{2,})\s*[:;,]\s*(?:it|this|that)\b[^:;,]*$", re.I
)


def _antecedent(before: str) -> str | None:
    """What a pronoun stands for: "the freeze" of "moved the freeze: it now starts"."""
    match = _ANTECEDENT.search(before)
    return match.group(1) if match else None


def _config_fact(key: str, value: str, prose: bool) -> bool:
    """Whether a ``key=value`` literal states a value worth a label (never a secret's)."""
    if not _PLAIN_VALUE.fullmatch(value) or SECRET_KEY.search(key):
        return False
    return not _passes_a_name(key, value) if prose else _is_value(key, value)


def _is_value(key: str, value: str) -> bool:
    """Whether code's ``key=value`` sets a value (``retries=5``), not passes a name along
    (``condition=condition``, ``self.x = x``)."""
    if _passes_a_name(key, value):
        return False
    if _LITERAL_VALUE.fullmatch(value):
        return True
    return any(lit.type != "identifier" for lit in typed_literals(value))


def _passes_a_name(key: str, value: str) -> bool:
    return key.startswith("self.") or value.startswith("self.") or value == key.split(".")[-1]


def _fold_negations(
    found: list[tuple[str, str, tuple[str, ...], bool]],
) -> list[tuple[str, str, tuple[str, ...], bool]]:
    """ "The cap is no longer $390, it is $450": a negated value is the next one's ``was``."""
    out: list[tuple[str, str, tuple[str, ...], bool]] = []
    retired: dict[str, tuple[str, ...]] = {}
    for label, value, was, cue in found:
        if not value:
            retired[label] = retired.get(label, ()) + was
            continue
        out.append((label, value, retired.pop(label, ()) + was, cue or label in retired))
    return out


_LEAD_LABEL = re.compile(r"^.*:\s+(?=[^:]*[A-Za-z][^:]*$)")
"""A statement's own label before what it labels ("NOTE: " of "NOTE: the host is")."""


def _label_before(prefix: str) -> tuple[str, bool] | None:
    """The label the text before a value ends with, and whether it was negated."""
    cut = 0
    for m in _CLAUSE.finditer(prefix):
        cut = m.end()
    clause = _LEAD_LABEL.sub("", prefix[cut:])  # "CONFIG: the host is": the host's
    if _FROM.search(clause):
        clause = _FROM.sub("", clause).rstrip() + " to "
    match = _LINK.search(clause)
    if match is None:
        return None
    words = match.group("label").split()
    introduced = False
    while words and words[0].lower().strip("'") in _LEAD_WORDS | {"of"}:
        introduced = introduced or words[0].lower() in _INTRODUCERS
        words.pop(0)
    if (
        not introduced
        and not _COPULA.search(match.group("link"))
        and not (
            len(words) == 1 and words[0].lower() in _PRONOUNS  # "it now starts": as it was said
        )
    ):
        return None
    while words and words[-1].lower() in _LEAD_WORDS:
        words.pop()
    label = " ".join(words).strip(".'-")
    pronoun = label.lower() in _PRONOUNS
    if not pronoun and (
        len(label) > 40 or not re.search(r"[A-Za-z]{3}|[A-Za-z][._][A-Za-z]", label)
    ):
        return None
    if SECRET_KEY.search(label):
        return None
    return label, bool(_NEGATED.search(match.group("link")))
