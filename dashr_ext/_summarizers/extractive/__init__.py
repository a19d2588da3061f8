"""The offline, deterministic extractive summarizer: the embedded default (SPEC §5.2).

Modules, in pipeline order: :mod:`.reading` (span → facts), :mod:`.sections` and
:mod:`.anchors` (facts → bullets, in :mod:`.items`), :mod:`.render` (budget, Markdown);
:mod:`.text` holds the small text functions they share. :mod:`.stub` (index stubs) and
:mod:`.state` (the state checkpoint) write the recallable engine's texts from the same facts.
"""

from __future__ import annotations

from .render import parse_summary
from .summarizer import ExtractiveSummarizer

__all__ = ["ExtractiveSummarizer", "parse_summary"]
