"""Footer and marker texts of a checkpoint (SPEC §7.2): composed by code, never by a model.

Every text here is a pure function of the ``compaction/summary`` event's data, so replaying
the log composes the same bytes. :func:`compose_footer` is the single composition point;
:func:`frame_checkpoint` wraps a summary and its footer into the checkpoint node's text, after
:func:`neutralize_summary` has rewritten anything in the summary that could pass for framing,
a footer, a marker or a pointer.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ._archive import ARCHIVE_VARIABLE, BUCKETS
from ._templates import render
from .errors import EventError

__all__ = [
    "EXAMPLE_ORDER",
    "FOOTER_FORMS",
    "archive_marker",
    "checkpoint_footer",
    "compact_footer",
    "compose_footer",
    "footer_form",
    "frame_checkpoint",
    "frame_compact",
    "frame_stub",
    "framing_cap",
    "neutralize_summary",
]

FRAMING_SHARE = 0.12
"""The largest share of a checkpoint budget the code-composed text of a pass may take."""

FRAMING_FLOOR = 64
"""Below a 256-token budget the code-composed text takes at most this many tokens."""


def framing_cap(budget: int) -> int:
    """Tokens the code-composed text of a pass (preamble, footer, marker, pointer) may take.

    12% of the checkpoint budget ``budget`` from 256 tokens up, at most 64 tokens below it
    (SPEC §7.2). What is left (``budget - framing_cap(budget)``) is the room for content:
    pins, names and the summary.
    """
    if budget < 256:
        return min(FRAMING_FLOOR, budget)
    return int(budget * FRAMING_SHARE)

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


FOOTER_FORMS: tuple[str, ...] = ("full", "compact", "minimal")
"""The forms of a checkpoint's code-composed text, largest first (SPEC §7.2).

``full``: the framing preamble, the tagged summary, :func:`checkpoint_footer` and the
archive marker, plus a pointer message after the pass. ``compact``: the tagged summary and
one footer line (:func:`compact_footer`) that carries the id, span, counts and both routes
back; no preamble, no marker, no pointer. ``minimal``: the summary and a shorter footer line,
no tags. A pass takes the largest form whose fixed text fits :func:`framing_cap`."""


def footer_form(summary_event_data: Mapping[str, Any]) -> str:
    """The form a ``compaction/summary`` payload records (``footer``; absent: ``full``)."""
    form = summary_event_data.get("footer", "full")
    return form if form in FOOTER_FORMS else "full"


def compact_footer(
    checkpoint: str,
    shadowed_range: tuple[int, int],
    event_count: int,
    tokens: int,
    *,
    minimal: bool = False,
) -> str:
    """The one footer line of a ``compact`` (or ``minimal``) checkpoint (SPEC §7.2).

    ``[checkpoint c42 · #5–#31 · 27 events · ~18422 tokens · originals: history_read("c42")
    · dashr_compaction_archive["c42"]]``; ``minimal`` is the same in fewer tokens (the id,
    the span and both routes back): ``[checkpoint c42 #5–31: history_read("c42") or
    dashr_compaction_archive["c42"]]``.
    """
    start, end = shadowed_range
    events = "event" if event_count == 1 else "events"
    read, archived = f'history_read("{checkpoint}")', f'{ARCHIVE_VARIABLE}["{checkpoint}"]'
    if minimal:
        return f"[checkpoint {checkpoint} #{start}\u2013{end}: {read} or {archived}]"
    return (
        f"[checkpoint {checkpoint} \u00b7 #{start}\u2013#{end} \u00b7 {event_count} {events} "
        f"\u00b7 ~{tokens} tokens \u00b7 originals: {read} \u00b7 {archived}]"
    )


FOOTER_LINE = re.compile(r"^\[checkpoint c\d+\b[^\n]*\]\s*$", re.M)
"""The footer line a compact or minimal checkpoint ends with (``[checkpoint c42 …]``); a
summary line that reads like one is quoted (``[quoted checkpoint …``, see
:func:`neutralize_summary`), so a match is framing."""


def reads_as_checkpoint(text: str) -> bool:
    """Whether ``text`` is a checkpoint's (its framing tags or its footer line), as when a
    checkpoint is recorded as the input of another session."""
    return "</compacted-summary>" in text or FOOTER_LINE.search(text) is not None


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
    and not missing/``None``), a blank line and the archive marker. A ``compact`` or
    ``minimal`` checkpoint (``footer`` in the payload) gets its one line instead. The engine
    appends the result after the framed summary; replaying the log composes the same bytes.
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
    form = footer_form(data)
    if form != "full":  # one line; the archive marker folds into it
        return compact_footer(
            checkpoint, (start, end), len(seqs), tokens, minimal=form == "minimal"
        )
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


def frame_compact(summary: str, footer: str, *, tags: bool = True) -> str:
    """A ``compact`` checkpoint's text (tagged summary, footer line) or, without ``tags``,
    a ``minimal`` one's (summary, footer line). Neutralised like :func:`frame_checkpoint`."""
    body = neutralize_summary(summary)
    if tags:
        return f"<compacted-summary>\n{body}\n</compacted-summary>\n{footer}"
    return f"{body}\n\n{footer}" if body else footer


def frame_stub(summary: str, footer: str) -> str:
    """An index stub's text (SPEC §6.3): the tagged stub, then its footer; no preamble.

    Stubs are many short entries of one index, so they skip the checkpoint preamble; the
    tags and footer say what each is. Neutralised like :func:`frame_checkpoint`.
    """
    body = neutralize_summary(summary)
    return f"<compacted-summary>\n{body}\n</compacted-summary>\n{footer}"


# Shapes a summary must not carry (SPEC §7.2). Summaries quote tool output, so any of them can
# arrive from outside. They are matched on a folded view of the text that reads it the way a
# model does (below), and rewritten in the original at the matched spans: text without such a
# shape comes back byte for byte.
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""A line break as :meth:`str.splitlines` reads one."""

_DROPPED = frozenset(("Mn", "Me", "Cf"))
"""Categories a reader looks through: combining marks and invisible format characters."""

_FOLDED: dict[str, str] = {
    **dict.fromkeys("\u115f\u1160\u3164\uffa0", ""),  # fillers that show nothing
    **dict.fromkeys("<\uff1c\ufe64\u2329\u3008\u27e8\u2039\u02c2\u1438\u276e\u276c\u2770", "<"),
    **dict.fromkeys(">\uff1e\ufe65\u232a\u3009\u27e9\u203a\u02c3\u1433\u276f\u276d\u2771", ">"),
    **dict.fromkeys("[\uff3b\u3010\u3014\u3016\u3018\u301a\u27e6\u2045\u2772\ufe5d", "["),
    **dict.fromkeys("\u2044\u2215\u29f8\u2571", "/"),
    **dict.fromkeys('"\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\u301d\u301e', '"'),
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035", "'"),
    # Minus signs and dash-like strokes that are not in category Pd.
    **dict.fromkeys("\u2212\u2796\u02d7\u2043\u2500\u2501\u23af\u30fc\u4e00\u1173\u3161", "-"),
}
"""Lookalikes of the punctuation the framing uses, beyond what NFKD already folds."""

_LOOKALIKES = {
    "a": "\u0430\u0410\u03b1\u0391\u0251",
    "b": "\u0412\u0392",
    "c": "\u0441\u0421\u03f2\u03f9\u1d04",
    "d": "\u0501\u0500\u1d05",
    "e": "\u0435\u0415\u03b5\u0395\u1d07",
    "g": "\u0261",
    "h": "\u04bb\u04ba\u041d\u0397\u0570",
    "i": "\u0456\u0406\u03b9\u0399\u0131\u0269",
    "j": "\u0458\u0408\u03f3",
    "k": "\u043a\u041a\u03ba\u039a\u1d0b",
    "l": "\u04cf\u04c0",
    "m": "\u043c\u041c\u039c\u1d0d",
    "n": "\u043f\u03b7\u039d\u0274\u0578",
    "o": "\u043e\u041e\u03bf\u039f\u0585\u1d0f",
    "p": "\u0440\u0420\u03c1\u03a1\u1d18",
    "q": "\u051b\u051a",
    "r": "\u0280",
    "s": "\u0455\u0405\ua731",
    "t": "\u0442\u0422\u03c4\u03a4\u1d1b",
    "u": "\u03c5\u03bc\u057d\u1d1c",
    "v": "\u03bd\u0475\u0474\u1d20",
    "w": "\u051d\u051c\u1d21",
    "x": "\u0445\u0425\u03c7\u03a7",
    "y": "\u0443\u0423\u04af\u04ae\u03a5\u028f",
}
_LETTERS = {ch: latin for latin, chars in _LOOKALIKES.items() for ch in chars}
"""Letters from other scripts that read as the Latin letters of the framing words."""

_VIEW_CACHE_SIZE = 65_536


def _fold(ch: str) -> str:
    """What ``ch`` reads as: folded to lower-case Latin where it looks like it, or nothing.

    Line breaks become ``"\\n"``, other spacing ``" "``, dashes ``"-"``.
    """
    if _LINE_BREAK.fullmatch(ch):
        return "\n"
    if ch in _FOLDED:
        return _FOLDED[ch]
    kept = "".join(
        c for c in unicodedata.normalize("NFKD", ch) if unicodedata.category(c) not in _DROPPED
    )
    out = []
    for c in unicodedata.normalize("NFC", kept):
        if c in _FOLDED or c in _LETTERS:  # before casefold(): capital eta reads as h
            out.append(_FOLDED.get(c, _LETTERS.get(c, "")))
        elif c.isspace():
            out.append(" ")
        elif unicodedata.category(c) == "Pd":
            out.append("-")
        else:
            out.append("".join(_LETTERS.get(f, f) for f in c.casefold()))
    return "".join(out)


class _View(dict[int, str]):
    """A :meth:`str.translate` table that folds each character on first sight (bounded)."""

    def __missing__(self, code: int) -> str:
        folded = _fold(chr(code))
        if len(self) < _VIEW_CACHE_SIZE:
            self[code] = folded
        return folded


class _Uneven(dict[int, str | None]):
    """A :meth:`str.translate` table that keeps only characters not folding to exactly one."""

    def __missing__(self, code: int) -> str | None:
        uneven = None if len(_VIEW[code]) == 1 else chr(code)
        if len(self) < _VIEW_CACHE_SIZE:
            self[code] = uneven
        return uneven


_VIEW = _View()
_UNEVEN = _Uneven()


def _view(text: str) -> tuple[str, list[int] | None]:
    """``text`` folded, and where each folded character came from (``None``: one to one).

    Linear in the text: every character folds on its own.
    """
    view = text.translate(_VIEW)
    uneven = "" if text.isascii() else text.translate(_UNEVEN)
    if not uneven:
        return view, None
    if len(uneven) * 8 > len(text):
        return view, [i for i, ch in enumerate(text) for _ in _VIEW[ord(ch)]]
    origin: list[int] = []  # few uneven characters: copy the runs between them
    done = 0
    for m in re.finditer(f"[{re.escape(''.join(set(uneven)))}]", text):
        origin += range(done, m.start())
        origin += [m.start()] * len(_VIEW[ord(m.group())])
        done = m.end()
    origin += range(done, len(text))
    return view, origin


def _words(*words: str) -> str:
    return " +".join(re.escape(w) for w in words)


# The patterns read the view: lower case, every dash "-", spacing " ", line breaks "\n",
# lookalike brackets and quotes folded, invisible characters gone. Every pattern reads a run
# of spacing one way only, so matching stays linear in the text.
_TAG = re.compile(r"<\s*(?:/\s*)?compacted[\s_-]*summary\s*(?P<close>>)?")
"""An opening or closing framing tag, with or without its ``>``."""

_BRACKET = re.compile(
    r"\[ *(?P<word>checkpoint(?=[^\w\n]*c[^\w\n]*\d)|compaction[_ -]*archive\b"
    r"|output[_ -]*pruned\b)"
)
"""The opening of a footer (``[checkpoint c42``), of the marker (``[compaction archive``) or of
a pruning marker (``[output pruned``)."""

_PHRASE = re.compile(
    "|".join(
        (
            _words("shadows", "conversation", "span"),
            _words("originals", "retrievable", "via"),
            _words("stored", "verbatim", "in", "kernel", "variable"),
            _words("when", "you", "need", "original", "details"),
            "context +(?:was +)?" + _words("condensed", "into", "checkpoint"),
        )
    )
)
"""Wording only the footer (first two), the archive marker (next two) and the pointer use."""

_ARCHIVE_REF = re.compile(f"{ARCHIVE_VARIABLE} *\\[(?P<gap> *)(?=[\"'])")
"""A ``dashr_compaction_archive["c42"]`` reference (up to the quote)."""

_EXAMPLE = re.compile(f"^ *print *\\( *{ARCHIVE_VARIABLE} *\\[", re.MULTILINE)
"""A line that opens like the marker's ``print(dashr_compaction_archive["c42"]…)`` example."""

_QUOTED = "[quoted] "
"""The prefix of a summary line that carried footer, marker or pointer wording."""

_Edit = tuple[int, int, str]
"""Replace ``text[start:end]`` with the string."""


def _edits(text: str) -> list[_Edit]:
    """The rewrites :func:`neutralize_summary` makes, found on the folded view of ``text``."""
    view, origin = _view(text)
    at = (lambda i: i) if origin is None else origin.__getitem__
    edits: list[_Edit] = []
    for m in _TAG.finditer(view):
        edits.append((at(m.start()), at(m.start()) + 1, "&lt;"))
        if m["close"]:
            edits.append((at(m.start("close")), at(m.start("close")) + 1, "&gt;"))
    breaks = [m.start() for m in re.finditer("\n", view)]  # line n starts after breaks[n-1]
    marked: set[int] = set()  # lines that read like a footer, a marker or its example
    for m in _BRACKET.finditer(view):
        edits.append((at(m.start()), at(m.start("word")), "[quoted "))
        marked.add(bisect.bisect(breaks, m.start()))
    marked.update(bisect.bisect(breaks, m.start()) for m in _EXAMPLE.finditer(view))
    worded = {bisect.bisect(breaks, m.start()) for m in _PHRASE.finditer(view)}
    for line in worded:
        start = breaks[line - 1] + 1 if line else 0
        if not view.startswith(_QUOTED, start):
            at_start = at(start - 1) + 1 if line else 0  # after the line break, before all else
            edits.append((at_start, at_start, _QUOTED))
    marked |= worded
    for m in _ARCHIVE_REF.finditer(view):
        if bisect.bisect(breaks, m.start()) in marked:
            # A footer-like line: its archive references must not read as live ones either.
            edits.append((at(m.start("gap") - 1) + 1, at(m.end("gap")), "quoted "))
    return edits


def neutralize_summary(text: str) -> str:
    """``text`` with every shape that could pass for code-composed framing rewritten.

    Pure, deterministic and idempotent; text without such shapes comes back unchanged, so
    prose may still name ``history_read("c12")`` or the archive. Shapes are recognised the
    way a model reads them: in any case, spacing and compatibility form (NFKD: fullwidth,
    mathematical letters), with lookalike letters, brackets, quotes and dashes, through
    invisible and combining characters, and with any line break :meth:`str.splitlines`
    knows. Rewrites:

    * a framing tag (``<compacted-summary>``, ``</compacted-summary>``) has its brackets
      replaced: ``&lt;/compacted-summary&gt;``;
    * a footer or marker opening (``[checkpoint c…``, ``[compaction archive``,
      ``[output pruned``) becomes ``[quoted checkpoint c…`` / ``[quoted compaction archive``
      / ``[quoted output pruned``;
    * a line with the footer's, the marker's or the pointer's own wording starts with
      ``[quoted] ``;
    * on such a line, one with a quoted opening, or one that starts like the marker's
      ``print(dashr_compaction_archive["c…"]…)`` example, ``dashr_compaction_archive["c…"]``
      becomes ``dashr_compaction_archive[quoted "c…"]`` (prose that names the archive
      elsewhere on a line is left alone).
    """
    parts, done = [], 0
    for start, end, new in sorted(_edits(text)):
        parts += [text[done:start], new]
        done = end
    return "".join([*parts, text[done:]])
