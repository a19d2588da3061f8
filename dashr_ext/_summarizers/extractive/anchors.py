"""Literal anchors: the exact strings a summary keeps so a later search finds them (SPEC §5.2).

:func:`typed_literals` is the one extractor of typed literals — money, dates and times,
timezones, regions, versions, hashes and ids, hosts, config keys with values, branch and
person names, paths, numbers with units, code identifiers — that salience
(:mod:`.salience`), labelled values (:mod:`.facts`) and the keyword line all read.
:func:`candidate_anchors` ranks a span's anchors by kind and :func:`add_anchors` adds them to
a summary as the keyword line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .items import ANCHOR_KINDS, CRITICAL, FACT_BULLETS, KEYWORDS, Items
from .reading import Span
from .text import FILE_PATH, first_line, words

__all__ = [
    "LITERAL_WEIGHTS",
    "TYPE_KINDS",
    "Anchor",
    "Literal",
    "add_anchors",
    "bounded",
    "candidate_anchors",
    "clear_literal_cache",
    "parse_keywords",
    "typed_literals",
]

LITERAL_WEIGHTS = {
    "money": 6,
    "date": 5,
    "time": 5,
    "timezone": 5,
    "region": 5,
    "ticket": 5,
    "person": 5,
    "email": 4,
    "uuid": 4,
    "hash": 4,
    "version": 4,
    "host": 4,
    "branch": 4,
    "config": 4,
    "path": 3,
    "number": 2,
    "identifier": 1,
}
"""How much a literal of each type says (salience), 1–6."""
TYPE_KINDS = {
    "money": "values",
    "date": "values",
    "time": "values",
    "timezone": "values",
    "region": "values",
    "version": "values",
    "host": "values",
    "number": "values",
    "ticket": "ids",
    "uuid": "ids",
    "hash": "ids",
    "branch": "ids",
    "identifier": "ids",
    "config": "config",
    "person": "names",
    "email": "names",
    "path": "paths",
}
"""The keyword-line kind (:data:`~.items.ANCHOR_KINDS`) of each literal type."""
# Keyword lines written before the kinds were renamed.
_KIND_ALIASES = {"numbers": "values", "identifiers": "ids"}


@dataclass(frozen=True)
class Literal:
    """A typed literal found in a text, with where it stands."""

    type: str
    value: str
    start: int
    end: int


_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_ZONE = r"(?:UTC|GMT|Z|[A-Z]{2,4}T|[+-]\d{2}:?\d{2})"
_AMOUNT = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_VALUE = r"(?:\"[^\"\n]{0,60}\"|'[^'\n]{0,60}'|[^\s'\"`,;()\[\]{}]+)(?![\w(\[{])"
_HOST_TLD = (
    r"com|net|org|io|cloud|internal|local|lan|corp|example|co|ai|gov|edu|de|uk|eu|us|fr|jp|cn|"
    r"nl|ch|se|xyz"
)
_NOT_TICKET = r"(?!(?:UTF|SHA|ISO|AES|GPT|MD|COVID|IPV|TLS|SSL|HTTP|RSA|ARM|WIN|LATIN|UCS|PEP)-)"
# One alternation, most specific first: at each position the first alternative that matches
# wins, so a date is never also a number and a hash never an identifier.
_LITERAL = re.compile(
    # Every literal starts where no word character (or dot) comes before it, and a plain
    # word (letters only, nothing like . @ / = _ - after it) is none, unless it may start a
    # date, a region or a host: two cheap tests turn most positions down before any
    # alternative is tried.
    r"(?<![\w.])(?=[\w$€£¥₹~./-])"
    r"(?!(?!localhost\b|(?:east|west|central|north|south|uk|japan|australia)[a-z]*\b|"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\b)"
    r"(?:[a-z]+|[A-Z][a-z]+|[A-Z]+)\b(?![.@/:=+_$-]))(?:"
    rf"(?P<url>\b[a-z][a-z0-9+.-]{{1,10}}://[^\s'\"<>`)\]]+)"
    r"|(?P<email>(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    r"|(?P<uuid>(?<![\w-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}(?![\w-]))"
    r"|(?P<date>(?<![\w.-])\d{4}-[01]\d-[0-3]\d(?:[T ][0-2]\d:[0-5]\d(?::[0-5]\d)?"
    rf"(?:\.\d+)?(?:Z|[+-]\d{{2}}:?\d{{2}})?)?(?![\w-])"
    rf"|(?<![\w])(?:{_MONTH}\.? [0-3]?\d(?:st|nd|rd|th)?(?:,? \d{{4}})?"
    r"|[0-3]?\d(?:st|nd|rd|th)? (?:of )?(?:January|February|March|April|May|June|July|August|"
    r"September|October|November|December)(?:,? \d{4})?)(?![\w])"
    r"|(?<![\w./-])[0-3]?\d/[0-3]?\d/(?:\d{4}|\d{2})(?![\w/]))"
    rf"|(?P<time>(?<![\w:.])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?:\s?[AaPp]\.?[Mm]\.?)?"
    rf"(?:\s?{_ZONE})?(?![\w:])"
    rf"|(?<![\w.])(?:1[0-2]|0?[1-9])\s?[ap]\.?m\.?(?:\s?{_ZONE})?(?![\w]))"
    r"|(?P<timezone>\b(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|"
    r"Pacific|Etc)/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?\b|\b(?:UTC|GMT)[+-]\d{1,2}(?::?\d{2})?\b)"
    r"|(?P<region>(?<![\w-])(?:(?:us|eu|ap|sa|ca|me|af|il|mx)(?:-gov)?-(?:north|south|east|"
    r"west|central|northeast|northwest|southeast|southwest)-\d|(?:us|europe|asia|australia|"
    r"northamerica|southamerica|me|africa)-(?:north|south|east|west|central|northeast|northwest|"
    r"southeast|southwest)\d(?:-[a-f])?|(?:eastus|westus|centralus|northeurope|westeurope|"
    r"uksouth|ukwest|eastasia|southeastasia|japaneast|japanwest|australiaeast)\d?)(?![\w-]))"
    rf"|(?P<money>(?<![\w.])(?:US\$|[$€£¥₹])\s?{_AMOUNT}(?:\s?(?:[kKmMbB]|bn|mn)\b)?"
    rf"|(?<![\w.]){_AMOUNT}\s?(?:[kKmM]\s?)?(?:USD|EUR|GBP|JPY|CHF|CAD|AUD|CNY|INR|"
    r"dollars?|euros?|cents?)\b)"
    r"|(?P<ip>(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{2,5})?(?![\w]|\.\w))"
    r"|(?P<version>(?<![\w.])v\d+(?:\.\d+){1,3}(?:[-+][0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
    r"(?![\w]|\.\w)|(?<![\w.])\d+\.\d+\.\d+(?:[-+][0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
    r"(?![\w]|\.\w))"
    rf"|(?P<ticket>(?<![\w-])(?:CVE-\d{{4}}-\d{{4,}}|{_NOT_TICKET}[A-Z][A-Z0-9]{{1,9}}-\d{{1,6}})"
    r"(?![\w-]))"
    rf"|(?P<path>(?i:{FILE_PATH.pattern})"
    r"|(?<![\w/.:@-])(?:~|\.{1,2})?/(?:[\w.+@-]+/)+[\w.+@-]+/?(?![\w/-]))"
    rf"|(?P<host>(?<![\w.@/-])(?:localhost|(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{_HOST_TLD}))"
    r"(?::\d{2,5})?(?![\w-]|\.\w))"
    r"|(?P<config>(?<![\w-])--[A-Za-z][\w-]*(?:=[^\s'\"`,;]+)?"
    rf"|(?<![\w.])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?:\s?=\s?{_VALUE})?\b"
    rf"|(?<![\w.-])[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+ ?= ?{_VALUE}"
    r"|(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+=[^\s'\"`,;]+)"
    r"|(?P<hash>(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?:[0-9a-f]{64}|[0-9a-f]{7,40})"
    r"(?![\w-]))"
    r"|(?P<branch>(?<![\w/.-])(?:feature|feat|fix|bugfix|hotfix|release|chore)/[\w.-]*\w"
    r"(?:/[\w.-]*\w)*(?![\w/]))"
    r"|(?P<number>(?<![\w.])\d+(?:\.\d+)?[ ]?(?:ms|µs|us|ns|s|sec|seconds?|min(?:utes?)?|h|hours?|"
    r"days?|weeks?|[KMGT]i?B|[kKMG]b|bytes?|tokens?|%|px|x|rps|qps|req/s|attempts?|retries|"
    r"requests|users|rows|items|workers|threads|cores|replicas|nodes)(?![\w]))"
    r"|(?P<identifier>(?<![\w.])(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:\(\))?"
    r"|(?<![\w.])[a-z_][a-z0-9]*_[a-z0-9_]+(?![\w.])"
    r"|(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w.])))",
    re.M,
)
_PERSON_NAME = r"[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?(?: (?:van |de |von |da |di |del |le )?[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?){1,2}"  # noqa: E501
_ROLE = (
    r"(?:manager|lead|owner|reviewer|engineer|developer|admin\w*|contact|on-call|SRE|PM|CTO|"
    r"CEO|CFO|VP|director|architect|designer|analyst|customer|client|colleague|teammate|"
    r"maintainer|boss|tester|QA|intern|consultant|founder|head of \w+)"
)
# A person's name only where the text introduces a person: "ask Dana Whitfield",
# "Dana Whitfield (our release manager)", "the reviewer is Dana Whitfield".
_PERSON = re.compile(
    r"(?:\b(?:[Mm]y name is|I am|I'm|[Aa]sk|[Cc]ontact|[Pp]ing|[Cc]c|[Ee]mail|[Aa]ssign(?:ed)? "
    r"(?:it |this )?to|[Rr]eviewed by|[Aa]pproved by|[Rr]eported by|[Ss]igned off by|"
    r"[Aa]uthored by|[Ww]ritten by|[Tt]alk to|[Ff]ollow up with|[Cc]heck with|[Hh]and (?:it |this "
    r")?(?:over )?to|[Aa]ccording to|[Tt]hanks to|[Ee]scalate to|" + _ROLE + r"(?: is|:)|"
    r"[Aa]uthor:?)\s+)(?P<a>" + _PERSON_NAME + r")\b"
    r"|(?P<b>"
    + _PERSON_NAME
    + r")(?:,? (?:is |was )?(?:our|my|the|your) (?:[\w-]+ ){0,2}"
    + _ROLE
    + r"\b| \((?:our|my|the|your) [^)\n]{1,40}\))",
)
_NOT_NAMES = words(
    "The This That These Those Please Then Now Also And But Our My Your Its It We They He "
    "She You If When While After Before Python Django Flask Pytest Git GitHub Docker "
    "Linux Windows Monday Tuesday Wednesday Thursday Friday Saturday Sunday Team Support "
    "Security"
)
_BRANCH_CONTEXT = re.compile(
    r"(?:\bbranch(?:es)?(?: named| called)?\s+|\bgit (?:checkout(?: -[bB])?|switch(?: -[cC])?|"
    r"push(?: -u)?(?: origin)?|merge|rebase|pull(?: origin)?|branch(?: -[dDmM])?) +|"
    r"\borigin/)[`'\"]?(?P<b>[A-Za-z0-9][\w./-]*\w)[`'\"]?"
)
_KNOWN_BRANCHES = frozenset({"main", "master", "develop", "dev", "staging", "production", "trunk"})
_NOT_BRANCHES = frozenset({"is", "of", "the", "to", "and", "that", "name", "names", "for", "with"})


def typed_literals(text: str) -> tuple[Literal, ...]:
    """The typed literals of ``text``, without overlaps, in the order they stand."""
    return _literals(text)


def clear_literal_cache() -> None:
    """Forget the memoized literals (see :func:`~.salience.clear_caches`)."""
    _literals.cache_clear()


@functools.lru_cache(maxsize=8192)  # sentences and messages are read again and again
def _literals(text: str) -> tuple[Literal, ...]:
    found: list[Literal] = []
    for m in _LITERAL.finditer(text):
        kind = m.lastgroup or ""
        value = m.group(0)
        if kind == "url":
            value = value.rstrip(".,;:!?")  # a sentence's full stop ends no address
            host = re.match(r"[a-z][a-z0-9+.-]*://(?:[^@/\s]*@)?([^/:?#\s]+(?::\d+)?)", value)
            if host is None or "." not in host.group(1):
                continue
            found.append(Literal("host", host.group(1), m.start(), m.start() + len(value)))
            continue
        elif kind == "ip":
            kind = "host"
        elif kind == "path":
            value = value.rstrip(".,;:!?")  # a sentence's full stop ends no path either
            value = value.rstrip("/") or value
        elif kind == "identifier" and (len(value) < 4 or re.fullmatch(r"[\d.]+", value)):
            continue
        elif kind == "config":
            value = value.rstrip(".,:;")
        found.append(Literal(kind, value, m.start(), m.end()))
    extra: list[Literal] = []
    for m in _BRANCH_CONTEXT.finditer(text):
        name = m.group("b").rstrip(".")
        quoted = m.group(0).rstrip()[-1:] in "`'\""
        if name.lower() in _NOT_BRANCHES or not (
            quoted or re.search(r"[/_.\d-]", name) or name in _KNOWN_BRANCHES
        ):
            continue
        start = m.start("b")
        extra.append(Literal("branch", name, start, start + len(name)))
    for m in _PERSON.finditer(text):
        group = "a" if m.group("a") else "b"
        name = m.group(group)
        if name.split()[0] in _NOT_NAMES or name.split()[-1] in _NOT_NAMES:
            continue
        extra.append(Literal("person", name, m.start(group), m.end(group)))
    if not extra:
        return tuple(found)
    for lit in extra:  # a context literal replaces what the alternation saw in its place
        found = [f for f in found if f.end <= lit.start or f.start >= lit.end]
        found.append(lit)
    return tuple(sorted(found, key=lambda lit: lit.start))


# --------------------------------------------------------------------------- a span's anchors

_HEAD_CHARS, _TAIL_CHARS = 12_000, 4_000


def bounded(text: str) -> str:
    """A long text's head and tail: what a pasted log or diff says is read from its ends."""
    if len(text) <= _HEAD_CHARS + _TAIL_CHARS:
        return text
    return text[:_HEAD_CHARS] + "\n…\n" + text[-_TAIL_CHARS:]


@dataclass
class Anchor:
    """A candidate anchor of the keyword line: its text, type and how salient it is."""

    text: str
    type: str
    score: float
    first: int
    """Where it first appeared (ties keep the order of first appearance)."""
    user: bool = False
    """The user wrote it."""


_SOURCE_WEIGHTS = {1: 3.0, 2: 2.0, 3: 3.0, 4: 1.0}
"""Mentions by source (see :attr:`~.reading.Span.salient`): user, assistant or tool call,
error line, tool output."""


def candidate_anchors(span: Span) -> dict[str, list[Anchor]]:
    """Literal anchors of ``span`` by keyword-line kind, most salient first.

    An anchor's score is its type's weight (:data:`LITERAL_WEIGHTS`: a sum of money or a
    date says more than an identifier) plus its mentions, each weighted by who made it (the
    user and error lines 3, the assistant and tool calls 2, tool output 1; at most 6).
    """
    found: dict[str, dict[str, Anchor]] = {k: {} for k in ANCHOR_KINDS}
    mentions: dict[tuple[str, str], float] = {}

    def note(kind: str, type_: str, value: str, where: int, source: int) -> None:
        value = value.strip()
        if kind not in ("errors", "config"):
            value = value.rstrip(".,:;)")
        if not 3 <= len(value) <= 100:
            return
        anchor = found[kind].get(value)
        if anchor is None:
            anchor = found[kind][value] = Anchor(value, type_, 0.0, where)
        anchor.user = anchor.user or source == 1
        key = (kind, value)
        mentions[key] = mentions.get(key, 0.0) + _SOURCE_WEIGHTS[source]

    for where, line in enumerate(span.errors):
        note("errors", "error", line if len(line) <= 100 else line[:97].rstrip() + "…", where, 3)
    texts_seen: set[str] = set()
    for where, (source, text) in enumerate(span.salient):
        if text in texts_seen:  # a message repeated verbatim (harness boilerplate) counts once
            continue
        texts_seen.add(text)
        seen: set[str] = set()
        for lit in typed_literals(bounded(text)):
            if lit.value not in seen:
                seen.add(lit.value)
                note(TYPE_KINDS[lit.type], lit.type, lit.value, where, source)
    for where, cmd in enumerate(span.commands):
        if cmd.text:
            line = first_line(cmd.text, 200)
            note(
                "commands",
                "command",
                line if len(line) <= 60 else " ".join(line.split()[:3]),
                where,
                2,
            )
    out: dict[str, list[Anchor]] = {}
    for kind, anchors in found.items():
        for anchor in anchors.values():
            weight = 5.0 if kind in ("errors", "commands") else LITERAL_WEIGHTS[anchor.type]
            anchor.score = weight + min(mentions[(kind, anchor.text)], 6.0)
        out[kind] = sorted(anchors.values(), key=lambda a: (-a.score, a.first))
    return out


def add_anchors(
    items: Items,
    span: Span,
    old: list[list[list[str]]],
    per_kind: int,
    exclude: frozenset[str] = frozenset(),
    pairs: frozenset[str] = frozenset(),
) -> None:
    """Add the keyword line: up to ``per_kind`` literal anchors of each kind.

    Anchors are the exact strings of the span that the bullets do not already contain,
    grouped as ``errors``, ``paths``, ``values`` (money, dates, times, versions, hosts,
    regions, numbers with units), ``config`` (flags, ``KEY=value``), ``ids`` (hashes,
    tickets, branches, identifiers), ``names`` (people) and ``commands``, so that a later
    ``history_search`` has something exact to look for. Each anchor's priority follows its
    salience, so a sum of money outlives a low-salience sentence. The keyword lines of
    previous summaries (``old``) are merged in, one union per kind in which the previous
    anchors keep up to half the slots. ``exclude`` lists literals that may not appear (stale
    values); a config literal whose ``key=value`` is in ``pairs`` is left out too (the
    labelled values hold it). Call it after every other bullet is in.
    """
    if per_kind == 0:
        return
    previous: dict[str, list[str]] = {}
    for parsed in old:
        for bullet in parsed[CRITICAL]:
            if bullet.startswith(KEYWORDS):
                for kind, anchors in parse_keywords(bullet).items():
                    previous.setdefault(kind, []).extend(anchors)
    # A fact bullet may be dropped by the budget: its literals stay in the keyword line.
    body = "\n".join(i.text for i in items.items if not i.text.startswith(FACT_BULLETS))
    fresh = candidate_anchors(span)
    for kind in ANCHOR_KINDS:
        new = [
            a
            for a in fresh.get(kind, [])
            if a.text.rstrip("…") not in body
            and a.text not in exclude
            and not (kind == "config" and re.sub(r"\s", "", a.text).strip("'\"") in pairs)
        ]
        old_kind = [a for a in dict.fromkeys(previous.get(kind, [])) if a not in exclude]
        keep_new = new[: max(per_kind - min(len(old_kind), per_kind // 2), 0)]
        chosen: list[tuple[str, float]] = [(a.text, _priority(a)) for a in keep_new]
        names = {text for text, _ in chosen}
        for text in old_kind:
            if text not in names and len(chosen) < per_kind:
                chosen.append((text, 52.0 if kind in ("values", "names") else 40.0))
                names.add(text)
        for a in new:
            if a.text not in names and len(chosen) < per_kind:
                chosen.append((a.text, _priority(a)))
                names.add(a.text)
        for rank, (text, priority) in enumerate(chosen):
            items.anchor(kind, text, priority - rank * 0.5)


def _priority(anchor: Anchor) -> float:
    """The budget priority of a new anchor: 30–72, by type weight, mentions and the user."""
    return 28.0 + anchor.score * 3.0 + (8.0 if anchor.user else 0.0)


def parse_keywords(bullet: str) -> dict[str, list[str]]:
    """The anchors of a summary's keyword line by kind (older kind names are mapped)."""
    body = bullet[len(KEYWORDS) :].strip()
    out: dict[str, list[str]] = {}
    for group in re.split(r";\s+(?=[a-z]+: )", body):
        kind, _, rest = group.partition(": ")
        kind = _KIND_ALIASES.get(kind.strip(), kind.strip())
        if kind in ANCHOR_KINDS:
            found = [a or b for a, b in re.findall(r"``\s(.+?)\s``|`([^`]+)`", rest)]
            out.setdefault(kind, []).extend(found)
    return out
