"""The file-operation record, and the operations named by Python source and patches.

The leaf analyses of :mod:`dashr_ext._fileops` (SPEC §7.1): Python code is read with
:mod:`ast` (a regex fallback covers code that does not parse), ``apply_patch`` envelopes by
their ``*** … File:`` headers. The shell analysis and the tool-call layer both build on them.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "FILE_OP_KINDS",
    "FileOp",
    "embedded_python_ops",
    "patch_ops",
    "python_keyed_ops",
    "python_ops",
]

FILE_OP_KINDS: tuple[str, ...] = ("read", "write", "edit", "create", "delete", "move", "copy")


class FileOp(NamedTuple):
    """One file operation: ``op`` (one of :data:`FILE_OP_KINDS`) on ``path`` as written.

    ``source`` is the origin of a ``move`` or ``copy`` (``path`` is the destination).
    """

    op: str
    path: str
    source: str | None = None


# --------------------------------------------------------------------------- apply_patch

_PATCH_HEADER = re.compile(r"\*\*\* (?:(Add|Update|Delete) File|(Move) to): (.+)")


def patch_ops(text: str) -> list[FileOp]:
    """Operations of an ``apply_patch`` envelope (``*** Update File: path`` headers)."""
    out: list[FileOp] = []
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
                out.append(FileOp("move", path, last_update))
            continue
        last_update = path if kind == "Update" else None
        out.append(FileOp({"Add": "create", "Update": "edit", "Delete": "delete"}[kind], path))
    return out


# --------------------------------------------------------------------------- Python


def python_ops(code: str) -> list[FileOp]:
    """The file operations of Python source, in source order."""
    return [op for _, _, op in sorted(python_keyed_ops(code), key=lambda k: (k[0], k[1]))]


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


def python_keyed_ops(code: str) -> list[tuple[int, int, FileOp]]:
    """The file operations of Python source with their ``(line, column)``, unordered.

    The position lets a notebook cell interleave them with its ``!`` shell lines.
    """
    try:
        with warnings.catch_warnings():  # the agent's code: an invalid escape must not warn
            warnings.simplefilter("ignore")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _python_regex_ops(code)
    out: list[tuple[int, int, FileOp]] = []
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


def _python_call_op(call: ast.Call) -> FileOp | None:
    func = call.func
    name = _dotted(func)
    if name in ("open", "io.open", "codecs.open", "builtins.open"):
        path = _const_path(_argument(call, 0, "file" if name != "codecs.open" else "filename"))
        op = _mode_op(_argument(call, 1, "mode"))
        return FileOp(op, path) if path is not None and op is not None else None
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _const_path(func.value) if isinstance(func.value, ast.Call) else None
    if receiver is not None:
        if func.attr in _PATH_METHODS:
            return FileOp(_PATH_METHODS[func.attr], receiver)
        if func.attr == "open":
            op = _mode_op(_argument(call, 0, "mode"))
            return FileOp(op, receiver) if op is not None else None
        if func.attr in ("rename", "replace"):
            target = _const_path(_argument(call, 0, "target"))
            return FileOp("move", target, receiver) if target is not None else None
        return None
    module = _dotted(func.value)
    kind = _MODULE_FUNCTIONS.get((module, func.attr))
    if kind is not None:
        first = _const_path(_argument(call, 0, "src" if kind != "delete" else "path"))
        if first is None:
            return None
        if kind == "delete":
            return FileOp(kind, first)
        second = _const_path(_argument(call, 1, "dst"))
        return FileOp(kind, second, first) if second is not None else None
    if module in ("pd", "pandas") and func.attr.startswith("read_"):
        path = _const_path(_argument(call, 0, "filepath_or_buffer"))
        return FileOp("read", path) if path is not None else None
    if func.attr in _PANDAS_WRITERS:
        path = _const_path(_argument(call, 0, "path_or_buf"))
        return FileOp("write", path) if path is not None else None
    return None


_OPEN_RE = re.compile(
    r"""\bopen\(\s*(?:Path\(\s*)?(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*\)?"""
    r"""\s*(?:,\s*(?:mode\s*=\s*)?(?P<mq>['"])(?P<mode>[rwxabt+]*)(?P=mq))?"""
)
_PATH_METHOD_RE = re.compile(
    r"""\bPath\(\s*(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*\)\s*\.\s*"""
    r"""(?P<method>read_text|read_bytes|write_text|write_bytes|unlink|touch)\("""
)


def embedded_python_ops(text: str) -> list[FileOp]:
    """Literal ``open(...)`` and ``Path(...).method(...)`` calls anywhere in ``text``, in order.

    For Python inside other text, where it is not run as it stands: the body of a heredoc
    that writes a script, the text a ``sed`` or ``printf`` command writes. Escaped line
    breaks (``\\n``, as ``printf`` and ``echo -e`` take them) count as line breaks.
    """
    code = re.sub(r"\\[nrt]", "\n", text)
    return [op for _, _, op in sorted(_python_regex_ops(code), key=lambda k: (k[0], k[1]))]


def _python_regex_ops(code: str) -> list[tuple[int, int, FileOp]]:
    """Fallback for code that does not parse: literal ``open(...)`` and ``Path(...).method(``."""
    found: list[tuple[int, FileOp]] = []
    for match in _OPEN_RE.finditer(code):
        if code[match.start() - 1 : match.start()] == ".":
            continue  # some_object.open(...), not the builtin
        found.append((match.start(), FileOp(_mode_text_op(match["mode"] or "r"), match["path"])))
    for match in _PATH_METHOD_RE.finditer(code):
        found.append((match.start(), FileOp(_PATH_METHODS[match["method"]], match["path"])))
    out: list[tuple[int, int, FileOp]] = []
    for offset, op in found:
        line_start = code.rfind("\n", 0, offset) + 1
        out.append((code.count("\n", 0, offset) + 1, offset - line_start, op))
    return out
