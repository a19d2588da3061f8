"""Which paths can be read as files: regular files, and a word for everything else.

A FIFO would block a reader and a device (``/dev/zero``) would never end, so only regular
files are read (a symbolic link to one counts). :func:`regular_file` is the check every
``dashr`` command makes before it reads its file; :func:`list_sessions` is the listing of a
directory's ``*.jsonl`` files the cross-session index reads, with each entry it cannot read
named and the reason, instead of the listing failing (a symbolic link loop) or the entry
being left out unsaid (no permission to read it).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StoreError

__all__ = ["Listing", "describe_error", "describe_mode", "list_sessions", "regular_file"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def describe_mode(mode: int) -> str:
    """What a file of ``mode`` (from ``stat``) is, when it is not a regular file."""
    return next((kind for is_kind, kind in _KINDS if is_kind(mode)), "not a regular file")


def describe_error(exc: OSError) -> str:
    """Why a path could not be looked at or opened, in a few words."""
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read (permission denied)"
    if exc.errno == errno.ENOENT:
        return "a symbolic link to nothing"
    return f"cannot be read ({exc.strerror or exc})"


def regular_file(path: Path, accepted: str) -> Path:
    """``path`` when it names a regular file; else a :class:`StoreError` saying what it is.

    ``accepted`` ends the message: what the command reads instead. A missing path says
    ``no such file: PATH`` (the wording of ``FileNotFoundError`` in the command line).
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.islink(path):
            raise StoreError(f"no such file: {path}") from None
        raise StoreError(f"{path}: {describe_error(exc)}; {accepted}") from None
    if not stat.S_ISREG(st.st_mode):
        link = "a symbolic link to " if os.path.islink(path) else ""
        raise StoreError(
            f"{path}: is {link}{describe_mode(st.st_mode)}, not a regular file; {accepted}"
        )
    return path


@dataclass
class Listing:
    """A directory's ``*.jsonl`` entries: the regular files, and the others with why."""

    files: dict[str, Path] = field(default_factory=dict)
    """Regular files (or symbolic links to one) by name."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Entry name -> why it is not read (``a FIFO (named pipe)``, ``a symbolic link loop``)."""


def list_sessions(directory: Path) -> Listing:
    """The ``*.jsonl`` entries of ``directory`` (one ``stat`` each; nothing is opened).

    A missing directory, or one that cannot be listed, holds none; an entry gone while
    listed is left out.
    """
    listing = Listing()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return listing
    for entry in sorted(entries, key=lambda e: e.name):
        name = entry.name
        if not name.endswith(".jsonl"):
            continue
        try:
            st = os.stat(entry.path)
        except OSError as exc:
            if exc.errno != errno.ENOENT or os.path.lexists(entry.path):
                listing.skipped[name] = describe_error(exc)
            continue
        if not stat.S_ISREG(st.st_mode):
            listing.skipped[name] = f"{describe_mode(st.st_mode)}, not a regular file"
        elif not os.access(entry.path, os.R_OK):
            listing.skipped[name] = describe_error(PermissionError(errno.EACCES, "denied"))
        else:
            listing.files[name] = Path(entry.path)
    return listing
