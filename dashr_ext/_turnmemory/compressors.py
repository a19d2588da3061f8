"""Choosing a turn compressor by name: ``make_turn_compressor("extractive" | "llm")``.

``d.turn_compressor = make_turn_compressor("llm", base_url=..., model=...)`` makes model
workers rewrite each completed turn; ``"extractive"`` is the offline default (what ``None``
means), made explicit. The ``llm`` module (and httpx) loads only when it is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .context import TurnContext
from .editor import DEFAULT_READ_MAX_CHARS, TurnEditor
from .extractive import compress_turn
from .nodes import TurnNode

if TYPE_CHECKING:
    from .llm import LLMTurnCompressor

__all__ = ["TURN_COMPRESSORS", "ExtractiveTurnCompressor", "make_turn_compressor"]

TURN_COMPRESSORS = ("extractive", "llm")
"""The names :func:`make_turn_compressor` knows."""


class ExtractiveTurnCompressor:
    """The ``extractive`` compressor (:func:`~.extractive.compress_turn`) as an object: a
    job's context gives it the session meter and ``turn_read_max_chars``; called with the
    nodes alone it estimates tokens by characters."""

    kind = "extractive"

    def __repr__(self) -> str:
        return "ExtractiveTurnCompressor()"

    def __call__(self, nodes: Sequence[TurnNode]) -> TurnEditor | None:
        done = compress_turn(nodes, read_max_chars=DEFAULT_READ_MAX_CHARS)
        return None if done is None else done.editor

    def compress(self, nodes: Sequence[TurnNode], context: TurnContext) -> TurnEditor | None:
        done = compress_turn(
            nodes, count_tokens=context.count_tokens, read_max_chars=context.read_max_chars
        )
        return None if done is None else done.editor


def make_turn_compressor(
    kind: str = "extractive", /, **options: Any
) -> ExtractiveTurnCompressor | LLMTurnCompressor:
    """The turn compressor named ``kind``; ``options`` go to
    :class:`~.llm.LLMTurnCompressor` (``base_url``, ``model``, ``api_key``, …). The
    ``extractive`` one takes none."""
    if kind == "extractive":
        if options:
            raise ConfigError(
                "make_turn_compressor",
                "no options for the extractive compressor",
                ", ".join(sorted(options)),
            )
        return ExtractiveTurnCompressor()
    if kind == "llm":
        from .llm import LLMTurnCompressor

        return LLMTurnCompressor(**options)
    raise ConfigError("make_turn_compressor.kind", " or ".join(map(repr, TURN_COMPRESSORS)), kind)
