"""Turn-memory jobs: durable, recovered once, one at a time per session (SPEC §6.4).

The I/O end of turn memory. :class:`TurnJobs` notices completed turns (``turn/end`` with
reason ``completed`` or ``continued``) as a controller records them, writes each job's
``turn-memory/pending`` and runs the jobs oldest first on one daemon thread: the caller never
waits. A job re-reads the turn's current nodes when it starts (under the session's lock),
closes a turn with no assistant text or below ``turn_min_tokens`` as a no-op, runs the
compressor without the lock (a :class:`~.context.ContextCompressor` also gets the main
request's prefix through the turn, read with the nodes), then lands the rewrite in one
durable batch (:mod:`.landing`) holding the lock again, after checking that the turn's nodes
are still current and contiguous (else it is skipped with the reason logged).

A session-level pass and a landing never overlap on the same nodes: a job waits while a
pass is in flight (the controller's :class:`~dashr_ext._compaction.PassSlot`) and then
starts over on the surface the pass left; a pass about to start waits for the job in flight
(:meth:`TurnJobs.before_pass`, bounded). On a writable open, :func:`repair_turn_passes`
closes landings a crash cut short and :meth:`TurnJobs.recover` queues every job the log
leaves pending (:mod:`.records`), so each runs once.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._compaction.commit import (
    ArchiveUndo,
    check_span_current,
    restore_archive,
    write_archive,
)
from .._compaction.plan import Region
from .._events import TextBlock
from .._payloads import TURN_FAILED, TURN_NOOP, TURN_PENDING, TURN_SOURCE, TurnClosedPayload
from ..errors import CompactionError, CompactionWarning, DashrError, TurnMemoryError
from .context import ContextCompressor, TurnContext
from .editor import TurnEditor
from .extractive import compress_turn
from .landing import plan_landing, turn_passes
from .nodes import TurnNode, turn_nodes
from .records import JOB_REASONS, job_id, open_jobs

if TYPE_CHECKING:
    from .._compaction import PassSlot
    from .._config import CompactionConfig
    from .._meter import TokenMeter
    from .._session import Session

__all__ = [
    "CLOSE_WAIT_SECONDS",
    "PASS_WAIT_SECONDS",
    "Compressor",
    "ContextCompressor",
    "Job",
    "TurnContext",
    "TurnJobs",
    "default_compressor",
    "repair_turn_passes",
]

Compressor = Callable[[Sequence[TurnNode]], TurnEditor | None]
"""A compressor: the turn's nodes → the editor after its replaces, or None (nothing to gain).
One that is also a :class:`~.context.ContextCompressor` is called as ``compress(nodes,
context)`` instead, with the main request's prefix and the job's settings."""

PASS_WAIT_SECONDS = 30.0
"""How long a session-level pass waits for the turn-memory job in flight before it starts."""
CLOSE_WAIT_SECONDS = 30.0
"""How long ``close()`` waits for the job in flight; the jobs after it stay pending."""
PASS_POLL_SECONDS = 0.005
"""How often a job waiting for a session-level pass looks again."""
PASS_GIVE_UP_SECONDS = 600.0
"""A job waits this long for a session-level pass at most, then it is skipped."""

SPAN_MOVED = "skipped: the turn's nodes changed while the job ran (they are no longer current "
SPAN_MOVED += "and contiguous on the surface)"


def default_compressor(count_tokens: Callable[[str], int], read_max_chars: int) -> Compressor:
    """The ``extractive`` compressor (:func:`~.extractive.compress_turn`), counting tokens
    with ``count_tokens`` (the session meter's)."""

    def compress(nodes: Sequence[TurnNode]) -> TurnEditor | None:
        done = compress_turn(nodes, count_tokens=count_tokens, read_max_chars=read_max_chars)
        return None if done is None else done.editor

    return compress


@dataclass(frozen=True, slots=True)
class Job:
    """One completed turn's job: the turn, its id (``j<seq of turn/end>``), that seq."""

    turn: int
    job: str
    end_seq: int


@dataclass(frozen=True, slots=True)
class _Close:
    """A job closes without a landing: a no-op or a failure, with why."""

    kind: str
    reason: str
    nodes: int | None = None
    tokens: int | None = None


def has_assistant_text(nodes: Sequence[TurnNode]) -> bool:
    """Whether any assistant node of the turn says something (reasoning does not count)."""
    return any(
        isinstance(b, TextBlock) and b.text.strip()
        for n in nodes
        if n.role == "assistant"
        for b in n.content
    )


class TurnJobs:
    """The turn-memory jobs of one session: noticed, queued, run one at a time, closed."""

    def __init__(
        self,
        session: Session,
        *,
        config: Callable[[], CompactionConfig],
        meter: TokenMeter,
        archive: Callable[[], MutableMapping[str, Any]],
        slot: PassSlot,
        compressor: Callable[[], Compressor | None],
        clock: Callable[[], int],
        tools: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        self.session = session
        self._config = config
        self._meter = meter
        self._archive = archive
        self._slot = slot
        self._compressor = compressor
        self._clock = clock
        self._tools = tools
        """The main request's ``tools`` (``Dashr.request_tools``), for a :class:`TurnContext`."""
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._known: set[str] = set()
        """Ids of the jobs queued or run by this object (each runs once)."""
        self._running: Job | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        """close() began: no job starts any more."""
        self._closed = False
        """close() stopped waiting: the job in flight writes nothing more."""
        self._seen = len(session)
        """The log length :meth:`notice` has looked at (turns before it are not its own)."""
        self.last_error: str | None = None
        """The error of the last job that failed (also logged as ``turn-memory/failed``)."""

    # ------------------------------------------------------------------ queueing

    def notice(self) -> None:
        """Record the job of every turn completed since the last look (``turn-memory/pending``)
        and queue it; with turn memory off, the turns are only looked at."""
        s = self.session
        if s.read_only or self._stopping or len(s) == self._seen:
            return
        with s.lock:
            events = s.events
            start, self._seen = self._seen, len(events)
            if not self._config().turn_memory:
                return
            ended = [
                e
                for e in events[start:]
                if e.type == "turn/end" and e.data.get("reason") in JOB_REASONS
            ]
            for end in ended:
                job = Job(int(end.data["turn"]), job_id(end.seq), end.seq)
                try:
                    s.append_log(TURN_PENDING, {"turn": job.turn, "job": job.job})
                except DashrError as exc:
                    warnings.warn(
                        f"turn {job.turn}: could not record its turn-memory job: {exc}",
                        CompactionWarning,
                        stacklevel=3,
                    )
                    continue
                self._enqueue(job)
            self._seen = len(events)

    def recover(self) -> None:
        """Queue every job the log leaves pending, oldest first (a writable open does)."""
        s = self.session
        if s.read_only or not self._config().turn_memory:
            return
        with s.lock:
            for record in open_jobs(s.events):
                self._enqueue(Job(record.turn, record.job, record.end_seq))
            self._seen = len(s)

    def _enqueue(self, job: Job) -> None:
        with self._cond:
            if job.job in self._known or self._stopping:
                return
            self._known.add(job.job)
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"dashr-turn-memory-{self.session.id}", daemon=True
                )
                self._thread.start()

    # ------------------------------------------------------------------ waiting

    def busy(self) -> bool:
        """Whether a job is queued or running."""
        with self._cond:
            return bool(self._queue) or self._running is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no job is queued or running: True, or False when ``timeout`` passed."""
        self.notice()
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._queue and self._running is None, timeout=timeout
            )

    def before_pass(
        self, needed: Callable[[], bool] | None = None, timeout: float = PASS_WAIT_SECONDS
    ) -> None:
        """Before a session-level pass: wait (bounded) for the job in flight to land or give
        up. ``needed`` (called only while a job runs) says whether a pass will run at all."""
        self.notice()
        with self._cond:
            if self._running is None or self._thread is threading.current_thread():
                return
        if needed is not None and not needed():
            return
        with self._cond:
            self._cond.wait_for(lambda: self._running is None, timeout=timeout)

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Start no further job and wait (bounded) for the one in flight; the rest stay pending
        in the log for the next open."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            if self._thread is not threading.current_thread():
                self._cond.wait_for(lambda: self._running is None, timeout=timeout)
            self._closed = True

    # ------------------------------------------------------------------ the worker

    def _work(self) -> None:
        while True:
            with self._cond:
                if self._stopping or not self._queue:
                    self._thread = None
                    self._cond.notify_all()
                    return
                job = self._running = self._queue.popleft()
            try:
                self._run(job)
            except Exception as exc:  # a bug must not kill the queue; the job stays pending
                warnings.warn(
                    f"turn-memory job {job.job} (turn {job.turn}) stopped: "
                    f"{type(exc).__name__}: {exc}",
                    CompactionWarning,
                    stacklevel=1,
                )
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()

    def _run(self, job: Job) -> None:
        """Read the turn, compress it, land it; starts over after a session-level pass."""
        s = self.session
        while True:
            compressor = self._compressor()
            with s.lock:
                if self._closed or s.read_only:
                    return
                if job.job not in {r.job for r in open_jobs(s.events)}:
                    return  # closed already (by an earlier run of the same log)
                passing = self._slot.compaction_id is not None
                read = None if passing else self._read(job)
                context = None
                if isinstance(compressor, ContextCompressor) and not isinstance(read, _Close):
                    assert read is not None
                    context = self._context(job, read)
            if passing:
                if self._wait_for_pass(job):
                    continue
                return
            if isinstance(read, _Close):
                self._close(job, read)
                return
            assert read is not None
            nodes = read
            try:
                editor = self._compress(compressor, nodes, context)
                if editor is not None:
                    editor.validate_final()
            except Exception as exc:
                self._close(job, _Close("failed", _error_text(exc), len(nodes), _tokens(nodes)))
                return
            if editor is None:
                self._close(job, _Close("no-op", "nothing to gain", len(nodes), _tokens(nodes)))
                return
            with s.lock:
                if self._closed:
                    return
                passing = self._slot.compaction_id is not None
                if not passing:
                    self._land(job, nodes, editor)
                    return
            if not self._wait_for_pass(job):
                return

    def _compress(
        self,
        compressor: Compressor | None,
        nodes: Sequence[TurnNode],
        context: TurnContext | None,
    ) -> TurnEditor | None:
        if context is not None and isinstance(compressor, ContextCompressor):
            return compressor.compress(nodes, context)
        if compressor is None:
            compressor = default_compressor(
                self._meter.count_text, self._config().turn_read_max_chars
            )
        return compressor(nodes)

    def _context(self, job: Job, nodes: Sequence[TurnNode]) -> TurnContext:
        """The main request through the turn's last node, and the job's settings (lock held).

        The messages come from ``Session.messages()``, the code path of
        ``Dashr.request_messages()``, cut after the turn's last node; the tools are the
        controller's ``request_tools()`` (the session header's without a controller).
        """
        s = self.session
        messages = s.messages()
        after = len(s.surface) - s.position(nodes[-1].seq) - 1
        tools = self._tools() if self._tools is not None else (s.tools or [])
        config = self._config()
        return TurnContext(
            turn=job.turn,
            job=job.job,
            messages=tuple(messages[: len(messages) - after]),
            tools=tuple(tools),
            worker_attempts=config.turn_worker_attempts,
            read_max_chars=config.turn_read_max_chars,
            count_tokens=self._meter.count_text,
            cancelled=lambda: self._closed,
        )

    def _read(self, job: Job) -> Sequence[TurnNode] | _Close:
        """The turn's current nodes, or why the job closes without a worker (lock held)."""
        try:
            nodes = turn_nodes(self.session, job.turn, meter=self._meter)
        except TurnMemoryError as exc:
            return _Close("no-op", str(exc))
        count, tokens = len(nodes), _tokens(nodes)
        if not has_assistant_text(nodes):
            return _Close("no-op", "the turn has no assistant text", count, tokens)
        minimum = self._config().turn_min_tokens
        if tokens < minimum:
            return _Close(
                "no-op",
                f"below turn_min_tokens ({tokens:,} < {minimum:,} tokens)",
                count,
                tokens,
            )
        if nodes[0].role != "user":  # a rewrite ending on a tool node absorbs its last pair
            return _Close(
                "no-op",
                f"the turn starts with a {nodes[0].role} node; a rewrite starts with the "
                "user's node",
                count,
                tokens,
            )
        return nodes

    def _land(self, job: Job, nodes: Sequence[TurnNode], editor: TurnEditor) -> None:
        """Check the span, write the archive entry and append the batch (lock held)."""
        s = self.session
        try:
            check_span_current(s, [Region(0, len(nodes) - 1, tuple(n.seq for n in nodes), 0)])
        except CompactionError:
            self._close(job, _Close("failed", SPAN_MOVED, len(nodes), _tokens(nodes)))
            return
        config = self._config()
        landing = plan_landing(
            nodes,
            editor.as_data(),
            turn=job.turn,
            job=job.job,
            start_seq=len(s),
            at_ms=self._clock(),
            session_id=s.id,
            event_of=s.event,
            count_tokens=self._meter.count_text,
            archive_reasoning=config.archive_reasoning,
        )
        if landing is None:
            reason = f"nothing to gain: the rewrite is not smaller than the turn ({len(nodes)} "
            reason += "nodes)"
            self._close(job, _Close("no-op", reason, len(nodes), _tokens(nodes)))
            return
        archive = self._archive()
        undo: ArchiveUndo = {}
        archive_error: str | None = None
        cap = config.archive_max_bytes
        try:
            write_archive(archive, landing.checkpoint, landing.entry, cap, undo)
        except Exception as exc:  # the log keeps every original: the landing goes on
            restore_archive(archive, undo)
            archive_error = f"{type(exc).__name__}: {exc}"
        try:
            s.append(landing.specs(archive_error))
        except BaseException as exc:
            restore_archive(archive, undo)  # the archive matches the log again
            if isinstance(exc, DashrError):
                self._close(job, _Close("failed", _error_text(exc), len(nodes), _tokens(nodes)))
                return
            raise

    def _close(self, job: Job, close: _Close) -> None:
        """Log the job's close (``turn-memory/noop`` or ``turn-memory/failed``)."""
        data: TurnClosedPayload = {"turn": job.turn, "job": job.job, "reason": close.reason}
        if close.nodes is not None:
            data["nodes"] = close.nodes
        if close.tokens is not None:
            data["tokens"] = close.tokens
        if close.kind == "failed":
            self.last_error = close.reason
        with self.session.lock:
            if self._closed:
                return  # the next open runs it again
            try:
                self.session.append_log(TURN_NOOP if close.kind == "no-op" else TURN_FAILED, data)
            except DashrError as exc:
                warnings.warn(
                    f"turn-memory job {job.job}: could not record its close: {exc}",
                    CompactionWarning,
                    stacklevel=2,
                )

    def _wait_for_pass(self, job: Job) -> bool:
        """Wait for the session-level pass in flight; False when the job should stop."""
        deadline = time.monotonic() + PASS_GIVE_UP_SECONDS
        while self._slot.compaction_id is not None:
            if self._closed:
                return False
            if time.monotonic() > deadline:
                self._close(job, _Close("failed", "skipped: a session-level pass never ended"))
                return False
            time.sleep(PASS_POLL_SECONDS)
        return not self._closed


def _tokens(nodes: Sequence[TurnNode]) -> int:
    return sum(n.tokens or 0 for n in nodes)


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, DashrError) else f"{type(exc).__name__}: {text}"


# --------------------------------------------------------------------------- repair on open


def repair_turn_passes(session: Session) -> None:
    """Close the turn-memory landings a crashed process left open (before the protocol's
    own orphan repair, which knows nothing of them).

    A landing all of whose replace events reached the log committed (the crash cut only its
    ``compaction/end``) and is closed as committed; any other is closed with an ``error``
    saying how much landed, which leaves its job pending: it runs again on the surface as it
    is now (every replace keeps tool pairs whole, so any prefix of a batch is a valid surface).
    """
    open_passes = [start for start, end in turn_passes(session.events) if end is None]
    for start in open_passes:
        cid = str(start.data["compactionId"])
        planned = start.data.get("replaces")
        landed = sum(
            1
            for e in session.events[start.seq + 1 :]
            if e.is_surface
            and e.message.source_kind == TURN_SOURCE
            and e.message.source.get("compactionId") == cid
        )
        data: dict[str, Any] = {
            "compactionId": cid,
            "turn": start.data.get("turn"),
            "job": start.data.get("job"),
        }
        if landed and landed == planned:
            message = "landed but was not closed; closing it"
        else:
            data["error"] = (
                f"interrupted: the process ended after {landed} of {planned} nodes of the "
                "landing; the job runs again on the current surface"
            )
            message = f"was cut short ({landed} of {planned} nodes landed); its job runs again"
        warnings.warn(
            f"session {session.id}: turn-memory landing {cid} (seq {start.seq}) {message}",
            CompactionWarning,
            stacklevel=3,
        )
        session.append_log("compaction/end", data)
