"""dashr_ext: recallable context compaction for long-running LLM agents.

The public API is what this module exports (``__all__``)::

    from dashr_ext import Dashr, CompactionConfig, RecallConfig

In IPython or Jupyter, ``%load_ext dashr_ext`` attaches a session to the kernel (see
:mod:`dashr_ext.magics`, the only module that imports IPython).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from ._version import __version__
from .checkpoints import Checkpoint
from .compaction import CompactionResult
from .config import CompactionConfig, RecallConfig
from .dashr import Dashr
from .errors import CompactionWarning
from .events import Event, Message
from .session import Session, Step, Turn

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

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
    "load_ipython_extension",
    "unload_ipython_extension",
]


def load_ipython_extension(ip: InteractiveShell) -> Any:
    """``%load_ext dashr_ext``: attach a session, bind ``dashr`` and the helpers, add magics."""
    from .magics import load_ipython_extension

    return load_ipython_extension(ip)


def unload_ipython_extension(ip: InteractiveShell) -> Any:
    """``%unload_ext dashr_ext``: remove what loading added and close the session."""
    from .magics import unload_ipython_extension

    return unload_ipython_extension(ip)
