"""Display objects for the magics: exact plain text for ``print()``, a table for notebooks.

A :class:`Report` is what ``%dashr status``, ``%dashr config``, ``%compact`` and the other
``%dashr`` subcommands return. ``str()`` and ``repr()`` are the plain text (what a terminal
and an agent's ``print()`` show); :meth:`Report._repr_html_` renders the same rows as an HTML
table. Both are pure functions of the rows: no clock, no memory addresses, no IPython import.

Plain text layout::

    dashr status — session quickstart
    session file    /tmp/dashr-nb/sessions/quickstart.jsonl
    events          189 (seqs 0-188), 3 turns
    note: <one line per note>
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Report"]


@dataclass(frozen=True)
class Report:
    """A titled list of ``(name, value)`` rows and free-text notes."""

    title: str
    rows: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    kind: str = "report"
    """A short name for the CSS class (``dashr-status``, ``dashr-config``, …)."""

    @classmethod
    def of(
        cls,
        title: str,
        rows: Sequence[tuple[str, object]] = (),
        notes: Sequence[str] = (),
        kind: str = "report",
    ) -> Report:
        """Build a report; row values are shown with ``str()``."""
        return cls(title, tuple((name, str(value)) for name, value in rows), tuple(notes), kind)

    @property
    def text(self) -> str:
        """The plain text: the title, one aligned line per row, then ``note: …`` lines."""
        width = max((len(name) for name, _ in self.rows), default=0)
        lines = [self.title]
        lines.extend(f"{name.ljust(width)}  {value}" for name, value in self.rows)
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)

    def _repr_html_(self) -> str:
        esc = html.escape
        out = [f'<div class="dashr-report dashr-{esc(self.kind)}"><p><b>{esc(self.title)}</b></p>']
        if self.rows:
            out.append("<table>")
            out.extend(
                f'<tr><th style="text-align:left">{esc(name)}</th>'
                f'<td style="text-align:left">{esc(value)}</td></tr>'
                for name, value in self.rows
            )
            out.append("</table>")
        out.extend(f"<p><em>note:</em> {esc(note)}</p>" for note in self.notes)
        out.append("</div>")
        return "".join(out)
