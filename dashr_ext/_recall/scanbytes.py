"""The cold search's byte-level work on one piece of a log (see :mod:`.cold`).

A piece is a ``bytearray`` whose byte 0 is a newline and whose bytes ``1:cut`` are whole
lines; its lower-cased copy makes the needle search ASCII case-insensitive. Needles are
found with StringZilla (SIMD substring search), a line's start by the newline before it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import stringzilla as sz

from .prefilter import IMAGE, TOOL_CALL, Plan

__all__ = ["ASCII", "LOWER", "Lowered", "Needle", "Refused", "find_starts", "line_starts",
           "needle_lines", "seq_at"]  # fmt: skip

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
    low: bytearray, cut: int, needles: Sequence[Needle]
) -> Iterator[tuple[int, int, int]]:
    """``(needle index, seq, line start)`` of each line of ``low[1:cut]`` (a piece's
    buffer lower-cased, so the search is ASCII case-insensitive) holding a needle."""
    find, rfind = sz.find, sz.rfind
    for k, needle in enumerate(needles):
        if isinstance(needle, frozenset):
            # Characters beyond ASCII: which of them are in the piece is seen in its bytes
            # beyond ASCII, decoded (bytes a line cut short left over past ``cut`` decode to
            # escapes, none of them such a character); each is then found as bytes.
            rest = low.translate(None, ASCII).decode("utf-8", "surrogateescape")
            strings = sorted(c.encode() for c in needle.intersection(rest))
        else:
            strings = [needle]
        for string in strings:
            at = find(low, string, 1, cut)
            while at != -1:
                start = rfind(low, b"\n", 0, at) + 1
                yield k, seq_at(low, start), start
                at = find(low, string, find(low, b"\n", at, cut) + 1, cut)


def seq_at(buf: bytearray, start: int) -> int:
    """The seq of the line starting at ``start`` (its header was checked)."""
    return int(buf[start + 7 : buf.find(b",", start + 7)])
