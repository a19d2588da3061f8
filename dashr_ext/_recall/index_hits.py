"""The ``history_search --all`` result: hits across sessions, text and HTML.

The format is ``history_search``'s with a session column::

    history_search "retry budget" in 12 sessions — 4210 events scanned, 5 matched in 2
    sessions, showing 5    (one line)
    1. session 20261130T012227123Z-3f9a1c.jsonl | seq 42 | shadowed | c50 | 2026-11-30 01:22Z
    …snippet…
    scanned 4210, matched 5, truncated false

Sessions come newest first (last written first, as ``%dashr sessions`` lists them); within a
session the hits are in that session's ``history_search`` order (originals, then checkpoint
summaries). When hits are left out, a line says how to narrow and counts the matches per
session; files that could not be searched are named on ``skipped`` lines (at most
:data:`SKIPPED_SHOWN`, the rest named on one line).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass

from .hits import QUERY_SHOWN_CHARS, Hit, search_html
from .render import one_line
from .result import RecallResult

__all__ = ["SKIPPED_SHOWN", "SessionHit", "render_all"]

SKIPPED_SHOWN = 10
"""Most ``skipped NAME: why`` lines of a result; the files past them share one line."""


@dataclass(frozen=True, slots=True)
class SessionHit:
    """A hit and the session file (its name in the directory) it was found in."""

    session: str
    hit: Hit

    def lines(self, number: int) -> tuple[str, str]:
        """``N. session NAME | seq S | state | owner | time`` and ``…snippet…``."""
        meta, snippet = self.hit.lines(number)
        head, rest = meta.split(". ", 1)
        return f"{head}. session {self.session} | {rest}", snippet

    def html_pieces(self) -> tuple[str, str, str]:
        return self.hit.html_pieces()


def render_all(
    query: str,
    *,
    sessions: int,
    scanned: int,
    counts: MutableMapping[str, int],
    hits: Iterable[SessionHit],
    limit: int,
    max_hits: int,
    max_chars: int,
    skipped: MutableSequence[str],
) -> RecallResult:
    """The result for ``counts`` (matches per file name, in display order) and their ``hits``.

    ``hits`` is consumed lazily, at most ``limit`` hits within ``max_chars`` in all, so a
    session whose hits are not shown is never opened; consuming it may correct ``counts``
    (a running step's matches dropped) and add to ``skipped``.
    """
    shown_query = one_line(query, QUERY_SHOWN_CHARS)
    plural = "s" if sessions != 1 else ""

    def header(shown: int) -> str:
        matched = sum(counts.values())
        with_hits = sum(1 for n in counts.values() if n)
        return (
            f'history_search "{shown_query}" in {sessions} session{plural} — {scanned} events '
            f"scanned, {matched} matched in {with_hits} session{'s' if with_hits != 1 else ''}"
            f", showing {shown}"
        )

    def trailer(truncated: bool) -> str:
        matched = sum(counts.values())
        return f"scanned {scanned}, matched {matched}, truncated {str(truncated).lower()}"

    used = len(header(0)) + len(trailer(True)) + len(_narrow(counts, limit, max_hits)) + 8
    used += sum(len(n) + 1 for n in _skipped_notes(skipped)) + 120 * 2  # what opening may add
    shown: list[SessionHit] = []
    for hit in hits:
        meta, line = hit.lines(len(shown) + 1)
        cost = len(meta) + len(line) + 2
        if used + cost > max_chars and shown:
            break
        shown.append(hit)
        used += cost
        if len(shown) >= limit:
            break
    matched = sum(counts.values())
    notes = _skipped_notes(skipped)
    if not matched:
        zero = (
            f"no matches in {sessions} session{plural}: the search is a literal, case-insensitive "
            "phrase match (words may span whitespace; no fuzzy or semantic matching). Try a "
            "shorter or different phrase."
        )
        lines = [header(0), zero, *notes, trailer(False)]
        return RecallResult(
            "\n".join(lines), "search", search_html(lines[0], [], lines[1:-1], lines[-1])
        )
    truncated = len(shown) < matched
    if truncated:
        notes.insert(0, _narrow(counts, limit, max_hits))
    lines = [header(len(shown))]
    for number, hit in enumerate(shown, 1):
        lines.extend(hit.lines(number))
    lines.extend(notes)
    lines.append(trailer(truncated))
    return RecallResult("\n".join(lines), "search", search_html(lines[0], shown, notes, lines[-1]))


def _skipped_notes(skipped: Sequence[str]) -> list[str]:
    """``skipped NAME: why`` lines, the files past :data:`SKIPPED_SHOWN` named on one line."""
    if len(skipped) <= SKIPPED_SHOWN:
        return [f"skipped {s}" for s in skipped]
    rest = [s.split(": ", 1)[0] for s in skipped[SKIPPED_SHOWN - 1 :]]
    more = ", …" if len(rest) > 8 else ""
    return [
        *(f"skipped {s}" for s in skipped[: SKIPPED_SHOWN - 1]),
        f"skipped {len(rest)} more files: {', '.join(rest[:8])}{more}",
    ]


def _narrow(counts: Mapping[str, int], limit: int, max_hits: int) -> str:
    ways = ["a longer phrase"]
    if limit < max_hits:
        ways.append(f"--limit up to {max_hits}")
    ways.append("a search of one session")
    nonzero = [(name, n) for name, n in counts.items() if n]
    parts = [f"{name} ×{n}" for name, n in nonzero[:8]]
    more = ", …" if len(nonzero) > 8 else ""
    return (
        f"more matches than shown: narrow with {', '.join(ways[:-1])} or {ways[-1]} "
        f"(matches per session: {', '.join(parts)}{more})"
    )
