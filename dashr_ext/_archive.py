"""The compaction archive (SPEC §7.1): one plain-data entry per checkpoint, and the size cap.

:func:`build_entry` files every message a checkpoint shadows into exactly one bucket; the
``file_ops`` bucket comes from :mod:`dashr_ext._fileops`, and the texts that point at an
entry from :mod:`dashr_ext._footers`. Everything here is a pure function of the log, so the
archive is rebuilt byte for byte when a session is replayed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeAlias

from ._events import Event, ImageBlock, Message, ReasoningBlock, TextBlock, render_image
from ._fileops import extract_file_ops
from ._payloads import ARCHIVE_VARIABLE, CHECKPOINT_SOURCE
from .errors import ConfigError, EventError

__all__ = [
    "ARCHIVE_VARIABLE",
    "BUCKETS",
    "MESSAGE_BUCKETS",
    "ArchiveEntry",
    "apply_cap",
    "bucket_counts",
    "build_entry",
    "entry_for_summary",
    "entry_size_bytes",
    "evicted_stub",
    "is_evicted",
    "iso_utc",
]

ArchiveEntry: TypeAlias = dict[str, Any]

BUCKETS: tuple[str, ...] = (
    "user_requests",
    "assistant_responses",
    "tool_results",
    "file_ops",
    "prior_checkpoints",
    "context",
)
"""The non-meta keys of an entry, in dict order."""

MESSAGE_BUCKETS: tuple[str, ...] = tuple(b for b in BUCKETS if b != "file_ops")
"""The buckets that partition the span: every message lands in exactly one of them."""


# --------------------------------------------------------------------------- time and text


def iso_utc(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds: ``2026-07-06T12:03:05.123Z``."""
    seconds, millis = divmod(ms, 1000)
    stamp = datetime.fromtimestamp(seconds, UTC)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def _text(message: Message) -> str:
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(render_image(block))
    return "\n".join(parts)


def _reasoning(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, ReasoningBlock))


# --------------------------------------------------------------------------- bucketing


def _bucket_of(event: Event) -> str:
    kind = event.type
    if kind == "assistant/message":
        return "assistant_responses"
    if kind == "tool/result":
        return "tool_results"
    if kind in ("user/message", "context/message"):
        if event.message.source_kind == CHECKPOINT_SOURCE:
            return "prior_checkpoints"
        return "user_requests" if kind == "user/message" else "context"
    raise EventError(
        f"archive: event {event.seq} ({kind}) is not a surface message; a shadowed span "
        "holds only user/message, assistant/message, tool/result and context/message events"
    )


def _item(event: Event, bucket: str, archive_reasoning: bool) -> dict[str, Any]:
    message = event.message
    ts = iso_utc(event.time)
    if bucket == "assistant_responses":
        return {
            "seq": event.seq,
            "ts": ts,
            "text": _text(message),
            "tool_calls": [
                {"id": call.id, "name": call.name, "arguments": call.arguments}
                for call in message.tool_calls
            ],
            "reasoning": _reasoning(message) if archive_reasoning else None,
        }
    if bucket == "tool_results":
        return {
            "seq": event.seq,
            "ts": ts,
            "tool": message.tool_name,
            "text": _text(message),
            "is_error": bool(message.is_error),
            "tool_call_id": message.tool_call_id,
        }
    if bucket == "prior_checkpoints":
        checkpoint = message.source.get("checkpoint")
        return {
            "seq": event.seq,
            "checkpoint": checkpoint if isinstance(checkpoint, str) else None,
            "text": _text(message),
        }
    return {"seq": event.seq, "ts": ts, "text": _text(message)}


def build_entry(
    span: Sequence[Event],
    *,
    checkpoint: str,
    at_ms: int,
    reason: str,
    engine: str,
    tokens: int,
    session_id: str,
    archive_reasoning: bool = True,
) -> ArchiveEntry:
    """The archive entry of the surface nodes ``span`` (surface order) that ``checkpoint`` shadows.

    ``at_ms`` is the compaction time (use the ``compaction/summary`` event's time so a
    rebuild from the log is identical); ``reason`` is the trigger; ``tokens`` the shadowed
    token count. Raises :class:`~dashr_ext.errors.EventError` when ``span`` holds an event
    that is not a surface message. The entry::

        {"meta": {"checkpoint", "at", "reason", "engine", "seqs", "tokens", "session"},
         "user_requests":       [{"seq", "ts", "text"}],
         "assistant_responses": [{"seq", "ts", "text", "tool_calls": [{"id", "name",
                                  "arguments"}], "reasoning"}],
         "tool_results":        [{"seq", "ts", "tool", "text", "is_error", "tool_call_id"}],
         "file_ops":            [{"seq", "op", "path"(, "from")}],
         "prior_checkpoints":   [{"seq", "checkpoint", "text"}],
         "context":             [{"seq", "ts", "text"}]}

    A ``compact-checkpoint`` node is a prior checkpoint whatever its role. ``text`` is the
    text blocks joined by ``"\\n"`` with images rendered in place
    (``[image image/png 800x600 attachment att-1]``); ``arguments`` is the JSON string as
    the model produced it; ``reasoning`` is ``None`` with ``archive_reasoning=False`` and
    ``""`` when there was none; ``ts`` and ``meta.at`` are ISO-8601 UTC with milliseconds.
    All values are plain JSON data, so an entry survives ``json``, ``pickle`` and ``dill``.
    """
    entry: ArchiveEntry = {
        "meta": {
            "checkpoint": checkpoint,
            "at": iso_utc(at_ms),
            "reason": reason,
            "engine": engine,
            "seqs": [event.seq for event in span],
            "tokens": tokens,
            "session": session_id,
        }
    }
    for bucket in BUCKETS:
        entry[bucket] = []
    for event in span:
        bucket = _bucket_of(event)
        entry[bucket].append(_item(event, bucket, archive_reasoning))
    entry["file_ops"] = extract_file_ops(span)
    return entry


def entry_for_summary(
    summary: Event,
    span: Sequence[Event],
    *,
    session_id: str,
    archive_reasoning: bool = True,
) -> ArchiveEntry:
    """:func:`build_entry` with every meta field taken from the ``compaction/summary`` event.

    This is how the archive is rebuilt deterministically from the log: ``at`` is the summary
    event's time, ``reason`` its trigger, ``tokens`` its ``shadowedTokenCount``.
    """
    if summary.type != "compaction/summary":
        raise EventError(
            f"archive: event {summary.seq} is a {summary.type}, not compaction/summary"
        )
    data = summary.data
    return build_entry(
        span,
        checkpoint=str(data["checkpoint"]),
        at_ms=summary.time,
        reason=str(data["trigger"]),
        engine=str(data["engine"]),
        tokens=int(data["shadowedTokenCount"]),
        session_id=session_id,
        archive_reasoning=archive_reasoning,
    )


def entry_for_pruned(
    original: Event,
    *,
    key: str,
    at_ms: int,
    tokens: int,
    engine: str,
    session_id: str,
    archive_reasoning: bool = True,
) -> ArchiveEntry:
    """The archive entry of one pruned original (SPEC §6.5), under ``key`` (``p<seq>``).

    Shaped like a checkpoint's entry, the original in its bucket, so one reader serves
    both; ``meta`` adds ``"pruned": <seq>`` and its ``reason`` is ``"prune"``. ``at_ms`` is
    the prune pass's time (its events carry it), so a rebuild from the log is identical.
    """
    entry = build_entry(
        [original],
        checkpoint=key,
        at_ms=at_ms,
        reason="prune",
        engine=engine,
        tokens=tokens,
        session_id=session_id,
        archive_reasoning=archive_reasoning,
    )
    entry["meta"]["pruned"] = original.seq
    return entry


def bucket_counts(entry: Mapping[str, Any]) -> dict[str, int]:
    """Item counts of the non-meta buckets of a full entry, in :data:`BUCKETS` order."""
    return {bucket: len(entry[bucket]) for bucket in BUCKETS}


# --------------------------------------------------------------------------- size cap


def is_evicted(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is an :func:`evicted_stub` rather than a full entry."""
    return entry.get("evicted") is True


def evicted_stub(entry: Mapping[str, Any]) -> ArchiveEntry:
    """The stub that replaces an evicted entry: how to recover it, and its meta."""
    meta = copy.deepcopy(dict(entry["meta"]))
    pruned = meta.get("pruned")
    recover = f"history_read(seq={pruned})" if isinstance(pruned, int) else None
    return {
        "evicted": True,
        "recover": recover or f'history_read("{meta["checkpoint"]}")',
        "meta": meta,
    }


def entry_size_bytes(entry: Mapping[str, Any]) -> int:
    """Size of ``entry`` as compact UTF-8 JSON, the unit of ``archive_max_bytes``."""
    text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8"))


def apply_cap(archive: Mapping[str, Mapping[str, Any]], max_bytes: int | None) -> list[str]:
    """Checkpoint ids to replace by :func:`evicted_stub` so the archive fits ``max_bytes``.

    The total is the sum of :func:`entry_size_bytes` over the entries (stubs count at their
    own size). Entries are evicted oldest first (insertion order), already-evicted ones are
    skipped, and the newest entry is never evicted, so the result can still exceed the cap
    when the newest entry alone does. ``None`` means no cap.
    """
    if max_bytes is None:
        return []
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ConfigError("archive_max_bytes", "an integer >= 1 or None", max_bytes)
    sizes = {key: entry_size_bytes(entry) for key, entry in archive.items()}
    total = sum(sizes.values())
    evict: list[str] = []
    for key in list(archive)[:-1]:
        if total <= max_bytes:
            break
        entry = archive[key]
        if is_evicted(entry):
            continue
        total -= sizes[key] - entry_size_bytes(evicted_stub(entry))
        evict.append(key)
    return evict
