"""The bridge protocol's pure core: check a request, run its operation, build the reply.

:func:`handle` is what the kernel's comm calls for every message, and what tests call
directly; it never raises (every failure is a typed error reply) and never imports IPython
or ``comm``. A request is checked in this order, each failure a ``ProtocolError``: a JSON
object; nesting and size (:data:`MAX_REQUEST_BYTES`); valid Unicode (no lone surrogates);
``version``; then the shipped JSON Schema (``protocol.schema.json``, draft 2020-12) for the
envelope and the operation's ``args``, a list that must hold objects checked first, naming
its first few other items and counting the rest (so a huge bad list costs no error per item).
A schema message quoting a value is scrubbed of API keys, then cut. See ``docs/bridge.md``
for every operation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from itertools import islice
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from .. import errors
from .._controller import Dashr
from .._jsontext import MAX_JSON_DEPTH, json_depth, lone_surrogate, utf8_text
from .._redaction import scrub_keys
from .._version import __version__
from ..errors import DashrError, ProtocolError
from .ops import OPS, PROGRESS_OPS, PROTOCOL_VERSION, ControllerHost, Host

__all__ = [
    "COMM_TARGET",
    "MAX_REQUEST_BYTES",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "Progress",
    "check_request",
    "error_reply",
    "handle",
    "hello",
    "schema",
]

COMM_TARGET = "dashr"
"""The comm target name ``%load_ext dashr_ext`` registers."""
SUPPORTED_VERSIONS = (PROTOCOL_VERSION,)
MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""The default cap on one request, as UTF-8 JSON."""
MAX_ID_CHARS = 256
MAX_MESSAGE_CHARS = 400
"""The longest schema message a reply quotes (after API keys are scrubbed from it)."""
MAX_LISTED_ITEMS = 10
"""Items a refused list of non-objects names; the rest are counted."""
MAX_SCHEMA_ERRORS = 100
"""Schema errors read to choose the one reported."""
_ENVELOPE_DEPTH = 4
"""Levels a request adds around a message: the request, ``args``, ``messages``, the list."""

Progress = Callable[[str, str], None]
"""Called with ``(phase, detail)`` while a pass runs."""


@cache
def schema() -> dict[str, Any]:
    """The shipped JSON Schema of every protocol message."""
    text = resources.files(__package__).joinpath("protocol.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _is_int(checker: object, instance: object) -> bool:
    # JSON Schema's "integer" admits 3.0; the controller takes Python ints only.
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_int),
)


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    """A validator for ``$defs/<name>`` (``args/<op>`` for an operation's arguments)."""
    root = schema()
    validator: jsonschema.protocols.Validator = _Validator(
        {"$defs": root["$defs"], "$ref": f"#/$defs/{name}"}
    )
    return validator


def hello(max_request_bytes: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """The first message the kernel sends on a new comm."""
    return {
        "version": PROTOCOL_VERSION,
        "id": None,
        "hello": {
            "protocol": PROTOCOL_VERSION,
            "versions": list(SUPPORTED_VERSIONS),
            "package": __version__,
            "ops": sorted(OPS),
            "maxRequestBytes": max_request_bytes,
        },
    }


def _readable_id(request: object) -> str | None:
    rid = request.get("id") if isinstance(request, dict) else None
    if isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS and utf8_text(rid) == rid:
        return rid
    return None


def _path(parts: Iterator[object] | list[object]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the request)"


def _first_surrogate(value: object) -> tuple[str, str] | None:
    """(path, escaped text) of the first string holding a lone surrogate, else None."""
    found = lone_surrogate(value)
    return None if found is None else (_path(found[0]), found[1])


def check_request(
    request: object, max_request_bytes: int = MAX_REQUEST_BYTES
) -> tuple[str, str, dict[str, Any]]:
    """``(id, op, args)`` of a well-formed request; a :class:`ProtocolError` otherwise."""
    if not isinstance(request, dict):
        raise ProtocolError(
            f"a request must be a JSON object with version, id, op and args; "
            f"got {type(request).__name__}"
        )
    if json_depth(request, MAX_JSON_DEPTH + _ENVELOPE_DEPTH) > MAX_JSON_DEPTH + _ENVELOPE_DEPTH:
        raise ProtocolError(
            f"the request nests more than {MAX_JSON_DEPTH + _ENVELOPE_DEPTH} levels deep "
            f"(a message may nest at most {MAX_JSON_DEPTH})"
        )
    text = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    try:
        size, surrogate = len(text.encode("utf-8")), None
    except UnicodeEncodeError:  # only then is the walk to name the string worth it
        size, surrogate = len(text.encode("utf-8", "surrogatepass")), _first_surrogate(request)
    if size > max_request_bytes:
        raise ProtocolError(
            f"the request is {size} bytes of JSON; at most {max_request_bytes} are accepted"
        )
    if surrogate is not None:
        where, escaped = surrogate
        raise ProtocolError(
            f"{where}: a lone surrogate ({escaped}) is not valid Unicode and cannot be "
            "stored as UTF-8; send valid text (e.g. U+FFFD in its place)"
        )
    version = request.get("version")
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        raise ProtocolError(
            f"version: expected one of {list(SUPPORTED_VERSIONS)} (the protocol versions "
            f"this kernel speaks), got {version!r}"
        )
    op = request.get("op")
    if isinstance(op, str) and op not in OPS:
        raise ProtocolError(
            f"op: unknown operation {op!r}; the operations are: {', '.join(sorted(OPS))}"
        )
    if isinstance(op, str) and isinstance(request.get("args"), dict):
        _check_object_lists(op, request["args"])
    _validate("request", request, [])
    args = request.get("args", {})
    assert isinstance(op, str) and isinstance(args, dict)
    _validate(f"args/{op}", args, ["args"])
    rid = request["id"]
    assert isinstance(rid, str)
    return rid, op, args


@cache
def _object_lists() -> dict[str, tuple[str, ...]]:
    """Operation -> the names of its ``args`` the schema wants as an array of objects."""
    lists: dict[str, tuple[str, ...]] = {}
    for op, spec in schema()["$defs"]["args"].items():
        names = tuple(
            name
            for name, prop in spec.get("properties", {}).items()
            if any(
                branch.get("type") == "array" and branch.get("items") == {"type": "object"}
                for branch in prop.get("oneOf", [prop])
            )
        )
        if names:
            lists[op] = names
    return lists


_JSON_TYPES: dict[type, str] = {str: "a string", bool: "a boolean", int: "a number"}
_JSON_TYPES.update({float: "a number", list: "an array", type(None): "null"})


def _check_object_lists(op: str, args: dict[str, Any]) -> None:
    """Refuse a list of non-objects where the schema wants objects, before the schema does.

    The schema's check builds an error for every item (a 3 MB list of numbers costs seconds
    and gigabytes); this one names the first :data:`MAX_LISTED_ITEMS` and counts the rest.
    """
    for name in _object_lists().get(op, ()):
        items = args.get(name)
        if not isinstance(items, list):
            continue
        bad = (i for i, item in enumerate(items) if not isinstance(item, dict))
        first = list(islice(bad, MAX_LISTED_ITEMS))
        if not first:
            continue
        more = sum(1 for _ in bad)
        listed = ", ".join(
            f"[{i}] {_JSON_TYPES.get(type(items[i]), type(items[i]).__name__)}" for i in first
        )
        raise ProtocolError(
            f"args.{name}: expected a list of JSON objects; {len(first) + more} of its "
            f"{len(items)} items are not: {listed}{f', and {more} more' if more else ''}"
        )


def _validate(name: str, instance: object, prefix: list[object]) -> None:
    # Bounded: best_match otherwise reads every error, one per item of a bad list.
    error = best_match(islice(_validator(name).iter_errors(instance), MAX_SCHEMA_ERRORS))
    if error is None:
        return
    raise ProtocolError(_describe(error, prefix))


def _describe(error: ValidationError, prefix: list[object]) -> str:
    where = _path([*prefix, *error.absolute_path])
    # Keys are scrubbed before the cut, which could split one and leave most of it.
    message = scrub_keys(error.message)
    if len(message) > MAX_MESSAGE_CHARS:  # the schema's message quotes the whole value
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        return f"{where}: {message}; accepted: {', '.join(allowed) or '(none)'}"
    return f"{where}: {message}"


def error_reply(rid: str | None, exc: BaseException) -> dict[str, Any]:
    """The reply for a failed request: the error's class name from ``dashr_ext.errors``
    (``InternalError`` for anything else) and its message, keys redacted, no traceback."""
    kind = next(
        (
            cls.__name__
            for cls in type(exc).__mro__
            if issubclass(cls, DashrError) and getattr(errors, cls.__name__, None) is cls
        ),
        None,
    )
    message = str(exc) if kind is not None else f"{type(exc).__name__}: {exc}"
    error: dict[str, Any] = {
        "type": kind or "InternalError",
        "message": utf8_text(scrub_keys(message)),
    }
    field = getattr(exc, "field", None)
    if kind is not None and isinstance(field, str):
        error["field"] = utf8_text(scrub_keys(field))
    return {"version": PROTOCOL_VERSION, "id": rid, "ok": False, "error": error}


def handle(
    target: Host | Dashr,
    request: object,
    progress: Progress | None = None,
    *,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> dict[str, Any]:
    """The reply to one request (never raises, except ``KeyboardInterrupt``/``SystemExit``).

    ``target`` is the kernel's host (the extension's settings and controller) or a bare
    :class:`~dashr_ext.Dashr`. ``progress`` receives ``(phase, detail)`` while a pass of
    ``request_messages``, ``compact``, ``prune`` or ``handle_overflow`` runs.
    """
    rid = _readable_id(request)
    try:
        rid, op, args = check_request(request, max_request_bytes)
        host: Host = ControllerHost(target) if isinstance(target, Dashr) else target
        result = _run(host, op, args, progress)
    except Exception as exc:
        return error_reply(rid, exc)
    return {"version": PROTOCOL_VERSION, "id": rid, "ok": True, "result": result}


def _run(host: Host, op: str, args: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
    if progress is None or op not in PROGRESS_OPS:
        return OPS[op](host, args)
    engine = host.controller.engine  # rebuilt on settings changes: set for this request only
    previous, engine.progress = engine.progress, progress
    try:
        return OPS[op](host, args)
    finally:
        engine.progress = previous
