"""The kernel side of the harness bridge (``docs/bridge.md``).

:mod:`.protocol` checks a request and builds its reply (pure: no IPython, no comm),
:mod:`.ops` holds one function per operation, :mod:`.wire` the JSON form of the
controller's results (shared with the client, :mod:`dashr_ext.bridge`), and :mod:`.comm`
registers the ``dashr`` comm target that ``%load_ext dashr_ext`` opens.
"""

from __future__ import annotations

from .ops import OPS, ControllerHost, Host
from .protocol import COMM_TARGET, MAX_REQUEST_BYTES, PROTOCOL_VERSION, handle

__all__ = [
    "COMM_TARGET",
    "MAX_REQUEST_BYTES",
    "OPS",
    "PROTOCOL_VERSION",
    "ControllerHost",
    "Host",
    "handle",
]
