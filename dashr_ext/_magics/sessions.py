"""``%dashr sessions`` and ``%dashr attach --last``: the recent session files of a directory.

The files are read through :mod:`dashr_ext._catalog` (read-only, heads and tails, newest
first); this module turns them into a table and picks the one ``--last`` means.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from IPython.core.error import UsageError

from .._catalog import SessionFile, catalog, preview, session_files, summarize
from .._plaintext import ShownAsText
from .attachment import same_file

__all__ = ["COLUMNS", "SessionTable", "last_session", "session_table"]

COLUMNS = ("#", "last written", "events", "checkpoints", "first user message", "file")
_NUMERIC = frozenset({"#", "events", "checkpoints"})


@dataclass(frozen=True, repr=False)
class SessionTable(ShownAsText):
    """A titled table of session files: plain text for ``print``, an HTML table for notebooks."""

    title: str
    rows: tuple[tuple[str, ...], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The title, the column names and one aligned line per file, then ``note: …`` lines."""
        lines = [self.title]
        if self.rows:
            table = [COLUMNS, *self.rows]
            widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
            for row in table:
                cells = [
                    cell.rjust(width) if name in _NUMERIC else cell.ljust(width)
                    for name, cell, width in zip(COLUMNS, row, widths, strict=False)
                ]
                lines.append("  ".join([*cells, row[-1]]))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape

        def align(name: str) -> str:
            return "right" if name in _NUMERIC else "left"

        out = [f'<div class="dashr-report dashr-sessions"><p><b>{esc(self.title)}</b></p>']
        if self.rows:
            out.append("<table><tr>")
            out.extend(f'<th style="text-align:{align(n)}">{esc(n)}</th>' for n in COLUMNS)
            out.append("</tr>")
            for row in self.rows:
                out.append("<tr>")
                out.extend(
                    f'<td style="text-align:{align(n)}">{esc(cell)}</td>'
                    for n, cell in zip(COLUMNS, row, strict=True)
                )
                out.append("</tr>")
            out.append("</table>")
        out.extend(f"<p><em>note:</em> {esc(note)}</p>" for note in self.notes)
        out.append("</div>")
        return "".join(out)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%MZ")


def _row(index: int, f: SessionFile, attached: Path | None) -> tuple[str, ...]:
    name = f"{f.path} (attached)" if same_file(attached, f.path) else str(f.path)
    if not f.is_session:
        return (str(index), _when(f.modified_ms), "-", "-", "(not a session file)", name)
    events = "?" if f.events is None else str(f.events)
    checkpoints = str(f.checkpoints) if f.checkpoints_exact else f">={f.checkpoints}"
    first = preview(f.first_user_message) if f.first_user_message is not None else "-"
    return (str(index), _when(f.modified_ms), events, checkpoints, first, name)


def session_table(directory: Path, limit: int, attached: Path | None) -> SessionTable:
    """The ``limit`` most recently written session files in ``directory``, newest first."""
    found = catalog(directory, limit)
    if not found.files:
        return SessionTable(
            f"no session files in {directory}",
            notes=(
                "%load_ext dashr_ext starts its sessions in Dashr.session_dir "
                "($DASHR_HOME/sessions when unset)",
            ),
        )
    rows = tuple(_row(i, f, attached) for i, f in enumerate(found.files, 1))
    shown, total = len(found.files), found.total
    notes: list[str] = []
    if total > shown:
        title = f"dashr sessions — the {shown} newest of {total} files in {directory}"
        notes.append(f"%dashr sessions --limit {total} lists all {total}")
    else:
        title = f"dashr sessions — {total} file{'s' if total != 1 else ''} in {directory}"
        title += ", newest first" if total > 1 else ""
    notes.append(
        "%dashr attach PATH attaches one (--read-only when another kernel is writing it); "
        "%dashr attach --last the newest other session with anything recorded"
    )
    return SessionTable(title, rows, tuple(notes))


def last_session(directory: Path, attached: Path | None) -> Path:
    """The most recently written session in ``directory`` other than ``attached`` that has
    anything recorded (more than its header)."""
    for path in session_files(directory):
        if same_file(attached, path):
            continue
        try:
            f = summarize(path)
        except OSError:
            continue
        if f.is_session and (f.events is None or f.events > 1):
            return path
    raise UsageError(
        f"no session in {directory} to attach besides this one (none has anything recorded); "
        "%dashr sessions lists them, %dashr attach PATH attaches a file elsewhere"
    )
