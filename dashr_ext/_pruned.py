"""The text of a pruned node: a head and tail excerpt around a code-composed marker (SPEC §6.5).

Pure and deterministic, so a pruned node reads the same on every replay::

    <the first lines of the output>
    [output pruned: 48,213 chars, 1,204 lines; shown: lines 1–20 and 1,195–1,204; original:
    history_read(seq=812) or dashr_compaction_archive["p812"]]
    <the last lines of the output>

(the marker is one line). Lines are kept whole when the first and the last line fit their
share of ``keep_chars`` (three fifths for the head, the rest for the tail); otherwise the
excerpt counts characters (``shown: first 1,200 and last 800 chars``), which is what a single
line of minified JSON gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._events import Event, ImageBlock, Message, ToolCallBlock, block_to_json
from ._payloads import ARCHIVE_VARIABLE

__all__ = [
    "PRUNED_KEY",
    "Excerpt",
    "archive_key",
    "excerpt",
    "is_pruned",
    "prune_marker",
    "pruned_info",
    "pruned_message",
    "shown_seq",
]

PRUNED_KEY = "pruned"
"""``message.source["pruned"]``: what a pruned node replaced (``seq``, ``chars``, ``lines``,
``tokens``, ``archive`` key or null, and the pass's ``compactionId``)."""

HEAD_SHARE = 0.6
"""The head's share of ``keep_chars``: the start of an output says what it is."""


def archive_key(seq: int) -> str:
    """The archive key of a pruned original: ``p<seq>``."""
    return f"p{seq}"


def is_pruned(message: Message) -> bool:
    """Whether ``message`` is a pruned node (never pruned twice)."""
    return isinstance(message.source.get(PRUNED_KEY), Mapping)


def shown_seq(event: Event) -> int:
    """The seq a summary cites for ``event``: a pruned node's original (where it stands in
    the conversation, and what ``history_read(seq=…)`` shows whole), else its own."""
    info = pruned_info(event)
    return int(info["seq"]) if info is not None else event.seq


def pruned_info(event: Event) -> Mapping[str, Any] | None:
    """``source["pruned"]`` of a pruned node (its seq, sizes, archive key), else None."""
    if not event.is_surface:
        return None
    info = event.message.source.get(PRUNED_KEY)
    return info if isinstance(info, Mapping) and isinstance(info.get("seq"), int) else None


@dataclass(frozen=True)
class Excerpt:
    """What of a text a pruned node shows."""

    head: str
    tail: str
    shown: str
    """``lines 1–20 and 1,195–1,204`` or ``first 1,200 and last 800 chars``."""
    lines: int
    """Lines of the whole text."""


def excerpt(text: str, keep_chars: int) -> Excerpt | None:
    """Head and tail of ``text`` within ``keep_chars``; None when nothing would be cut.

    A text at most twice ``keep_chars`` long is left whole: pruning it would save too
    little to pay for the marker.
    """
    if len(text) <= 2 * keep_chars:
        return None
    lines = text.split("\n")
    head_room = int(keep_chars * HEAD_SHARE)
    tail_room = keep_chars - head_room
    if len(lines[0]) <= head_room and len(lines[-1]) <= tail_room and len(lines) > 2:
        head_n = _fit(lines, head_room)
        tail_n = _fit(lines[::-1], tail_room)
        tail_n = min(tail_n, len(lines) - head_n - 1)  # at least one line is cut
        n = len(lines)
        if tail_n:
            shown = f"lines 1\u2013{head_n:,} and {n - tail_n + 1:,}\u2013{n:,}"
        else:
            shown = f"lines 1\u2013{head_n:,}"
        head = "\n".join(lines[:head_n])
        tail = "\n".join(lines[n - tail_n :]) if tail_n else ""
        return Excerpt(head, tail, shown, n)
    head, tail = text[:head_room], text[len(text) - tail_room :]
    shown = f"first {len(head):,} and last {len(tail):,} chars"
    return Excerpt(head, tail, shown, len(lines))


def _fit(lines: list[str], room: int) -> int:
    """How many leading ``lines`` fit in ``room`` characters (joined by newlines)."""
    used = count = 0
    for line in lines:
        need = len(line) + (1 if count else 0)
        if used + need > room:
            break
        used += need
        count += 1
    return count


def prune_marker(seq: int, chars: int, part: Excerpt, *, archived: bool) -> str:
    """The one-line marker between the excerpts: what was cut, and where the original is."""
    where = f"history_read(seq={seq})"
    if archived:
        where += f' or {ARCHIVE_VARIABLE}["{archive_key(seq)}"]'
    return (
        f"[output pruned: {chars:,} chars, {part.lines:,} lines; shown: {part.shown}; "
        f"original: {where}]"
    )


def pruned_message(
    original: Message,
    seq: int,
    text: str,
    part: Excerpt,
    *,
    tokens: int,
    archived: bool,
    compaction_id: str = "",
) -> dict[str, Any]:
    """The message payload of the node that takes ``original``'s place.

    ``text`` is the original's text (its text blocks joined). The new content is one text
    block (head, marker, tail) where the first text block was, then the original's tool calls
    and images as they were; reasoning goes (it is archived with the original). Source kind,
    role and tool fields stay, so the node keeps its place in pairing, turns and format.
    """
    marker = prune_marker(seq, len(text), part, archived=archived)
    body = "\n".join(x for x in (part.head, marker, part.tail) if x)
    content: list[Any] = [{"type": "text", "text": body}]
    for block in original.content:
        if isinstance(block, ToolCallBlock | ImageBlock):
            content.append(block_to_json(block))
    info = {
        "seq": seq,
        "chars": len(text),
        "lines": part.lines,
        "tokens": tokens,
        "archive": archive_key(seq) if archived else None,
        "compactionId": compaction_id,
    }
    message: dict[str, Any] = {
        "role": original.role,
        "source": {**original.source, PRUNED_KEY: info},
        "content": content,
    }
    if original.role == "tool":
        message.update(
            toolCallId=original.tool_call_id,
            toolName=original.tool_name,
            isError=original.is_error,
        )
    message.update(original.extra)
    return message
