"""The embedded default summarizer: offline, deterministic, rule-based, no key.

:class:`ExtractiveSummarizer` fills the eight sections of
``prompts/summarize.md`` (their headings are read from the template) from the
shadowed span by rules, never by a model:

==========================  ==================================================
section                     filled from
==========================  ==================================================
Primary Request and Intent  the first user request verbatim (clipped at a line
                            break), then every later user request
Key Technical Concepts      identifiers the assistant quoted in backticks, most
                            mentioned first
Files and Code              the file operations of tool calls (the archive's
                            extractor, :mod:`dashr_ext._fileops`) and the paths
                            a command ran or named, with what was done to them
                            (viewed, edited, deleted, ran, …) and the last
                            edit's first line
Errors and Fixes            exact error lines of tool results (exception lines,
                            pytest ``FAILED``, ``error:``), with the command
                            that produced them and whether a later run of that
                            command succeeded
Pending Jobs                a request still without a final answer; "TODO" /
                            "still need to" sentences of the assistant
Current Work                the last assistant text; the last commands run
Next Step                   the last "next / I'll / let me" sentence of the
                            assistant, else the last command to continue from;
                            ``(none)`` when the last request was answered
Critical Context            decision sentences ("because", "instead of", "the
                            root cause is"…), commands run repeatedly (test and
                            reproduction commands), context messages, and one
                            keyword line of literal anchors grouped by kind
==========================  ==================================================

The keyword line lists low-frequency literal anchors — the rarest exact
strings of the span that the body does not already contain, grouped as
``errors``, ``paths``, ``numbers`` (values with units, versions),
``config`` (flags, ``KEY=value``, environment names), ``identifiers`` and
``commands`` — so a later ``history_search`` has something exact to look for.

Merging: with a previous summary (``request.previous_summary``, or the text of
a checkpoint node inside the span) its bullets are carried forward section by
section, new bullets are added after them, and nothing is said twice: equal
bullets collapse, a file's operations are added up, an error keeps its latest
status, the keyword line is one union, and Current Work / Next Step are replaced
by the newer state.

Budget: every bullet has a priority; while the rendered summary exceeds
``request.max_summary_tokens`` (counted with ``request.count_tokens``) the
lowest-priority bullet is dropped. The output is a pure function of the request:
the same input gives byte-identical output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._checkpoints import is_checkpoint
from .._events import Event, ReasoningBlock, ToolCallBlock
from .._fileops import embedded_python_ops, file_ops_for_call
from .._payloads import POINTER_SOURCE
from .._templates import summary_sections
from ..errors import ConfigError, DashrError, SummarizerError
from .base import SummaryRequest, SummaryResult

__all__ = ["ExtractiveSummarizer", "parse_summary"]

# Section roles, in the order of prompts/summarize.md.
REQUEST, CONCEPTS, FILES, ERRORS, PENDING, CURRENT, NEXT, CRITICAL = range(8)
_N_SECTIONS = 8
_NONE = "(none)"
_KEYWORDS = "Keywords —"
_ANCHOR_KINDS = ("errors", "paths", "numbers", "config", "identifiers", "commands")

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
_OP_WEIGHTS = {
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

_EXT = (
    r"py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|toml|cfg|ini|ya?ml|md|rst|txt|"
    r"c|h|cc|cpp|hpp|rs|go|java|kt|rb|php|sh|bash|zsh|ps1|html?|css|scss|sql|xml|csv|tsv|lock|"
    r"log|diff|patch|proto|gradle|swift|scala|lua|jl|tex|bib|svg|dockerfile"
)
_FILE_PATH = re.compile(
    rf"(?<![\w/.:@-])(?:~|\.{{1,2}})?/?(?:[\w.+@-]+/)*[\w+@-][\w.+@-]*\.(?:{_EXT})(?![\w/-])",
    re.I,
)
_DIR_PATH = re.compile(r"(?<![\w/.:@-])(?:~|\.{1,2})?/(?:[\w.+@-]+/)+[\w.+@-]+/?(?![\w/-])")
_ERROR_LINE = re.compile(
    r"^[ \t]*(?:E[ \t]+)?(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Failure|Interrupt|"
    r"Exit|Warning)(?::[ \t]?[^\n]*)?$"
    r"|^[ \t]*FAILED\b[^\n]*$"
    r"|^[ \t]*ERROR\b:?[ \t][^\n]*$"
    r"|^[^\s:]+:\d+(?::\d+)?: (?:error|fatal error):[^\n]*$"
    r"|^[ \t]*(?:error|fatal)(?:\[\w+\])?: [^\n]*$"
    r"|^[^\n]*(?:command not found|No such file or directory|Permission denied)[^\n]*$"
    r"|^[ \t]*npm ERR![^\n]*$",
    re.M,
)
_EXCEPTION_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b")
_TEST_SUMMARY = re.compile(
    r"^=*[ \t]*(?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected)"
    r"(?:, )?)+[^\n]*$",
    re.M,
)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|exit code[ :=]+(-?\d+)", re.I)
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])|\n+")
_IDENTIFIER = re.compile(
    r"^(?:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*(?:\(\))?|[A-Za-z_]\w*\([^()]{0,40}\))$"
)
_DECISION = re.compile(
    r"\b(?:decid\w*|instead of|because|the (?:root cause|cause|issue|problem|bug|fix|solution) "
    r"(?:is|was|here is|lies)|this means|so that|we (?:must|need to)|must not|"
    r"the correct (?:fix|approach|behaviou?r))\b",
    re.I,
)
_TODO = re.compile(
    r"\b(?:TODO|FIXME|still need to|still have to|remaining|not yet (?:done|implemented|fixed)|"
    r"left to do)\b",
    re.I,
)
_NEXT = re.compile(
    r"\b(?:next|now (?:I|we|let)|then|I(?:'ll| will| am going to)|let me|let's|we(?:'ll| will) "
    r"(?:now|need|run|check|try))\b",
    re.I,
)
_NUMBER_UNIT = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?[ ]?(?:ms|µs|us|ns|s|sec|seconds?|min(?:utes?)?|h|hours?|"
    r"[KMGT]i?B|[kKMG]b|bytes?|tokens?|%|px|x|passed|failed|errors?|skipped|warnings?)(?![\w])"
    r"|(?<![\w.])v?\d+\.\d+\.\d+(?:[-.+][\w.]+)?(?![\w.])"
)
_CONFIG = re.compile(
    r"(?<![\w-])--[A-Za-z][\w-]*(?:=[^\s'\"`,;]+)?"
    r"|(?<![\w.])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?:=[^\s'\"`,;]+)?\b"
    r"|(?<![\w.-])[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+=[^\s'\"`,;]+"
)
_CODE_IDENT = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:\(\))?"
    r"|(?<![\w.])[a-z_][a-z0-9]*_[a-z0-9_]+(?![\w.])"
    r"|(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w.])"
)
_URLISH = re.compile(r"^[a-z]+://|^www\.", re.I)


# --------------------------------------------------------------------------- small helpers


def _clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a line or word break, marked."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    if cut < limit * 0.6:
        cut = text.rfind(" ", 0, limit)
    if cut < limit * 0.6:
        cut = limit
    head = text[:cut].rstrip()
    return f"{head} … [+{len(text) - len(head)} chars]"


def _one_line(text: str, limit: int) -> str:
    return _clip(re.sub(r"\s+", " ", text).strip(), limit)


def _code(text: str) -> str:
    """``text`` as Markdown inline code."""
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _first_line(text: str, limit: int) -> str:
    for line in text.splitlines():
        if line.strip():
            return _clip(line.strip(), limit)
    return ""


def _prose(text: str) -> str:
    """Assistant text without code blocks and agent-format labels."""
    text = _CODE_FENCE.sub(" ", text)
    return re.sub(r"^\s*(?:THOUGHT|Thought|THINKING)\s*:\s*", "", text)


_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx|incl)\.", re.I)


def _sentences(text: str) -> list[str]:
    out = []
    prose = _ABBREVIATIONS.sub(lambda m: m.group(1) + "\x00", _prose(text))
    for raw in _SENTENCE.split(prose):
        sentence = raw.replace("\x00", ".").strip().lstrip("-*•> ").strip()
        sentence = re.sub(r"^\d+[.)]\s+", "", sentence)
        sentence = re.sub(r"^\*\*[^*]{1,40}\*\*:?\s*", "", sentence).strip()
        if len(sentence) >= 12 and re.search(r"[A-Za-z]", sentence):
            out.append(sentence)
    return out


def _parse_args(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _exit_status(text: str, is_error: bool | None) -> int | None:
    match = _RETURNCODE.search(text[:400]) or _RETURNCODE.search(text[-400:])
    if match:
        return int(match.group(1) or match.group(2))
    if is_error:
        return 1
    return None


_HARNESS_NOISE = re.compile(r"\[Python Interpreter:[^\]]*\]?|\[Command finished with[^\]]*\]?")


def _traceback_ends(text: str) -> list[str]:
    """The exception line that ends each Python traceback in ``text``."""
    out = []
    for match in re.finditer(r"^Traceback \(most recent call last\):[ \t]*\r?$", text, re.M):
        for line in text[match.end() :].splitlines()[1:200]:
            if not line.strip() or line[:1] in " \t" or line.startswith("During handling"):
                continue
            out.append(line)
            break
    return out


def _error_lines(text: str) -> list[str]:
    """The exact error lines of a tool result, most telling first, at most four.

    The line ending a Python traceback comes first, then other exception lines,
    then test-runner and compiler lines (``FAILED …``, ``file:1: error: …``).
    """
    found: dict[str, int] = {}
    candidates = [(0, line) for line in _traceback_ends(text)]
    candidates += [(1, m.group(0)) for m in _ERROR_LINE.finditer(text)]
    for rank, raw in candidates:
        line = _HARNESS_NOISE.sub("", raw).strip()
        if line.startswith(("E ", "E\t")):
            line = line[1:].strip()
        if len(line) < 4 or (line.endswith(":") and " " not in line.rstrip(":")):
            continue
        if _EXCEPTION_NAME.match(line):
            rank = 0
        key = _one_line(line, 200)
        found[key] = min(found.get(key, rank), rank)
    return sorted(found, key=lambda line: found[line])[:4]


def _test_summary(text: str) -> str | None:
    matches = _TEST_SUMMARY.findall(text[-4000:])
    return _one_line(matches[-1].strip("= "), 160) if matches else None


# --------------------------------------------------------------------------- model of a span


@dataclass
class _Command:
    seq: int
    tool: str
    text: str
    call_id: str
    status: int | None = None
    result_seq: int | None = None
    errors: list[str] = field(default_factory=list)
    summary_line: str | None = None


@dataclass
class _FileNote:
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
class _Span:
    requests: list[tuple[int, str]] = field(default_factory=list)
    previous: list[str] = field(default_factory=list)
    assistant: list[tuple[int, str, bool]] = field(default_factory=list)
    """(seq, text, has tool calls) of every assistant message."""
    commands: list[_Command] = field(default_factory=list)
    files: dict[str, _FileNote] = field(default_factory=dict)
    errors: dict[str, tuple[int, _Command | None]] = field(default_factory=dict)
    error_counts: dict[str, int] = field(default_factory=dict)
    context: list[tuple[int, str]] = field(default_factory=list)
    last_user_seq: int = -1
    answered: bool = False
    """The last user request got a final answer (an assistant message without tool calls)."""
    salient: list[tuple[int, str]] = field(default_factory=list)
    """Texts anchors may come from: user and assistant text, tool arguments, error lines."""

    def file(self, path: str) -> _FileNote:
        note = self.files.get(path)
        if note is None:
            note = self.files[path] = _FileNote(path)
        return note


def _checkpoint_summary(text: str) -> str:
    match = re.search(r"<compacted-summary>\s*(.*?)\s*</compacted-summary>", text, re.S)
    return match.group(1) if match else text


def _read_span(request: SummaryRequest) -> _Span:
    span = _Span()
    pending: dict[str, _Command] = {}
    for event in request.span:
        if not event.is_surface:
            continue
        message = event.message
        if event.type == "user/message":
            if is_checkpoint(event):
                if request.previous_summary is None:
                    span.previous.append(_checkpoint_summary(message.text))
                continue
            text = message.text.strip()
            if text:
                span.requests.append((event.seq, text))
                span.salient.append((1, text))
                span.last_user_seq = event.seq
                span.answered = False
        elif event.type == "assistant/message":
            _read_assistant(span, event, pending)
        elif event.type == "tool/result":
            _read_tool_result(span, event, pending)
        elif event.type == "context/message":
            text = message.text.strip()
            # The post-compaction pointer names a checkpoint this summary now absorbs.
            if text and message.source_kind not in _POINTER_SOURCES:
                span.context.append((event.seq, text))
    return span


def _read_assistant(span: _Span, event: Event, pending: dict[str, _Command]) -> None:
    message = event.message
    text = message.text.strip()
    if not text:  # some models speak only in reasoning
        text = "\n".join(b.text for b in message.content if isinstance(b, ReasoningBlock)).strip()
    calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
    span.assistant.append((event.seq, text, bool(calls)))
    if text:
        span.salient.append((2, _prose(text)))
    final = not calls or all(c.name.lower() in _FINISH_TOOLS for c in calls)
    if final and span.last_user_seq >= 0:
        span.answered = True
    for call in calls:
        _read_call(span, event.seq, call, pending)


def _read_call(span: _Span, seq: int, call: ToolCallBlock, pending: dict[str, _Command]) -> None:
    args = _parse_args(call.arguments)
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
        span.salient.append((2, _command_label(command, 400)))
    if path is not None and (command is None or command in _EDITOR_WORDS):
        files = [(path, _EDITOR_WORDS[command])] if command else _tool_files(call, path)
        edit = None
        if args is not None:
            edit = next((v for k in _EDIT_TEXT_KEYS if isinstance(v := args.get(k), str)), None)
        for found, op in files:
            note = span.file(found)
            note.add(op, seq)
            if op in ("edited", "created", "written") and edit is not None and edit.strip():
                note.last_edit = _first_line(edit, 100)
        command = None
    if command is None:
        if path is None:  # a tool without a command or a path: still a call worth pairing
            pending[call.id] = _Command(seq, call.name, "", call.id)
        return
    cmd = _Command(seq, call.name, command, call.id)
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
        if _OP_WEIGHTS.get(word, 1) > _OP_WEIGHTS.get(found.get(path, ""), 0):
            found[path] = word  # one word per file and command: the strongest
    lines = [line for line in command.splitlines() if line.strip()]
    ends = "\n".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
    runs = set(_RUNS.findall(ends))
    for match in _FILE_PATH.finditer(ends):
        path = match.group(0)
        if _URLISH.match(path) or path in found:
            continue
        ran = path in runs or any(r.startswith(path + "::") for r in runs)
        found[path] = "ran" if ran else "read"
    return list(found.items())


def _read_tool_result(span: _Span, event: Event, pending: dict[str, _Command]) -> None:
    message = event.message
    text = message.text
    cmd = pending.pop(message.tool_call_id or "", None)
    status = _exit_status(text, message.is_error)
    errors = (
        _error_lines(text)
        if (status not in (0, None) or message.is_error or "Traceback" in text or "FAILED" in text)
        else []
    )
    if cmd is not None:
        cmd.status = status
        cmd.result_seq = event.seq
        cmd.errors = errors
        cmd.summary_line = _test_summary(text)
    for line in errors:
        span.errors[line] = (event.seq, cmd if cmd is not None and cmd.text else None)
        span.error_counts[line] = span.error_counts.get(line, 0) + 1
        span.salient.append((3, line))


# --------------------------------------------------------------------------- summary items


@dataclass
class _Item:
    section: int
    text: str
    priority: float
    order: int = 0
    anchor_kind: str | None = None
    tokens: int = 0
    carried: bool = False
    """From a previous summary (as opposed to this span)."""


class _Items:
    def __init__(self) -> None:
        self.items: list[_Item] = []
        self._seen: dict[tuple[int, str], _Item] = {}

    def add(self, section: int, text: str, priority: float, carried: bool = False) -> _Item | None:
        """Add a bullet unless it says nothing new; returns the new item, else None.

        Equal bullets collapse. Bullets about the same thing merge into the
        earlier one (see :func:`_subject`): a file's operation counts add up, a
        concept's or a repeated command's counts add up, and an error keeps its
        newest status.
        """
        text = text.strip()
        if not text or _norm(text) == _NONE:
            return None
        existing = self._seen.get((section, _norm(text)))
        subject = _subject(section, text)
        if subject is not None:
            same = self._seen.get((section, subject))
            # The same subject from the previous summary and from this span: two sets of
            # facts about one thing (counts add up). From one source: one fact, said once.
            if same is not None and (existing is None or same.carried != carried):
                same.text = _merge_bullets(section, same.text, text)
                existing = same
        if existing is not None:
            existing.priority = max(existing.priority, priority)
            return None
        item = _Item(section, text, priority, order=len(self.items), carried=carried)
        self.items.append(item)
        self._seen[(section, _norm(text))] = item
        if subject is not None:
            self._seen[(section, subject)] = item
        return item

    def has(self, section: int) -> bool:
        return any(i.section == section and i.anchor_kind is None for i in self.items)

    def anchor(self, kind: str, text: str, priority: float) -> None:
        key = (-1, kind + "\0" + text)
        if key in self._seen:
            return
        item = _Item(CRITICAL, text, priority, order=len(self.items), anchor_kind=kind)
        self.items.append(item)
        self._seen[key] = item


def parse_summary(text: str, sections: Sequence[str]) -> list[list[str]]:
    """Split a summary into per-section bullet lists (bullets keep their continuation lines).

    Headings are matched to ``sections`` by name (case, numbering and bold marks
    ignored); text under an unknown heading or before any heading goes to the
    last section. ``(none)`` bullets are dropped.
    """
    wanted = {_norm(s): i for i, s in enumerate(sections)}
    out: list[list[str]] = [[] for _ in sections]
    current = len(sections) - 1
    bullet: list[str] | None = None

    def flush() -> None:
        nonlocal bullet
        if bullet is not None:
            joined = "\n".join(bullet).rstrip()
            if joined and _norm(joined) != _NONE:
                out[current].append(joined)
        bullet = None

    for raw in text.splitlines():
        line = raw.rstrip()
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*)$", line)
        if heading:
            flush()
            name = re.sub(r"^\s*\d+[.)]\s*", "", heading.group(1)).strip().strip("*_: ").strip()
            current = wanted.get(_norm(name), len(sections) - 1)
            continue
        if not line.strip():
            continue
        item = re.match(r"^\s{0,1}[-*•]\s+(.*)$", line)
        if item:
            flush()
            bullet = [item.group(1)]
        elif bullet is not None and (line.startswith("  ") or line.startswith("\t")):
            bullet.append(line)
        else:
            flush()
            bullet = [line.strip()]
    flush()
    return out


def _leading_code(text: str) -> str | None:
    match = re.match(r"^(?:``\s(.+?)\s``|`([^`]+)`)", text)
    if not match:
        return None
    return match.group(1) or match.group(2)


_OPS_PART = re.compile(r"(\w+) ×(\d+)")


def _file_bullet(note: _FileNote) -> str:
    ops = ", ".join(f"{op} ×{n}" for op, n in note.ops.items())
    text = f"{_code(note.path)} — {ops}"
    if note.last_edit:
        text += f"; last edit: {_code(note.last_edit)}"
    return text


_UNANSWERED = re.compile(r"^The request of seq (\d+) has no final answer yet$")


def _superseded_request(bullet: str, span: _Span) -> bool:
    """An earlier "no final answer yet" bullet that the span answered or moved past."""
    match = _UNANSWERED.match(bullet)
    if match is None:
        return False
    seq = int(match.group(1))
    return span.answered or any(later > seq for later, _text in span.requests)


_ERROR_SOURCE = re.compile(r"^(.* — from (`[^`]+`|`` .+? ``) \(seq \d+\))(?:; .*)?$", re.S)


def _refresh_error(bullet: str, span: _Span) -> str:
    """An earlier error bullet, updated when the span reran its command successfully."""
    match = _ERROR_SOURCE.match(bullet)
    if match is None:
        return bullet
    label = _leading_code(match.group(2))
    for cmd in reversed(span.commands):
        if cmd.text and _command_label(cmd.text, 120) == label:
            if cmd.status == 0 and not cmd.errors:
                return f"{match.group(1)}; a later run succeeded (seq {cmd.result_seq})"
            return f"{match.group(1)}; still failing at a later run (seq {cmd.seq})"
    return bullet


_COUNT = re.compile(r" \(×(\d+)\)$")
_RUN = re.compile(r"^Command run ×(\d+): (.*)$", re.S)


def _subject(section: int, text: str) -> str | None:
    """What a bullet is about, for the sections whose bullets merge by subject."""
    if section in (FILES, ERRORS, CONCEPTS):
        lead = _leading_code(text)
        return None if lead is None else "\0code\0" + lead
    if section == CRITICAL and (run := _RUN.match(text)):
        lead = _leading_code(run.group(2))
        return None if lead is None else "\0run\0" + lead
    return None


def _merge_bullets(section: int, old: str, new: str) -> str:
    """One bullet from an earlier and a newer bullet about the same subject."""
    if section == FILES:
        path = _leading_code(new) or ""
        counts: dict[str, int] = {}
        for bullet in (old, new):
            head = bullet.split("; last edit:", 1)[0]
            for op, n in _OPS_PART.findall(head):
                counts[op] = counts.get(op, 0) + int(n)
        last = new if "; last edit:" in new else old
        text = f"{_code(path)} — " + ", ".join(f"{op} ×{n}" for op, n in counts.items())
        if "; last edit:" in last:
            text += "; last edit:" + last.split("; last edit:", 1)[1]
        return text
    if section == CONCEPTS:
        total = sum(int(m.group(1)) if (m := _COUNT.search(b)) else 1 for b in (old, new))
        return f"{_COUNT.sub('', new)} (×{total})"
    if section == CRITICAL and (a := _RUN.match(old)) and (b := _RUN.match(new)):
        return f"Command run ×{int(a.group(1)) + int(b.group(1))}: {b.group(2)}"
    return new  # errors: the newer status wins


def _parse_keywords(bullet: str) -> dict[str, list[str]]:
    body = bullet[len(_KEYWORDS) :].strip()
    out: dict[str, list[str]] = {}
    for group in re.split(r";\s+(?=[a-z]+: )", body):
        kind, _, rest = group.partition(": ")
        if kind.strip() in _ANCHOR_KINDS:
            out[kind.strip()] = [a or b for a, b in re.findall(r"``\s(.+?)\s``|`([^`]+)`", rest)]
    return out


# --------------------------------------------------------------------------- the summarizer


class ExtractiveSummarizer:
    """Rule-based summaries: offline, deterministic, no key (the embedded default).

    ``prompts_dir`` overrides where ``summarize.md`` (the section headings) is
    read from; the other options bound individual bullets, in characters.
    """

    kind = "extractive"
    model: str | None = None

    def __init__(
        self,
        *,
        prompts_dir: str | Path | None = None,
        first_request_chars: int = 1500,
        request_chars: int = 400,
        current_work_chars: int = 600,
        anchors_per_kind: int = 6,
    ) -> None:
        for name, value, low in (
            ("first_request_chars", first_request_chars, 40),
            ("request_chars", request_chars, 40),
            ("current_work_chars", current_work_chars, 40),
            ("anchors_per_kind", anchors_per_kind, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"ExtractiveSummarizer.{name}", f"an integer >= {low}", value)
        self.prompts_dir = prompts_dir
        self.first_request_chars = first_request_chars
        self.request_chars = request_chars
        self.current_work_chars = current_work_chars
        self.anchors_per_kind = anchors_per_kind

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request.span`` into the eight sections, within the token budget."""
        if not isinstance(request.max_summary_tokens, int) or request.max_summary_tokens <= 0:
            raise SummarizerError(
                f"max_summary_tokens must be a positive integer, got {request.max_summary_tokens!r}"
            )
        try:
            sections = summary_sections(self.prompts_dir)
        except DashrError as exc:
            raise SummarizerError(f"extractive summarizer: {exc}") from None
        if len(sections) != _N_SECTIONS:
            raise SummarizerError(
                f"extractive summarizer: summarize.md lists {len(sections)} sections "
                f"({', '.join(sections)}); it fills exactly {_N_SECTIONS}"
            )
        span = _read_span(request)
        previous = [request.previous_summary] if request.previous_summary else []
        previous += span.previous
        items = _Items()
        old = [parse_summary(text, sections) for text in previous]
        limit = max(160, request.max_summary_tokens)  # ~4 chars a token: a bullet ≤ ~1/4 budget
        self._carry(items, old, span)
        self._fill(items, span, any(o[REQUEST] for o in old), limit)
        for section in (CURRENT, NEXT):  # state sections: the newer state replaces the older
            if not items.has(section):
                for parsed in old[-1:]:
                    for bullet in parsed[section]:
                        items.add(section, bullet, 20.0, carried=True)
        self._anchors(items, span, old)
        text = self._fit(items, sections, request.count_tokens, request.max_summary_tokens)
        return SummaryResult(text=text, kind=self.kind, model=None)

    # ------------------------------------------------------------------ carry forward

    def _carry(self, items: _Items, old: list[list[list[str]]], span: _Span) -> None:
        for parsed in old:
            for section, bullets in enumerate(parsed):
                n = len(bullets)
                if section in (CURRENT, NEXT):
                    continue  # replaced by the newer state (see summarize)
                for i, bullet in enumerate(bullets):
                    if section == CRITICAL and bullet.startswith(_KEYWORDS):
                        continue  # merged as anchors
                    if section == PENDING and _superseded_request(bullet, span):
                        continue  # answered since, or a newer request took over
                    if section == ERRORS:
                        bullet = _refresh_error(bullet, span)
                    recency = (i + 1) / (n + 1)
                    base = {REQUEST: 90.0, ERRORS: 55.0, FILES: 52.0}.get(section, 50.0)
                    if section == REQUEST and i == 0:
                        base = 99.0
                    item = items.add(section, bullet, base + 4 * recency, carried=True)
                    if item is not None:
                        item.order = -1_000_000 + len(items.items)  # carried bullets lead

    # ------------------------------------------------------------------ new content

    def _fill(self, items: _Items, span: _Span, has_previous_request: bool, limit: int) -> None:
        self._requests(items, span, has_previous_request, limit)
        self._concepts(items, span)
        self._files(items, span)
        self._errors(items, span)
        self._pending(items, span)
        self._current(items, span)
        self._next(items, span)
        self._critical(items, span)

    def _requests(self, items: _Items, span: _Span, has_previous_request: bool, limit: int) -> None:
        first_limit = min(self.first_request_chars, limit)
        later_limit = min(self.request_chars, limit)
        requests = list(span.requests)
        if requests and not has_previous_request:
            seq, text = requests.pop(0)
            quoted = "\n".join(
                f"  > {line}" if line.strip() else "  >"
                for line in _clip(re.sub(r"\n{3,}", "\n\n", text), first_limit).splitlines()
            )
            items.add(REQUEST, f"Original request (seq {seq}), verbatim:\n{quoted}", 100.0)
        # Identical later requests (a harness repeating itself) become one bullet.
        grouped: dict[str, list[tuple[int, str]]] = {}
        for seq, text in requests:
            grouped.setdefault(_norm(text), []).append((seq, text))
        n = len(grouped)
        for i, group in enumerate(grouped.values()):
            seqs = ", ".join(str(seq) for seq, _ in group)
            times = f"; ×{len(group)}" if len(group) > 1 else ""
            clipped = _one_line(group[-1][1], later_limit)
            label = "seqs" if len(group) > 1 else "seq"
            priority = 80.0 + 10 * (i + 1) / n - (5.0 if len(group) > 1 else 0.0)
            items.add(REQUEST, f"Later request ({label} {seqs}{times}): {clipped}", priority)

    def _concepts(self, items: _Items, span: _Span) -> None:
        counts: dict[str, int] = {}
        for _, text, _ in span.assistant:
            for term in _BACKTICK.findall(_prose(text)):
                term = term.strip()
                if _IDENTIFIER.match(term) and not _FILE_PATH.fullmatch(term) and len(term) > 2:
                    counts[term] = counts.get(term, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
        for rank, (term, count) in enumerate(ranked):
            suffix = f" (×{count})" if count > 1 else ""
            items.add(CONCEPTS, f"{_code(term)}{suffix}", 40.0 - rank)

    def _files(self, items: _Items, span: _Span) -> None:
        notes = sorted(
            span.files.values(),
            key=lambda f: (-max(_OP_WEIGHTS.get(op, 1) for op in f.ops), -f.touches, f.first_seen),
        )[:30]
        for rank, note in enumerate(notes):
            top = max(_OP_WEIGHTS.get(op, 1) for op in note.ops)
            items.add(FILES, _file_bullet(note), 45.0 + 4 * top - rank * 0.5)

    def _errors(self, items: _Items, span: _Span) -> None:
        ordered = list(span.errors.items())
        n = len(ordered)
        for i, (line, (seq, cmd)) in enumerate(ordered):
            count = span.error_counts.get(line, 1)
            text = _code(line) + (f" (×{count})" if count > 1 else "")
            fixed = False
            if cmd is not None:
                text += f" — from {_code(_command_label(cmd.text, 120))} (seq {seq})"
                runs = [c for c in span.commands if c.text == cmd.text]
                later = [c for c in runs if c.seq > cmd.seq and c.status == 0 and not c.errors]
                if later:
                    text += f"; a later run succeeded (seq {later[-1].result_seq})"
                    fixed = True
                elif len(runs) > 1 and runs[-1] is cmd:
                    text += f"; still failing at the last of {len(runs)} runs"
            else:
                text += f" (seq {seq})"
            items.add(ERRORS, text, (50.0 if fixed else 64.0) + 8 * (i + 1) / max(n, 1))

    def _pending(self, items: _Items, span: _Span) -> None:
        if span.requests and not span.answered:
            seq = span.requests[-1][0]
            items.add(PENDING, f"The request of seq {seq} has no final answer yet", 72.0)
        todos: list[str] = []
        for _, text, _ in span.assistant[-6:]:
            todos.extend(s for s in _sentences(text) if _TODO.search(s))
        for i, sentence in enumerate(todos[-4:]):
            items.add(PENDING, _one_line(sentence, 240), 60.0 + i)

    def _current(self, items: _Items, span: _Span) -> None:
        last = next(((seq, t) for seq, t, _ in reversed(span.assistant) if t.strip()), None)
        if last is not None:
            seq, text = last
            body = _one_line(_prose(text), self.current_work_chars)
            items.add(CURRENT, f"Last assistant message (seq {seq}): {body}", 78.0)
        recent = [c for c in span.commands if c.text][-3:]
        for i, cmd in enumerate(recent):
            items.add(CURRENT, "Ran " + _command_outcome(cmd), 66.0 + i)

    def _next(self, items: _Items, span: _Span) -> None:
        if span.requests and span.answered:
            items.add(NEXT, "(none): the last request was answered; wait for the user", 74.0)
            return
        for _, text, _ in reversed(span.assistant[-3:]):
            candidates = [s for s in _sentences(text) if _NEXT.search(s)]
            if candidates:
                items.add(NEXT, _one_line(candidates[-1], 300), 76.0)
                return
        recent = [c for c in span.commands if c.text]
        if recent:
            items.add(NEXT, "Continue from the last command: " + _command_outcome(recent[-1]), 74.0)

    def _critical(self, items: _Items, span: _Span) -> None:
        decisions: list[str] = []
        for _, text, _ in span.assistant:
            decisions.extend(_one_line(s, 240) for s in _sentences(text) if _DECISION.search(s))
        unique = list(dict.fromkeys(decisions))[-8:]
        for i, sentence in enumerate(unique):
            items.add(CRITICAL, "Decision: " + sentence, 56.0 + i * 0.5)
        runs: dict[str, list[_Command]] = {}
        for cmd in span.commands:
            if cmd.text:
                runs.setdefault(cmd.text, []).append(cmd)
        repeated = sorted(
            ((text, cmds) for text, cmds in runs.items() if len(cmds) > 1),
            key=lambda kv: (-len(kv[1]), kv[1][0].seq),
        )[:5]
        for rank, (_, cmds) in enumerate(repeated):
            last = cmds[-1]
            items.add(
                CRITICAL,
                f"Command run ×{len(cmds)}: " + _command_outcome(last),
                58.0 - rank,
            )
        for i, (seq, text) in enumerate(span.context[-3:]):
            items.add(CRITICAL, f"Context (seq {seq}): {_one_line(text, 240)}", 35.0 + i)

    # ------------------------------------------------------------------ anchors

    def _anchors(self, items: _Items, span: _Span, old: list[list[list[str]]]) -> None:
        cap = self.anchors_per_kind
        if cap == 0:
            return
        previous: dict[str, list[str]] = {}
        for parsed in old:
            for bullet in parsed[CRITICAL]:
                if bullet.startswith(_KEYWORDS):
                    for kind, anchors in _parse_keywords(bullet).items():
                        previous.setdefault(kind, []).extend(anchors)
        body = "\n".join(i.text for i in items.items)
        fresh = _candidate_anchors(span)
        for kind in _ANCHOR_KINDS:
            new = [a for a in fresh.get(kind, []) if a.rstrip("…") not in body]
            old_kind = list(dict.fromkeys(previous.get(kind, [])))
            keep_new = new[: max(cap - min(len(old_kind), cap // 2), 0)]
            chosen = list(dict.fromkeys(keep_new + old_kind))[:cap]
            chosen += [a for a in new if a not in chosen][: cap - len(chosen)]
            for rank, anchor in enumerate(chosen):
                items.anchor(kind, anchor, 30.0 - rank * 2 + (1.0 if kind == "errors" else 0.0))

    # ------------------------------------------------------------------ budget

    def _fit(
        self,
        items: _Items,
        sections: Sequence[str],
        count: Callable[[str], int],
        budget: int,
    ) -> str:
        alive = list(items.items)
        skeleton = _render(sections, [])
        floor = count(skeleton)
        if floor > budget:
            raise SummarizerError(
                f"max_summary_tokens={budget} cannot hold the {len(sections)} section headings "
                f"(they need {floor} tokens)"
            )
        for item in alive:
            item.tokens = count(item.text) + (2 if item.anchor_kind else 3)
        estimate = (
            floor + sum(i.tokens for i in alive) + 8 * bool(any(i.anchor_kind for i in alive))
        )
        drop_order = sorted(alive, key=lambda i: (i.priority, -i.order))
        dropped: set[int] = set()
        cursor = 0
        while estimate > budget and cursor < len(drop_order):
            victim = drop_order[cursor]
            cursor += 1
            dropped.add(id(victim))
            estimate -= victim.tokens
        while True:
            kept = [i for i in alive if id(i) not in dropped]
            text = _render(sections, kept)
            over = count(text) - budget
            if over <= 0 or cursor >= len(drop_order):
                break
            saved = 0
            while saved < over and cursor < len(drop_order):
                victim = drop_order[cursor]
                cursor += 1
                dropped.add(id(victim))
                saved += max(victim.tokens, 1)
        if count(text) > budget:  # only the skeleton is left and it fits: unreachable guard
            text = skeleton
        return text


def _command_label(text: str, limit: int) -> str:
    """A command as one line: its first line, and its last line when it has several."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) == 1:
        return _clip(lines[0], limit)
    first, last = _clip(lines[0], limit // 2), _clip(lines[-1], limit // 2)
    return f"{first} … {last} ({len(lines)} lines)"


def _command_outcome(cmd: _Command) -> str:
    out = f"{_code(_command_label(cmd.text, 160))} (seq {cmd.seq})"
    if cmd.status is not None:
        out += f" → exit {cmd.status}"
    elif cmd.result_seq is None:
        out += " → no result yet"
    if cmd.summary_line:
        out += f"; {cmd.summary_line}"
    elif cmd.errors:
        out += f"; {_code(_clip(cmd.errors[0], 120))}"
    return out


def _candidate_anchors(span: _Span) -> dict[str, list[str]]:
    """Literal anchors by kind, most salient first.

    An anchor's weight adds up over the texts that mention it: 3 for an error
    line, 2 for assistant prose and tool-call commands or paths, 1 for user
    text. Ties keep the order of first appearance.
    """
    found: dict[str, dict[str, list[int]]] = {k: {} for k in _ANCHOR_KINDS}

    def note(kind: str, value: str, where: int, weight: int) -> None:
        value = value.strip()
        if kind != "errors":
            value = value.rstrip(".,:;)")
        if 3 <= len(value) <= 100:
            hits = found[kind].setdefault(value, [where, 0])
            hits[1] += weight

    for where, line in enumerate(span.errors):
        note("errors", line if len(line) <= 100 else line[:97].rstrip() + "…", where, 3)
    texts_seen: set[str] = set()
    for where, (weight, text) in enumerate(span.salient):
        if text in texts_seen:  # a message repeated verbatim (harness boilerplate) counts once
            continue
        texts_seen.add(text)
        seen: set[tuple[str, str]] = set()
        for kind, pattern in _ANCHOR_PATTERNS:
            for match in pattern.finditer(text):
                value = match.group(0)
                if kind == "paths":
                    if _URLISH.match(value):
                        continue
                    value = value.rstrip("/")
                elif kind == "identifiers" and (
                    len(value) < 4
                    or _FILE_PATH.fullmatch(value)
                    or re.fullmatch(r"[\d.]+|(?:\w\.)+\w?", value)
                ):
                    continue
                if (kind, value) not in seen:
                    seen.add((kind, value))
                    note(kind, value, where, weight)
    for where, cmd in enumerate(span.commands):
        if cmd.text:
            line = _first_line(cmd.text, 200)
            note("commands", line if len(line) <= 60 else " ".join(line.split()[:3]), where, 2)
    out: dict[str, list[str]] = {}
    for kind, values in found.items():
        ranked = sorted(values.items(), key=lambda kv: (-kv[1][1], kv[1][0]))
        out[kind] = [value for value, _ in ranked]
    return out


_ANCHOR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("paths", _FILE_PATH),
    ("paths", _DIR_PATH),
    ("numbers", _NUMBER_UNIT),
    ("config", _CONFIG),
    ("identifiers", _CODE_IDENT),
)


def _render(sections: Sequence[str], items: Iterable[_Item]) -> str:
    by_section: list[list[_Item]] = [[] for _ in sections]
    anchors: dict[str, list[_Item]] = {}
    for item in items:
        if item.anchor_kind is not None:
            anchors.setdefault(item.anchor_kind, []).append(item)
        else:
            by_section[item.section].append(item)
    blocks: list[str] = []
    for index, name in enumerate(sections):
        lines = [f"## {name}"]
        bullets = sorted(by_section[index], key=lambda i: i.order)
        lines.extend(f"- {item.text}" for item in bullets)
        if index == CRITICAL and anchors:
            groups = [
                f"{kind}: "
                + ", ".join(_code(a.text) for a in sorted(anchors[kind], key=lambda i: i.order))
                for kind in _ANCHOR_KINDS
                if kind in anchors
            ]
            lines.append(f"- {_KEYWORDS} " + "; ".join(groups))
        if len(lines) == 1:
            lines.append(f"- {_NONE}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
