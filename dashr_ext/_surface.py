"""The surface kept step by step: snapshots that copy nothing, cached request renderings.

A step appends a node or two to a surface that may hold a hundred thousand; what the step
costs must not grow with them. So a :class:`Snapshot` of an append-only list is its length,
not a copy (the list is copied only when a replace is about to change what a snapshot shows),
and :class:`Renderings` keeps each node's OpenAI message, rendered once and dropped only when
a replace takes the node off the surface.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from itertools import islice
from typing import Any, Generic, TypeVar, overload

from ._events import Event
from ._formats import openai

__all__ = ["Positions", "Renderings", "Snapshot", "untrack"]

T = TypeVar("T")


class Snapshot(Sequence[T], Generic[T]):
    """The first ``length`` items of a list that is only appended to, read-only.

    Taking one is O(1). Its owner appends to the list in place (a snapshot keeps showing its
    own prefix) and, before changing an item a snapshot may show, replaces the list with a
    copy. Equal to a tuple, list or snapshot with the same items; slices are tuples.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[T], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            return tuple(self._items[start:stop:step])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("snapshot index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._len)

    def __reversed__(self) -> Iterator[T]:
        items = self._items
        return (items[i] for i in range(self._len - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Snapshot):
            return self._len == other._len and (
                (self._items is other._items) or tuple(self) == tuple(other)
            )
        if isinstance(other, tuple | list):
            return self._len == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def extends(self, older: Snapshot[T]) -> bool:
        """True when this snapshot is ``older`` plus items appended since (O(1))."""
        return self._items is older._items and self._len >= older._len

    def tail(self, start: int) -> list[T]:
        """The items from ``start`` on (O(len - start))."""
        return self._items[start : self._len]


class Renderings:
    """Each surface node's OpenAI message, rendered once, in surface order.

    ``items[k]`` is the rendering of surface position ``k``, for a prefix of the surface:
    nodes appended since are rendered when the request is next derived. A replace swaps the
    renderings of the nodes it shadows for its own node's. Events never change once appended,
    so nothing else invalidates a rendering. :attr:`rendered` counts the renderings made.
    """

    __slots__ = ("items", "rendered")

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.rendered = 0

    def sync(self, surface: list[int], events: Sequence[Event]) -> list[dict[str, Any]]:
        """Render the nodes appended since the last call; the renderings of ``surface``."""
        items = self.items
        done = len(items)
        if done < len(surface):
            render = openai.event_to_openai
            items.extend(render(events[seq]) for seq in surface[done:])
            self.rendered += len(surface) - done
        return items

    def request(
        self, envelope: list[dict[str, Any]], surface: list[int], events: Sequence[Event]
    ) -> list[dict[str, Any]]:
        """A new list: ``envelope`` then the renderings of ``surface``, for the caller to keep.

        The one cost that grows with the surface is its copy, one pointer a node: the list is
        built by a single concatenation at its exact size, and it is left out of the cyclic
        GC (:func:`untrack`), so the young collections that run while the caller holds it do
        not walk its million pointers again.
        """
        out = envelope + self.sync(surface, events)
        untrack(out)
        return out

    def replace(self, a: int, b: int, event: Event) -> None:
        """Positions ``a..b`` became ``event``'s node."""
        items = self.items
        if len(items) > b:
            items[a : b + 1] = [openai.event_to_openai(event)]
            self.rendered += 1
        elif len(items) > a:
            del items[a:]  # the rest is rendered when the request is next derived


class Positions:
    """Surface positions of the current nodes: extended per append, rebuilt after a replace."""

    __slots__ = ("_key", "_map")

    def __init__(self) -> None:
        self._key: tuple[int, list[int]] | None = None
        self._map: dict[int, int] = {}

    def of(self, surface: list[int], version: int) -> dict[int, int]:
        """``{seq: position}`` of ``surface`` at ``version`` (its ``surface_version``)."""
        key = self._key
        if key is None or key[0] != version or key[1] is not surface:  # rollbacks: new list
            self._map = {s: i for i, s in enumerate(surface)}
            self._key = (version, surface)
        return self._map

    def appended(self, surface: list[int], version: int) -> None:
        """``surface`` at ``version`` got its last seq appended (it is now at ``version + 1``)."""
        key = self._key
        if key is not None and key[0] == version and key[1] is surface:
            self._map[surface[-1]] = len(surface) - 1
            self._key = (version + 1, surface)


@cache
def _untracker() -> Callable[[object], None]:
    """CPython's ``PyObject_GC_UnTrack``, a function of its own (the shared ``pythonapi``
    attribute keeps its settings); where there is none, a function that does nothing.
    Resolved on first use: importing ctypes costs a few ms that loading need not pay."""
    if sys.implementation.name != "cpython":
        return lambda obj: None
    try:
        import ctypes

        proto = ctypes.PYFUNCTYPE(None, ctypes.py_object)
        return proto(("PyObject_GC_UnTrack", ctypes.pythonapi))
    except (ImportError, AttributeError, OSError):  # a build without ctypes
        return lambda obj: None


def untrack(obj: object) -> None:
    """Take a new list out of the cyclic GC's generations (CPython): it is freed by reference
    counting alone. For a list that holds only message dicts which never refer back to it: a
    young collection traverses every container allocated since the previous one, and a
    request list of a million messages made each collection while the caller holds it cost a
    walk over a million objects (tens of ms, every few dozen steps). Cycles through the list
    itself (the caller putting it inside one of its own items) are then freed only when
    broken."""
    _untracker()(obj)
