"""JSON and text from outside the process, made safe to log: bounded depth, valid UTF-8.

**Depth.** :data:`MAX_JSON_DEPTH` bounds how deeply a log line nests (its own object
included) and how deeply the JSON arguments of a tool call nest. The checks here never
recurse, so they measure any input; a bounded line then parses with at most
``MAX_JSON_DEPTH`` levels of the parser's recursion, which leaves room for the caller's
stack (a line of the full depth still parses from about 900 frames deep under the default
recursion limit of 1000).

**Strict JSON.** :func:`loads_json` refuses ``NaN``, ``Infinity`` and ``-Infinity``, which
Python's ``json`` accepts but JSON does not, and nesting beyond the bound.

**UTF-8.** A Python ``str`` may hold surrogate code points that UTF-8 cannot encode: lone
ones from ``os.listdir`` over file names that are not UTF-8 (``"caf\\udce9"``), or from a
JSON escape such as ``"\\ud800"`` in a model reply. :func:`utf8_text` replaces them
deterministically: a high surrogate followed by a low one becomes the character the pair
encodes; every other surrogate becomes U+FFFD (the replacement character), one for each.
Everything else is kept as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = [
    "MAX_JSON_DEPTH",
    "arguments_object",
    "decode_lines",
    "json_depth",
    "json_text_too_deep",
    "loads_json",
    "lone_surrogate",
    "utf8_json",
    "utf8_text",
]

MAX_JSON_DEPTH = 64
"""How deeply a new log line, or the JSON arguments of a tool call, may nest."""


_CONTAINERS = (dict, list, tuple)


def json_depth(value: object, limit: int = MAX_JSON_DEPTH) -> int:
    """How many containers deep ``value`` nests (a scalar is 0), counted up to ``limit + 1``.

    Containers are what ``json`` encodes as objects and arrays: dicts, lists and tuples.
    Iterative, so any depth is measured without a ``RecursionError``.
    """
    if not isinstance(value, _CONTAINERS):
        return 0
    deepest = 0
    stack: list[tuple[dict[Any, Any] | list[Any] | tuple[Any, ...], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                break
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1))
    return deepest


_JSON_SPECIAL = re.compile(r'[\\"\[\]{}]')


def json_text_too_deep(text: str, limit: int) -> bool:
    """Whether the JSON ``text`` nests more than ``limit`` levels deep, found without parsing."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = False
    escaped = -1  # the index of the character a backslash in a string escapes
    for match in _JSON_SPECIAL.finditer(text):
        at = match.start()
        char = text[at]
        if at == escaped:
            continue
        if in_string:
            if char == '"':
                in_string = False
            elif char == "\\":
                escaped = at + 1
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; numbers must be finite")


_STRICT = json.JSONDecoder(parse_constant=_no_constant)  # built once: json.loads(…, **kw) is not


def loads_json(text: str) -> Any:
    """Parse strict JSON: no ``NaN``/``Infinity``, at most :data:`MAX_JSON_DEPTH` levels deep.

    Raises :class:`ValueError` saying what is wrong; never a ``RecursionError``.
    """
    if json_text_too_deep(text, MAX_JSON_DEPTH):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return _STRICT.decode(text)


def arguments_object(arguments: str) -> dict[str, Any] | None:
    """The JSON object a tool call's arguments hold, else None.

    Lenient, for reading logs: invalid JSON, a non-object, and (in logs written before
    nesting was bounded) text too deep to parse all give None.
    """
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class _NotLoaded(Exception):
    """Stands for msgspec's error until msgspec is imported; raised only without msgspec."""


_FastError: type[Exception] = _NotLoaded
"""msgspec's decode error, once :func:`_fast_decoder` has imported msgspec."""

_msgspec_decode: list[Callable[[bytes | memoryview], Any] | None] = []
"""msgspec's JSON decode once :func:`_fast_decoder` has looked (None: msgspec is missing)."""


def _decode_first(data: bytes | memoryview) -> Any:
    """:data:`_FAST_DECODE` until the first log is decoded: imports msgspec, then decodes."""
    decode = _fast_decoder()
    if decode is None:  # pragma: no cover - msgspec is a dependency
        raise _NotLoaded
    return decode(data)


_FAST_DECODE: Callable[[bytes | memoryview], Any] | None = _decode_first
"""msgspec's JSON decode, a faster parser for whole logs (json remains the reference and
says what is wrong); None when msgspec is missing. msgspec is imported when the first log is
decoded, not with this module: a process that decodes no log (``dashr --help``, a new
session) does not pay for it."""


def _fast_decoder() -> Callable[[bytes | memoryview], Any] | None:
    """msgspec's JSON decode, imported on first use (and put in :data:`_FAST_DECODE` unless
    something replaced that: tests count its calls or turn it off)."""
    global _FAST_DECODE, _FastError
    if not _msgspec_decode:
        try:
            from msgspec import MsgspecError
            from msgspec.json import Decoder
        except ImportError:  # pragma: no cover - msgspec is a dependency; json works alone
            _msgspec_decode.append(None)
        else:
            _FastError = MsgspecError
            _msgspec_decode.append(Decoder().decode)
    decode = _msgspec_decode[0]
    if _FAST_DECODE is _decode_first:
        _FAST_DECODE = decode
    return decode


def decode_lines(data: bytes, end: int) -> list[dict[str, Any]] | None:
    """The JSON object of each newline-terminated line of ``data[:end]``, decoded with
    msgspec (about three times as fast as ``json``, and it shares the keys' strings).

    None when msgspec is missing or any line is not a JSON object it decodes: the caller
    then parses with ``json``, which accepts a few more inputs (``NaN``, ``1e400``, lone
    surrogate escapes) and names what is wrong. Where both
    decode a line they give equal objects (msgspec too keeps the last of repeated keys).
    """
    decode = _FAST_DECODE
    if decode is _decode_first:
        decode = _fast_decoder()
    if decode is None:
        return None
    out: list[dict[str, Any]] = []
    append, find, view, start = out.append, data.find, memoryview(data), 0
    try:
        while start < end:
            stop = find(b"\n", start)
            obj = decode(view[start:stop])
            if type(obj) is not dict:
                return None
            append(obj)
            start = stop + 1
    except (_FastError, RecursionError):  # read when raised: msgspec's, once imported
        return None
    return out


def decode_file(
    f: BinaryIO, take: Callable[[list[dict[str, Any]]], None], block: int
) -> tuple[int, bytes] | None:
    """Read ``f`` to its end ``block`` bytes at a time, passing the objects of each block's
    complete lines to ``take`` (:func:`decode_lines`), so the whole file is never held as
    bytes. Returns ``(length of the complete lines, the bytes after the last newline)``;
    None, having stopped, as soon as a line is not one :func:`decode_lines` decodes."""
    if _FAST_DECODE is None:
        return None
    parts: list[bytes] = []  # the start of a line longer than a block
    done = 0
    while chunk := f.read(block):
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        buf = b"".join((*parts, chunk)) if parts else chunk
        cut = buf.rfind(b"\n") + 1
        objs = decode_lines(buf, cut)
        if objs is None:
            return None
        parts = [buf[cut:]] if cut < len(buf) else []
        del buf, chunk
        take(objs)
        done += cut
    return done, b"".join(parts)


def json_lines(data: bytes, cut: int) -> list[dict[str, Any]] | tuple[int, str]:
    """The JSON object of each line of ``data[:cut]`` (complete lines), parsed with ``json``;
    else ``(line number, what is wrong)`` for the first line that is not one."""
    try:
        text = str(memoryview(data)[:cut], "utf-8")
    except UnicodeDecodeError as err:
        lineno = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        return lineno, f"not valid UTF-8: {err.reason} at column {column}"
    raw_lines = text.split("\n")
    raw_lines.pop()  # the empty string after the last newline
    decode = _DECODER.decode
    try:
        objs = [decode(line) for line in raw_lines]
    except (ValueError, RecursionError):
        objs = []  # fall through to the line-by-line pass to say where and why
    if len(objs) == len(raw_lines) and all(type(obj) is dict for obj in objs):
        return objs
    for lineno, line in enumerate(raw_lines, 1):
        reason = _line_problem(line)
        if reason is not None:
            return lineno, reason
    raise AssertionError("unreachable: some line failed to parse as an object")


_DECODER = json.JSONDecoder()

_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number"}
_JSON_TYPE_NAMES.update({bool: "boolean", type(None): "null"})


def _line_problem(line: str) -> str | None:
    """Why one complete line is not a JSON object, or None when it is."""
    if not line.strip():
        return "blank line (every line must be one JSON object)"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        where = "column" if err.msg.endswith(" at") else "at column"  # "...starting at"
        return f"not valid JSON: {err.msg} {where} {err.colno}"
    except RecursionError:
        return "not parseable: JSON nested too deeply"
    except ValueError as err:  # an integer past Python's digit limit, and the like
        return f"not parseable: {err}"
    if type(obj) is not dict:
        return f"expected a JSON object, got {_JSON_TYPE_NAMES.get(type(obj), type(obj).__name__)}"
    return None


def _encodable(text: str) -> bool:
    # Encoding is several times faster than searching for surrogates with a regex.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_text(text: str) -> str:
    """``text`` made encodable as UTF-8: paired surrogates joined, lone ones U+FFFD."""
    if text.isascii() or _encodable(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_SCALARS = frozenset({int, float, bool, type(None)})


def lone_surrogate(value: Any) -> tuple[list[object], str] | None:
    """Where the first string of ``value`` (keys too) holding a surrogate that UTF-8 cannot
    encode is, and that surrogate as a JSON escape: ``(path, "\\ud800")``; None when every
    string is valid Unicode.

    The path lists the dict keys and list indexes down to the string, ``"(key)"`` last when
    the string is a dict key. Descends what :func:`json_depth` counts, iteratively, so
    ``value`` must be acyclic.
    """
    stack: list[tuple[object, list[object]]] = [(value, [])]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if item.isascii():
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                return where, f"\\u{ord(item[err.start]):04x}"
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                stack.append((child, [*where, key]))
                stack.append((key, [*where, "(key)"]))
        elif isinstance(item, list | tuple):
            stack.extend((child, [*where, i]) for i, child in reversed(list(enumerate(item))))
    return None


def utf8_json(value: Any) -> Any:
    """``value`` with every string (keys too) passed through :func:`utf8_text`.

    Descends what :func:`json_depth` counts (dicts, lists and tuples; a tuple becomes a list
    in a copy). Returns ``value`` itself when nothing changes, else a copy. Iterative, but
    ``value`` must be acyclic: bound it with :func:`json_depth` first.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) in _SCALARS:
            continue
        if isinstance(item, str):
            if not item.isascii() and not _encodable(item):
                break
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    else:
        return value
    root: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while todo:
        item, parent, key = todo.pop()
        if isinstance(item, str):
            parent[key] = utf8_text(item)
        elif isinstance(item, dict):
            mapping: dict[Any, Any] = {}
            parent[key] = mapping
            for k, v in item.items():
                k = utf8_text(k) if isinstance(k, str) else k
                mapping[k] = None
                todo.append((v, mapping, k))
        elif isinstance(item, list | tuple):
            sequence: list[Any] = [None] * len(item)
            parent[key] = sequence
            todo.extend((v, sequence, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]
