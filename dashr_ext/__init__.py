"""dashr_ext: recallable context compaction for long-running LLM agents.

The public API is what this module exports (``__all__``), plus the documented modules
:mod:`dashr_ext.errors`, :mod:`dashr_ext.agent` and :mod:`dashr_ext.testing`; every module
whose name starts with an underscore is internal and may move::

    from dashr_ext import Dashr, CompactionConfig, RecallConfig

In IPython or Jupyter, ``%load_ext dashr_ext`` attaches a session to the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from ._checkpoints import Checkpoint
from ._compaction import CompactionResult, PrunedNode, PruneResult
from ._config import CompactionConfig, RecallConfig
from ._controller import Dashr
from ._events import Event, Message
from ._meter import Measurement, TokenMeter
from ._recall import RecallResult
from ._session import Session
from ._summarizers.base import Summarizer, SummaryRequest, SummaryResult
from ._summarizers.extractive import ExtractiveSummarizer
from ._turns import Step, Turn
from ._version import __version__
from .agent import Agent, AgentReply
from .errors import CompactionWarning, UsageWarning

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ._client import ChatClient
    from ._summarizers.llm import LLMSummarizer

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
    "LLMSummarizer",
    "Measurement",
    "Message",
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
    "UsageWarning",
    "__version__",
    "errors",
    "load_ipython_extension",
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
    # These bring httpx with them: imported on first use, not with the package.
    if name == "ChatClient":
        from ._client import ChatClient

        return ChatClient
    if name == "LLMSummarizer":
        from ._summarizers.llm import LLMSummarizer

        return LLMSummarizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
