"""Index stubs: what a chunk of history did, in 2–3 lines, and its keyword line (SPEC §6.3).

:func:`stub_text` reads the chunk with the summary's reading machinery and writes::

    Request (seq 5): Fix the failing retry tests in tests/test_retry.py. The budget must …
    Done: ran `pytest -q tests/test_retry.py` ×2; edited src/retry.py
    Outcome: assistant (seq 11): Done: the tests pass and CHANGELOG.md has the entry.
    Keywords: errors: `ValueError: retry budget exhausted`; paths: CHANGELOG.md; values: 0.31s

Each line is left out when the chunk has nothing for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..._checkpoints import is_checkpoint
from ..._events import Event
from ...errors import SummarizerError
from ..base import SummaryRequest
from ..keywords import KEYWORDS_LABEL
from .anchors import candidate_anchors
from .items import ANCHOR_KINDS
from .reading import OP_WEIGHTS, Command, Span, read_span
from .salience import excerpt, scored_sentences
from .text import code, prose

__all__ = ["KIND_LABELS", "stub_text"]

KIND_LABELS = {kind: kind for kind in ANCHOR_KINDS}
"""The keyword line's name of each anchor kind, in :data:`~.items.ANCHOR_KINDS` order."""

# An anchor written without backticks: no list separator, no backtick, no ": " (which reads
# as a new kind), no space at either end.
_BARE = re.compile(r"[^,;`\s](?:[^,;`]*[^,;`\s])?")
_MIN_LINE_CHARS = 16


@dataclass(frozen=True)
class _Anchor:
    kind: str
    text: str
    rank: int
    """Salience within its kind, 0 the most salient."""


def stub_text(request: SummaryRequest, anchors_per_kind: int) -> str:
    """The index stub of ``request.span``, within ``request.max_summary_tokens``.

    Checkpoint nodes in the span are skipped; an anchor any ``request.index_keywords``
    line already holds is left out. Each line is first held to its share of the budget
    (the lines together ~60%); over budget, keyword anchors go first (the least salient
    first), then the lines are clipped further. Raises
    :class:`~dashr_ext.errors.SummarizerError` for a span without events to index or a
    budget too small for a clipped line.
    """
    events = [e for e in request.span if e.is_surface and not is_checkpoint(e)]
    if not events:
        raise SummarizerError(
            "extractive summarizer: stub mode needs a span with at least one surface event "
            "that is not a checkpoint node"
        )
    span = read_span(request)
    budget = request.max_summary_tokens
    lines = _lines(span, events, 400)
    limit = max(40, min(400, budget * 12 // (5 * len(lines))))  # ~60% of the budget, ~4 chars/token
    lines = [cut(line, limit) for line in _lines(span, events, limit)]
    anchors = _anchors(span, request.index_keywords, anchors_per_kind)
    return _fit(lines, anchors, request.count_tokens, budget)


# --------------------------------------------------------------------------- the lines


def _lines(span: Span, events: Sequence[Event], limit: int) -> list[str]:
    lines = [
        line
        for line in (_request_line(span, limit), _done_line(span, events), _outcome_line(span))
        if line
    ]
    if not lines:
        first, last = events[0].seq, events[-1].seq
        lines.append(f"Messages without text (seq {first}–{last}).")
    return lines


def _request_line(span: Span, limit: int) -> str | None:
    """The chunk's request(s); a request longer than its share keeps its salient sentences."""
    if not span.requests:
        return None
    if len(span.requests) == 1:
        seq, text = span.requests[0]
        head = f"Request (seq {seq}): "
        return head + _salient(text, limit - len(head))
    seqs = ", ".join(str(seq) for seq, _ in span.requests)
    # The most salient of the earlier requests (a greeting is not what the chunk asked).
    first = max(span.requests[:-1], key=lambda r: _best(r[1]))[1]
    last = span.requests[-1][1]
    head = f"Requests (seqs {seqs}): "
    share = min(200, (limit - len(head) - 11) // 2)
    return f"{head}{_salient(first, share)} | latest: {_salient(last, share)}"


def _best(text: str) -> float:
    return max((salience.score for _, salience in scored_sentences(text)), default=0.0)


def _salient(text: str, limit: int) -> str:
    """``text`` on one line; past ``limit`` characters, its most salient sentences."""
    flat = _flat(text)
    if len(flat) <= limit:
        return flat
    return excerpt(flat, max(limit, 40)) or cut(flat, max(limit, 40))


def _done_line(span: Span, events: Sequence[Event]) -> str | None:
    parts: list[str] = []
    runs: dict[str, int] = {}
    for cmd in span.commands:
        if cmd.text:
            label = _label(cmd.text)
            runs[label] = runs.get(label, 0) + 1
    if runs:
        shown = [code(label) + (f" ×{n}" if n > 1 else "") for label, n in list(runs.items())[:3]]
        more = f" (+{len(runs) - 3} more)" if len(runs) > 3 else ""
        parts.append("ran " + ", ".join(shown) + more)
    by_word: dict[str, list[str]] = {}
    for note in span.files.values():
        if any(note.path in label for label in runs):
            continue  # a command's own script or argument: the command says it
        word = max(note.ops, key=lambda op: OP_WEIGHTS.get(op, 1))
        by_word.setdefault(word, []).append(note.path)
    for word in sorted(by_word, key=lambda w: -OP_WEIGHTS.get(w, 1)):
        paths = by_word[word]
        more = f" (+{len(paths) - 4} more)" if len(paths) > 4 else ""
        parts.append(f"{word} " + ", ".join(paths[:4]) + more)
    if not parts:
        tools: dict[str, int] = {}
        for event in events:
            for call in event.message.tool_calls:
                tools[call.name] = tools.get(call.name, 0) + 1
        if tools:
            parts.append("called " + ", ".join(f"{n} ×{k}" for n, k in tools.items()))
    return "Done: " + "; ".join(parts) if parts else None


def _outcome_line(span: Span) -> str | None:
    pieces: list[str] = []
    finished = [c for c in span.commands if c.text and c.result_seq is not None]
    if finished:
        last: Command = finished[-1]
        label = code(_label(last.text))
        if last.status not in (0, None) or last.errors:
            status = f" (exit {last.status})" if last.status is not None else ""
            error = f": {code(last.errors[0])}" if last.errors else ""
            pieces.append(f"{label} failed{status}{error}")
        elif last.summary_line:
            pieces.append(f"{label}: {last.summary_line}")
    said = next(((seq, t) for seq, t, _ in reversed(span.assistant) if prose(t).strip()), None)
    if said is not None:
        pieces.append(f"assistant (seq {said[0]}): {_flat(prose(said[1]))}")
    return "Outcome: " + "; ".join(pieces) if pieces else None


def _label(command: str) -> str:
    """A command in one short line: its first line, clipped, and how many lines follow."""
    lines = [line for line in command.splitlines() if line.strip()]
    first = cut(_flat(lines[0]), 72) if lines else ""
    return f"{first} (+{len(lines) - 1} lines)" if len(lines) > 1 else first


def _flat(text: str) -> str:
    return " ".join(text.split())


def cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut at a word break and marked ``…``."""
    if len(text) <= limit:
        return text
    end = text.rfind(" ", 0, limit - 1)
    if end < limit * 0.6:
        end = limit - 1
    return text[:end].rstrip() + "…"


# --------------------------------------------------------------------------- the keyword line


def _anchors(span: Span, index_keywords: Sequence[str], per_kind: int) -> list[_Anchor]:
    """The chunk's anchors not yet indexed, at most ``per_kind`` of each kind."""
    index = "\n".join(index_keywords)
    seen: set[str] = set()
    out: list[_Anchor] = []
    fresh = candidate_anchors(span)
    for kind in ANCHOR_KINDS:
        rank = 0
        for candidate in fresh.get(kind, []):
            anchor = candidate.text
            if rank >= per_kind:
                break
            if anchor in seen or _indexed(anchor, index):
                continue
            seen.add(anchor)
            out.append(_Anchor(kind, anchor, rank))
            rank += 1
    return out


def _indexed(anchor: str, index: str) -> bool:
    """Whether the index text already holds ``anchor`` as a whole literal."""
    literal = anchor.rstrip("…").strip()
    if not literal or not index:
        return False
    pattern = re.escape(literal)
    if re.match(r"[\w./-]", literal[0]):
        pattern = r"(?<![\w./-])" + pattern
    if re.match(r"[\w./-]", literal[-1]):
        pattern += r"(?![\w/-]|\.\w)"
    return re.search(pattern, index) is not None


def keyword_line(anchors: Sequence[_Anchor]) -> str:
    """``Keywords: kind: a, b; kind: c`` in kind order, or "" without anchors."""
    groups: dict[str, list[str]] = {}
    for anchor in anchors:
        text = anchor.text
        if anchor.kind == "errors" or not _BARE.fullmatch(text) or ": " in text:
            text = code(text)
        groups.setdefault(anchor.kind, []).append(text)
    if not groups:
        return ""
    body = "; ".join(
        f"{KIND_LABELS[kind]}: " + ", ".join(groups[kind])
        for kind in ANCHOR_KINDS
        if kind in groups
    )
    return f"{KEYWORDS_LABEL} {body}"


def _compose(lines: Sequence[str], anchors: Sequence[_Anchor]) -> str:
    keywords = keyword_line(anchors)
    return "\n".join([*lines, keywords] if keywords else lines)


def _fit(lines: list[str], anchors: list[_Anchor], count: Callable[[str], int], budget: int) -> str:
    """Drop anchors (least salient first, the later kind of equals), then clip lines."""
    order = {id(a): i for i, a in enumerate(anchors)}
    drop_order = sorted(
        anchors, key=lambda a: (-a.rank, -ANCHOR_KINDS.index(a.kind), -order[id(a)])
    )
    alive = list(anchors)
    text = _compose(lines, alive)
    for victim in drop_order:
        if count(text) <= budget:
            return text
        alive = [a for a in alive if a is not victim]
        text = _compose(lines, alive)
    while count(text) > budget:
        longest = max(range(len(lines)), key=lambda i: (len(lines[i]), -i))
        if len(lines[longest]) > _MIN_LINE_CHARS:
            lines[longest] = cut(lines[longest], max(_MIN_LINE_CHARS, len(lines[longest]) * 4 // 5))
        elif len(lines) > 1:
            del lines[-1]
        else:
            raise SummarizerError(
                f"max_summary_tokens={budget} cannot hold an index stub (a line of "
                f"{_MIN_LINE_CHARS} characters takes {count(text)} tokens)"
            )
        text = _compose(lines, alive)
    return text
