"""The ``history_outline`` text and HTML, composed from checkpoints and turn rows (SPEC 8).

Line shapes (stable; agents and tests parse them)::

    history_outline — 37 events (seqs 0-36), 2 checkpoints, 4 turns
    checkpoints (oldest first):
    c8 | summary seq 8 | 4 events, seqs 2-7 | ~48 tokens | 2026-07-06 12:03Z | superseded by c14 | …
    c14 | summary seq 14 | 3 events, seqs 9-13 | ~91 tokens | 2026-07-06 12:20Z | current | …
    c20 | summary seq 20 | 1 event, seq 17 | ~12 tokens | 2026-07-06 12:31Z | current | …
    pruned outputs: 2 (p5, p17); read one whole: history_read(seq=5)
    compressed turns: 2; read one's originals: history_read(turn=3)
    turn 1: 6 → 2 nodes, ~2,310 → ~380 tokens
    turn 3: 14 → 3 nodes, ~9,800 → ~1,450 tokens
    turns:
    turn 1 | seqs 1-7 | 4 events | shadowed | Fix the failing retry tests in retry.test.ts.
    … 2 turns not shown (turns 2-3, seqs 10-27); read them with history_read(seq=10)
    turn 4 (open) | seqs 28-36 | 5 events | visible | Now run the whole suite.
    recall: history_read(checkpoint="c14"), history_read(seq=N), history_search("phrase")

The compressed turns are the ones turn memory rewrote (SPEC §6.4), oldest first, the newest
12 of them at most (:func:`~.turns.compressed_lines`). A checkpoint line ends with its
one-line preview, or ``(no preview)``; a preview or a first
user message too long for its line is cut at a word boundary, with ``…``. The hints name
calls as the result's :class:`~.syntax.Syntax` spells them (``dashr read FILE c14`` from the
command line). In HTML, ids, seq ranges, counts and times never wrap. The first turn and as
many of the newest turns as fit ``outline_max_chars`` are shown; the marker stands where
turns were left out. When not even one turn fits, the marker shrinks to
``… 30 turns not shown; history_read(seq=1)``, then ``… 30 turns not shown``, and the
``recall:`` hint loses its checkpoint example, or goes, until the outline fits. Checkpoints
are never elided: when they alone exceed the budget, the outline is longer than it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._checkpoints import Checkpoint
from .render import counted, minute_utc, one_line, seq_range
from .result import RecallResult
from .syntax import PYTHON, Syntax

if TYPE_CHECKING:
    from .._turns import Turn

__all__ = ["checkpoint_row", "render_outline", "turn_row"]

TURN_TEXT_CHARS = 80
"""Longest first user message shown on a turn line (``…`` included)."""
PREVIEW_CHARS = 120
"""Longest checkpoint preview shown on a checkpoint line (``…`` included)."""

_OUTLINE_FALLBACKS = ((0, 1), (1, 0), (1, 1), (2, 1), (1, 2), (2, 2), (3, 2))
"""(marker level, hint level) pairs tried in turn when the full outline is over budget:
marker 0 full, 1 short, 2 a count, 3 none; hint 0 full, 1 without the checkpoint example,
2 none."""


def checkpoint_row(c: Checkpoint, lo: int, hi: int) -> tuple[str, ...]:
    """The cells of a checkpoint line; ``lo``-``hi`` is its shadowed seq range."""
    status = f"superseded by {c.superseded_by}" if c.superseded_by else "current"
    return (
        c.id,
        f"summary seq {c.summary_seq}"
        if c.role == "summary"
        else f"{c.role}, summary seq {c.summary_seq}",
        f"{counted(len(c.shadowed_seqs), 'event')}, {seq_range(lo, hi)}",
        f"~{c.shadowed_tokens} tokens",
        minute_utc(c.time),
        status,
        one_line(c.preview, PREVIEW_CHARS) or "(no preview)",
    )


def turn_row(
    turn: Turn, last_seq: int, total: int, current: int, first_user: str | None
) -> tuple[str, ...]:
    """The cells of a turn line: ``total`` message events, ``current`` of them visible."""
    end = turn.end_seq if turn.end_seq is not None else last_seq
    if total and current == total:
        state = "visible"
    elif current == 0:
        state = "shadowed"
    else:
        state = "partly shadowed"
    label = f"turn {turn.index}" + (" (open)" if turn.end_seq is None else "")
    text = one_line(first_user, TURN_TEXT_CHARS) if first_user else ""
    return (
        label,
        seq_range(turn.start_seq, end),
        counted(total, "event"),
        state,
        text or "(no user message)",
    )


def _elided(turns: Sequence[Turn], included: int) -> tuple[int, int] | None:
    """Slice ``[a, b)`` of the turns left out when ``included`` are shown (head first)."""
    count = len(turns)
    if included >= count:
        return None
    if included == 0:
        return (0, count)
    return (1, count - (included - 1))


def _marker(
    turns: Sequence[Turn],
    span: tuple[int, int],
    last_seq: int,
    level: int = 0,
    syntax: Syntax = PYTHON,
) -> str | None:
    """The elision marker: in full (level 0), shorter (1, 2), or none at all (3)."""
    a, b = span
    first, last = turns[a], turns[b - 1]
    end = last.end_seq if last.end_seq is not None else last_seq
    count = b - a
    which = f"turn {first.index}" if count == 1 else f"turns {first.index}-{last.index}"
    noun = "turn" if count == 1 else "turns"
    if level == 0:
        return (
            f"… {count} {noun} not shown ({which}, {seq_range(first.start_seq, end)}); "
            f"read them with {syntax.read(seq=first.start_seq)}"
        )
    if level == 1:
        return f"… {count} {noun} not shown; {syntax.read(seq=first.start_seq)}"
    return f"… {count} {noun} not shown" if level == 2 else None


def render_outline(
    *,
    event_count: int,
    checkpoints: Sequence[Checkpoint],
    spans: Mapping[str, tuple[int, int]],
    turns: Sequence[Turn],
    row_of: Callable[[Turn], tuple[str, ...]],
    max_chars: int,
    pruned: Sequence[str] = (),
    syntax: Syntax = PYTHON,
    compressed: Sequence[str] = (),
) -> RecallResult:
    """The outline within ``max_chars``: header, every checkpoint, then the turns that fit.

    ``spans`` maps a checkpoint id to its shadowed seq range; ``row_of`` gives a turn's cells
    (see :func:`turn_row`) and is called only for the turns tried. ``pruned`` are the keys
    (``p<seq>``) of pruned originals, oldest first: one line names them (SPEC §6.5).
    ``syntax`` spells the calls the hints suggest. ``compressed`` are the lines of the turns
    turn memory compressed (:func:`~.turns.compressed_lines`), shown after the pruned line.
    """
    last_seq = event_count - 1
    cps = checkpoints
    plural = "" if len(cps) == 1 else "s"
    header = (
        f"history_outline — {counted(event_count, 'event')} ({seq_range(0, last_seq)}), "
        f"{len(cps)} checkpoint{plural}, {len(turns)} turn{'' if len(turns) == 1 else 's'}"
    )
    cp_rows = [checkpoint_row(c, *spans[c.id]) for c in cps]
    head = [header]
    if cp_rows:
        head.append("checkpoints (oldest first):")
        head.extend(" | ".join(row) for row in cp_rows)
    else:
        head.append("checkpoints: none yet (nothing has been compacted)")
    pruned_line = _pruned_line(pruned, syntax)
    if pruned_line:
        head.append(pruned_line)
    head.extend(compressed)
    head.append("turns:")
    example = f"{syntax.read(cps[-1].id)}, " if cps else ""
    calls = f"{syntax.read(seq='N')}, {syntax.search()}"
    hints = (f"recall: {example}{calls}", f"recall: {calls}", None)
    budget = max_chars - sum(len(x) + 1 for x in head) - len(hints[0] or "")

    count = len(turns)
    rows: dict[int, tuple[str, ...]] = {}
    order = [0, *range(count - 1, 0, -1)] if count else []
    used = 0
    included = 0
    for i in order:
        row = row_of(turns[i])
        line = " | ".join(row)
        after = _elided(turns, included + 1)
        marker_len = len(_marker(turns, after, last_seq, 0, syntax) or "") + 1 if after else 0
        if used + len(line) + 1 + marker_len > budget:
            break
        rows[i] = row
        used += len(line) + 1
        included += 1
    elided = _elided(turns, included)

    def compose(level: int, hint: str | None) -> tuple[str, list[tuple[str, ...] | str]]:
        turn_rows: list[tuple[str, ...] | str] = [rows[i] for i in sorted(rows)]
        marker = _marker(turns, elided, last_seq, level, syntax) if elided else None
        if marker is not None and elided is not None:
            turn_rows.insert(0 if elided[0] == 0 else 1, marker)
        if not turns:
            turn_rows.append("(no turns recorded)")
        lines = [r if isinstance(r, str) else " | ".join(r) for r in turn_rows]
        tail = [hint] if hint is not None else []
        return "\n".join([*head, *lines, *tail]), turn_rows

    # With the full marker and hint the shown turns fit by construction; when not even one
    # turn did, the marker and then the hint get shorter until the outline fits. Only
    # the checkpoints are never elided: when they alone exceed the budget, the outline is
    # longer than it, and keeps the marker and the hint in full.
    text, turn_rows = compose(0, hints[0])
    hint: str | None = hints[0]
    if len(text) > max_chars:
        for level, h in _OUTLINE_FALLBACKS:
            shorter, shorter_rows = compose(level, hints[h])
            if len(shorter) <= max_chars:
                text, turn_rows, hint = shorter, shorter_rows, hints[h]
                break
    notes = [*([pruned_line] if pruned_line else []), *compressed]
    return RecallResult(text, "outline", _outline_html(header, cp_rows, turn_rows, hint, notes))


def _pruned_line(keys: Sequence[str], syntax: Syntax = PYTHON) -> str | None:
    """``pruned outputs: 3 (p18, p68, p92); read one whole: history_read(seq=18)`` (12 keys at
    most: ``pN`` is the original at seq N)."""
    if not keys:
        return None
    shown = (
        ", ".join(keys) if len(keys) <= 12 else f"{', '.join(keys[:6])}, …, {', '.join(keys[-6:])}"
    )
    noun = "output" if len(keys) == 1 else "outputs"
    return f"pruned {noun}: {len(keys)} ({shown}); read one whole: {syntax.read(seq=keys[0][1:])}"


_LEFT = 'style="text-align:left;vertical-align:top"'
"""Cells read as text: notebooks right-align table cells by default."""
_NOWRAP = 'style="text-align:left;vertical-align:top;white-space:nowrap"'
"""Cells of ids, seq ranges, counts and times: never broken across lines (``seqs 5-`` / ``42``)."""
_TEXT_COLUMNS = 1
"""The last cells of a row hold text that may wrap (a preview, a first user message)."""


def _outline_html(
    header: str,
    cp_rows: Sequence[tuple[str, ...]],
    turn_rows: Sequence[tuple[str, ...] | str],
    hint: str | None,
    notes: Sequence[str] = (),
) -> str:
    """``notes``: the lines between the checkpoints and the turns (pruned outputs, compressed
    turns), one paragraph each."""
    esc = html.escape

    def head(*names: str) -> str:
        cells = "".join(f"<th {_LEFT}>{name}</th>" for name in names)
        return f"<table><thead><tr>{cells}</tr></thead><tbody>"

    def cells(row: Sequence[str]) -> str:
        wrap = len(row) - _TEXT_COLUMNS
        return (
            "<tr>"
            + "".join(
                f"<td {_NOWRAP if i < wrap else _LEFT}>{esc(v)}</td>" for i, v in enumerate(row)
            )
            + "</tr>"
        )

    out = [f'<div class="dashr-recall dashr-outline"><p>{esc(header)}</p>']
    if cp_rows:
        out.append(head("checkpoint", "summary", "shadowed", "tokens", "time", "status", "preview"))
        out.extend(cells(row) for row in cp_rows)
        out.append("</tbody></table>")
    else:
        out.append("<p>checkpoints: none yet (nothing has been compacted)</p>")
    out.extend(f"<p>{esc(note)}</p>" for note in notes)
    out.append(head("turn", "seqs", "events", "state", "first user message"))
    for row in turn_rows:
        if isinstance(row, str):
            out.append(f'<tr><td colspan="5" {_LEFT}><em>{esc(row)}</em></td></tr>')
        else:
            out.append(cells(row))
    out.append("</tbody></table>" + (f"<p>{esc(hint)}</p>" if hint is not None else "") + "</div>")
    return "".join(out)
