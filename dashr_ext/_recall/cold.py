"""Search a session file without replaying it: the cold ``dashr search`` (SPEC 8).

Replaying a log to search it once decodes and validates every event and builds every fold;
a search needs much less. This reads the file as bytes and makes one cheap pass:

* every line's header (``{"seq":N,"type":"…","time":T,"surfaceOp":…``, the order this
  package writes) gives the message seqs and the surface appends, without decoding a line;
* only the small or rare lines are decoded: ``compaction/start``, ``compaction/summary``
  and ``config/change`` events,
  replacements (checkpoint nodes, pruned nodes) and any message naming a pruned original or
  a checkpoint. From them come the surface (what is visible), the checkpoints and the owner
  of each shadowed or pruned seq, and the recall settings the log records;
* the byte prefilter of :mod:`.prefilter` picks the message lines that can hold the phrase;
  only those are decoded and matched exactly as :class:`~.queries.Recall` matches them.

The result is the text ``Recall.search`` gives for the same file: the same hits, owners,
snippets, order and counts. Whatever this pass does not handle exactly gives None, and the
caller replays the log instead: a line in another key order or with a non-dense seq, a torn
last line, a log without turn markers or ending inside a step (the running step is left out
of a search), a query or limit ``history_search`` refuses, an unknown checkpoint. A corrupt
line that is neither decoded nor structural is not noticed here (a replay reports it).

``dashr search FILE`` uses :func:`cold_search`. A read-only ``Dashr`` (already replayed)
uses :func:`search_replayed` for its first ``history_search``: the same scan of its file,
with the candidates' events taken from memory and the caller's settings, so a one-off search
does not fold every message into the search index; the next search builds the index.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import overload

from .._checkpoints import Checkpoint, CheckpointIndex, is_checkpoint
from .._config import RecallConfig, logged_settings
from .._events import SURFACE_TYPES, Event, Replace
from .._payloads import CONFIG_CHANGE
from .._pruned import archive_key, pruned_info
from .._turns import MARKER_TYPES
from ..errors import ConfigError, DashrError
from .hits import Hit, render_hits
from .prefilter import ESCAPE, IMAGE, TOOL_CALL, Plan, line_may_match, plan
from .render import event_body, minute_utc
from .result import RecallResult
from .search import SNIPPET_CHARS, normalize, snippet

__all__ = ["ENABLED", "ColdLog", "cold_search", "search_bytes", "search_replayed"]

ENABLED = True
"""The ``dashr search`` command tries the cold path first (tests and benches turn it off)."""

CHUNK_BYTES = 1 << 22
"""The file is searched in line-aligned pieces of about this size (lower-cased one at a time)."""

_HEAD = rb'\{"seq":(\d+),"type":"([^"\\]*)","time":-?\d+,("surfaceOp":"append"|"surfaceOp":\{|"sourceEventSeqs":|"data":)'  # noqa: E501
_FIRST = re.compile(_HEAD)
_NEXT = re.compile(b"\n" + _HEAD)

_ASCII = bytes(range(128))
_SURFACE = frozenset(t.encode() for t in SURFACE_TYPES)
_MARKERS = frozenset(t.encode() for t in MARKER_TYPES)
_DECODED_TYPES = frozenset({b"compaction/start", b"compaction/summary", CONFIG_CHANGE.encode()})
_APPEND, _REPLACE = b'"surfaceOp":"append"', b'"surfaceOp":{'
_STRUCTURAL = (b'"pruned"', b"compact-checkpoint")
"""A message holding either may be a pruned node or a checkpoint node: it is decoded."""

decodes = 0
"""Lines decoded by this module since import (tests count them)."""


class _Refused(Exception):
    """The cold pass cannot give the replay's answer for this file; replay instead."""


def _decode(line: bytes) -> Event:
    global decodes
    decodes += 1
    try:
        return Event.from_json(json.loads(line))
    except (ValueError, RecursionError, DashrError):
        raise _Refused from None


class _Sparse(Sequence[Event]):
    """The log's events as far as checkpoints need them: the decoded ones, else a stand-in
    whose type is none a checkpoint fold looks for."""

    def __init__(self, events: dict[int, Event], length: int) -> None:
        self._events = events
        self._length = length
        self._other = Event.from_json({"seq": 0, "type": "x-cold/skipped", "time": 0, "data": {}})

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        return self._events.get(index, self._other)

    @property
    def events(self) -> Sequence[Event]:
        return self


@dataclass
class ColdLog:
    """What a search needs of one log, from its bytes, without a replay."""

    data: bytes
    starts: list[int]
    """Byte offset of each line (index == seq), plus the file's length."""
    types: list[bytes]
    msg_seqs: list[int] = field(default_factory=list)
    decoded: dict[int, Event] = field(default_factory=dict)
    current: set[int] = field(default_factory=set)
    owner: dict[int, str] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    config: RecallConfig = field(default_factory=RecallConfig)
    found: set[int] = field(default_factory=set)
    """Seqs of the message lines holding one of the needles :meth:`scan` was given."""
    replayed: Sequence[Event] | None = None
    """The log's events when a replay already holds them (then no line is decoded)."""

    @classmethod
    def scan(
        cls,
        data: bytes,
        needles: Sequence[bytes | re.Pattern[bytes]] = (),
        replayed: Sequence[Event] | None = None,
    ) -> ColdLog:
        """The cheap pass; ``needles`` are looked for in the same pass (:attr:`found`).

        Raises :class:`_Refused` when only a replay will do.
        """
        if not data.endswith(b"\n"):
            raise _Refused  # empty, or a torn last line: the replay reports or ignores it
        first = _FIRST.match(data)
        if first is None or first.group(1) != b"0":
            raise _Refused
        heads = _NEXT.findall(data)
        starts = _line_starts(data)
        if len(heads) + 2 != len(starts):
            raise _Refused  # a line in another shape
        if list(map(int, (h[0] for h in heads))) != list(range(1, len(heads) + 1)):
            raise _Refused  # seqs that are not dense
        types = [first.group(2), *(h[1] for h in heads)]
        ops = [first.group(3), *(h[2] for h in heads)]
        log = cls(data, starts, types, replayed=replayed)
        log._fold(ops, needles)
        return log

    def line(self, seq: int) -> bytes:
        return self.data[self.starts[seq] : self.starts[seq + 1] - 1]

    def event(self, seq: int) -> Event:
        if self.replayed is not None:
            return self.replayed[seq]
        event = self.decoded.get(seq)
        return event if event is not None else _decode(self.line(seq))

    def lines_with(self, needles: Sequence[bytes | re.Pattern[bytes]]) -> Iterator[tuple[int, int]]:
        """``(needle index, seq)`` of each line holding a needle (ASCII case-insensitive; a
        pattern is searched for in the lower-cased bytes)."""
        data, starts = self.data, self.starts
        at = 0
        while at < len(data):
            end = data.find(b"\n", min(at + CHUNK_BYTES, len(data) - 1)) + 1
            low = data[at:end].lower()
            for k, needle in enumerate(needles):
                if isinstance(needle, re.Pattern):
                    # The pattern finds non-ASCII characters: look in those bytes alone first.
                    if needle.search(low.translate(None, _ASCII)) is None:
                        continue
                    m = needle.search(low)
                    while m is not None:
                        seq = bisect_right(starts, at + m.start()) - 1
                        yield k, seq
                        m = needle.search(low, starts[seq + 1] - at)
                    continue
                p = low.find(needle)
                while p != -1:
                    seq = bisect_right(starts, at + p) - 1
                    yield k, seq
                    p = low.find(needle, starts[seq + 1] - at)
            at = end

    def _fold(self, ops: list[bytes], needles: Sequence[bytes | re.Pattern[bytes]]) -> None:
        types = self.types
        msg_seqs = self.msg_seqs
        wanted: set[int] = set()
        for seq, (kind, op) in enumerate(zip(types, ops, strict=True)):
            if kind in _SURFACE:
                if op not in (_APPEND, _REPLACE):
                    raise _Refused  # a message without its surfaceOp up front
                msg_seqs.append(seq)
                if op == _REPLACE:
                    wanted.add(seq)
            elif op in (_APPEND, _REPLACE):
                raise _Refused
            elif kind in _DECODED_TYPES:
                wanted.add(seq)
        escaped: set[int] = set()
        found = self.found
        structural = len(_STRUCTURAL)
        for k, seq in self.lines_with((*_STRUCTURAL, b"\\u", *needles)):
            if k < structural:
                wanted.add(seq)
            elif k == structural:
                escaped.add(seq)
                found.add(seq)
            else:
                found.add(seq)
        for seq in escaped:  # an escaped ASCII letter may spell a key
            if any(0x20 <= int(h, 16) < 0x7F for h in ESCAPE.findall(self.line(seq))):
                wanted.add(seq)
        surface_kinds = _SURFACE | _DECODED_TYPES
        self.decoded = {s: self.event(s) for s in sorted(wanted) if types[s] in surface_kinds}
        self._markers()
        self._surface(ops)
        self._owners()
        settings = [e for e in self.decoded.values() if e.type == CONFIG_CHANGE]
        if self.replayed is not None:
            return  # the caller's settings apply
        if settings:
            try:
                self.config = logged_settings(settings)[1]
            except ConfigError:
                raise _Refused from None

    def _markers(self) -> None:
        """Refuses a log whose last turn/step marker opens a step (or that has none)."""
        for kind in reversed(self.types):
            if kind in _MARKERS:
                if kind == b"step/start":
                    raise _Refused
                return
        raise _Refused

    def _surface(self, ops: list[bytes]) -> None:
        surface: list[int] = []
        for seq in self.msg_seqs:
            if ops[seq] == _APPEND:
                surface.append(seq)
                continue
            op = self.decoded[seq].surface_op
            if not isinstance(op, Replace):
                raise _Refused
            try:
                a, b = surface.index(op.start_seq), surface.index(op.end_seq)
            except ValueError:
                raise _Refused from None
            surface[a : b + 1] = [seq]
        self.current = set(surface)

    def _owners(self) -> None:
        index = CheckpointIndex()
        nodes = [s for s, e in self.decoded.items() if e.type == "user/message"]
        index.update(_Sparse(self.decoded, len(self.types)), only=sorted(nodes), previews=False)
        self.checkpoints = index.items
        for c in self.checkpoints:
            for seq in c.shadowed_seqs:
                self.owner.setdefault(seq, c.id)
        for seq in self.msg_seqs:
            event = self.decoded.get(seq)
            info = pruned_info(event) if event is not None else None
            if info is not None:  # a pruned original is owned by its archive key
                self.owner[int(info["seq"])] = archive_key(int(info["seq"]))
                self.pruned[archive_key(int(info["seq"]))] = int(info["seq"])

    # ------------------------------------------------------------------ search

    def candidates(self, p: Plan | None) -> list[int]:
        """Message seqs whose line may hold the phrase of ``p`` (all of them without a plan),
        given a :meth:`scan` for :func:`needles` ``(p)``."""
        if p is None:
            return self.msg_seqs
        types = self.types
        return [
            s
            for s in sorted(self.found)
            if types[s] in _SURFACE and line_may_match(self.line(s), p)
        ]

    def search(
        self, phrase: str, p: Plan | None, query: str, checkpoint: str | None, limit: int | None
    ) -> RecallResult:
        """``Recall.search`` of ``query`` (normalised: ``phrase``, planned: ``p``)."""
        max_hits = self.config.search_max_hits
        if limit is not None and not _in_range(limit, max_hits):
            raise _Refused  # history_search says what is wrong
        key = checkpoint.strip().lower() if isinstance(checkpoint, str) else None
        scope_seqs: tuple[int, ...] | None = None
        scope: str | None = None
        if checkpoint is not None:
            if key in self.pruned:
                scope_seqs, scope = (self.pruned[key],), checkpoint
            else:
                found = [c for c in self.checkpoints if c.id == key]
                if not found:
                    raise _Refused
                scope_seqs, scope = found[-1].shadowed_seqs, found[-1].id
        lines = self.candidates(p)
        if scope_seqs is not None:
            inside = set(scope_seqs)
            lines = [s for s in lines if s in inside]
        matched: list[int] = []
        events: dict[int, Event] = {}
        for seq in lines:
            event = self.event(seq)
            if phrase in normalize(event_body(event, decoded=True)):
                matched.append(seq)
                events[seq] = event
        summaries = [s for s in matched if is_checkpoint(events[s])]
        if summaries:
            taken = set(summaries)
            matched = [s for s in matched if s not in taken] + summaries
        read_chars = self.config.read_max_chars
        width = min(SNIPPET_CHARS, max(60, read_chars // 10))

        def hit_of(seq: int) -> Hit:
            event = events[seq]
            before, match, after = snippet(
                event_body(event, decoded=True), phrase, width, lines=True
            )
            return Hit(
                seq,
                seq in self.current,
                self.owner_of(seq),
                minute_utc(event.time),
                before,
                match,
                after,
            )

        return render_hits(
            query,
            matched,
            scope=scope,
            scanned=len(scope_seqs) if scope_seqs is not None else len(self.msg_seqs),
            limit=limit if limit is not None else max_hits,
            max_hits=max_hits,
            max_chars=read_chars,
            hit_of=hit_of,
            owner_of=self.owner_of,
            latest=self.checkpoints[-1].id if self.checkpoints else None,
        )

    def owner_of(self, seq: int) -> str:
        if seq in self.current:
            return "(visible)"
        return self.owner.get(seq, "(no checkpoint)")


def _line_starts(data: bytes) -> list[int]:
    """Byte offset of each line of ``data`` (which ends with a newline), then ``len(data)``."""
    starts: list[int] = []
    at = 0
    while at < len(data):
        end = data.find(b"\n", min(at + CHUNK_BYTES, len(data) - 1)) + 1
        lengths = [len(line) + 1 for line in data[at : end - 1].split(b"\n")]
        starts.extend(accumulate(lengths, initial=at))
        starts.pop()  # ``end``: the next piece starts there
        at = end
    starts.append(len(data))
    return starts


def _in_range(limit: object, high: int) -> bool:
    return isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= high


def search_bytes(
    data: bytes, query: str, checkpoint: str | None = None, limit: int | None = None
) -> RecallResult | None:
    """``history_search`` over the log ``data`` (a session file's bytes) without a replay;
    None when only a replay gives the answer (the caller then replays)."""
    phrase = normalize(query) if isinstance(query, str) else ""
    if not phrase:
        return None  # history_search says what is wrong
    p = plan(phrase)
    try:
        return ColdLog.scan(data, needles(p)).search(phrase, p, query, checkpoint, limit)
    except _Refused:
        return None


def needles(p: Plan | None) -> list[bytes | re.Pattern[bytes]]:
    """What :meth:`ColdLog.scan` looks for so that :meth:`ColdLog.candidates` can use ``p``:
    the primary needle, and whatever lets a line hold the phrase without it."""
    if p is None:
        return []
    found: list[bytes | re.Pattern[bytes]] = [p.primary]
    if p.folding_pattern is not None:
        found.append(p.folding_pattern)
    if p.primary_has_digit:
        found += [TOOL_CALL, IMAGE]
    return found


def search_replayed(
    events: Sequence[Event],
    path: Path,
    config: RecallConfig,
    query: str,
    checkpoint: str | None = None,
    limit: int | None = None,
) -> RecallResult | None:
    """``Recall.search`` of a replayed log (``events``, read from ``path``) without building
    the search index: the file's first ``len(events)`` lines are scanned as
    :func:`search_bytes` does, and the candidates' events taken from ``events``. None when
    only the index gives the answer (the file no longer starts with those events, …)."""
    phrase = normalize(query) if isinstance(query, str) else ""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not phrase or not events:
        return None
    p = plan(phrase)
    try:
        end = _nth_line_end(data, len(events))
        log = ColdLog.scan(data[:end], needles(p), replayed=events)
        if log.types[-1].decode() != events[-1].type:
            return None  # not the file the events came from
        log.config = config
        return log.search(phrase, p, query, checkpoint, limit)
    except _Refused:
        return None


def _nth_line_end(data: bytes, n: int) -> int:
    """Offset just past the ``n``-th newline of ``data``; raises :class:`_Refused` when there
    are fewer lines."""
    at = 0
    while at < len(data):
        end = data.find(b"\n", min(at + CHUNK_BYTES, len(data) - 1)) + 1
        if end == 0:
            break
        count = data.count(b"\n", at, end)
        if count >= n:
            for _ in range(n):
                at = data.index(b"\n", at) + 1
            return at
        n -= count
        at = end
    raise _Refused


def cold_search(
    path: Path, query: str, checkpoint: str | None = None, limit: int | None = None
) -> RecallResult | None:
    """:func:`search_bytes` over the file at ``path``; None when it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return search_bytes(data, query, checkpoint, limit)
