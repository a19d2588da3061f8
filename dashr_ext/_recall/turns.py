"""Turns in recall: reading one turn's originals, and turn memory's jobs as text (SPEC §6.4, 8).

Pure text and lookups over a session's turns and its :class:`~dashr_ext._turnmemory.records.
TurnRecord` s, shared by ``history_read(turn=N)``, the outline, ``%dashr turns`` and ``dashr
turns FILE``. Turn numbers are the ``turn`` of the ``turn/start`` / ``turn/end`` markers
(:attr:`Turn.index <dashr_ext._turns.Turn.index>`, :attr:`TurnRecord.turn`).

Line shapes (stable)::

    history_read turn 3 — original events, seqs 10-27, 9 events, landed as t57
    compressed turns: 2; read one's originals: history_read(turn=3)
    turn 3: 14 → 3 nodes, ~9,800 → ~1,450 tokens
    turn 3  landed: 14 → 3 nodes, ~9,800 → ~1,450 tokens, archived as t57

A turn read shows every message event appended inside the turn (from its ``turn/start`` to
its ``turn/end``) as it was recorded, reasoning included: a rewrite of the turn, a pruned
excerpt or a checkpoint is a replace event (appended after what it replaces) and is never
shown there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._payloads import CONFIG_CHANGE, TURN_MEMORY_TYPES
from ..errors import RecallError
from .render import counted, seq_range
from .syntax import PYTHON, Syntax

if TYPE_CHECKING:
    from .._events import Event
    from .._turnmemory.records import TurnRecord
    from .._turns import Turn

__all__ = [
    "COMPRESSED_LINES",
    "JOB_EVENT_TYPES",
    "TurnListing",
    "compact_lines",
    "compressed_lines",
    "find_turn",
    "landed_detail",
    "record_text",
    "turn_listing",
    "turn_read_header",
]

COMPRESSED_LINES = 12
"""Most compressed turns the outline names, the newest; a line counts the ones before."""

JOB_EVENT_TYPES = frozenset(
    {CONFIG_CHANGE, "turn/end", "compaction/start", "compaction/end", *TURN_MEMORY_TYPES}
)
"""The events :func:`~dashr_ext._turnmemory.records.turn_records` folds: the fold over only
these equals the fold over the whole log, so recall keeps just them as the log grows."""


def _turn_words(indices: Sequence[int]) -> str:
    """``turns 1-7``, ``turn 1``, ``turns 1, 3, 4`` or ``no turns yet``."""
    if not indices:
        return "no turns yet"
    ordered = sorted(set(indices))
    if len(ordered) == 1:
        return f"turn {ordered[0]}"
    if ordered[-1] - ordered[0] == len(ordered) - 1:
        return f"turns {ordered[0]}-{ordered[-1]}"
    if len(ordered) > 12:
        head = ", ".join(map(str, ordered[:6]))
        return f"turns {head}, …, {', '.join(map(str, ordered[-6:]))}"
    return f"turns {', '.join(map(str, ordered))}"


def find_turn(turns: Sequence[Turn], turn: object, syntax: Syntax = PYTHON) -> Turn:
    """The turn numbered ``turn`` (the last one so numbered, as turn memory reads it).

    Raises :class:`RecallError` for a value that is not a turn number (an integer >= 1) or a
    number no turn has, saying which turns exist.
    """
    known = [t.index for t in turns]
    if not isinstance(turn, int) or isinstance(turn, bool) or turn < 1:
        raise RecallError(
            f"turn: expected a turn number (an integer >= 1; this session has "
            f"{_turn_words(known)}), got {turn!r}"
        )
    for found in reversed(turns):
        if found.index == turn:
            return found
    if not known:
        raise RecallError(
            f"unknown turn {turn}: this session has no turns yet; read its history with "
            f"{syntax.read(seq=0)}"
        )
    raise RecallError(
        f"unknown turn {turn}: this session has {_turn_words(known)} ({syntax.outline()} "
        "lists them)"
    )


def _tokens(n: int | None) -> str:
    return "~?" if n is None else f"~{n:,}"


def _nodes(n: int | None) -> str:
    return "?" if n is None else str(n)


def landed_detail(record: TurnRecord) -> str:
    """``14 → 3 nodes, ~9,800 → ~1,450 tokens``: a landing's sizes before and after."""
    return (
        f"{_nodes(record.nodes_before)} → {_nodes(record.nodes_after)} nodes, "
        f"{_tokens(record.tokens_before)} → {_tokens(record.tokens_after)} tokens"
    )


def turn_read_header(turn: Turn, last_seq: int, events: int, record: TurnRecord | None) -> str:
    """The header of every page of a turn read: the turn, its seqs, its original events and
    what turn memory made of it (nothing when it had no job)."""
    end = turn.end_seq if turn.end_seq is not None else last_seq
    label = f"turn {turn.index}" + (" (open)" if turn.end_seq is None else "")
    status = ""
    if record is not None:
        status = (
            f", landed as {record.checkpoint}"
            if record.status == "landed"
            else f", turn memory {record.status}"
        )
    return (
        f"history_read {label} — original events, {seq_range(turn.start_seq, end)}, "
        f"{counted(events, 'event')}{status}"
    )


def compressed_lines(records: Iterable[TurnRecord], syntax: Syntax = PYTHON) -> list[str]:
    """The outline's lines of the turns turn memory compressed, oldest first: a head line
    with the count and how to read one's originals, then ``turn 3: 14 → 3 nodes, ~9,800 →
    ~1,450 tokens`` for the newest :data:`COMPRESSED_LINES` (a line counts those before)."""
    landed = [r for r in records if r.status == "landed"]
    if not landed:
        return []
    lines = [
        f"compressed turns: {len(landed)}; read one's originals: "
        f"{syntax.read(turn=landed[-1].turn)}"
    ]
    shown = landed[-COMPRESSED_LINES:]
    left = landed[: len(landed) - len(shown)]
    if left:
        which = _turn_words([r.turn for r in left])
        noun = "turn" if len(left) == 1 else "turns"
        lines.append(f"… {len(left)} earlier compressed {noun} not shown ({which})")
    lines.extend(f"turn {r.turn}: {landed_detail(r)}" for r in shown)
    return lines


@dataclass(frozen=True)
class TurnListing:
    """``%dashr turns`` / ``dashr turns FILE``: a title, one ``(turn N, status: …)`` row per
    turn-memory job, and notes."""

    title: str
    rows: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]

    def lines(self) -> list[str]:
        """The plain text, as :class:`~dashr_ext._display.Report` lays it out."""
        width = max((len(name) for name, _ in self.rows), default=0)
        out = [self.title]
        out.extend(f"{name.ljust(width)}  {value}" for name, value in self.rows)
        out.extend(f"note: {note}" for note in self.notes)
        return out


def record_text(record: TurnRecord) -> str:
    """One job's status with its sizes: ``landed: 14 → 3 nodes, …, archived as t57``,
    ``no-op: 4 nodes, ~120 tokens; below turn_min_tokens …``, ``pending``."""
    if record.status == "landed":
        return f"landed: {landed_detail(record)}, archived as {record.checkpoint}"
    if record.status == "pending":
        return "pending: its job has not run yet"
    sizes = [
        *([counted(record.nodes_before, "node")] if record.nodes_before is not None else []),
        *([f"{_tokens(record.tokens_before)} tokens"] if record.tokens_before is not None else []),
    ]
    size = f"{', '.join(sizes)}; " if sizes else ""
    return f"{record.status}: {size}{record.reason or '(no reason recorded)'}"


def turn_listing(
    records: Sequence[TurnRecord],
    events: Iterable[Event],
    session_id: str,
    backfill_hint: str,
) -> TurnListing:
    """The listing of ``records`` (:meth:`Dashr.turns <dashr_ext.Dashr.turns>`); a completed
    turn of ``events`` (the log) without a job is named in a note, with ``backfill_hint``: how
    to compress it anyway."""
    from .._turnmemory.records import JOB_REASONS  # not at import: a cold search needs none

    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    order = ("landed", "no-op", "failed", "pending")
    tally = ", ".join(f"{counts[s]} {s}" for s in order if s in counts)
    title = f"turn memory — session {session_id}: {counted(len(records), 'turn')}"
    title += f" ({tally})" if tally else ""
    rows = tuple((f"turn {r.turn}", record_text(r)) for r in records)
    covered = {r.end_seq for r in records}
    left = [
        int(e.data["turn"])
        for e in events
        if e.type == "turn/end" and e.data.get("reason") in JOB_REASONS and e.seq not in covered
    ]
    notes: list[str] = []
    if left:
        notes.append(
            f"no job: {_turn_words(left)}, completed while turn memory was off (an open never "
            f"backfills them); {backfill_hint}"
        )
    if not records and not left:
        notes.append("no completed turn yet (an interrupted turn gets no job)")
    return TurnListing(title, rows, tuple(notes))


def compact_lines(
    before: Sequence[TurnRecord], after: Sequence[TurnRecord]
) -> tuple[list[str], bool]:
    """What ``dashr compact FILE --turns`` prints: ``turn N: <status…>`` for each job that was
    not closed ``before`` the run (:func:`record_text`), and whether one of them did not land
    or close as a no-op (it failed, or is still pending: its job stopped)."""
    closed = {r.job for r in before if r.status != "pending"}
    ran = [r for r in after if r.job not in closed]
    if not ran:
        what = f"{counted(len(after), 'turn')} with a job, all closed" if after else "none"
        return [f"no completed turn left to compress ({what})"], False
    lines = [f"turn {r.turn}: {record_text(r)}" for r in ran]
    return lines, any(r.status in ("failed", "pending") for r in ran)
