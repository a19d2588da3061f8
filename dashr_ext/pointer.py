"""The post-compaction pointer: a short context message naming the new checkpoint (SPEC 8).

Pure: a checkpoint in, the rendered ``prompts/pointer.md`` template out. It imports nothing
from compaction at run time, so the compaction protocol can compose pointers without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .prompts import render

if TYPE_CHECKING:
    from .compaction.base import Checkpoint

__all__ = ["pointer_text"]


def pointer_text(checkpoint: Checkpoint) -> str:
    """The short post-compaction pointer injected as a ``context/message`` (SPEC 8)."""
    return render(
        "pointer",
        checkpoint=checkpoint.id,
        events=len(checkpoint.shadowed_seqs),
        tokens=checkpoint.shadowed_tokens,
    ).strip()
