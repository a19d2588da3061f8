"""Summarizers: the protocol, the offline extractive default and the LLM client.

``make_summarizer("extractive")`` and ``make_summarizer("llm", base_url=..., model=...)``
build one. The LLM summarizer (and httpx) is imported only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Summarizer, SummaryRequest, SummaryResult, span_text
from .extractive import ExtractiveSummarizer
from .factory import SUMMARIZER_KINDS, make_summarizer
from .keywords import stub_keywords

if TYPE_CHECKING:
    from .llm import LLMSummarizer

__all__ = [
    "SUMMARIZER_KINDS",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "make_summarizer",
    "span_text",
    "stub_keywords",
]


def __getattr__(name: str) -> Any:
    if name == "LLMSummarizer":  # httpx loads with the first LLM summarizer, not on import
        from .llm import LLMSummarizer

        return LLMSummarizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
