"""The ``Dashr`` option groups: which traits feed which core object (SPEC §9).

Each group of traits is validated as a whole by building the object it feeds —
:class:`~dashr_ext._config.CompactionConfig`, :class:`~dashr_ext._config.RecallConfig`, the
summarizer, the agent — so a rejected value names the field, the accepted range and the
value received, and leaves the old value in place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields

from traitlets import TraitError

from .._config import CompactionConfig, RecallConfig
from .._summarizers.base import Summarizer
from .._summarizers.factory import make_summarizer
from ..errors import ConfigError

__all__ = [
    "AGENT_TRAITS",
    "COMPACTION_DEFAULTS",
    "COMPACTION_TRAITS",
    "RECALL_DEFAULTS",
    "RECALL_TRAITS",
    "SUMMARIZER_TRAITS",
    "close_summarizer",
    "summarizer_of",
    "trait_errors",
]

COMPACTION_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(CompactionConfig))
RECALL_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(RecallConfig))
SUMMARIZER_TRAITS: tuple[str, ...] = ("summarizer", "llm_base_url", "llm_model")
AGENT_TRAITS: tuple[str, ...] = (
    "agent_base_url",
    "agent_model",
    "agent_max_steps",
    "agent_tool_output_max_chars",
)

COMPACTION_DEFAULTS = CompactionConfig()
RECALL_DEFAULTS = RecallConfig()


def summarizer_of(values: Mapping[str, object]) -> Summarizer:
    """A summarizer from the :data:`SUMMARIZER_TRAITS` values."""
    if values["summarizer"] == "llm":
        return make_summarizer("llm", base_url=values["llm_base_url"], model=values["llm_model"])
    return make_summarizer(str(values["summarizer"]))


def close_summarizer(summarizer: object) -> None:
    """Release a summarizer's client, if it holds one."""
    close = getattr(summarizer, "close", None)
    if callable(close):
        close()


@contextmanager
def trait_errors() -> Iterator[None]:
    """A rejected option (ConfigError) as the TraitError traitlets reports for a trait."""
    try:
        yield
    except ConfigError as exc:
        raise TraitError(str(exc)) from None
