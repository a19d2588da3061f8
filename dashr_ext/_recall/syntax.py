"""How a front end spells the calls that recall's hints suggest (SPEC 8).

A result names what to run next: the outline's ``recall:`` line, the read-on hint of an
elided turn or a pruned output, a search's ``narrow with …`` and ``no matches`` notes. By
default they are Python calls, ``history_read(checkpoint="c14")``, as the kernel's helpers
and the model's tools take them; the ``dashr`` command gives a :class:`Syntax` that spells
them as commands (``dashr read demo.jsonl c14``), so every hint runs where it is read.
"""

from __future__ import annotations

__all__ = ["PYTHON", "Syntax"]


class Syntax:
    """The Python spelling; a front end with other syntax overrides each method."""

    def outline(self) -> str:
        """The outline call."""
        return "history_outline()"

    def read(
        self,
        checkpoint: str | None = None,
        seq: int | str | None = None,
        turn: int | str | None = None,
    ) -> str:
        """A read of ``checkpoint``'s span, else of turn ``turn``'s originals, else forward
        from ``seq`` (``"N"``: a placeholder)."""
        if checkpoint is not None:
            return f'history_read(checkpoint="{checkpoint}")'
        if turn is not None:
            return f"history_read(turn={turn})"
        return f"history_read(seq={seq})"

    def search(self, phrase: str | None = None) -> str:
        """A search for ``phrase`` (None: a placeholder)."""
        return f'history_search("{phrase if phrase is not None else "phrase"}")'

    def argument(self, name: str, value: str | None = None) -> str:
        """A search argument (``checkpoint="c39"``, ``cursor="h17"``; no value: its name)."""
        return name if value is None else f'{name}="{value}"'

    def next_page(self, token: str) -> str | None:
        """A line put before a read page's ``cursor:`` line (None: no line)."""
        return None


PYTHON = Syntax()
"""The spelling of the kernel's helpers, the magics' results and the model's tools."""
