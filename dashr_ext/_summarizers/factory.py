"""Building a summarizer from its name and options (SPEC §5.2).

``make_summarizer("extractive")`` or ``make_summarizer("llm", base_url=..., model=...)``;
the LLM summarizer (and httpx with it) is imported only when asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .base import Summarizer
from .extractive import ExtractiveSummarizer

__all__ = ["SUMMARIZER_KINDS", "make_summarizer"]

SUMMARIZER_KINDS: tuple[str, ...] = ("extractive", "llm")
"""The names :func:`make_summarizer` accepts."""


def _llm_factory() -> Callable[..., Summarizer]:
    from .llm import LLMSummarizer  # httpx loads with the first LLM summarizer, not on import

    return LLMSummarizer


def make_summarizer(spec: str | Summarizer, **options: Any) -> Summarizer:
    """A summarizer from its name (``"extractive"`` or ``"llm"``) and options.

    A ready summarizer object is returned unchanged (``options`` must then be
    empty). Raises :class:`~dashr_ext.errors.ConfigError` for an unknown name
    or bad options.
    """
    if not isinstance(spec, str):
        if isinstance(spec, Summarizer):
            if options:
                raise ConfigError(
                    "summarizer options",
                    "no options when passing a summarizer object",
                    sorted(options),
                )
            return spec
        raise ConfigError(
            "summarizer",
            "'extractive', 'llm' or an object with kind, model, summarize() and asummarize()",
            spec,
        )
    name = spec.strip().lower()
    factory: Callable[..., Summarizer]
    if name == "extractive":
        factory = ExtractiveSummarizer
    elif name == "llm":
        factory = _llm_factory()
    else:
        raise ConfigError("summarizer", " or ".join(repr(k) for k in SUMMARIZER_KINDS), spec)
    accepted = [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"{name} summarizer options",
            "keyword options among " + ", ".join(accepted),
            unknown,
        )
    return factory(**options)
