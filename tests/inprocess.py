"""Front ends driven in this process: the CLI's ``main`` and a bridge client over the bridge's
own ``handle`` (no kernel, no IPython)."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from jupyter_client.session import json_packer, json_unpacker

from dashr_ext import Dashr
from dashr_ext._bridge import handle
from dashr_ext.bridge import KernelSession


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``dashr ARGV`` in this process: its exit code, stdout and stderr."""
    from dashr_ext._cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class InProcessLink:
    """The comm, in this process: each request is packed and unpacked as jupyter_client
    sends it, then answered by the bridge's own ``handle`` over ``d``."""

    def __init__(self, d: Dashr) -> None:
        self.d = d

    def request(
        self, rid: str, op: str, args: dict[str, Any], timeout: float, on_progress: Any = None
    ) -> dict[str, Any]:
        sent = json_unpacker(json_packer({"version": 1, "id": rid, "op": op, "args": args}))
        back: dict[str, Any] = json_unpacker(json_packer(handle(self.d, sent)))
        return back


def kernel_session(d: Dashr) -> KernelSession:
    """A KernelSession whose comm is :class:`InProcessLink` (no kernel, no IPython)."""
    ks = KernelSession.__new__(KernelSession)
    ks.timeout, ks.auto_reattach, ks.on_progress = 10.0, False, None
    ks.session_path, ks.last_request = None, {}
    ks._lock = threading.RLock()
    ks._link = InProcessLink(d)  # type: ignore[assignment]
    ks._ids = (f"t-{n}" for n in itertools.count(1))
    ks._settings, ks._extra_tools = {}, None
    return ks
