"""dashr_ext: recallable context compaction for long-running LLM agents.

The public API is what this module exports (``__all__``), plus the documented modules
:mod:`dashr_ext.errors`, :mod:`dashr_ext.agent` and :mod:`dashr_ext.testing`; every module
whose name starts with an underscore is internal and may move::

    from dashr_ext import Dashr, CompactionConfig, RecallConfig

In IPython or Jupyter, ``%load_ext dashr_ext`` attaches a session to the kernel.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors
from ._version import __version__
from .errors import CompactionWarning, UsageWarning

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ._checkpoints import Checkpoint
    from ._client import ChatClient
    from ._compaction import CompactionResult, PrunedNode, PruneResult
    from ._config import CompactionConfig, RecallConfig
    from ._controller import Dashr
    from ._events import Event, Message
    from ._meter import Measurement, TokenMeter
    from ._pins import Pin
    from ._recall import RecallResult
    from ._session import Session
    from ._summarizers.base import Summarizer, SummaryRequest, SummaryResult
    from ._summarizers.extractive import ExtractiveSummarizer
    from ._summarizers.llm import LLMSummarizer
    from ._turnmemory.compressors import ExtractiveTurnCompressor, make_turn_compressor
    from ._turnmemory.llm import LLMTurnCompressor
    from ._turnmemory.records import TurnRecord
    from ._turns import Step, Turn
    from .agent import Agent, AgentReply

_LAZY = {
    "Agent": ".agent",
    "AgentReply": ".agent",
    "ChatClient": "._client",
    "Checkpoint": "._checkpoints",
    "CompactionConfig": "._config",
    "CompactionResult": "._compaction",
    "Dashr": "._controller",
    "Event": "._events",
    "ExtractiveSummarizer": "._summarizers.extractive",
    "ExtractiveTurnCompressor": "._turnmemory.compressors",
    "LLMSummarizer": "._summarizers.llm",
    "LLMTurnCompressor": "._turnmemory.llm",
    "Measurement": "._meter",
    "Message": "._events",
    "Pin": "._pins",
    "PruneResult": "._compaction",
    "PrunedNode": "._compaction",
    "RecallConfig": "._config",
    "RecallResult": "._recall",
    "Session": "._session",
    "Step": "._turns",
    "Summarizer": "._summarizers.base",
    "SummaryRequest": "._summarizers.base",
    "SummaryResult": "._summarizers.base",
    "TokenMeter": "._meter",
    "Turn": "._turns",
    "TurnRecord": "._turnmemory.records",
    "make_turn_compressor": "._turnmemory.compressors",
}
"""Public names imported on first use, so that a command or a module that needs a few
(``dashr search`` reads a log without the compaction engine) does not load them all."""

__all__ = [
    "Agent",
    "AgentReply",
    "ChatClient",
    "Checkpoint",
    "CompactionConfig",
    "CompactionResult",
    "CompactionWarning",
    "Dashr",
    "Event",
    "ExtractiveSummarizer",
    "ExtractiveTurnCompressor",
    "LLMSummarizer",
    "LLMTurnCompressor",
    "Measurement",
    "Message",
    "Pin",
    "PruneResult",
    "PrunedNode",
    "RecallConfig",
    "RecallResult",
    "Session",
    "Step",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "TokenMeter",
    "Turn",
    "TurnRecord",
    "UsageWarning",
    "__version__",
    "errors",
    "load_ipython_extension",
    "make_turn_compressor",
    "unload_ipython_extension",
]


def load_ipython_extension(ip: InteractiveShell) -> Any:
    """``%load_ext dashr_ext``: attach a session, bind ``dashr`` and the helpers, add magics."""
    from ._magics import load_ipython_extension

    return load_ipython_extension(ip)


def unload_ipython_extension(ip: InteractiveShell) -> Any:
    """``%unload_ext dashr_ext``: remove what loading added and close the session."""
    from ._magics import unload_ipython_extension

    return unload_ipython_extension(ip)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
