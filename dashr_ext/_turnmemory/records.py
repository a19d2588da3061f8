"""What the log says of each turn-memory job: a pure fold (SPEC §6.4, §15 ``Dashr.turns()``).

A completed turn (``turn/end`` with reason ``completed`` or ``continued``) has a job when turn
memory covered it: the settings the log records had ``turn_memory`` on at its ``turn/end``,
or a ``turn-memory/pending`` names it (a controller given ``turn_memory=True`` without
recording it writes one). A turn completed while turn memory was off has none and is never
backfilled: the activation boundary. A job is closed by its landing (a turn pass whose
``compaction/end`` carries no ``error``), ``turn-memory/noop`` or ``turn-memory/failed``;
until then it is pending. A landing cut short by a crash is closed with an ``error`` on open
and leaves its job pending, so it runs again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .._events import Event
from .._payloads import CONFIG_CHANGE, TURN_FAILED, TURN_NOOP, TURN_PENDING
from .landing import is_turn_pass

__all__ = ["JOB_REASONS", "TurnRecord", "TurnStatus", "job_id", "open_jobs", "turn_records"]

TurnStatus: TypeAlias = Literal["pending", "landed", "no-op", "failed"]

JOB_REASONS = frozenset({"completed", "continued"})
"""The ``turn/end`` reasons that give a turn a job (an interrupted turn gets none)."""


def job_id(end_seq: int) -> str:
    """The id of the job of the turn whose ``turn/end`` is at ``end_seq``: ``j<seq>``."""
    return f"j{end_seq}"


def _end_seq(job: str, fallback: int) -> int:
    digits = job[1:]
    return int(digits) if job[:1] == "j" and digits.isascii() and digits.isdigit() else fallback


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One completed turn's turn-memory job, as the log has it."""

    turn: int
    status: TurnStatus
    reason: str | None
    """Why a no-op or a failure closed it (None while pending and once landed)."""
    nodes_before: int | None
    """The turn's current nodes when the job read them (None until it did)."""
    nodes_after: int | None
    """Its nodes after the landing (equal to ``nodes_before`` for a no-op)."""
    tokens_before: int | None
    tokens_after: int | None
    checkpoint: str | None
    """``t<seq>``: the landing's archive key (``dashr_compaction_archive["t<seq>"]``)."""
    job: str
    """``j<seq of the turn's turn/end>``."""
    end_seq: int


@dataclass
class _Job:
    turn: int
    job: str
    end_seq: int
    status: TurnStatus = "pending"
    reason: str | None = None
    nodes: tuple[int | None, int | None] = (None, None)
    tokens: tuple[int | None, int | None] = (None, None)
    checkpoint: str | None = None

    def record(self) -> TurnRecord:
        return TurnRecord(
            turn=self.turn,
            status=self.status,
            reason=self.reason,
            nodes_before=self.nodes[0],
            nodes_after=self.nodes[1],
            tokens_before=self.tokens[0],
            tokens_after=self.tokens[1],
            checkpoint=self.checkpoint,
            job=self.job,
            end_seq=self.end_seq,
        )


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def turn_records(events: Iterable[Event]) -> tuple[TurnRecord, ...]:
    """Every job the log records, oldest turn first (by the seq of its ``turn/end``)."""
    jobs: dict[str, _Job] = {}
    passes: dict[str, _Job] = {}
    starts: dict[str, Event] = {}
    logged_on = False
    for event in events:
        kind = event.type
        data = event.data
        if kind == CONFIG_CHANGE:
            value = data.get("compaction", {}).get("turn_memory")
            if isinstance(value, bool):
                logged_on = value
        elif kind == "turn/end":
            if logged_on and data.get("reason") in JOB_REASONS:
                key = job_id(event.seq)
                jobs.setdefault(key, _Job(int(data["turn"]), key, event.seq))
        elif kind == TURN_PENDING:
            key = str(data["job"])
            jobs.setdefault(key, _Job(int(data["turn"]), key, _end_seq(key, event.seq)))
        elif kind in (TURN_NOOP, TURN_FAILED):
            key = str(data["job"])
            job = jobs.setdefault(key, _Job(int(data["turn"]), key, _end_seq(key, event.seq)))
            if job.status == "pending":
                job.status = "no-op" if kind == TURN_NOOP else "failed"
                job.reason = str(data["reason"])
                nodes, tokens = _int(data.get("nodes")), _int(data.get("tokens"))
                job.nodes, job.tokens = (nodes, nodes), (tokens, tokens)
        elif is_turn_pass(event):
            found = jobs.get(str(data.get("job")))
            if found is not None:
                passes[str(data["compactionId"])] = found
                starts[str(data["compactionId"])] = event
        elif kind == "compaction/end" and str(data["compactionId"]) in passes:
            landed = passes[str(data["compactionId"])]
            start = starts[str(data["compactionId"])].data
            if "error" not in data and landed.status == "pending":
                landed.status = "landed"
                landed.nodes = (_int(start.get("nodesBefore")), _int(start.get("nodesAfter")))
                landed.tokens = (_int(start.get("tokensBefore")), _int(start.get("tokensAfter")))
                landed.checkpoint = str(start.get("checkpoint"))
    return tuple(j.record() for j in sorted(jobs.values(), key=lambda j: j.end_seq))


def open_jobs(events: Iterable[Event]) -> tuple[TurnRecord, ...]:
    """The pending jobs, oldest first (what a writable open queues)."""
    return tuple(r for r in turn_records(events) if r.status == "pending")
