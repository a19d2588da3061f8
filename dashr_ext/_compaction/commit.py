"""Step 4 of a pass, ``commit``, and the protocol's bookkeeping on open (SPEC §4.1, §4.2, §7).

The I/O end of a pass: check that what it summarized is still on the surface as it read it
(:func:`check_span_current`), write the archive entry (undoable, so a failed commit leaves
the archive equal to the one rebuilt from the log), append the closing batch, and add the
post-compaction pointer. On open, the same protocol closes passes a crashed process left
open and rebuilds the archive from the log.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from .. import _archive as archive_mod
from .._checkpoints import Checkpoint, checkpoint_of
from .._events import EventSpec, Replace
from .._payloads import (
    POINTER_SOURCE,
    StartPayload,
    end_payload,
    start_payload,
    summary_payload,
)
from .._pointer import pointer_text
from .._pruned import pruned_info
from .._session import Session
from ..errors import CompactionError, CompactionWarning, DashrError, SurfaceError
from .compose import Composition, checkpoint_specs
from .plan import Region

__all__ = [
    "SPAN_CHANGED",
    "ArchiveUndo",
    "Pointers",
    "check_span_current",
    "close_orphan_passes",
    "commit_pass",
    "rebuild_archive",
    "restore_archive",
    "write_archive",
]

_MISSING: Any = object()

ArchiveUndo = dict[str, Any]
"""Checkpoint id -> the value a pass's archive write replaced (``_MISSING``: no value)."""


SPAN_CHANGED = "the surface changed while the pass was summarizing"
"""The error a pass ends with when the nodes it summarized are no longer where it read them."""


def check_span_current(session: Session, regions: Sequence[Region]) -> None:
    """Raise :class:`CompactionError` unless the nodes of ``regions`` are still current and
    contiguous, in the order the pass read them.

    Called holding the session's lock, just before the commit. Nodes recorded after the span
    while the pass summarized do not count: the checkpoint takes the span's place and they
    stay after it, in order. A node of the span replaced (a late tool result taking its
    synthetic one's place, any replace appended through the session) or anything landing
    between two of its nodes does: the summary no longer describes what it would shadow.
    """
    seqs = [seq for region in regions for seq in region.seqs]
    try:
        first = session.position(seqs[0]) if seqs else 0
        contiguous = all(session.position(seq) == first + i for i, seq in enumerate(seqs))
    except SurfaceError:  # a node of the span is no longer current
        contiguous = False
    if not contiguous:
        raise CompactionError(SPAN_CHANGED)


def write_archive(
    archive: MutableMapping[str, Any],
    checkpoint: str,
    entry: dict[str, Any],
    max_bytes: int | None,
    undo: ArchiveUndo,
) -> None:
    """Store ``entry`` and evict past the cap; ``undo`` records every value replaced."""
    undo[checkpoint] = archive.get(checkpoint, _MISSING)
    archive[checkpoint] = entry
    for cid in archive_mod.apply_cap(archive, max_bytes):
        undo.setdefault(cid, archive[cid])
        archive[cid] = archive_mod.evicted_stub(archive[cid])


def commit_pass(
    session: Session,
    archive: MutableMapping[str, Any],
    composition: Composition,
    *,
    start_seq: int,
    archive_max_bytes: int | None,
    undo: ArchiveUndo,
    close: bool = True,
) -> str | None:
    """Write the archive entry, then append the pass's closing batch.

    Returns the archive error when the archive write failed: the pass still commits (the
    log keeps every original), its footer just leaves the archive marker out. If the append
    fails, ``undo`` lets the caller put the archive back as the log has it.
    """
    archive_error: str | None = None
    try:
        write_archive(archive, composition.checkpoint, composition.entry, archive_max_bytes, undo)
    except Exception as exc:  # any archive failure degrades, never blocks the pass
        restore_archive(archive, undo)
        archive_error = f"{type(exc).__name__}: {exc}"
    session.append(
        checkpoint_specs(composition, start_seq=start_seq, archive_error=archive_error, close=close)
    )
    return archive_error


def restore_archive(archive: MutableMapping[str, Any], undo: ArchiveUndo) -> None:
    """Put back what a pass's archive write replaced (newest change first)."""
    for key, value in reversed(list(undo.items())):
        if value is _MISSING:
            archive.pop(key, None)
        else:
            archive[key] = value
    undo.clear()


def rebuild_archive(
    session: Session,
    max_bytes: int | None,
    archive: MutableMapping[str, Any],
    extra: Mapping[int, tuple[str, dict[str, Any]]] | None = None,
) -> None:
    """Rebuild the archive of every committed pass from the log (identical to the live one).

    Checkpoint entries come from ``compaction/summary`` events, pruned originals' entries
    (``p<seq>``) from the pruned nodes, in log order as they were written. ``extra`` maps a
    seq to an entry written at that point of the log by another writer (turn memory's
    ``t<seq>``), so the cap evicts in the order the live archive did.
    """
    committed = {checkpoint_of(e, session.events) for e in session.events} - {None}
    starts: dict[str, StartPayload] = {}
    extra = extra or {}
    for event in session.events:
        if event.seq in extra:
            key, entry = extra[event.seq]
            archive[key] = entry
            for cid in archive_mod.apply_cap(archive, max_bytes):
                archive[cid] = archive_mod.evicted_stub(archive[cid])
        if event.type == "compaction/start":
            starts[start_payload(event)["compactionId"]] = start_payload(event)
            continue
        info = pruned_info(event)
        if info is not None:
            if isinstance(info.get("archive"), str):
                start = starts.get(str(info.get("compactionId")))
                archive[info["archive"]] = archive_mod.entry_for_pruned(
                    session.event(int(info["seq"])),
                    key=info["archive"],
                    at_ms=event.time,
                    tokens=int(info["tokens"]),
                    engine=start["engine"] if start else "",
                    session_id=session.id,
                    archive_reasoning=bool(start.get("archiveReasoning", True)) if start else True,
                )
                for cid in archive_mod.apply_cap(archive, max_bytes):
                    archive[cid] = archive_mod.evicted_stub(archive[cid])
            continue
        if event.type != "compaction/summary":
            continue
        data = summary_payload(event)
        if data["checkpoint"] not in committed or "error" in data["archive"]:
            continue
        span = [session.event(q) for q in data["shadowedSeqs"]]
        archive[data["checkpoint"]] = archive_mod.entry_for_summary(
            event,
            span,
            session_id=session.id,
            archive_reasoning=bool(data.get("archiveReasoning", True)),
        )
        for cid in archive_mod.apply_cap(archive, max_bytes):
            archive[cid] = archive_mod.evicted_stub(archive[cid])


def close_orphan_passes(session: Session) -> None:
    """Close the passes a crashed process left open (a ``compaction/start`` without an end).

    A pass whose checkpoint node made it to disk committed (a crash cut only its closing
    event) and is completed; any other is closed as failed: its surface never changed.
    """
    open_passes: dict[str, int] = {}
    for event in session.events:
        if event.type == "compaction/start":
            open_passes[start_payload(event)["compactionId"]] = event.seq
        elif event.type == "compaction/end":
            open_passes.pop(end_payload(event)["compactionId"], None)
    if not open_passes:
        return  # the common case: no node needs looking at
    committed: set[str] = set()
    for event in session.events:
        if event.type in ("compaction/start", "compaction/end"):
            continue
        if checkpoint_of(event) is not None:
            committed.add(str(event.message.source.get("compactionId")))
        elif (info := pruned_info(event)) is not None:
            committed.add(str(info.get("compactionId")))  # a prune batch cut short
    for compaction_id, seq in open_passes.items():
        if compaction_id in committed:
            warnings.warn(
                f"session {session.id}: compaction pass {compaction_id} (seq {seq}) committed "
                "but was not closed; closing it",
                stacklevel=4,
            )
            session.append_log("compaction/end", {"compactionId": compaction_id})
            continue
        warnings.warn(
            f"session {session.id}: compaction pass {compaction_id} (seq {seq}) never finished; "
            "closing it as failed (the surface was not changed)",
            stacklevel=4,
        )
        session.append_log(
            "compaction/end",
            {
                "compactionId": compaction_id,
                "error": "interrupted: the process ended before the pass finished",
            },
        )


class Pointers:
    """Which checkpoints have had their pointer; adds the missing ones (SPEC §8).

    One short ``context/message`` per new current checkpoint, deferred while a tool call
    still waits for its result so it never lands between a call and its result. A
    checkpoint superseded before its pointer was written gets none (the newer one's covers it).
    At most one pointer is live: a new one replaces the previous pointer in place when that
    one is still on the surface (else it is appended), so the request never names a
    replaced checkpoint twice.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        pointers = [
            e
            for e in session.events
            if e.type == "context/message" and e.message.source_kind == POINTER_SOURCE
        ]
        self._pointed: set[str] = {str(e.message.source.get("checkpoint")) for e in pointers}
        self._live: int | None = pointers[-1].seq if pointers else None
        self._settled = 0
        """Every checkpoint before this index has its pointer or needs none: O(1) per request."""

    def inject(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Append the pointers ``checkpoints`` still lack; a failure warns and retries later.

        ``checkpoints`` is the session's checkpoint index (oldest first; it only grows).
        """
        with self.session.lock:  # no tool call may start between the check and the append
            if self._settled < len(checkpoints):
                self._inject(checkpoints)

    def _inject(self, checkpoints: Sequence[Checkpoint]) -> None:
        if self.session.read_only or self.session.pending_tool_calls():
            return
        for i in range(self._settled, len(checkpoints)):
            cp = checkpoints[i]
            if cp.id in self._pointed:
                self._settled = i + 1
                continue
            if cp.superseded_by is not None or cp.role in ("stub", "directory") or (
                cp.form != "full"
            ):
                # Stubs and directories carry their own footers, and so does a compact
                # checkpoint (one live statement of how to recall); the state checkpoint of
                # the same pass gets the pointer.
                self._pointed.add(cp.id)
                self._settled = i + 1
                continue
            live = self._live if self._live is not None else -1
            in_place = self.session.is_current(live)
            pointer = EventSpec(
                "context/message",
                {
                    "message": {
                        "role": "context",
                        "source": {"kind": POINTER_SOURCE, "checkpoint": cp.id},
                        "content": [{"type": "text", "text": pointer_text(cp)}],
                    }
                },
                Replace(live, live) if in_place else "append",
                (live,) if in_place else None,
            )
            try:
                (event,) = self.session.append([pointer])
            except DashrError as exc:  # the pass itself committed: warn, retry next request
                warnings.warn(
                    f"could not add the pointer for checkpoint {cp.id}: {exc}",
                    CompactionWarning,
                    stacklevel=5,
                )
                return
            self._pointed.add(cp.id)
            self._live = event.seq
            self._settled = i + 1
