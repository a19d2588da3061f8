"""The event-sourced session: an append-only log and the pure folds over it.

SPEC §3; :class:`Session` documents its folds and what a reader without its lock may see.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ._events import (
    SETTINGS_TYPES,
    SURFACE_TYPES,
    ContentBlock,
    Event,
    EventSpec,
    Message,
    Replace,
    SurfaceOp,
    block_to_json,
    now_ms,
    text_blocks,
)
from ._filelock import release_in_forked_child, renewed_in_child
from ._formats.openai import envelope_messages, to_event_specs
from ._pairing import SYNTHETIC_SOURCE, CutDepths, ToolPairing, in_place
from ._paths import default_session_path, new_session_id
from ._redaction import configured_keys, scrub_keys
from ._replay import replay
from ._store import Durability, Store
from ._surface import Positions, Renderings, Snapshot
from ._turns import MARKER_TYPES, Turn, TurnFold, Unit, message_shape
from .errors import CorruptLogError, EventError, ReadOnlyError, SurfaceError

__all__ = ["Session"]

FORMAT = "dashr/1"


# --------------------------------------------------------------------------- session


class Session:
    """An append-only conversation log with its surface, tool pairing and turn folds.

    A :class:`Session` owns the log (a list of :class:`~dashr_ext._events.Event`, index == seq)
    and keeps three folds of it up to date as events are appended:

    * the **surface**: the ordered seqs of the conversation nodes the next request is built from;
    * **tool pairing**: which surface node holds each tool call and which holds its result;
    * **turns and steps**: explicit ``turn/*`` / ``step/*`` markers, or inferred from message order
      (:mod:`dashr_ext._turns`).

    Opening a file replays it through the same folds, so the live state and the replayed state
    are equal by construction. Appends are validated before anything is written: a failed append
    leaves the log, the file and every fold exactly as they were. Threads may share a session:
    every append, and every read that spans several folds, holds :attr:`Session.lock`. A read
    without it (``event``, ``len``, ``is_current``, ...) sees the log at least as it was before any
    append in progress, never less; it may see that append's events before they are durable, and
    they go again if it fails (hold the lock to see only what is final). A forked child gets a
    fresh lock: its reads work, its writes get the store's error.

    This module knows nothing of compaction; it only offers the queries a range selector needs
    (:meth:`Session.balanced_cuts`, :meth:`Session.units`). Nor does it know message formats:
    adapters (:mod:`dashr_ext._formats`) translate messages into :class:`EventSpec` and append them.
    """

    def __init__(
        self,
        events: Sequence[Event] = (),
        *,
        store: Store | None = None,
        read_only: bool = False,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._store = store
        self._read_only = read_only
        self._clock = clock
        self._lock = threading.RLock()
        release_in_forked_child(self)
        self._reset()
        for event in events:
            self._check(event)
            self._apply(event)

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        path: str | Path | None = None,
        *,
        session_id: str | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        durability: Durability = "fsync",
        in_memory: bool = False,
        lazy: bool = False,
        clock: Callable[[], int] = now_ms,
    ) -> Session:
        """Start a new session; ``path`` defaults to ``$DASHR_HOME/sessions/<id>.jsonl``.

        ``in_memory=True`` keeps the log in memory only (tests, scratch sessions).
        ``lazy=True`` creates the file with the first event beyond the header and settings
        (:data:`SETTINGS_TYPES`): a session nobody records in leaves no file.
        """
        sid = session_id or new_session_id()
        if tools is not None and (
            isinstance(tools, str | bytes | Mapping)
            or not all(isinstance(t, Mapping) for t in tools)
        ):
            raise EventError("tools: expected a list of OpenAI tool schemas (objects) or None")
        header = EventSpec(
            "session/header",
            {
                "sessionId": sid,
                "createdAt": clock(),
                "systemPrompt": system_prompt,
                "tools": [dict(t) for t in tools] if tools is not None else None,
                "format": FORMAT,
            },
        )
        # Validate before any file exists: a bad argument must leave nothing behind.
        Event.from_json(
            {"seq": 0, "type": header.type, "time": header.data["createdAt"], "data": header.data}
        )
        store = None
        if not in_memory:
            target = Path(path) if path is not None else default_session_path(sid)
            store = Store.create(target, durability=durability, deferred=lazy)
        session = cls(store=store, clock=clock)
        try:
            session.append([header])
        except BaseException:
            if store is not None:
                store.close()
                store.path.unlink(missing_ok=True)
            raise
        return session

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        durability: Durability = "fsync",
        clock: Callable[[], int] = now_ms,
    ) -> Session:
        """Replay a session file to exactly its live state.

        ``read_only=True`` takes no writer lock, so a file another process is writing can be
        inspected; appends then raise :class:`~dashr_ext.errors.ReadOnlyError`.
        """
        store = Store.open(Path(path), read_only=read_only, durability=durability)
        try:
            session = cls(store=None, read_only=read_only, clock=clock)
            replay(store, session._check, session._apply)
            if not session._events:
                raise CorruptLogError(str(store.path), 1, "empty session file (no session/header)")
        except BaseException:
            store.close()
            raise
        session._store = store
        return session

    def close(self) -> None:
        """Release the writer lock (idempotent); an append in progress finishes first."""
        with self._lock:
            if self._store is not None:
                self._store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_inherited(self) -> None:  # in a forked child (see _filelock)
        self._lock = renewed_in_child(self._lock)

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        self._events: list[Event] = []
        self._surface: list[int] = []
        self._surface_shared = False  # a Snapshot may show it: copy before a replace
        self._rendered = Renderings()
        self._current: set[int] = set()
        self._pairing = ToolPairing()
        self._cuts = CutDepths()
        self._turns = TurnFold()
        self._system_prompt: str | None = None
        self._system_seq: int | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._session_id = ""
        self._surface_version = 0
        self._balance_cache: tuple[int, list[bool]] | None = None
        self._positions = Positions()

    @property
    def lock(self) -> threading.RLock:
        """Re-entrant; every append holds it. Hold it to read several folds as one state."""
        return self._lock

    @property
    def path(self) -> Path | None:
        return self._store.path if self._store is not None else None

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def id(self) -> str:
        return self._session_id

    @property
    def events(self) -> Sequence[Event]:
        """Every event ever appended; ``events[seq].seq == seq``."""
        return self._events

    def __len__(self) -> int:
        return len(self._events)

    def event(self, seq: int) -> Event:
        """The event at ``seq`` (shadowed events included), in O(1)."""
        if not 0 <= seq < len(self._events):
            last = len(self._events) - 1
            raise IndexError(f"seq {seq} is outside this session's log (seqs 0-{last})")
        return self._events[seq]

    @property
    def surface(self) -> Snapshot[int]:
        """The seqs of the nodes the next request is built from: an O(1) read-only snapshot."""
        with self._lock:
            self._surface_shared = True
            return Snapshot(self._surface, len(self._surface))

    @property
    def surface_version(self) -> int:
        """Increments on every surface change (append or replace)."""
        return self._surface_version

    def is_current(self, seq: int) -> bool:
        return seq in self._current

    def position(self, seq: int) -> int:
        """Surface position of a current node."""
        try:
            return self._positions.of(self._surface, self._surface_version)[seq]
        except KeyError:
            raise SurfaceError(f"seq {seq} is not on the current surface") from None

    @property
    def system_prompt(self) -> str | None:
        return self._system_prompt

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self._tools

    @property
    def system_message(self) -> Event | None:
        """The latest ``system/message`` event (the envelope's system prompt), if any."""
        return self._events[self._system_seq] if self._system_seq is not None else None

    # ------------------------------------------------------------------ tool pairing

    def tool_call_seq(self, tool_call_id: str) -> int | None:
        """Seq of the assistant event that issued ``tool_call_id``."""
        return self._pairing.call_seq.get(tool_call_id)

    def tool_call_name(self, tool_call_id: str) -> str | None:
        return self._pairing.call_name.get(tool_call_id)

    def tool_result_seq(self, tool_call_id: str) -> int | None:
        """Seq of the current result of ``tool_call_id`` (synthetic or real), if any."""
        return self._pairing.result_seq.get(tool_call_id)

    def pending_tool_calls(self) -> list[str]:
        """Ids of current tool calls that have no result yet, in call order."""
        with self._lock:
            return self._pairing.waiting(self._current)

    def interrupted_tool_calls(self) -> list[str]:
        """Ids of calls closed by a synthetic result that a real result may still replace."""
        with self._lock:
            pairing = self._pairing
            return [c for c in pairing.synthetic if pairing.replaceable_result(c, self._current)]

    def balanced_cuts(self) -> list[bool]:
        """``cuts[k]``: cutting the surface before position ``k`` splits no pair; ``len(surface)
        + 1`` of them, every one after a call still waiting is False (:mod:`dashr_ext._pairing`)."""
        with self._lock:
            if self._balance_cache is not None and self._balance_cache[0] == self._surface_version:
                return self._balance_cache[1]
            cuts = [depth == 0 for depth in self._cut_depths()]
            self._balance_cache = (self._surface_version, cuts)
            return cuts

    def _cut_depths(self) -> list[int]:  # kept as the surface changes (see CutDepths)
        return self._cuts.depths(self._pairing, self._surface, self._current, self.position)

    def close_dangling_calls(self, reason: str = "reopened") -> list[Event]:
        """Close every call still waiting for a result with a synthetic one (SPEC §6.5).

        For a writer taking over a log whose last writer stopped mid-call (a crash, a
        final call never answered, an import). A real result recorded later takes the
        synthetic one's place. Returns the new events.
        """
        with self._lock:
            waiting = self.pending_tool_calls()
            if not waiting or self._read_only:
                return []
            return self.append([self._pairing.synthetic_spec(cid, reason) for cid in waiting])

    # ------------------------------------------------------------------ turns and steps

    @property
    def turns(self) -> list[Turn]:
        """Every turn, oldest first (closed turns are built once and reused)."""
        with self._lock:
            return self._turns.turns()

    @property
    def open_turn(self) -> int | None:
        return self._turns.open_turn

    @property
    def open_step(self) -> tuple[int, int] | None:
        """``(turn, step)`` of the step executing right now, if any."""
        return self._turns.open_step

    def executing_seqs(self) -> set[int]:
        """Seqs of the surface events belonging to the step executing right now."""
        with self._lock:
            return self._turns.executing_seqs()

    def units(self) -> list[Unit]:
        """The surface split into indivisible units (whole steps, standalone messages)."""
        with self._lock:
            return self._turns.units(self._surface)

    def begin_turn(self) -> Event:
        """Mark the start of a turn explicitly (recorded messages then get no inferred markers)."""
        with self._lock:
            return self.append(self._turns.begin_turn_markers())[0]

    def end_turn(self, reason: str = "completed") -> Event:
        with self._lock:
            return self.append(self._turns.end_turn_markers(reason))[-1]

    def begin_step(self) -> Event:
        with self._lock:
            return self.append(self._turns.begin_step_markers())[0]

    def end_step(self) -> Event:
        with self._lock:
            return self.append(self._turns.end_step_markers())[0]

    @property
    def infers_markers(self) -> bool:
        """Whether ``append(..., infer_markers=True)`` writes turn/step markers.

        False once the log holds a marker the harness wrote itself (one without
        ``"inferred": true``), so live and replayed sessions agree.
        """
        return not self._turns.has_explicit_markers

    # ------------------------------------------------------------------ appends

    def append_tool_result(
        self,
        tool_call_id: str,
        content: str | Sequence[ContentBlock],
        *,
        tool_name: str | None = None,
        is_error: bool = False,
    ) -> Event:
        """Append the result of a waiting tool call (``tool_name`` defaults to the call's)."""
        with self._lock:
            msg = {
                "role": "tool",
                "source": {"kind": "tool"},
                "content": [block_to_json(b) for b in text_blocks(content)],
                "toolCallId": tool_call_id,
                "toolName": tool_name or self._pairing.call_name.get(tool_call_id, ""),
                "isError": is_error,
            }
            return self.append([EventSpec("tool/result", {"message": msg}, "append")])[0]

    def append_log(self, type: str, data: Mapping[str, Any]) -> Event:
        """Append one log-only event (``compaction/*``, ``usage/report``, ``x-*/…``)."""
        if type in SURFACE_TYPES:
            raise EventError(f"{type} is a surface type; append it with a surfaceOp instead")
        return self.append([EventSpec(type, dict(data))])[0]

    def replace(
        self,
        start_seq: int,
        end_seq: int,
        message: Mapping[str, Any],
        *,
        source_event_seqs: Sequence[int],
        type: str = "user/message",
        extra_log: Sequence[EventSpec] = (),
    ) -> Event:
        """Shadow the surface run ``start_seq..end_seq`` (inclusive) with one new node.

        ``extra_log`` events (log-only) are appended after it in the same durable batch.
        """
        spec = EventSpec(
            type, {"message": dict(message)}, Replace(start_seq, end_seq), tuple(source_event_seqs)
        )
        return self.append([spec, *extra_log])[0]

    def append(self, specs: Sequence[EventSpec], *, infer_markers: bool = False) -> list[Event]:
        """Validate and append a batch atomically: all events become durable, or none do.

        ``infer_markers=True`` is for messages recorded from a harness (SPEC §3.3): each
        appended message is surrounded by the turn/step markers its arrival implies, written
        with ``"inferred": true``, unless the harness marks turns itself
        (:attr:`infers_markers`). The returned events include those markers.
        """
        with self._lock:
            if self._read_only:
                raise ReadOnlyError(
                    f"session {self._session_id or '(unknown)'} was opened read-only; "
                    "open it without read_only=True to write"
                )
            if not specs:
                return []
            if keys := configured_keys():  # no API key is ever recorded (SPEC §12)
                specs = [dataclasses.replace(s, data=scrub_keys(s.data, keys)) for s in specs]
            base = len(self._events)
            durable = False
            try:
                for spec in specs:
                    close, spec = self._pairing.before_append(spec, self._current)
                    for cid in close:  # a newer message: unanswered calls get a synthetic result
                        self._append_one(self._pairing.synthetic_spec(cid, "superseded"))
                    if infer_markers and spec.surface_op == "append" and self.infers_markers:
                        before, after = self._turns.implied_markers(*message_shape(spec))
                        for kind, data in before:
                            self._append_one(EventSpec(kind, {**data, "inferred": True}))
                        self._append_one(spec)
                        for kind, data in after:
                            self._append_one(EventSpec(kind, {**data, "inferred": True}))
                    else:
                        self._append_one(spec)
                new = self._events[base:]
                if self._store is not None:  # settings alone: a lazy session writes no file
                    held = all(e.type in SETTINGS_TYPES for e in new)
                    (self._store.hold if held else self._store.append)([e.to_json() for e in new])
                durable = True
            except BaseException:
                # Once the batch is on disk, memory must keep it too (an interrupt arriving right
                # after the write must not let the next append reuse its seqs).
                if not durable and len(self._events) > base:
                    self._rollback(base)
                raise
            return new

    def _append_one(self, spec: EventSpec) -> None:
        event = self._build(len(self._events), spec)
        self._check(event)
        self._apply(event)

    def _build(self, seq: int, spec: EventSpec) -> Event:
        data = spec.data
        if spec.type in SURFACE_TYPES or spec.type == "system/message":
            message = dict(data.get("message") or {})
            message.setdefault("id", f"m{seq}")
            data = {**data, "message": message}
        return Event.from_json(
            Event(
                seq=seq,
                type=spec.type,
                time=spec.time if spec.time is not None else self._clock(),
                data=data,
                surface_op=spec.surface_op,
                source_event_seqs=spec.source_event_seqs,
            ).to_json()
        )

    def _rollback(self, length: int) -> None:
        """Drop the events from ``length`` on, never showing a lock-free reader fewer: rebuild
        the folds aside, swap them in, then cut the log in place (``events`` is the same list).
        """
        fresh = object.__new__(type(self))
        fresh._reset()
        for event in self._events[:length]:
            fresh._apply(event)
        del fresh._events
        vars(self).update(vars(fresh))
        del self._events[length:]

    # ------------------------------------------------------------------ the fold

    def _check(self, event: Event) -> None:
        """Raise if ``event`` cannot follow the current state; never mutates."""
        n = len(self._events)
        if event.seq != n:
            raise EventError(f"event.seq: expected {n} (seqs are dense), got {event.seq}")
        if (event.type == "session/header") != (n == 0):
            raise EventError(
                "a session has exactly one session/header, at seq 0"
                if n
                else "the first event of a session must be a session/header"
            )
        op = event.surface_op
        if op is None:
            if event.type == "compaction/summary":
                self._check_shadowed_seqs(event)
            return
        message = event.message
        if isinstance(op, Replace):
            self._check_replace(event, op, message)
            return
        if event.type == "tool/result":
            self._pairing.check_result(message, self._current, self.pending_tool_calls)
        if message.tool_calls:
            self._pairing.check_new_calls(message)

    def _check_shadowed_seqs(self, event: Event) -> None:
        """A ``compaction/summary`` names one or more surface events already in the log."""
        if event.type != "compaction/summary":
            return
        seqs = event.data["shadowedSeqs"]
        bad = [q for q in seqs if not (0 <= q < event.seq and self._events[q].surface_op)]
        if bad or not seqs:
            raise EventError(
                f"event {event.seq} (compaction/summary) data.shadowedSeqs: expected one or more "
                f"seqs of surface events below {event.seq}, got {bad[0] if bad else 'none'}"
            )

    def _check_replace(self, event: Event, op: Replace, message: Message) -> None:
        for end in (op.start_seq, op.end_seq):
            if end not in self._current:
                raise SurfaceError(
                    f"replace: seq {end} is not a current surface node "
                    "(both ends of a replace must be on the surface)"
                )
        a, b = self.position(op.start_seq), self.position(op.end_seq)
        if a > b:
            raise SurfaceError(
                f"replace: startSeq {op.start_seq} comes after endSeq {op.end_seq} on the surface"
            )
        shadowed = self._surface[a : b + 1]
        missing = set(shadowed) - set(event.source_event_seqs or ())
        if missing:
            raise SurfaceError(
                "replace: sourceEventSeqs must cover every shadowed node; "
                f"missing {sorted(missing)}"
            )
        if a == b and in_place(self._events[op.start_seq], event.type, message):
            return  # one node for one: every call keeps its result
        depths = self._cut_depths()
        if depths[a] or depths[b + 1]:
            raise SurfaceError(
                f"replace of seqs {op.start_seq}..{op.end_seq} would split a tool call "
                "from its result; choose tool-pairing balanced ends"
            )
        if event.type == "tool/result" or message.tool_calls:
            raise SurfaceError(
                "a replacement node may be a tool result or carry tool calls only in place of "
                "one node with the same pairing (the same call's result, the same calls)"
            )

    def _apply(self, event: Event) -> None:
        """Fold one checked event into the state."""
        events = self._events
        events.append(event)
        op = event.surface_op
        if op is not None:
            self._cuts.fold(self._pairing, event, events, self._current, self.position)
            self._apply_surface(event, op)
            return
        kind = event.type
        data = event.data
        if kind in MARKER_TYPES:
            self._turns.apply_marker(event.seq, kind, data)
        elif kind == "session/header":
            self._session_id = str(data["sessionId"])
            self._system_prompt = data["systemPrompt"]
            self._tools = data["tools"]
        elif kind == "system/message":
            self._system_prompt = event.message.text
            self._system_seq = event.seq

    def _apply_surface(self, event: Event, op: SurfaceOp) -> None:
        seq = event.seq
        message = event.message
        if isinstance(op, Replace):
            a, b = self.position(op.start_seq), self.position(op.end_seq)
            if a == b and in_place(self._events[op.start_seq], event.type, message):
                self._turns.replace_node(op.start_seq, seq)
            for s in self._surface[a : b + 1]:
                self._current.discard(s)
            if self._surface_shared:  # what a snapshot shows stays as it was
                self._surface, self._surface_shared = self._surface.copy(), False
            self._surface[a : b + 1] = [seq]
            self._rendered.replace(a, b, event)
            appended = False
        else:
            surface = self._surface
            surface.append(seq)
            self._positions.appended(surface, self._surface_version)
            cid = message.tool_call_id
            call_seq = None
            if cid is not None and message.source_kind == SYNTHETIC_SOURCE:
                call_seq = self._pairing.call_seq.get(cid)
            if call_seq is not None:  # a synthetic result joins the step of its call
                self._turns.apply_closing_result(seq, call_seq, message)
            else:
                self._turns.apply_message(seq, message)
            appended = True
        self._current.add(seq)
        self._pairing.apply(seq, event.type, message, appended=appended)
        self._surface_version += 1

    # ------------------------------------------------------------------ the surface in order

    def surface_events(self) -> Iterator[Event]:
        """The current surface's events, in order, as they are at the call."""
        with self._lock:
            return iter([self._events[seq] for seq in self._surface])

    def messages(self, format: Literal["openai"] = "openai") -> list[dict[str, Any]]:
        """The next request's messages (SPEC §3.2): a new list, out of the cyclic GC; its
        dicts are renderings cached per node, so copy one before changing it."""
        if format != "openai":
            raise ValueError(f"format: expected 'openai', got {format!r}")
        with self._lock:  # renderings are cached per node: a step renders only its own
            return self._rendered.request(envelope_messages(self), self._surface, self._events)

    def record_openai(
        self, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> list[Event]:
        """Append OpenAI chat message(s) as one atomic batch; returns the new events.

        The new events include the turn/step markers inferred around the messages (SPEC §3.3).
        """
        with self._lock:
            return self.append(to_event_specs(self, message), infer_markers=True)
