"""The session files in a directory, newest first, each summarized without replaying it.

Listing many logs stays cheap: files are only read (no lock, nothing written), ordered by
their modification time from one ``stat`` each, and only the newest ``limit`` are opened.
Of those, the head gives the header and the first user message (reading stops there), the
last complete line gives the event count (its seq + 1: seqs are dense), and a byte scan of
at most :data:`SCAN_BYTES` — no JSON parsing — counts the checkpoints.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ._events import Event
from .errors import EventError

__all__ = [
    "HEAD_BYTES",
    "SCAN_BYTES",
    "Catalog",
    "SessionFile",
    "catalog",
    "preview",
    "session_files",
    "summarize",
]

HEAD_BYTES = 1 << 20
"""Bytes of a file's head read for its header and first user message."""
SCAN_BYTES = 64 << 20
"""Bytes of a file scanned for checkpoints; a larger file's count is a lower bound."""
_TAIL_BYTES = 64 << 10
_CHECKPOINT = b'"type":"compaction/summary"'  # as the store writes it: no spaces
_LONG_HEADER = re.compile(rb'\{"seq":0,"type":"session/header",.*?"sessionId":"([^"\\]*)"')


@dataclass(frozen=True)
class SessionFile:
    """One session file, as far as its head, its tail and a byte scan tell."""

    path: Path
    modified_ms: int
    """Last modification time (epoch ms): when the session was last written."""
    size_bytes: int
    session_id: str | None
    """The header's ``sessionId``; None when the first line is not a session header."""
    events: int | None
    """Complete events in the file (None when its last line cannot be read)."""
    checkpoints: int
    checkpoints_exact: bool
    """False when the file is larger than :data:`SCAN_BYTES` (``checkpoints`` a lower bound)."""
    first_user_message: str | None
    """The text of the first user message, when one starts within :data:`HEAD_BYTES`."""

    @property
    def is_session(self) -> bool:
        return self.session_id is not None


@dataclass(frozen=True)
class Catalog:
    """The newest session files of a directory."""

    directory: Path
    files: tuple[SessionFile, ...]
    """At most the ``limit`` newest ``*.jsonl`` files, newest first."""
    total: int
    """How many ``*.jsonl`` files the directory holds."""


def catalog(directory: Path, limit: int) -> Catalog:
    """The ``limit`` most recently written ``*.jsonl`` files of ``directory``, summarized.

    A missing directory holds no sessions; a file that vanishes while listed is left out.
    """
    paths = session_files(directory)
    files: list[SessionFile] = []
    for path in paths[: max(limit, 0)]:
        try:
            files.append(summarize(path))
        except OSError:
            continue
    return Catalog(directory, tuple(files), len(paths))


def session_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` files of ``directory``, most recently written first (one stat each).

    Only regular files (or symbolic links to one) are listed: a directory, a FIFO, a device,
    a symbolic link loop or a link to nothing is left out, as the cross-session index
    leaves it out (:func:`~._recall.index_files.list_sessions`), and never fails the listing.
    """
    found = sorted(_jsonl_files(directory), reverse=True)
    return [path for _mtime, _name, path in found]


def summarize(path: Path) -> SessionFile:
    """What the head, the tail and a byte scan of ``path`` tell; raises OSError."""
    with path.open("rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        session_id, first_user = _head(fh)
        events, end = _tail(fh, size) if session_id is not None else (None, 0)
        checkpoints, exact = _checkpoints(fh, end) if session_id is not None else (0, True)
    return SessionFile(
        path=path,
        modified_ms=st.st_mtime_ns // 1_000_000,
        size_bytes=size,
        session_id=session_id,
        events=events,
        checkpoints=checkpoints,
        checkpoints_exact=exact,
        first_user_message=first_user,
    )


def preview(text: str, width: int = 60) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``width`` characters with ``…``."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _jsonl_files(directory: Path) -> Iterator[tuple[int, str, Path]]:
    """``(mtime_ns, name, path)`` of each regular ``*.jsonl`` file of ``directory``."""
    try:
        entries = list(os.scandir(directory))
    except OSError:  # missing, or not a directory
        return
    for entry in entries:
        if not entry.name.endswith(".jsonl"):
            continue
        try:
            # Follows a link; a loop (ELOOP), a link to nothing or an entry gone raises.
            st = os.stat(entry.path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            yield st.st_mtime_ns, entry.name, Path(entry.path)


def _head(fh: BinaryIO) -> tuple[str | None, str | None]:
    """The header's session id and the first user message's text, from the first lines."""
    first = fh.readline(HEAD_BYTES)
    header = _json_line(first)
    if header is None:  # a header longer than the head: its id is near the start
        match = _LONG_HEADER.match(first)
        return (match.group(1).decode("utf-8", "replace") if match else None), None
    data = header.get("data")
    sid = data.get("sessionId") if isinstance(data, dict) else None
    if header.get("type") != "session/header" or not isinstance(sid, str):
        return None, None
    budget = HEAD_BYTES - len(first)
    while budget > 0:
        raw = fh.readline(budget)
        if not raw.endswith(b"\n"):  # the end of the file, or of the head
            break
        budget -= len(raw)
        obj = _json_line(raw)
        if obj is None or obj.get("type") != "user/message":
            continue
        try:
            message = Event.from_json(obj).message
        except EventError:
            continue
        if message.source_kind == "user":
            return sid, message.text
    return sid, None


def _tail(fh: BinaryIO, size: int) -> tuple[int | None, int]:
    """The last complete line's seq + 1, and where that line ends (a torn tail follows it)."""
    window = _TAIL_BYTES
    while True:
        start = max(size - window, 0)
        fh.seek(start)
        tail = fh.read(size - start)
        end = tail.rfind(b"\n")
        begin = tail.rfind(b"\n", 0, max(end, 0)) + 1
        if end >= 0 and (begin > 0 or start == 0):
            obj = _json_line(tail[begin:end])
            seq = obj.get("seq") if obj is not None else None
            events = seq + 1 if type(seq) is int and seq >= 0 else None
            return events, start + end + 1
        if start == 0 or window >= SCAN_BYTES:  # no complete line, or one too long to read
            return None, size
        window *= 4


def _checkpoints(fh: BinaryIO, end: int) -> tuple[int, bool]:
    """How many ``compaction/summary`` events the first ``end`` bytes (at most
    :data:`SCAN_BYTES`) hold, and whether that was all of them."""
    fh.seek(0)
    stop = min(end, SCAN_BYTES)
    count, overlap, read = 0, b"", 0
    keep = len(_CHECKPOINT) - 1  # shorter than the pattern: nothing is counted twice
    while read < stop:
        chunk = fh.read(min(1 << 20, stop - read))
        if not chunk:
            break
        read += len(chunk)
        block = overlap + chunk
        count += block.count(_CHECKPOINT)
        overlap = block[-keep:]
    return count, read >= end


def _json_line(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
