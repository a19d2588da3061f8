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
from typing import Any

try:  # a faster parser for whole logs; json remains the reference and says what is wrong
    from msgspec import MsgspecError
    from msgspec.json import Decoder as _FastDecoder
except ImportError:  # pragma: no cover - msgspec is a dependency; json still works alone
    _FAST_DECODE = None
else:
    _FAST_DECODE = _FastDecoder().decode

__all__ = [
    "MAX_JSON_DEPTH",
    "arguments_object",
    "decode_lines",
    "json_depth",
    "json_text_too_deep",
    "loads_json",
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


def decode_lines(data: bytes, end: int) -> list[dict[str, Any]] | None:
    """The JSON object of each newline-terminated line of ``data[:end]``, decoded with
    msgspec (about three times as fast as ``json``, and it shares the keys' strings).

    None when msgspec is missing or any line is not a JSON object it decodes: the caller
    then parses with ``json``, which accepts a few more inputs (``NaN``, ``1e400``, lone
    surrogate escapes) and names what is wrong. Where both
    decode a line they give equal objects (msgspec too keeps the last of repeated keys).
    """
    decode = _FAST_DECODE
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
    except (MsgspecError, RecursionError):
        return None
    return out


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
