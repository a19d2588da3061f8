"""Literal phrase matching: the normalised search form, the index and snippets (SPEC 8).

A query and an event body match when the normalised query occurs in the normalised body.
Normalising case-folds (``STRASSE`` finds ``straße``), applies Unicode compatibility
normalisation (a composed ``é`` finds a decomposed one, ``ﬁ`` finds ``fi``) and collapses
whitespace runs to one space, so the words of a phrase may span any whitespace. A snippet
maps the match back to the original characters. The index keeps the normalised text of the
log's messages in large strings scanned with ``str.find``; it grows with the log (only new
events are added). Texts of one byte per character (Latin-1) and wider ones are kept in
separate strings, so a single dash in a checkpoint does not double the memory of the string
it lands in. A full string (:data:`CHUNK_CHARS`) is sealed: kept as Zstandard-compressed UTF-8 and
decompressed for each scan, so the index of a 100 MB log holds about a fifth of its text
rather than a second copy. Scanning a sealed chunk costs its decompression, about 1 ms per
million characters; a log under a million characters of message text never seals one.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import AnyStr

__all__ = ["SNIPPET_CHARS", "SearchIndex", "cut_before", "fixed", "folds_before", "form_of",
           "holds", "normalize", "snippet"]  # fmt: skip

SNIPPET_CHARS = 240
"""Longest snippet text of a search hit (the ``…`` marks excluded)."""
SNIPPET_BEFORE = 80
"""Characters of context kept before the match in a snippet."""
CHUNK_CHARS = 1_000_000
"""Normalised search text is kept in strings of about this size; a full one is compressed."""
_LEVEL = 1
"""Zstandard level of a sealed chunk. Measured on the 100 MB bench log against zlib and LZ4:
about a fifth of the text, decompressed at about 1 GB/s (zlib level 1: a little larger and
three times slower to scan; LZ4: faster but half again larger)."""


def _compress(data: bytes) -> bytes:
    import zstandard  # imported when a first chunk is sealed, not by every search command

    # Copied: the bytes zstandard returns keep the allocation of the worst-case output size
    # (about the input's), five times what a sealed chunk needs.
    return bytes(memoryview(zstandard.compress(data, _LEVEL)))


def _decompress(data: bytes) -> bytes:
    import zstandard

    return zstandard.decompress(data)


_WS = re.compile(r"\s+")


def _fold(text: str) -> str:
    """Unicode compatibility caseless form (NFKC of the full case folding), spaces kept.

    Character by character when every character of ``text`` folds alone (:func:`_alone`),
    else the whole text at once (:func:`_fold_whole`); both give the same text.
    """
    if text.isascii():
        return text.lower()
    folded = _fold_utf8(text.encode("utf-8", "surrogatepass").lower())
    return folded.decode("utf-8", "surrogatepass") if folded is not None else _fold_whole(text)


def _fold_utf8(data: bytes, refused: frozenset[str] = frozenset()) -> bytes | None:
    """The form, in UTF-8, of the text whose UTF-8 with ASCII letters lower-cased is
    ``data``, when each of its characters folds alone and none is in ``refused``; else None.

    Each character beyond ASCII whose form differs is replaced by its form in the bytes
    (UTF-8 never holds a character's bytes inside another's)."""
    chars = set(data.translate(None, _ASCII).decode("utf-8", "surrogatepass"))
    if refused and not refused.isdisjoint(chars):
        return None
    for char in chars:
        form = form_of(char)
        if form is None:
            return None
        if form != char:
            data = data.replace(
                char.encode("utf-8", "surrogatepass"), form.encode("utf-8", "surrogatepass")
            )
    return data


def cut_before(data: bytes | bytearray, at: int) -> bool:
    """Whether the text whose UTF-8 is ``data`` folds as its two sides cut at byte ``at``:
    at an end, before an ASCII character or before one that folds alone."""
    if at >= len(data) or data[at] < 0x80:
        return True
    size = 2 if data[at] < 0xE0 else 3 if data[at] < 0xF0 else 4
    return form_of(data[at : at + size].decode("utf-8", "surrogatepass")) is not None


def form_of(char: str) -> str | None:
    """:func:`_alone` of a character beyond ASCII, remembered."""
    form = _FORMS.get(char, "")
    if form == "":
        if len(_FORMS) >= _FORMS_KEPT:
            _FORMS.clear()  # a text of every character there is: start again
        form = _FORMS[char] = _alone(char)
    return form


def _fold_whole(text: str) -> str:
    nfd = unicodedata.normalize("NFD", text).casefold()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKD", nfd).casefold())


_ASCII = bytes(range(128))
_FORMS: dict[str, str | None] = {}
"""Each character beyond ASCII met so far -> its form when it folds alone, else None."""
_FORMS_KEPT = 1 << 16
"""At most this many characters are remembered (texts use a few thousand)."""


def _starts_alone(text: str) -> bool:
    """Whether ``text`` starts with a character nothing before it can combine with or move
    past: a starter (combining class 0) that is no mark and no Hangul vowel or final jamo.
    (Every character that canonical composition joins to a character before it is a mark
    or one of those jamo.)"""
    if not text:
        return False
    first = text[0]
    point = ord(first)
    return not (
        unicodedata.combining(first)
        or unicodedata.category(first)[0] == "M"
        or 0x1160 <= point <= 0x11FF
        or 0xD7B0 <= point <= 0xD7FF
    )


def _alone(char: str) -> str | None:
    """The form of ``char`` when it is the same whatever stands around it, else None.

    So it is when the character and each step of its folding (NFD, case fold, NFKD, case
    fold) start with a character that :func:`_starts_alone`: then no step reorders or
    composes across its edges, and a text of such characters and ASCII folds to their forms
    joined. The form's own characters must be their own forms (so replacing one character
    never changes another's form).
    """
    step = char
    for fold in _STEPS:
        step = fold(step)
        if not _starts_alone(step):
            return None
    form = _fold_whole(char)
    if any(not c.isascii() and _fold_whole(c) != c for c in form):
        return None
    return form


_STEPS = (
    str,
    lambda text: unicodedata.normalize("NFD", text),
    str.casefold,
    lambda text: unicodedata.normalize("NFKD", text),
    str.casefold,
)


def normalize(text: str) -> str:
    """Case-folded, NFKC-normalised, whitespace runs collapsed to one space, ends stripped.

    A text already in that form is returned itself (no copy is kept).
    """
    if text.isascii():
        out = " ".join(text.lower().split())
    else:
        data = text.encode("utf-8", "surrogatepass").lower()
        folded = _fold_utf8(data, _SPACES_BEYOND_ASCII)
        if folded is not None:
            # Only ASCII whitespace: collapsed in the bytes (each run to one space), which
            # makes no string per word as ``split`` does.
            folded = folded.translate(_SPACE_BYTES)
            if b"  " in folded:
                folded = _SPACE_RUN.sub(b" ", folded)
            out = folded.strip(b" ").decode("utf-8", "surrogatepass")
        else:
            out = " ".join(_fold(text).split())
    return text if out == text else out


_SPACE_BYTES = bytes(32 if chr(b).isspace() else b for b in range(128)) + bytes(range(128, 256))
"""Every ASCII character ``str.split`` splits on made a space, other bytes kept."""
_SPACE_RUN = re.compile(b"  +")
_SPACES_BEYOND_ASCII = frozenset("\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)
"""The whitespace characters beyond ASCII (``str.split`` splits on them too; a test checks
the list against this Python's Unicode data)."""


def holds(body: str, phrase: str) -> bool:
    """``phrase in normalize(body)`` for a normalised ``phrase``, computed on less.

    * A phrase without a space is in the collapsed form exactly when it is in the folded
      one, and a phrase is in neither when one of its words is missing.
    * A text folds as its two sides wherever it is cut before an ASCII character or one
      that folds alone (:func:`_alone`), so a phrase of such characters, each its own form,
      found as it is in the body's UTF-8 (ASCII letters lower-cased) with such a cut after
      it (there is one before it), is in the form, and nothing else needs folding.
    """
    if body.isascii():
        low = body.lower()
        if " " not in phrase:
            return phrase in low
        return all(w in low for w in phrase.split(" ")) and phrase in " ".join(low.split())
    alone = " " not in phrase and fixed(phrase)
    if alone and _found_in_text(body, phrase):
        return True
    data = body.encode("utf-8", "surrogatepass").lower()
    if alone and _found_alone(data, phrase):
        return True
    folded_utf8 = _fold_utf8(data)
    if folded_utf8 is None:
        folded = _fold_whole(body)
    elif " " not in phrase:
        return phrase.encode("utf-8", "surrogatepass") in folded_utf8
    else:
        folded = folded_utf8.decode("utf-8", "surrogatepass")
    if " " not in phrase:
        return phrase in folded
    return all(w in folded for w in phrase.split(" ")) and phrase in " ".join(folded.split())


def _found_in_text(body: str, phrase: str) -> bool:
    """:func:`_found_alone` in the text itself, no bytes made: ``phrase`` as it is, or with
    a first character that folds to its own (``S`` or ``Ü`` for ``s`` or ``ü``)."""
    at = body.find(phrase)
    if at >= 0 and _cut_in_text(body, at + len(phrase)):
        return True
    if len(phrase) == 1:
        return False
    at = body.find(phrase[1:], 1)
    if at < 0 or not _cut_in_text(body, at + len(phrase) - 1):
        return False
    first = body[at - 1]
    return (first.lower() if first.isascii() else form_of(first)) == phrase[0]


def _cut_in_text(body: str, at: int) -> bool:
    """:func:`cut_before` of a text by character offset."""
    return at >= len(body) or body[at].isascii() or form_of(body[at]) is not None


def _found_alone(data: bytes, phrase: str) -> bool:
    """Whether ``phrase`` (of characters that fold alone to themselves) stands in ``data``
    (a body's UTF-8, ASCII letters lower-cased) with a cut after it, as it is or with its
    first character beyond ASCII in a form that folds to it (``Ü`` for ``ü``)."""
    wanted = phrase.encode("utf-8", "surrogatepass")
    at = data.find(wanted)
    if at >= 0 and cut_before(data, at + len(wanted)):
        return True
    if phrase[0].isascii() or len(phrase) == 1:
        return False
    rest = wanted[len(phrase[0].encode("utf-8", "surrogatepass")) :]
    at = data.find(rest, 1)
    if at < 0 or not cut_before(data, at + len(rest)):
        return False
    return folds_before(data, at, 0, phrase[0])


def folds_before(data: bytes | bytearray, at: int, floor: int, first: str) -> bool:
    """Whether the character ending at byte ``at`` of the UTF-8 ``data`` (starting at or after
    ``floor``) is one beyond ASCII that folds alone to ``first``."""
    start = at - 1
    while start > floor and 0x80 <= data[start] < 0xC0:  # back to its first byte
        start -= 1
    if data[start] < 0x80:
        return False
    try:
        return form_of(data[start:at].decode("utf-8", "surrogatepass")) == first
    except UnicodeDecodeError:
        return False


def fixed(phrase: str) -> bool:
    """Whether each character of ``phrase`` is ASCII or folds alone to itself."""
    return phrase.isascii() or all(c.isascii() or form_of(c) == c for c in set(phrase))


def _narrow(text: str) -> bool:
    """Whether ``text`` is stored at one byte per character (Latin-1)."""
    if text.isascii():
        return True
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _phrase_pattern(query: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(w) for w in query.split(" ")), re.IGNORECASE)


def _clusters(body: str) -> Iterator[tuple[int, int]]:
    """``[start, end)`` of each character with the combining marks that follow it."""
    start = 0
    for i in range(1, len(body) + 1):
        if i == len(body) or not unicodedata.combining(body[i]):
            yield start, i
            start = i


def _locate(body: str, query: str) -> tuple[int, int] | None:
    """Span of ``query`` (normalised) in ``body`` mapped back to original offsets (slow path).

    Each character is normalised with its combining marks, so a match starts and ends on
    whole characters of the original.
    """
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    space = True
    for a, b in _clusters(body):
        for ch in _fold(body[a:b]):
            if ch.isspace():
                if space:
                    continue
                ch = " "
            space = ch == " "
            chars.append(ch)
            starts.append(a)
            ends.append(b)
    at = "".join(chars).find(query)
    if at < 0:
        return None
    return starts[at], ends[at + len(query) - 1]


def _found(body: str, query: str) -> tuple[int, int] | None:
    """Span of the first match of normalised ``query`` in ``body``, in original offsets."""
    found = _phrase_pattern(query).search(body)
    if found is not None:
        a, b = found.span()
        # Case-insensitive regex equality is not the normalised match (``e`` is in ``e\u0301``
        # only before normalising): use the span only when it is one.
        if body.isascii() or (
            normalize(body[a:b]) == query and (b == len(body) or not unicodedata.combining(body[b]))
        ):
            return a, b
    return _locate(body, query)


def _squash(run: re.Match[str]) -> str:
    return " " if "\n" not in run.group() else "\n"


def snippet(
    body: str, query: str, width: int = SNIPPET_CHARS, *, lines: bool = False
) -> tuple[str, str, str]:
    """``(before, match, after)`` around the first match of normalised ``query`` in ``body``.

    One line (whitespace runs collapsed to a space), at most ``width`` characters in all,
    with up to :data:`SNIPPET_BEFORE` (at most a third of ``width``) before the match. With
    ``lines`` a run holding a line break becomes one ``"\\n"`` instead: the same characters,
    the line breaks kept.
    """
    span = _found(body, query)
    a, b = span if span is not None else (0, 0)
    squash = _squash if lines else " "
    keep = min(SNIPPET_BEFORE, width // 3)
    before = _WS.sub(squash, body[max(0, a - 4 * keep) : a])[-keep:] if keep else ""
    match = _WS.sub(squash, body[a:b])[:width]
    room = width - len(before) - len(match)
    after = _WS.sub(squash, body[b : b + 4 * max(room, 0)])[: max(room, 0)]
    return before.lstrip(), match, after.rstrip()


class SearchIndex:
    """Normalised text of the log's message events (index i = i-th message event).

    Narrow (Latin-1) and wide texts go to two :class:`_Chunks`: joined, one wide character
    would store every character of its chunk in two or four bytes.
    """

    def __init__(self) -> None:
        self.count = 0
        self._parts = (_Chunks(), _Chunks())  # narrow, wide
        self._part = bytearray()  # per index: which part holds it
        self._local = array("q")  # per index: its number in that part
        self._index = (array("q"), array("q"))  # per part: the index of each of its texts

    @property
    def sealed(self) -> list[Sealed]:
        """The sealed (compressed) chunks of both parts."""
        return [*self._parts[0].sealed, *self._parts[1].sealed]

    def add(self, text: str) -> None:
        k = 0 if _narrow(text) else 1
        self._part.append(k)
        self._local.append(self._parts[k].count)
        self._index[k].append(self.count)
        self._parts[k].add(text)
        self.count += 1

    def find(self, query: str) -> list[int]:
        """Indices of the events whose normalised text contains ``query``, ascending."""
        found = [
            [index[i] for i in part.find(query)]
            for part, index in zip(self._parts, self._index, strict=True)
        ]
        return list(heapq.merge(*found)) if found[0] and found[1] else found[0] or found[1]

    def find_in(self, query: str, indices: Iterable[int]) -> list[int]:
        """Those of ``indices`` whose normalised text contains ``query``, in their order
        (each sealed chunk they fall in is decompressed once)."""
        wanted = list(indices)
        hits: set[int] = set()
        for k, part in enumerate(self._parts):
            local = [self._local[i] for i in wanted if self._part[i] == k]
            index = self._index[k]
            hits.update(index[j] for j in part.find_in(query, local))
        return [i for i in wanted if i in hits]

    def text_of(self, index: int) -> str:
        """The normalised text of the ``index``-th message event."""
        return self._parts[self._part[index]].text_of(self._local[index])


def _starts(lengths: Iterable[int]) -> array[int]:
    """Offset of each text in their ``"\n"``-joined string, from the texts' lengths."""
    starts = array("q", [0])
    starts.extend(accumulate(n + 1 for n in lengths))
    starts.pop()  # the offset after the last text
    return starts


def _hits(joined: AnyStr, starts: Sequence[int], query: AnyStr, first: int) -> Iterator[int]:
    """``first +`` the number of each text of ``joined`` holding ``query``, ascending, once."""
    at = joined.find(query)
    while at != -1:
        j = bisect_right(starts, at) - 1
        yield first + j
        if j + 1 >= len(starts):
            return
        at = joined.find(query, starts[j + 1])


def _slice(joined: AnyStr, starts: Sequence[int], j: int) -> AnyStr:
    """The ``j``-th text of ``joined``."""
    end = starts[j + 1] - 1 if j + 1 < len(starts) else len(joined)
    return joined[starts[j] : end]


@dataclass(frozen=True, slots=True)
class Sealed:
    """A full chunk: its texts' UTF-8, ``"\n"``-joined and compressed."""

    data: bytes
    starts: array[int]
    """Byte offset of each text in the decompressed chunk."""
    first: int
    """The part-local number of its first text."""

    @classmethod
    def of(cls, texts: list[str], first: int) -> Sealed:
        encoded = [t.encode() for t in texts]
        starts = _starts(len(b) for b in encoded)
        return cls(_compress(b"\n".join(encoded)), starts, first)

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, query: bytes) -> Iterator[int]:
        """Part-local numbers of the texts holding ``query``, ascending, each once."""
        return _hits(_decompress(self.data), self.starts, query, self.first)

    def text(self, number: int, data: bytes | None = None) -> bytes:
        """The UTF-8 of its text with part-local ``number`` (``data``: this chunk already
        decompressed)."""
        data = _decompress(self.data) if data is None else data
        return _slice(data, self.starts, number - self.first)


class _Chunks:
    """Texts in big ``"\n"``-joined strings (a normalised text holds no newline, so no match
    crosses two texts); the tail is joined on demand and cached, a full chunk is sealed."""

    def __init__(self) -> None:
        self.count = 0
        self.sealed: list[Sealed] = []
        self.tail: list[str] = []
        self.tail_chars = 0
        self._tail_joined: tuple[str, array[int]] | None = None

    def add(self, text: str) -> None:
        self.tail.append(text)
        self.tail_chars += len(text) + 1
        self.count += 1
        self._tail_joined = None
        if self.tail_chars >= CHUNK_CHARS:
            self.sealed.append(Sealed.of(self.tail, self.count - len(self.tail)))
            self.tail = []
            self.tail_chars = 0

    def _joined_tail(self) -> tuple[str, array[int]]:
        if self._tail_joined is None:
            self._tail_joined = "\n".join(self.tail), _starts(len(t) for t in self.tail)
        return self._tail_joined

    def _sealed_of(self, number: int) -> Sealed | None:
        """The sealed chunk holding the part-local ``number``, None for the tail."""
        if number >= self.count - len(self.tail):  # sealed chunks hold every earlier text
            return None
        return self.sealed[bisect_right(self.sealed, number, key=lambda c: c.first) - 1]

    def find(self, query: str) -> list[int]:
        """Part-local numbers of the texts whose normalised text contains ``query``."""
        out: list[int] = []
        encoded = query.encode()
        for chunk in self.sealed:
            out.extend(chunk.find(encoded))
        if self.tail:
            text, starts = self._joined_tail()
            out.extend(_hits(text, starts, query, self.count - len(self.tail)))
        return out

    def find_in(self, query: str, local: list[int]) -> list[int]:
        """Those of the part-local numbers ``local`` whose text contains ``query``."""
        out: list[int] = []
        by_chunk: dict[int, list[int]] = {}
        for j in local:
            chunk = self._sealed_of(j)
            if chunk is not None:
                by_chunk.setdefault(id(chunk), []).append(j)
            elif query in self.text_of(j):
                out.append(j)
        encoded = query.encode()
        for chunk in self.sealed:
            numbers = by_chunk.get(id(chunk))
            if numbers:
                data = _decompress(chunk.data)
                out.extend(j for j in numbers if encoded in chunk.text(j, data))
        return out

    def text_of(self, index: int) -> str:
        """The normalised text of the part-local ``index``-th text."""
        chunk = self._sealed_of(index)
        if chunk is not None:
            return chunk.text(index).decode()
        text, starts = self._joined_tail()
        return _slice(text, starts, index - (self.count - len(self.tail)))
