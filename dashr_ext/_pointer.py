"""The post-compaction pointer: the short note that tells the model a checkpoint exists (SPEC §8).

Pure text from a :class:`~dashr_ext._checkpoints.Checkpoint` and ``prompts/pointer.md``; the
compaction protocol appends it as a ``context/message`` after a completed pass. Only values
the log fixes are filled in (the checkpoint id and two counts), never summary text, and
:func:`~dashr_ext._footers.neutralize_summary` keeps the pointer's wording out of summaries,
so a pointer naming a checkpoint is always this code's.
"""

from __future__ import annotations

from ._checkpoints import Checkpoint
from ._templates import render

__all__ = ["pointer_for", "pointer_text"]


def pointer_text(checkpoint: Checkpoint) -> str:
    """The short post-compaction pointer injected as a ``context/message``."""
    return pointer_for(checkpoint.id, len(checkpoint.shadowed_seqs), checkpoint.shadowed_tokens)


def pointer_for(checkpoint: str, events: int, tokens: int) -> str:
    """The pointer's text from the values it names (also used to budget it before a pass)."""
    return render("pointer", checkpoint=checkpoint, events=events, tokens=tokens).strip()
