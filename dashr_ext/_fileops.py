"""File operations named by tool calls: what an agent read, wrote, edited, moved (SPEC §7.1).

:func:`file_ops_for_call` recognises one tool call's form (an editor command, Python code,
a shell command, an ``apply_patch`` envelope, or a tool whose name says what it does);
:func:`extract_file_ops` collects the operations of a span for the archive's ``file_ops``
bucket. Only tool-call arguments are read, never message text. Shell scripts are analysed
in :mod:`dashr_ext._fileops_shell`, Python source and patches in :mod:`dashr_ext._fileops_code`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._events import Event
from ._fileops_code import FILE_OP_KINDS, FileOp, embedded_python_ops, patch_ops, python_keyed_ops
from ._fileops_shell import argv_ops, operands, shell_ops, shell_words
from ._jsontext import arguments_object

__all__ = [
    "FILE_OP_KINDS",
    "FileOp",
    "embedded_python_ops",
    "extract_file_ops",
    "file_ops_for_call",
]


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


def _dedupe(ops: Iterable[FileOp]) -> list[FileOp]:
    seen: set[FileOp] = set()
    out: list[FileOp] = []
    for op in ops:
        if op not in seen:
            seen.add(op)
            out.append(op)
    return out


# --------------------------------------------------------------------------- tool-call forms

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


def _call_ops(name: str, arguments: str) -> list[FileOp]:
    args = arguments_object(arguments)
    if args is None:
        return []
    command = args.get("command")
    path = args.get("path")
    if isinstance(command, str) and command in _EDITOR_COMMANDS and isinstance(path, str) and path:
        return [FileOp(_EDITOR_COMMANDS[command], path)]
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
                return shell_ops(value)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return argv_ops(value)
    if "patch" in token_set:
        for key in ("input", "patch", "diff"):
            value = args.get(key)
            if isinstance(value, str) and "*** Begin Patch" in value:
                return patch_ops(value)
    op = _keyword_op(tokens)
    if op is None:
        return []
    return _keyword_tool_ops(op, args)


def _keyword_tool_ops(op: str, args: Mapping[str, Any]) -> list[FileOp]:
    if op in ("move", "copy"):
        source = _first_str(args, _SOURCE_KEYS)
        dest = _first_str(args, _DEST_KEYS)
        return [FileOp(op, dest, source)] if source is not None and dest is not None else []
    paths: list[str] = []
    single = _first_str(args, _PATH_KEYS)
    if single is not None:
        paths.append(single)
    for key in _PATH_LIST_KEYS:
        value = args.get(key)
        if isinstance(value, list):
            paths.extend(v for v in value if isinstance(v, str) and v)
    return [FileOp(op, p) for p in paths]


def _first_str(args: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


# --------------------------------------------------------------------------- IPython cells

_SHELL_CELL_MAGICS = frozenset({"bash", "sh", "script", "system"})
_PYTHON_CELL_MAGICS = frozenset({"python", "python3", "capture", "time", "timeit", "prun"})
_SHELL_LINE = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*=\s*)?(?:!!?|%(?:sx|system)\s)(.*)$")


def _cell_ops(code: str) -> list[FileOp]:
    """Operations of a notebook cell: Python plus IPython ``!`` lines and cell magics."""
    lines = code.split("\n")
    while lines and lines[0].strip().startswith("%%"):
        magic, _, rest = lines[0].strip()[2:].partition(" ")
        if magic == "writefile":
            paths = operands(shell_words(rest))
            return [FileOp("write", paths[0])] if paths else []
        if magic in _SHELL_CELL_MAGICS:
            return shell_ops("\n".join(lines[1:]))
        if magic not in _PYTHON_CELL_MAGICS:
            return []
        lines = lines[1:]  # %%time, %%capture, …: the rest of the cell is still Python
    keyed: list[tuple[int, int, FileOp]] = []
    python_lines: list[str] = []
    for number, line in enumerate(lines, start=1):
        match = _SHELL_LINE.match(line)
        if match is not None:
            keyed.extend((number, -1, op) for op in shell_ops(match.group(1)))
            python_lines.append("")
        elif line.lstrip().startswith("%"):
            python_lines.append("")
        else:
            python_lines.append(line)
    keyed.extend(python_keyed_ops("\n".join(python_lines)))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [op for _, _, op in keyed]
