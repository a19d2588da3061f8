"""Cursor tokens: where the next ``history_read`` page starts (SPEC 8).

Tokens are plain and self-describing: ``c20@4:1200`` is checkpoint c20, position 4 of its
shadowed span (0-based, surface order), character 1200 of that event's body; ``s7@12:0`` is
the log read from seq 7, next event seq 12, character 0; ``t3@12:0`` is turn 3's original
events, next event seq 12, character 0. A token copied with its ``cursor:`` prefix is
accepted too.

A ``history_search`` page that stops short names the cursor of the next one: ``h17`` is the
hits after the one at seq 17, in the search's order (originals by seq, then checkpoint
summaries by seq). It holds no offset into the list, so a page read after more events were
recorded neither repeats nor skips a hit the earlier pages had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import RecallError

__all__ = ["Cursor", "parse_cursor", "parse_search_cursor"]

_CURSOR = re.compile(r"(?:cursor:\s*)?([cst])(\d+)@(\d+):(\d+)")
_SEARCH_CURSOR = re.compile(r"""(?:cursor\s*[:=]\s*)?(["']?)h(\d+)\1""")


@dataclass(frozen=True, slots=True)
class Cursor:
    """A read position: range (``c20``, ``s7`` or ``t3``), position, character offset."""

    range: str
    position: int
    """Checkpoint ranges: index into the shadowed span. Seq and turn ranges: the next
    event's seq."""
    offset: int

    def __str__(self) -> str:
        return f"{self.range}@{self.position}:{self.offset}"


def parse_cursor(token: object) -> Cursor:
    """Parse a cursor token; raises :class:`RecallError` ``malformed cursor …``."""
    if not isinstance(token, str):
        raise RecallError(
            f"cursor: expected the token string a page ended with (e.g. 'c20@4:1200'), "
            f"got {type(token).__name__} {token!r}"
        )
    match = _CURSOR.fullmatch(token.strip())
    if match is None:
        raise RecallError(
            f"malformed cursor {token!r}: expected the token after 'cursor:' on the last line "
            "of a history_read page, like 'c20@4:1200' (checkpoint c20, position 4, character "
            "1200) or 's7@12:0' (the log from seq 7, next seq 12)"
        )
    kind, number, position, offset = match.groups()
    return Cursor(f"{kind}{int(number)}", int(position), int(offset))


def parse_search_cursor(token: object, last_seq: int) -> int:
    """The seq a ``history_search`` cursor names (``h17`` -> 17, at most ``last_seq``);
    raises :class:`RecallError` ``malformed cursor …``."""
    if not isinstance(token, str):
        raise RecallError(
            f"cursor: expected the token a history_search page names for the next page "
            f"(e.g. 'h17'), got {type(token).__name__} {token!r}"
        )
    match = _SEARCH_CURSOR.fullmatch(token.strip())
    if match is None:
        read = " (that is a history_read cursor)" if _CURSOR.fullmatch(token.strip()) else ""
        raise RecallError(
            f"malformed cursor {token!r}{read}: expected the token a history_search page "
            "names for the next page, like 'h17' (the hits after the one at seq 17)"
        )
    seq = int(match.group(2))
    if seq > last_seq:
        raise RecallError(
            f"malformed cursor {token!r}: seq {seq} is past the end of this session's log "
            f"(the last seq is {last_seq})"
        )
    return seq
