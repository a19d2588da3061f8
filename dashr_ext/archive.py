"""The compaction archive: bucketing, file-operation extraction, footers and markers.

Everything here is a pure function of its inputs (no I/O, no IPython), so the
archive and the footers are rebuilt byte-identically when a session is replayed.

Archive entry
=============
:func:`build_entry` turns the span a checkpoint shadows into one plain-data entry
of the kernel dict ``dashr_compaction_archive``::

    {"meta": {"checkpoint", "at", "reason", "engine", "seqs", "tokens", "session"},
     "user_requests":       [{"seq", "ts", "text"}],
     "assistant_responses": [{"seq", "ts", "text", "tool_calls": [{"id", "name", "arguments"}],
                              "reasoning"}],
     "tool_results":        [{"seq", "ts", "tool", "text", "is_error", "tool_call_id"}],
     "file_ops":            [{"seq", "op", "path"(, "from")}],
     "prior_checkpoints":   [{"seq", "checkpoint", "text"}],
     "context":             [{"seq", "ts", "text"}]}

Classification is mechanical. Every message of the span lands in exactly one of
``user_requests``, ``assistant_responses``, ``tool_results``,
``prior_checkpoints`` and ``context``:

* ``user/message`` or ``context/message`` whose ``source.kind`` is
  ``"compact-checkpoint"`` → ``prior_checkpoints`` (its id is ``source["checkpoint"]``,
  ``None`` when absent);
* any other ``user/message`` → ``user_requests``;
* ``assistant/message`` → ``assistant_responses``;
* ``tool/result`` → ``tool_results``;
* any other ``context/message`` → ``context``.

``file_ops`` is derived on top (see :func:`extract_file_ops`), so it does not take part
in the exactly-one rule.

Text rules:

* ``text`` is the message's text blocks verbatim, joined by ``"\\n"``; image blocks
  appear in place as ``[image image/png 800x600 attachment att-1]`` (``[image image/png
  attachment att-1]`` when the size is unknown). Reasoning and tool-call blocks are not
  part of ``text``.
* ``reasoning`` (assistant only) is the reasoning blocks joined by ``"\\n"`` (``""`` when the
  message has none). With ``archive_reasoning=False`` the key stays but holds ``None``, so
  "not archived" is distinguishable from "there was none" and the schema never changes.
* ``tool_calls[*].arguments`` is the JSON string exactly as the model produced it.
* ``ts`` and ``meta.at`` are ISO-8601 UTC with milliseconds, e.g. ``2026-07-06T12:03:05.123Z``.

All values are ``str``/``int``/``bool``/``None``/``list``/``dict``, so an entry survives
``json``, ``pickle`` and ``dill`` unchanged.

Footers
=======
:func:`compose_footer` is the single composition point: it derives the checkpoint footer
and, when the archive write succeeded, the archive marker from the ``compaction/summary``
event's data alone, so replaying the log reproduces the text byte for byte.

Size cap
========
With ``archive_max_bytes`` set, :func:`apply_cap` names the oldest entries to replace by
:func:`evicted_stub` until the archive fits. The newest entry is never evicted (the marker
that was just written points at it), so an archive whose newest entry alone exceeds the
cap stays over it. Nothing is lost: the log keeps every original, ``history_read`` reads it.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeAlias

from .errors import ConfigError, EventError
from .events import Event, ImageBlock, Message, ReasoningBlock, TextBlock, render_image

__all__ = [
    "ARCHIVE_VARIABLE",
    "BUCKETS",
    "EXAMPLE_ORDER",
    "FILE_OP_KINDS",
    "MESSAGE_BUCKETS",
    "ArchiveEntry",
    "apply_cap",
    "archive_marker",
    "bucket_counts",
    "build_entry",
    "checkpoint_footer",
    "compose_footer",
    "entry_for_summary",
    "entry_size_bytes",
    "evicted_stub",
    "extract_file_ops",
    "file_ops_for_call",
    "is_evicted",
    "iso_utc",
    "render_image",
]

ArchiveEntry: TypeAlias = dict[str, Any]

ARCHIVE_VARIABLE = "dashr_compaction_archive"
"""Name of the kernel variable holding the archive (a plain ``dict``)."""

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

EXAMPLE_ORDER: tuple[str, ...] = (
    "tool_results",
    "assistant_responses",
    "user_requests",
    "prior_checkpoints",
    "context",
)
"""Preference order of the bucket named in the marker's ``print(...)`` example."""

FILE_OP_KINDS: tuple[str, ...] = ("read", "write", "edit", "create", "delete", "move", "copy")

CHECKPOINT_KIND = "compact-checkpoint"


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
        if event.message.source_kind == CHECKPOINT_KIND:
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
    that is not a surface message.
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


def bucket_counts(entry: Mapping[str, Any]) -> dict[str, int]:
    """Item counts of the non-meta buckets of a full entry, in :data:`BUCKETS` order."""
    return {bucket: len(entry[bucket]) for bucket in BUCKETS}


# --------------------------------------------------------------------------- file operations


class _Op(NamedTuple):
    op: str
    path: str
    source: str | None = None


def extract_file_ops(span: Iterable[Event]) -> list[dict[str, Any]]:
    """File operations named by the tool calls of the span's assistant messages.

    Only tool-call arguments are read; text and reasoning are never scanned. Each item is
    ``{"seq", "op", "path"}`` with ``op`` one of :data:`FILE_OP_KINDS`; ``move`` and ``copy``
    also carry ``"from"`` (``path`` is the destination as written). Paths are kept as
    written (never resolved against a working directory). Identical items are reported
    once, in order of appearance. See :func:`file_ops_for_call` for the recognised forms.
    """
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, str, str, str | None]] = set()
    for event in span:
        if event.type != "assistant/message":
            continue
        for call in event.message.tool_calls:
            for op in _call_ops(call.name, call.arguments):
                key = (event.seq, op.op, op.path, op.source)
                if key in seen:
                    continue
                seen.add(key)
                item: dict[str, Any] = {"seq": event.seq, "op": op.op, "path": op.path}
                if op.source is not None:
                    item["from"] = op.source
                out.append(item)
    return out


def file_ops_for_call(name: str, arguments: str) -> list[dict[str, Any]]:
    """The file operations of one tool call (``{"op", "path"}`` items, ``"from"`` on move/copy).

    Recognised forms:

    * editor tools (OpenHands ``str_replace_editor`` and the like): a ``command`` of
      ``view`` (read), ``create`` (create), ``str_replace``/``insert``/``undo_edit`` (edit)
      with a ``path``;
    * code tools (``run_cell``, ``python``, ``execute_code``, …) with a ``code`` argument:
      Python ``open(path, mode)`` (no mode or ``r`` → read, ``w``/``x``/``a`` → write,
      ``r+`` → edit), ``Path(p).read_text/read_bytes`` (read), ``write_text/write_bytes``
      (write), ``.open(mode)``, ``.unlink`` (delete), ``.touch`` (create),
      ``.rename/.replace`` (move), ``os.remove/os.unlink/shutil.rmtree`` (delete),
      ``os.rename/os.replace/shutil.move`` (move), ``shutil.copy/copy2/copyfile`` (copy),
      ``pd.read_*`` (read), ``df.to_csv(...)``-style writers (write); IPython ``%%writefile``
      (write), ``%%bash`` cells and ``!`` lines (as shell). Code that does not parse falls
      back to a regex for ``open(...)`` and ``Path(...).read_text()``-style calls;
    * shell tools (``bash``, ``execute_bash``, ``shell``, …) with a ``command``/``cmd``/
      ``script`` argument: ``cat/nl/less/more/head/tail F`` (read), ``sed -i … F`` (edit),
      ``sed … F`` (read), ``tee [-a] F`` (write), ``> F``/``>> F``/``&> F`` (write),
      ``< F`` (read), ``rm F…``/``unlink F`` (delete), ``touch F`` (create), ``mv A B``
      (move), ``cp A B`` (copy), ``bash -c '…'``, ``python -c '…'`` and
      ``python <<EOF … EOF`` (analysed recursively), ``apply_patch`` patches. Chains with
      ``&&``, ``||``, ``;``, ``|`` and newlines are split; heredoc bodies are never read as
      commands; ``2>&1``-style duplications and ``/dev/*`` targets are not file ops;
    * other tools whose name says what they do (``read``/``view``/``open``/``cat`` → read,
      ``write``/``save``/``append`` → write, ``create``/``new``/``touch`` → create,
      ``edit``/``replace``/``patch``/``modify``/``insert`` → edit,
      ``delete``/``remove``/``rm``/``unlink`` → delete, ``move``/``rename``/``mv`` → move,
      ``copy``/``cp`` → copy; name words are split on ``_``/``-``/camelCase, and a word that
      starts with a keyword of four letters or more counts, e.g. ``readfile``; the strongest
      operation wins: delete, move, copy, edit, create, write, read) with a
      ``path``/``file_path``/``filepath``/``filename``/``file`` argument (or a list under
      ``paths``/``files``), or, for move/copy, source and destination arguments.

    Arguments that are not a JSON object give no operations. Searching (``grep``, ``find``),
    listing (``ls``) and running a script are not file operations. Shell words that are only
    a variable or a command substitution (``$f``, ``$(…)``) are not paths.
    """
    out: list[dict[str, Any]] = []
    for op in _dedupe(_call_ops(name, arguments)):
        item: dict[str, Any] = {"op": op.op, "path": op.path}
        if op.source is not None:
            item["from"] = op.source
        out.append(item)
    return out


def _dedupe(ops: Iterable[_Op]) -> list[_Op]:
    seen: set[_Op] = set()
    out: list[_Op] = []
    for op in ops:
        if op not in seen:
            seen.add(op)
            out.append(op)
    return out


_EDITOR_COMMANDS: Mapping[str, str] = {
    "view": "read",
    "create": "create",
    "str_replace": "edit",
    "insert": "edit",
    "undo_edit": "edit",
}
# fmt: off
_STRICT_SHELL_TOKENS = frozenset({"bash", "sh", "zsh", "shell", "terminal"})
_RUNNER_TOKENS = frozenset({"exec", "execute", "run", "eval", "repl", "console", "kernel"})
_SHELL_NAME_TOKENS = _STRICT_SHELL_TOKENS | _RUNNER_TOKENS | {"command", "cmd"}
_CODE_NAME_TOKENS = _RUNNER_TOKENS | {
    "python", "py", "ipython", "cell", "jupyter", "notebook", "code",
}
_SHELL_ARG_KEYS = ("command", "cmd", "script")
_PATH_KEYS = (
    "path", "file_path", "filepath", "filename", "file", "file_name", "target_file",
    "notebook_path", "absolute_path", "relative_path",
)
_PATH_LIST_KEYS = ("paths", "file_paths", "files", "filenames")
_SOURCE_KEYS = ("source", "src", "from", "from_path", "old_path", "source_path")
_DEST_KEYS = (
    "destination", "dest", "dst", "to", "to_path", "new_path", "target", "destination_path",
)
# fmt: on
# Checked in this order: the more specific (stronger) operation wins.
_NAME_KEYWORDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("delete", frozenset({"delete", "remove", "rm", "unlink", "del"})),
    ("move", frozenset({"move", "rename", "mv"})),
    ("copy", frozenset({"copy", "cp"})),
    ("edit", frozenset({"edit", "replace", "patch", "modify", "insert"})),
    ("create", frozenset({"create", "new", "touch"})),
    ("write", frozenset({"write", "save", "overwrite", "append"})),
    ("read", frozenset({"read", "view", "open", "cat"})),
)


def _name_tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if t]


def _keyword_op(tokens: Sequence[str]) -> str | None:
    for op, words in _NAME_KEYWORDS:
        for token in tokens:
            if token in words:
                return op
            for word in words:
                if len(word) >= 4 and token.startswith(word):  # readfile, writefile, …
                    return op
    return None


def _call_ops(name: str, arguments: str) -> list[_Op]:
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):
        return []
    if not isinstance(args, dict):
        return []
    command = args.get("command")
    path = args.get("path")
    if isinstance(command, str) and command in _EDITOR_COMMANDS and isinstance(path, str) and path:
        return [_Op(_EDITOR_COMMANDS[command], path)]
    tokens = _name_tokens(name)
    token_set = set(tokens)
    code = args.get("code")
    if (
        isinstance(code, str)
        and token_set & _CODE_NAME_TOKENS
        and not token_set & _STRICT_SHELL_TOKENS
    ):
        return _cell_ops(code)
    if token_set & _SHELL_NAME_TOKENS:
        for key in _SHELL_ARG_KEYS:
            value = args.get(key)
            if isinstance(value, str):
                return _shell_ops(value)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return _argv_ops(value)
    if "patch" in token_set:
        for key in ("input", "patch", "diff"):
            value = args.get(key)
            if isinstance(value, str) and "*** Begin Patch" in value:
                return _patch_ops(value)
    op = _keyword_op(tokens)
    if op is None:
        return []
    return _keyword_tool_ops(op, args)


def _keyword_tool_ops(op: str, args: Mapping[str, Any]) -> list[_Op]:
    if op in ("move", "copy"):
        source = _first_str(args, _SOURCE_KEYS)
        dest = _first_str(args, _DEST_KEYS)
        return [_Op(op, dest, source)] if source is not None and dest is not None else []
    paths: list[str] = []
    single = _first_str(args, _PATH_KEYS)
    if single is not None:
        paths.append(single)
    for key in _PATH_LIST_KEYS:
        value = args.get(key)
        if isinstance(value, list):
            paths.extend(v for v in value if isinstance(v, str) and v)
    return [_Op(op, p) for p in paths]


def _first_str(args: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


# ---- shell ----------------------------------------------------------------------------

_OPERATORS = (
    "&>>", "<<<", "<<-", "&&", "||", ";;", "|&", "&>", ">>", ">&", ">|", "<<", "<>", "<&",
    ">", "<", "|", "&", ";", "(", ")",
)  # fmt: skip
_OPERATOR_CHARS = frozenset(";&|<>()")
_SEPARATORS = frozenset({";", "&&", "||", "|", "|&", "&", ";;", "(", ")"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_MAX_DEPTH = 3


@dataclass
class _Tok:
    kind: str  # "word" or "op"
    text: str
    body: str | None = None  # heredoc body, on the delimiter word


def _closing(s: str, start: int, quote: str) -> int:
    """Index of the quote closing one opened just before ``start``, or -1."""
    i = start
    while i < len(s):
        c = s[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if c == quote:
            return i
        i += 1
    return -1


def _balanced(s: str, start: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching the ``open_`` at ``start``, or -1."""
    depth = 0
    i = start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"" and open_ == "(":
            end = _closing(s, i + 1, c)
            if end < 0:
                return -1
            i = end + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _lex(s: str) -> list[_Tok]:
    """Split a shell script into words and operators, POSIX-quote-aware.

    Heredoc bodies are attached to their delimiter word and never tokenised. An unbalanced
    quote is taken as a literal character (the fallback for text that is not valid shell).
    """
    toks: list[_Tok] = []
    buf: list[str] = []
    in_word = False
    quoted = False
    expect_delim: bool | None = None  # strip-tabs flag of a heredoc whose delimiter comes next
    unbalanced = False  # once a $( or ${ is unclosed, later ones are literal (keeps this linear)
    pending: list[tuple[_Tok, bool]] = []
    i, n = 0, len(s)

    def flush() -> None:
        nonlocal in_word, quoted, expect_delim
        if in_word:
            tok = _Tok("word", "".join(buf))
            toks.append(tok)
            if expect_delim is not None:
                pending.append((tok, expect_delim))
                expect_delim = None
        buf.clear()
        in_word = quoted = False

    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 < n and s[i + 1] == "\n":
                i += 2
                continue
            buf.append(s[i + 1] if i + 1 < n else c)
            in_word = quoted = True
            i += 2
            continue
        if c in "'\"":
            end = _closing(s, i + 1, c)
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            inner = s[i + 1 : end]
            if c == '"':
                inner = re.sub(r'\\([\\"$`])', r"\1", inner).replace("\\\n", "")
            buf.append(inner)
            in_word = quoted = True
            i = end + 1
            continue
        if c == "$" and i + 1 < n and s[i + 1] in "({'":
            if s[i + 1] == "'":
                end = _closing(s, i + 2, "'")
            elif unbalanced:
                end = -1
            else:
                end = _balanced(s, i + 1, s[i + 1], ")" if s[i + 1] == "(" else "}")
                unbalanced = end < 0
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            buf.append(s[i : end + 1])
            in_word = quoted = True
            i = end + 1
            continue
        if c == "`":
            end = _closing(s, i + 1, "`")
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            buf.append(s[i : end + 1])
            in_word = quoted = True
            i = end + 1
            continue
        if c == "#" and not in_word:
            end = s.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "\n":
            flush()
            toks.append(_Tok("op", ";"))
            i += 1
            for tok, strip_tabs in pending:
                lines: list[str] = []
                while i < n:
                    end = s.find("\n", i)
                    line = s[i:] if end < 0 else s[i:end]
                    i = n if end < 0 else end + 1
                    if (line.lstrip("\t") if strip_tabs else line).rstrip("\r") == tok.text:
                        break
                    lines.append(line)
                tok.body = "\n".join(lines)
            pending.clear()
            continue
        if c in " \t\r":
            flush()
            i += 1
            continue
        if c in _OPERATOR_CHARS:
            op = next(o for o in _OPERATORS if s.startswith(o, i))
            text = "".join(buf)
            if op[0] in "<>" and in_word and not quoted and text.isdigit():
                buf.clear()  # an fd number prefix (2>, 1>>): not a word
                in_word = False
            flush()
            toks.append(_Tok("op", op))
            if op in ("<<", "<<-"):
                expect_delim = op == "<<-"
            i += len(op)
            continue
        buf.append(c)
        in_word = True
        i += 1
    flush()
    return toks


@dataclass
class _Command:
    argv: list[str]
    redirects: list[tuple[str, _Tok | None]]


def _commands(toks: Sequence[_Tok]) -> Iterator[_Command]:
    argv: list[str] = []
    redirects: list[tuple[str, _Tok | None]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.kind == "op" and tok.text in _SEPARATORS:
            if argv or redirects:
                yield _Command(argv, redirects)
            argv, redirects = [], []
        elif tok.kind == "op":
            target = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "word" else None
            redirects.append((tok.text, target))
            if target is not None:
                i += 1
        else:
            argv.append(tok.text)
        i += 1
    if argv or redirects:
        yield _Command(argv, redirects)


def _shell_ops(script: str, depth: int = 0) -> list[_Op]:
    if depth > _MAX_DEPTH:
        return []
    out: list[_Op] = []
    for command in _commands(_lex(script)):
        out.extend(_command_ops(command, depth))
    return out


def _argv_ops(argv: Sequence[str]) -> list[_Op]:
    """Operations of an exec-style argv (``["bash", "-lc", "…"]``)."""
    return _command_ops(_Command(list(argv), []), 0)


_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time"})
# Commands that run the rest of the line, with their options that take a value.
_PREFIX_COMMANDS: Mapping[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "nohup": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _strip_prefixes(argv: list[str]) -> list[str]:
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _RESERVED or _ASSIGNMENT.match(word):
            i += 1
        elif word in _PREFIX_COMMANDS:
            value_options = _PREFIX_COMMANDS[word]
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in value_options else 1
        elif word == "timeout":
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in ("-s", "-k", "--signal", "--kill-after") else 1
            i += 1  # the duration
        else:
            break
    return argv[i:]


def _operands(args: Sequence[str], value_options: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(a for a in args[i + 1 :] if a)
            break
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in value_options else 1
            continue
        if arg and arg != "-":
            out.append(arg)
        i += 1
    return out


def _is_device(path: str) -> bool:
    return path.startswith("/dev/") or path == "/dev"


_EXPANSION_ONLY = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^}]*\}|\$\(.*\)|`.*`", re.DOTALL)


def _shell_path(word: str) -> bool:
    """Whether a shell word names a file: not a device, not just a variable or substitution."""
    return bool(word) and not _is_device(word) and _EXPANSION_ONLY.fullmatch(word) is None


_READ_COMMANDS: Mapping[str, frozenset[str]] = {
    "cat": frozenset(),
    "tac": frozenset(),
    "less": frozenset(),
    "more": frozenset(),
    "bat": frozenset(),
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"}),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
}
_PYTHON = re.compile(r"python[0-9.]*")
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})


def _command_ops(command: _Command, depth: int) -> list[_Op]:
    out: list[_Op] = []
    argv = _strip_prefixes(command.argv)
    heredoc = next(
        (t.body for op, t in command.redirects if op in ("<<", "<<-") and t and t.body is not None),
        None,
    )
    if argv:
        name = argv[0].rsplit("/", 1)[-1]
        out.extend(
            op
            for op in _program_ops(name, argv[1:], heredoc, depth)
            if _shell_path(op.path) and (op.source is None or _shell_path(op.source))
        )
    for op, target in command.redirects:
        if target is None or not _shell_path(target.text):
            continue
        path = target.text
        if op in _WRITE_REDIRECTS or (op == ">&" and not (path.isdigit() or path == "-")):
            out.append(_Op("write", path))
        elif op in ("<", "<>"):
            out.append(_Op("read", path))
    return out


def _program_ops(name: str, args: list[str], heredoc: str | None, depth: int) -> list[_Op]:
    if name in _READ_COMMANDS:
        return [_Op("read", p) for p in _operands(args, _READ_COMMANDS[name])]
    if name == "sed":
        return _sed_ops(args)
    if name == "tee":
        return [_Op("write", p) for p in _operands(args)]
    if name in ("rm", "unlink"):
        return [_Op("delete", p) for p in _operands(args)]
    if name == "touch":
        return [_Op("create", p) for p in _operands(args, frozenset({"-d", "-r", "-t"}))]
    if name in ("mv", "cp"):
        return _transfer_ops("move" if name == "mv" else "copy", args)
    if name in _SHELLS:
        script = _dash_c(args)
        if script is not None:
            return _shell_ops(script, depth + 1)
        if heredoc is not None and not _operands(args):
            return _shell_ops(heredoc, depth + 1)
        return []
    if _PYTHON.fullmatch(name):
        code = _dash_c(args)
        if code is not None:
            return _python_ops(code)
        if heredoc is not None and not _operands(args):
            return _python_ops(heredoc)
        return []
    if name in ("apply_patch", "applypatch"):
        text = heredoc if heredoc is not None else (args[0] if args else "")
        return _patch_ops(text)
    return []


def _dash_c(args: Sequence[str]) -> str | None:
    """The script of ``-c SCRIPT`` (also in clusters such as ``-lc``), if present."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return args[i + 1] if i + 1 < len(args) else None
        if not arg.startswith("-"):
            return None
    return None


def _sed_ops(args: Sequence[str]) -> list[_Op]:
    in_place = False
    has_script = False
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            operands.extend(args[i + 1 :])
            break
        if arg.startswith("--"):
            if arg.startswith("--in-place"):
                in_place = True
            elif arg.startswith(("--expression", "--file")):
                has_script = True
                if "=" not in arg:
                    i += 1
            elif arg in ("--line-length",):
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            for j, flag in enumerate(arg[1:], start=1):
                if flag == "i":
                    in_place = True
                    break  # the rest of the cluster is a backup suffix
                if flag in "efl":
                    if flag in "ef":
                        has_script = True
                    if j == len(arg) - 1:
                        i += 1  # the value is the next argument
                    break
        elif not has_script:
            has_script = True  # the first operand is the script
        else:
            operands.append(arg)
        i += 1
    op = "edit" if in_place else "read"
    return [_Op(op, p) for p in operands if p != "-"]


def _transfer_ops(op: str, args: Sequence[str]) -> list[_Op]:
    target_dir: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-t", "--target-directory") and i + 1 < len(args):
            target_dir = args[i + 1]
            i += 2
            continue
        if arg.startswith("--target-directory="):
            target_dir = arg.split("=", 1)[1]
        elif arg in ("-S", "--suffix"):
            i += 1
        else:
            rest.append(arg)
        i += 1
    operands = _operands(rest)
    if target_dir is None:
        if len(operands) < 2:
            return []
        target_dir = operands.pop()
    return [_Op(op, target_dir, source) for source in operands]


_PATCH_HEADER = re.compile(r"\*\*\* (?:(Add|Update|Delete) File|(Move) to): (.+)")


def _patch_ops(text: str) -> list[_Op]:
    """Operations of an ``apply_patch`` envelope (``*** Update File: path`` headers)."""
    out: list[_Op] = []
    last_update: str | None = None
    for line in text.splitlines():
        match = _PATCH_HEADER.match(line)
        if match is None:
            continue
        kind, moved, path = match[1], match[2], match[3].strip()
        if not path:
            continue
        if moved is not None:
            if last_update is not None:
                out.append(_Op("move", path, last_update))
            continue
        last_update = path if kind == "Update" else None
        out.append(_Op({"Add": "create", "Update": "edit", "Delete": "delete"}[kind], path))
    return out


# ---- Python and IPython cells -----------------------------------------------------------

_SHELL_CELL_MAGICS = frozenset({"bash", "sh", "script", "system"})
_PYTHON_CELL_MAGICS = frozenset({"python", "python3", "capture", "time", "timeit", "prun"})
_SHELL_LINE = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*=\s*)?(?:!!?|%(?:sx|system)\s)(.*)$")


def _cell_ops(code: str) -> list[_Op]:
    """Operations of a notebook cell: Python plus IPython ``!`` lines and cell magics."""
    lines = code.split("\n")
    while lines and lines[0].strip().startswith("%%"):
        magic, _, rest = lines[0].strip()[2:].partition(" ")
        if magic == "writefile":
            paths = _operands([t.text for t in _lex(rest) if t.kind == "word"])
            return [_Op("write", paths[0])] if paths else []
        if magic in _SHELL_CELL_MAGICS:
            return _shell_ops("\n".join(lines[1:]))
        if magic not in _PYTHON_CELL_MAGICS:
            return []
        lines = lines[1:]  # %%time, %%capture, …: the rest of the cell is still Python
    keyed: list[tuple[int, int, _Op]] = []
    python_lines: list[str] = []
    for number, line in enumerate(lines, start=1):
        match = _SHELL_LINE.match(line)
        if match is not None:
            keyed.extend((number, -1, op) for op in _shell_ops(match.group(1)))
            python_lines.append("")
        elif line.lstrip().startswith("%"):
            python_lines.append("")
        else:
            python_lines.append(line)
    keyed.extend(_python_keyed_ops("\n".join(python_lines)))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [op for _, _, op in keyed]


def _python_ops(code: str) -> list[_Op]:
    return [op for _, _, op in sorted(_python_keyed_ops(code), key=lambda k: (k[0], k[1]))]


_PATH_CONSTRUCTORS = frozenset({"Path", "PurePath", "PosixPath", "WindowsPath"})
_PATH_METHODS: Mapping[str, str] = {
    "read_text": "read",
    "read_bytes": "read",
    "write_text": "write",
    "write_bytes": "write",
    "unlink": "delete",
    "touch": "create",
}
_MODULE_FUNCTIONS: Mapping[tuple[str, str], str] = {
    ("os", "remove"): "delete",
    ("os", "unlink"): "delete",
    ("shutil", "rmtree"): "delete",
    ("os", "rename"): "move",
    ("os", "replace"): "move",
    ("shutil", "move"): "move",
    ("shutil", "copy"): "copy",
    ("shutil", "copy2"): "copy",
    ("shutil", "copyfile"): "copy",
}
_PANDAS_WRITERS = frozenset(
    {"to_csv", "to_parquet", "to_json", "to_excel", "to_feather", "to_pickle", "to_hdf",
     "to_stata", "to_html", "to_orc"}
)  # fmt: skip


def _python_keyed_ops(code: str) -> list[tuple[int, int, _Op]]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _python_regex_ops(code)
    out: list[tuple[int, int, _Op]] = []
    try:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                op = _python_call_op(node)
                if op is not None:
                    out.append((node.lineno, node.col_offset, op))
    except RecursionError:  # absurdly deep expressions
        return _python_regex_ops(code)
    return out


def _const_path(node: ast.expr | None) -> str | None:
    """A literal path: a string constant or ``Path("...")`` of one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
        return node.value
    if (
        isinstance(node, ast.Call)
        and _dotted(node.func).rsplit(".", 1)[-1] in _PATH_CONSTRUCTORS
        and len(node.args) == 1
        and not node.keywords
    ):
        return _const_path(node.args[0])
    return None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index and not any(
        isinstance(a, ast.Starred) for a in call.args[: index + 1]
    ):
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _mode_op(mode: ast.expr | None) -> str | None:
    if mode is None:
        return "read"
    if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
        return None
    return _mode_text_op(mode.value)


def _mode_text_op(mode: str) -> str:
    if any(c in mode for c in "wxa"):
        return "write"
    if "+" in mode:
        return "edit"
    return "read"


def _python_call_op(call: ast.Call) -> _Op | None:
    func = call.func
    name = _dotted(func)
    if name in ("open", "io.open", "codecs.open", "builtins.open"):
        path = _const_path(_argument(call, 0, "file" if name != "codecs.open" else "filename"))
        op = _mode_op(_argument(call, 1, "mode"))
        return _Op(op, path) if path is not None and op is not None else None
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _const_path(func.value) if isinstance(func.value, ast.Call) else None
    if receiver is not None:
        if func.attr in _PATH_METHODS:
            return _Op(_PATH_METHODS[func.attr], receiver)
        if func.attr == "open":
            op = _mode_op(_argument(call, 0, "mode"))
            return _Op(op, receiver) if op is not None else None
        if func.attr in ("rename", "replace"):
            target = _const_path(_argument(call, 0, "target"))
            return _Op("move", target, receiver) if target is not None else None
        return None
    module = _dotted(func.value)
    kind = _MODULE_FUNCTIONS.get((module, func.attr))
    if kind is not None:
        first = _const_path(_argument(call, 0, "src" if kind != "delete" else "path"))
        if first is None:
            return None
        if kind == "delete":
            return _Op(kind, first)
        second = _const_path(_argument(call, 1, "dst"))
        return _Op(kind, second, first) if second is not None else None
    if module in ("pd", "pandas") and func.attr.startswith("read_"):
        path = _const_path(_argument(call, 0, "filepath_or_buffer"))
        return _Op("read", path) if path is not None else None
    if func.attr in _PANDAS_WRITERS:
        path = _const_path(_argument(call, 0, "path_or_buf"))
        return _Op("write", path) if path is not None else None
    return None


_OPEN_RE = re.compile(
    r"""\bopen\(\s*(?:Path\(\s*)?(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*\)?"""
    r"""\s*(?:,\s*(?:mode\s*=\s*)?(?P<mq>['"])(?P<mode>[rwxabt+]*)(?P=mq))?"""
)
_PATH_METHOD_RE = re.compile(
    r"""\bPath\(\s*(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*\)\s*\.\s*"""
    r"""(?P<method>read_text|read_bytes|write_text|write_bytes|unlink|touch)\("""
)


def _python_regex_ops(code: str) -> list[tuple[int, int, _Op]]:
    """Fallback for code that does not parse: literal ``open(...)`` and ``Path(...).method(``."""
    found: list[tuple[int, _Op]] = []
    for match in _OPEN_RE.finditer(code):
        if code[match.start() - 1 : match.start()] == ".":
            continue  # some_object.open(...), not the builtin
        found.append((match.start(), _Op(_mode_text_op(match["mode"] or "r"), match["path"])))
    for match in _PATH_METHOD_RE.finditer(code):
        found.append((match.start(), _Op(_PATH_METHODS[match["method"]], match["path"])))
    out: list[tuple[int, int, _Op]] = []
    for offset, op in found:
        line_start = code.rfind("\n", 0, offset) + 1
        out.append((code.count("\n", 0, offset) + 1, offset - line_start, op))
    return out


# --------------------------------------------------------------------------- footers


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


# --------------------------------------------------------------------------- size cap


def is_evicted(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is an :func:`evicted_stub` rather than a full entry."""
    return entry.get("evicted") is True


def evicted_stub(entry: Mapping[str, Any]) -> ArchiveEntry:
    """The stub that replaces an evicted entry: how to recover it, and its meta."""
    meta = copy.deepcopy(dict(entry["meta"]))
    return {"evicted": True, "recover": f'history_read("{meta["checkpoint"]}")', "meta": meta}


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
