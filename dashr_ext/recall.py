"""History recall: read and search what compaction condensed (SPEC 8).

Recall is a pure function of the session log: no index files, no embeddings, no model
calls. Three tools share one semantics whether they are called from Python, from a magic or
by a model through :meth:`Recall.call_tool`:

``history_outline()``
    the event count, every checkpoint (never elided), then the turns (elided in the middle
    with an explicit marker when ``outline_max_chars`` is reached). The outline fits
    ``outline_max_chars``: when not even one turn fits, the marker and the closing hint
    are shortened or left out. Only when the header and the checkpoint lines alone exceed the
    budget is the outline longer than it (then with the marker and the hint in full).
``history_read(checkpoint=None, seq=None, cursor=None)``
    exactly one argument: a checkpoint's exact shadowed span (in surface order, superseded
    checkpoints included), the whole log forward from a seq, or the next page of an earlier
    result. Pages are bounded by ``read_max_chars`` (the whole page, header and trailer
    included) and ``read_max_events``.
``history_search(query, checkpoint=None, limit=None)``
    a case-insensitive literal phrase match, words spanning any whitespace, over every
    message event of the log once (shadowed and visible), or over one checkpoint's span.

The step that is executing right now is excluded from read and search.

Line shapes (stable; agents and tests parse them)
-------------------------------------------------

Outline::

    history_outline — 37 events (seqs 0-36), 2 checkpoints, 4 turns
    checkpoints (oldest first):
    c8 | summary seq 8 | 4 events, seqs 2-7 | ~48 tokens | 2026-07-06 12:03Z | superseded by c14 | …
    c14 | summary seq 14 | 3 events, seqs 9-13 | ~91 tokens | 2026-07-06 12:20Z | current | …
    turns:
    turn 1 | seqs 1-7 | 4 events | shadowed | Fix the failing retry tests in retry.test.ts.
    … 2 turns not shown (turns 2-3, seqs 10-27); read them with history_read(seq=10)
    turn 4 (open) | seqs 28-36 | 5 events | visible | Now run the whole suite.
    recall: history_read(checkpoint="c14"), history_read(seq=N), history_search("phrase")

  A checkpoint line ends with its one-line preview (``…`` above): the first line of its
  summary that is not a heading, or ``(no preview)``. A session without checkpoints shows
  ``checkpoints: none yet (nothing has been compacted)`` instead of the block. A turn's
  events are the message events appended during it; it is ``visible`` when all of them are
  on the surface, ``shadowed`` when none is, else ``partly shadowed``. The first user message
  is collapsed to one line and cut at 80 characters with ``…``. The first turn and as many of
  the newest turns as fit are shown; the marker stands where turns were left out. When not
  even one turn fits, the marker shrinks to ``… 30 turns not shown; history_read(seq=1)``,
  then ``… 30 turns not shown``, and the ``recall:`` hint loses its checkpoint example, or
  goes, until the outline fits ``outline_max_chars``.

Read (one page)::

    history_read checkpoint c20 — shadowed seqs 4-10, 4 events, ~48210 tokens, superseded by c30
    history_read from seq 7 — this session's history, seqs 0-36
    User (seq 4): Fix the failing retry tests in retry.test.ts.
    Assistant (seq 5): [reasoning] The helper probably caps attempts.
    I will inspect the retry helper first.
    [tool call] read {"path":"src/retry.ts"}
    Tool result (seq 6): export function retryBudget() { return 3 }
    Tool result (seq 8, error): ENOENT: no such file
    Context (seq 9): <an injected context message>
    Checkpoint c20 (seq 21): <the earlier checkpoint's full text, footer included>
    User (seq 4, continued): <the rest of an event cut on the previous page>
    … [+1234 chars]
    cursor: c20@4:1200
    … [end of this range]

  The first line is the header (the same on every page of a range); the last line is the
  trailer: ``cursor: <token>`` when more follows, else ``… [end of this range]``. Each event
  starts with its role label; its body is its content blocks in order, one per line: text as
  is, reasoning as ``[reasoning] …``, tool calls as ``[tool call] name {json}`` (arguments
  re-serialised compactly when they parse as JSON), images as their placeholder; an empty
  message reads ``(empty)``. Log-only events (markers, ``compaction/*``, usage) never appear,
  and raw event JSON never does. An event that does not fit the rest of a page starts the
  next page when it fits a page whole; otherwise it is cut (preferably before a newline or
  after a space near the limit), the line ``… [+N chars]`` (N = characters left) follows the
  cut, and the next page resumes at exactly the next character under a ``(seq N, continued)``
  label. ``read_max_events`` counts the events (and event pieces) on a page.

Cursor tokens are plain and self-describing: ``c20@4:1200`` is checkpoint c20, position 4
of its shadowed span (0-based, surface order), character 1200 of that event's body;
``s7@12:0`` is the log read from seq 7, next event seq 12, character 0. A token copied with
its ``cursor:`` prefix is accepted too.

Search::

    history_search "retry budget" — 37 events scanned, 2 matched, showing 2
    1. seq 7 | shadowed | c20 | 2026-07-06 12:03Z
    …export function retryBudget() { return 3 }…
    2. seq 35 | visible | (visible) | 2026-07-06 12:41Z
    …please double-check the retry budget…
    scanned 37, matched 2, truncated false

  With ``checkpoint`` the header reads ``history_search "…" in checkpoint c20 — …``. Hits are
  in seq order, originals first and checkpoint summaries (which echo what they condensed)
  after them; ``matched`` counts events, not occurrences. The owning checkpoint is the one
  whose shadowed span holds the event (an event shadowed by c20 stays ``c20`` after c30
  supersedes c20, because ``history_read("c20")`` is where it is read); visible events show
  ``(visible)``. The snippet is one line (whitespace runs collapsed) of at most 240
  characters around the first match, between ``…`` marks. Searchable text is exactly the
  event body that ``history_read`` shows (so tool-call names and arguments and reasoning are
  searchable). When hits are left out, a line before the trailer says how to narrow the
  search; with no match, a line explains that the scan is literal and points at
  ``history_outline`` / ``history_read``.

Performance: the search keeps one normalised copy of the log's message text (lowercased,
whitespace runs collapsed to one space) in a few large strings scanned with ``str.find``; it
grows with the log (only new events are processed per call). Reads render only the events of
the page they return.
"""

from __future__ import annotations

import html
import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .archive import render_image
from .checkpoints import Checkpoint, CheckpointIndex, checkpoint_of
from .config import RecallConfig
from .display import PlainText
from .errors import ConfigError, RecallError
from .events import SURFACE_TYPES, Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock
from .prompts import render
from .session import Session, Turn

__all__ = [
    "END_OF_RANGE",
    "TOOL_NAMES",
    "Cursor",
    "Recall",
    "RecallResult",
    "compact_arguments",
    "event_body",
    "event_label",
    "minute_utc",
    "normalize",
    "parse_cursor",
    "pointer_text",
    "render_page",
    "snippet",
    "tool_schemas",
]

TOOL_NAMES: tuple[str, ...] = ("history_outline", "history_read", "history_search")
ACCEPTED_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "history_outline": (),
    "history_read": ("checkpoint", "seq", "cursor"),
    "history_search": ("query", "checkpoint", "limit"),
}
END_OF_RANGE = "… [end of this range]"

SNIPPET_CHARS = 240
"""Longest snippet text of a search hit (the ``…`` marks excluded)."""
SNIPPET_BEFORE = 80
"""Characters of context kept before the match in a snippet."""
TURN_TEXT_CHARS = 80
QUERY_SHOWN_CHARS = 60
MIN_PIECE = 200
"""A page cuts an event only when at least this many of its characters fit."""
CHUNK_CHARS = 4_000_000
"""Normalised search text is kept in strings of about this size."""

_CURSOR = re.compile(r"(?:cursor:\s*)?([cs])(\d+)@(\d+):(\d+)")
_WS = re.compile(r"\s+")


# --------------------------------------------------------------------------- results


class RecallResult(PlainText):
    """The plain text of a recall call (what ``print()`` shows an agent), plus rich display.

    The value is exactly the text of SPEC 8. ``repr()`` stays the ordinary quoted ``str``
    repr; IPython and Jupyter show the plain text through :meth:`_repr_pretty_` and notebooks
    the HTML of :meth:`_repr_html_` (escaped and deterministic).
    """

    kind: str
    html: str

    def __new__(
        cls, text: str = "", kind: str = "text", html_text: str | None = None
    ) -> RecallResult:
        obj = super().__new__(cls, text)
        obj.kind = kind
        obj.html = html_text if html_text is not None else _pre(text)
        return obj

    def _repr_html_(self) -> str:
        return self.html


def _pre(text: str) -> str:
    return f'<pre class="dashr-recall">{html.escape(text)}</pre>'


# --------------------------------------------------------------------------- rendering


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


def event_label(event: Event) -> str:
    """The role label of a message event without its closing ``)``: ``User (seq 4``."""
    seq = event.seq
    kind = event.type
    if kind == "user/message":
        checkpoint = checkpoint_of(event)
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
    """The transcript body of a message event: its content blocks in order, one per line."""
    parts: list[str] = []
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


def normalize(text: str) -> str:
    """Lowercased, whitespace runs collapsed to one space, ends stripped: the search form."""
    return " ".join(text.lower().split())


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --------------------------------------------------------------------------- cursors


@dataclass(frozen=True, slots=True)
class Cursor:
    """A read position: range (``c20`` or ``s7``), position, character offset."""

    range: str
    position: int
    """Checkpoint ranges: index into the shadowed span. Seq ranges: the next event's seq."""
    offset: int

    def __str__(self) -> str:
        return f"{self.range}@{self.position}:{self.offset}"


def parse_cursor(token: object) -> Cursor:
    """Parse a cursor token; raises :class:`RecallError` ``malformed cursor …``."""
    if not isinstance(token, str):
        raise RecallError(
            f"cursor: expected the token string a page ended with (e.g. 'c20@4:1200'), "
            f"got {type(token).__name__} {token!r}"
        )
    match = _CURSOR.fullmatch(token.strip())
    if match is None:
        raise RecallError(
            f"malformed cursor {token!r}: expected the token after 'cursor:' on the last line "
            "of a history_read page, like 'c20@4:1200' (checkpoint c20, position 4, character "
            "1200) or 's7@12:0' (the log from seq 7, next seq 12)"
        )
    kind, number, position, offset = match.groups()
    return Cursor(f"{kind}{int(number)}", int(position), int(offset))


# --------------------------------------------------------------------------- pages


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
) -> tuple[str, Cursor | None]:
    """One page of a range: header, events from ``entries`` (position, event), trailer.

    ``entries`` starts at the page's first event and is consumed lazily, so a page costs
    O(page). The result is at most ``max_chars`` characters and ``max_events`` events.
    """
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
        head = event_label(event) + (", continued): " if offset else "): ")
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


# --------------------------------------------------------------------------- search


def _phrase_pattern(query: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(w) for w in query.split(" ")), re.IGNORECASE)


def _locate(body: str, query: str) -> tuple[int, int] | None:
    """Span of ``query`` (normalised) in ``body`` mapped back to original offsets (slow path)."""
    chars: list[str] = []
    index: list[int] = []
    space = True
    for i, ch in enumerate(body):
        if ch.isspace():
            if not space:
                chars.append(" ")
                index.append(i)
                space = True
            continue
        for low in ch.lower():
            chars.append(low)
            index.append(i)
        space = False
    at = "".join(chars).find(query)
    if at < 0:
        return None
    return index[at], index[at + len(query) - 1] + 1


def snippet(body: str, query: str, width: int = SNIPPET_CHARS) -> tuple[str, str, str]:
    """``(before, match, after)`` around the first match of normalised ``query`` in ``body``.

    One line (whitespace runs collapsed), at most ``width`` characters in all, with up to
    :data:`SNIPPET_BEFORE` (at most a third of ``width``) before the match.
    """
    found = _phrase_pattern(query).search(body)
    span = found.span() if found is not None else _locate(body, query)
    a, b = span if span is not None else (0, 0)
    keep = min(SNIPPET_BEFORE, width // 3)
    before = _WS.sub(" ", body[max(0, a - 4 * keep) : a])[-keep:] if keep else ""
    match = _WS.sub(" ", body[a:b])[:width]
    room = width - len(before) - len(match)
    after = _WS.sub(" ", body[b : b + 4 * max(room, 0)])[: max(room, 0)]
    return before.lstrip(), match, after.rstrip()


class _SearchIndex:
    """Normalised text of the log's message events (index i = i-th message event).

    Sealed chunks are big ``"\\n"``-joined strings (a normalised text holds no newline, so no
    match crosses two events); the tail is joined on demand and cached.
    """

    def __init__(self) -> None:
        self.count = 0
        self.chunks: list[tuple[str, list[int], int]] = []
        self.firsts: list[int] = []
        self.tail: list[str] = []
        self.tail_chars = 0
        self._tail_joined: tuple[str, list[int], int] | None = None

    def add(self, text: str) -> None:
        self.tail.append(text)
        self.tail_chars += len(text) + 1
        self.count += 1
        self._tail_joined = None
        if self.tail_chars >= CHUNK_CHARS:
            self.chunks.append(self._join())
            self.firsts.append(self.chunks[-1][2])
            self.tail = []
            self.tail_chars = 0

    def _join(self) -> tuple[str, list[int], int]:
        starts: list[int] = []
        at = 0
        for text in self.tail:
            starts.append(at)
            at += len(text) + 1
        return "\n".join(self.tail), starts, self.count - len(self.tail)

    def _all(self) -> Iterator[tuple[str, list[int], int]]:
        yield from self.chunks
        if self.tail:
            if self._tail_joined is None:
                self._tail_joined = self._join()
            yield self._tail_joined

    def find(self, query: str) -> list[int]:
        """Indices of the events whose normalised text contains ``query``, ascending."""
        out: list[int] = []
        for text, starts, first in self._all():
            at = text.find(query)
            while at != -1:
                j = bisect_right(starts, at) - 1
                out.append(first + j)
                if j + 1 >= len(starts):
                    break
                at = text.find(query, starts[j + 1])
        return out

    def text_of(self, index: int) -> str:
        k = bisect_right(self.firsts, index) - 1
        if k >= 0 and index < self.firsts[k] + len(self.chunks[k][1]):
            text, starts, first = self.chunks[k]
        else:
            text, starts, first = next(c for c in self._all() if c[2] <= index < c[2] + len(c[1]))
        j = index - first
        end = starts[j + 1] - 1 if j + 1 < len(starts) else len(text)
        return text[starts[j] : end]


@dataclass(frozen=True, slots=True)
class _Hit:
    seq: int
    visible: bool
    owner: str
    time: str
    before: str
    match: str
    after: str

    def lines(self, number: int) -> tuple[str, str]:
        state = "visible" if self.visible else "shadowed"
        return (
            f"{number}. seq {self.seq} | {state} | {self.owner} | {self.time}",
            f"…{self.before}{self.match}{self.after}…",
        )


# --------------------------------------------------------------------------- pointer


def pointer_text(checkpoint: Checkpoint) -> str:
    """The short post-compaction pointer injected as a ``context/message`` (SPEC 8)."""
    return render(
        "pointer",
        checkpoint=checkpoint.id,
        events=len(checkpoint.shadowed_seqs),
        tokens=checkpoint.shadowed_tokens,
    ).strip()


# --------------------------------------------------------------------------- the shell


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Recall:
    """The history tools over one session, with caches that grow with the log.

    Every call first folds the events appended since the previous call (events never change
    once appended), so no call re-reads the whole log.
    """

    def __init__(self, session: Session, config: RecallConfig | None = None) -> None:
        self.session = session
        self.config = config if config is not None else RecallConfig()
        self._reset()

    def _reset(self) -> None:
        self._seen = 0
        self._msg_seqs: list[int] = []
        self._index = CheckpointIndex()
        self._cps: list[Checkpoint] = []
        self._cp_by_id: dict[str, Checkpoint] = {}
        self._cp_range: dict[str, tuple[int, int]] = {}
        self._owner: dict[int, str] = {}
        self._search = _SearchIndex()

    @property
    def config(self) -> RecallConfig:
        return self._config

    @config.setter
    def config(self, value: RecallConfig) -> None:
        if not isinstance(value, RecallConfig):
            raise ConfigError("recall", "a RecallConfig", value)
        self._config = value

    # ------------------------------------------------------------------ caches

    def _sync(self) -> None:
        events = self.session.events
        n = len(events)
        if n < self._seen:  # cannot happen with an append-only log; start over if it does
            self._reset()
        if n == self._seen:
            return
        msg_seqs = self._msg_seqs
        for seq in range(self._seen, n):
            if events[seq].type in SURFACE_TYPES:
                msg_seqs.append(seq)
        self._seen = n
        known = len(self._cps)
        if self._index.update(self.session):  # only the events since the last call are read
            self._cps = list(self._index.items)
            self._cp_by_id = {c.id: c for c in self._cps}
            for c in self._cps[known:]:
                self._cp_range[c.id] = (min(c.shadowed_seqs), max(c.shadowed_seqs))
                self._owner.update(dict.fromkeys(c.shadowed_seqs, c.id))

    def _sync_search(self) -> None:
        index = self._search
        events = self.session.events
        for i in range(index.count, len(self._msg_seqs)):
            index.add(normalize(event_body(events[self._msg_seqs[i]])))

    def _executing(self) -> set[int]:
        """Seqs of the step executing right now (excluded from read and search)."""
        return self.session.executing_seqs()

    def checkpoints(self) -> list[Checkpoint]:
        """Committed checkpoints, oldest first (cached; grows with the log)."""
        self._sync()
        return list(self._cps)

    def _checkpoint(self, name: object) -> Checkpoint:
        if not isinstance(name, str):
            raise RecallError(
                f"checkpoint: expected a checkpoint id string such as 'c20', "
                f"got {type(name).__name__} {name!r}"
            )
        key = name.strip().lower()
        found = self._cp_by_id.get(key)
        if found is not None:
            return found
        if not self._cps:
            raise RecallError(
                f"unknown checkpoint {name!r}: this session has no checkpoints yet (nothing has "
                "been compacted); read its history with history_read(seq=0)"
            )
        raise RecallError(
            f"unknown checkpoint {name!r}; known checkpoints: {_id_list(self._cps)} "
            "(history_outline() lists them)"
        )

    # ------------------------------------------------------------------ outline

    def outline(self) -> RecallResult:
        """Event count, every checkpoint, then the turns within ``outline_max_chars``."""
        self._sync()
        session = self.session
        n = len(session.events)
        turns = session.turns
        cps = self._cps
        plural = "" if len(cps) == 1 else "s"
        header = (
            f"history_outline — {n} events (seqs 0-{n - 1}), {len(cps)} checkpoint{plural}, "
            f"{len(turns)} turn{'' if len(turns) == 1 else 's'}"
        )
        cp_rows = [self._checkpoint_row(c) for c in cps]
        head = [header]
        if cp_rows:
            head.append("checkpoints (oldest first):")
            head.extend(" | ".join(row) for row in cp_rows)
        else:
            head.append("checkpoints: none yet (nothing has been compacted)")
        head.append("turns:")
        example = f'history_read(checkpoint="{cps[-1].id}"), ' if cps else ""
        hints = (
            f'recall: {example}history_read(seq=N), history_search("phrase")',
            'recall: history_read(seq=N), history_search("phrase")',
            None,
        )
        limit = self.config.outline_max_chars
        budget = limit - sum(len(x) + 1 for x in head) - len(hints[0] or "")

        count = len(turns)
        rows: dict[int, tuple[str, ...]] = {}
        order = [0, *range(count - 1, 0, -1)] if count else []
        used = 0
        included = 0
        for i in order:
            row = self._turn_row(turns[i])
            line = " | ".join(row)
            after = self._elided(turns, included + 1)
            marker_len = len(self._marker(turns, after) or "") + 1 if after else 0
            if used + len(line) + 1 + marker_len > budget:
                break
            rows[i] = row
            used += len(line) + 1
            included += 1
        elided = self._elided(turns, included)

        def compose(level: int, hint: str | None) -> tuple[str, list[tuple[str, ...] | str]]:
            turn_rows: list[tuple[str, ...] | str] = [rows[i] for i in sorted(rows)]
            marker = self._marker(turns, elided, level) if elided else None
            if marker is not None and elided is not None:
                turn_rows.insert(0 if elided[0] == 0 else 1, marker)
            if not turns:
                turn_rows.append("(no turns recorded)")
            lines = [r if isinstance(r, str) else " | ".join(r) for r in turn_rows]
            tail = [hint] if hint is not None else []
            return "\n".join([*head, *lines, *tail]), turn_rows

        # With the full marker and hint the shown turns fit by construction; when not even one
        # turn did, the marker and then the hint get shorter until the outline fits. Only
        # the checkpoints are never elided: when they alone exceed the budget, the outline is
        # longer than it, and keeps the marker and the hint in full.
        text, turn_rows = compose(0, hints[0])
        hint: str | None = hints[0]
        if len(text) > limit:
            for level, h in _OUTLINE_FALLBACKS:
                shorter, shorter_rows = compose(level, hints[h])
                if len(shorter) <= limit:
                    text, turn_rows, hint = shorter, shorter_rows, hints[h]
                    break
        return RecallResult(text, "outline", _outline_html(header, cp_rows, turn_rows, hint))

    def _checkpoint_row(self, c: Checkpoint) -> tuple[str, ...]:
        lo, hi = self._cp_range[c.id]
        status = f"superseded by {c.superseded_by}" if c.superseded_by else "current"
        return (
            c.id,
            f"summary seq {c.summary_seq}",
            f"{len(c.shadowed_seqs)} events, seqs {lo}-{hi}",
            f"~{c.shadowed_tokens} tokens",
            minute_utc(c.time),
            status,
            _one_line(c.preview, 120) or "(no preview)",
        )

    def _turn_row(self, turn: Turn) -> tuple[str, ...]:
        session = self.session
        events = session.events
        end = turn.end_seq if turn.end_seq is not None else len(events) - 1
        lo = bisect_left(self._msg_seqs, turn.start_seq)
        hi = bisect_right(self._msg_seqs, end)
        total = current = 0
        first_user: str | None = None
        for i in range(lo, hi):
            seq = self._msg_seqs[i]
            event = events[seq]
            if event.surface_op != "append":
                continue
            total += 1
            current += session.is_current(seq)
            if (
                first_user is None
                and event.type == "user/message"
                and event.message.source_kind == "user"
            ):
                first_user = event.message.text
        if total and current == total:
            state = "visible"
        elif current == 0:
            state = "shadowed"
        else:
            state = "partly shadowed"
        label = f"turn {turn.index}" + (" (open)" if turn.end_seq is None else "")
        text = _one_line(first_user, TURN_TEXT_CHARS) if first_user else ""
        return (
            label,
            f"seqs {turn.start_seq}-{end}",
            f"{total} event{'' if total == 1 else 's'}",
            state,
            text or "(no user message)",
        )

    @staticmethod
    def _elided(turns: Sequence[Turn], included: int) -> tuple[int, int] | None:
        """Slice ``[a, b)`` of the turns left out when ``included`` are shown (head first)."""
        count = len(turns)
        if included >= count:
            return None
        if included == 0:
            return (0, count)
        return (1, count - (included - 1))

    def _marker(self, turns: Sequence[Turn], span: tuple[int, int], level: int = 0) -> str | None:
        """The elision marker: in full (level 0), shorter (1, 2), or none at all (3)."""
        a, b = span
        first, last = turns[a], turns[b - 1]
        end = last.end_seq if last.end_seq is not None else len(self.session.events) - 1
        count = b - a
        which = f"turn {first.index}" if count == 1 else f"turns {first.index}-{last.index}"
        noun = "turn" if count == 1 else "turns"
        if level == 0:
            return (
                f"… {count} {noun} not shown ({which}, seqs {first.start_seq}-{end}); "
                f"read them with history_read(seq={first.start_seq})"
            )
        if level == 1:
            return f"… {count} {noun} not shown; history_read(seq={first.start_seq})"
        return f"… {count} {noun} not shown" if level == 2 else None

    # ------------------------------------------------------------------ read

    def read(
        self,
        checkpoint: str | None = None,
        seq: int | None = None,
        cursor: str | None = None,
    ) -> RecallResult:
        """One page of a checkpoint's span, of the log from a seq, or after a cursor."""
        given = [
            name
            for name, value in (("checkpoint", checkpoint), ("seq", seq), ("cursor", cursor))
            if value is not None
        ]
        if len(given) != 1:
            got = "none" if not given else " and ".join(given)
            raise RecallError(
                f"history_read: give exactly one of checkpoint, seq or cursor (got {got}); "
                'e.g. history_read(checkpoint="c20"), history_read(seq=0), or '
                "history_read(cursor=<the token after 'cursor:' on a previous page>)"
            )
        self._sync()
        executing = self._executing()
        if checkpoint is not None:
            return self._read_checkpoint(self._checkpoint(checkpoint), 0, 0, executing)
        if seq is not None:
            last = len(self.session.events) - 1
            if not _is_int(seq) or seq < 0:
                raise RecallError(
                    f"seq: expected an integer >= 0 (an event seq; this session has seqs "
                    f"0-{last}), got {seq!r}"
                )
            if seq > last:
                raise RecallError(
                    f"seq {seq} is past the end of this session's log (the last seq is {last})"
                )
            if seq in executing:
                raise RecallError(
                    f"seq {seq} belongs to the step running now (seqs {_seq_list(executing)}); "
                    "its events can be read once that step has finished"
                )
            return self._read_seq(seq, bisect_left(self._msg_seqs, seq), 0, executing)
        parsed = parse_cursor(cursor)
        return self._read_cursor(parsed, str(cursor), executing)

    def _read_cursor(self, c: Cursor, token: str, executing: set[int]) -> RecallResult:
        events = self.session.events
        last = len(events) - 1
        if c.range.startswith("c"):
            cp = self._checkpoint(c.range)
            span = cp.shadowed_seqs
            if c.position >= len(span):
                raise RecallError(
                    f"malformed cursor {token!r}: position {c.position} is past the end of "
                    f"{cp.id}'s span ({len(span)} events)"
                )
            self._check_offset(c, token, events[span[c.position]])
            return self._read_checkpoint(cp, c.position, c.offset, executing)
        start = int(c.range[1:])
        if start > last or c.position > last or c.position < start:
            raise RecallError(
                f"malformed cursor {token!r}: seqs {start} and {c.position} must lie within this "
                f"session's log (seqs 0-{last}) in that order"
            )
        event = events[c.position]
        if event.type not in SURFACE_TYPES:
            raise RecallError(
                f"malformed cursor {token!r}: seq {c.position} is not a message event"
            )
        if c.position in executing:
            raise RecallError(
                f"seq {c.position} belongs to the step running now; its events can be read once "
                "that step has finished"
            )
        self._check_offset(c, token, event)
        index = bisect_left(self._msg_seqs, c.position)
        return self._read_seq(start, index, c.offset, executing)

    @staticmethod
    def _check_offset(c: Cursor, token: str, event: Event) -> None:
        if c.offset and c.offset >= len(event_body(event)):
            raise RecallError(
                f"malformed cursor {token!r}: character {c.offset} is past the end of "
                f"seq {event.seq} ({len(event_body(event))} characters)"
            )

    def _read_checkpoint(
        self, cp: Checkpoint, position: int, offset: int, executing: set[int]
    ) -> RecallResult:
        lo, hi = self._cp_range[cp.id]
        status = f"superseded by {cp.superseded_by}" if cp.superseded_by else "current"
        span = cp.shadowed_seqs
        header = (
            f"history_read checkpoint {cp.id} — shadowed seqs {lo}-{hi}, {len(span)} events, "
            f"~{cp.shadowed_tokens} tokens, {status}"
        )
        events = self.session.events

        def entries() -> Iterator[tuple[int, Event]]:
            for p in range(position, len(span)):
                if span[p] not in executing:
                    yield p, events[span[p]]

        return self._page(header, entries(), cp.id, offset, len(span))

    def _read_seq(self, start: int, index: int, offset: int, executing: set[int]) -> RecallResult:
        events = self.session.events
        last = len(events) - 1
        header = f"history_read from seq {start} — this session's history, seqs 0-{last}"
        msg_seqs = self._msg_seqs

        def entries() -> Iterator[tuple[int, Event]]:
            for i in range(index, len(msg_seqs)):
                seq = msg_seqs[i]
                if seq not in executing:
                    yield seq, events[seq]

        return self._page(header, entries(), f"s{start}", offset, last)

    def _page(
        self,
        header: str,
        entries: Iterator[tuple[int, Event]],
        range_id: str,
        offset: int,
        max_position: int,
    ) -> RecallResult:
        text, _ = render_page(
            header,
            entries,
            range_id=range_id,
            start_offset=offset,
            max_position=max_position,
            max_chars=self.config.read_max_chars,
            max_events=self.config.read_max_events,
        )
        return RecallResult(text, "read")

    # ------------------------------------------------------------------ search

    def search(
        self, query: str, checkpoint: str | None = None, limit: int | None = None
    ) -> RecallResult:
        """Numbered literal-phrase hits over the whole log or one checkpoint's span."""
        if not isinstance(query, str):
            raise RecallError(
                f"query: expected a phrase string, got {type(query).__name__} {query!r}"
            )
        phrase = normalize(query)
        if not phrase:
            raise RecallError(
                "query: expected a non-empty phrase to search for (a case-insensitive literal "
                f"match), got {query!r}"
            )
        max_hits = self.config.search_max_hits
        if limit is None:
            limit = max_hits
        elif not _is_int(limit) or not 1 <= limit <= max_hits:
            raise RecallError(f"limit: expected an integer in [1, {max_hits}], got {limit!r}")
        self._sync()
        cp = self._checkpoint(checkpoint) if checkpoint is not None else None
        self._sync_search()
        executing = self._executing()
        index = self._search
        if cp is not None:
            scope = [s for s in cp.shadowed_seqs if s not in executing]
            matched = sorted(
                s for s in scope if phrase in index.text_of(bisect_left(self._msg_seqs, s))
            )
            scanned = len(scope)
        else:
            matched = [
                seq
                for seq in (self._msg_seqs[i] for i in index.find(phrase))
                if seq not in executing
            ]
            scanned = len(self._msg_seqs) - len(executing)
        # Originals first: checkpoint summaries repeat what they condensed, so their echoes of
        # a phrase would otherwise crowd out the original it came from.
        events = self.session.events
        summaries = [s for s in matched if checkpoint_of(events[s]) is not None]
        if summaries:
            taken = set(summaries)
            matched = [s for s in matched if s not in taken] + summaries
        return self._search_result(query, phrase, cp, scanned, matched, limit)

    def _hit(self, seq: int, phrase: str) -> _Hit:
        event = self.session.events[seq]
        visible = self.session.is_current(seq)
        owner = "(visible)" if visible else self._owner.get(seq, "(no checkpoint)")
        width = min(SNIPPET_CHARS, max(60, self.config.read_max_chars // 10))
        before, match, after = snippet(event_body(event), phrase, width)
        return _Hit(seq, visible, owner, minute_utc(event.time), before, match, after)

    def _search_result(
        self,
        query: str,
        phrase: str,
        cp: Checkpoint | None,
        scanned: int,
        matched: list[int],
        limit: int,
    ) -> RecallResult:
        shown_query = _one_line(query, QUERY_SHOWN_CHARS)
        where = f" in checkpoint {cp.id}" if cp is not None else ""

        def header(shown: int) -> str:
            return (
                f'history_search "{shown_query}"{where} — {scanned} events scanned, '
                f"{len(matched)} matched, showing {shown}"
            )

        def trailer(truncated: bool) -> str:
            return f"scanned {scanned}, matched {len(matched)}, truncated {str(truncated).lower()}"

        max_chars = self.config.read_max_chars
        hits: list[_Hit] = []
        if not matched:
            note = self._zero_note(cp)
            lines = [header(0), note, trailer(False)]
            text = "\n".join(lines)
            return RecallResult(text, "search", _search_html(lines[0], [], [note], lines[-1]))

        def fit(extra: list[str], count: int) -> list[_Hit]:
            used = len(header(len(matched))) + sum(len(x) + 1 for x in extra)
            used += len(trailer(True)) + 1
            out: list[_Hit] = []
            for seq in matched[:count]:
                hit = hits_cache.get(seq) or self._hit(seq, phrase)
                hits_cache[seq] = hit
                meta, line = hit.lines(len(out) + 1)
                cost = len(meta) + len(line) + 2
                if used + cost > max_chars:
                    break
                out.append(hit)
                used += cost
            return out

        hits_cache: dict[int, _Hit] = {}
        hits = fit([], limit)
        notes: list[str] = []
        if len(hits) < len(matched):
            for counts in (True, False):  # the per-checkpoint counts go first when space is short
                notes = [self._narrow_note(cp, matched, limit, counts)]
                hits = fit(notes, limit)
                if hits:
                    break
        truncated = len(hits) < len(matched)
        lines = [header(len(hits))]
        for number, hit in enumerate(hits, 1):
            lines.extend(hit.lines(number))
        lines.extend(notes)
        lines.append(trailer(truncated))
        text = "\n".join(lines)
        return RecallResult(text, "search", _search_html(lines[0], hits, notes, lines[-1]))

    def _zero_note(self, cp: Checkpoint | None) -> str:
        target = cp.id if cp is not None else (self._cps[-1].id if self._cps else None)
        read = f'history_read(checkpoint="{target}")' if target else "history_read(seq=0)"
        return (
            "no matches: the search is a literal, case-insensitive phrase match (words may span "
            "whitespace; no fuzzy or semantic matching). Try a shorter or different phrase, "
            f"history_outline(), or read a likely range with {read}."
        )

    def _narrow_note(
        self, cp: Checkpoint | None, matched: list[int], limit: int, with_counts: bool = True
    ) -> str:
        ways: list[str] = []
        counts: dict[str, int] = {}
        if cp is None:
            for seq in matched:
                key = (
                    "(visible)"
                    if self.session.is_current(seq)
                    else self._owner.get(seq, "(no checkpoint)")
                )
                counts[key] = counts.get(key, 0) + 1
            ids = [k for k in counts if k.startswith("c")]
            if ids:
                ways.append(f'checkpoint="{ids[0]}"')
        ways.append("a longer phrase")
        if limit < self.config.search_max_hits:
            ways.append(f"limit up to {self.config.search_max_hits}")
        listed = " or ".join(ways) if len(ways) < 3 else f"{', '.join(ways[:-1])}, or {ways[-1]}"
        note = f"more matches than shown: narrow with {listed}"
        if counts and with_counts:
            parts = [f"{k} ×{v}" for k, v in list(counts.items())[:8]]
            more = ", …" if len(counts) > 8 else ""
            note += f" (matches per checkpoint: {', '.join(parts)}{more})"
        return note

    # ------------------------------------------------------------------ model tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries of the three recall tools; ``[]`` before a checkpoint."""
        self._sync()
        if not self._cps:
            return []
        return tool_schemas(self.config)

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run a model's tool call (arguments as a JSON string or a mapping); its plain text.

        Bad calls raise :class:`RecallError` with an actionable message, meant to be sent back
        to the model as the tool's (error) result.
        """
        if name not in ACCEPTED_ARGUMENTS:
            raise RecallError(
                f"unknown tool {name!r}; the recall tools are {', '.join(TOOL_NAMES)}"
            )
        args = _arguments(name, arguments)
        accepted = ACCEPTED_ARGUMENTS[name]
        unknown = [k for k in args if k not in accepted]
        if unknown:
            allowed = ", ".join(accepted) if accepted else "none (call it with {})"
            raise RecallError(
                f"{name}: unknown argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}; accepted: {allowed}"
            )
        present = {k: v for k, v in args.items() if v is not None}
        if name == "history_outline":
            result = self.outline()
        elif name == "history_read":
            result = self.read(**present)
        else:
            if "query" not in present:
                raise RecallError(
                    "history_search: missing the required argument 'query' (a phrase to find); "
                    "accepted: query, checkpoint, limit"
                )
            result = self.search(**present)
        return result.text


def _arguments(name: str, arguments: object) -> dict[str, Any]:
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            value = json.loads(arguments)
        except ValueError as exc:
            raise RecallError(
                f"{name}: arguments must be a JSON object, got invalid JSON ({exc})"
            ) from None
    elif isinstance(arguments, Mapping):
        value = dict(arguments)
    else:
        raise RecallError(
            f"{name}: arguments must be a JSON object string or a mapping, "
            f"got {type(arguments).__name__}"
        )
    if not isinstance(value, dict):
        raise RecallError(
            f"{name}: arguments must be a JSON object, got {type(value).__name__} {value!r}"
        )
    if not all(isinstance(k, str) for k in value):
        raise RecallError(f"{name}: argument names must be strings")
    return value


def _id_list(cps: Sequence[Checkpoint]) -> str:
    ids = [c.id for c in cps]
    if len(ids) > 40:
        return f"{', '.join(ids[:20])}, …, {', '.join(ids[-20:])}"
    return ", ".join(ids)


def _seq_list(seqs: set[int]) -> str:
    ordered = sorted(seqs)
    if len(ordered) > 1 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))


# --------------------------------------------------------------------------- schemas

_RECOVER = (
    "This is the supported way to recover history that compaction condensed into a "
    "checkpoint summary; do not read or decompress the session file."
)


def tool_schemas(config: RecallConfig) -> list[dict[str, Any]]:
    """The OpenAI function-calling entries of the recall tools (static text plus budgets)."""
    checkpoint_param = {
        "type": "string",
        "description": "A checkpoint id such as c42, as named in checkpoint footers, the "
        "compaction pointer or history_outline.",
    }
    return [
        {
            "type": "function",
            "function": {
                "name": "history_outline",
                "description": (
                    "List this session's history: every compaction checkpoint (id such as "
                    "c42, the seqs and ~tokens it replaced, whether a later checkpoint "
                    "superseded it, a one-line preview) and the turns with their seq ranges. "
                    f"{_RECOVER} Output is at most about {config.outline_max_chars} "
                    "characters: checkpoints are always listed in full, turns may be elided."
                ),
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "history_read",
                "description": (
                    "Read the original transcript (User/Assistant/tool calls/Tool result, each "
                    "with its event seq) that compaction replaced. Give exactly one argument: "
                    "checkpoint reads the exact span that checkpoint replaced (superseded "
                    "checkpoints included), seq reads the log forward from that event, cursor "
                    f"continues a previous page. {_RECOVER} Pages hold at most "
                    f"{config.read_max_chars} characters and {config.read_max_events} events; "
                    "a page ends with 'cursor: <token>' when more follows, else "
                    f"'{END_OF_RANGE}'."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "checkpoint": {
                            **checkpoint_param,
                            "description": "Read the span this checkpoint replaced, e.g. c42.",
                        },
                        "seq": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Read this session's log forward from this event seq.",
                        },
                        "cursor": {
                            "type": "string",
                            "description": "The token after 'cursor:' on the last line of a "
                            f"previous page (pages are at most {config.read_max_chars} "
                            f"characters / {config.read_max_events} events).",
                        },
                    },
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "history_search",
                "description": (
                    "Find a phrase in this session's full history: every span replaced by a "
                    "checkpoint and the visible conversation. Case-insensitive literal phrase "
                    "match (words may span whitespace; no regex, fuzzy or semantic matching). "
                    "Returns numbered hits with seq, shadowed/visible, owning checkpoint, time "
                    "and a snippet, then 'scanned N, matched M, truncated true|false'; read "
                    f"around a hit with history_read. {_RECOVER}"
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {
                            "type": "string",
                            "description": "The exact phrase to find (case-insensitive).",
                        },
                        "checkpoint": {
                            **checkpoint_param,
                            "description": "Search only the span this checkpoint replaced.",
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": config.search_max_hits,
                            "description": "Most hits to show (1-"
                            f"{config.search_max_hits}, default {config.search_max_hits}); the "
                            f"result is at most {config.read_max_chars} characters.",
                        },
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            },
        },
    ]


# --------------------------------------------------------------------------- html


_OUTLINE_FALLBACKS = ((0, 1), (1, 0), (1, 1), (2, 1), (1, 2), (2, 2), (3, 2))
"""(marker level, hint level) pairs tried in turn when the full outline is over budget:
marker 0 full, 1 short, 2 a count, 3 none; hint 0 full, 1 without the checkpoint example,
2 none."""


def _outline_html(
    header: str,
    cp_rows: Sequence[tuple[str, ...]],
    turn_rows: Sequence[tuple[str, ...] | str],
    hint: str | None,
) -> str:
    esc = html.escape
    out = [f'<div class="dashr-recall dashr-outline"><p>{esc(header)}</p>']
    if cp_rows:
        out.append(
            "<table><thead><tr><th>checkpoint</th><th>summary</th><th>shadowed</th>"
            "<th>tokens</th><th>time</th><th>status</th><th>preview</th></tr></thead><tbody>"
        )
        out.extend("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in cp_rows)
        out.append("</tbody></table>")
    else:
        out.append("<p>checkpoints: none yet (nothing has been compacted)</p>")
    out.append(
        "<table><thead><tr><th>turn</th><th>seqs</th><th>events</th><th>state</th>"
        "<th>first user message</th></tr></thead><tbody>"
    )
    for row in turn_rows:
        if isinstance(row, str):
            out.append(f'<tr><td colspan="5"><em>{esc(row)}</em></td></tr>')
        else:
            out.append("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>")
    out.append("</tbody></table>" + (f"<p>{esc(hint)}</p>" if hint is not None else "") + "</div>")
    return "".join(out)


def _search_html(header: str, hits: Sequence[_Hit], notes: Sequence[str], trailer: str) -> str:
    esc = html.escape
    out = [f'<div class="dashr-recall dashr-search"><p>{esc(header)}</p>']
    if hits:
        out.append("<ol>")
        for number, hit in enumerate(hits, 1):
            meta, _ = hit.lines(number)
            meta = meta.split(". ", 1)[1]
            out.append(
                f"<li><div><code>{esc(meta)}</code></div><div>…{esc(hit.before)}"
                f"<mark>{esc(hit.match)}</mark>{esc(hit.after)}…</div></li>"
            )
        out.append("</ol>")
    out.extend(f"<p>{esc(note)}</p>" for note in notes)
    out.append(f"<p>{esc(trailer)}</p></div>")
    return "".join(out)
