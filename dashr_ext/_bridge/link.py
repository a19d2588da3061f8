"""The client end of the wire: one comm to one kernel, and cells run through execute_request.

:class:`KernelLink` speaks the Jupyter messaging protocol through any jupyter_client
kernel client (blocking): it opens a comm to the ``dashr`` target, sends a request as a
``comm_msg`` and reads IOPub until the reply with the same id, passing progress on. It
tells the cases apart that a harness must handle differently: no reply in time
(:class:`~dashr_ext.errors.BridgeTimeoutError`), a dead kernel
(:class:`~dashr_ext.errors.KernelDiedError`), and a kernel that no longer knows the comm
(:class:`CommLost`: restarted, or the extension unloaded) — the request then was not run,
so it is safe to send again once re-attached.
"""

from __future__ import annotations

import queue
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from .._cells import CellOutput
from .._jsontext import utf8_text
from ..errors import BridgeError, BridgeTimeoutError, KernelDiedError
from .ops import PROTOCOL_VERSION
from .protocol import COMM_TARGET

__all__ = ["CommLost", "KernelLink"]

POLL_SECONDS = 0.2
"""How long one wait on IOPub lasts before the kernel's liveness is checked again."""
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class CommLost(BridgeError):
    """The kernel answered the message without a handler: it no longer knows this comm."""


class KernelLink:
    """One comm to the kernel behind ``client`` (a started jupyter_client kernel client).

    ``alive`` tells whether the kernel process still runs (its manager's ``is_alive`` when
    the harness started it, else the heartbeat).
    """

    def __init__(self, client: Any, alive: Callable[[], bool]) -> None:
        self.client = client
        self.alive = alive
        self.comm_id: str | None = None
        self.hello: dict[str, Any] = {}
        self.kernel_session: str | None = None
        """The kernel's own session id (new after a restart)."""

    # ------------------------------------------------------------------ iopub

    def _next(self, deadline: float, what: str) -> dict[str, Any]:
        """The next IOPub message before ``deadline``; typed errors for death and timeout."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BridgeTimeoutError(
                    f"no reply to {what} within the timeout; the kernel may still be working "
                    "on it (raise KernelSession.timeout for long passes)"
                )
            try:
                msg: dict[str, Any] = self.client.get_iopub_msg(
                    timeout=min(POLL_SECONDS, remaining)
                )
            except queue.Empty:
                if not self.alive():
                    raise KernelDiedError(
                        f"the kernel died while waiting for {what}; restart it and call "
                        "KernelSession.reattach() to continue on the same session file"
                    ) from None
                continue
            return msg

    def _send(self, msg_type: str, content: dict[str, Any]) -> str:
        if not self.alive():
            raise KernelDiedError("the kernel is not running; restart it, then reattach()")
        msg = self.client.session.msg(msg_type, content)
        self.client.shell_channel.send(msg)
        msg_id: str = msg["header"]["msg_id"]
        return msg_id

    # ------------------------------------------------------------------ the comm

    def open(self, timeout: float) -> dict[str, Any]:
        """Open a comm to the ``dashr`` target; returns the kernel's hello.

        :class:`CommLost` when the kernel has no such target (the extension is not loaded).
        """
        comm_id = uuid.uuid4().hex
        self._send("comm_open", {"comm_id": comm_id, "target_name": COMM_TARGET, "data": {}})
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline, "comm_open")
            content = msg.get("content", {})
            if content.get("comm_id") != comm_id:
                continue
            if msg["msg_type"] == "comm_close":
                raise CommLost(
                    f"the kernel has no {COMM_TARGET!r} comm target; run %load_ext dashr_ext"
                )
            data = content.get("data")
            if msg["msg_type"] == "comm_msg" and isinstance(data, dict) and "hello" in data:
                self.comm_id = comm_id
                self.hello = data["hello"]
                self.kernel_session = msg.get("header", {}).get("session")
                return self.hello

    def close(self) -> None:
        """Close the comm (the kernel forgets it); nothing is sent when the kernel is gone."""
        comm_id, self.comm_id = self.comm_id, None
        if comm_id is not None and self.alive():
            self._send("comm_close", {"comm_id": comm_id, "data": {}})

    def request(
        self,
        rid: str,
        op: str,
        args: dict[str, Any],
        timeout: float,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its reply (``ok`` or not); progress goes to
        ``on_progress`` and gives the kernel ``timeout`` more seconds each time."""
        if self.comm_id is None:
            raise CommLost("no comm is open")
        comm_id = self.comm_id
        request = {"version": PROTOCOL_VERSION, "id": rid, "op": op, "args": args}
        msg_id = self._send("comm_msg", {"comm_id": comm_id, "data": request})
        what = f"{op!r} (request {rid})"
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline, what)
            kind, content = msg["msg_type"], msg.get("content", {})
            parent = msg.get("parent_header", {}).get("msg_id")
            if kind == "status" and content.get("execution_state") == "starting":
                self.comm_id = None
                raise KernelDiedError(
                    f"the kernel restarted while {what} was pending; the log shows whether "
                    "it was applied (each operation commits whole or not at all)"
                )
            if content.get("comm_id") == comm_id:
                data = content.get("data")
                if kind == "comm_close":
                    self.comm_id = None
                    raise CommLost(f"the kernel closed the comm before answering {what}")
                if not isinstance(data, dict) or data.get("id") != rid:
                    continue  # a late message of an earlier request
                if "progress" in data:
                    deadline = time.monotonic() + timeout
                    if on_progress is not None:
                        on_progress(data["progress"])
                    continue
                return data
            if kind == "status" and parent == msg_id and content.get("execution_state") == "idle":
                # The kernel is done with the message and sent nothing: it has no such comm.
                self.comm_id = None
                raise CommLost(f"the kernel does not know this comm ({what} was not run)")

    def has_comm(self, timeout: float) -> bool:
        """Whether the kernel still has this comm open (one comm_info round trip)."""
        if self.comm_id is None:
            return False
        msg_id = self._send("comm_info_request", {"target_name": COMM_TARGET})
        reply = self._shell_reply(msg_id, time.monotonic() + timeout, "comm_info_request")
        comms = reply.get("content", {}).get("comms", {})
        return isinstance(comms, dict) and self.comm_id in comms

    def _shell_reply(self, msg_id: str, deadline: float, what: str) -> dict[str, Any]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BridgeTimeoutError(f"no reply to {what} within the timeout")
            try:
                msg: dict[str, Any] = self.client.get_shell_msg(
                    timeout=min(POLL_SECONDS, remaining)
                )
            except queue.Empty:
                if not self.alive():
                    raise KernelDiedError(f"the kernel died while waiting for {what}") from None
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg

    # ------------------------------------------------------------------ cells

    def execute(self, code: str, timeout: float) -> CellOutput:
        """Run ``code`` through execute_request and collect what IOPub carried."""
        msg_id = self._send(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": False,
            },
        )
        stdout: list[str] = []
        stderr: list[str] = []
        results: list[str] = []
        error: str | None = None
        interrupted = False
        deadline = time.monotonic() + timeout
        what = "execute_request"
        while True:
            msg = self._next(deadline, what)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg.get("content", {})
            if kind == "stream":
                (stdout if content.get("name") == "stdout" else stderr).append(content["text"])
            elif kind in ("execute_result", "display_data"):
                text = content.get("data", {}).get("text/plain")
                if isinstance(text, str):
                    results.append(text)
            elif kind == "error":
                if content.get("ename") == "KeyboardInterrupt":
                    interrupted = True
                else:
                    lines = [_ANSI.sub("", line) for line in content.get("traceback", [])]
                    error = "\n".join(lines) or f"{content.get('ename')}: {content.get('evalue')}"
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        self._shell_reply(msg_id, deadline, what)  # drained, so it never answers a later wait
        return CellOutput(
            stdout=utf8_text("".join(stdout)),
            stderr=utf8_text("".join(stderr)),
            results=tuple(utf8_text(r) for r in results),
            error=None if error is None else utf8_text(error),
            interrupted=interrupted,
        )
