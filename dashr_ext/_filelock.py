"""The one-writer lock on a session file, and letting go of locks in a forked child (SPEC §3.4).

A writer holds an exclusive ``flock`` on the session file itself. ``flock`` rather
than ``fcntl``/``lockf`` record locks because it belongs to the open file, not the
process: a second writer in the same process is refused just like another process,
and closing some unrelated descriptor of the file does not drop the lock. The
session file itself rather than a sibling ``.lock`` file because that leaves nothing
behind to clean up (a stale lock file cannot be removed safely without racing
another opener), and the kernel releases the lock when the holder dies, even on
``SIGKILL``. The lock is advisory, so readers never take or wait for it.

Locking uses ``fcntl`` and so needs a POSIX system.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Protocol

from .errors import SessionLockedError, StoreError

if sys.platform != "win32":
    import fcntl

__all__ = ["LockHolder", "lock_exclusive", "release_in_forked_child", "renewed_in_child"]


def lock_exclusive(file: io.FileIO, path: Path) -> None:
    """Take the writer lock on ``file`` (opened from ``path``) without waiting.

    Raises :class:`SessionLockedError` when another writer holds it, and
    :class:`StoreError` when the file cannot be locked at all.
    """
    if sys.platform == "win32":
        raise StoreError(
            f"{path}: writing a session needs POSIX file locking, which this platform lacks; "
            "open it with read_only=True"
        )
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SessionLockedError(
            f"{path}: another writer holds this session's lock (one writer per session); "
            "open it with read_only=True to inspect it, or close the other writer first"
        ) from None
    except OSError as err:
        raise StoreError(f"{path}: cannot lock the session file: {err}") from err


class LockHolder(Protocol):
    """An object holding a lock that a forked child must not keep using as it is.

    A store holds the writer lock, a session its thread lock: in the child the thread
    holding that may not exist, so the lock would stay held forever.
    """

    def _drop_inherited(self) -> None:
        """In a forked child: let go of what the parent holds (a store: close the
        inherited descriptor, never ``LOCK_UN``; the child shares the parent's open file
        description and so its ``flock``, unlocking would release the parent's lock).

        Called in every child, and again in a child's children: it must be idempotent.
        """


_HOLDERS: weakref.WeakSet[LockHolder] = weakref.WeakSet()
"""Lock holders alive in this process."""


def release_in_forked_child(holder: LockHolder) -> None:
    """Have ``holder`` let go of its inherited lock in any child this process forks."""
    _HOLDERS.add(holder)


def renewed_in_child(lock: threading.RLock) -> threading.RLock:
    """For a forked child: ``lock`` itself if this thread may take it (it is free, or the
    forking thread holds it and will release it), else a new lock (a thread the child does
    not have holds it, so nothing would ever release it)."""
    if not lock.acquire(blocking=False):
        return threading.RLock()
    lock.release()
    return lock


def _after_fork_in_child() -> None:
    for holder in list(_HOLDERS):  # they stay registered: the child may fork again
        holder._drop_inherited()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
