"""Footer and marker texts of a checkpoint (SPEC §7.2): composed by code, never by a model.

Every text here is a pure function of the ``compaction/summary`` event's data, so replaying
the log composes the same bytes. :func:`compose_footer` is the single composition point;
:func:`frame_checkpoint` wraps a summary and its footer into the checkpoint node's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._archive import ARCHIVE_VARIABLE, BUCKETS
from ._templates import render
from .errors import EventError

__all__ = [
    "EXAMPLE_ORDER",
    "archive_marker",
    "checkpoint_footer",
    "compose_footer",
    "frame_checkpoint",
]

EXAMPLE_ORDER: tuple[str, ...] = (
    "tool_results",
    "assistant_responses",
    "user_requests",
    "prior_checkpoints",
    "context",
)
"""Preference order of the bucket named in the marker's ``print(...)`` example."""


def checkpoint_footer(
    checkpoint: str, shadowed_range: tuple[int, int], event_count: int, tokens: int
) -> str:
    """The one-line footer every checkpoint's text ends with (SPEC 7.2).

    ``[checkpoint c42: shadows conversation span #5–#31 (27 events, ~18422 tokens);
    originals retrievable via history_read("c42") or dashr_compaction_archive["c42"]]``
    (``1 event`` in the singular).
    """
    start, end = shadowed_range
    events = "event" if event_count == 1 else "events"
    return (
        f"[checkpoint {checkpoint}: shadows conversation span #{start}\u2013#{end} "
        f"({event_count} {events}, ~{tokens} tokens); originals retrievable via "
        f'history_read("{checkpoint}") or {ARCHIVE_VARIABLE}["{checkpoint}"]]'
    )


def archive_marker(checkpoint: str, counts: Mapping[str, int]) -> str:
    """The archive marker appended after the footer when the archive write succeeded.

    The counts line lists the non-empty buckets (``name ×n``) in :data:`BUCKETS` order,
    then any unknown non-empty keys in the mapping's order; empty buckets are left out to
    keep the line short. The ``print(...)`` example names the first non-empty bucket of
    :data:`EXAMPLE_ORDER` and its first item's ``"text"``, so it always runs. When no
    message bucket is non-empty, the counts line reads ``(nothing archived)`` and the
    example is left out.
    """
    variable = f'{ARCHIVE_VARIABLE}["{checkpoint}"]'
    names = [b for b in BUCKETS if b in counts] + [
        k for k in counts if k not in BUCKETS and k != "error"
    ]
    listed = [f"{name} \u00d7{counts[name]}" for name in names if counts[name] > 0]
    lines = [
        "[compaction archive]",
        f"The original context condensed here is stored verbatim in kernel variable {variable}:",
        "  " + (" / ".join(listed) if listed else "(nothing archived)"),
    ]
    example = next((b for b in EXAMPLE_ORDER if counts.get(b, 0) > 0), None)
    if example is not None:
        lines.append("When you need original details, read them with run_cell, e.g.:")
        lines.append(f'  print({variable}["{example}"][0]["text"])')
    return "\n".join(lines)


def _data_int(key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise EventError(
            f"compaction/summary data.{key}: expected an integer, got {type(value).__name__}"
        )
    return value


def compose_footer(summary_event_data: Mapping[str, Any]) -> str:
    """The complete footer text of a checkpoint, from its ``compaction/summary`` data alone.

    The checkpoint line; then, when ``archive`` holds bucket counts (not ``{"error": …}``
    and not missing/``None``), a blank line and the archive marker. The engine appends the
    result after the framed summary; replaying the log composes the same bytes.
    Raises :class:`~dashr_ext.errors.EventError` naming the malformed field.
    """
    data = summary_event_data
    checkpoint = data.get("checkpoint")
    if not isinstance(checkpoint, str) or not checkpoint:
        raise EventError(
            f"compaction/summary data.checkpoint: expected an id such as 'c42', got {checkpoint!r}"
        )
    shadowed = data.get("shadowedRange")
    if not isinstance(shadowed, Mapping):
        raise EventError(
            "compaction/summary data.shadowedRange: expected {'start': int, 'end': int}, "
            f"got {shadowed!r}"
        )
    start = _data_int("shadowedRange.start", shadowed.get("start"))
    end = _data_int("shadowedRange.end", shadowed.get("end"))
    seqs = data.get("shadowedSeqs")
    if not isinstance(seqs, list):
        raise EventError(
            f"compaction/summary data.shadowedSeqs: expected a list of seqs, got {seqs!r}"
        )
    tokens = _data_int("shadowedTokenCount", data.get("shadowedTokenCount"))
    footer = checkpoint_footer(checkpoint, (start, end), len(seqs), tokens)
    archive = data.get("archive")
    if archive is None or (isinstance(archive, Mapping) and "error" in archive):
        return footer
    if not isinstance(archive, Mapping):
        raise EventError(
            "compaction/summary data.archive: expected bucket counts or {'error': str}, "
            f"got {archive!r}"
        )
    counts = {str(k): _data_int(f"archive.{k}", v) for k, v in archive.items()}
    return f"{footer}\n\n{archive_marker(checkpoint, counts)}"


def frame_checkpoint(summary: str, footer: str) -> str:
    """The checkpoint node's text: framing preamble, the tagged summary, then the footer."""
    preamble = render("checkpoint").strip()
    return f"{preamble}\n\n<compacted-summary>\n{summary}\n</compacted-summary>\n\n{footer}"
