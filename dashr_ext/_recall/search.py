"""Literal phrase matching: the normalised search form, the index and snippets (SPEC 8).

A query and an event body match when the normalised query occurs in the normalised body.
Normalising case-folds (``STRASSE`` finds ``straße``), applies Unicode compatibility
normalisation (a composed ``é`` finds a decomposed one, ``ﬁ`` finds ``fi``) and collapses
whitespace runs to one space, so the words of a phrase may span any whitespace. A snippet
maps the match back to the original characters. The index keeps one normalised copy of the
log's message text in a few large strings scanned with ``str.find``; it grows with the log
(only new events are added). Texts of one byte per character (Latin-1) and wider ones are
kept in separate strings, so a single dash in a checkpoint does not double the memory of the
4 MB string it lands in.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from array import array
from bisect import bisect_right
from collections.abc import Iterator

__all__ = ["SNIPPET_CHARS", "SearchIndex", "normalize", "snippet"]

SNIPPET_CHARS = 240
"""Longest snippet text of a search hit (the ``…`` marks excluded)."""
SNIPPET_BEFORE = 80
"""Characters of context kept before the match in a snippet."""
CHUNK_CHARS = 4_000_000
"""Normalised search text is kept in strings of about this size."""

_WS = re.compile(r"\s+")


def _fold(text: str) -> str:
    """Unicode compatibility caseless form (NFKC of the full case folding), spaces kept."""
    if text.isascii():
        return text.lower()
    nfd = unicodedata.normalize("NFD", text).casefold()
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKD", nfd).casefold())


def normalize(text: str) -> str:
    """Case-folded, NFKC-normalised, whitespace runs collapsed to one space, ends stripped.

    A text already in that form is returned itself (no copy is kept).
    """
    out = " ".join(_fold(text).split())
    return text if out == text else out


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
    def chunks(self) -> list[tuple[str, list[int], int]]:
        """The sealed chunks of both parts: ``(text, starts, first local number)``."""
        return [*self._parts[0].chunks, *self._parts[1].chunks]

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

    def text_of(self, index: int) -> str:
        """The normalised text of the ``index``-th message event."""
        return self._parts[self._part[index]].text_of(self._local[index])


class _Chunks:
    """Texts in big ``"\\n"``-joined strings (a normalised text holds no newline, so no match
    crosses two texts); the tail is joined on demand and cached."""

    def __init__(self) -> None:
        self.count = 0
        self.chunks: list[tuple[str, list[int], int]] = []
        self.firsts: list[int] = []
        self.tail: list[str] = []
        self.tail_chars = 0
        self._tail_joined: tuple[str, list[int], int] | None = None

    def add(self, text: str) -> None:
        self.tail.append(text)
        self.tail_chars += len(text) + 1
        self.count += 1
        self._tail_joined = None
        if self.tail_chars >= CHUNK_CHARS:
            self.chunks.append(self._join())
            self.firsts.append(self.chunks[-1][2])
            self.tail = []
            self.tail_chars = 0

    def _join(self) -> tuple[str, list[int], int]:
        starts: list[int] = []
        at = 0
        for text in self.tail:
            starts.append(at)
            at += len(text) + 1
        return "\n".join(self.tail), starts, self.count - len(self.tail)

    def _all(self) -> Iterator[tuple[str, list[int], int]]:
        yield from self.chunks
        if self.tail:
            if self._tail_joined is None:
                self._tail_joined = self._join()
            yield self._tail_joined

    def find(self, query: str) -> list[int]:
        """Indices of the events whose normalised text contains ``query``, ascending."""
        out: list[int] = []
        for text, starts, first in self._all():
            at = text.find(query)
            while at != -1:
                j = bisect_right(starts, at) - 1
                out.append(first + j)
                if j + 1 >= len(starts):
                    break
                at = text.find(query, starts[j + 1])
        return out

    def text_of(self, index: int) -> str:
        """The normalised text of the ``index``-th message event."""
        k = bisect_right(self.firsts, index) - 1
        if k >= 0 and index < self.firsts[k] + len(self.chunks[k][1]):
            text, starts, first = self.chunks[k]
        else:
            text, starts, first = next(c for c in self._all() if c[2] <= index < c[2] + len(c[1]))
        j = index - first
        end = starts[j + 1] - 1 if j + 1 < len(starts) else len(text)
        return text[starts[j] : end]
