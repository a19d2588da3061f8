"""The session a shell is attached to: its file, and the names bound to it (SPEC §9).

Unloading removes exactly what loading added: a session file made at load that nothing was
recorded in, and each bound name only while it still holds the object the extension bound,
so a user's own ``dashr = …`` survives ``%unload_ext``. A session the extension names itself
writes its file only when something is recorded, so a kernel that never records leaves none.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from .._controller import Dashr as DashrController
from .._events import SETTINGS_TYPES
from .._paths import dashr_home, new_session_id
from ..errors import SessionLockedError

__all__ = [
    "NAMESPACE_NAMES",
    "Attachment",
    "as_word",
    "locked_error",
    "namespace_of",
    "same_file",
    "sessions_dir",
]

NAMESPACE_NAMES: tuple[str, ...] = (
    "dashr",
    "dashr_compaction_archive",
    "history_outline",
    "history_read",
    "history_search",
)
"""The user-namespace names the extension binds."""


def namespace_of(c: DashrController) -> dict[str, object]:
    """The :data:`NAMESPACE_NAMES` bound to ``c``: the controller, its archive, its recall."""
    return {
        "dashr": c,
        "dashr_compaction_archive": c.archive,
        "history_outline": c.history_outline,
        "history_read": c.history_read,
        "history_search": c.history_search,
    }


def sessions_dir(session_dir: str | None) -> Path:
    """Where sessions made at load go: ``Dashr.session_dir``, else ``$DASHR_HOME/sessions``."""
    return Path(session_dir).expanduser() if session_dir else dashr_home() / "sessions"


def as_word(path: Path) -> str:
    """``path`` as one word of a magic line (quoted when it holds spaces or quotes)."""
    text = str(path)
    return shlex.quote(text) if any(c.isspace() or c in "'\"" for c in text) else text


def locked_error(path: Path, *, at_load: bool = False) -> UsageError:
    """The lock error of a session another writer holds, with what to type instead."""
    inspect = f"%dashr attach --read-only {as_word(path)} inspects it"
    if at_load:
        return UsageError(
            f"Dashr.session_path {path}: another writer holds this session's lock (one writer "
            "per session: another kernel or process has it open); close that writer, or set "
            f"Dashr.session_path to another file (then {inspect})"
        )
    return UsageError(
        f"{path}: another writer holds this session's lock (one writer per session: another "
        f"kernel or process has it open); {inspect}, or close the other writer first"
    )


def same_file(a: Path | None, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (False when ``a`` is None or cannot resolve)."""
    if a is None:
        return False
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


class Attachment:
    """What one shell's extension opened and bound, so that it can undo exactly that."""

    def __init__(self, shell: InteractiveShell | None) -> None:
        self.shell = shell
        self._created_path: Path | None = None
        self._pushed: dict[str, object] = {}

    @property
    def created(self) -> bool:
        """Whether the live session was created by :meth:`open` (not attached)."""
        return self._created_path is not None

    def open(
        self, session_path: str | None, session_dir: str | None, options: Mapping[str, Any]
    ) -> DashrController:
        """Open ``session_path``, or create it (None: a new session in ``session_dir``, its
        file written from the first record on)."""
        path = Path(session_path).expanduser() if session_path else None
        if path is not None and path.exists():
            try:
                return DashrController.open(path, **options)
            except SessionLockedError:
                raise locked_error(path, at_load=True) from None
        lazy = path is None
        if path is None and session_dir:
            path = sessions_dir(session_dir) / f"{new_session_id()}.jsonl"
        controller = DashrController.create(path, lazy=lazy, **options)
        self._created_path = controller.session.path
        return controller

    def describe(self, controller: DashrController) -> str:
        """One line naming the session file of ``controller``, created or attached."""
        session = controller.session
        if not self.created:
            return (
                f"dashr_ext: attached session file {session.path} ({len(session)} events, "
                f"{len(controller.checkpoints())} checkpoints; its recorded settings apply)"
            )
        written = session.path is not None and session.path.exists()
        later = "" if written else " (written from the first record on)"
        return f"dashr_ext: new session file {session.path}{later}"

    def close(self, controller: DashrController) -> None:
        """Close ``controller``; a session file :meth:`open` created and nothing used is removed."""
        untouched = all(e.type in SETTINGS_TYPES for e in controller.session.events)
        controller.close()
        created, self._created_path = self._created_path, None
        if created is not None and untouched and controller.session.path == created:
            created.unlink(missing_ok=True)

    def bind(self, controller: DashrController) -> None:
        """Bind the :data:`NAMESPACE_NAMES` of ``controller`` (replacing those bound before)."""
        assert self.shell is not None
        names = namespace_of(controller)
        self.unbind()
        self.shell.push(names, interactive=False)  # type: ignore[no-untyped-call]
        self._pushed = names

    def unbind(self) -> None:
        """Remove the names :meth:`bind` bound, where they still hold its objects."""
        if self.shell is None:
            return
        user_ns, hidden = self.shell.user_ns, self.shell.user_ns_hidden
        for name, obj in self._pushed.items():
            if user_ns.get(name) is obj:
                del user_ns[name]
            if hidden.get(name) is obj:
                del hidden[name]
        self._pushed = {}
