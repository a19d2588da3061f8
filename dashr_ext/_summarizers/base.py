"""The summarizer protocol shared by every compaction engine.

A summarizer turns the span of surface events a compaction pass shadows into
the raw summary text of the new checkpoint (the engine adds the framing, the
footer and the archive marker). Two implementations ship:

``"extractive"`` (:class:`~dashr_ext._summarizers.extractive.ExtractiveSummarizer`)
    the embedded default: offline, deterministic, rule-based, no key.
``"llm"`` (:class:`~dashr_ext._summarizers.llm.LLMSummarizer`)
    any OpenAI-compatible ``/chat/completions`` endpoint.

Both write what :attr:`SummaryRequest.mode` asks for — the eight sections of
``prompts/summarize.md``, an index stub (``prompts/stub.md``) or the state checkpoint
(``prompts/state.md``) — and fail with :class:`~dashr_ext.errors.SummarizerError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._events import Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock

__all__ = [
    "SUMMARY_MODES",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "span_text",
]


SUMMARY_MODES = ("summary", "stub", "state")
"""The values of :attr:`SummaryRequest.mode`."""


@dataclass(frozen=True)
class SummaryRequest:
    """Everything a summarizer may use for one summary."""

    span: Sequence[Event]
    """The shadowed surface events, in surface order. May contain a prior checkpoint
    node (a ``user/message`` whose ``message.source["kind"] == "compact-checkpoint"``)."""
    previous_summary: str | None
    """The raw summary of the prior checkpoint being merged (from its
    ``compaction/summary`` event), if any."""
    max_summary_tokens: int
    """Upper bound on the summary's size, in ``count_tokens`` tokens."""
    prefix_messages: Sequence[Mapping[str, Any]]
    """OpenAI chat messages as the model last saw the conversation (system first).
    Pass the request prefix up to and including the span: a prefix of the last
    request keeps the provider's prompt cache warm, and the model summarizes just
    what it sees. The ``llm`` summarizer replays these and appends the
    instruction as the final user message."""
    count_tokens: Callable[[str], int]
    """The token metric of the session (usually ``TokenMeter.count_text``)."""
    tools: Sequence[Mapping[str, Any]] | None = None
    """The tool schemas of the replayed request, when it had any. Sending them keeps
    the cached prefix identical (tool definitions precede the messages)."""
    mode: str = "summary"
    """What to write (SPEC §6.3): ``"summary"`` (the eight sections of ``summarize.md``),
    ``"stub"`` (an index stub of ``span``: 2–3 lines and a keyword line, ``stub.md``) or
    ``"state"`` (the working-memory state checkpoint, ``state.md``, merging
    ``previous_summary`` with ``span``)."""
    background: str | None = None
    """``stub`` mode: the pass-start state checkpoint's raw text. Background only, never
    material for the stub (it is the same for every stub of a pass: a shared prefix)."""
    index_keywords: Sequence[str] = ()
    """``stub`` mode: the keyword lines of every committed stub, oldest first, so a new
    stub indexes what is distinctive to its span."""
    recent_stubs: Sequence[str] = ()
    """``stub`` mode: the raw text of the one or two latest committed stubs (continuity)."""
    show_superseded: bool = False
    """Show a superseded value as ``(was …)`` after its current one
    (``CompactionConfig.show_superseded``); by default only current values are shown."""
    carried: str = ""
    """Code-composed text the checkpoint carries besides the summary (the pinned statements
    and the names block), so a summarizer need not repeat what it says."""


@dataclass(frozen=True)
class SummaryResult:
    """A summary and where it came from."""

    text: str
    """The raw text (eight sections, a stub or a state), without framing or footer."""
    kind: str
    """The summarizer kind, e.g. ``"extractive"`` or ``"llm"``."""
    model: str | None
    """The model that wrote it (``None`` for the extractive summarizer)."""
    usage: Mapping[str, Any] | None = field(default=None, compare=False)
    """Provider usage of the summarize call (``llm`` only), e.g. ``prompt_tokens``."""


@runtime_checkable
class Summarizer(Protocol):
    """What a compaction engine calls. Failures raise ``SummarizerError``."""

    kind: str
    model: str | None

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...

    async def asummarize(self, request: SummaryRequest) -> SummaryResult: ...


def _event_parts(event: Event) -> list[str]:
    parts: list[str] = []
    for block in event.message.content:
        if isinstance(block, TextBlock | ReasoningBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            parts.append(f"{block.name} {block.arguments}")
        elif isinstance(block, ImageBlock):
            parts.append(f"[image {block.attachment_id}]")
    return parts


def span_text(span: Sequence[Event]) -> str:
    """Every text the model sees in ``span`` (text, reasoning, tool calls, results), joined.

    Used as the "input size" a summary must undercut.
    """
    return "\n".join(part for event in span if event.is_surface for part in _event_parts(event))
