"""Durable append-only JSONL store: one JSON object per line, one writer per file.

The durable end of the session log (SPEC §3.4); :class:`Store` says what it guarantees.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal, TypeVar, cast, overload

from ._events import now_ms
from ._filelock import lock_exclusive, release_in_forked_child
from ._jsontext import decode_file, json_lines
from ._paths import utc_stamp
from .errors import (
    ConfigError,
    CorruptLogError,
    EventError,
    ReadOnlyError,
    StoreError,
    TornTailWarning,
)

__all__ = [
    "Durability",
    "LoadedLine",
    "Store",
    "TornTail",
    "gc_paused",
]

Durability = Literal["fsync", "flush"]
T = TypeVar("T")

_DURABILITIES = ("fsync", "flush")
# Session files hold whole conversations (code, file contents, tool output): owner-only.
_FILE_MODE = 0o600
_LOAD_BLOCK = 4 << 20
"""Bytes read and decoded at a time when loading: a block's bytes and decoded objects are
what a load holds beyond the events it keeps (4 MiB loads as fast as 16 MiB and peaks at
30 MB less on a 100 MB log)."""


@dataclass(frozen=True, slots=True)
class LoadedLine:
    """One complete line of the file: its 1-based line number and its JSON object."""

    lineno: int
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TornTail:
    """The partial last line found by :meth:`Store.load`."""

    path: Path
    """The session file."""
    side_file: Path | None
    """Where the torn bytes were moved; ``None`` when read-only (the bytes were left in place)."""
    nbytes: int


# --------------------------------------------------------------------------- store


class Store:
    """An append-only JSONL file: one writer holding its lock, or any number of readers.

    Use :meth:`create` for a new file and :meth:`open` for an existing one. A writer
    must :meth:`load` before its first :meth:`append` when the file ends with a torn
    line. Calls on one store are serialised by an internal lock.

    The store is a thin shell around a file; of what the objects mean it knows only
    their ``seq``, which is their line number. :class:`Store` appends batches of objects
    durably, loads them back with precise errors, and recovers a line torn by a crash::

        with Store.create(default_session_path(new_session_id())) as store:
            store.append([{"seq": 0, "type": "session/header", ...}])
            lines, torn = store.load()

    Guarantees (SPEC 3.4):

    * **Lines.** Each object is one line, ``json.dumps(obj, ensure_ascii=False,
      separators=(",", ":"))`` in UTF-8 plus ``"\n"``; NaN and the infinities are
      refused (:class:`EventError`) because they are not JSON.
    * **Sequence.** Line *n* (0-based) holds the object whose ``"seq"`` is *n*: ``append``
      refuses a batch whose objects do not carry the next seqs in order (out of order,
      repeated, missing, or not an integer) with :class:`EventError`, and writes nothing.
      So the file never holds a line a session replay would refuse for its seq, whatever
      the caller's threads do.
    * **Durability.** ``append`` writes a whole batch with one ``write`` call to a
      descriptor opened ``O_APPEND`` (so it always lands at the end), then
      ``os.fsync`` once (``durability="fsync"``, the default) or nothing more
      (``"flush"``: the bytes are handed to the OS, so they survive the process but
      not a power cut). If the write or fsync fails, or is interrupted, the file is
      truncated back to its previous length before the error propagates: a batch is
      either entirely in the file or not at all.
    * **One writer.** A writer holds an exclusive lock on the session file itself
      (:mod:`dashr_ext._filelock`): a second :class:`Store`, in this process or another,
      is refused with :class:`SessionLockedError`, and the lock dies with its holder.
      Readers (``read_only=True``) never take or wait for it.
    * **Precise corruption errors.** Every complete (newline-terminated) line must be
      a JSON object; anything else, including a blank line (nothing this store
      writes produces one), raises :class:`CorruptLogError` with the file, the
      1-based line number and the reason, and the file is left byte-for-byte as it was.
    * **Torn tail recovery.** Bytes after the last newline come from a write cut
      short by a crash (or, seen by a reader, from a writer in mid-append). A writer's
      :meth:`Store.load` moves them to ``<file>.torn-<UTC time>`` (the side file is
      written and fsynced before the main file is truncated, so the bytes are on disk
      at every instant) and warns with :class:`TornTailWarning`; a reader ignores
      them, leaves the file untouched and warns. A writer must ``load()`` before its
      first ``append()`` when the file ends torn. A tail that happens to parse as a
      complete JSON object is still treated as torn: every line is written together
      with its newline, so a missing newline means the write did not finish, and
      setting the bytes aside never guesses.

    Writer-mode locking needs a POSIX system; read-only stores work everywhere. Where
    session files live and what they are called is :mod:`dashr_ext._paths`.
    """

    path: Path
    read_only: bool
    durability: Durability

    def __init__(
        self,
        path: Path,
        *,
        read_only: bool,
        durability: Durability,
        file: io.FileIO | None,
    ) -> None:
        """Internal: use :meth:`create` or :meth:`open`."""
        self.path = path
        self.read_only = read_only
        self.durability = durability
        self._file = file
        self._closed = False
        self._mutex = threading.Lock()
        self._size = 0
        self._lines: int | None = None  # complete lines in the file: the seq the next line holds
        self._torn = False  # the file ends with a partial line that load() has not recovered
        self._broken: str | None = None  # why appends are refused after a failed rollback
        self._held: list[bytes] | None = None  # a deferred store's lines, until its file exists
        if file is not None:
            self._size = os.fstat(file.fileno()).st_size
            self._torn = self._size > 0 and os.pread(file.fileno(), 1, self._size - 1) != b"\n"
            release_in_forked_child(self)

    def _drop_inherited(self) -> None:
        """In a forked child: let go of the parent's descriptor without touching its lock.

        Closing the child's copy (never ``LOCK_UN``) lets the parent's ``close()`` release
        the lock again. The child's store refuses appends from then on.
        """
        file, self._file = self._file, None
        self._mutex = threading.Lock()
        if file is not None or self._held is not None:
            self._broken = "this store belongs to the parent process (the process forked)"
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()

    # ----------------------------------------------------------------- opening

    @classmethod
    def create(
        cls, path: Path, *, durability: Durability = "fsync", deferred: bool = False
    ) -> Store:
        """Create a new empty session file (and its parent directories) and take its writer lock.

        Raises :class:`StoreError` if the file already exists. ``deferred=True`` checks the
        name but creates nothing yet: batches given to :meth:`hold` wait in memory, and the
        first :meth:`append` creates the file, writing them first, in one batch.
        """
        path = Path(path)
        _check_durability(durability)
        if deferred and os.path.lexists(path):
            raise StoreError(_exists_message(path))
        file = None if deferred else _new_file(path, durability)
        store = cls(path, read_only=False, durability=durability, file=file)
        if deferred:
            store._held = []
            release_in_forked_child(store)
        store._lines = 0
        return store

    @classmethod
    def open(
        cls, path: Path, *, read_only: bool = False, durability: Durability = "fsync"
    ) -> Store:
        """Open an existing session file; a writer (``read_only=False``) takes its lock.

        Raises :class:`StoreError` if the file is missing and :class:`SessionLockedError`
        if another writer holds it.
        """
        path = Path(path)
        _check_durability(durability)
        if not path.is_file():  # a device or a FIFO would be read without end
            raise StoreError(_missing_message(path))
        if read_only:
            return cls(path, read_only=True, durability=durability, file=None)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise StoreError(_missing_message(path)) from None
        except OSError as err:
            raise StoreError(f"{path}: cannot open the session file for writing: {err}") from err
        file = io.FileIO(fd, "r+", closefd=True)
        try:
            lock_exclusive(file, path)
            return cls(path, read_only=False, durability=durability, file=file)
        except BaseException:
            file.close()
            raise

    def close(self) -> None:
        """Release the writer lock and the file. Idempotent."""
        with self._mutex:
            self._closed = True
            if self._file is not None:
                self._file.close()  # closing the descriptor releases the flock
                self._file = None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called; a closed store neither loads nor appends."""
        return self._closed

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else ("closed" if self.closed else "writer")
        return f"<Store {str(self.path)!r} {mode} durability={self.durability!r}>"

    # ----------------------------------------------------------------- reading

    @overload
    def load(self, parse: None = None) -> tuple[list[LoadedLine], TornTail | None]: ...

    @overload
    def load(self, parse: Callable[[dict[str, Any]], T]) -> tuple[list[T], TornTail | None]: ...

    def load(
        self, parse: Callable[[dict[str, Any]], T] | None = None
    ) -> tuple[list[LoadedLine], TornTail | None] | tuple[list[T], TornTail | None]:
        """Read every complete line; recover (writer) or ignore (reader) a torn last line.

        Returns the lines as :class:`LoadedLine` objects, or as ``parse(obj)`` for each
        object when ``parse`` is given, plus a :class:`TornTail` when the file ended with
        a partial line (also reported with :class:`TornTailWarning`).

        Raises :class:`CorruptLogError` (file untouched) when a complete line is not a
        JSON object or ``parse`` raises :class:`EventError` for it.
        """
        with self._mutex, gc_paused():
            streamed = self._load_blocks(parse)
            if streamed is not None:  # the common case: the whole file is never held at once
                out, cut, tail = streamed
            else:
                data = self._read_all()
                cut = data.rfind(b"\n") + 1  # the complete lines' length; 0 when there are none
                objs = self._parse_text(data, cut)  # json: it takes a few more inputs
                if parse is None:
                    out = [LoadedLine(i, obj) for i, obj in enumerate(objs, 1)]
                else:
                    out = self._apply(parse, objs)
                tail = data[cut:]
                del data, objs
            self._lines = len(out)
            if not tail:
                self._size = cut
                return out, None
            return out, self._handle_torn_tail(tail, cut, len(out) + 1)

    def _load_blocks(
        self, parse: Callable[[dict[str, Any]], Any] | None
    ) -> tuple[list[Any], int, bytes] | None:
        """The lines read and decoded a block at a time (``msgspec``), so that a large log is
        never in memory twice, as bytes and as objects: ``(out, complete bytes, torn tail)``.
        None when any line needs the whole-file path (no msgspec, a line it refuses, a
        ``parse`` error), which then reports exactly what is wrong and where."""
        out: list[Any] = []

        def take(objs: list[dict[str, Any]]) -> None:
            if parse is None:
                out.extend(LoadedLine(i, obj) for i, obj in enumerate(objs, len(out) + 1))
            else:
                out.extend(map(parse, objs))

        with self._reader() as f:
            try:
                read = decode_file(f, take, _LOAD_BLOCK)
            except EventError:
                return None
        return None if read is None else (out, *read)

    def _reader(self) -> contextlib.AbstractContextManager[BinaryIO]:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed; open it again to load")
        try:
            if self._file is None:
                return open(self.path, "rb")
            # Read through the locked descriptor: it is the file this writer appends to,
            # even if the path was renamed meanwhile.
            self._file.seek(0)
            return contextlib.nullcontext(cast(BinaryIO, self._file))
        except OSError as err:
            raise StoreError(f"{self.path}: cannot read the session file: {err}") from err

    def _read_all(self) -> bytes:
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed; open it again to load")
        if self._file is None:
            try:
                return self.path.read_bytes()
            except OSError as err:
                raise StoreError(f"{self.path}: cannot read the session file: {err}") from err
        # Read through the locked descriptor: it is the file this writer appends to,
        # even if the path was renamed meanwhile.
        try:
            self._file.seek(0)
            return self._file.readall()
        except OSError as err:
            raise StoreError(f"{self.path}: cannot read the session file: {err}") from err

    def _parse_text(self, data: bytes, cut: int) -> list[dict[str, Any]]:
        objs = json_lines(data, cut)
        if isinstance(objs, tuple):
            raise CorruptLogError(str(self.path), *objs)
        return objs

    def _apply(self, parse: Callable[[dict[str, Any]], T], objs: list[dict[str, Any]]) -> list[T]:
        out: list[T] = []
        append = out.append
        for lineno, obj in enumerate(objs, 1):
            try:
                append(parse(obj))
            except EventError as err:
                raise CorruptLogError(str(self.path), lineno, str(err)) from err
        return out

    def _handle_torn_tail(self, tail: bytes, cut: int, lineno: int) -> TornTail:
        if self._file is None:
            warnings.warn(
                f"{self.path}: line {lineno} is incomplete ({len(tail)} bytes without a final "
                "newline: a crash mid-write, or a writer is appending right now); ignored it "
                "and left the file unchanged (read-only). Opening the session as a writer "
                "moves those bytes to a side file.",
                TornTailWarning,
                stacklevel=3,
            )
            return TornTail(self.path, None, len(tail))
        side = self._write_side_file(tail)
        try:
            os.ftruncate(self._file.fileno(), cut)
            os.fsync(self._file.fileno())
        except OSError as err:
            raise StoreError(
                f"{self.path}: cannot truncate the torn last line (its {len(tail)} bytes are "
                f"saved in {side}): {err}"
            ) from err
        self._size = cut
        self._torn = False
        warnings.warn(
            f"{self.path}: line {lineno} was incomplete ({len(tail)} bytes without a final "
            f"newline, from a crash mid-write); moved those bytes to {side} and truncated "
            f"the session to its {lineno - 1} complete lines.",
            TornTailWarning,
            stacklevel=3,
        )
        return TornTail(self.path, side, len(tail))

    def _write_side_file(self, tail: bytes) -> Path:
        base = f"{self.path.name}.torn-{utc_stamp(now_ms())}"
        for attempt in range(1000):
            side = self.path.with_name(base if attempt == 0 else f"{base}-{attempt}")
            try:
                fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
            except FileExistsError:
                continue
            except OSError as err:
                raise StoreError(
                    f"{self.path}: cannot save the torn last line to {side}: {err}; "
                    "the session file was not modified"
                ) from err
            try:
                with io.FileIO(fd, "w", closefd=True) as f:
                    _write_fully(f.fileno(), tail)
                    os.fsync(f.fileno())
                _fsync_dir(side.parent)
            except OSError as err:
                raise StoreError(
                    f"{self.path}: cannot save the torn last line to {side}: {err}; "
                    "the session file was not modified"
                ) from err
            return side
        raise StoreError(f"{self.path}: too many side files named {base}-*; remove old ones")

    # ----------------------------------------------------------------- writing

    def append(self, objs: Sequence[dict[str, Any]]) -> None:
        """Append one batch of objects, one line each, durably (see ``durability``).

        Either the whole batch is in the file when this returns, or :class:`StoreError`
        is raised and the file is back at its previous length. Raises
        :class:`ReadOnlyError` on a read-only store and :class:`EventError` (nothing
        written) for an object that is not a JSON-serialisable dict or whose ``seq`` is not
        the next one (line *n*, counting from 0, holds seq *n*).
        """
        if self.read_only:
            raise ReadOnlyError(
                f"{self.path}: opened read-only; open it with read_only=False to append "
                "(only one writer at a time)"
            )
        payload = _encode_batch(objs)
        with self._mutex:
            if self._held is not None:
                self._append_deferred(objs, payload, hold=False)
                return
            file = self._file
            if self._broken is not None:  # checked first: a forked child's store has no file
                raise StoreError(self._broken)
            if file is None:
                raise StoreError(f"{self.path}: the store is closed; open it again to append")
            if self._torn:
                raise StoreError(
                    f"{self.path}: the file ends with an incomplete line; call load() first "
                    "so it is moved to a side file before new lines are appended"
                )
            if not payload:
                return
            fd = file.fileno()
            if self._lines is None:  # opened without load(): count the lines once
                self._lines = self._read_all().count(b"\n")
            self._check_seqs(objs, self._lines)
            start = self._size
            try:
                _write_fully(fd, payload)
                if self.durability == "fsync":
                    os.fsync(fd)
            except BaseException as err:
                rolled_back = self._roll_back(fd, start)
                if not isinstance(err, OSError):
                    raise  # KeyboardInterrupt and the like: the batch is gone, say nothing more
                if rolled_back:
                    raise StoreError(
                        f"{self.path}: append failed ({err}); the file was truncated back to "
                        "its previous length, nothing from this batch was kept"
                    ) from err
                raise StoreError(self._broken or str(err)) from err
            self._size = start + len(payload)
            self._lines += len(objs)

    def hold(self, objs: Sequence[dict[str, Any]]) -> None:
        """Append a batch that need not create the file: a deferred store whose file does not
        exist yet keeps it in memory for the :meth:`append` that creates it (same checks);
        any other store appends it at once."""
        payload = _encode_batch(objs)
        with self._mutex:
            if self._held is not None:
                self._append_deferred(objs, payload, hold=True)
                return
        self.append(objs)

    def _append_deferred(self, objs: Sequence[dict[str, Any]], payload: bytes, hold: bool) -> None:
        """A deferred store's append: hold the batch, or create the file with every held line
        and this batch (the file is removed again if that write fails)."""
        held, lines = self._held, self._lines or 0
        assert held is not None
        if self._broken is not None or self._closed:
            raise StoreError(self._broken or f"{self.path}: the store is closed")
        self._check_seqs(objs, lines)
        if hold:
            held.append(payload)
            self._lines = lines + len(objs)
            return
        data = b"".join([*held, payload])
        file = _new_file(self.path, self.durability)
        try:
            _write_fully(file.fileno(), data)
            if self.durability == "fsync":
                os.fsync(file.fileno())
        except BaseException as err:
            self.path.unlink(missing_ok=True)  # while still holding its lock
            file.close()
            if not isinstance(err, OSError):
                raise
            raise StoreError(
                f"{self.path}: cannot write the new session file ({err}); it was removed"
            ) from err
        self._file, self._held = file, None
        self._size, self._lines = len(data), lines + len(objs)

    def _check_seqs(self, objs: Sequence[dict[str, Any]], next_seq: int) -> None:
        """Refuse a batch that does not continue the file's seqs (nothing is written)."""
        for index, obj in enumerate(objs):
            seq = obj.get("seq")
            if type(seq) is not int or seq != next_seq + index:
                raise EventError(
                    f"{self.path}: batch[{index}].seq: expected {next_seq + index} (line "
                    f"{next_seq + index + 1} of the file; seqs are dense and in file order), "
                    f"got {seq!r}; nothing from this batch was written"
                )

    def _roll_back(self, fd: int, size: int) -> bool:
        try:
            os.ftruncate(fd, size)
            if self.durability == "fsync":
                os.fsync(fd)
        except OSError as err:
            self._broken = (
                f"{self.path}: an append failed and truncating the file back to {size} bytes "
                f"also failed ({err}); the file may end with part of that batch. Close this "
                "store and open the session again to recover it."
            )
            return False
        return True


# --------------------------------------------------------------------------- helpers


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many containers that are all kept (collecting
    them costs as much as parsing and frees nothing; opening a 100 MB log takes half the time).

    Afterwards they age through the generations like any other object. Moving them to the
    oldest one at once (``gc.freeze()``, ``gc.unfreeze()``) would spare the young collections
    a scan, but the collector would not count them towards its next full collection, so a
    closed session's cycles would outlive it until an explicit ``gc.collect()``."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _check_durability(durability: str) -> None:
    if durability not in _DURABILITIES:
        raise ConfigError("durability", "'fsync' or 'flush'", durability)


def _new_file(path: Path, durability: Durability) -> io.FileIO:
    """Create the session file ``path`` (and its directory), locked for this writer."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"{path}: cannot create its directory: {err}") from err
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE
        )
    except FileExistsError:
        raise StoreError(_exists_message(path)) from None
    except OSError as err:
        raise StoreError(f"{path}: cannot create the session file: {err}") from err
    file = io.FileIO(fd, "r+", closefd=True)
    try:
        lock_exclusive(file, path)
        if durability == "fsync":
            _fsync_dir(path.parent)
    except BaseException:
        file.close()
        raise
    return file


def _exists_message(path: Path) -> str:
    return (
        f"{path}: already exists; Dashr.open({str(path)!r}) continues it, or choose a "
        "new path (Dashr.create() without one makes a new file in $DASHR_HOME/sessions)"
    )


def _missing_message(path: Path) -> str:
    return f"{path}: no such session file; Dashr.create({str(path)!r}) starts a new session there"


def _fsync_dir(directory: Path) -> None:
    """Make a new directory entry durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data itself is synced
    finally:
        os.close(fd)


def _write_fully(fd: int, payload: bytes) -> None:
    """One ``write`` call for the whole payload; more only if the OS accepts part of it."""
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _encode_batch(objs: Sequence[dict[str, Any]]) -> bytes:
    encode = _ENCODER.encode
    parts: list[bytes] = []
    for index, obj in enumerate(objs):
        if type(obj) is not dict:
            raise EventError(
                f"batch[{index}]: expected a dict (one JSON object per line), "
                f"got {type(obj).__name__}"
            )
        try:
            line = encode(obj)
            parts.append(line.encode("utf-8"))
        except (TypeError, ValueError) as err:  # UnicodeEncodeError is a ValueError
            raise EventError(f"batch[{index}]: not storable as JSON: {err}") from err
    if not parts:
        return b""
    parts.append(b"")
    return b"\n".join(parts)


# json.dumps(obj, ensure_ascii=False, separators=(",", ":")), built once; NaN and the
# infinities are refused because they are not JSON and other readers reject them.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
