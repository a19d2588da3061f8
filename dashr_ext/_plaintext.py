"""Results shown as their text: what ``print()`` gives an agent is what a notebook shows.

The base of :class:`~dashr_ext.RecallResult` and :class:`~dashr_ext.AgentReply` (SPEC §8, §15).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PlainText", "ShownAsText"]


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


class ShownAsText:
    """A view whose ``text`` is what ``print()``, ``repr()`` and IPython's plain display show.

    For the frozen dataclasses of the displays (declare them with ``repr=False`` so this
    ``__repr__`` stays); they add ``_repr_html_`` for notebooks.
    """

    __slots__ = ()

    @property
    def text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)
