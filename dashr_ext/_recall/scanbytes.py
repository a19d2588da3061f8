"""The cold search's byte-level work on one piece of a log (see :mod:`.cold`).

A piece is a ``bytearray`` whose byte 0 is a newline and whose bytes ``1:cut`` are whole
lines; its lower-cased copy makes the needle search ASCII case-insensitive. Needles are
found with StringZilla (SIMD substring search), a line's start by the newline before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

import stringzilla as sz

from .prefilter import IMAGE, TOOL_CALL, Plan
from .search import cut_before, fixed, folds_before, form_of

__all__ = ["ASCII", "LOWER", "InText", "Lowered", "Needle", "Refused", "find_starts",
           "line_starts", "needle_lines", "present_chars", "seq_at", "spellings",
           "string_end"]  # fmt: skip

LOWER = bytes(range(65)) + bytes(range(97, 123)) + bytes(range(91, 256))
"""ASCII letters lower-cased, every other byte kept (a :func:`stringzilla.translate` table)."""
ASCII = bytes(range(128))

Needle = bytes | frozenset[str]
"""A needle: bytes, or characters beyond ASCII any of which is looked for."""


class Refused(Exception):
    """The cold pass cannot give the replay's answer for this file; replay instead."""


def find_starts(buf: bytearray, cut: int, seqs: Sequence[int], into: dict[int, int]) -> None:
    """Where the lines of ``seqs`` (ascending; their headers were checked) start in
    ``buf[1:cut]``, into ``into``: each is found by its header."""
    at = 0
    for seq in seqs:
        at = sz.find(buf, b'\n{"seq":%d,' % seq, at, cut)
        if at < 0:
            raise Refused  # not the header the scan read
        at += 1
        into[seq] = at


def line_starts(buf: bytearray, cut: int) -> list[int]:
    """Where each line of ``buf[1:cut]`` starts, then ``cut``."""
    starts = [1]
    find, at = buf.find, buf.find(b"\n", 1, cut)
    while at != -1:
        starts.append(at + 1)
        at = find(b"\n", at + 1, cut)
    return starts


class Lowered:
    """:func:`~.prefilter.line_may_match` of a line holding no ``\\u`` escape and no special
    character (:attr:`~.prefilter.Plan.special_pattern`), tested where it stands in its
    piece's lower-cased bytes (then its projection is its lower case): no copy of the line."""

    def __init__(self, buf: bytearray, low: bytearray, p: Plan) -> None:
        self.buf, self.low = buf, low
        self.needles = [n.encode() for n in p.needles]
        self.digits = [n.encode() for n in p.digit_needles]

    def may_match(self, start: int) -> bool:
        find, low = sz.find, self.low
        end = find(low, b"\n", start)
        if any(find(low, n, start, end) < 0 for n in self.needles):
            return False
        if not self.digits or find(self.buf, TOOL_CALL, start, end) >= 0:
            return True
        return find(self.buf, IMAGE, start, end) >= 0 or all(
            find(low, n, start, end) >= 0 for n in self.digits
        )


def needle_lines(
    low: bytearray, cut: int, needles: Sequence[Needle], present: set[str]
) -> Iterator[tuple[int, int, int]]:
    """``(needle index, seq, line start)`` of each line of ``low[1:cut]`` (a piece's
    buffer lower-cased, so the search is ASCII case-insensitive) holding a needle; the
    characters of a needle of characters found in the piece are added to ``present``."""
    find, rfind = sz.find, sz.rfind
    for k, needle in enumerate(needles):
        if isinstance(needle, frozenset):
            found = present_chars(low, cut, needle)
            present.update(found)
            strings = sorted(c.encode() for c in found)
        else:
            strings = [needle]
        for string in strings:
            at = find(low, string, 1, cut)
            while at != -1:
                start = rfind(low, b"\n", 0, at) + 1
                yield k, seq_at(low, start), start
                at = find(low, string, find(low, b"\n", at, cut) + 1, cut)


LISTED = 256
"""A prefix of a character's UTF-8 found at most this many times in a piece has each of its
places looked at; found more often, its longer prefixes are counted instead."""
COUNTS = 96
"""At most this many prefixes are counted in a piece; past that, every byte beyond ASCII of
the piece is decoded."""

_Trie = tuple[tuple[bytes, "str | None", "_Trie"], ...]
"""Prefixes one byte longer than their parent's: ``(prefix, its character when it is a whole
one, its own children)``."""


@lru_cache(maxsize=16)
def _trie(chars: frozenset[str]) -> tuple[_Trie, dict[bytes, str]]:
    """``chars``' UTF-8 as a trie of byte prefixes, and the UTF-8 -> character."""
    utf8 = {c.encode("utf-8", "surrogatepass"): c for c in chars}

    def level(codes: list[bytes], depth: int) -> _Trie:
        heads: dict[bytes, list[bytes]] = {}
        for code in codes:
            heads.setdefault(code[: depth + 1], []).append(code)
        return tuple(
            (head, utf8.get(head), level([c for c in group if c != head], depth + 1))
            for head, group in sorted(heads.items())
        )

    return level(sorted(utf8), 0), utf8


def present_chars(low: bytearray, cut: int, chars: frozenset[str]) -> set[str]:
    """The characters of ``chars`` in ``low[1:cut]``, found by their UTF-8's prefixes (SIMD,
    :mod:`stringzilla`): a whole character is looked for, a shorter prefix counted; one
    found at most :data:`LISTED` times has each of its places looked at,
    and a more frequent one its longer prefixes counted (the ``\\xc3`` of a German text's
    ``ü`` does not make its ``é``, ``\\xc3\\xa9``, looked for at every ``ü``). Past
    :data:`COUNTS` counts, the piece's bytes beyond ASCII are decoded and intersected
    instead (an ASCII character is looked for). No character's UTF-8 stands inside
    another's, so a prefix found is where a character starts."""
    trie, utf8 = _trie(chars)
    found: set[str] = set()
    todo = list(trie)
    counted = 0
    count, find = sz.count, sz.find
    while todo:
        head, char, children = todo.pop()
        counted += 1
        if counted > COUNTS:
            with memoryview(low) as view:
                rest = view[1:cut].tobytes().translate(None, ASCII)
            ascii = {c for c in chars if c.isascii() and find(low, c.encode(), 1, cut) >= 0}
            return ascii | chars.intersection(rest.decode("utf-8", "surrogateescape"))
        if char is not None:  # a whole character: only whether it is there
            if find(low, head, 1, cut) >= 0:
                found.add(char)
            continue
        times = count(low, head, 1, cut)
        if not times:
            continue
        if times > LISTED:
            todo.extend(children)
        else:
            at = find(low, head, 1, cut)
            while at >= 0:
                lead = low[at]
                size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
                got = utf8.get(bytes(low[at : at + size]))
                if got is not None:
                    found.add(got)
                at = find(low, head, at + 1, cut)
    return found


def seq_at(buf: bytearray, start: int) -> int:
    """The seq of the line starting at ``start`` (its header was checked)."""
    return int(buf[start + 7 : buf.find(b",", start + 7)])


_MESSAGE_HEAD = re.compile(
    rb'\{"seq":\d+,"type":"[a-z]+/[a-z]+","time":-?\d+,"surfaceOp":"append","data":\{'
    rb'"message":\{(?:"id":"[^"\\]*",)?"role":"[a-z]+","source":\{"kind":"[^"\\]*"'
    rb'(?:,"[A-Za-z_]+":(?:"[^"\\]*"|-?\d+|true|false|null))*\},"content":\['
)
"""An appended message line up to its first content block, as this package writes it: a
flat ``source`` of plain values, so that what follows ``[`` is the message's content."""
_TEXT_BLOCKS = (b'{"type":"text","text":"', b'{"type":"reasoning","text":"')
"""The blocks whose ``text`` a body shows as it is (:func:`~.render.event_body`)."""
_BACKSLASH, _U = 0x5C, 0x75


class InText:
    """Whether a message line holds a phrase, decided where the line stands in its piece
    (no decode) when the phrase stands in one of its text blocks (text, reasoning).

    :meth:`holds` says True only when :func:`~.search.holds` of the line's body would: the
    phrase's UTF-8 (each of its characters ASCII or folding alone to itself, no ``"``, no
    ``\\``) stands in a text block's JSON string in the lower-cased piece, no escape reaches
    into it, and the character after it ends a piece of folding (an ASCII character, the end
    of the block, or one that folds alone), as :func:`~.search.holds` finds it in a body's
    UTF-8: between the string's escapes the line's bytes are the text's. Its first
    character may also be one beyond ASCII folding to the phrase's (``Ü`` for ``ü``). False
    means "not decided here": the caller decodes the line.
    """

    def __init__(
        self, buf: bytearray, low: bytearray, phrase: str, chars: Iterable[str] = ()
    ) -> None:
        self.buf, self.low = buf, low
        self.spellings = [phrase.encode("utf-8", "surrogatepass"), *spellings(phrase, chars)]
        self.first = phrase[0]
        self.rest = b""  # the phrase after a first character beyond ASCII
        if not self.first.isascii() and len(phrase) > 1:
            self.rest = self.spellings[0][len(self.first.encode("utf-8", "surrogatepass")) :]

    @staticmethod
    def usable(phrase: str) -> bool:
        """Whether :meth:`holds` can decide for ``phrase`` (a normalised, non-empty one)."""
        return '"' not in phrase and "\\" not in phrase and fixed(phrase)

    def holds(self, start: int) -> bool:
        """True when the phrase is in the body of the line starting at ``start``."""
        buf, low = self.buf, self.low
        stop = sz.find(low, b"\n", start)
        if all(sz.find(low, w, start, stop) < 0 for w in self.spellings) and (
            not self.rest or sz.find(low, self.rest, start, stop) < 0
        ):
            return False  # no spelling of it anywhere in the line
        head = _MESSAGE_HEAD.match(buf, start)
        if head is None:
            return False
        at = head.end()
        while True:
            for key in _TEXT_BLOCKS:
                if buf.startswith(key, at):
                    break
            else:
                return False  # another kind of block: its body text is not its bytes
            begin = at + len(key)
            end = string_end(buf, begin)
            if end < 0:
                return False
            if self._within(begin, end):
                return True
            if buf[end + 1 : end + 3] != b"},":
                return False  # the last block, or one with more keys
            at = end + 3

    def _within(self, begin: int, end: int) -> bool:
        low = self.low
        for wanted in self.spellings:
            at = sz.find(low, wanted, begin, end)
            while at >= 0:
                if not _in_escape(low, at) and self._cut(at + len(wanted), end):
                    return True
                at = sz.find(low, wanted, at + 1, end)
        rest = self.rest
        if not rest:
            return False
        at = sz.find(low, rest, begin + 1, end)
        while at >= 0:
            if self._cut(at + len(rest), end) and folds_before(low, at, begin, self.first):
                return True
            at = sz.find(low, rest, at + 1, end)
        return False

    def _cut(self, at: int, end: int) -> bool:
        """Whether the body folds as its two sides cut before the character at ``at`` (the
        string ends at ``end``): an escape of an ASCII character or the block's end is one."""
        low = self.low
        if at == end:
            return True  # then a newline between blocks, or the body's end
        if low[at] == _BACKSLASH:
            return low[at + 1] != _U  # \uXXXX may be a combining mark: decode the line
        try:
            return cut_before(low, at)
        except UnicodeDecodeError:
            return False


def spellings(phrase: str, chars: Iterable[str]) -> list[bytes]:
    """Other UTF-8 spellings of ``phrase`` that fold to it alone: one of its parts replaced by
    one of ``chars`` beyond ASCII that folds alone to that part (``straße`` for ``strasse``).
    Whitespace is never such a part."""
    out: list[bytes] = []
    for char in sorted(chars):
        form = form_of(char)
        if not form or form == char or form != "".join(form.split()):
            continue  # none, itself, or one holding whitespace
        at = phrase.find(form)
        while at >= 0:
            out.append(
                (phrase[:at] + char + phrase[at + len(form) :]).encode("utf-8", "surrogatepass")
            )
            at = phrase.find(form, at + 1)
    return out


def _escaped(data: bytearray, at: int) -> bool:
    """Whether the byte at ``at`` is the letter of an escape (an odd run of ``\\`` before)."""
    k = at - 1
    while data[k] == _BACKSLASH:
        k -= 1
    return (at - 1 - k) % 2 == 1


def _in_escape(data: bytearray, at: int) -> bool:
    """Whether the byte at ``at`` belongs to an escape: its letter, or a hex digit of a
    ``\\uXXXX`` (whose backslash is then among the five bytes before)."""
    k = data.rfind(b"\\", at - 5, at)
    if k < 0 or not _escaped(data, k + 1):
        return False  # none, or an escaped backslash (it starts nothing)
    return k == at - 1 or data[k + 1] == _U


def string_end(data: bytearray, begin: int) -> int:
    """Where the JSON string whose characters start at ``begin`` ends (its closing quote),
    -1 when the line ends first."""
    stop: int = sz.find(data, b"\n", begin)
    at: int = begin
    while True:
        at = sz.find(data, b'"', at, stop if stop >= 0 else len(data))
        if at < 0 or not _escaped(data, at):
            return at
        at += 1
