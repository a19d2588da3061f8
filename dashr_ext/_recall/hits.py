"""The ``history_search`` result: numbered hits within the page budget, text and HTML (SPEC 8).

With a checkpoint the header reads ``history_search "…" in checkpoint c20 — …``. Hits come
originals first, in seq order, then checkpoint summaries; ``matched`` counts events, not
occurrences. The owning checkpoint is the one whose shadowed
span holds the event (an event shadowed by c20 stays ``c20`` after c30 supersedes c20,
because ``history_read("c20")`` is where it is read); visible events show ``(visible)``.
The header says what was scanned: a whole-log search reads every message event (user,
assistant, tool results, checkpoints) and none of the log's own records (the session header
and system prompt, turn and step markers, settings, compaction bookkeeping), which hold no
history to recall. When hits are left out, a line before the trailer names the cursor of the
next page (``cursor="h17"``: the hits after seq 17, in this order) and how to narrow the
search; with no match, a line explains that the scan is literal and points at
``history_outline`` / ``history_read``. The calls are spelt as the :class:`~.syntax.Syntax`
given spells them.
"""

from __future__ import annotations

import html
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .render import MONOSPACE, counted, one_line
from .result import RecallResult
from .syntax import PYTHON, Syntax

__all__ = ["FIRST_PAGE", "Hit", "Paging", "narrow_note", "render_hits", "zero_note"]

QUERY_SHOWN_CHARS = 60
"""Longest query shown in the header (``…`` included)."""
SNIPPET_STYLE = f"white-space:pre-wrap;font-family:{MONOSPACE}"
"""A snippet keeps its line breaks in HTML (a traceback reads as lines), in the code font."""
SNIPPET_BREAKS = 12
"""Most line breaks a snippet keeps in HTML (the text form is always one line)."""


@dataclass(frozen=True, slots=True)
class Paging:
    """Which page of a search to show, and how its notes spell the calls they suggest."""

    after: int | None = None
    """The seq a cursor names: the page starts with the hit after it (None: the first page)."""
    syntax: Syntax = PYTHON


FIRST_PAGE = Paging()


@dataclass(frozen=True, slots=True)
class Hit:
    """One matched event: where it is, who owns it, and its snippet split around the match.

    The snippet pieces keep one ``"\\n"`` where the original broke lines (see
    :func:`~.search.snippet`); the text line shows each as a space.
    """

    seq: int
    visible: bool
    owner: str
    time: str
    before: str
    match: str
    after: str

    def lines(self, number: int) -> tuple[str, str]:
        """The hit's two lines: ``N. seq S | state | owner | time`` and ``…snippet…``."""
        state = "visible" if self.visible else "shadowed"
        snippet = f"{self.before}{self.match}{self.after}".replace("\n", " ")
        return (f"{number}. seq {self.seq} | {state} | {self.owner} | {self.time}", f"…{snippet}…")

    def html_pieces(self) -> tuple[str, str, str]:
        """The snippet pieces with the :data:`SNIPPET_BREAKS` line breaks nearest the match
        kept; the others read as spaces."""
        text = self.before + self.match + self.after
        a, b = len(self.before), len(self.before) + len(self.match)
        breaks = [i for i, ch in enumerate(text) if ch == "\n"]
        if len(breaks) > SNIPPET_BREAKS:
            nearest = sorted(breaks, key=lambda i: a - i if i < a else max(0, i - b))
            chars = list(text)
            for i in nearest[SNIPPET_BREAKS:]:
                chars[i] = " "
            text = "".join(chars)
        return text[:a], text[a:b], text[b:]


def zero_note(read_target: str | None, syntax: Syntax = PYTHON) -> str:
    """The line shown when nothing matched; ``read_target`` is the checkpoint to suggest."""
    read = syntax.read(read_target) if read_target else syntax.read(seq=0)
    return (
        "no matches: the search is a literal, case-insensitive phrase match (words may span "
        "whitespace; no fuzzy or semantic matching). Try a shorter or different phrase, "
        f"{syntax.outline()}, or read a likely range with {read}."
    )


def narrow_note(
    owners: Sequence[str] | None,
    limit: int,
    max_hits: int,
    with_counts: bool = True,
    syntax: Syntax = PYTHON,
    cursor: str | None = None,
) -> str:
    """The line shown when hits were left out.

    ``owners`` are the owners of every matched event (``None`` when the search was already
    limited to one checkpoint); they suggest a checkpoint to narrow to and give the counts.
    ``cursor`` is the token of the next page.
    """
    ways: list[str] = []
    counts: dict[str, int] = {}
    if owners is not None:
        for key in owners:
            counts[key] = counts.get(key, 0) + 1
        ids = [k for k in counts if k.startswith("c")]
        if ids:
            ways.append(syntax.argument("checkpoint", ids[0]))
    ways.append("a longer phrase")
    if limit < max_hits:
        ways.append(f"{syntax.argument('limit')} up to {max_hits}")
    listed = " or ".join(ways) if len(ways) < 3 else f"{', '.join(ways[:-1])}, or {ways[-1]}"
    page = f"page on with {syntax.argument('cursor', cursor)}, or " if cursor else ""
    note = f"more matches than shown: {page}narrow with {listed}"
    if counts and with_counts:
        parts = [f"{k} ×{v}" for k, v in list(counts.items())[:8]]
        more = ", …" if len(counts) > 8 else ""
        note += f" (matches per checkpoint: {', '.join(parts)}{more})"
    return note


def render_hits(
    query: str,
    matched: Sequence[int],
    *,
    scope: str | None,
    scanned: int,
    limit: int,
    max_hits: int,
    max_chars: int,
    hit_of: Callable[[int], Hit],
    owner_of: Callable[[int], str],
    latest: str | None,
    events: int | None = None,
    running: int = 0,
    is_summary: Callable[[int], bool] = lambda seq: False,
    paging: Paging = FIRST_PAGE,
) -> RecallResult:
    """The search result for the ``matched`` seqs (ascending), at most ``limit`` hits within
    ``max_chars``, originals first: checkpoint summaries (``is_summary``) repeat what they
    condensed, so their echoes of a phrase would otherwise crowd out the original.

    ``scope`` is the checkpoint searched (``None``: the whole log of ``events`` events, of
    which ``running`` messages belong to the step running now), ``latest`` the newest
    checkpoint. ``hit_of`` builds a hit and is called only for the hits tried; ``owner_of``
    names the owner of any matched seq. ``paging`` says which page (:class:`Paging`).
    """
    after, syntax = paging.after, paging.syntax
    summaries = [s for s in matched if is_summary(s)]
    if summaries:
        taken = set(summaries)
        matched = [s for s in matched if s not in taken] + summaries
    start = _resume(matched, len(matched) - len(summaries), after, is_summary)
    shown_query = one_line(query, QUERY_SHOWN_CHARS)
    where = f" in checkpoint {scope}" if scope is not None else ""
    what = _scanned(scanned, events, running) if scope is None else ""

    def header(shown: int) -> str:  # a later page's hits are numbered on from the earlier
        return (
            f'history_search "{shown_query}"{where} — {counted(scanned, "event")} scanned{what}, '
            f"{len(matched)} matched, showing {shown}"
        )

    def trailer(truncated: bool) -> str:
        return f"scanned {scanned}, matched {len(matched)}, truncated {str(truncated).lower()}"

    hits: list[Hit] = []
    if start >= len(matched):
        note = (
            zero_note(scope if scope is not None else latest, syntax)
            if not matched
            else f"no matches after the cursor (seq {after}): the page before was the last"
        )
        lines = [header(0), note, trailer(False)]
        text = "\n".join(lines)
        return RecallResult(text, "search", search_html(lines[0], [], [note], lines[-1]))

    def fit(extra: list[str], count: int) -> list[Hit]:
        used = len(header(len(matched))) + sum(len(x) + 1 for x in extra)
        used += len(trailer(True)) + 1
        out: list[Hit] = []
        for seq in matched[start : start + count]:
            hit = hits_cache.get(seq) or hit_of(seq)
            hits_cache[seq] = hit
            meta, line = hit.lines(start + len(out) + 1)
            cost = len(meta) + len(line) + 2
            if used + cost > max_chars:
                break
            out.append(hit)
            used += cost
        return out

    hits_cache: dict[int, Hit] = {}
    hits = fit([], limit)
    notes: list[str] = []
    if start + len(hits) < len(matched):
        owners = [owner_of(seq) for seq in matched] if scope is None else None
        # The cursor is the last hit that fits; its token is no longer than this one.
        longest = f"h{max(matched)}"
        for counts in (True, False):  # the per-checkpoint counts go first when space is short
            hits = fit([narrow_note(owners, limit, max_hits, counts, syntax, longest)], limit)
            if hits:
                break
        token = f"h{hits[-1].seq}" if hits else None  # no hit fits: no cursor moves past one
        notes = [narrow_note(owners, limit, max_hits, counts, syntax, token)]
    truncated = start + len(hits) < len(matched)
    lines = [header(len(hits))]
    for number, hit in enumerate(hits, start + 1):
        lines.extend(hit.lines(number))
    lines.extend(notes)
    lines.append(trailer(truncated))
    text = "\n".join(lines)
    return RecallResult(text, "search", search_html(lines[0], hits, notes, lines[-1], start))


def _scanned(scanned: int, events: int | None, running: int) -> str:
    """What a whole-log search of a log of ``events`` events read, and why not the rest:
    `` (every message; the log's 103 other events are …)``."""
    if events is None:
        return ""
    which = (
        f"every message but the {running} of the step running now" if running else "every message"
    )
    other = events - scanned - running
    rest = (
        "event is a setting"
        if other == 1
        else "events are settings, markers and compaction records"
    )
    return f" ({which}; the log's {other} other {rest})"


def _resume(
    ordered: Sequence[int], originals: int, after: int | None, is_summary: Callable[[int], bool]
) -> int:
    """Where the page after the hit at seq ``after`` starts in ``ordered`` (its first
    ``originals`` seqs ascending, then the summaries ascending); 0 without a cursor."""
    if after is None:
        return 0
    if is_summary(after):
        return bisect_right(ordered, after, lo=originals)
    return bisect_right(ordered, after, hi=originals)


class ShownHit(Protocol):
    """What :func:`search_html` shows of a hit: its two lines and its snippet's pieces."""

    def lines(self, number: int) -> tuple[str, str]: ...

    def html_pieces(self) -> tuple[str, str, str]: ...


def search_html(
    header: str, hits: Sequence[ShownHit], notes: Sequence[str], trailer: str, start: int = 0
) -> str:
    """The HTML of a search result: ``header``, the ``hits`` numbered from ``start + 1``,
    ``notes``, ``trailer``."""
    esc = html.escape
    out = [f'<div class="dashr-recall dashr-search"><p>{esc(header)}</p>']
    if hits:
        out.append(f'<ol start="{start + 1}">' if start else "<ol>")
        for number, hit in enumerate(hits, start + 1):
            meta, _ = hit.lines(number)
            meta = meta.split(". ", 1)[1]
            before, match, after = hit.html_pieces()
            out.append(
                f'<li><div><code>{esc(meta)}</code></div><div class="dashr-snippet" '
                f'style="{SNIPPET_STYLE}">…{esc(before)}<mark>{esc(match)}</mark>{esc(after)}…'
                "</div></li>"
            )
        out.append("</ol>")
    out.extend(f"<p>{esc(note)}</p>" for note in notes)
    out.append(f"<p>{esc(trailer)}</p></div>")
    return "".join(out)
