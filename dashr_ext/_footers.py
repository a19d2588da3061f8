"""Footer and marker texts of a checkpoint (SPEC §7.2): composed by code, never by a model.

Every text here is a pure function of the ``compaction/summary`` event's data, so replaying
the log composes the same bytes. :func:`compose_footer` is the single composition point;
:func:`frame_checkpoint` wraps a summary and its footer into the checkpoint node's text, after
:func:`neutralize_summary` has rewritten anything in the summary that could pass for framing,
a footer, a marker or a pointer.
"""

from __future__ import annotations

import re
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
    "neutralize_summary",
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
    """The checkpoint node's text: framing preamble, the tagged summary, then the footer.

    The summary is passed through :func:`neutralize_summary` (a no-op on a summary that
    already went through it), so the framing tags and the footer appear only where code put them.
    """
    preamble = render("checkpoint").strip()
    body = neutralize_summary(summary)
    return f"{preamble}\n\n<compacted-summary>\n{body}\n</compacted-summary>\n\n{footer}"


# Shapes a summary must not carry (SPEC §7.2). Summaries quote tool output, so any of them can
# arrive from outside; matching ignores case, extra whitespace and invisible format characters
# (zero-width, soft hyphen, bidi controls), which a model reads straight through.
_INVISIBLE = "[\u00ad\u034f\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
_GAP = f"(?:[^\\S\\n]|{_INVISIBLE})"
"""Spacing inside one line: horizontal whitespace or an invisible character."""


def _word(word: str) -> str:
    """A pattern for ``word`` that also matches it with invisible characters between letters."""
    return f"{_INVISIBLE}*".join(re.escape(ch) for ch in word)


def _words(*words: str) -> str:
    return f"{_GAP}+".join(_word(w) for w in words)


_TAG = re.compile(
    f"[<\uff1c\ufe64\u2329\u3008\u27e8\u2039](?P<body>(?:\\s|{_INVISIBLE})*(?:/(?:\\s|{_INVISIBLE})*)?"
    f"{_word('compacted')}(?:[\\s_\\-\u2010-\u2015]|{_INVISIBLE})*{_word('summary')}"
    f"(?:\\s|{_INVISIBLE})*)(?P<close>[>\uff1e\ufe65\u232a\u3009\u27e9\u203a]?)",
    re.IGNORECASE,
)
"""An opening or closing framing tag, with or without its ``>``.

Every pattern here reads a run of spacing one way only, so matching stays linear in the text.
"""

_BRACKET = re.compile(
    f"[\\[\uff3b\u3010]{_GAP}*(?P<word>{_word('checkpoint')}(?=[^\\w\\n]*[c\uff43][^\\w\\n]*\\d)"
    f"|{_word('compaction')}(?:[_\\-]|{_GAP})*{_word('archive')}\\b)",
    re.IGNORECASE,
)
"""The opening of a footer (``[checkpoint c42``) or of the marker (``[compaction archive``)."""

_PHRASE = re.compile(
    "|".join(
        (
            _words("shadows", "conversation", "span"),
            _words("originals", "retrievable", "via"),
            _words("stored", "verbatim", "in", "kernel", "variable"),
            _words("when", "you", "need", "original", "details"),
            f"{_word('context')}{_GAP}+(?:{_word('was')}{_GAP}+)?"
            + _words("condensed", "into", "checkpoint"),
        )
    ),
    re.IGNORECASE,
)
"""Wording only the footer (first two), the archive marker (next two) and the pointer use."""

_ARCHIVE_REF = re.compile(
    f"(?P<name>{_word(ARCHIVE_VARIABLE)}{_GAP}*\\[){_GAP}*(?=[\"'\u201c\u201d\u2018\u2019])",
    re.IGNORECASE,
)
"""A ``dashr_compaction_archive["c42"]`` reference (up to the quote)."""

_EXAMPLE = re.compile(
    f"^{_GAP}*{_word('print')}{_GAP}*\\({_GAP}*{_word(ARCHIVE_VARIABLE)}{_GAP}*\\[", re.IGNORECASE
)
"""A line that opens like the marker's ``print(dashr_compaction_archive["c42"]…)`` example."""

_QUOTED = "[quoted] "
"""The prefix of a summary line that carried footer, marker or pointer wording."""


def _quote_tag(match: re.Match[str]) -> str:
    close = "&gt;" if match["close"] else ""
    return f"&lt;{match['body']}{close}"


def _quote_line(line: str) -> str:
    quoted = _BRACKET.sub(lambda m: f"[quoted {m['word']}", line)
    wording = _PHRASE.search(quoted) is not None
    if quoted == line and not wording and not _EXAMPLE.match(line):
        return line
    # A footer-like line: its archive references must not read as live ones either.
    quoted = _ARCHIVE_REF.sub(lambda m: f"{m['name']}quoted ", quoted)
    if wording and not quoted.startswith(_QUOTED):
        quoted = _QUOTED + quoted
    return quoted


def neutralize_summary(text: str) -> str:
    """``text`` with every shape that could pass for code-composed framing rewritten.

    Pure, deterministic and idempotent; text without such shapes comes back unchanged, so
    prose may still name ``history_read("c12")`` or the archive. Rewrites:

    * a framing tag (``<compacted-summary>``, ``</compacted-summary>``, any case or spacing,
      with lookalike angle brackets) becomes ``&lt;/compacted-summary&gt;``;
    * a footer or marker opening (``[checkpoint c…``, ``[compaction archive``) becomes
      ``[quoted checkpoint c…`` / ``[quoted compaction archive``;
    * a line with the footer's, the marker's or the pointer's own wording starts with
      ``[quoted] ``;
    * on such a line, one with a quoted opening, or one that starts like the marker's
      ``print(dashr_compaction_archive["c…"]…)`` example, ``dashr_compaction_archive["c…"]``
      becomes ``dashr_compaction_archive[quoted "c…"]`` (prose that names the archive
      elsewhere on a line is left alone).
    """
    text = _TAG.sub(_quote_tag, text)
    return "\n".join(_quote_line(line) for line in text.split("\n"))
