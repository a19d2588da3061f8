"""Progress of slow work: compaction passes and endpoint retries, shown once they take a while.

A :class:`Progress` is fed the engine's phases (``engine.progress``: pruning, summarizing,
committing, done) and the clients' failed attempts (``ChatClient.on_retry``), usually through
:meth:`Progress.watch`. Work that ends within ``delay_s`` (one second) shows nothing; longer
work gets a view that its sink shows and then keeps current: a live display in a notebook
(:mod:`dashr_ext._magics.progress`), one line per change on a terminal (:class:`LineSink`)::

    dashr: summarizing 1 region (1.0 s)
    dashr: llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded); retrying in 0.6 s
    dashr: committing compaction pass p57 (8.1 s)
    dashr: compacted c58: ~12000 -> ~3000 tokens (8.2 s)

Timers run on daemon threads in a copy of the starting thread's context (a kernel routes
their display messages to the running cell); tests pass ``schedule`` and ``clock``.
"""

from __future__ import annotations

import contextlib
import contextvars
import html
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TextIO

from ._plaintext import ShownAsText

if TYPE_CHECKING:
    from ._client import ChatClient, RetryNotice
    from ._controller import Dashr
    from ._events import Event
    from ._session import Session

__all__ = ["DEFAULT_DELAY_S", "LineSink", "Progress", "ProgressView", "Sink", "thread_timer"]

DEFAULT_DELAY_S = 1.0
"""Work that ends sooner shows nothing."""
TICK_S = 1.0
"""How often a visible display's elapsed time is brought up to date."""

State = Literal["running", "done", "failed"]
Schedule = Callable[[float, Callable[[], None]], Callable[[], None]]
"""``schedule(seconds, callback)`` runs ``callback`` later; returns a function that cancels it."""


def thread_timer(delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` after ``delay_s`` on a daemon thread, in a copy of this context."""
    timer = threading.Timer(delay_s, contextvars.copy_context().run, args=(callback,))
    timer.daemon = True
    timer.start()
    return timer.cancel


@dataclass(frozen=True, repr=False)
class ProgressView(ShownAsText):
    """What a display shows of one piece of work: its status, how long, the retries so far."""

    status: str
    """E.g. ``summarizing 1 region``, ``compacted c58: ~12000 -> ~3000 tokens``."""
    state: State
    elapsed_s: float
    retries: tuple[str, ...] = ()
    """One line per failed attempt (:attr:`RetryNotice.text`), oldest first."""

    @property
    def headline(self) -> str:
        """E.g. ``dashr: summarizing 1 region · 3 s`` (whole seconds while it runs, tenths
        once it ended)."""
        seconds = int(self.elapsed_s) if self.state == "running" else f"{self.elapsed_s:.1f}"
        return f"dashr: {self.status} · {seconds} s"

    @property
    def text(self) -> str:
        return "\n".join([self.headline, *(f"  {line}" for line in self.retries)])

    def _repr_html_(self) -> str:
        esc = html.escape
        mark = {"running": "&#9203;", "done": "&#10003;", "failed": "&#10007;"}[self.state]
        color = {"running": "#555", "done": "#2a7a2a", "failed": "#b22222"}[self.state]
        out = [
            f'<div class="dashr-progress dashr-progress-{self.state}" '
            f'style="font-family:monospace;color:{color}">{mark} {esc(self.headline)}'
        ]
        if self.retries:
            out.append('<ul style="margin:0.2em 0 0 1.5em;padding:0;color:#555">')
            out.extend(f"<li>{esc(line)}</li>" for line in self.retries)
            out.append("</ul>")
        out.append("</div>")
        return "".join(out)


class Sink(Protocol):
    """Where one piece of work is shown; called with its latest view (never for fast work)."""

    def show(self, view: ProgressView) -> None: ...


class LineSink:
    """A terminal's display: one line per status change and per retry, none for the clock."""

    def __init__(self, stream: TextIO, prefix: str = "dashr") -> None:
        self.stream = stream
        self.prefix = prefix
        self._status: str | None = None
        self._retries = 0

    def show(self, view: ProgressView) -> None:
        lines = []
        if view.status != self._status:
            self._status = view.status
            lines.append(f"{self.prefix}: {view.status} ({view.elapsed_s:.1f} s)")
        lines.extend(f"{self.prefix}: {line}" for line in view.retries[self._retries :])
        self._retries = len(view.retries)
        for line in lines:
            print(line, file=self.stream, flush=True)


@dataclass(eq=False)
class _Work:
    """One compaction pass, or one request being retried."""

    kind: Literal["compaction", "request"]
    label: str
    started: float
    status: str
    phase: str = ""
    mark: int = 0
    """Log length at the latest phase or first retry: what the log shows from here on
    belongs to this work (a failed ``compaction/end``, the answered request's reply)."""
    state: State = "running"
    retries: list[str] = field(default_factory=list)
    sink: Sink | None = None
    cancel: Callable[[], None] | None = None
    ended_at: float | None = None


class Progress:
    """Compaction passes and retries in one scope (a cell, ``%compact``, ``dashr compact``).

    ``sink`` makes the display of one piece of work (called when it has lasted ``delay_s``,
    default :data:`DEFAULT_DELAY_S`; ``delay_s=0`` shows all work at once). A new pass, or
    a retry while no work runs, starts new work; :meth:`end` closes the current one (the
    caller's step or call is over).
    """

    def __init__(
        self,
        sink: Callable[[], Sink],
        *,
        delay_s: float | None = None,
        tick_s: float = TICK_S,
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule = thread_timer,
    ) -> None:
        self._make_sink = sink
        self.delay_s = DEFAULT_DELAY_S if delay_s is None else delay_s
        self.tick_s = tick_s
        self._clock = clock
        self._schedule = schedule
        self._lock = threading.RLock()
        self._work: _Work | None = None
        self.session: Session | None = None
        """The log a pass's failure is read from (``compaction/end`` with ``error``)."""

    # ------------------------------------------------------------------ feeding

    def phase(self, phase: str, detail: str) -> None:
        """``engine.progress``: a pass reached ``phase`` (pruning, summarizing, committing,
        done)."""
        with self._lock:
            work = self._work
            starts = phase == "pruning" or (
                phase == "summarizing" and (work is None or work.phase != "pruning")
            )
            if work is None or work.state != "running" or work.kind != "compaction" or starts:
                work = self._start("compaction", "compaction")
            work.phase = phase
            work.mark = len(self.session) if self.session is not None else 0
            if phase == "done":
                self._close(work, "done", f"compacted {detail}")
                return
            work.status = f"{phase} {detail}"
            self._show(work)

    def retry(self, notice: RetryNotice) -> None:
        """``ChatClient.on_retry``: an attempt failed; joins the running pass, if any."""
        with self._lock:
            work = self._work
            if work is None or work.state != "running":
                work = self._start("request", notice.label)
                work.status = f"retrying the {notice.label} request"
                work.mark = len(self.session) if self.session is not None else 0
            work.retries.append(notice.text)
            if notice.gave_up and work.kind == "request":
                self._close(
                    work,
                    "failed",
                    f"{notice.label} request failed after {notice.attempts} attempts",
                )
                return
            self._show(work)

    def end(self, error: str | None = None) -> None:
        """The current work is over: failed with ``error``, else as the log and phases say."""
        with self._lock:
            work = self._work
            if work is None or work.state != "running":
                return
            failure = error or self._logged_failure(work)
            if work.kind == "request":
                n = len(work.retries)
                label = f"{work.label} request"
                if failure is not None:
                    self._close(work, "failed", f"{label} failed: {failure}")
                else:
                    retries = "1 retry" if n == 1 else f"{n} retries"
                    self._close(work, "done", f"{label} went through after {retries}")
            elif failure is not None:
                self._close(work, "failed", f"compaction failed: {failure}")
            elif work.phase == "pruning":
                self._close(work, "done", work.status.replace("pruning", "pruned", 1))
            else:
                self._close(work, "done", f"{work.status} ended")

    @contextlib.contextmanager
    def watch(self, controller: Dashr, *clients: ChatClient) -> Iterator[Progress]:
        """Feed this progress from ``controller``'s passes, its summarizer's retries and
        ``clients``' retries while the block runs; then end the current work (failed when
        the block raises). Callbacks already set are kept and still called; nesting is fine.
        """
        targets: list[tuple[Any, str, Callable[..., None]]] = [
            (controller.engine, "progress", self.phase)
        ]
        summarizing = getattr(controller.summarizer, "client", None)  # the llm summarizer's
        for client in (summarizing, *clients):
            if client is not None and hasattr(client, "on_retry"):
                targets.append((client, "on_retry", self.retry))
        installed: list[tuple[Any, str, Callable[..., None], Any]] = []
        for obj, name, callback in targets:
            previous = getattr(obj, name)
            if _feeds(previous, callback):
                continue
            hook = callback if previous is None else _Both(previous, callback)
            setattr(obj, name, hook)
            installed.append((obj, name, hook, previous))
        outer, self.session = self.session, controller.session
        try:
            yield self
        except BaseException as exc:
            self.end(_one_line(exc))
            raise
        else:
            self.end()
        finally:
            self.session = outer
            for obj, name, hook, previous in reversed(installed):
                if getattr(obj, name) is hook:
                    setattr(obj, name, previous)

    # ------------------------------------------------------------------ the work

    def _start(self, kind: Literal["compaction", "request"], label: str) -> _Work:
        if self._work is not None:
            self.end()
        work = _Work(kind, label, self._clock(), "")
        self._work = work
        if self.delay_s <= 0:
            work.sink = self._make_sink()
        else:
            work.cancel = self._schedule(self.delay_s, lambda: self._due(work))
        return work

    def _due(self, work: _Work) -> None:
        """The delay (or a tick) passed: show the work if it still runs, and tick again."""
        with self._lock:
            if work is not self._work or work.state != "running":
                return
            if self._logged_end(work):
                self.end()  # shown only if it already was: work that ended fast shows nothing
                return
            if work.sink is None:
                work.sink = self._make_sink()
            self._show(work)
            work.cancel = self._schedule(self.tick_s, lambda: self._due(work))

    def _show(self, work: _Work) -> None:
        if work.sink is not None:
            with contextlib.suppress(Exception):  # a display never breaks the work
                work.sink.show(self._view(work))

    def _close(self, work: _Work, state: State, status: str) -> None:
        work.state, work.status, work.ended_at = state, status, self._clock()
        if work.cancel is not None:
            work.cancel()
            work.cancel = None
        self._show(work)

    def _view(self, work: _Work) -> ProgressView:
        now = work.ended_at if work.ended_at is not None else self._clock()
        return ProgressView(work.status, work.state, now - work.started, tuple(work.retries))

    def _logged_failure(self, work: _Work) -> str | None:
        """The error of a pass end logged since the work's latest phase, if any."""
        if work.kind != "compaction":
            return None
        for event in self._logged_since(work):
            if event.type == "compaction/end" and "error" in event.data:
                return str(event.data["error"])
        return None

    def _logged_end(self, work: _Work) -> bool:
        """Whether the log shows the work over: a failed pass, or an answered request (its
        reply recorded; the caller may run the tools it asked for long after)."""
        if work.kind == "compaction":
            return self._logged_failure(work) is not None
        return any(event.type == "assistant/message" for event in self._logged_since(work))

    def _logged_since(self, work: _Work) -> Iterator[Event]:
        session = self.session
        if session is None:
            return
        events = session.events
        for seq in range(work.mark, len(events)):
            yield events[seq]


class _Both:
    """Calls a callback that was already set, then ours."""

    def __init__(self, first: Callable[..., None], second: Callable[..., None]) -> None:
        self.first = first
        self.second = second

    def __call__(self, *args: Any) -> None:
        try:
            self.first(*args)
        finally:
            self.second(*args)


def _feeds(hook: object, callback: Callable[..., None]) -> bool:
    """Whether ``hook`` already calls ``callback``."""
    if isinstance(hook, _Both):
        return _feeds(hook.first, callback) or _feeds(hook.second, callback)
    return hook is not None and hook == callback


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
