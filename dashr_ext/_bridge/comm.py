"""The ``dashr`` comm target: every message on a comm to it is one request, answered once.

``%load_ext dashr_ext`` registers it with the kernel's comm manager (the ``comm`` package,
as ipykernel provides it) and ``%unload_ext`` withdraws it. On a new comm the kernel sends a
``hello``; for each request, 0..n ``progress`` messages while a pass runs, then one reply
from :func:`~dashr_ext._bridge.protocol.handle`. Requests run one at a time on the
kernel's main thread, like cells, so operations from several comms never overlap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import comm as comm_package
from comm.base_comm import BaseComm

from .._jsontext import utf8_text
from ..errors import InternalError
from .ops import PROTOCOL_VERSION, Host
from .protocol import COMM_TARGET, MAX_REQUEST_BYTES, error_reply, handle, hello

__all__ = ["CommBridge"]


class CommBridge:
    """The comm target of one kernel, answering with the host :attr:`host_of` returns.

    ``host_of`` is called per request, so a session switched with ``%dashr attach`` is the
    one the next request sees; ``max_request_bytes`` likewise (the
    ``Dashr.bridge_max_request_bytes`` option).
    """

    def __init__(
        self,
        host_of: Callable[[], Host],
        max_request_bytes: Callable[[], int] = lambda: MAX_REQUEST_BYTES,
    ) -> None:
        self.host_of = host_of
        self.max_request_bytes = max_request_bytes
        self.comms: dict[str, BaseComm] = {}
        self._registered = False

    def register(self) -> None:
        """Register the ``dashr`` target (replacing an earlier registration of it)."""
        comm_package.get_comm_manager().register_target(COMM_TARGET, self._open)
        self._registered = True

    def unregister(self) -> None:
        """Withdraw the target, if still ours, and close the comms it opened."""
        if not self._registered:
            return
        self._registered = False
        manager = comm_package.get_comm_manager()
        if manager.targets.get(COMM_TARGET) == self._open:
            manager.unregister_target(COMM_TARGET, self._open)
        for opened in list(self.comms.values()):
            with contextlib.suppress(Exception):  # the frontend closed it meanwhile
                opened.close()
        self.comms.clear()

    def _open(self, opened: BaseComm, msg: dict[str, Any]) -> None:
        self.comms[opened.comm_id] = opened
        opened.on_msg(lambda message: self._message(opened, message))
        opened.on_close(lambda message: self._forget(opened))
        opened.send(hello(self.max_request_bytes()))

    def _forget(self, opened: BaseComm) -> None:
        self.comms.pop(opened.comm_id, None)

    def _message(self, opened: BaseComm, msg: dict[str, Any]) -> None:
        content = msg.get("content")
        request = content.get("data") if isinstance(content, dict) else None
        rid = request.get("id") if isinstance(request, dict) else None

        def progress(phase: str, detail: str) -> None:
            opened.send(
                {
                    "version": PROTOCOL_VERSION,
                    "id": rid,
                    "progress": {"phase": phase, "detail": utf8_text(detail)},
                }
            )

        try:
            reply = handle(
                self.host_of(), request, progress, max_request_bytes=self.max_request_bytes()
            )
        except KeyboardInterrupt:
            readable = rid if isinstance(rid, str) and utf8_text(rid) == rid else None
            reply = error_reply(
                readable,
                InternalError("KeyboardInterrupt: the kernel was interrupted during the request"),
            )
        try:
            opened.send(reply)
        except Exception as exc:  # a result the kernel could not serialize
            opened.send(error_reply(reply.get("id"), exc))
