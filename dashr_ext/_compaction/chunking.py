"""Chunking newly stale history for the recallable engine (pure; SPEC §6.3, seed 000).

Positions are surface positions; ``allowed`` are the balanced unit boundaries (cuts that
split no tool call from its result and pass no open step). The stale region ``[lo, hi)``
— from after the last committed index stub to the retain boundary — splits into:

* **chunks**, each condensed into one frozen index stub: accumulated toward
  ``chunk_tokens``, cut only at allowed boundaries, preferring a turn start (a human
  request) once a chunk is at least half full, and never leaving a sliver (a remainder
  under a quarter chunk joins the chunk before it);
* the **trailing slice**, which the new state checkpoint replaces: the last turn before
  the retain boundary when that is small (at most a quarter chunk), else the last unit, so
  the state lands right before the retained tail and nearly everything stale is indexed.

When the whole stale region is under a quarter chunk it is all trailing slice: no stub is
worth its footer, and the state absorbs it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = ["Chunking", "chunk_region"]


@dataclass(frozen=True)
class Chunking:
    chunks: tuple[tuple[int, int], ...]
    """Surface positions ``(first, last)`` (inclusive) of each stub's chunk, left to right."""
    trailing: tuple[int, int]
    """Surface positions ``(first, last)`` (inclusive) the state checkpoint replaces."""


def chunk_region(
    allowed: Sequence[int],
    tokens: Sequence[int],
    lo: int,
    hi: int,
    chunk_tokens: int,
    turn_starts: Collection[int] = (),
) -> Chunking:
    """Split the stale region ``[lo, hi)`` into stub chunks and the trailing slice.

    ``tokens[k]`` is the size of the node at position ``k``; ``lo`` and ``hi`` must be
    allowed boundaries with ``lo < hi``.
    """
    if not lo < hi:
        raise ValueError(f"empty stale region [{lo}, {hi})")
    prefix = [0]
    for t in tokens:
        prefix.append(prefix[-1] + t)

    def size(a: int, b: int) -> int:
        return prefix[b] - prefix[a]

    cuts = [k for k in allowed if lo < k < hi]
    quarter = chunk_tokens / 4
    turns = [k for k in cuts if k in turn_starts]
    last_unit = cuts[-1] if cuts else lo
    trail = turns[-1] if turns and size(turns[-1], hi) <= quarter else last_unit
    if size(lo, trail) < quarter:
        trail = lo
    chunks: list[tuple[int, int]] = []
    start = lo
    ends = [k for k in cuts if k < trail] + ([trail] if trail > lo else [])
    while start < trail:
        candidates = [k for k in ends if k > start]
        fitting = [k for k in candidates if size(start, k) <= chunk_tokens]
        turn_ends = [k for k in fitting if k in turn_starts and size(start, k) >= chunk_tokens / 2]
        if turn_ends:
            end = turn_ends[-1]
        elif fitting:
            end = fitting[-1]
        else:
            end = candidates[0]  # one unit larger than a chunk: it is a chunk of its own
        if end < trail and size(end, trail) < quarter:
            end = trail  # no sliver at the end
        chunks.append((start, end - 1))
        start = end
    return Chunking(tuple(chunks), (trail, hi - 1))
