"""Where session files live and what they are called (SPEC §3.4).

``$DASHR_HOME/sessions/<session-id>.jsonl``, with ``DASHR_HOME`` defaulting to
``~/.dashr``; session ids are time-ordered and safe as file names everywhere.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

from ._events import now_ms
from .errors import ConfigError

__all__ = [
    "dashr_home",
    "default_session_path",
    "new_session_id",
    "utc_stamp",
]

_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def dashr_home() -> Path:
    """The dashr data directory: ``$DASHR_HOME``, or ``~/.dashr`` when it is unset or empty."""
    value = os.environ.get("DASHR_HOME")
    if value:
        return Path(value).expanduser()
    return Path.home() / ".dashr"


_SUFFIX_MAX = 0xFFFFFF  # six hex digits
_id_lock = threading.Lock()
_last_id: tuple[int, int] = (0, 0)  # (milliseconds, suffix) of the previous id


def utc_stamp(ms: int) -> str:
    """``20261130T012227123Z`` for an epoch-milliseconds time: sortable and filesystem-safe."""
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y%m%dT%H%M%S}{ms % 1000:03d}Z"


def _next_id_parts() -> tuple[int, int]:
    global _last_id
    with _id_lock:
        last_ms, last_suffix = _last_id
        ms = max(now_ms(), last_ms)  # a clock stepping back never reorders ids
        if ms == last_ms and last_suffix < _SUFFIX_MAX:
            # Same millisecond: count up from the previous suffix so the order holds.
            _last_id = (ms, last_suffix + 1)
        else:
            if ms == last_ms:
                ms += 1
            # A random start in the lower half leaves room for millions of same-ms ids.
            import secrets  # here: it loads OpenSSL (hmac), which reading a log never needs

            _last_id = (ms, secrets.randbelow(_SUFFIX_MAX // 2))
        return _last_id


def new_session_id() -> str:
    """A new session id such as ``20261130T012227123Z-3f9a1c``: UTC time in ms, then random hex.

    Ids sort lexicographically in creation order (strictly within one process: ids
    made in the same millisecond count the hex part up from a random start, as ULIDs
    do) and contain only characters that are safe in file names on every platform.
    """
    ms, suffix = _next_id_parts()
    return f"{utc_stamp(ms)}-{suffix:06x}"


def default_session_path(session_id: str) -> Path:
    """``dashr_home()/sessions/<session_id>.jsonl``."""
    if not _SESSION_ID_RE.fullmatch(session_id) or ".." in session_id:
        raise ConfigError(
            "session_id",
            "letters, digits, '.', '_' and '-' only, starting with a letter or digit "
            "(e.g. from new_session_id())",
            session_id,
        )
    return dashr_home() / "sessions" / f"{session_id}.jsonl"
