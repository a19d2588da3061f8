"""What a job hands a compressor besides the turn's nodes: :class:`TurnContext` (SPEC §6.4).

A compressor that needs more than the nodes (the ``llm`` one reuses the main request's prefix
so a provider's prompt cache can serve its first request) implements
:class:`ContextCompressor`; the job builds the context under the session's lock as it reads
the turn, so the prefix and the nodes describe the same surface. Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .editor import DEFAULT_READ_MAX_CHARS

if TYPE_CHECKING:
    from .editor import TurnEditor
    from .nodes import TurnNode

__all__ = ["ContextCompressor", "TurnContext", "never_cancelled"]


def never_cancelled() -> bool:
    """The ``cancelled`` of a context nothing cancels."""
    return False


@dataclass(frozen=True, slots=True)
class TurnContext:
    """The main request a completed turn belongs to, and the job's settings.

    ``messages`` are the main request's messages (system prompt first) up to and including
    the turn's last node, rendered by the same code path as ``Dashr.request_messages()``
    (``Session.messages()``), so they equal the main request's byte for byte; ``tools`` are
    ``Dashr.request_tools()`` as the job read the turn. The dicts are the session's cached
    renderings: read them, never change them.
    """

    turn: int
    job: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    worker_attempts: int = 3
    """``turn_worker_attempts``: consecutive workers without an accepted edit before giving up."""
    read_max_chars: int = DEFAULT_READ_MAX_CHARS
    """``turn_read_max_chars``: the most characters one editor read returns."""
    count_tokens: Callable[[str], int] | None = None
    """The session meter's ``count_text`` (None: estimate by characters)."""
    cancelled: Callable[[], bool] = field(default=never_cancelled)
    """True once the job should stop (the controller closed): a compressor checks it between
    model calls and gives up."""


@runtime_checkable
class ContextCompressor(Protocol):
    """A compressor given the :class:`TurnContext` with the nodes (the job calls
    :meth:`compress` instead of calling the compressor with the nodes alone)."""

    def compress(
        self, nodes: Sequence[TurnNode], context: TurnContext
    ) -> TurnEditor | None:  # pragma: no cover - a protocol
        """The editor after its replaces, or None (nothing to gain)."""
        ...
