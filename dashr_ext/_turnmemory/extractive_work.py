"""The text of one condensed working phase of a turn (SPEC §6.4, the ``extractive`` compressor).

:func:`work_text` turns a run of a turn's assistant, tool and context nodes into the plain
text of one assistant node: what was run (each distinct command once, repeats counted, with
its exit status, test tally and a one-line output), which files were touched and how, each
failure with its exact error line, the calls of other tools, the assistant's salient
statements (decisions with their reasons first, then findings), the image references of the
phase, and, when the phase holds it, the turn's final answer verbatim.

The phase is read the way the extractive summarizer reads a span
(:func:`~dashr_ext._summarizers.extractive.reading.read_span`: commands paired with their
results, the file-operation extractor, error lines, test tallies), its assistant prose is
ranked by the summarizer's salience, and raw reasoning is never read: reasoning blocks are
dropped before anything looks at a node. Pure and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._events import Event, Message, ReasoningBlock, TextBlock, ToolCallBlock
from .._fileops import file_ops_for_call
from .._summarizers.base import SummaryRequest
from .._summarizers.extractive.reading import OP_WEIGHTS, Span, read_span
from .._summarizers.extractive.salience import scored_sentences
from .._summarizers.extractive.text import code, command_label, norm, one_line, prose
from .nodes import TurnNode

__all__ = ["WorkNotes", "final_text", "work_text"]

COMMAND_CHARS = 160
"""A command is shown on one line of at most this many characters (its first and last line
when it has several)."""
OUTPUT_CHARS = 120
"""A result whose output is one line of at most this many characters shows that line."""
CALL_CHARS = 120
"""Another tool's call is shown as ``name(arguments)`` in at most this many characters."""
NOTE_SHARE = 6
"""The assistant's statements kept take up to 1/``NOTE_SHARE`` of the phase's assistant
prose, within :data:`NOTE_MIN_CHARS`..:data:`NOTE_MAX_CHARS`."""
NOTE_MIN_CHARS = 400
NOTE_MAX_CHARS = 3_000
NOTE_SENTENCE_CHARS = 400
"""A statement longer than this is not kept (it is a pasted block, not a statement)."""

_WRAPPER = re.compile(
    r"<returncode>\s*-?\d+\s*</returncode>|</?(?:returncode|output|stdout|stderr)>"
    r"|^\s*OBSERVATION:\s*|\[Command finished with[^\]]*\]"
    r"|\[Python Interpreter:[^\]]*\]",
    re.M,
)
_FILE_WORDS = ("edited", "created", "written", "deleted", "moved", "copied", "reverted")


@dataclass(frozen=True, slots=True)
class WorkNotes:
    """What a condensed phase says, before it is rendered (the tests and the bench read it)."""

    commands: tuple[str, ...]
    """One line per distinct command and outcome, in first-run order."""
    files: tuple[str, ...]
    """``"<word>: <path>, <path>"`` per operation word, strongest first."""
    failures: tuple[str, ...]
    """One line per distinct error line, in first-seen order."""
    tools: tuple[str, ...]
    """Calls of tools that ran no command and named no file."""
    statements: tuple[str, ...]
    """The assistant's salient statements, in their order."""
    images: tuple[str, ...]
    """The ``<memory-image …/>`` markers of the phase, in order."""


def final_text(node: TurnNode) -> str:
    """What an assistant node says: its text blocks joined (never its reasoning)."""
    return "\n".join(b.text for b in node.content if isinstance(b, TextBlock)).strip()


def work_text(nodes: Sequence[TurnNode], *, final: TurnNode | None = None) -> str:
    """The text of the assistant node that condenses ``nodes`` (one phase, in turn order).

    ``final``: the node among ``nodes`` whose text is the turn's final answer; its text ends
    the result verbatim and is not condensed. The header names where the originals are
    (``history_read(turn=N)``) when the nodes know their turn (:attr:`TurnNode.turn`).
    """
    notes = read_work(nodes, final=final)
    calls = sum(len(n.tool_call_ids) for n in nodes)
    steps = f"{len(nodes)} message{'s' if len(nodes) != 1 else ''}"
    if calls:
        steps += f", {calls} tool call{'s' if calls != 1 else ''}"
    turn = nodes[0].turn if nodes else None
    if turn is not None:
        steps += f"; originals: history_read(turn={turn})"
    lines = [f"[Condensed work: {steps}]"]
    if notes.commands:
        lines.append("Ran:")
        lines.extend(f"- {c}" for c in notes.commands)
    if notes.files:
        lines.append("Files: " + "; ".join(notes.files))
    if notes.failures:
        lines.append("Failures:")
        lines.extend(f"- {f}" for f in notes.failures)
    if notes.tools:
        lines.append("Other tools: " + "; ".join(notes.tools))
    if notes.statements:
        lines.append("Notes:")
        lines.extend(f"- {s}" for s in notes.statements)
    if notes.images:
        lines.append("Images: " + " ".join(notes.images))
    text = "\n".join(lines)
    answer = final_text(final) if final is not None else ""
    return f"{text}\n\n{answer}" if answer else text


def read_work(nodes: Sequence[TurnNode], *, final: TurnNode | None = None) -> WorkNotes:
    """The facts of one phase (see :func:`work_text`)."""
    span = read_span(_request(nodes))
    by_position = {n.position: n for n in nodes}
    return WorkNotes(
        commands=_command_lines(span, by_position),
        files=_file_lines(span),
        failures=_failure_lines(span),
        tools=_other_calls(span, nodes),
        statements=_statements(nodes, final),
        images=tuple(m for n in nodes for m in n.image_markers),
    )


# --------------------------------------------------------------------------- reading


def _request(nodes: Sequence[TurnNode]) -> SummaryRequest:
    """The phase as a summarizer's span: one event per node, seq = its position in the turn,
    reasoning blocks dropped (raw reasoning is never read, so never copied)."""
    events = []
    for n in nodes:
        content = tuple(b for b in n.content if not isinstance(b, ReasoningBlock))
        message = Message(
            id=f"n{n.position + 1}",
            role=n.role,
            source={"kind": n.source_kind},
            content=content,
            tool_call_id=n.tool_call_id,
            tool_name=n.tool_name,
            is_error=n.is_error,
        )
        events.append(Event(n.position, n.event_type, 0, {"message": message.to_json()}))
    return SummaryRequest(
        span=events,
        previous_summary=None,
        max_summary_tokens=0,
        prefix_messages=(),
        count_tokens=len,
    )


def _short_output(text: str) -> str | None:
    """A result's output when it is one short line (harness wrappers left out), else None."""
    lines = [line.strip() for line in _WRAPPER.sub("", text).splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) <= OUTPUT_CHARS:
        return lines[0]
    return None


def _result_text(node: TurnNode) -> str:
    return "\n".join(b.text for b in node.content if isinstance(b, TextBlock))


def _command_lines(span: Span, by_position: dict[int, TurnNode]) -> tuple[str, ...]:
    """Each distinct command with its outcome once, in first-run order, repeats counted."""
    order: list[tuple[object, ...]] = []
    counts: dict[tuple[object, ...], int] = {}
    shown: dict[tuple[object, ...], str] = {}
    for cmd in span.commands:
        result = by_position.get(cmd.result_seq) if cmd.result_seq is not None else None
        output = _short_output(_result_text(result)) if result is not None else None
        if cmd.errors or (cmd.status not in (0, None)):
            output = None  # the failure says it
        key = (cmd.text, cmd.status, tuple(cmd.errors), cmd.summary_line, output)
        if key not in counts:
            order.append(key)
            counts[key] = 0
            label = code(command_label(cmd.text, COMMAND_CHARS))
            outcome = []
            if cmd.result_seq is None:
                outcome.append("no result")
            elif cmd.status not in (0, None):
                outcome.append(f"exit {cmd.status}")
            elif cmd.errors:
                outcome.append("failed")
            if cmd.summary_line:
                outcome.append(cmd.summary_line)
            if output is not None:
                outcome.append(code(output))
            shown[key] = label + (f" → {'; '.join(outcome)}" if outcome else "")
        counts[key] += 1
    return tuple(shown[k] + (f" (×{counts[k]})" if counts[k] > 1 else "") for k in order)


def _file_lines(span: Span) -> tuple[str, ...]:
    """``word: path, path`` per operation word, the strongest word first."""
    by_word: dict[str, list[tuple[int, str, int]]] = {}
    for note in span.files.values():
        for word, count in note.ops.items():
            by_word.setdefault(word, []).append((note.first_seen, note.path, count))
    words = sorted(by_word, key=lambda w: (-OP_WEIGHTS.get(w, 0), w))
    lines = []
    for word in words:
        paths = sorted(by_word[word])
        shown = [p if c == 1 or word not in _FILE_WORDS else f"{p} (×{c})" for _, p, c in paths]
        lines.append(f"{word} {', '.join(shown)}")
    return tuple(lines)


def _failure_lines(span: Span) -> tuple[str, ...]:
    """Each distinct error line once, exact, with how often and what produced it."""
    out = []
    for line, (_seq, cmd) in span.errors.items():
        count = span.error_counts.get(line, 1)
        text = code(line)
        if count > 1:
            text += f" (×{count})"
        if cmd is not None and cmd.text:
            text += f" from {code(command_label(cmd.text, COMMAND_CHARS // 2))}"
        out.append(text)
    return tuple(out)


def _other_calls(span: Span, nodes: Sequence[TurnNode]) -> tuple[str, ...]:
    """Calls that ran no command and named no file: ``name(arguments)``, repeats counted."""
    commands = {c.call_id for c in span.commands}
    counts: dict[str, int] = {}
    for n in nodes:
        for call in n.content:
            if not isinstance(call, ToolCallBlock):
                continue
            if call.id in commands or file_ops_for_call(call.name, call.arguments):
                continue
            args = one_line(call.arguments, CALL_CHARS)
            shown = code(f"{call.name}()" if args in ("", "{}") else f"{call.name}({args})")
            counts[shown] = counts.get(shown, 0) + 1
    return tuple(s + (f" (×{c})" if c > 1 else "") for s, c in counts.items())


def _statements(nodes: Sequence[TurnNode], final: TurnNode | None) -> tuple[str, ...]:
    """The assistant's salient sentences: decisions (with the reason they give) first, then
    the rest by salience, within the phase's note budget; in their order, each once."""
    pieces: list[tuple[int, str, bool, float]] = []  # (index, sentence, decision, score)
    prose_chars = 0
    seen: set[str] = set()
    for n in nodes:
        if n.role != "assistant" or n is final:
            continue
        text = prose(final_text(n))
        prose_chars += len(text)
        for sentence, salience in scored_sentences(text):
            key = norm(sentence)
            if salience.trivial or len(sentence) > NOTE_SENTENCE_CHARS or key in seen:
                continue
            seen.add(key)
            pieces.append((len(pieces), sentence, salience.decision, salience.score))
    budget = min(NOTE_MAX_CHARS, max(NOTE_MIN_CHARS, prose_chars // NOTE_SHARE))
    ranked = sorted(pieces, key=lambda p: (not p[2], -p[3], p[0]))
    chosen: list[tuple[int, str, bool, float]] = []
    size = 0
    for piece in ranked:
        length = len(piece[1]) + 3
        if size + length > budget:
            continue
        chosen.append(piece)
        size += length
    return tuple(p[1] for p in sorted(chosen))
