"""Reading a shadowed span into facts: requests, commands, files, errors (SPEC §5.2).

:func:`read_span` walks the span's surface events once and returns a :class:`Span`;
the summary's sections are filled from it (:mod:`.sections`, :mod:`.anchors`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..._checkpoints import is_checkpoint
from ..._events import Event, ReasoningBlock, ToolCallBlock
from ..._fileops import embedded_python_ops, file_ops_for_call
from ..._footers import FOOTER_LINE, reads_as_checkpoint
from ..._jsontext import arguments_object
from ..._payloads import POINTER_SOURCE
from ..._pruned import shown_seq
from ..base import SummaryRequest
from .text import (
    FILE_PATH,
    URLISH,
    command_label,
    error_lines,
    exit_status,
    first_line,
    prose,
    tally_line,
    tool_output_facts,
)

__all__ = ["OP_WEIGHTS", "Command", "FileNote", "Span", "read_span"]

# What "Files and Code" says was done to a file, by the archive's operation kinds
# (dashr_ext._fileops); "ran" and "used" name files a command ran or a tool was given.
_OP_WORDS = {
    "read": "read",
    "write": "written",
    "edit": "edited",
    "create": "created",
    "delete": "deleted",
    "move": "moved",
    "copy": "copied",
}
# A command's in-place edit (sed -i, open(…, "r+")) is worded like its other writes.
_COMMAND_WORDS = {"edit": "written"}
# How much each word says about a file: it ranks the bullets (changes first).
OP_WEIGHTS = {
    "created": 6,
    "edited": 6,
    "written": 6,
    "deleted": 6,
    "moved": 6,
    "copied": 6,
    "reverted": 5,
    "ran": 4,
    "viewed": 3,
    "read": 2,
    "used": 1,
}
# An editor command says exactly what it did to its path.
_EDITOR_WORDS = {
    "view": "viewed",
    "create": "created",
    "str_replace": "edited",
    "insert": "edited",
    "edit": "edited",
    "write": "written",
    "undo_edit": "reverted",
    "delete": "deleted",
}
_POINTER_SOURCES = frozenset({POINTER_SOURCE})
_FINISH_TOOLS = frozenset({"finish", "submit", "attempt_completion", "task_complete", "done"})
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file", "notebook_path")
_COMMAND_KEYS = ("command", "cmd", "code", "script", "shell")
_EDIT_TEXT_KEYS = ("new_str", "file_text", "content", "new_string", "text")
_SHELL_TOOLS = re.compile(r"bash|shell|exec|terminal|run|cell|python|cmd|command", re.I)


@dataclass
class Command:
    """A command a tool call ran, paired with its result once that arrives."""

    seq: int
    tool: str
    text: str
    call_id: str
    status: int | None = None
    result_seq: int | None = None
    errors: list[str] = field(default_factory=list)
    summary_line: str | None = None


@dataclass
class FileNote:
    """What the span did to one file: operation words with counts, the last edit."""

    path: str
    ops: dict[str, int] = field(default_factory=dict)
    last_edit: str | None = None
    first_seen: int = 0
    touches: int = 0

    def add(self, op: str, seq: int) -> None:
        if not self.ops:
            self.first_seen = seq
        self.ops[op] = self.ops.get(op, 0) + 1
        self.touches += 1


@dataclass
class Span:
    """The facts of a span, in the order they happened."""

    requests: list[tuple[int, str]] = field(default_factory=list)
    previous: list[str] = field(default_factory=list)
    assistant: list[tuple[int, str, bool]] = field(default_factory=list)
    """(seq, text, has tool calls) of every assistant message."""
    commands: list[Command] = field(default_factory=list)
    files: dict[str, FileNote] = field(default_factory=dict)
    errors: dict[str, tuple[int, Command | None]] = field(default_factory=dict)
    error_counts: dict[str, int] = field(default_factory=dict)
    context: list[tuple[int, str]] = field(default_factory=list)
    last_user_seq: int = -1
    last_final_seq: int = -1
    """The seq of the last final answer (an assistant message without tool calls)."""
    answered: bool = False
    """The last user request (of the span, else of the previous summary) got a final answer:
    an assistant message without tool calls came after it."""
    salient: list[tuple[int, str]] = field(default_factory=list)
    """Texts anchors may come from, by source: 1 user text, 2 assistant text and tool-call
    arguments, 3 error lines, 4 values tool output printed."""
    tool_facts: list[tuple[int, str, str]] = field(default_factory=list)
    """``(seq, key, value)`` of the settings tool output printed (``retry.max_attempts = 5``)."""
    tool_outputs: list[tuple[int, str, str]] = field(default_factory=list)
    """``(seq, command, text)`` of every tool result (command empty when unknown)."""
    printed: dict[int, tuple[list[tuple[str, str]], list[str]]] = field(default_factory=dict)
    """The value lines of a tool result by seq, read once (see :func:`.notes.printed`)."""
    labelled: dict[int, list[str]] = field(default_factory=dict)
    """The labelled lines of a tool result by seq, read once (see :func:`.notes.labelled`)."""

    def file(self, path: str) -> FileNote:
        note = self.files.get(path)
        if note is None:
            note = self.files[path] = FileNote(path)
        return note


def _checkpoint_summary(text: str) -> str:
    """The summary a checkpoint's text holds: inside its framing tags, before its footer,
    without the names block the checkpoint carries besides it (code composes that anew)."""
    match = re.search(r"<compacted-summary>\s*(.*?)\s*</compacted-summary>", text, re.S)
    if match:
        text = match.group(1)
    else:
        footer = FOOTER_LINE.search(text)
        text = text[: footer.start()] if footer else text
    return _NAMES_BLOCK.sub("", text).strip()


_NAMES_BLOCK = re.compile(r"^## Names[ \t]*\n(?:(?!#{1,6} ).*(?:\n|$))*", re.M)


def read_span(request: SummaryRequest) -> Span:
    """The facts of ``request.span`` (surface events only)."""
    span = Span()
    pending: dict[str, Command] = {}
    for event in request.span:
        if not event.is_surface:
            continue
        message = event.message
        if event.type == "user/message":
            if is_checkpoint(event) or reads_as_checkpoint(message.text):
                if request.previous_summary is None:
                    span.previous.append(_checkpoint_summary(message.text))
                continue
            text = message.text.strip()
            if text:
                span.requests.append((shown_seq(event), text))
                span.salient.append((1, text))
                span.last_user_seq = shown_seq(event)
                span.answered = False
        elif event.type == "assistant/message":
            _read_assistant(span, event, pending)
        elif event.type == "tool/result":
            _read_tool_result(span, event, pending)
        elif event.type == "context/message":
            text = message.text.strip()
            # The post-compaction pointer names a checkpoint this summary now absorbs.
            if text and message.source_kind not in _POINTER_SOURCES:
                span.context.append((shown_seq(event), text))
    return span


def _read_assistant(span: Span, event: Event, pending: dict[str, Command]) -> None:
    message = event.message
    text = message.text.strip()
    if not text:  # some models speak only in reasoning
        text = "\n".join(b.text for b in message.content if isinstance(b, ReasoningBlock)).strip()
    calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
    span.assistant.append((shown_seq(event), text, bool(calls)))
    if text:
        span.salient.append((2, prose(text)))
    final = not calls or all(c.name.lower() in _FINISH_TOOLS for c in calls)
    if final:  # it answers the last request, in this span or a previous summary's
        span.last_final_seq = shown_seq(event)
        span.answered = True
    for call in calls:
        _read_call(span, shown_seq(event), call, pending)


def _read_call(span: Span, seq: int, call: ToolCallBlock, pending: dict[str, Command]) -> None:
    args = arguments_object(call.arguments)
    command: str | None = None
    path: str | None = None
    if args is not None:
        path = next((v for k in _PATH_KEYS if isinstance(v := args.get(k), str) and v), None)
        command = next(
            (v for k in _COMMAND_KEYS if isinstance(v := args.get(k), str) and v.strip()), None
        )
    elif _SHELL_TOOLS.search(call.name) and call.arguments.strip():
        command = call.arguments
    if path:
        span.salient.append((2, path))
    if command and not (path is not None and command in _EDITOR_WORDS):
        # A here-document's body is code, not an anchor source: first and last line only.
        span.salient.append((2, command_label(command, 400)))
    if path is not None and (command is None or command in _EDITOR_WORDS):
        files = [(path, _EDITOR_WORDS[command])] if command else _tool_files(call, path)
        edit = None
        if args is not None:
            edit = next((v for k in _EDIT_TEXT_KEYS if isinstance(v := args.get(k), str)), None)
        for found, op in files:
            note = span.file(found)
            note.add(op, seq)
            if op in ("edited", "created", "written") and edit is not None and edit.strip():
                note.last_edit = first_line(edit, 100)
        command = None
    if command is None:
        if path is None:  # a tool without a command or a path: still a call worth pairing
            pending[call.id] = Command(seq, call.name, "", call.id)
        return
    cmd = Command(seq, call.name, command, call.id)
    span.commands.append(cmd)
    pending[call.id] = cmd
    for found, op in _command_files(call, command):
        span.file(found).add(op, seq)


def _tool_files(call: ToolCallBlock, path: str) -> list[tuple[str, str]]:
    """The files a tool such as ``read_file`` touched, with the word for what it did.

    The tool's name says what it does (see :func:`~dashr_ext._fileops.file_ops_for_call`);
    a tool whose name says nothing (``list_dir``) only "used" its ``path``.
    """
    words = [
        (op["path"], _OP_WORDS[op["op"]]) for op in file_ops_for_call(call.name, call.arguments)
    ]
    return list(dict.fromkeys(words)) or [(path, "used")]


_RUNS = re.compile(r"\b(?:python3?|pytest|node|bash|sh|ruby|go run)\s+(?:-\S+\s+)*([^\s;&|]+)")


def _command_files(call: ToolCallBlock, command: str) -> list[tuple[str, str]]:
    """The files a shell command or code cell touched, with the word for what it did.

    The file operations come from :func:`~dashr_ext._fileops.file_ops_for_call` (a command's
    in-place edit counts as written); any other file path on the command's first or last
    line was run (the script of an interpreter or test runner) or read.
    """
    found: dict[str, str] = {}
    ops = [(op["path"], op["op"]) for op in file_ops_for_call(call.name, call.arguments)]
    ops += [(op.path, op.op) for op in embedded_python_ops(command)]
    for path, kind in ops:
        word = _COMMAND_WORDS.get(kind) or _OP_WORDS[kind]
        if OP_WEIGHTS.get(word, 1) > OP_WEIGHTS.get(found.get(path, ""), 0):
            found[path] = word  # one word per file and command: the strongest
    lines = [line for line in command.splitlines() if line.strip()]
    ends = "\n".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
    runs = set(_RUNS.findall(ends))
    for match in FILE_PATH.finditer(ends):
        path = match.group(0)
        if URLISH.match(path) or path in found:
            continue
        ran = path in runs or any(r.startswith(path + "::") for r in runs)
        found[path] = "ran" if ran else "read"
    return list(found.items())


def _read_tool_result(span: Span, event: Event, pending: dict[str, Command]) -> None:
    """Pair a tool result with its call: exit status, error lines, test tally."""
    message = event.message
    text = message.text
    cmd = pending.pop(message.tool_call_id or "", None)
    status = exit_status(text, message.is_error)
    errors = (
        error_lines(text)
        if (status not in (0, None) or message.is_error or "Traceback" in text or "FAILED" in text)
        else []
    )
    if cmd is not None:
        cmd.status = status
        cmd.result_seq = shown_seq(event)
        cmd.errors = errors
        cmd.summary_line = tally_line(text)
    for line in errors:
        span.errors[line] = (shown_seq(event), cmd if cmd is not None and cmd.text else None)
        span.error_counts[line] = span.error_counts.get(line, 0) + 1
        span.salient.append((3, line))
    span.tool_outputs.append((shown_seq(event), cmd.text if cmd is not None else "", text))
    for key, value in tool_output_facts(text):
        span.tool_facts.append((shown_seq(event), key, value))
        span.salient.append((4, value))
