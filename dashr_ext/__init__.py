"""dashr_ext: recallable context compaction for long-running LLM agents.

The public API is what this module exports (``__all__``)::

    from dashr_ext import Dashr, CompactionConfig, RecallConfig

In IPython or Jupyter, ``%load_ext dashr_ext`` attaches a session to the kernel.
"""

from __future__ import annotations

from . import errors
from .compaction import CompactionResult, CompactionWarning
from .compaction.base import Checkpoint
from .config import CompactionConfig, RecallConfig
from .dashr import Dashr
from .events import Event, Message
from .session import Session, Step, Turn

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "CompactionConfig",
    "CompactionResult",
    "CompactionWarning",
    "Dashr",
    "Event",
    "Message",
    "RecallConfig",
    "Session",
    "Step",
    "Turn",
    "__version__",
    "errors",
]
