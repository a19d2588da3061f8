"""Give the completed turns turn memory never covered a job: the explicit offline request.

A writable open queues only the jobs the log leaves pending; a turn completed while turn
memory was off has none and is never backfilled (the activation boundary, SPEC §6.4).
``dashr compact FILE --turns`` asks for exactly that backfill: :func:`backfill_jobs` records
a ``turn-memory/pending`` for every completed turn (``turn/end`` reason ``completed`` or
``continued``) that has no job yet, so the next queueing (:meth:`TurnJobs.recover
<dashr_ext._turnmemory.jobs.TurnJobs.recover>`) runs it, once, like any pending job. A job
that closed (landed, no-op or failed) is left as it is. :func:`extractive_compressor` is
the compressor that request runs: the offline one, whichever a session would use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._events import EventSpec
from .._payloads import TURN_PENDING
from .extractive import compress_turn
from .records import JOB_REASONS, job_id, turn_records

if TYPE_CHECKING:
    from .._session import Session
    from .editor import TurnEditor
    from .jobs import Compressor
    from .nodes import TurnNode

__all__ = ["backfill_jobs", "extractive_compressor"]


def backfill_jobs(session: Session) -> tuple[int, ...]:
    """Record a pending job for every completed turn of ``session`` without one; the turns
    given one, oldest first. Holds the session's lock; raises
    :class:`~dashr_ext.errors.ReadOnlyError` on a read-only session."""
    with session.lock:
        events = session.events
        covered = {r.end_seq for r in turn_records(events)}
        ends = [
            e
            for e in events
            if e.type == "turn/end" and e.data.get("reason") in JOB_REASONS and e.seq not in covered
        ]
        if ends:  # one durable batch
            session.append(
                [
                    EventSpec(TURN_PENDING, {"turn": int(e.data["turn"]), "job": job_id(e.seq)})
                    for e in ends
                ]
            )
        return tuple(int(e.data["turn"]) for e in ends)


def extractive_compressor(count_tokens: Callable[[str], int], read_max_chars: int) -> Compressor:
    """The ``extractive`` compressor (offline, deterministic), whatever a session configures:
    what the offline request runs."""

    def compress(nodes: Sequence[TurnNode]) -> TurnEditor | None:
        done = compress_turn(nodes, count_tokens=count_tokens, read_max_chars=read_max_chars)
        return None if done is None else done.editor

    return compress
