"""Search a session file without replaying it: the cold ``dashr search`` (SPEC 8).

Replaying a log to search it once decodes and validates every event and builds every fold;
a search needs much less. This reads the file in line-aligned pieces of bounded size
(:data:`CHUNK_BYTES`; a longer line gets a piece of its own), never the whole file, and
makes one cheap pass over each piece, keeping only what the result needs:

* every line's header (``{"seq":N,"type":"…","time":T,"surfaceOp":…``, the order this
  package writes) gives the message seqs and the surface appends, without decoding a line;
* only the small or rare lines are decoded: ``compaction/*``, ``config/change``, replacements
  (checkpoint and pruned nodes) and any message naming a pruned original or a checkpoint.
  From them come the surface (what is visible), the checkpoints and the owner of each
  shadowed, pruned or turn-landed seq, and the recall settings the log records;
* the byte prefilter of :mod:`.prefilter` picks the message lines that can hold the phrase
  (its needles found in a lower-cased copy of the piece with StringZilla, see
  :mod:`.scanbytes`); for a phrase without ASCII letters or digits, the lines holding an
  escape, a run of its punctuation (``::``) or one of the characters that can spell one of
  its own or a part of one (the accent of ``é``, the ``=`` of ``==``;
  :func:`~.prefilter.unplanned_needles`). A line whose text block holds the phrase as it
  stands in the bytes (or spelt with one of the piece's characters that fold to a part of
  it, ``straße`` for ``strasse``) is a match without a decode
  (:class:`~.scanbytes.InText`); the others are decoded and matched exactly as
  :class:`~.queries.Recall` matches them (:func:`~.search.holds`), as their piece is
  scanned. A matched line (or its event) is kept while the kept ones are few; the others
  keep their place in the file and are read again if they are shown.

The result is the text ``Recall.search`` gives for the same file: the same hits, owners,
snippets, order and counts. Whatever this pass does not handle exactly gives None, and the
caller replays the log instead: a line in another key order or with a non-dense seq, a torn
last line, a log without turn markers or ending inside a step (the running step is left out
of a search), a query or limit ``history_search`` refuses, an unknown checkpoint. A corrupt
line that is neither decoded nor structural is not noticed here (a replay reports it); a
match confirmed in its bytes is decoded only if it is shown.

``dashr search FILE`` uses :func:`cold_search`. A read-only ``Dashr`` (already replayed)
uses :func:`search_replayed` for its first ``history_search``: the same scan of its file,
with the candidates' events taken from memory and the caller's settings, so a one-off search
does not fold every message into the search index; the next search builds the index.
"""

from __future__ import annotations

import gc
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, overload

import stringzilla as sz

from .. import _jsontext
from .._checkpoints import Checkpoint, CheckpointIndex, is_checkpoint
from .._config import RecallConfig, logged_settings
from .._events import MARKER_TYPES, SURFACE_TYPES, Event, Replace
from .._payloads import CONFIG_CHANGE, PASS_EVENT_TYPES, turn_owners
from .._pruned import archive_key, pruned_info
from .._replay import parse_event
from ..errors import ConfigError, DashrError
from .hits import FIRST_PAGE, Hit, Paging, render_hits
from .prefilter import (
    ESCAPE,
    IMAGE,
    TOOL_CALL,
    Plan,
    line_may_match,
    plan,
    unplanned_needles,
)
from .render import event_body, minute_utc
from .result import RecallResult
from .scanbytes import LOWER as _LOWER
from .scanbytes import InText, Needle
from .scanbytes import Lowered as _Lowered
from .scanbytes import Refused as _Refused
from .scanbytes import find_starts as _find_starts
from .scanbytes import line_starts as _line_starts
from .scanbytes import needle_lines as _needle_lines
from .search import SNIPPET_CHARS, holds, normalize, snippet

__all__ = ["ENABLED", "ColdLog", "cold_search", "search_bytes", "search_replayed"]

ENABLED = True
"""The ``dashr search`` command tries the cold path first (tests and benches turn it off)."""

CHUNK_BYTES = 1 << 22
"""The file is read and searched in line-aligned pieces of about this size; a line longer
than a piece is read whole (the buffer grows to hold it)."""

KEPT_BYTES = 1 << 20
"""Matched events are kept (for their snippets) while their lines total at most this many
bytes; a later match keeps only its place in the file, read again if it is shown."""

_HEADS = re.compile(
    rb'\n(?:\{"seq":(\d+),"type":"([^"\\]*)","time":-?\d+,'
    rb'(?:"surfaceOp":("append"|\{)|"sourceEventSeqs":|"data":)|)'
)
"""A line's header, from the newline before it: seq, type, and the surface op if any (all
empty for a line in another shape, so that there is one match per line)."""
_ESCAPED = b"\\u"
"""A ``\\u`` escape."""
_SURFACE = frozenset(t.encode() for t in SURFACE_TYPES)
_MARKERS = frozenset(t.encode() for t in MARKER_TYPES)
_DECODED_TYPES = frozenset(t.encode() for t in (*PASS_EVENT_TYPES, CONFIG_CHANGE))
_WANTED_TYPES = _SURFACE | _DECODED_TYPES
_APPEND, _REPLACE = b'"append"', b"{"
_STRUCTURAL = (b'"pruned"', b"compact-checkpoint")
"""A message holding either may be a pruned node or a checkpoint node: it is decoded."""

decodes = 0
"""Lines decoded by this module since import (tests count them)."""


class _Readable(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


def _decode(line: bytes) -> Event:
    """The event of one line: msgspec decodes it when it can (the objects are the ones
    ``json`` gives), ``json`` otherwise (it takes a few more inputs)."""
    global decodes
    decodes += 1
    obj: object = None
    fast = _jsontext._FAST_DECODE  # msgspec, as the store decodes a log (imported on first use)
    if fast is not None:
        try:
            obj = fast(line)
        except (_jsontext._FastError, RecursionError):
            obj = None
    try:
        return parse_event(obj if type(obj) is dict else json.loads(line))
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


def _pieces(f: _Readable) -> Iterator[tuple[bytearray, int]]:
    """The file's complete lines, a piece at a time: ``(buffer, cut)``, where
    ``buffer[1:cut]`` holds whole lines and ``buffer[0]`` is a newline (so every line's
    header follows one). Raises :class:`_Refused` when the file ends inside a line.

    The buffer is reused: it holds the unfinished line carried over plus at most
    :data:`CHUNK_BYTES` read at a time, so it grows only for a line longer than a piece.
    """
    size = CHUNK_BYTES
    buf = bytearray(size + 1)
    buf[0] = 10  # the newline before the first line
    have = 1
    while True:
        if have + size > len(buf):
            buf.extend(bytes(have + size - len(buf)))  # a line longer than a piece
        with memoryview(buf) as view:
            got = f.readinto(view[have : have + size])
        if not got:
            if have > 1:
                raise _Refused  # a torn last line: the replay reports or ignores it
            return
        have += got
        cut = buf.rfind(b"\n", 1, have) + 1
        if cut == 0:
            continue  # no line ends yet
        yield buf, cut
        tail = have - cut
        buf[1 : 1 + tail] = buf[cut:have]
        have = 1 + tail


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC paused (the scan's containers are all short-lived and hold no cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _spells_ascii(line: bytes) -> bool:
    """Whether ``line`` escapes a printable ASCII character (``\\u0041``)."""
    return any(0x20 <= int(h, 16) < 0x7F for h in ESCAPE.findall(line))


def _expected_seqs(first: int, count: int) -> bytes:
    return ",".join(map(str, range(first, first + count))).encode()


@dataclass
class ColdLog:
    """What a search needs of one log, from one pass over its bytes, without a replay."""

    phrase: str
    plan: Plan | None
    replayed: Sequence[Event] | None = None
    """The log's events when a replay already holds them (then no line is decoded)."""
    length: int = 0
    """Lines scanned (index == seq)."""
    last_type: bytes = b""
    last_marker: bytes = b""
    msg_seqs: list[int] = field(default_factory=list)
    replaced: set[int] = field(default_factory=set)
    """Message seqs whose surface op is a replacement."""
    decoded: dict[int, Event] = field(default_factory=dict)
    current: set[int] = field(default_factory=set)
    owner: dict[int, str] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    config: RecallConfig = field(default_factory=RecallConfig)
    matched: list[int] = field(default_factory=list)
    """Message seqs whose event holds the phrase (all scopes), in order."""
    kept: dict[int, Event] = field(default_factory=dict)
    """The matched events kept for their snippets (see :data:`KEPT_BYTES`)."""
    kept_lines: dict[int, bytes] = field(default_factory=dict)
    """The lines of matches confirmed without a decode, kept as :attr:`kept` is."""
    places: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """``(file offset, length, hash)`` of each matched line whose event was not kept."""
    fetch: Callable[[int, int], bytes] | None = None
    """Reads ``length`` bytes at a file offset (a matched line not kept)."""
    unplanned: list[Needle] | None = None
    """Without a plan: what a line must hold (one of them, or an escape) to hold the phrase
    (:func:`~.prefilter.unplanned_needles`); None when every message line may."""
    in_text: bool = False
    """Whether :class:`~.scanbytes.InText` can confirm a match without a decode."""
    _kept_bytes: int = 0
    _offset: int = 0
    _low: bytearray = field(default_factory=bytearray)

    def _lowered(self, buf: bytearray, cut: int) -> bytearray:
        """``buf[:cut]`` with its ASCII letters lower-cased, in a buffer reused piece after
        piece (the search is ASCII case-insensitive)."""
        if len(self._low) < cut:
            self._low = bytearray(len(buf))
        sz.translate(buf, _LOWER, start=0, end=cut, out=self._low)
        return self._low

    @classmethod
    def scan(
        cls,
        f: _Readable,
        phrase: str,
        p: Plan | None,
        replayed: Sequence[Event] | None = None,
        lines: int | None = None,
    ) -> ColdLog:
        """The cheap pass over the file ``f`` (its first ``lines`` lines), matching
        ``phrase`` (planned: ``p``) as it goes. Raises :class:`_Refused` when only a replay
        will do."""
        log = cls(phrase, p, replayed, in_text=InText.usable(phrase))
        needles: list[Needle] = [*_STRUCTURAL, _ESCAPED, *needles_of(p)]
        if p is None:
            log.unplanned = unplanned_needles(phrase)
            needles += log.unplanned or ()
        left = lines
        # A piece's headers are many short-lived tuples: collecting them would walk every
        # object of a replayed session again and again, and free nothing.
        with _gc_paused():
            for buf, cut in _pieces(f):
                got = log._piece(buf, cut, needles, left)
                if left is not None:
                    left -= got
                    if not left:
                        break
        if not log.length or left:
            raise _Refused  # empty, or fewer lines than the replay holds
        log._markers()
        log._surface()
        log._owners()
        settings = [e for e in log.decoded.values() if e.type == CONFIG_CHANGE]
        if replayed is None and settings:
            try:
                log.config = logged_settings(settings)[1]
            except ConfigError:
                raise _Refused from None
        return log

    # ------------------------------------------------------------------ one piece

    def _piece(self, buf: bytearray, cut: int, needles: Sequence[Needle], lines: int | None) -> int:
        """Scans ``buf[1:cut]`` (whole lines; at most ``lines`` of them); its line count."""
        base = self.length
        # One match per line; a line in another shape has an empty seq.
        heads = _HEADS.findall(buf, 0, cut - 1)
        if lines is not None and len(heads) > lines:
            for _ in range(len(heads) - lines):
                cut = buf.rfind(b"\n", 0, cut - 1) + 1
            del heads[lines:]
        n = len(heads)
        seqs, types, ops = zip(*heads, strict=True)
        if b",".join(seqs) != _expected_seqs(base, n):
            raise _Refused  # a line in another shape, or seqs that are not dense
        for kind, op in set(zip(types, ops, strict=True)):
            if (kind in _SURFACE) != bool(op):
                raise _Refused  # a message without its surfaceOp up front, or the reverse
        self.msg_seqs += [i for i, op in enumerate(ops, base) if op]
        wanted: set[int] = set()
        if _REPLACE in ops:
            replaced = [i for i, op in enumerate(ops, base) if op == _REPLACE]
            self.replaced.update(replaced)
            wanted.update(replaced)
        if not _DECODED_TYPES.isdisjoint(types):
            wanted.update(i for i, t in enumerate(types, base) if t in _DECODED_TYPES)
        for kind in reversed(types):
            if kind in _MARKERS:
                self.last_marker = kind
                break
        self.last_type = types[-1]

        bounds: dict[int, int] = {}
        """Seq -> where its line starts in ``buf``, for the lines looked at."""

        def line(i: int) -> bytes:
            start = bounds[i]
            with memoryview(buf) as view:  # one copy, not a bytearray slice then bytes
                return bytes(view[start : sz.find(buf, b"\n", start)])

        if self.plan is None and not self.unplanned:  # every message line is a candidate
            bounds.update(zip(range(base, base + n), _line_starts(buf, cut)[:-1], strict=True))
        found: set[int] = set()
        holding: set[int] = set()  # lines holding the primary needle
        escaped: set[int] = set()
        special: set[int] = set()  # lines holding a character the plan folds, or the like
        labelled: set[int] = set()  # lines that may show the phrase's words as a label
        labelled_from = len(needles) - (len(self.plan.sources) if self.plan else 0)
        structural = len(_STRUCTURAL)
        low = self._lowered(buf, cut)
        present: set[str] = set()  # the plan's special characters in the piece
        for k, i, start in _needle_lines(low, cut, needles, present):
            bounds[i] = start
            if k < structural:
                wanted.add(i)
                continue
            found.add(i)
            if k == structural:
                escaped.add(i)
                if _spells_ascii(line(i)):  # it may spell a key
                    wanted.add(i)
            elif k == structural + 1:
                holding.add(i)
            elif k == structural + 2:
                special.add(i)
            elif k >= labelled_from:
                labelled.add(i)
        wanted = {i for i in wanted if types[i - base] in _WANTED_TYPES}
        _find_starts(buf, cut, [i for i in sorted(wanted) if i not in bounds], bounds)
        for i in sorted(wanted):
            self.decoded[i] = self._event(i, line)
        p = self.plan
        in_text = InText(buf, low, self.phrase, present) if self.in_text else None
        if p is None and not self.unplanned:  # every message line is a candidate
            looked = [i for i, op in enumerate(ops, base) if op]
        elif p is None:  # those holding a character that may spell the phrase's, or escapes
            looked = [i for i in sorted(found) if types[i - base] in _SURFACE]
        else:
            if p.labels:  # checkpoint nodes may show the words as a label
                found.update(i for i in wanted if i not in found)
            looked = [i for i in sorted(found) if types[i - base] in _SURFACE]
            alone = p.needles == (p.primary.decode(),) and not p.digit_needles
            plain = _Lowered(buf, low, p)
        for i in looked:
            if in_text is not None and i not in self.decoded and in_text.holds(bounds[i]):
                self._place(i, buf, bounds[i])  # held in a text block: no decode
                continue
            if p is not None and not (
                i in labelled
                or (p.labels and i in self.decoded)
                or (alone and i in holding)  # it holds all the plan asks of a line
                or (
                    plain.may_match(bounds[i])
                    if i not in escaped and i not in special
                    else line_may_match(line(i), p, escapes=i in escaped, special=i in special)
                )
            ):
                continue
            if self.replayed is not None:
                event, raw = self.replayed[i], b""
            else:
                raw = line(i)
                event = self.decoded.get(i) or _decode(raw)
            if holds(event_body(event, decoded=True), self.phrase):
                self._keep(i, event, raw, self._offset + bounds[i] - 1)
        self.length += n
        self._offset += cut - 1
        return n

    def _event(self, seq: int, line: Callable[[int], bytes]) -> Event:
        if self.replayed is not None:
            return self.replayed[seq]
        event = self.decoded.get(seq)
        return event if event is not None else _decode(line(seq))

    def _keep(self, seq: int, event: Event, raw: bytes, at: int) -> None:
        """Records a match: ``raw`` is its line, ``at`` the line's offset in the file."""
        self.matched.append(seq)
        if self.replayed is not None or seq in self.decoded:
            return
        if self._kept_bytes + len(raw) <= KEPT_BYTES:
            self.kept[seq] = event
            self._kept_bytes += len(raw)
        else:
            self.places[seq] = (at, len(raw), sz.hash(raw))

    def _place(self, seq: int, buf: bytearray, start: int) -> None:
        """Records a match found in the line starting at ``buf[start]``: its place."""
        self.matched.append(seq)
        if self.replayed is None:
            end = sz.find(buf, b"\n", start)
            with memoryview(buf) as view:
                if self._kept_bytes + end - start <= KEPT_BYTES:
                    self.kept_lines[seq] = bytes(view[start:end])  # decoded if shown
                    self._kept_bytes += end - start
                else:
                    digest = sz.hash(view[start:end])
                    self.places[seq] = (self._offset + start - 1, end - start, digest)

    def matched_event(self, seq: int) -> Event:
        """The event of a matched seq: kept, decoded, replayed, or read again from the file."""
        if self.replayed is not None:
            return self.replayed[seq]
        event = self.kept.get(seq) or self.decoded.get(seq)
        if event is not None:
            return event
        if seq in self.kept_lines:
            return _decode(self.kept_lines[seq])
        at, length, digest = self.places[seq]
        raw = self.fetch(at, length) if self.fetch is not None else b""
        if len(raw) != length or sz.hash(raw) != digest:
            raise _Refused  # the file changed under the search
        return _decode(raw)

    # ------------------------------------------------------------------ the whole log

    def _markers(self) -> None:
        """Refuses a log whose last turn/step marker opens a step (or that has none)."""
        if self.last_marker in (b"", b"step/start"):
            raise _Refused

    def _surface(self) -> None:
        surface: list[int] = []
        for seq in self.msg_seqs:
            if seq not in self.replaced:
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
        index.update(_Sparse(self.decoded, self.length), only=sorted(nodes), previews=False)
        self.checkpoints = index.items
        for c in self.checkpoints:
            for seq in c.shadowed_seqs:
                self.owner.setdefault(seq, c.id)
        self.owner = {**turn_owners(self.decoded[s] for s in sorted(self.decoded)), **self.owner}
        for event in self.decoded.values():
            info = pruned_info(event)
            if info is not None:  # a pruned original is owned by its archive key
                self.owner[int(info["seq"])] = archive_key(int(info["seq"]))
                self.pruned[archive_key(int(info["seq"]))] = int(info["seq"])

    # ------------------------------------------------------------------ search

    def search(
        self, query: str, checkpoint: str | None, limit: int | None, paging: Paging = FIRST_PAGE
    ) -> RecallResult:
        """``Recall.search`` of ``query`` (normalised: the scanned phrase)."""
        phrase = self.phrase
        max_hits = self.config.search_max_hits
        if not _in_range(limit, max_hits) or (paging.after or 0) >= self.length:
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
        matched = self.matched
        if scope_seqs is not None:
            inside = set(scope_seqs)
            matched = [s for s in matched if s in inside]
        read_chars = self.config.read_max_chars
        width = min(SNIPPET_CHARS, max(60, read_chars // 10))

        def hit_of(seq: int) -> Hit:
            event = self.matched_event(seq)
            pieces = snippet(event_body(event, decoded=True), phrase, width, lines=True)
            owner, time = self.owner_of(seq), minute_utc(event.time)
            return Hit(seq, seq in self.current, owner, time, *pieces)

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
            events=self.length,
            is_summary=lambda s: s in self.decoded and is_checkpoint(self.decoded[s]),
            paging=paging,
        )

    def owner_of(self, seq: int) -> str:
        if seq in self.current:
            return "(visible)"
        return self.owner.get(seq, "(no checkpoint)")


def _in_range(limit: object, high: int) -> bool:
    return limit is None or (type(limit) is int and 1 <= limit <= high)  # None: the default


def needles_of(p: Plan | None) -> list[Needle]:
    """What the scan looks for so that the candidates of ``p`` are found: the primary
    needle, and whatever lets a line hold the phrase without it (the special characters
    second: the lines it finds are tested with it, the others without)."""
    if p is None:
        return []
    found: list[Needle] = [p.primary, p.special_chars]
    if p.primary_has_digit:
        found += [TOOL_CALL, IMAGE]
    return found + list(p.sources)  # last: the lines holding one are candidates


def _scan_search(
    f: _Readable,
    query: str,
    checkpoint: str | None,
    limit: int | None,
    fetch: Callable[[int, int], bytes] | None,
    paging: Paging,
) -> RecallResult | None:
    phrase = normalize(query) if isinstance(query, str) else ""
    if not phrase:
        return None  # history_search says what is wrong
    try:
        log = ColdLog.scan(f, phrase, plan(phrase))
        log.fetch = fetch
        return log.search(query, checkpoint, limit, paging)
    except _Refused:
        return None


def search_bytes(
    data: bytes,
    query: str,
    checkpoint: str | None = None,
    limit: int | None = None,
    paging: Paging = FIRST_PAGE,
) -> RecallResult | None:
    """``history_search`` over the log ``data`` (a session file's bytes) without a replay;
    None when only a replay gives the answer (the caller then replays)."""

    def fetch(at: int, length: int) -> bytes:
        return data[at : at + length]

    return _scan_search(io.BytesIO(data), query, checkpoint, limit, fetch, paging)


def cold_search(
    path: Path,
    query: str,
    checkpoint: str | None = None,
    limit: int | None = None,
    paging: Paging = FIRST_PAGE,
) -> RecallResult | None:
    """:func:`search_bytes` over the file at ``path``, read a piece at a time; None when
    it cannot be read or only a replay gives the answer (a cursor past its end too)."""

    def fetch(at: int, length: int) -> bytes:
        with open(path, "rb") as again:
            again.seek(at)
            return again.read(length)

    try:
        with open(path, "rb", buffering=0) as f:
            return _scan_search(f, query, checkpoint, limit, fetch, paging)
    except OSError:
        return None


def search_replayed(
    events: Sequence[Event],
    path: Path,
    config: RecallConfig,
    query: str,
    checkpoint: str | None = None,
    limit: int | None = None,
    paging: Paging = FIRST_PAGE,
) -> RecallResult | None:
    """``Recall.search`` of a replayed log (``events``, read from ``path``) without building
    the search index: the file's first ``len(events)`` lines are scanned as
    :func:`cold_search` does, and the candidates' events taken from ``events``. None when
    only the index gives the answer (the file no longer starts with those events, …)."""
    phrase = normalize(query) if isinstance(query, str) else ""
    if not phrase or not events:
        return None
    try:
        with open(path, "rb", buffering=0) as f:
            log = ColdLog.scan(f, phrase, plan(phrase), replayed=events, lines=len(events))
        if log.last_type.decode() != events[-1].type:
            return None  # not the file the events came from
        log.config = config
        return log.search(query, checkpoint, limit, paging)
    except (OSError, _Refused):
        return None
