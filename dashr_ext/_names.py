"""The names a span of work touched: files, exceptions, and the code it wrote or used.

A checkpoint carries them in a small code-composed block so that what the agent will type
again (the script it wrote to reproduce a bug, the exception it is chasing, the functions
it edited, the APIs its scripts call, the command the task names) is still in the request
after a pass. :func:`collect_names` reads a span of surface events, :func:`merge_names`
carries the previous checkpoint's names forward, :func:`render_names` writes the block
within a token budget, and :func:`names_to_data` / :func:`names_from_data` store the names
on the ``compaction/summary`` event.

Files come from the tool calls' file operations (:mod:`dashr_ext._fileops`), the scripts a
shell command runs (``python reproduce.py``, ``pytest tests/test_x.py``, ``bash run.sh``,
``./run.sh``) and the directory it ``cd``s into, plus paths the agent or the task writes
and the frames of a traceback; exception names from tool results, the task and what the
agent writes. Code names are the ``def``/``class`` names an edit or create call writes
(``defined``, ``changed``) and every distinctive identifier (dotted ``settings.configure``,
snake ``schema_editor``, camel ``QuerySet``, dunder ``__main__``; no keyword, builtin or
name under three characters) of the code and commands of the tool calls (``used``), of the
user's messages (``task``), of the agent's text (``mentioned``) and of the traceback and
failure lines of tool results (``traceback``). A checkpoint node in the span is not read
(its names arrive through :func:`merge_names`).
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._events import Event
from ._fileops import file_ops_for_call
from ._fileops_shell import operands, shell_words
from ._jsontext import arguments_object
from ._payloads import ARCHIVE_VARIABLE, CHECKPOINT_SOURCE, POINTER_SOURCE, RECALL_TOOL_NAMES

__all__ = [
    "NAME_KINDS",
    "WorkName",
    "collect_names",
    "merge_names",
    "names_from_data",
    "names_to_data",
    "occurs",
    "render_names",
]

NAME_KINDS: tuple[str, ...] = ("file", "error", "symbol")
"""The kinds of :class:`WorkName`, in the order the block lists them."""


@dataclass(frozen=True)
class WorkName:
    """One name the work touched.

    ``ops`` says what was done, in first-seen order: for files ``read``, ``created``,
    ``edited``, ``deleted``, ``ran``, ``cd``, ``mentioned``, ``task``; for symbols
    ``defined``, ``changed``, ``used``, ``task`` (``task code``: in its code), ``traceback``,
    ``mentioned``, ``seen`` (in a tool result); for errors nothing.
    """

    kind: str
    name: str
    count: int
    """How many events touched it (for a name of the task: how often the task writes it)."""
    last_seq: int
    ops: tuple[str, ...] = ()


# --------------------------------------------------------------------------- collecting

_FILE_OPS = {"read": "read", "create": "created", "edit": "edited", "delete": "deleted"}
_ERROR = re.compile(
    r"(?<![\w.])(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*"
    r"(?:Error|Exception|Warning|Exit|Interrupt)(?![\w])"
)
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
_LINE_NUMBER = re.compile(r"^ *\d+\t", re.M)
_SEPARATORS = re.compile(r"&&|\|\||[;|\n]")
_PYTHONS = re.compile(r"python(?:\d+(?:\.\d+)?)?")
_RUN_WRAPPERS = frozenset({"timeout", "time", "env", "nohup", "sudo", "exec", "coverage"})
_TEST_RUNNERS = frozenset({"pytest", "py.test", "tox", "nosetests"})
_SHELLS = frozenset({"bash", "sh", "zsh", "source", "."})
_SHELL_KEYS = ("command", "cmd", "script")
_PATH_KEYS = ("path", "file", "file_path", "filename")
_CD = re.compile(r"(?:^|[;&|(]\s*|\n\s*)cd\s+(/[\w./-]*\w|[\w.-]*\w/[\w./-]*\w)(?=\s|$|[;&|)])")
_MAX_TASK_TIMES = 8
_CODE_SPAN = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.S)
"""A fenced block or an inline code span of Markdown."""
_CHAIN = re.compile(r"(?<![\w/-])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?!\w|/|\.\w)")
_CAMEL = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]{2}")
_ERROR_NAME = re.compile(r"[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)$")
# fmt: off
_EXTENSIONS = frozenset({
    "py", "pyi", "pyx", "pxd", "txt", "cfg", "toml", "ini", "json", "yaml", "yml", "rst", "md",
    "c", "h", "cc", "cpp", "hpp", "js", "ts", "html", "css", "sh", "patch", "diff", "log", "csv",
    "xml", "in", "lock", "ipynb",
})
# fmt: on
_COMMON = frozenset(
    {
        *keyword.kwlist,
        *keyword.softkwlist,
        *(n for n in dir(builtins) if not _ERROR_NAME.search(n)),
        ARCHIVE_VARIABLE,  # the package's own markers and recall tools name these
        *RECALL_TOOL_NAMES,
    }
)
_LIBRARY = re.compile(r"(?:site|dist)-packages/|^/usr/lib/|/lib/python\d")
_EXT_ALTERNATIVES = "|".join(sorted(_EXTENSIONS, key=len, reverse=True))
_TEXT_PATH = re.compile(
    rf"(?<![\w./-])((?:\.{{0,2}}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:{_EXT_ALTERNATIVES})"
    r"|/[\w.-]{3,}(?:/[\w.-]+)*)(?![\w/-])"
)
"""A path in free text: a file with a known extension, or an absolute path (``/testbed``)."""
_FAILURE_HINT = re.compile(r"Traceback|Error|Exception|FAILED|^E ", re.M)
_FRAME = re.compile(r'^[ \t]*File "[^"\n]+", line \d+, in (\S+)\n?([^\n]*)', re.M)
_FAILURE_LINE = re.compile(
    r"^(?:E[ \t][^\n]*|FAILED [^\n]*|ERROR [^\n]*|(?:[\w.]+\.)?[A-Z]\w*"
    r"(?:Error|Exception|Warning|Exit|Interrupt)\b[^\n]*|[\w./-]+\.py:\d+: in [^\n]*)",
    re.M,
)
_CODE_KEYS = ("file_text", "new_str", "content", "contents", "code", "new_content")


class _Collector:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], list[Any]] = {}  # key -> [count, last_seq, ops]
        self.known_text: dict[str, str] = {}  # path -> the latest text read or written
        self.reads: dict[str, str] = {}  # tool call id -> the one path it read

    def touch(self, kind: str, name: str, seq: int, op: str | None = None, times: int = 1) -> None:
        item = self.items.get((kind, name))
        if item is None:
            item = self.items[(kind, name)] = [0, seq, []]
        item[0] += times
        item[1] = max(item[1], seq)
        if op is not None and op not in item[2]:
            item[2].append(op)

    def names(self) -> list[WorkName]:
        return [
            WorkName(kind, name, count, last, tuple(ops))
            for (kind, name), (count, last, ops) in self.items.items()
        ]


def collect_names(events: Sequence[Event]) -> list[WorkName]:
    """The files, exceptions and code names of a span of surface events, in first-seen order.

    Checkpoint nodes and the recall pointer are skipped; other non-message events are
    ignored. A name counts once per event however often the event writes it.
    """
    c = _Collector()
    for event in events:
        if event.type not in ("user/message", "assistant/message", "tool/result"):
            continue
        message = event.message
        if message.source_kind in (CHECKPOINT_SOURCE, POINTER_SOURCE):
            continue
        if event.type == "tool/result":
            _tool_result(c, event)
        elif event.type == "user/message":
            _text_names(c, message.text, event.seq, "task")
        else:
            _text_names(c, message.text, event.seq, "mentioned")
            used: set[str] = set()
            for call in message.tool_calls:
                used |= _tool_call(c, event.seq, call.id, call.name, call.arguments)
            _symbols(c, used, event.seq, "used")
    return c.names()


def _errors(c: _Collector, text: str, seq: int) -> None:
    for name in dict.fromkeys(m.group() for m in _ERROR.finditer(text)):
        c.touch("error", name, seq)


def _text_names(c: _Collector, text: str, seq: int, op: str) -> None:
    """Exceptions, file paths and identifiers a message's text writes."""
    _errors(c, text, seq)
    for path in dict.fromkeys(m[1] for m in _TEXT_PATH.finditer(text)):
        if not _LIBRARY.search(path):
            c.touch("file", path, seq, op)
    names = _identifiers(text)
    if op != "task":
        _symbols(c, names, seq, op)
        return
    # The task is read once: how often it repeats a name tells its names apart.
    times = Counter(name for name in _CHAIN.findall(text) if name in names)
    in_code = _identifiers("\n".join(m.group() for m in _CODE_SPAN.finditer(text)))
    for name in names:
        c.touch("symbol", name, seq, op, min(times[name], _MAX_TASK_TIMES))
        if name in in_code:
            c.touch("symbol", name, seq, "task code", 0)


def _symbols(c: _Collector, names: Iterable[str], seq: int, op: str) -> None:
    for name in sorted(names):  # sets: a fixed order, so a replay stores the same bytes
        c.touch("symbol", name, seq, op)


def _identifiers(text: str) -> set[str]:
    """The distinctive identifiers of ``text`` (see :func:`_distinctive`)."""
    return {name for name in set(_CHAIN.findall(text)) if _distinctive(name)}


def _distinctive(name: str) -> bool:
    """A name that reads as code and is not a keyword, a builtin, a file or an exception.

    Dotted chains (``a.b``, not ``setup.py``) of parts of two or more characters; otherwise
    three or more characters with an underscore (``schema_editor``, ``_meta``,
    ``__main__``) or camel case (``QuerySet``, ``assertEqual``, ``HTTPResponse``).
    """
    if _ERROR_NAME.search(name):
        return False
    if "." in name:
        parts = name.split(".")
        return parts[-1] not in _EXTENSIONS and len(name) >= 5 and all(len(p) >= 2 for p in parts)
    core = name.strip("_")
    if len(name) < 3 or len(core) < 2 or name in _COMMON:
        return False
    return "_" in name or _CAMEL.search(name) is not None


def _tool_result(c: _Collector, event: Event) -> None:
    """Exceptions; the code names of traceback frames and failure lines (``traceback``) and
    of the rest of the result (``seen``)."""
    text = event.message.text
    _errors(c, text, event.seq)
    path = c.reads.pop(event.message.tool_call_id or "", None)
    if path is not None and text:
        c.known_text[path] = _LINE_NUMBER.sub("", text)
    failing: set[str] = set()
    if _FAILURE_HINT.search(text):
        lines = [line for match in _FRAME.finditer(text) for line in match.groups()]
        failing = _identifiers("\n".join(lines + _FAILURE_LINE.findall(text)))
        _symbols(c, failing, event.seq, "traceback")
    _symbols(c, _identifiers(text) - failing, event.seq, "seen")


def _tool_call(c: _Collector, seq: int, call_id: str, name: str, arguments: str) -> set[str]:
    """Record one call's files and written code; return the identifiers its arguments use."""
    args = arguments_object(arguments)
    if args is None:
        return set()
    ops = file_ops_for_call(name, arguments)
    read_paths: list[str] = []
    for op in ops:
        path = op["path"]
        if op["op"] in ("move", "copy"):
            source = op["from"]
            c.touch("file", source, seq, "deleted" if op["op"] == "move" else "read")
            c.touch("file", path, seq, "created")
            continue
        if op["op"] == "write":
            item = c.items.get(("file", path))
            seen = item is not None and not _FILE_WORK.isdisjoint(item[2])
            c.touch("file", path, seq, "edited" if seen else "created")
        else:
            c.touch("file", path, seq, _FILE_OPS[op["op"]])
        if op["op"] == "read":
            read_paths.append(path)
    if len(read_paths) == 1 and call_id:
        c.reads[call_id] = read_paths[0]
    shell = args.get("path") is None
    for key in _SHELL_KEYS:
        value = args.get(key)
        if isinstance(value, str) and shell:
            for script in _ran_scripts(value):
                c.touch("file", script, seq, "ran")
            for directory in _CD.findall(value):
                c.touch("file", directory, seq, "cd")
            break
    paths = [op["path"] for op in ops if op["op"] in ("write", "create", "edit")]
    written = _code_names(c, seq, args, paths) if paths else set()
    texts = [v for k, v in _strings(args) if shell or k not in ("command", *_PATH_KEYS)]
    _errors(c, "\n".join(texts), seq)
    return _identifiers("\n".join(texts)) - written


def _strings(value: object, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string a JSON value holds, with the key it sits under."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def _ran_scripts(command: str) -> list[str]:
    """Scripts and test files a shell command runs, as written."""
    out: list[str] = []
    for part in _SEPARATORS.split(_without_heredocs(command)):
        try:
            words = shell_words(part)
        except (ValueError, RecursionError):
            continue
        while words and ("=" in words[0] and not words[0].startswith("=")):
            words = words[1:]  # VAR=value prefixes
        while words and words[0] in _RUN_WRAPPERS:
            words = words[1:]
            while words and (words[0].startswith("-") or words[0][:1].isdigit()):
                words = words[1:]
        if not words:
            continue
        program, rest = words[0].rsplit("/", 1)[-1], words[1:]
        if _PYTHONS.fullmatch(program):
            if "-c" in rest:
                continue
            if "-m" in rest:
                i = rest.index("-m")
                if i + 1 < len(rest) and rest[i + 1] in _TEST_RUNNERS:
                    out.extend(_test_paths(rest[i + 2 :]))
                continue
            found = next((w for w in rest if not w.startswith("-")), None)
            if found is not None and found.endswith(".py"):
                out.append(found)
        elif program in _TEST_RUNNERS:
            out.extend(_test_paths(rest))
        elif program in _SHELLS:
            found = next((w for w in rest if not w.startswith("-")), None)
            if found is not None and found.endswith(".sh"):
                out.append(found)
        elif words[0].startswith("./") and len(words[0]) > 2:
            out.append(words[0])
    return out


_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1[^\n]*\n")


def _without_heredocs(command: str) -> str:
    """The command with every heredoc body left out (a body is text, not commands)."""
    out: list[str] = []
    at = 0
    while (match := _HEREDOC.search(command, at)) is not None:
        out.append(command[at : match.start()] + "\n")
        end = re.compile(rf"^\s*{re.escape(match[2])}\s*$", re.M).search(command, match.end())
        at = end.end() if end else len(command)
    out.append(command[at:])
    return "".join(out)


def _test_paths(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in operands(args, frozenset({"-k", "-m", "-p", "-c", "--rootdir", "-o"})):
        path = arg.split("::", 1)[0]
        if path.endswith(".py") or "/" in path:
            out.append(path)
    return out


def _code_names(c: _Collector, seq: int, args: Mapping[str, Any], paths: Sequence[str]) -> set[str]:
    """The ``def``/``class`` names an edit or create call writes (and the function it edits),
    recorded and returned."""
    path = paths[0]
    new = next((v for k in _CODE_KEYS if isinstance(v := args.get(k), str)), None)
    old = args.get("old_str")
    old = old if isinstance(old, str) else ""
    if new is None:
        command = next((v for k in _SHELL_KEYS if isinstance(v := args.get(k), str)), "")
        new = _heredoc_body(command)
    if not new:
        return set()
    if args.get("command") == "create" or (not old and path not in c.known_text):
        c.known_text[path] = new
    before = {m[3] for m in _DEF.finditer(old)}
    written: set[str] = set()
    for match in _DEF.finditer(new):
        name = match[3]
        c.touch("symbol", name, seq, "changed" if name in before else "defined")
        written.add(name)
    if old:
        enclosing = _enclosing(c.known_text.get(path, ""), old)
        if enclosing is not None:
            c.touch("symbol", enclosing, seq, "changed")
            written.add(enclosing)
        text = c.known_text.get(path)
        if text is not None and old in text:
            c.known_text[path] = text.replace(old, new, 1)
    return written


def _heredoc_body(command: str) -> str:
    """The body of the first heredoc of a shell command ("" when it has none)."""
    match = _HEREDOC.search(command)
    if match is None:
        return ""
    end = re.compile(rf"^\s*{re.escape(match[2])}\s*$", re.M).search(command, match.end())
    return command[match.end() : end.start() if end else len(command)]


def _enclosing(text: str, old: str) -> str | None:
    """The dotted name of the function or class around ``old`` in ``text``, when found."""
    first = next((ln for ln in old.splitlines() if ln.strip()), "")
    at = text.find(old)
    if at == -1 and first:
        at = text.find(first)
    if at == -1:
        return None
    head = text[:at]
    indent = len(first) - len(first.lstrip()) if first else 0
    chain: list[str] = []
    for match in reversed(list(_DEF.finditer(head[-20_000:]))):
        width = len(match[1].expandtabs(4))
        if width < indent:
            chain.append(match[3])
            indent = width
            if width == 0:
                break
    return ".".join(reversed(chain)) if chain else None


# --------------------------------------------------------------------------- merging, data


def merge_names(previous: Sequence[WorkName], new: Sequence[WorkName]) -> list[WorkName]:
    """``previous`` carried forward with ``new``: counts add, last seq the later, ops joined."""
    merged: dict[tuple[str, str], WorkName] = {}
    for item in [*previous, *new]:
        key = (item.kind, item.name)
        old = merged.get(key)
        if old is None:
            merged[key] = item
            continue
        ops = old.ops + tuple(op for op in item.ops if op not in old.ops)
        merged[key] = WorkName(
            item.kind, item.name, old.count + item.count, max(old.last_seq, item.last_seq), ops
        )
    return list(merged.values())


def names_to_data(names: Iterable[WorkName]) -> list[dict[str, Any]]:
    """The names as JSON-compatible objects: ``kind``, ``name``, ``count``, ``lastSeq``, ``ops``.

    At most :data:`_MAX_STORED`, the best-ranked, in the order given: what a long session
    carries from pass to pass stays bounded.
    """
    names = list(names)
    if len(names) > _MAX_STORED:
        best = {id(n) for n in _ranked(names)[:_MAX_STORED]}
        names = [n for n in names if id(n) in best]
    return [
        {
            "kind": n.kind,
            "name": n.name,
            "count": n.count,
            "lastSeq": n.last_seq,
            "ops": list(n.ops),
        }
        for n in names
    ]


def names_from_data(data: object) -> list[WorkName]:
    """Names read back from :func:`names_to_data`'s objects; malformed entries are skipped."""
    if not isinstance(data, list):
        return []
    out: list[WorkName] = []
    for item in data:
        if not isinstance(item, Mapping):
            continue
        kind, name, count, last, ops = (
            item.get(k) for k in ("kind", "name", "count", "lastSeq", "ops")
        )
        if (
            kind not in NAME_KINDS
            or not isinstance(name, str)
            or not name.strip()
            or "\n" in name
            or type(count) is not int
            or count < 1
            or type(last) is not int
            or last < 0
        ):
            continue
        if ops is None:
            ops = []
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            continue
        out.append(WorkName(kind, name, count, last, tuple(dict.fromkeys(ops))))
    return merge_names([], out)


# --------------------------------------------------------------------------- rendering

_HEADING = "## Names"
_SYMBOL_OPS: tuple[tuple[str, str], ...] = (
    ("changed", "Code changed"),
    ("defined", "Code defined"),
    ("used", "Code used"),
    ("task", "Code in the task"),
    ("traceback", "Code in tracebacks"),
    ("mentioned", "Code mentioned"),
    ("seen", "Code seen in results"),
)
"""The lines of the code names, each name on the first line whose op it has."""
_WEIGHTS: Mapping[tuple[str, str], float] = {
    ("file", "created"): 0.5, ("file", "edited"): 0.5, ("file", "ran"): 0.5,
    ("file", "deleted"): 0.5, ("file", "cd"): 0.5, ("file", "read"): 0.2,
    ("file", "mentioned"): 0.1, ("symbol", "defined"): 0.5, ("symbol", "changed"): 0.5,
    ("symbol", "used"): 0.5, ("symbol", "mentioned"): 0.25, ("symbol", "task"): 0.2,
    ("symbol", "seen"): -0.6, ("symbol", "traceback"): -0.3, ("file", "task"): -0.3,
}  # fmt: skip
"""What was done to a name, by how much it raises the name's rank (the best op counts)."""
_ERROR_WEIGHT = 0.2
_RECENCY_WEIGHT = 1.0
"""How much the latest name outranks the oldest one."""
_FILE_WORK = frozenset({"read", "created", "edited", "deleted", "ran", "cd"})
"""The ops a file's entry shows (that the agent or the task wrote the path goes unsaid)."""
_TASK_RECENCY = 0.5
"""The least recency a name of the task has: the task stays what the work comes back to
(and one the task writes as code, a command it asks for, ranks as if written last)."""
_MAX_RANKED = 400
_MAX_STORED = 250
"""The most names a checkpoint stores for the next pass (the best-ranked)."""


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def occurs(name: str, text: str) -> bool:
    """``name`` is in ``text`` verbatim, with no letter, digit or underscore at either side."""
    size = len(name)
    start = text.find(name)
    while start != -1:
        end = start + size
        if (start == 0 or not _is_word(text[start - 1])) and (
            end == len(text) or not _is_word(text[end])
        ):
            return True
        start = text.find(name, start + 1)
    return False


def _ranked(names: Sequence[WorkName]) -> list[WorkName]:
    """Most recent and most touched first; what was done to a name (an edit, a run, a use in
    a command, the task naming it) weighs more than reading or mentioning it."""
    if not names:
        return []
    order = sorted({n.last_seq for n in names})
    position = {seq: i for i, seq in enumerate(order)}
    span = max(len(order) - 1, 1)

    def score(n: WorkName) -> float:
        recency = position[n.last_seq] / span
        if n.kind == "symbol" and "task" in n.ops:
            recency = max(recency, 1.0 if "task code" in n.ops else _TASK_RECENCY)
        often = math.log2(1 + min(n.count, 64)) / 6
        work = max((_WEIGHTS.get((n.kind, op), 0.0) for op in n.ops), default=0.0)
        work = _ERROR_WEIGHT if n.kind == "error" else work
        return _RECENCY_WEIGHT * recency + often + work

    return sorted(names, key=lambda n: (-score(n), len(n.name), n.kind, n.name))


def _entry(n: WorkName) -> str:
    shown = [op for op in n.ops if op in _FILE_WORK]
    ops = f" ({', '.join(shown)})" if shown else ""
    times = f" ×{n.count}" if n.count > 1 else ""
    return f"{n.name}{ops}{times}"


def _block(chosen: Sequence[WorkName]) -> str:
    lines = [_HEADING]
    files = [_entry(n) for n in chosen if n.kind == "file"]
    if files:
        lines.append("Files: " + "; ".join(files))
    errors = [n.name for n in chosen if n.kind == "error"]
    if errors:
        lines.append("Errors: " + ", ".join(errors))
    symbols = [n for n in chosen if n.kind == "symbol"]
    for op, label in _SYMBOL_OPS:
        listed = [n.name for n in symbols if op in n.ops]
        symbols = [n for n in symbols if op not in n.ops]
        if listed:
            lines.append(f"{label}: " + ", ".join(listed))
    if symbols:
        lines.append("Code: " + ", ".join(n.name for n in symbols))
    return "\n".join(lines)


def _new_names(ranked: Sequence[WorkName]) -> list[WorkName]:
    """``ranked`` less each name that occurs within a better-ranked one (``a.b`` holds ``b``)."""
    out: list[WorkName] = []
    seen = ""
    for n in ranked:
        if not occurs(n.name, seen):
            out.append(n)
            seen += n.name + "\n"
    return out


def render_names(
    names: Sequence[WorkName],
    *,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    visible_text: str = "",
) -> str:
    """The names block: the best-ranked names not already in ``visible_text``, within budget.

    Names are ranked by recency, by how often the work touched them and by what was done to
    them; a name within a better-ranked one (``schema_editor`` in
    ``connection.schema_editor``) is not listed again, and the lowest-ranked are dropped
    first until the block fits ``budget_tokens`` as ``count_tokens`` counts it. One line per
    kind: files with what was done (``; ``-separated), then errors, then the code names
    (``, ``-separated) on a line per op. ``""`` when there is nothing to say or not even one
    name fits.
    """
    candidates = [
        n
        for n in names
        if n.kind in NAME_KINDS
        and n.name
        and "\n" not in n.name
        and not occurs(n.name, visible_text)
    ]
    ranked = _new_names(_ranked(candidates)[:_MAX_RANKED])
    if budget_tokens <= 0 or not ranked:
        return ""

    def fits(k: int) -> bool:
        return count_tokens(_block(ranked[:k])) <= budget_tokens

    low, high = 0, len(ranked)  # fits(low) is assumed; find the largest k that fits
    if fits(high):
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    while low > 0 and not fits(low):  # a counter that is not monotone in the names
        low -= 1
    return _block(ranked[:low]) if low > 0 else ""
