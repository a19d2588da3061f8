"""The value every recall call returns: its exact plain text, plus HTML for notebooks (SPEC 8)."""

from __future__ import annotations

import html

from .._plaintext import PlainText

__all__ = ["RecallResult"]


class RecallResult(PlainText):
    """The plain text of a recall call (what ``print()`` shows an agent), plus rich display.

    The value is exactly the text of SPEC 8. ``repr()`` stays the ordinary quoted ``str``
    repr; IPython and Jupyter show the plain text through :meth:`_repr_pretty_` and notebooks
    the HTML of :meth:`_repr_html_` (escaped and deterministic).
    """

    kind: str
    html: str

    def __new__(
        cls, text: str = "", kind: str = "text", html_text: str | None = None
    ) -> RecallResult:
        obj = super().__new__(cls, text)
        obj.kind = kind
        obj.html = html_text if html_text is not None else _pre(text)
        return obj

    def _repr_html_(self) -> str:
        return self.html


def _pre(text: str) -> str:
    return f'<pre class="dashr-recall">{html.escape(text)}</pre>'
