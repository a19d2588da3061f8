"""``%dashr`` subcommands: one small function each, dispatched from :data:`SUBCOMMANDS`.

Each takes the ``Dashr`` configurable (seen through :class:`Host`) and the subcommand's
words, and returns a :class:`~dashr_ext._display.Report` (SPEC §9).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from .._controller import Dashr as DashrController
from .._display import Report, status_report
from .attachment import NAMESPACE_NAMES
from .options import AGENT_TRAITS, COMPACTION_TRAITS, RECALL_TRAITS, SUMMARIZER_TRAITS
from .snapshot import SNAPSHOT_WARNING, load_snapshot, refuse_symlink, save_snapshot

__all__ = ["SUBCOMMANDS", "Host"]


class Host(Protocol):
    """What a subcommand needs of the ``Dashr`` configurable (its options are read by name)."""

    shell: InteractiveShell | None

    @property
    def controller(self) -> DashrController: ...

    def attach(self, path: str | Path) -> DashrController: ...

    def push(self) -> None: ...


def status(host: Host) -> Report:
    return status_report(host.controller)


def config(host: Host) -> Report:
    c = host.controller
    rows: list[tuple[str, object]] = [
        (name, repr(getattr(c.config, name))) for name in COMPACTION_TRAITS
    ]
    rows += [(name, repr(getattr(c.recall_config, name))) for name in RECALL_TRAITS]
    rows += [(name, repr(getattr(host, name))) for name in SUMMARIZER_TRAITS]
    rows += [(name, repr(getattr(host, name))) for name in AGENT_TRAITS]
    rows += [(name, repr(getattr(host, name))) for name in ("bridge_max_request_bytes",)]
    rows += [(name, repr(getattr(host, name))) for name in ("session_dir", "session_path")]
    return Report.of(
        "dashr configuration — change with %config Dashr.NAME = VALUE",
        rows,
        (f"session file: {c.session.path or '(in memory)'}",),
        kind="config",
    )


def attach(host: Host, path: str) -> Report:
    c = host.attach(path)
    return Report.of(
        f"attached session {c.session.id}",
        [
            ("session file", c.session.path),
            ("events", len(c.session)),
            ("checkpoints", len(c.checkpoints())),
            ("archive", f"{len(c.archive)} entries"),
        ],
        ("dashr, dashr_compaction_archive and history_* now use this session",),
        kind="attach",
    )


def export(host: Host, path: str) -> Report:
    c = host.controller
    source = c.session.path
    if source is None:
        raise UsageError("this session is in memory only; there is no file to export")
    target = Path(path).expanduser()
    refuse_symlink(target)
    if target.exists():
        raise UsageError(f"{target} already exists; choose a new path")
    target.parent.mkdir(parents=True, exist_ok=True)
    _copy_private(source, target)
    return Report.of(
        f"exported session {c.session.id}",
        [("from", source), ("to", target), ("events", len(c.session))],
        kind="export",
    )


def _copy_private(source: Path, target: Path) -> None:
    """Copy ``source`` to a new file ``target`` of mode 0600, the session file's own.

    ``O_EXCL`` refuses an existing name, a symbolic link included; a failed copy is removed.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise UsageError(f"{target} already exists; choose a new path") from None
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as log:
            shutil.copyfileobj(log, out)
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def snapshot_save(host: Host, path: str) -> Report:
    assert host.shell is not None
    target = Path(path).expanduser()
    saved, skipped = save_snapshot(host.shell, target, exclude=NAMESPACE_NAMES)
    notes = [f"not picklable, skipped: {', '.join(skipped)}"] if skipped else []
    notes.append(f"{', '.join(NAMESPACE_NAMES)} are re-bound by the extension, not saved")
    return Report.of(
        f"saved a snapshot of {len(saved)} names",
        [("file", target), ("names", ", ".join(saved) or "(none)")],
        notes,
        kind="snapshot",
    )


def snapshot_load(host: Host, path: str) -> Report:
    assert host.shell is not None
    target = Path(path).expanduser()
    if not target.is_file():
        raise UsageError(f"no such snapshot file: {target}")
    print(SNAPSHOT_WARNING)
    loaded = load_snapshot(host.shell, target)
    host.push()
    return Report.of(
        f"loaded a snapshot of {len(loaded)} names",
        [("file", target), ("names", ", ".join(loaded) or "(none)")],
        (f"{', '.join(NAMESPACE_NAMES)} are bound to the live session again",),
        kind="snapshot",
    )


SUBCOMMANDS: Mapping[str, tuple[tuple[str, ...], Callable[..., Report]]] = {
    "status": ((), status),
    "config": ((), config),
    "attach": (("PATH",), attach),
    "export": (("PATH",), export),
    "snapshot save": (("PATH",), snapshot_save),
    "snapshot load": (("PATH",), snapshot_load),
}
"""``%dashr`` subcommand -> (its parameter names, for the usage line; its function)."""
