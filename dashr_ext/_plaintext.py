"""Results shown as their text: what ``print()`` gives an agent is what a notebook shows.

The base of :class:`~dashr_ext.RecallResult` and :class:`~dashr_ext.AgentReply` (SPEC §8, §15).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlainText"]


class PlainText(str):
    """A ``str`` result that IPython and Jupyter show as its plain text (not its repr).

    What ``print()`` shows an agent and what a notebook shows a person are then the same
    text; subclasses add ``_repr_html_`` where a richer view helps.
    """

    __slots__ = ()

    @property
    def text(self) -> str:
        """The plain text as an exact ``str``."""
        return str.__str__(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)
