"""Plain text of message events and of one ``history_read`` page (SPEC 8).

Pure functions of events. An event starts with its role label; its body is its content
blocks in order, one per line: text as is, reasoning as ``[reasoning] …``, tool calls as
``[tool call] name {json}`` (arguments re-serialised compactly when they parse as JSON),
images as their placeholder; an empty message reads ``(empty)``. Raw event JSON never
appears.

A page is a header line (the same on every page of a range), the events, and a trailer:
``cursor: <token>`` when more follows, else ``… [end of this range]``. An event that does
not fit the rest of a page starts the next page when it fits a page whole; otherwise it is
cut (preferably before a newline or after a space near the limit), the line
``… [+N chars]`` (N = characters left) follows the cut, and the next page resumes at exactly
the next character under a ``(seq N, continued)`` label.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

from .._checkpoints import checkpoint_of
from .._events import Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock, render_image
from .cursor import Cursor

__all__ = [
    "END_OF_RANGE",
    "PRIOR_STATE_LABEL",
    "compact_arguments",
    "event_body",
    "event_label",
    "minute_utc",
    "one_line",
    "render_page",
]

END_OF_RANGE = "… [end of this range]"

MIN_PIECE = 200
"""A page cuts an event only when at least this many of its characters fit."""


PRIOR_STATE_LABEL = "[prior state checkpoint]"
"""First line of a state checkpoint's body in ``history_read`` and search snippets."""


def minute_utc(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MMZ`` (UTC)."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%MZ")


def compact_arguments(arguments: str) -> str:
    """Tool-call arguments re-serialised with ``(",", ":")`` separators when they parse."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def one_line(text: str, limit: int) -> str:
    """``text`` with whitespace runs collapsed, cut to ``limit`` characters with ``…``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def event_label(event: Event, checkpoint: str | None = None) -> str:
    """The role label of a message event without its closing ``)``: ``User (seq 4``.

    ``checkpoint`` is the id of a checkpoint node whose source carries none (derived from
    the log); by default the node's own ``source.checkpoint`` names it.
    """
    seq = event.seq
    kind = event.type
    if kind == "user/message":
        checkpoint = checkpoint or checkpoint_of(event)
        if checkpoint is not None:
            return f"Checkpoint {checkpoint} (seq {seq}"
        return f"User (seq {seq}"
    if kind == "assistant/message":
        return f"Assistant (seq {seq}"
    if kind == "tool/result":
        error = ", error" if event.message.is_error else ""
        return f"Tool result (seq {seq}{error}"
    return f"Context (seq {seq}"


def event_body(event: Event) -> str:
    """The transcript body of a message event: its content blocks in order, one per line.

    A recallable engine's state checkpoint reads ``[prior state checkpoint]`` first: read
    back, it is the working memory of an earlier moment, not the current one.
    """
    parts: list[str] = []
    if event.message.source.get("checkpointClass") == "state":
        parts.append(PRIOR_STATE_LABEL)
    for block in event.message.content:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append(block.text)
        elif isinstance(block, ReasoningBlock):
            parts.append(f"[reasoning] {block.text}")
        elif isinstance(block, ToolCallBlock):
            parts.append(f"[tool call] {block.name} {compact_arguments(block.arguments)}")
        elif isinstance(block, ImageBlock):
            parts.append(render_image(block))
    return "\n".join(parts) or "(empty)"


def _cut_point(body: str, offset: int, room: int) -> int:
    """How many characters of ``body[offset:]`` to keep when only ``room`` fit (>= 1)."""
    room = max(room, 1)
    end = offset + room
    low = offset + max(1, room * 4 // 5)
    newline = body.rfind("\n", low, end + 1)
    if newline != -1:
        return newline - offset
    space = body.rfind(" ", low, end)
    if space != -1:
        return space + 1 - offset
    return room


def render_page(
    header: str,
    entries: Iterator[tuple[int, Event]],
    *,
    range_id: str,
    start_offset: int,
    max_position: int,
    max_chars: int,
    max_events: int,
    checkpoint_ids: Mapping[int, str] | None = None,
) -> tuple[str, Cursor | None]:
    """One page of a range: header, events from ``entries`` (position, event), trailer.

    ``entries`` starts at the page's first event and is consumed lazily, so a page costs
    O(page). The result is at most ``max_chars`` characters and ``max_events`` events (an
    event piece counts as one). ``checkpoint_ids`` maps checkpoint node seqs to their ids.
    """
    ids = checkpoint_ids or {}
    reserve = max(len(END_OF_RANGE), len(f"cursor: {range_id}@{max_position}:") + 12)
    budget = max_chars - reserve - 1
    lines = [header]
    used = len(header)
    offset = start_offset
    count = 0
    cursor: Cursor | None = None
    entry = next(entries, None)
    while entry is not None:
        position, event = entry
        if count >= max_events:
            cursor = Cursor(range_id, position, offset)
            break
        body = event_body(event)
        head = event_label(event, ids.get(event.seq)) + (", continued): " if offset else "): ")
        rest = len(body) - offset
        room = budget - used - 1 - len(head)
        if rest <= room:
            lines.append(head + body[offset:])
            used += 1 + len(head) + rest
            count += 1
            offset = 0
            entry = next(entries, None)
            continue
        marker = len(f"\n… [+{rest} chars]")
        fresh_room = budget - len(header) - 1 - len(head)
        if count and (room - marker < MIN_PIECE or rest <= fresh_room):
            cursor = Cursor(range_id, position, offset)
            break
        take = _cut_point(body, offset, room - marker)
        lines.append(f"{head}{body[offset : offset + take]}\n… [+{rest - take} chars]")
        cursor = Cursor(range_id, position, offset + take)
        break
    lines.append(f"cursor: {cursor}" if cursor is not None else END_OF_RANGE)
    return "\n".join(lines), cursor
