"""Which raw log lines can hold a search phrase: a byte-level prefilter (SPEC 8).

Pure: a :class:`Plan` for a normalised phrase, and the test of one raw line against it. The
cold search (:mod:`.cold`) decodes only the lines the plan keeps, so the plan must never drop
a line whose search text (:func:`.render.event_body` decoded, then
:func:`.search.normalize`) holds the phrase.

The needles are the phrase's maximal runs of ASCII letters and digits: each run lies whole in
the search text, so it lies in the raw line, case aside, unless

* the line escapes a character (``\\u0041``, a ``\\ud835`` surrogate, the escapes inside a
  tool call's JSON arguments): a line escaping a printable ASCII character, a surrogate or a
  character of the next point is always decoded;
* a non-ASCII character folds to ASCII (``ß`` reads ``ss``, ``ﬁ`` ``fi``; the table is
  :mod:`.asciifold`): a line holding one whose search form can overlap a needle is tested
  with those characters replaced by their search form;
* the text comes from the body's labels rather than the line (``[prior state checkpoint]``,
  ``(empty)``, ``Infinity`` re-serialised from an overflowing number, the ``x`` of an
  image's size): runs inside those words are not needles; ``[tool call]``, ``[reasoning]``
  and ``[image …]`` name block types the line spells out, the image's media type, size and
  attachment id are fields of the line;
* the run holds a digit and the line carries a tool call or an image: re-serialised
  arguments may write a number differently (``1e5`` reads ``100000.0``), a decoded argument
  is named by its path (``[edits[0].new]``) and an image reads ``[image image/png 800x600
  …]``, so digit runs are only required of lines without either.

A phrase whose runs are all parts of those label words (``empty``, ``prior``) is planned on
its longest run, with the lines that may show the label without spelling it (empty texts,
checkpoint nodes, tool calls, images) as candidates too. A phrase without ASCII letters or
digits gets no plan: the lines holding one of the characters that can spell one of its own
(or a part of one, the accent of ``é``; an ASCII ``=`` or ``!`` too) are looked at
(:func:`char_needle`; for a ``(`` or a ``.``, which labels and re-serialised numbers show,
empty messages and tool calls too), or every message line when it has none (``[]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from .asciifold import ascii_folding
from .unifold import expansion, searchable, sources

__all__ = [
    "Plan",
    "RunNeedle",
    "char_needle",
    "line_may_match",
    "plan",
    "run_needle",
    "short_escapes",
    "shown_by",
    "unplanned_needles",
]

SYNTHETIC_WORDS = ("prior", "empty", "infinity", "x")
"""Words a body shows that its raw line need not spell (labels, re-serialised numbers, the
``x`` of an image's ``800x600``)."""
LABEL_SOURCES: dict[str, tuple[bytes, ...]] = {
    "prior": (),  # ``[prior state checkpoint]``: a checkpoint node, decoded by the scan
    "empty": (b'""', b"[]", b"[ ]"),  # ``(empty)``: no block, or only empty texts
    "infinity": (b'"tool-call"',),  # an overflowing number re-serialised in the arguments
    "x": (b'"image"',),  # ``800x600``
}
"""For each of :data:`SYNTHETIC_WORDS`, what every line whose body shows it holds (unless it
is a checkpoint node)."""

TOOL_CALL = b'"tool-call"'
"""Every line whose message carries a tool call holds this (the block's type)."""
IMAGE = b'"image"'
"""Every line whose message shows an image holds this (the block's type)."""
ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})")

LOWER_TO_ASCII = ("\u0130", "\u212a")
"""The characters beyond ASCII whose :meth:`str.lower` holds an ASCII character (``İ`` reads
``i̇``, the Kelvin sign ``k``); tests check that there are no others."""
_LOWER_TO_ASCII_UTF8 = tuple(c.encode() for c in LOWER_TO_ASCII)

_RUN = re.compile(r"[a-z0-9]+")
_ASCII = bytes(range(128))


@dataclass(frozen=True)
class Plan:
    """How to find the raw lines that can hold one phrase."""

    needles: tuple[str, ...]
    """Lower-case runs every line that can match holds (after :attr:`folding`)."""
    digit_needles: tuple[str, ...]
    """Runs with a digit: required only of lines without a tool call."""
    primary: bytes
    """The needle searched for in the whole file (the longest)."""
    primary_has_digit: bool
    """Then lines with a tool call are candidates too."""
    folding: dict[int, str]
    """Each non-ASCII character whose search form can overlap a needle (its code point, a
    :meth:`str.translate` table) -> that form."""
    risky_escapes: frozenset[int]
    """Code points a ``\\uXXXX`` escape may name only in a line that is always decoded."""

    special_chars: frozenset[str]
    """The characters of :attr:`folding` and :data:`LOWER_TO_ASCII`: a line without one is
    tested on its lower-cased bytes."""

    labels: bool = False
    """The phrase's only runs are parts of :data:`SYNTHETIC_WORDS` (its primary, the only
    needle, the longest): a line may show them without spelling them, so the lines holding
    one of :attr:`sources` and the checkpoint nodes are candidates too."""
    sources: tuple[bytes, ...] = ()
    """What a line that shows those words without spelling them holds
    (:data:`LABEL_SOURCES`), a checkpoint node aside."""

    @cached_property
    def folding_pattern(self) -> re.Pattern[bytes] | None:
        """Finds the UTF-8 of any character of :attr:`folding`; None when there is none
        (compiled when a line first needs it)."""
        chars = sorted(chr(c).encode() for c in self.folding)
        return re.compile(_trie_pattern(chars)) if chars else None

    @cached_property
    def special_pattern(self) -> re.Pattern[bytes]:
        """Finds the UTF-8 of any of :attr:`special_chars`."""
        return re.compile(_trie_pattern(sorted(c.encode() for c in self.special_chars)))

    def project(self, line: bytes, special: bool = True) -> bytes:
        """The UTF-8 ``line`` with each :attr:`folding` character and each character of
        :data:`LOWER_TO_ASCII` replaced by its form, then its ASCII letters lower-cased
        (raises :class:`UnicodeDecodeError` when it is not UTF-8). Its ASCII runs are those
        of the line's lower case with the folding characters replaced: every other character
        lower-cases to characters beyond ASCII, which end a run as its bytes do.
        ``special=False`` says the line holds none of those characters
        (:attr:`special_pattern`)."""
        if line.isascii():
            return line.lower()
        line.decode()  # a line that is not UTF-8 is decoded, to say what is wrong
        if not special:
            return line.lower()
        rest = line.translate(None, _ASCII)  # the UTF-8 of the non-ASCII characters
        found = self.folding_pattern.findall(rest) if self.folding_pattern is not None else []
        for char in set(found):
            line = line.replace(char, self.folding[ord(char.decode())].encode())
        for char in _LOWER_TO_ASCII_UTF8:
            if char in rest:
                line = line.replace(char, char.decode().lower().encode())
        return line.lower()


def _trie_pattern(words: list[bytes]) -> bytes:
    """A regex matching exactly the given UTF-8 sequences (sorted, none a prefix of another),
    branching on one byte at a time so the engine tries few alternatives at each position."""
    if all(len(w) == 1 for w in words):
        return b"[" + b"".join(re.escape(w) for w in words) + b"]"
    groups: dict[bytes, list[bytes]] = {}
    for w in words:
        groups.setdefault(w[:1], []).append(w[1:])
    branches = [re.escape(head) + _trie_pattern(rest) for head, rest in groups.items()]
    return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"


def _overlaps(form: str, run: str) -> bool:
    """Whether ``form`` (one character's search form) can supply part of ``run`` in a match."""
    if run in form or form in run:
        return True
    for k in range(1, min(len(form), len(run)) + 1):
        if form[-k:] == run[:k] or form[:k] == run[-k:]:
            return True
    return False


def plan(phrase: str) -> Plan | None:
    """The prefilter plan of a normalised phrase; None when no line can be skipped.

    A phrase whose runs are all parts of :data:`SYNTHETIC_WORDS` (``empty``, ``prior``) is
    planned on its longest run alone, with every line that may show it as a label."""
    found = _RUN.findall(phrase)
    runs = [r for r in found if not any(r in w for w in SYNTHETIC_WORDS)]
    labels = not runs
    if labels:
        runs = found  # parts of label words: no digit among them
        if not runs:
            return None
    letters = [r for r in runs if not any(c.isdigit() for c in r)]
    digits = [r for r in runs if r not in letters]
    primary = max(letters or digits, key=len)
    folding = {
        ord(char): form
        for char, form in ascii_folding().items()
        if any(_overlaps(form, r) for r in runs)
    }
    words = [w for w in SYNTHETIC_WORDS if any(r in w for r in runs)] if labels else []
    return Plan(
        needles=(primary,) if labels else tuple(letters),
        digit_needles=tuple(digits),
        primary=primary.encode(),
        primary_has_digit=not letters,
        folding=folding,
        risky_escapes=frozenset(range(0x20, 0x7F)) | frozenset(folding),
        special_chars=frozenset({*map(chr, folding), *LOWER_TO_ASCII}),
        labels=labels,
        sources=tuple(dict.fromkeys(b for w in words for b in LABEL_SOURCES[w])),
    )


SYNTHESIZED = frozenset("[]")
"""ASCII characters never looked for: a body shows them in labels (``[tool call]``,
``[edits[0].new]``), and every message line holds them anyway (its content list)."""
SHOWN_BY: dict[str, tuple[bytes, ...]] = {
    "(": LABEL_SOURCES["empty"],
    ")": LABEL_SOURCES["empty"],
    ".": (TOOL_CALL,),
    "+": (TOOL_CALL,),
}
"""The other ASCII characters beyond letters and digits a body may show that its raw line
need not hold, and what every line showing one that way holds: an empty message's
``(empty)``; a number re-serialised in tool-call arguments (``1e+16``, ``100000.0``) or a
decoded argument's path (``[a.b]``). The ``-`` of ``1e-05`` is shown only by a line holding
``"tool-call"``, so it is not here."""
EVERYWHERE = frozenset('"{}:,')
"""Characters every line of a log holds (its JSON): never looked for, as no line would be
skipped."""
COMMON = frozenset("-/_'.")
"""Characters common in text and code (hyphens, paths, names, sentences): looked for only
when the phrase has no rarer one."""


def char_needle(phrase: str) -> frozenset[str] | None:
    """For a phrase without a plan: the characters one of which every line that can hold
    it holds, unless it escapes characters (``\\u``) or holds one of :func:`shown_by`'s
    bytes. They are the :func:`.unifold.sources` of one of the phrase's characters, or of a
    part of one's :func:`.unifold.expansion` (a composed ``é`` is only made from a line
    holding an acute accent, alone or in a character holding one): a character beyond
    ASCII that is :func:`.unifold.searchable`, or an ASCII one that is not whitespace, a
    letter, a digit or one of :data:`SYNTHESIZED` and :data:`EVERYWHERE`; the one with the
    fewest sources, preferring those a label or a number cannot show (:data:`SHOWN_BY`),
    then those not :data:`COMMON`. None when there is none (``[]``, ``::``)."""
    best = _best_char(phrase)
    return best[1] if best is not None else None


def _best_char(phrase: str) -> tuple[str, frozenset[str]] | None:
    """:func:`char_needle`'s character and its sources."""
    best: tuple[bool, bool, int, str, frozenset[str]] | None = None
    for char in sorted({part for c in set(phrase) for part in expansion(c)}):
        if char.isascii():
            if char.isspace() or char.isalnum() or char in SYNTHESIZED or char in EVERYWHERE:
                continue
        elif not searchable(char):
            continue
        found = sources(char)
        key = (char in SHOWN_BY, char in COMMON, len(found), char, found)
        if best is None or key[:3] < best[:3]:
            best = key
    return (best[3], best[4]) if best is not None else None


def unplanned_needles(phrase: str) -> list[bytes | frozenset[str]] | None:
    """For a phrase without a plan: what the cold scan looks for (besides escapes), one of
    which every line that can hold the phrase holds; None when every line may. The
    :func:`run_needle` of a run of punctuation, unless :func:`char_needle` has a character
    neither common nor shown by labels and the run may be shown by a tool call (then the
    character, as for ``->``); else the character's sources, :func:`shown_by` and
    :func:`short_escapes`."""
    best = _best_char(phrase)
    run = run_needle(phrase)
    if run is not None and (
        best is None or best[0] in SHOWN_BY or best[0] in COMMON or not run.shown_by
    ):
        return run.needles
    if best is None:
        return None
    return [best[1], *shown_by(best[1]), *short_escapes(best[1])]


SHORT_ESCAPES = {"\b": b"\\b", "\f": b"\\f", "\n": b"\\n", "\r": b"\\r", "\t": b"\\t"}
"""The control characters JSON writes as a two-character escape, no ``\\u`` (a line holding
a backspace holds ``\\b``, not the character); the others are ``\\u`` escapes."""


def short_escapes(chars: frozenset[str]) -> tuple[bytes, ...]:
    """The :data:`SHORT_ESCAPES` of ``chars``: a line holding one of those characters holds
    its escape instead, so the escapes are looked for too."""
    return tuple(SHORT_ESCAPES[c] for c in sorted(chars) if c in SHORT_ESCAPES)


def shown_by(chars: frozenset[str]) -> tuple[bytes, ...]:
    """What a line holds that may show one of ``chars`` (a :func:`char_needle`) without
    holding it (:data:`SHOWN_BY`): such lines are looked at too."""
    return tuple(dict.fromkeys(b for c in sorted(chars) for b in SHOWN_BY.get(c, ())))


_PUNCTUATION_RUN = re.compile(r"[!#$%&'*+,\-./:;<=>?@^_`{|}~]+")
"""A run of ASCII punctuation a line's JSON string holds as it is: no quote or backslash
(escaped), no bracket or parenthesis (labels show them)."""
RESERIALISED = frozenset("{}:,-")
"""The punctuation of a tool call's re-serialised arguments outside their strings (brackets
and quotes end a run): ``{"a": [{}, {}]}`` reads ``{"a":[{},{}]}``."""
DECODED_ARGUMENT = b"\\\\"
"""Every line whose tool call has a decoded argument (:func:`.render.decoded_arguments`:
its arguments hold a backslash) holds this: the backslash, escaped."""
RESERIALISED_PAIRS = frozenset({"{}", "}}", "},", ":{", ":-", ",{", ",-"})
"""The pairs of those that compact JSON puts side by side (after a ``:`` or a ``,`` comes a
value, after a ``{`` a key or its ``}``, a ``-`` only before a digit)."""


@dataclass(frozen=True)
class RunNeedle:
    """For a phrase without a plan holding a run of two or more ASCII punctuation characters
    (``::``, ``...``, ``=>``): every line whose body holds the phrase holds :attr:`run` as
    it is, unless it escapes a character (``\\u``, or ``\\/``), holds one of
    :attr:`chars` (beyond ASCII, folding to a character of the run: ``…`` reads ``...``) or
    one of :attr:`shown_by`'s bytes. A run is contiguous in the search form, which neither
    makes nor drops ASCII punctuation, and whitespace or a label's brackets end it; in a
    line that is neither a tool call nor an empty message it stands in one JSON string,
    whose escaping keeps such characters (a ``/`` may be written ``\\/``)."""

    run: bytes
    chars: frozenset[str]
    shown_by: tuple[bytes, ...]

    @property
    def needles(self) -> list[bytes | frozenset[str]]:
        """What the cold scan looks for (the escapes it always looks for aside)."""
        slash = [b"\\/"] if b"/" in self.run else []
        return [self.run, *([self.chars] if self.chars else []), *slash, *self.shown_by]


def run_needle(phrase: str) -> RunNeedle | None:
    """The :class:`RunNeedle` of the phrase's longest run of punctuation (the first of the
    longest that no tool call can show without holding it, if any), when it is two or more
    characters long; else None (:func:`char_needle` then)."""
    runs = _PUNCTUATION_RUN.findall(phrase)
    if not runs:
        return None
    run = min(runs, key=lambda r: (-len(r), bool(_shown_by_run(r))))
    if len(run) < 2:
        return None
    chars = frozenset(c for char in set(run) for c in sources(char) if not c.isascii())
    return RunNeedle(run.encode(), chars, _shown_by_run(run))


def _shown_by_run(run: str) -> tuple[bytes, ...]:
    """What a line holds whose body may show ``run`` without the line holding it: a tool
    call, when compact JSON writes its characters side by side (``},{``); a tool call with
    a decoded argument (a backslash in its arguments, escaped in the line), when it holds a
    ``.`` (an argument's path joins its keys with one: ``[x..y]`` for the key ``x.``)."""
    if set(run) <= RESERIALISED and all(
        run[i : i + 2] in RESERIALISED_PAIRS for i in range(len(run) - 1)
    ):
        return (TOOL_CALL,)
    return (DECODED_ARGUMENT,) if "." in run else ()


def _escapes_risky(line: bytes, plan: Plan) -> bool:
    if b"\\u" not in line:
        return False
    for hexa in ESCAPE.findall(line):
        point = int(hexa, 16)
        if point in plan.risky_escapes or 0xD800 <= point < 0xE000:
            return True
    return False


def line_may_match(line: bytes, plan: Plan, *, escapes: bool = True, special: bool = True) -> bool:
    """Whether the raw JSON ``line`` may hold the phrase (False only when it cannot).

    ``escapes=False`` says the line holds no ``\\u`` (in any case), ``special=False`` no
    character :attr:`Plan.special_pattern` finds: the caller looked already.
    """
    if escapes and _escapes_risky(line, plan):
        return True
    try:
        low = plan.project(line, special)
    except UnicodeDecodeError:
        return True  # decoding it says what is wrong
    if not all(n.encode() in low for n in plan.needles):
        return False
    if plan.digit_needles and TOOL_CALL not in line and IMAGE not in line:
        return all(n.encode() in low for n in plan.digit_needles)
    return True
