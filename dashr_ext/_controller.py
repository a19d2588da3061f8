"""``Dashr``: the controller tying a session to its compaction engine, archive and recall.

It is the one object harnesses, notebooks and the CLI hold::

    with Dashr.create(config=CompactionConfig(recency_window_tokens=20_000,
                                              retain_tokens=4_000)) as d:
        d.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        messages = d.request_messages()      # compacts first when over the threshold

Threads may share a controller: each method is atomic, holding the session's lock
(``d.session.lock``), except while a compaction pass waits for its summarizer; recording
goes on meanwhile (it follows the checkpoint); a pass whose span changed fails recoverably.

**Which settings apply.** The log records them: assigning ``d.config`` or
``d.recall_config`` (``%config Dashr.…`` does) appends a ``config/change`` event with the
fields that differ from what the log recorded so far. A ``config=`` / ``recall=`` argument
(to :meth:`Dashr.create`, :meth:`Dashr.open` or the constructor) wins for this controller
and is not recorded; without one, the settings the log records apply, the defaults for
what it never recorded. So ``Dashr.open(path)`` and ``%dashr attach PATH`` continue with the
settings the session had; ``Dashr.open(path, config=…)`` overrides them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._checkpoints import Checkpoint
from ._compaction import (
    CompactionEngine,
    CompactionResult,
    ExtraEnvelope,
    PassSlot,
    Pointers,
    PruneResult,
    make_engine,
)
from ._compaction.commit import close_orphan_passes, rebuild_archive
from ._config import CompactionConfig, RecallConfig, logged_settings, settings_change
from ._events import Event, now_ms
from ._meter import TokenMeter
from ._payloads import CONFIG_CHANGE, PIN_ADD, PIN_REMOVE, PinAddPayload, UsagePayload
from ._pins import Pin, PinFold, fit_problem, pin_text
from ._recall import Recall, RecallResult
from ._recall import tool_schemas as recall_tool_schemas
from ._recall.render import counted
from ._redaction import scrub_keys
from ._session import Session
from ._summarizers.factory import make_summarizer
from ._turnmemory import jobs as turn_jobs
from ._turnmemory.backfill import backfill_jobs
from ._turnmemory.landing import turn_archive_entries
from ._turnmemory.records import TurnRecord, turn_records
from .errors import ConfigError, PinError, TurnMemoryError

if TYPE_CHECKING:
    from ._meter import Measurement
    from ._store import Durability
    from ._summarizers.base import Summarizer

__all__ = ["Dashr"]


class _ArchiveView(MutableMapping[str, Any]):
    """The engine's handle on its controller's archive, which it builds on first use."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Dashr) -> None:
        self._owner = owner

    def __getitem__(self, key: str) -> Any:
        return self._owner.archive[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._owner.archive[key] = value

    def __delitem__(self, key: str) -> None:
        del self._owner.archive[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner.archive)

    def __len__(self) -> int:
        return len(self._owner.archive)


class Dashr:
    """A session with compaction, archive and recall. Create with :meth:`create` or :meth:`open`."""

    def __init__(
        self,
        session: Session,
        *,
        config: CompactionConfig | None = None,
        recall: RecallConfig | None = None,
        summarizer: str | Summarizer = "extractive",
        meter: TokenMeter | None = None,
        archive: MutableMapping[str, Any] | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if config is not None and not isinstance(config, CompactionConfig):
            raise ConfigError("config", "a CompactionConfig", config)
        if recall is not None and not isinstance(recall, RecallConfig):
            raise ConfigError("recall", "a RecallConfig", recall)
        self.session = session
        if config is None or recall is None:  # the log's settings (see the module docstring)
            logged = logged_settings(session.events)
            config = logged[0] if config is None else config
            recall = logged[1] if recall is None else recall
        self._config = config
        self._recall_config = recall
        self.meter = meter or TokenMeter()
        self._summarizer = make_summarizer(summarizer)
        self._archive: MutableMapping[str, Any] = {} if archive is None else archive
        self._archive_cap = self._config.archive_max_bytes
        self._archive_built = False  # built from the log on first use (see ``archive``)
        self._clock = clock
        # Shared by every engine this controller builds (settings changes rebuild the engine).
        self._pass_slot = PassSlot()
        self._pointers = Pointers(session)
        self.engine: CompactionEngine = self._make_engine()
        self.recall = Recall(session, self._recall_config)
        self.extra_tools: list[dict[str, Any]] = []
        """Tool schemas the harness sends beyond the session header's (e.g. ``run_cell``);
        counted in every measurement. The recall tools are added by :meth:`request_tools`."""
        self._tools_token_cache: dict[str, int] = {}
        self._request_at_seq: int | None = None
        self._pin_fold = PinFold()
        self.turn_compressor: turn_jobs.Compressor | None = None
        """Turn memory's compressor (nodes → the editor after its replaces, or None); None
        means the ``extractive`` one; ``make_turn_compressor("llm", …)`` gives model workers."""
        self._turn_jobs = turn_jobs.TurnJobs(
            session,
            config=lambda: self._config,
            meter=self.meter,
            archive=lambda: self.archive,
            slot=self._pass_slot,
            compressor=lambda: self.turn_compressor,
            clock=clock,
            tools=self.request_tools,
        )

    def _make_engine(self) -> CompactionEngine:
        return make_engine(
            self._config.engine,
            self.session,
            self._config,
            self.meter,
            self.summarizer,
            _ArchiveView(self),
            pointers=self._pointers if self._recall_config.pointer == "inject" else False,
            slot=self._pass_slot,
            clock=self._clock,
        )

    @property
    def archive(self) -> MutableMapping[str, Any]:
        """The compaction archive (the kernel's ``dashr_compaction_archive``), one entry per
        committed checkpoint and pruned original.

        Built from the log on first access, not on open: a read-only open for search, read or
        outline never pays for it. The engine writes through the same mapping (it builds it
        first), so the archive equals the one rebuilt from the log at every instant.
        """
        if not self._archive_built:
            with self.session.lock:
                if not self._archive_built:
                    s = self.session
                    turns = turn_archive_entries(s.events, s.id)
                    rebuild_archive(s, self._archive_cap, self._archive, turns)
                    self._archive_built = True
        return self._archive

    def request_tools(self) -> list[dict[str, Any]]:
        """The ``tools`` of the next request: the header's, ``extra_tools``, then recall's."""
        return [*(self.session.tools or []), *self.extra_tools, *self.tool_schemas()]

    def extra_envelope(self) -> tuple[int, int]:
        """Envelope tokens beyond the session header: ``extra_tools``, and the recall tools.

        The recall tools' tokens are given whether or not they are offered yet (they are from
        the first checkpoint on), so a plot can add them where they start.
        """
        with self.session.lock:
            return (
                self._tools_tokens(self.extra_tools),
                self._tools_tokens(recall_tool_schemas(self._recall_config)),
            )

    def _extra(self) -> ExtraEnvelope:
        """The envelope beyond the session header, as data for the engine's measurements."""
        return ExtraEnvelope(*self.extra_envelope())

    def _tools_tokens(self, tools: Sequence[Mapping[str, Any]]) -> int:
        if not tools:
            return 0
        text = json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
        cached = self._tools_token_cache.get(text)
        if cached is None:
            if len(self._tools_token_cache) > 8:
                self._tools_token_cache.clear()
            cached = self._tools_token_cache[text] = self.meter.count_text(text)
        return cached

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(
        cls,
        path: str | Path | None = None,
        config: CompactionConfig | None = None,
        recall: RecallConfig | None = None,
        summarizer: str | Summarizer = "extractive",
        system_prompt: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        session_id: str | None = None,
        in_memory: bool = False,
        lazy: bool = False,
        durability: Durability = "fsync",
        meter: TokenMeter | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> Dashr:
        """Start a new session (``$DASHR_HOME/sessions/<id>.jsonl`` unless ``path`` is given).

        ``lazy=True`` writes no file until something is recorded (settings alone are not).
        """
        session = Session.create(
            path,
            session_id=session_id,
            system_prompt=system_prompt,
            tools=tools,
            durability=durability,
            in_memory=in_memory,
            lazy=lazy,
            clock=clock,
        )
        try:
            return cls._around(session, config, recall, summarizer, meter, clock)
        except BaseException:
            if session.path is not None and len(session) == 1:
                session.path.unlink(missing_ok=True)  # only our header: nothing to keep
            raise

    @classmethod
    def open(
        cls,
        path: str | Path,
        config: CompactionConfig | None = None,
        recall: RecallConfig | None = None,
        read_only: bool = False,
        *,
        summarizer: str | Summarizer = "extractive",
        durability: Durability = "fsync",
        meter: TokenMeter | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> Dashr:
        """Re-attach to a session file; the archive is rebuilt from the log on first use.

        Without ``config`` / ``recall``, the settings the log records apply (see the module
        docstring for which settings win).

        A writer closes passes a crashed process left open (an orphan ``compaction/start``)
        with a ``compaction/end`` carrying an ``error``, so they never block later passes,
        and answers tool calls the last writer left waiting (a crash mid-call, an imported
        session ending in a call) with a synthetic result, so compaction can cut past them;
        a real result recorded later takes the synthetic one's place (SPEC §6.5).
        """
        session = Session.open(path, read_only=read_only, durability=durability, clock=clock)
        try:
            if not read_only:
                turn_jobs.repair_turn_passes(session)
                close_orphan_passes(session)
                session.close_dangling_calls("reopened")
        except BaseException:
            session.close()
            raise
        d = cls._around(session, config, recall, summarizer, meter, clock)
        d._turn_jobs.recover()  # turn memory's pending jobs, oldest first (SPEC §6.4)
        return d

    @classmethod
    def _around(
        cls,
        session: Session,
        config: CompactionConfig | None,
        recall: RecallConfig | None,
        summarizer: str | Summarizer,
        meter: TokenMeter | None,
        clock: Callable[[], int],
    ) -> Dashr:
        """A controller around an open session; the session is closed if that fails."""
        try:
            return cls(
                session,
                config=config,
                recall=recall,
                summarizer=summarizer,
                meter=meter,
                clock=clock,
            )
        except BaseException:
            session.close()
            raise

    def close(self) -> None:
        """Release the writer lock and the summarizer's connections.

        A turn-memory job in flight gets a bounded wait; the jobs after it stay pending (the
        next writable open runs them).
        """
        self._turn_jobs.close()
        self.session.close()
        close = getattr(self.summarizer, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> Dashr:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.session.path or "in memory"
        events, checkpoints = len(self.session), len(self.checkpoints())
        return (
            f"<Dashr session {self.session.id} ({where}): {counted(events, 'event')}, "
            f"{counted(checkpoints, 'checkpoint')}>"
        )

    # ------------------------------------------------------------------ configuration

    @property
    def config(self) -> CompactionConfig:
        return self._config

    @config.setter
    def config(self, value: CompactionConfig) -> None:
        """Change the settings; the change is recorded in the log (a ``config/change``).

        Settings whose checkpoint budget leaves the current pins no room are refused with
        :class:`~dashr_ext.errors.PinError` (naming both sizes), the log unchanged.
        """
        if not isinstance(value, CompactionConfig):
            raise ConfigError("config", "a CompactionConfig", value)
        with self.session.lock:
            pins = self.pins()
            problem = (
                None
                if not pins
                else fit_problem(
                    pins,
                    value.summary_budget,
                    self.meter.count_text,
                    max_summary_tokens=value.max_summary_tokens,
                )
            )
            if problem is not None:  # every later pass would decline
                raise PinError(f"these settings leave the pins no room: {problem}")
            self._turn_jobs.notice()  # turns ended so far count under the old settings
            self._record_settings(value, self._recall_config)
            self._config = value
            self.engine = self._make_engine()

    @property
    def recall_config(self) -> RecallConfig:
        return self._recall_config

    @recall_config.setter
    def recall_config(self, value: RecallConfig) -> None:
        if not isinstance(value, RecallConfig):
            raise ConfigError("recall", "a RecallConfig", value)
        with self.session.lock:
            self._record_settings(self._config, value)
            self._recall_config = value
            self.recall.config = value
            self.engine = self._make_engine()  # the pointer setting belongs to the pass protocol

    def _record_settings(self, config: CompactionConfig, recall: RecallConfig) -> None:
        """Append the ``config/change`` taking the log's settings to these (a writer only)."""
        if self.session.read_only:
            return
        change = settings_change(logged_settings(self.session.events), (config, recall))
        if change is not None:
            self.session.append_log(CONFIG_CHANGE, change)

    @property
    def summarizer(self) -> Summarizer:
        return self._summarizer

    @summarizer.setter
    def summarizer(self, value: str | Summarizer) -> None:
        """Swap the summarizer (a name or an object); later passes use it."""
        summarizer = make_summarizer(value)
        with self.session.lock:
            self._summarizer = summarizer
            self.engine = self._make_engine()

    # ------------------------------------------------------------------ recording

    def record_openai(
        self, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> list[Event]:
        """Append OpenAI chat message(s); returns the new events (markers included)."""
        events = self.session.record_openai(message)
        self._turn_jobs.notice()
        return events

    def end_turn(self, reason: str = "completed") -> Event:
        """Mark the end of the open turn (``session.end_turn``); with turn memory on, its job
        is recorded and queued at once."""
        event = self.session.end_turn(reason)
        self._turn_jobs.notice()
        return event

    def report_usage(self, prompt_tokens: int, completion_tokens: int | None = None) -> Event:
        """Record the provider's usage of the last request; the meter anchors on it."""
        for name, value, optional in (
            ("prompt_tokens", prompt_tokens, False),
            ("completion_tokens", completion_tokens, True),
        ):
            if (value is None and not optional) or (
                value is not None
                and (not isinstance(value, int) or isinstance(value, bool) or value < 0)
            ):
                raise ConfigError(name, "an integer >= 0" + (" or None" if optional else ""), value)
        # The usage describes the last request: anchor on its final node, not on whatever was
        # recorded since (the reply itself is not part of the prompt).
        with self.session.lock:
            at_seq = self._request_at_seq
            if at_seq is None or at_seq >= len(self.session):
                surface = self.session.surface
                at_seq = surface[-1] if surface else 0
            data: UsagePayload = {
                "promptTokens": prompt_tokens,
                "completionTokens": completion_tokens,
                "atSeq": at_seq,
            }
            return self.session.append_log("usage/report", data)

    # ------------------------------------------------------------------ pins

    def pin(self, text: str) -> Pin:
        """Pin a statement: every later checkpoint carries it verbatim, first, in its budget.

        Recorded as a log-only ``pin/add`` (the pin survives a restart), after the text is
        cleaned as recorded text is: stripped, valid UTF-8, a configured API key stored as
        ``[redacted]``. Raises :class:`~dashr_ext.errors.PinError` for an empty text or when
        the pins with this one would not fit the checkpoint budget (``pins_tokens <=
        pin_room(config.summary_budget)``; the message names both sizes), and
        :class:`~dashr_ext.errors.ReadOnlyError` on a read-only session; the log is then
        unchanged.
        """
        cleaned = scrub_keys(pin_text(text))
        with self.session.lock:
            seq = len(self.session)
            new = Pin(f"pin{seq}", cleaned, seq)
            config = self._config
            problem = fit_problem(
                (*self.pins(), new),
                config.summary_budget,
                self.meter.count_text,
                max_summary_tokens=config.max_summary_tokens,
            )
            if problem is not None:
                raise PinError(problem)
            data: PinAddPayload = {"pin": new.id, "text": new.text}
            event = self.session.append_log(PIN_ADD, data)
            return Pin(event.data["pin"], event.data["text"], event.seq)

    def unpin(self, pin_id: str) -> Pin:
        """Unpin ``pin_id`` (a ``pin/remove``); returns the pin. Later checkpoints leave it out.

        An id that names no current pin raises :class:`~dashr_ext.errors.PinError` listing
        the current ones.
        """
        with self.session.lock:
            current = self.pins()
            found = next((p for p in current if p.id == pin_id), None)
            if found is None:
                ids = ", ".join(p.id for p in current) or "none"
                raise PinError(f"no current pin {pin_id!r} to unpin; current pins: {ids}")
            self.session.append_log(PIN_REMOVE, {"pin": found.id})
            return found

    def pins(self) -> tuple[Pin, ...]:
        """The current pins, oldest first (what the next checkpoint carries)."""
        with self.session.lock:
            return self._pin_fold.update(self.session.events)

    # ------------------------------------------------------------------ compaction

    def measure(self) -> Measurement:
        """Tokens of the next request: envelope plus every surface node."""
        with self.session.lock:
            return self.engine.measure(self._extra())

    def request_messages(self) -> list[dict[str, Any]]:
        """Run the pressure check (may compact), then derive the next request's messages.

        A new list each call, at O(new nodes) cost: each node's message is rendered once and
        the dicts are shared between calls, so copy one before changing it (``dict(m)``,
        ``copy.deepcopy(m)``); changing it in place would change later requests too. On
        CPython the list is not tracked by the cyclic GC (a young collection need not walk
        it): it is freed when its last reference goes, so do not put it inside itself.
        """
        self._turn_jobs.before_pass(self._over_trigger)  # a pass waits for a turn landing
        self.engine.before_request(self._extra())  # takes the lock itself, never to summarize
        with self.session.lock:
            surface = self.session.surface
            self._request_at_seq = surface[-1] if surface else None
            return self.session.messages()

    def compact(
        self,
        trigger: str = "manual",
        *,
        start_seq: int | None = None,
        end_seq: int | None = None,
    ) -> CompactionResult | None:
        """Compact now. None when nothing is compactable; a failed pass raises CompactionError."""
        self._turn_jobs.before_pass()
        return self.engine.compact(
            trigger, start_seq=start_seq, end_seq=end_seq, extra=self._extra()
        )

    def handle_overflow(self) -> bool:
        """After a context-length error: forced reduction; True means retry the request once.

        Oversize outputs are pruned first; when that alone makes the request fit, no
        summary pass runs.
        """
        self._turn_jobs.before_pass()
        return self.engine.handle_overflow(self._extra())

    def _over_trigger(self) -> bool:
        return self._config.auto and self._config.should_compact(self.measure().total)

    # ------------------------------------------------------------------ turn memory

    def turns(self) -> tuple[TurnRecord, ...]:
        """Every completed turn turn memory covered, oldest first: its status (``pending``,
        ``landed``, ``no-op``, ``failed``), the reason, nodes and tokens before and after, and
        the landing's archive key ``t<seq>`` (SPEC §6.4)."""
        with self.session.lock:
            self._turn_jobs.notice()
            return turn_records(self.session.events)

    def wait_for_turns(self, timeout: float | None = None) -> bool:
        """Wait until no turn-memory job is queued or running: True, or False when ``timeout``
        seconds passed first."""
        return self._turn_jobs.wait(timeout)

    def queue_turns(self) -> tuple[int, ...]:
        """Queue every pending turn-memory job, after giving each completed turn without a job
        one: turns completed while turn memory was off included, which an open never does (the
        explicit offline request of ``dashr compact FILE --turns``). The turns given a job."""
        if not self._config.turn_memory:
            raise TurnMemoryError("turn memory is off: set turn_memory=True to queue turns")
        self._turn_jobs.notice()
        added = backfill_jobs(self.session)
        self._turn_jobs.recover()
        return added

    def prune(
        self, *, start_seq: int | None = None, end_seq: int | None = None
    ) -> PruneResult | None:
        """Prune oversize outputs now, no model call (SPEC §6.5); None when nothing qualifies.

        Every tool output and assistant text above ``prune_tool_output_tokens`` outside the
        retained tail, and any message above ``oversize_ratio × trigger``, keeps a head and
        tail excerpt plus a marker naming the original (``history_read(seq=N)``,
        ``dashr_compaction_archive["pN"]``). An explicit range must be tool-pairing balanced
        and leave the executing step alone.
        """
        return self.engine.prune(start_seq=start_seq, end_seq=end_seq, extra=self._extra())

    @property
    def last_prune(self) -> PruneResult | None:
        """The prune pass the latest request check, ``compact()``, ``handle_overflow()`` or
        ``prune()`` ran, if any."""
        return self.engine.last_prune

    def checkpoints(self) -> list[Checkpoint]:
        """Every committed checkpoint, oldest first."""
        with self.session.lock:
            return self.recall.checkpoints()

    # ------------------------------------------------------------------ recall

    def history_outline(self) -> RecallResult:
        """Event count, every checkpoint, then the turns (SPEC 8)."""
        with self.session.lock:
            return self.recall.outline()

    def history_read(
        self,
        checkpoint: str | None = None,
        seq: int | None = None,
        cursor: str | None = None,
        turn: int | None = None,
    ) -> RecallResult:
        """A page of a checkpoint's originals, of the history forward from ``seq``, or of turn
        ``turn``'s original events (as recorded, whatever turn memory made of it since)."""
        with self.session.lock:
            return self.recall.read(checkpoint=checkpoint, seq=seq, cursor=cursor, turn=turn)

    def history_search(
        self,
        query: str,
        checkpoint: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecallResult:
        """Case-insensitive literal search over shadowed and visible history, a page at a
        time: a page that stops short names the ``cursor`` of the next (``h17``)."""
        with self.session.lock:
            return self.recall.search(query, checkpoint=checkpoint, limit=limit, cursor=cursor)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries for the recall tools; [] until something is recallable
        (a checkpoint, a pruned output or a committed turn landing)."""
        with self.session.lock:
            return self.recall.tool_schemas()

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run a model's call of a recall tool; returns the tool's text."""
        with self.session.lock:
            return self.recall.call_tool(name, arguments)

    # ------------------------------------------------------------------ plotting

    def plot_pressure(self, ax: Any = None) -> Any:
        """Plot request tokens over the log with the trigger, retain budget and compactions.

        Needs matplotlib (``pip install 'dashr_ext[plot]'``); returns the matplotlib Axes.
        """
        from ._plot import plot_pressure

        with self.session.lock:
            return plot_pressure(self, ax=ax)
