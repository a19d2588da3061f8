"""Search across sessions: an SQLite FTS5 index of a directory's session logs.

The index lives next to the logs, in ``<dir>/.dashr-index.sqlite3``, and is derived from them
alone: deleting it loses nothing (the next search builds it again), and a file that is not an
index of this version (garbage, truncated, another schema or tokenizer) is replaced by a fresh
one built from the logs. Each search first brings the index up to date — a file whose stat is
unchanged is not opened; an appended file is read only from the byte its last update stopped
at (after checking the bytes that identify it); a file that shrank or is another file is
indexed again — then narrows with FTS5 and confirms every candidate with the literal check of
``history_search`` on the same normalised text. Checkpoint owners, visibility and snippets
come from the session itself, opened read-only only when one of its hits is shown.
docs/search-index.md has the design, the schema and the measurements.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .._catalog import HEAD_BYTES
from .._checkpoints import is_checkpoint
from .._config import RecallConfig
from .._session import Session
from ..errors import ConfigError, RecallError, SearchIndexError, StoreError
from .index_files import describe_error, describe_mode, list_sessions
from .index_hits import SessionHit, render_all
from .index_units import (
    IDENTITY_BYTES,
    TOKENIZERS,
    BadLine,
    Recorded,
    Stat,
    digest,
    exact_bytes,
    exact_text,
    fts_form,
    fts_query,
    line_problem,
    plan_update,
    units_of,
)
from .queries import Recall
from .result import RecallResult
from .search import normalize

__all__ = [
    "INDEX_FILE",
    "Found",
    "SessionIndex",
    "UpdateStats",
    "check_fts5",
    "find_all",
    "search_all",
]

INDEX_FILE = ".dashr-index.sqlite3"
"""The index's file name in the session directory."""
SCHEMA_VERSION = "2"
READ_CHUNK = 16 << 20
"""Bytes of a log read at a time while indexing."""
BUSY_SECONDS = 30.0
"""How long to wait for another process's write to the index."""
_FTS_MODULE = "fts5"
_SEQ_BITS = 32
_SEQ_MASK = (1 << _SEQ_BITS) - 1


def _schema(tokenizer: str) -> str:
    return f"""
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE sessions(
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        session_id TEXT,
        dev INTEGER NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        indexed_bytes INTEGER NOT NULL, lines INTEGER NOT NULL, last_seq INTEGER,
        units INTEGER NOT NULL, head TEXT NOT NULL, tail TEXT NOT NULL,
        problem TEXT
    );
    CREATE VIRTUAL TABLE texts USING {_FTS_MODULE}(text, exact UNINDEXED, {TOKENIZERS[tokenizer]});
    INSERT INTO meta VALUES ('format', 'dashr-index'), ('schema', '{SCHEMA_VERSION}'),
        ('tokenizer', '{tokenizer}');
    """


def check_fts5(tokenizer: str = "trigram") -> None:
    """Raise :class:`SearchIndexError` unless this Python's SQLite has FTS5 and ``tokenizer``."""
    con = sqlite3.connect(":memory:")
    try:
        con.execute(f"CREATE VIRTUAL TABLE probe USING {_FTS_MODULE}(x, {TOKENIZERS[tokenizer]})")
    except sqlite3.Error as exc:
        raise SearchIndexError(
            f"searching across sessions needs SQLite's FTS5 with its {tokenizer.split('-')[0]} "
            "tokenizer "
            f"(SQLite 3.34 or later, built with FTS5); this Python's sqlite3 module has SQLite "
            f"{sqlite3.sqlite_version}, which says: {exc}"
        ) from None
    finally:
        con.close()


@dataclass
class UpdateStats:
    """What an update read: log bytes per file name, the identity checks, what was redone."""

    read: dict[str, int] = field(default_factory=dict)
    """Log bytes read and indexed, per file name (identity checks not included)."""
    checked: int = 0
    """Bytes read to check that an appended file is the file indexed before."""
    reindexed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """``*.jsonl`` entries not read, by name, with why (not regular files, unreadable)."""
    rebuilt: bool = False
    """True when the index file was missing, foreign or corrupt and was made anew."""


@dataclass(frozen=True)
class SessionRow:
    name: str
    path: Path
    mtime_ns: int
    units: int
    problem: str | None


class SessionIndex:
    """The index of one directory's session files (``*.jsonl``); close it when done."""

    def __init__(
        self, directory: Path, *, path: Path | None = None, tokenizer: str = "trigram"
    ) -> None:
        if tokenizer not in TOKENIZERS:
            raise ConfigError("tokenizer", f"one of {', '.join(TOKENIZERS)}", tokenizer)
        check_fts5(tokenizer)
        self.directory = Path(directory)
        self.path: Path | None = path if path is not None else self.directory / INDEX_FILE
        self.tokenizer = tokenizer
        self.rebuilt = False
        self.in_memory = False
        self._con = self._connect()

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> SessionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the file

    def _connect(self) -> sqlite3.Connection:
        con = self._open_if_ours()
        return con if con is not None else self._rebuild(None)

    def _open_if_ours(self) -> sqlite3.Connection | None:
        """A connection to the index file when it is an index of this kind, else None."""
        if self.path is None or not self.path.exists():
            return None
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
        except sqlite3.DatabaseError:
            return None
        try:
            if self._is_ours(con):
                return con
        except sqlite3.OperationalError as exc:
            if _busy(exc):  # another process is writing it: not a reason to rebuild
                con.close()
                raise self._busy_error() from None
        except sqlite3.DatabaseError:
            pass
        con.close()
        return None

    def _is_ours(self, con: sqlite3.Connection) -> bool:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        con.execute("SELECT count(*) FROM sessions").fetchone()
        return meta == {
            "format": "dashr-index",
            "schema": SCHEMA_VERSION,
            "tokenizer": self.tokenizer,
        }

    def _rebuild(self, bad: int | None) -> sqlite3.Connection:
        """A fresh, empty index file put in place atomically (temp file, then rename); in
        memory when the directory cannot hold one.

        Rebuilds take turns (a lock on ``<index>.lock``): one that waited uses the file the
        other made, unless it is the file ``bad`` (an inode) found corrupt in use.
        """
        self.rebuilt = True
        if self.path is not None:
            tmp: Path | None = None
            try:
                with _rebuild_lock(self.path):
                    if self.path.exists() and self.path.stat().st_ino != bad:
                        con = self._open_if_ours()  # made while this one waited
                        if con is not None:
                            return con
                    fd, name = tempfile.mkstemp(
                        prefix=f"{self.path.name}.", suffix=".tmp", dir=self.path.parent
                    )
                    os.close(fd)
                    tmp = Path(name)
                    con = sqlite3.connect(tmp)  # an empty file is an empty database
                    con.executescript(_schema(self.tokenizer))
                    con.close()
                    os.replace(tmp, self.path)
                    return sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
            except (OSError, sqlite3.Error):
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
        self.path = None
        self.in_memory = True
        con = sqlite3.connect(":memory:", isolation_level=None)
        con.executescript(_schema(self.tokenizer))
        return con

    # ------------------------------------------------------------------ update

    def update(self) -> UpdateStats:
        """Bring the index up to date with the directory's session files."""
        stats = UpdateStats()
        for attempt in (1, 2):
            try:
                self._update(stats)
                break
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                    raise self._busy_error() from None
                if attempt == 2:
                    raise SearchIndexError(
                        f"the search index {self.path or '(in memory)'} cannot be used even "
                        f"after rebuilding it ({exc})"
                    ) from None
                self._recover(stats)
        stats.rebuilt = stats.rebuilt or self.rebuilt
        return stats

    def _recover(self, stats: UpdateStats) -> None:
        """The index file turned out corrupt while in use: make it anew and start over."""
        self._con.close()
        bad = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                bad = self.path.stat().st_ino
        self._con = self._rebuild(bad)
        stats.read.clear()
        stats.reindexed.clear()
        stats.skipped.clear()
        stats.rebuilt = True

    def _busy_error(self) -> SearchIndexError:
        return SearchIndexError(
            f"the search index {self.path} is busy: another process has been writing it for "
            f"{BUSY_SECONDS:.0f} s; try again (or delete the file: it is rebuilt from the logs)"
        )

    def _update(self, stats: UpdateStats) -> None:
        con = self._con
        listing = list_sessions(self.directory)
        stats.skipped.update(listing.skipped)
        on_disk = listing.files
        seen = {
            name: (sid, Recorded(Stat(dev, ino, size, mtime), indexed))
            for sid, name, dev, ino, size, mtime, indexed in con.execute(
                "SELECT id, name, dev, ino, size, mtime_ns, indexed_bytes FROM sessions"
            )
        }
        known = {name: sid for name, (sid, _) in seen.items()}
        for name in sorted(set(known) - set(on_disk)):
            with _transaction(con):
                self._forget(known[name])
                con.execute("DELETE FROM sessions WHERE id = ?", (known[name],))
            stats.removed.append(name)
        for name, path in on_disk.items():
            try:
                st = os.stat(path)
            except OSError as exc:  # gone (or made unreadable) since it was listed
                if os.path.lexists(path):
                    stats.skipped[name] = describe_error(exc)
                continue
            now = Stat(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if name in seen and plan_update(seen[name][1], now) == "skip":
                continue  # unchanged: no transaction, the file is not opened
            with _transaction(con):
                self._update_one(name, path, now, stats)

    def _forget(self, sid: int) -> None:
        low = sid << _SEQ_BITS
        self._con.execute("DELETE FROM texts WHERE rowid BETWEEN ? AND ?", (low, low | _SEQ_MASK))

    def _update_one(self, name: str, path: Path, now: Stat, stats: UpdateStats) -> None:
        con = self._con
        row = con.execute(
            "SELECT id, dev, ino, size, mtime_ns, indexed_bytes, lines, units, head, tail "
            "FROM sessions WHERE name = ?",
            (name,),
        ).fetchone()  # read inside the write transaction: another updater's work counts
        recorded = Recorded(Stat(*row[1:5]), row[5]) if row is not None else None
        if plan_update(recorded, now) == "skip":
            return
        try:  # not blocking: a FIFO put in the file's place since it was listed
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            self._unreadable(name, row[0] if row is not None else None, describe_error(exc), stats)
            return
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                kind = f"{describe_mode(st.st_mode)}, not a regular file"
                self._unreadable(name, row[0] if row is not None else None, kind, stats)
                return
            now = Stat(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            plan = plan_update(recorded, now)
            if plan == "skip":
                return
            if plan == "append" and row is not None:
                head, tail = _identity(fh, row[5])
                stats.checked += len(head) + len(tail)
                if (digest(head), digest(tail)) != (row[8], row[9]):
                    plan = "reindex"
            if row is None:
                sid = con.execute(
                    "INSERT INTO sessions(name, dev, ino, size, mtime_ns, indexed_bytes, lines,"
                    " units, head, tail) VALUES (?, 0, 0, 0, 0, 0, 0, 0, '', '')",
                    (name,),
                ).lastrowid
                assert sid is not None
                start, lines, units = 0, 0, 0
            else:
                sid = row[0]
                start, lines, units = row[5], row[6], row[7]
                if plan == "reindex":
                    self._forget(sid)
                    stats.reindexed.append(name)
                    start, lines, units = 0, 0, 0
            self._read_new(fh, name, sid, now, start, lines, units, stats)

    def _unreadable(self, name: str, sid: int | None, why: str, stats: UpdateStats) -> None:
        """A listed file that cannot be opened: out of the index, named in the result."""
        stats.skipped[name] = why
        if sid is not None:
            self._forget(sid)
            self._con.execute("DELETE FROM sessions WHERE id = ?", (sid,))

    def _read_new(
        self,
        fh: BinaryIO,
        name: str,
        sid: int,
        now: Stat,
        start: int,
        lines: int,
        units: int,
        stats: UpdateStats,
    ) -> None:
        """Index the complete lines from byte ``start`` to the file's size at ``now``.

        Each byte is read once and looked at for a newline once. A file's first read is
        :data:`HEAD_BYTES`; a line without a newline that cannot be a log's
        (:func:`line_problem`: no session header at the start of a file, longer than
        ``MAX_LINE_BYTES``) ends the reading with a problem, so a huge file that is no
        session costs at most that much.
        """
        con = self._con
        fh.seek(start)
        line: list[bytes] = []  # the line after ``offset`` read so far, no newline yet
        line_bytes = 0
        offset = start
        read = 0
        problem: str | None = None
        session_id: str | None = None
        last_seq: int | None = None
        base = sid << _SEQ_BITS
        while offset + line_bytes < now.size:
            want = HEAD_BYTES if offset == 0 and not line else READ_CHUNK
            chunk = fh.read(min(want, now.size - offset - line_bytes))
            if not chunk:
                break
            read += len(chunk)
            if b"\n" not in chunk:
                line.append(chunk)
                line_bytes += len(chunk)
                why = line_problem(lines + 1, line_bytes, line[0])
                if why is not None:
                    problem = f"line {lines + 1}: {why}"
                    break
                continue
            data = b"".join([*line, chunk]) if line else chunk
            try:
                parsed = units_of(data, offset, lines + 1)
            except BadLine as bad:
                problem = f"line {bad.lineno}: {bad.reason}"
                break
            con.executemany(
                "INSERT INTO texts(rowid, text, exact) VALUES (?, ?, ?)",
                [(base | u.seq, *_stored(u.text)) for u in parsed.units],
            )
            units += len(parsed.units)
            lines += parsed.lines
            session_id = parsed.session_id or session_id
            last_seq = parsed.last_seq if parsed.last_seq is not None else last_seq
            rest = data[parsed.end - offset :]
            line, line_bytes = ([rest] if rest else []), len(rest)
            offset = parsed.end
        stats.read[name] = stats.read.get(name, 0) + read
        if problem is not None:  # the session cannot be replayed: nothing of it is searchable
            self._forget(sid)
            offset, lines, units = 0, 0, 0
        head, tail = _identity(fh, offset)
        con.execute(
            "UPDATE sessions SET dev = ?, ino = ?, size = ?, mtime_ns = ?, indexed_bytes = ?, "
            "lines = ?, units = ?, head = ?, tail = ?, problem = ?, "
            "session_id = coalesce(?, session_id), last_seq = coalesce(?, last_seq) "
            "WHERE id = ?",
            (
                now.dev,
                now.ino,
                now.size,
                now.mtime_ns,
                offset,
                lines,
                units,
                digest(head),
                digest(tail),
                problem,
                session_id,
                last_seq,
                sid,
            ),
        )

    # ------------------------------------------------------------------ query

    def sessions(self) -> list[SessionRow]:
        """The indexed files, newest first (last written first, then by name)."""
        rows = self._con.execute(
            "SELECT name, mtime_ns, units, problem FROM sessions ORDER BY mtime_ns DESC, name DESC"
        ).fetchall()
        return [SessionRow(n, self.directory / n, m, u, p) for n, m, u, p in rows]

    def candidates(self, phrase: str) -> dict[str, list[int]]:
        """Seqs whose normalised text contains ``phrase`` (normalised), ascending, per file."""
        looked_up = fts_form(phrase)
        expr = fts_query(looked_up, self.tokenizer)
        if expr is not None:
            cur = self._con.execute(
                "SELECT rowid, text, exact FROM texts WHERE texts MATCH ?", (expr,)
            )
        else:  # no trigram to look up: a scan of the stored text
            cur = self._con.execute(
                "SELECT rowid, text, exact FROM texts WHERE instr(text, ?) > 0", (looked_up,)
            )
        by_id: dict[int, list[int]] = {}
        for rowid, text, exact in cur:
            if phrase in exact_text(text, exact):  # the literal check of history_search
                by_id.setdefault(rowid >> _SEQ_BITS, []).append(rowid & _SEQ_MASK)
        names = dict(self._con.execute("SELECT id, name FROM sessions").fetchall())
        return {names[sid]: sorted(seqs) for sid, seqs in by_id.items() if sid in names}


def _stored(text: str) -> tuple[str, bytes | None]:
    """A unit's ``text`` and ``exact`` columns."""
    form = fts_form(text)
    return form, exact_bytes(text, form)


def _identity(fh: BinaryIO, end: int) -> tuple[bytes, bytes]:
    """The first and the last :data:`IDENTITY_BYTES` of the file's first ``end`` bytes."""
    fh.seek(0)
    head = fh.read(min(end, IDENTITY_BYTES))
    start = max(0, end - IDENTITY_BYTES)
    fh.seek(start)
    tail = fh.read(end - start)
    return head, tail


@contextlib.contextmanager
def _rebuild_lock(index: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``<index>.lock`` (a file left in place; POSIX only)."""
    if sys.platform == "win32":  # pragma: no cover
        yield
        return
    import fcntl

    fd = os.open(f"{index}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back on an exception): one writer at a time."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __enter__(self) -> None:
        self.con.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.con.execute("COMMIT")
        elif self.con.in_transaction:
            self.con.execute("ROLLBACK")


# --------------------------------------------------------------------------- the search


@dataclass
class Found:
    """The confirmed matches of one phrase across a directory's sessions."""

    phrase: str
    sessions: list[SessionRow]
    """Every indexed file, newest first."""
    matched: dict[str, list[int]]
    """Confirmed seqs per file name (a running step's seqs included until it is opened)."""
    stats: UpdateStats

    @property
    def scanned(self) -> int:
        return sum(s.units for s in self.sessions if s.problem is None)

    def hits(self, row: SessionRow, config: RecallConfig) -> list[SessionHit]:
        """The file's hits in its ``history_search`` order, read from the session itself.

        The seqs of a step running now are dropped (from :attr:`matched` too), as the
        session's own search drops them.
        """
        with Session.open(row.path, read_only=True) as session:
            recall = Recall(session, config)
            recall._sync()  # the owners: checkpoints and pruned originals
            running = session.executing_seqs()
            seqs = [s for s in self.matched.get(row.name, []) if s not in running]
            events = session.events
            seqs = [s for s in seqs if not is_checkpoint(events[s])] + [
                s for s in seqs if is_checkpoint(events[s])
            ]
            self.matched[row.name] = seqs
            return [SessionHit(row.name, recall._hit(s, self.phrase)) for s in seqs]


def _phrase(query: object) -> str:
    if not isinstance(query, str):
        raise RecallError(f"query: expected a phrase string, got {type(query).__name__} {query!r}")
    phrase = normalize(query)
    if not phrase:
        raise RecallError(
            "query: expected a non-empty phrase to search for (a case-insensitive literal "
            f"match), got {query!r}"
        )
    return phrase


def find_all(
    directory: Path, query: str, *, index_path: Path | None = None, tokenizer: str = "trigram"
) -> Found:
    """Update the directory's index, then the confirmed matches of ``query``."""
    phrase = _phrase(query)
    with SessionIndex(Path(directory), path=index_path, tokenizer=tokenizer) as index:
        stats = index.update()
        try:
            matched = index.candidates(phrase)
        except sqlite3.DatabaseError as exc:  # corrupt where the update did not look
            if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                raise index._busy_error() from None
            index._recover(stats)
            stats = index.update()
            matched = index.candidates(phrase)
        return Found(phrase, index.sessions(), matched, stats)


def search_all(
    directory: Path,
    query: str,
    *,
    limit: int | None = None,
    config: RecallConfig | None = None,
    index_path: Path | None = None,
    tokenizer: str = "trigram",
) -> RecallResult:
    """``history_search`` over every session file in ``directory``, through its index."""
    config = config if config is not None else RecallConfig()
    max_hits = config.search_max_hits
    if limit is None:
        limit = max_hits
    elif isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_hits:
        raise RecallError(f"limit: expected an integer in [1, {max_hits}], got {limit!r}")
    found = find_all(directory, query, index_path=index_path, tokenizer=tokenizer)
    good = [s for s in found.sessions if s.problem is None]
    skipped = [f"{s.name}: {s.problem}" for s in found.sessions if s.problem is not None]
    skipped += [f"{name}: {why}" for name, why in sorted(found.stats.skipped.items())]
    counts = {s.name: len(found.matched[s.name]) for s in good if s.name in found.matched}

    def hits() -> Iterator[SessionHit]:
        for row in good:
            if row.name not in counts:
                continue
            try:
                shown = found.hits(row, config)
            except (StoreError, OSError) as exc:
                skipped.append(f"{row.name}: {' '.join(str(exc).split())}")
                counts[row.name] = 0
                continue
            counts[row.name] = len(shown)
            yield from shown

    return render_all(
        query,
        sessions=len(good),
        scanned=found.scanned,
        counts=counts,
        hits=hits(),
        limit=limit,
        max_hits=max_hits,
        max_chars=config.read_max_chars,
        skipped=skipped,
    )
