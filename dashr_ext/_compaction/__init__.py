"""Compaction: the pass protocol (plan, summarize, compose, commit) and its engines (SPEC §4)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from .._config import ENGINES
from .._events import now_ms
from ..errors import ConfigError
from .commit import Pointers
from .engine import CompactionEngine, CompactionResult, ExtraEnvelope, PassSlot
from .prune import PrunedNode, PruneResult
from .recallable import RecallableEngine
from .summary import SummaryEngine

if TYPE_CHECKING:
    from .._config import CompactionConfig
    from .._meter import TokenMeter
    from .._session import Session
    from .._summarizers.base import Summarizer

__all__ = [
    "CompactionEngine",
    "CompactionResult",
    "ExtraEnvelope",
    "PassSlot",
    "Pointers",
    "PruneResult",
    "PrunedNode",
    "RecallableEngine",
    "SummaryEngine",
    "make_engine",
]

_ENGINES: dict[str, type[CompactionEngine]] = {
    "summary": SummaryEngine,
    "recallable": RecallableEngine,
}


def make_engine(
    name: str,
    session: Session,
    config: CompactionConfig,
    meter: TokenMeter,
    summarizer: Summarizer,
    archive: MutableMapping[str, Any],
    *,
    pointers: bool | Pointers = True,
    slot: PassSlot | None = None,
    clock: Callable[[], int] = now_ms,
) -> CompactionEngine:
    """The engine ``name`` (``CompactionConfig.engine``) over ``session``."""
    try:
        cls = _ENGINES[name]
    except KeyError:
        raise ConfigError("engine", f"one of {', '.join(map(repr, ENGINES))}", name) from None
    return cls(
        session, config, meter, summarizer, archive, pointers=pointers, slot=slot, clock=clock
    )
