"""The turn-memory options of the ``Dashr`` configurable (SPEC §6.4, §9).

Kept beside :mod:`.configurable` as a base class of its ``Dashr``: they are ordinary
``%config Dashr.NAME`` options of the compaction group (each a ``CompactionConfig`` field,
checked and applied like the others).
"""

from __future__ import annotations

from traitlets import Bool, HasTraits, Integer

from .options import COMPACTION_DEFAULTS

__all__ = ["TurnMemoryOptions"]


class TurnMemoryOptions(HasTraits):
    """The ``turn_*`` options (``CompactionConfig.turn_memory`` and its sizes)."""

    turn_memory = Bool(
        COMPACTION_DEFAULTS.turn_memory,
        help="Rewrite each completed turn in place (N nodes to M <= N, keeping its shape), off "
        "the cell's thread; the originals stay recallable.",
    ).tag(config=True)
    turn_min_tokens = Integer(
        COMPACTION_DEFAULTS.turn_min_tokens,
        help="turn memory: a completed turn smaller than this many tokens is closed as a "
        "no-op (>= 0).",
    ).tag(config=True)
    turn_worker_attempts = Integer(
        COMPACTION_DEFAULTS.turn_worker_attempts,
        help="turn memory: consecutive 'llm' workers without an accepted edit before the job "
        "fails (1-10).",
    ).tag(config=True)
    turn_read_max_chars = Integer(
        COMPACTION_DEFAULTS.turn_read_max_chars,
        help="turn memory: longest read of the turn's nodes, in characters (400-1000000).",
    ).tag(config=True)
