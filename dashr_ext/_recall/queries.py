"""``Recall``: outline, read and search over one session's log (SPEC 8).

The shell around the pure pieces: it keeps caches that grow with the log (message seqs,
checkpoints and their spans, the search index), checks arguments, and hands the data to
:mod:`.outline`, :mod:`.render` and :mod:`.hits`. The step executing right now is excluded
from read and search.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._checkpoints import Checkpoint, CheckpointIndex, is_checkpoint
from .._config import RecallConfig
from .._events import SURFACE_TYPES, Event
from .._payloads import TurnLandings
from .._pruned import archive_key, pruned_info
from ..errors import ConfigError, RecallError
from . import cold
from .cursor import Cursor, parse_cursor, parse_search_cursor
from .hits import Hit, Paging, render_hits
from .outline import render_outline, turn_row
from .render import counted, event_body, minute_utc, read_page, seq_range
from .result import RecallResult
from .search import SNIPPET_CHARS, SearchIndex, normalize, snippet
from .syntax import PYTHON, Syntax
from .tools import tool_arguments, tool_schemas
from .turns import JOB_EVENT_TYPES, compressed_lines, find_turn, turn_read_header

if TYPE_CHECKING:
    from .._session import Session
    from .._turnmemory.records import TurnRecord
    from .._turns import Turn

__all__ = ["Recall"]


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
        self.syntax: Syntax = PYTHON
        """How the results' hints spell the calls they suggest (the CLI's: commands)."""
        self._reset()

    def _reset(self) -> None:
        self._seen = 0
        self._msg_seqs: list[int] = []
        self._index = CheckpointIndex()
        self._cps: list[Checkpoint] = []
        self._cp_by_id: dict[str, Checkpoint] = {}
        self._cp_range: dict[str, tuple[int, int]] = {}
        self._node_ids: dict[int, str] = {}
        """Seq of each checkpoint node -> its id (derived when the node carries none)."""
        self._owner: dict[int, str] = {}
        self._pruned: dict[str, int] = {}
        """``p<seq>`` -> seq of every pruned original (SPEC §6.5)."""
        self._job_events: list[Event] = []
        """The events turn memory's job records fold (:data:`~.turns.JOB_EVENT_TYPES`)."""
        self._landings = TurnLandings()
        self._search = SearchIndex()
        self._cold_tried = False
        """Whether a search ran: the first one of a read-only session scans the file instead
        of building the index (:mod:`.cold`); later ones build it."""

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
                info = pruned_info(events[seq])
                if info is not None:  # a pruned original is owned by its archive key
                    self._owner[int(info["seq"])] = archive_key(int(info["seq"]))
                    self._pruned[archive_key(int(info["seq"]))] = int(info["seq"])
            elif events[seq].type in JOB_EVENT_TYPES:
                self._job_events.append(events[seq])
                for shadowed, key in self._landings.fold(events[seq]).items():
                    self._owner.setdefault(shadowed, key)  # a turn landing's original
        self._seen = n
        known = len(self._cps)
        if self._index.update(self.session):  # only the events since the last call are read
            self._cps = list(self._index.items)
            self._cp_by_id = {c.id: c for c in self._cps}
            for c in self._cps[known:]:
                self._cp_range[c.id] = (min(c.shadowed_seqs), max(c.shadowed_seqs))
                self._node_ids[c.node_seq] = c.id
                for seq in c.shadowed_seqs:
                    self._owner.setdefault(seq, c.id)  # a pruned original keeps p<seq>

    def _sync_search(self) -> None:
        index = self._search
        events = self.session.events
        for i in range(index.count, len(self._msg_seqs)):
            index.add(normalize(event_body(events[self._msg_seqs[i]], decoded=True)))

    def _executing(self) -> set[int]:
        """Seqs of the step executing right now (excluded from read and search)."""
        return self.session.executing_seqs()

    def checkpoints(self) -> list[Checkpoint]:
        """Committed checkpoints, oldest first (cached; grows with the log)."""
        self._sync()
        return list(self._cps)

    def turn_records(self) -> tuple[TurnRecord, ...]:
        """Turn memory's job of every completed turn it covered, oldest first (what
        :meth:`Dashr.turns <dashr_ext.Dashr.turns>` lists), folded from the job events only."""
        from .._turnmemory.records import turn_records  # not at import: a cold search needs none

        self._sync()
        return turn_records(self._job_events)

    def _pruned_seq(self, name: object) -> int | None:
        """The seq of the pruned original ``name`` (``p<seq>``) names, else None."""
        return self._pruned.get(name.strip().lower()) if isinstance(name, str) else None

    def _landing_turn(self, name: object) -> int | None:
        """The turn a turn landing's archive key (``t<seq>``) rewrote, if ``name`` is one."""
        if not isinstance(name, str) or not name.strip().lower().startswith("t"):
            return None
        key = name.strip().lower()
        for event in self._job_events:
            data = event.data
            if event.type == "compaction/start" and data.get("checkpoint") == key:
                return data["turn"] if _is_int(data.get("turn")) else None
        return None

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
        return render_outline(
            event_count=len(self.session.events),
            checkpoints=self._cps,
            spans=self._cp_range,
            turns=self.session.turns,
            row_of=self._turn_row,
            max_chars=self.config.outline_max_chars,
            pruned=list(self._pruned),
            syntax=self.syntax,
            compressed=compressed_lines(self.turn_records(), self.syntax),
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
        return turn_row(turn, len(events) - 1, total, current, first_user)

    # ------------------------------------------------------------------ read

    def read(
        self,
        checkpoint: str | None = None,
        seq: int | None = None,
        cursor: str | None = None,
        turn: int | None = None,
    ) -> RecallResult:
        """One page of a checkpoint's span, of the log from a seq, of turn ``turn``'s
        original events (:mod:`.turns`), or after a cursor."""
        given = [
            name
            for name, value in (
                ("checkpoint", checkpoint),
                ("seq", seq),
                ("turn", turn),
                ("cursor", cursor),
            )
            if value is not None
        ]
        if len(given) != 1:
            got = "none" if not given else " and ".join(given)
            raise RecallError(
                f"history_read: give exactly one of checkpoint, seq, turn or cursor (got {got}); "
                'e.g. history_read(checkpoint="c20"), history_read(seq=0), history_read(turn=1), '
                "or history_read(cursor=<the token after 'cursor:' on a previous page>)"
            )
        self._sync()
        executing = self._executing()
        if turn is not None:
            found = find_turn(self.session.turns, turn, self.syntax)
            return self._read_turn(found, found.start_seq, 0, executing)
        if checkpoint is not None and (landed := self._landing_turn(checkpoint)) is not None:
            turn = landed  # t<seq> names a turn landing: read the turn's originals
            found = find_turn(self.session.turns, turn, self.syntax)
            return self._read_turn(found, found.start_seq, 0, executing)
        if checkpoint is not None:
            pruned = self._pruned_seq(checkpoint)
            if pruned is None:
                return self._read_checkpoint(self._checkpoint(checkpoint), 0, 0, executing)
            seq = pruned  # p<seq> names a pruned original: read from it
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
                    f"seq {seq} belongs to the step running now ({_seqs_words(executing)}); "
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
        if c.range.startswith("t"):
            return self._turn_cursor(c, token, executing)
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

    def _turn_cursor(self, c: Cursor, token: str, executing: set[int]) -> RecallResult:
        """The page of a turn read a ``t<turn>@<seq>:<offset>`` cursor names."""
        number = int(c.range[1:])
        try:
            found = find_turn(self.session.turns, number, self.syntax)
        except RecallError as exc:
            raise RecallError(f"malformed cursor {token!r}: {exc}") from None
        seqs = self._turn_seqs(found)
        if c.position not in seqs:
            where = seq_range(seqs[0], seqs[-1]) if seqs else "none"
            raise RecallError(
                f"malformed cursor {token!r}: seq {c.position} is not one of turn {number}'s "
                f"original message events ({len(seqs)}, {where})"
            )
        if c.position in executing:
            raise RecallError(
                f"seq {c.position} belongs to the step running now; its events can be read once "
                "that step has finished"
            )
        self._check_offset(c, token, self.session.events[c.position])
        return self._read_turn(found, c.position, c.offset, executing)

    def _turn_seqs(self, turn: Turn) -> list[int]:
        """The seqs of the message events appended inside ``turn``: its originals."""
        events = self.session.events
        end = turn.end_seq if turn.end_seq is not None else len(events) - 1
        lo = bisect_left(self._msg_seqs, turn.start_seq)
        hi = bisect_right(self._msg_seqs, end)
        return [s for s in self._msg_seqs[lo:hi] if events[s].surface_op == "append"]

    def _read_turn(
        self, turn: Turn, from_seq: int, offset: int, executing: set[int]
    ) -> RecallResult:
        """A page of ``turn``'s original events, from the one at ``from_seq`` on."""
        events = self.session.events
        seqs = self._turn_seqs(turn)
        record = next(
            (r for r in self.turn_records() if r.end_seq == turn.end_seq and r.turn == turn.index),
            None,
        )
        header = turn_read_header(turn, len(events) - 1, len(seqs), record)
        start = bisect_left(seqs, from_seq)

        def entries() -> Iterator[tuple[int, Event]]:
            for seq in seqs[start:]:
                if seq not in executing:
                    yield seq, events[seq]

        running = sorted(executing.intersection(seqs[start:]))
        last = seqs[-1] if seqs else turn.start_seq
        return self._page(header, entries(), f"t{turn.index}", offset, last, running)

    @staticmethod
    def _check_offset(c: Cursor, token: str, event: Event) -> None:
        if c.offset and c.offset >= len(event_body(event, decoded=True)):
            raise RecallError(
                f"malformed cursor {token!r}: character {c.offset} is past the end of "
                f"seq {event.seq} ({len(event_body(event, decoded=True))} characters)"
            )

    def _read_checkpoint(
        self, cp: Checkpoint, position: int, offset: int, executing: set[int]
    ) -> RecallResult:
        lo, hi = self._cp_range[cp.id]
        status = f"superseded by {cp.superseded_by}" if cp.superseded_by else "current"
        span = cp.shadowed_seqs
        header = (
            f"history_read checkpoint {cp.id} — shadowed {seq_range(lo, hi)}, "
            f"{counted(len(span), 'event')}, "
            f"~{cp.shadowed_tokens} tokens, {status}"
        )
        events = self.session.events

        def entries() -> Iterator[tuple[int, Event]]:
            for p in range(position, len(span)):
                if span[p] not in executing:
                    yield p, events[span[p]]

        running = sorted(executing.intersection(span[position:]))
        return self._page(header, entries(), cp.id, offset, len(span), running)

    def _read_seq(self, start: int, index: int, offset: int, executing: set[int]) -> RecallResult:
        events = self.session.events
        last = len(events) - 1
        header = f"history_read from seq {start} — this session's history, {seq_range(0, last)}"
        msg_seqs = self._msg_seqs

        def entries() -> Iterator[tuple[int, Event]]:
            for i in range(index, len(msg_seqs)):
                seq = msg_seqs[i]
                if seq not in executing:
                    yield seq, events[seq]

        running = sorted(s for s in executing if s >= start)
        return self._page(header, entries(), f"s{start}", offset, last, running)

    def _page(
        self,
        header: str,
        entries: Iterator[tuple[int, Event]],
        range_id: str,
        offset: int,
        max_position: int,
        running: Sequence[int] = (),
    ) -> RecallResult:
        """A page; ``running`` are the range's seqs left out as the executing step's."""
        page = read_page(
            header,
            entries,
            range_id=range_id,
            start_offset=offset,
            max_position=max_position,
            max_chars=self.config.read_max_chars,
            max_events=self.config.read_max_events,
            checkpoint_ids=self._node_ids,
            end_note=_running_note(running, self.syntax) if running else None,
            next_page=self.syntax.next_page,
        )
        return RecallResult(page.text, "read", page.html())

    # ------------------------------------------------------------------ search

    def search(
        self,
        query: str,
        checkpoint: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecallResult:
        """Numbered literal-phrase hits over the whole log or one checkpoint's span, a page
        of at most ``limit``; ``cursor`` (``h17``, named by a page that stops short) gives the
        next page."""
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
            raise RecallError(
                f"limit: expected an integer in [1, {max_hits}], got {limit!r}; it counts the "
                "hits of one page (a page that stops short names the cursor of the next)"
            )
        self._sync()
        events = self.session.events
        after = None if cursor is None else parse_search_cursor(cursor, len(events) - 1)
        paging = Paging(after, self.syntax)
        if not self._cold_tried:
            self._cold_tried = True
            found = self._cold_search(query, checkpoint, limit, paging)
            if found is not None:
                return found
        pruned = self._pruned_seq(checkpoint)  # p<seq>: the one pruned original
        cp = self._checkpoint(checkpoint) if checkpoint is not None and pruned is None else None
        self._sync_search()
        executing = self._executing()
        index = self._search
        if cp is not None or pruned is not None:
            span: tuple[int, ...] = cp.shadowed_seqs if cp is not None else (pruned or 0,)
            scope = [s for s in span if s not in executing]
            positions = {bisect_left(self._msg_seqs, s): s for s in scope}
            matched = sorted(positions[i] for i in index.find_in(phrase, positions))
            scanned = len(scope)
        else:
            matched = [
                seq
                for seq in (self._msg_seqs[i] for i in index.find(phrase))
                if seq not in executing
            ]
            scanned = len(self._msg_seqs) - len(executing)
        return render_hits(
            query,
            matched,
            scope=cp.id if cp is not None else checkpoint if pruned is not None else None,
            scanned=scanned,
            limit=limit,
            max_hits=max_hits,
            max_chars=self.config.read_max_chars,
            hit_of=lambda seq: self._hit(seq, phrase),
            owner_of=self._owner_of,
            latest=self._cps[-1].id if self._cps else None,
            events=len(events),
            running=len(executing),
            is_summary=lambda seq: is_checkpoint(events[seq]),
            paging=paging,
        )

    def _cold_search(
        self, query: str, checkpoint: str | None, limit: int | None, paging: Paging
    ) -> RecallResult | None:
        """The search by a scan of the session file, for a read-only session whose index is
        not built yet (a one-off search need not fold every message); None otherwise."""
        session = self.session
        if not (session.read_only and session.path is not None and cold.ENABLED):
            return None
        if self._search.count:
            return None
        return cold.search_replayed(
            session.events, session.path, self.config, query, checkpoint, limit, paging
        )

    def _hit(self, seq: int, phrase: str) -> Hit:
        event = self.session.events[seq]
        visible = self.session.is_current(seq)
        width = min(SNIPPET_CHARS, max(60, self.config.read_max_chars // 10))
        before, match, after = snippet(event_body(event, decoded=True), phrase, width, lines=True)
        return Hit(seq, visible, self._owner_of(seq), minute_utc(event.time), before, match, after)

    def _owner_of(self, seq: int) -> str:
        """``(visible)``, else the checkpoint (or pruned output's or turn landing's archive
        key) whose shadowed span holds ``seq``."""
        if self.session.is_current(seq):
            return "(visible)"
        return self._owner.get(seq, "(no checkpoint)")

    # ------------------------------------------------------------------ model tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries of the three recall tools; ``[]`` until something is
        recallable (a checkpoint, a pruned output whose marker names history_read, or a
        committed turn landing, whose originals ``history_read(turn=N)`` reads)."""
        self._sync()
        if not self._cps and not self._pruned and not self._landings.committed:
            return []
        return tool_schemas(self.config)

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run a model's tool call (arguments as a JSON string or a mapping); its plain text.

        Bad calls raise :class:`RecallError` with an actionable message, meant to be sent back
        to the model as the tool's (error) result.
        """
        present = tool_arguments(name, arguments)
        if name == "history_outline":
            result = self.outline()
        elif name == "history_read":
            result = self.read(**present)
        else:
            result = self.search(**present)
        return result.text


def _id_list(cps: Sequence[Checkpoint]) -> str:
    ids = [c.id for c in cps]
    if len(ids) > 40:
        return f"{', '.join(ids[:20])}, …, {', '.join(ids[-20:])}"
    return ", ".join(ids)


def _running_note(seqs: Sequence[int], syntax: Syntax) -> str:
    """The line before the end of a range whose last seqs belong to the executing step."""
    which = _seqs_words(set(seqs))
    verb = "belongs" if len(seqs) == 1 else "belong"
    return (
        f"… not the end of this session's history: {which} {verb} to the step running now "
        f"(left out until it finishes; then read on with {syntax.read(seq=seqs[0])})"
    )


def _seqs_words(seqs: set[int]) -> str:
    """``seq 46``, ``seqs 46-48`` or ``seqs 3, 7``."""
    return f"seq {min(seqs)}" if len(seqs) == 1 else f"seqs {_seq_list(seqs)}"


def _seq_list(seqs: set[int]) -> str:
    ordered = sorted(seqs)
    if len(ordered) > 1 and ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))
