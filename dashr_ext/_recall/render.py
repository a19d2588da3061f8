"""Plain text of message events and of one ``history_read`` page (SPEC 8).

Pure functions of events. An event starts with its role label; its body is its content
blocks in order, one per line: text as is, reasoning as ``[reasoning] …``, tool calls as
``[tool call] name {json}`` (arguments re-serialised compactly when they parse as JSON),
images as their placeholder; an empty message reads ``(empty)``. Raw event JSON never
appears.

Search and read use the *decoded* body (``event_body(event, decoded=True)``): after each
tool call line (``[tool call] name {json}``, as SPEC §8 fixes it, so the JSON stays
available), every string of its arguments that JSON escaping changes (a quote, a backslash,
a line break) follows as typed, ``[command] grep -n "def parse_unit"``, so a command is found
by, and reads as, the text that was run.

A page is a header line (the same on every page of a range), the events, and a trailer:
``cursor: <token>`` when more follows (after the line a front end may put before it to say
how to read on, ``next page: dashr read FILE --cursor <token>``), else
``… [end of this range]``. An event that does
not fit the rest of a page starts the next page when it fits a page whole; otherwise it is
cut (preferably before a newline or after a space near the limit), the line
``… [+N chars]`` (N = characters left) follows the cut, and the next page resumes at exactly
the next character under a ``(seq N, continued)`` label. When the range's last seqs belong
to the step running now (left out), a line before ``… [end of this range]`` says so. In a
notebook the page shows in the code font, each event set off by a bar in its role's colour.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from .._checkpoints import checkpoint_of, clipped
from .._events import Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock, render_image
from .._jsontext import arguments_object
from .cursor import Cursor

__all__ = [
    "END_OF_RANGE",
    "MONOSPACE",
    "PRIOR_STATE_LABEL",
    "Page",
    "PageEvent",
    "compact_arguments",
    "counted",
    "decoded_arguments",
    "event_body",
    "event_label",
    "minute_utc",
    "one_line",
    "read_page",
    "seq_range",
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


_ESCAPED = re.compile(r'["\\\x00-\x1f]')
"""What JSON escapes in a string (besides the non-ASCII that ``ensure_ascii=False`` keeps)."""


def decoded_arguments(arguments: str) -> list[str]:
    """``[name] value`` for every string of a tool call's JSON arguments that escaping changes.

    In document order; a nested value is named by its path (``[edits[0].new]``). Strings that
    read the same inside the JSON, and arguments that are not a JSON object, give nothing.
    Arguments without a backslash give nothing unparsed: a JSON string holds a quote, a
    backslash or a control character only escaped.
    """
    if "\\" not in arguments:
        return []
    value = arguments_object(arguments)
    if value is None:
        return []
    out: list[str] = []
    stack: list[tuple[str, object]] = [(str(k), v) for k, v in reversed(value.items())]
    while stack:  # iterative: arguments from old logs may nest deeper than the stack allows
        path, item = stack.pop()
        if isinstance(item, str):
            if _ESCAPED.search(item):
                out.append(f"[{path}] {item}")
        elif isinstance(item, dict):
            stack.extend((f"{path}.{k}", v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", item[i]) for i in range(len(item) - 1, -1, -1))
    return out


def one_line(text: str, limit: int) -> str:
    """``text`` with whitespace runs collapsed, cut at a word boundary to ``limit``
    characters with ``…`` (:func:`~dashr_ext._checkpoints.clipped`)."""
    return clipped(" ".join(text.split()), limit)


def counted(n: int, noun: str) -> str:
    """``1 event``, ``2 events``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def seq_range(lo: int, hi: int) -> str:
    """``seqs 5-42``, or ``seq 57`` when the range is one seq."""
    return f"seq {lo}" if lo == hi else f"seqs {lo}-{hi}"


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


def event_body(event: Event, decoded: bool = False) -> str:
    """The transcript body of a message event: its content blocks in order, one per line.

    A recallable engine's state checkpoint reads ``[prior state checkpoint]`` first: read
    back, it is the working memory of an earlier moment, not the current one. ``decoded``
    adds the :func:`decoded_arguments` lines after each tool call (the search form).
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
            if decoded:
                parts.extend(decoded_arguments(block.arguments))
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


@dataclass(frozen=True, slots=True)
class PageEvent:
    """One event (or piece of one) on a page."""

    role: str
    """``user``, ``assistant``, ``tool``, ``tool-error``, ``checkpoint`` or ``context``."""
    head: str
    """The label with its closing ``): ``."""
    text: str
    cut: str | None = None
    """``… [+N chars]`` when the event continues on the next page."""


@dataclass(frozen=True, slots=True)
class Page:
    """One ``history_read`` page: its text (what an agent reads) and its HTML."""

    header: str
    events: tuple[PageEvent, ...]
    trailer: tuple[str, ...]
    """The last lines: an optional note, then ``cursor: <token>`` or :data:`END_OF_RANGE`."""
    cursor: Cursor | None

    @property
    def text(self) -> str:
        lines = [self.header]
        lines.extend(e.head + e.text + (f"\n{e.cut}" if e.cut else "") for e in self.events)
        lines.extend(self.trailer)
        return "\n".join(lines)

    def html(self) -> str:
        """The page in the code font, each event set off by a bar in its role's colour."""
        esc = html.escape
        out = [
            f'<div class="dashr-recall dashr-read" style="font-family:{MONOSPACE}">',
            f'<div style="{_NOTE_STYLE}">{esc(self.header)}</div>',
        ]
        for e in self.events:
            cut = f"\n<em>{esc(e.cut)}</em>" if e.cut else ""
            style = f"{_EVENT_STYLE};border-left:3px solid {ROLE_COLOURS[e.role]}"
            out.append(
                f'<div class="dashr-event dashr-{e.role}" style="{style}">'
                f"<b>{esc(e.head.rstrip())}</b> {esc(e.text)}{cut}</div>"
            )
        out.extend(f'<div style="{_NOTE_STYLE}">{esc(line)}</div>' for line in self.trailer)
        out.append("</div>")
        return "".join(out)


MONOSPACE = "var(--jp-code-font-family,ui-monospace,SFMono-Regular,Menlo,Consolas,monospace)"
"""The code font of the notebook (JupyterLab's variable), else the system's monospace."""
ROLE_COLOURS = {
    "user": "#1f77b4",
    "assistant": "#2ca02c",
    "tool": "#ff7f0e",
    "tool-error": "#d62728",
    "checkpoint": "#9467bd",
    "context": "#7f7f7f",
}
_EVENT_STYLE = "white-space:pre-wrap;margin:6px 0;padding:2px 0 2px 8px"
_NOTE_STYLE = "white-space:pre-wrap;opacity:0.75"


def _role(event: Event, head: str) -> str:
    if head.startswith("Checkpoint "):
        return "checkpoint"
    if event.type == "tool/result":
        return "tool-error" if event.message.is_error else "tool"
    return {"user/message": "user", "assistant/message": "assistant"}.get(event.type, "context")


def read_page(
    header: str,
    entries: Iterator[tuple[int, Event]],
    *,
    range_id: str,
    start_offset: int,
    max_position: int,
    max_chars: int,
    max_events: int,
    checkpoint_ids: Mapping[int, str] | None = None,
    end_note: str | None = None,
    next_page: Callable[[str], str | None] | None = None,
) -> Page:
    """One page of a range: header, events from ``entries`` (position, event), trailer.

    ``entries`` starts at the page's first event and is consumed lazily, so a page costs
    O(page). The text is at most ``max_chars`` characters and ``max_events`` events (an
    event piece counts as one). ``checkpoint_ids`` maps checkpoint node seqs to their ids;
    ``end_note`` is a line put before :data:`END_OF_RANGE` when the page ends the range;
    ``next_page`` gives the line put before the ``cursor:`` line (None: no line).
    """
    ids = checkpoint_ids or {}
    end = len(END_OF_RANGE) + (len(end_note) + 1 if end_note else 0)
    token_room = len(f"{range_id}@{max_position}:") + 12
    probe = next_page("") if next_page is not None else None
    hint_room = len(probe) + token_room + 1 if probe is not None else 0
    reserve = max(end, len("cursor: ") + token_room + hint_room)
    budget = max_chars - reserve - 1
    events: list[PageEvent] = []
    used = len(header)
    offset = start_offset
    cursor: Cursor | None = None
    entry = next(entries, None)
    while entry is not None:
        position, event = entry
        if len(events) >= max_events:
            cursor = Cursor(range_id, position, offset)
            break
        body = event_body(event, decoded=True)
        label = event_label(event, ids.get(event.seq))
        head = label + (", continued): " if offset else "): ")
        role = _role(event, label)
        rest = len(body) - offset
        room = budget - used - 1 - len(head)
        if rest <= room:
            events.append(PageEvent(role, head, body[offset:]))
            used += 1 + len(head) + rest
            offset = 0
            entry = next(entries, None)
            continue
        marker = len(f"\n… [+{rest} chars]")
        fresh_room = budget - len(header) - 1 - len(head)
        if events and (room - marker < MIN_PIECE or rest <= fresh_room):
            cursor = Cursor(range_id, position, offset)
            break
        take = _cut_point(body, offset, room - marker)
        cut = f"… [+{rest - take} chars]"
        events.append(PageEvent(role, head, body[offset : offset + take], cut))
        cursor = Cursor(range_id, position, offset + take)
        break
    if cursor is not None:
        hint = next_page(str(cursor)) if next_page is not None else None
        trailer: tuple[str, ...] = (*([hint] if hint else []), f"cursor: {cursor}")
    else:
        trailer = (end_note, END_OF_RANGE) if end_note else (END_OF_RANGE,)
    return Page(header, tuple(events), trailer, cursor)
