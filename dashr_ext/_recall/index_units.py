"""The pure parts of the cross-session search index (``dashr search --all``).

* :func:`units_of`: the searchable units of a run of complete log lines — one per message
  event, its text exactly what ``history_search`` searches (the decoded body, normalised by
  :func:`~.search.normalize`), so the index and the per-session search agree by construction.
* :func:`line_problem`: why a line still without a newline cannot be a log's (no session
  header at the start of a file, longer than :data:`MAX_LINE_BYTES`), so reading stops there.
* :func:`plan_update`: what a file's stat and recorded state say to do with it (skip, read the
  appended bytes, or index it again from the start).
* :func:`fts_query`: the FTS5 ``MATCH`` expression that narrows to the rows that may hold a
  normalised phrase, or None when the index cannot narrow (the query then scans the stored
  text); a literal check confirms every row either way.
* :func:`fts_form`: the text FTS5 is given for a unit's text or a phrase. SQLite mishandles
  two kinds of character: a NUL ends what the trigram tokenizer reads of a text and what the
  query parser reads of a ``MATCH`` string, and a lone surrogate is no UTF-8 at all. Both
  become :data:`PLACEHOLDER`, the same way in texts and phrases, so the index still narrows
  to a superset of the rows holding a phrase; the unit's exact text is stored beside
  (:func:`exact_bytes`) for the literal check.

No SQLite here: :mod:`.index` is the shell around these.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Literal

from .._catalog import HEAD_BYTES
from .._events import SURFACE_TYPES, Event
from ..errors import EventError
from .render import event_body
from .search import normalize

__all__ = [
    "IDENTITY_BYTES",
    "MAX_LINE_BYTES",
    "MAX_TRIGRAMS",
    "PLACEHOLDER",
    "TOKENIZERS",
    "BadLine",
    "Parsed",
    "Recorded",
    "Stat",
    "Unit",
    "digest",
    "exact_bytes",
    "exact_text",
    "fts_form",
    "fts_query",
    "line_problem",
    "plan_update",
    "quote",
    "units_of",
]

TOKENIZERS = {
    "trigram": "tokenize='trigram', detail=none",
    "trigram-full": "tokenize='trigram'",
    "unicode61": "tokenize='unicode61'",
}
"""FTS5 table options per index kind. ``trigram`` (the default) keeps no positions: a query
asks for the phrase's trigrams and the literal check does the rest (docs/search-index.md has
the measurements that chose it)."""
MAX_TRIGRAMS = 24
"""Most trigrams of a long phrase a query asks for (spread over the phrase)."""
IDENTITY_BYTES = 4096
"""Bytes at the head and before the indexed end that identify a file between updates."""
MAX_LINE_BYTES = 64 << 20
"""Longest line indexed (the bridge's largest request too); a longer one, or a torn tail
that long, leaves the file out of the index, named on a ``skipped`` line."""
_HEADER_START = b'{"seq":0,"type":"session/header"'
PLACEHOLDER = "\ufffd"
"""What FTS5 is given in place of a NUL or a lone surrogate (:func:`fts_form`)."""
_HEADER = "session/header"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Unit:
    """One searchable message event: its seq and its normalised search text."""

    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """The units of a run of complete lines and where the run ended."""

    units: list[Unit]
    end: int
    """Absolute byte offset just after the last complete line (a torn tail is left out)."""
    lines: int
    """Complete lines read."""
    last_seq: int | None
    session_id: str | None
    """The header's ``sessionId`` when the run holds line 1."""


class BadLine(Exception):
    """A complete line that is not an event (or a first line that is not a session header)."""

    def __init__(self, lineno: int, reason: str) -> None:
        super().__init__(f"line {lineno}: {reason}")
        self.lineno = lineno
        self.reason = reason


def units_of(data: bytes, base: int, lineno: int) -> Parsed:
    """The units of the complete lines of ``data``.

    ``data`` starts at byte ``base`` of the file, at line ``lineno`` (1-based); bytes after
    the last newline are a line still being written and are left for the next update.
    Raises :class:`BadLine` for a line the session's own replay would refuse to read.
    """
    cut = data.rfind(b"\n") + 1
    units: list[Unit] = []
    last_seq: int | None = None
    session_id: str | None = None
    n = lineno
    start = 0
    while start < cut:
        stop = data.index(b"\n", start)
        event = _event(data[start:stop], n)
        if n == 1:
            if event.type != _HEADER:
                raise BadLine(1, f"not a session file: the first event is {event.type!r}")
            session_id = str(event.data.get("sessionId"))
        if event.type in SURFACE_TYPES:
            units.append(Unit(event.seq, normalize(event_body(event, decoded=True))))
        last_seq = event.seq
        n += 1
        start = stop + 1
    return Parsed(units, base + cut, n - lineno, last_seq, session_id)


def line_problem(lineno: int, size: int, head: bytes) -> str | None:
    """Why line ``lineno``, ``size`` bytes so far and no newline, starting with ``head``,
    cannot be a log's line; None while it still may be.

    A first line not ended within :data:`HEAD_BYTES` is a session header only when it starts
    as this package writes one (``{"seq":0,"type":"session/header"``), as ``%dashr
    sessions`` reads it.
    """
    if lineno == 1 and size >= HEAD_BYTES and not head.startswith(_HEADER_START):
        return f"not a session file: no session header in its first {HEAD_BYTES >> 20} MiB"
    if size > MAX_LINE_BYTES:
        return f"longer than {MAX_LINE_BYTES >> 20} MiB without a newline (not indexed)"
    return None


def _event(raw: bytes, lineno: int) -> Event:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadLine(lineno, f"not valid UTF-8 ({exc.reason})") from None
    except (ValueError, RecursionError):
        raise BadLine(lineno, "not a JSON object") from None
    try:
        return Event.from_json(obj)
    except EventError as exc:
        raise BadLine(lineno, str(exc)) from None


def fts_form(text: str) -> str:
    """``text`` with each NUL and lone surrogate made :data:`PLACEHOLDER` (the text itself
    when it has none): what FTS5 indexes and what a phrase is looked up as."""
    if "\x00" not in text and (text.isascii() or _UNSAFE.search(text) is None):
        return text
    return _UNSAFE.sub(PLACEHOLDER, text)


def exact_bytes(text: str, form: str) -> bytes | None:
    """What is stored beside ``form`` (``fts_form(text)``): None when it is ``text`` itself,
    else ``text`` in UTF-8 (lone surrogates kept), which SQLite keeps as it is."""
    return None if form is text else text.encode("utf-8", "surrogatepass")


def exact_text(form: str, exact: bytes | None) -> str:
    """The unit's text from what the index stores (:func:`exact_bytes`)."""
    return form if exact is None else exact.decode("utf-8", "surrogatepass")


def digest(data: bytes) -> str:
    """A short fingerprint of identity bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Stat:
    """What one ``stat`` of a session file says."""

    dev: int
    ino: int
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the index recorded of a session file at its last update."""

    stat: Stat
    indexed_bytes: int
    """Bytes of complete lines indexed (the offset the next update reads from)."""


def plan_update(recorded: Recorded | None, now: Stat) -> Literal["skip", "append", "reindex"]:
    """``skip`` an unchanged file, read what was ``append``-ed (after checking the identity
    bytes), or ``reindex`` a file that is new, shrank, or is another file (device, inode)."""
    if recorded is None:
        return "reindex"
    before = recorded.stat
    if (now.dev, now.ino) != (before.dev, before.ino) or now.size < recorded.indexed_bytes:
        return "reindex"
    if now == before:
        return "skip"
    return "append"


def quote(text: str) -> str:
    """``text`` as an FTS5 string (double quotes doubled): matched as a phrase of its tokens."""
    return '"' + text.replace('"', '""') + '"'


_WORD = re.compile(r"[^\W_]+")


def fts_query(phrase: str, tokenizer: str) -> str | None:
    """The ``MATCH`` expression for rows that may contain ``phrase`` (already normalised).

    ``trigram``: every trigram of the phrase (at most :data:`MAX_TRIGRAMS`, spread over it),
    which the index holds without positions; ``trigram-full``: the phrase itself (FTS5 matches
    it as a substring). A phrase shorter than three characters has no trigram: None.
    ``unicode61`` indexes whole words, so
    only words that cannot be cut by the phrase's ends narrow: the first word when the phrase
    starts inside a word is left out, the last becomes a prefix query when the phrase ends in
    one; None when no word is left. Either way the result is a superset of the rows holding the
    phrase, and the literal check decides.
    """
    if tokenizer.startswith("trigram"):
        if len(phrase) < 3:
            return None
        if tokenizer == "trigram-full":
            return quote(phrase)
        grams = list(dict.fromkeys(phrase[i : i + 3] for i in range(len(phrase) - 2)))
        if len(grams) > MAX_TRIGRAMS:
            step = (len(grams) - 1) / (MAX_TRIGRAMS - 1)
            grams = [grams[round(i * step)] for i in range(MAX_TRIGRAMS)]
        return " AND ".join(quote(g) for g in grams)
    terms: list[str] = []
    for found in _WORD.finditer(phrase):
        if found.start() == 0:
            continue  # may be the tail of a longer word
        prefix = "*" if found.end() == len(phrase) else ""
        terms.append(quote(found.group()) + prefix)
    return " AND ".join(terms) or None
