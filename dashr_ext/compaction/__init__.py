"""Compaction: the pass protocol (plan, summarize, compose, commit) and its engines (SPEC §4)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..config import ENGINES
from ..errors import ConfigError
from ..events import now_ms
from .engine import CompactionEngine, CompactionResult, ExtraEnvelope
from .summary import SummaryEngine

if TYPE_CHECKING:
    from ..config import CompactionConfig
    from ..meter import TokenMeter
    from ..session import Session
    from ..summarizers.base import Summarizer

__all__ = [
    "CompactionEngine",
    "CompactionResult",
    "ExtraEnvelope",
    "SummaryEngine",
    "make_engine",
]

_ENGINES: dict[str, type[CompactionEngine]] = {"summary": SummaryEngine}


def make_engine(
    name: str,
    session: Session,
    config: CompactionConfig,
    meter: TokenMeter,
    summarizer: Summarizer,
    archive: MutableMapping[str, Any],
    *,
    pointers: bool = True,
    clock: Callable[[], int] = now_ms,
) -> CompactionEngine:
    """The engine ``name`` (``CompactionConfig.engine``) over ``session``."""
    try:
        cls = _ENGINES[name]
    except KeyError:
        raise ConfigError("engine", f"one of {', '.join(map(repr, ENGINES))}", name) from None
    return cls(session, config, meter, summarizer, archive, pointers=pointers, clock=clock)
