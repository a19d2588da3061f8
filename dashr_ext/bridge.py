"""The harness bridge, client side: a dashr session living in a Jupyter kernel, driven from outside.

:class:`KernelSession` has the method names and return types of :class:`~dashr_ext.Dashr`
(``record_openai``, ``request_messages``, ``compact``, ``history_read``, …) but every call
is a request over the kernel's ``dashr`` comm (``docs/bridge.md``), so the session, its
archive and ``dashr_compaction_archive`` stay in the kernel where the agent's cells run::

    from dashr_ext.bridge import KernelSession

    with KernelSession.start(session_path="agent.jsonl") as ks:   # a kernel of this Python
        ks.configure(recency_window_tokens=20_000, retain_tokens=4_000)
        ks.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        messages = ks.request_messages()          # the pressure check runs in the kernel
        print(ks.run_cell("print(1 + 1)").text)   # an execute_request, like a notebook cell

or over a kernel the harness already runs: ``KernelSession(manager.client(), manager=manager)``
or ``KernelSession.connect("kernel-1234.json")``. Errors the kernel's operation raised come
back as their own class from :mod:`dashr_ext.errors`; the wire's own failures are
:class:`~dashr_ext.errors.BridgeTimeoutError`, :class:`~dashr_ext.errors.KernelDiedError`,
:class:`~dashr_ext.errors.ProtocolError` and :class:`~dashr_ext.errors.InternalError`.
After a kernel restart the next call re-attaches the same session file by itself
(``%load_ext dashr_ext`` and an attach, run as a cell), re-applies the settings set through
:meth:`configure` and :attr:`extra_tools`, and sends the request again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

from . import errors
from ._bridge.link import CommLost, KernelLink
from ._bridge.wire import (
    compaction_from_json,
    events_from_json,
    measurement_from_json,
    prune_from_json,
)
from ._cells import CellOutput
from ._compaction import CompactionResult, PruneResult
from ._events import Event
from ._jsontext import MAX_JSON_DEPTH, json_depth, lone_surrogate
from ._meter import Measurement
from ._pins import Pin
from ._recall import RecallResult
from .errors import BridgeError, DashrError, InternalError

__all__ = ["CellOutput", "KernelSession"]

DEFAULT_TIMEOUT = 120.0
"""Seconds to wait for one reply (each progress message from a running pass restarts it)."""


class _ThisInterpreter(KernelSpecManager):
    """Kernels of the interpreter running the harness, whatever kernelspecs are installed."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python (dashr_ext.bridge)",
            language="python",
        )


def _remote_error(error: object) -> DashrError:
    """The exception an error reply names, as its own ``dashr_ext.errors`` class."""
    info = error if isinstance(error, dict) else {}
    kind, message = str(info.get("type")), str(info.get("message", ""))
    cls = getattr(errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, DashrError)):
        return InternalError(f"{kind}: {message}")
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)  # its own __init__ wants fields the wire does not carry
    exc.field = info.get("field")  # type: ignore[attr-defined]
    if isinstance(exc, errors.EndpointError):
        exc.status_code, exc.attempts, exc.context_length = None, 1, False
    return exc


class KernelSession:
    """A dashr session in a Jupyter kernel, driven over the ``dashr`` comm.

    ``client`` is a started jupyter_client blocking kernel client; ``manager`` (optional)
    the ``KernelManager`` that runs the kernel, used to tell a dead kernel fast (else the
    heartbeat). The extension is loaded when the kernel has not loaded it
    (``load_extension``); ``session_path`` attaches that session file first. One
    KernelSession per client: it reads the client's IOPub channel. Calls from several
    threads are serialized.
    """

    def __init__(
        self,
        client: BlockingKernelClient,
        *,
        manager: KernelManager | None = None,
        session_path: str | Path | None = None,
        load_extension: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        reattach: bool = True,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.client = client
        self.manager = manager
        self.timeout = timeout
        """Seconds to wait for a reply (a pass's progress messages restart the wait)."""
        self.auto_reattach = reattach
        """Re-attach the session file by itself when the kernel lost the comm (a restart)."""
        self.on_progress = on_progress
        """Called with each ``progress`` object (``phase``, ``detail``) of a running pass."""
        self.session_path: str | None = None if session_path is None else str(session_path)
        """The session file in the kernel (from ``status``); re-attached after a restart."""
        self.last_request: dict[str, Any] = {}
        """The last ``request_messages`` result: ``measurement``, ``compacted``, ``events``."""
        self._owns_kernel = False
        self._lock = threading.RLock()
        self._link = KernelLink(client, self._alive)
        self._ids = (f"{uuid.uuid4().hex[:8]}-{n}" for n in itertools.count(1))
        self._settings: dict[str, Any] = {}
        self._extra_tools: list[dict[str, Any]] | None = None
        self._connect(load_extension)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def start(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        startup_timeout: float = 60.0,
        **options: Any,
    ) -> KernelSession:
        """Start a kernel of this interpreter and attach to it; :meth:`close` shuts it down.

        ``env`` replaces the kernel's environment (default: this process's); ``options``
        are the constructor's.
        """
        manager = KernelManager(kernel_name="dashr", kernel_spec_manager=_ThisInterpreter())
        kwargs: dict[str, Any] = {"env": dict(os.environ if env is None else env)}
        if cwd is not None:
            kwargs["cwd"] = str(cwd)
        manager.start_kernel(**kwargs)
        client = manager.client()
        try:
            client.start_channels()
            client.wait_for_ready(timeout=startup_timeout)
            session = cls(client, manager=manager, **options)
        except BaseException:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            raise
        session._owns_kernel = True
        return session

    @classmethod
    def connect(cls, connection_file: str | Path, **options: Any) -> KernelSession:
        """Attach to a running kernel through its connection file (heartbeat liveness)."""
        client = BlockingKernelClient(connection_file=str(connection_file))
        client.load_connection_file()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=options.get("timeout", DEFAULT_TIMEOUT))
            return cls(client, **options)
        except BaseException:
            client.stop_channels()
            raise

    def close(self) -> None:
        """Close the comm; a kernel :meth:`start` started is shut down too."""
        with self._lock:
            try:
                self._link.close()
            finally:
                if self._owns_kernel and self.manager is not None:
                    self._owns_kernel = False
                    self.client.stop_channels()
                    self.manager.shutdown_kernel(now=True)

    def __enter__(self) -> KernelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<KernelSession {self.session_path or '(no session yet)'}>"

    def _alive(self) -> bool:
        if self.manager is not None:
            return bool(self.manager.is_alive())
        return bool(self.client.is_alive())

    def _setup(self, code: str, what: str) -> None:
        out = self._link.execute(code, self.timeout)
        if out.is_error:
            raise BridgeError(f"{what} failed in the kernel: {out.error or out.text}")

    def _attach_code(self) -> str:
        """``%load_ext dashr_ext``, then ``%dashr attach PATH`` (the file created if missing)."""
        if self.session_path is None:
            return "%load_ext dashr_ext\n"
        # A Python call rather than the magic line: a path is never $- or {}-expanded.
        return (
            "from dashr_ext._magics.bridge import attach_session as _dashr_attach\n"
            f"_dashr_attach(get_ipython(), {self.session_path!r})\n"
            "del _dashr_attach\n"
        )

    def _connect(self, load_extension: bool) -> None:
        with self._lock:
            if self.session_path is not None or load_extension:
                try:
                    self._link.open(self.timeout)
                except CommLost:
                    if not load_extension:
                        raise
                    self._setup(self._attach_code(), "loading dashr_ext")
                    self._link.open(self.timeout)
                else:
                    if self.session_path is not None:
                        self._setup(self._attach_code(), f"attaching {self.session_path}")
            else:
                self._link.open(self.timeout)
            self.session_path = self.status()["path"]

    def reattach(self) -> None:
        """Load the extension, attach :attr:`session_path` and open a new comm (after a
        restart); the settings :meth:`configure` set and :attr:`extra_tools` are re-applied."""
        with self._lock:
            self._link.comm_id = None
            self._setup(self._attach_code(), f"re-attaching {self.session_path}")
            self._link.open(self.timeout)
            if self._settings:
                self._call("configure", {"settings": self._settings}, retry=False)
            if self._extra_tools is not None:
                self._call("extra_tools", {"tools": self._extra_tools}, retry=False)
            self.session_path = self._call("status", {}, retry=False)["path"]

    # ------------------------------------------------------------------ requests

    def request(self, op: str, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send one raw request (any operation of ``docs/bridge.md``); returns its result."""
        return self._call(op, dict(args or {}))

    def _call(self, op: str, args: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        with self._lock:
            try:
                reply = self._link.request(
                    next(self._ids), op, args, self.timeout, self.on_progress
                )
            except CommLost:
                if not (retry and self.auto_reattach):
                    raise
                self.reattach()  # the request was not run: safe to send again
                reply = self._link.request(
                    next(self._ids), op, args, self.timeout, self.on_progress
                )
        if reply.get("ok") is True and isinstance(reply.get("result"), dict):
            result: dict[str, Any] = reply["result"]
            return result
        raise _remote_error(reply.get("error"))

    # ------------------------------------------------------------------ Dashr's methods

    def status(self) -> dict[str, Any]:
        """Session id and file, event and surface counts, tokens against the trigger, …"""
        return self._call("status", {})

    def record_openai(
        self, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    ) -> list[Event]:
        """Append OpenAI chat message(s); returns the new events (markers included)."""
        messages: Any = dict(message) if isinstance(message, Mapping) else list(message)
        return events_from_json(
            self._call("record", {"messages": messages, "echo": True})["recorded"]
        )

    def request_messages(self) -> list[dict[str, Any]]:
        """Run the pressure check in the kernel (may compact), then the request's messages.

        :attr:`last_request` keeps the rest of the reply: the ``measurement``, the
        checkpoints the check ``compacted`` and its ``compactionErrors``.
        """
        self.last_request = self._call("request_messages", {})
        messages: list[dict[str, Any]] = self.last_request["messages"]
        return messages

    def request_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = self._call("request_tools", {})["tools"]
        return tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The recall tools' schemas; [] until there is a checkpoint."""
        tools: list[dict[str, Any]] = self._call("tool_schemas", {})["tools"]
        return tools

    def measure(self) -> Measurement:
        """Tokens of the next request (``nodes`` is empty over the bridge)."""
        return measurement_from_json(self._call("measure", {}))

    def report_usage(self, prompt_tokens: int, completion_tokens: int | None = None) -> Event:
        args: dict[str, Any] = {"promptTokens": prompt_tokens}
        if completion_tokens is not None:
            args["completionTokens"] = completion_tokens
        return Event.from_json(self._call("report_usage", args)["event"])

    def compact(
        self,
        trigger: str = "manual",
        *,
        start_seq: int | None = None,
        end_seq: int | None = None,
    ) -> CompactionResult | None:
        """A manual pass now; None when nothing is compactable."""
        if trigger != "manual":
            raise errors.CompactionError(
                f"trigger: over the bridge compact() runs 'manual' passes, got {trigger!r}"
            )
        return compaction_from_json(self._call("compact", _range(start_seq, end_seq))["result"])

    def compact_dry_run(
        self, *, start_seq: int | None = None, end_seq: int | None = None
    ) -> dict[str, Any] | None:
        """The plan a manual pass would follow (regions, seqs, tokens); nothing committed."""
        args = {**_range(start_seq, end_seq), "dryRun": True}
        plan: dict[str, Any] | None = self._call("compact", args)["plan"]
        return plan

    def prune(
        self, *, start_seq: int | None = None, end_seq: int | None = None
    ) -> PruneResult | None:
        return prune_from_json(self._call("prune", _range(start_seq, end_seq))["result"])

    def handle_overflow(self) -> bool:
        """After a context-length error: True means retry the request once."""
        return bool(self._call("handle_overflow", {})["changed"])

    def history_outline(self) -> RecallResult:
        return RecallResult(self._call("outline", {})["text"], "outline")

    def history_read(
        self,
        checkpoint: str | None = None,
        seq: int | None = None,
        cursor: str | None = None,
        turn: int | None = None,
    ) -> RecallResult:
        """A page as ``Dashr.history_read`` gives it: a checkpoint's originals, the log from
        ``seq``, turn ``turn``'s original events, or the page after ``cursor``."""
        args = _present(checkpoint=checkpoint, seq=seq, cursor=cursor, turn=turn)
        return RecallResult(self._call("read", args)["text"], "read")

    def history_search(
        self,
        query: str,
        checkpoint: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecallResult:
        """Search the kernel's session as ``Dashr.history_search`` does: a page that stops
        short names the ``cursor`` of the next (``h17``)."""
        args = {"query": query, **_present(checkpoint=checkpoint, limit=limit, cursor=cursor)}
        return RecallResult(self._call("search", args)["text"], "search")

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run a model's call of a recall tool in the kernel; returns the tool's text.

        Bad arguments raise :class:`~dashr_ext.errors.RecallError`, as ``Dashr.call_tool``
        does: a mapping holding a lone surrogate is sent as JSON text (the surrogate as its
        ``\\uXXXX`` escape, which the wire can carry), so the kernel's check refuses it.
        """
        args: str | dict[str, Any] = arguments if isinstance(arguments, str) else dict(arguments)
        if isinstance(args, dict) and json_depth(args) <= MAX_JSON_DEPTH and lone_surrogate(args):
            with contextlib.suppress(TypeError, ValueError):  # not JSON: the kernel says so
                args = json.dumps(args)  # ASCII: every lone surrogate becomes its escape
        text: str = self._call("call_tool", {"name": name, "arguments": args})["text"]
        return text

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Set ``Dashr`` options as ``%config Dashr.NAME`` would, all or none; returns all.

        The settings are re-applied when the session is re-attached after a restart.
        """
        result: dict[str, Any] = self._call("configure", {"settings": settings})["settings"]
        self._settings.update(settings)
        return result

    # ------------------------------------------------------------------ what an agent loop needs

    def state(self) -> dict[str, Any]:
        """``openTurn``, ``openStep``, ``pendingToolCalls``, ``systemPrompt``, ``readOnly``,
        ``events``, ``extraTools`` in one round trip."""
        return self._call("state", {})

    def _turn(self, action: str, reason: str | None = None) -> Event:
        args = {"action": action, **_present(reason=reason)}
        return Event.from_json(self._call("turn", args)["event"])

    def begin_turn(self) -> Event:
        return self._turn("begin")

    def end_turn(self, reason: str = "completed") -> Event:
        return self._turn("end", reason)

    def begin_step(self) -> Event:
        return self._turn("begin_step")

    def end_step(self) -> Event:
        return self._turn("end_step")

    def pending_tool_calls(self) -> list[str]:
        calls: list[str] = self.state()["pendingToolCalls"]
        return calls

    @property
    def open_turn(self) -> int | None:
        turn: int | None = self.state()["openTurn"]
        return turn

    @property
    def open_step(self) -> tuple[int, int] | None:
        step = self.state()["openStep"]
        return None if step is None else (step[0], step[1])

    @property
    def system_prompt(self) -> str | None:
        prompt: str | None = self.state()["systemPrompt"]
        return prompt

    @property
    def read_only(self) -> bool:
        return bool(self.state()["readOnly"])

    def __len__(self) -> int:
        """Events in the session log."""
        return int(self.state()["events"])

    @property
    def extra_tools(self) -> list[dict[str, Any]]:
        """Tool schemas sent beyond the session's (e.g. ``run_cell``): a copy; assign to change."""
        tools: list[dict[str, Any]] = self._call("extra_tools", {})["tools"]
        return tools

    @extra_tools.setter
    def extra_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        wanted = [dict(t) for t in tools]
        self._call("extra_tools", {"tools": wanted})
        self._extra_tools = wanted

    def append_tool_result(
        self,
        tool_call_id: str,
        content: str,
        *,
        tool_name: str | None = None,
        is_error: bool = False,
    ) -> Event:
        """Append the result of a waiting tool call (as ``Session.append_tool_result``)."""
        args: dict[str, Any] = {"toolCallId": tool_call_id, "text": content}
        args.update(toolName=tool_name, isError=is_error)
        return Event.from_json(self._call("tool_result", args)["event"])

    def tool_call_seq(self, tool_call_id: str) -> int | None:
        """Seq of the assistant event that issued ``tool_call_id``, if any."""
        seq: int | None = self._call("tool_call", {"id": tool_call_id})["callSeq"]
        return seq

    def tool_result_seq(self, tool_call_id: str) -> int | None:
        seq: int | None = self._call("tool_call", {"id": tool_call_id})["resultSeq"]
        return seq

    def compactions(self, since: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Checkpoints committed and pass errors logged from seq ``since`` on."""
        result = self._call("compactions", {"since": since})
        return tuple(result["checkpoints"]), tuple(result["errors"])

    def pin(self, text: str) -> Pin:
        """Pin a statement every checkpoint carries verbatim (``Dashr.pin``)."""
        return _pin(self._call("pin", {"text": text})["pin"])

    def unpin(self, pin_id: str) -> Pin:
        """Unpin one; returns the pin (``Dashr.unpin``)."""
        return _pin(self._call("unpin", {"id": pin_id})["pin"])

    def pins(self) -> tuple[Pin, ...]:
        """The current pins, oldest first."""
        return tuple(_pin(p) for p in self._call("pins", {})["pins"])

    def run_cell(self, code: str) -> CellOutput:
        """Run ``code`` in the kernel through execute_request (as a notebook cell runs).

        The session is re-attached first when the kernel restarted since the last call, so
        ``dashr_compaction_archive`` is there for the code to read.
        """
        with self._lock:
            if not self._link.has_comm(self.timeout) and self.auto_reattach:
                self.reattach()
            return self._link.execute(code, self.timeout)


def _pin(obj: Mapping[str, Any]) -> Pin:
    return Pin(str(obj["id"]), str(obj["text"]), int(obj["seq"]))


def _present(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _range(start_seq: int | None, end_seq: int | None) -> dict[str, Any]:
    return _present(startSeq=start_seq, endSeq=end_seq)
