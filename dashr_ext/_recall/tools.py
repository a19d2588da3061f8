"""The recall tools for function calling: schemas and checking a model's arguments (SPEC 8).

The schemas are sent with every request once something is recallable, so they are kept
short: at most 250 tokens together by the meter's envelope count
(``tests/test_tool_schemas.py``). :func:`tool_arguments` turns a model's tool call into
keyword arguments or raises :class:`RecallError` with a message meant to be sent back to the
model as the tool's (error) result. A JSON arguments string must be strict JSON (no ``NaN``
or ``Infinity``) nested at most ``MAX_JSON_DEPTH`` (64) levels deep
(:func:`~dashr_ext._jsontext.loads_json`, which never recurses into a ``RecursionError``),
and every string in the arguments (names too) must be valid Unicode: a lone surrogate, as a
JSON escape like ``"\\ud800"`` gives, is refused with a :class:`RecallError` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import RecallConfig
from .._jsontext import MAX_JSON_DEPTH, json_depth, loads_json, lone_surrogate
from .._payloads import RECALL_TOOL_NAMES
from ..errors import RecallError

__all__ = ["ACCEPTED_ARGUMENTS", "TOOL_NAMES", "tool_arguments", "tool_schemas"]

TOOL_NAMES: tuple[str, ...] = RECALL_TOOL_NAMES
ACCEPTED_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "history_outline": (),
    "history_read": ("checkpoint", "seq", "turn", "cursor"),
    "history_search": ("query", "checkpoint", "limit", "cursor"),
}


def tool_arguments(name: str, arguments: object) -> dict[str, Any]:
    """The keyword arguments of a recall tool call (JSON string or mapping), ``None`` dropped.

    Raises :class:`RecallError` for an unknown tool, arguments that are not a JSON object,
    a string holding a lone surrogate, unknown argument names, or a search without its query.
    """
    if name not in ACCEPTED_ARGUMENTS:
        raise RecallError(f"unknown tool {name!r}; the recall tools are {', '.join(TOOL_NAMES)}")
    args = _arguments(name, arguments)
    accepted = ACCEPTED_ARGUMENTS[name]
    unknown = [k for k in args if k not in accepted]
    if unknown:
        allowed = ", ".join(accepted) if accepted else "none (call it with {})"
        raise RecallError(
            f"{name}: unknown argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; accepted: {allowed}"
        )
    present = {k: v for k, v in args.items() if v is not None}
    if name == "history_search" and "query" not in present:
        raise RecallError(
            "history_search: missing the required argument 'query' (a phrase to find); "
            "accepted: query, checkpoint, limit, cursor"
        )
    return present


def _arguments(name: str, arguments: object) -> dict[str, Any]:
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            value = loads_json(arguments)
        except ValueError as exc:
            raise RecallError(
                f"{name}: arguments must be a JSON object, got invalid JSON ({exc})"
            ) from None
    elif isinstance(arguments, Mapping):
        value = dict(arguments)
    else:
        raise RecallError(
            f"{name}: arguments must be a JSON object string or a mapping, "
            f"got {type(arguments).__name__}"
        )
    if not isinstance(value, dict):
        raise RecallError(
            f"{name}: arguments must be a JSON object, got {type(value).__name__} {value!r}"
        )
    if not all(isinstance(k, str) for k in value):
        raise RecallError(f"{name}: argument names must be strings")
    if json_depth(value) > MAX_JSON_DEPTH:  # a mapping from Python: bound it before the walk
        raise RecallError(f"{name}: the arguments nest more than {MAX_JSON_DEPTH} levels deep")
    found = lone_surrogate(value)
    if found is not None:
        where, escaped = found
        what = "an argument name" if where == ["(key)"] else f"argument {where[0]!r}"
        raise RecallError(
            f"{name}: {what} holds a lone surrogate ({escaped}), which is not valid "
            "Unicode; send valid text (e.g. U+FFFD in its place)"
        )
    return value


def tool_schemas(config: RecallConfig) -> list[dict[str, Any]]:
    """The OpenAI function-calling entries of the recall tools.

    Static text except ``limit``'s ``maximum`` (``config.search_max_hits``), so they stay
    byte-identical (and cacheable) across passes. Each description says when to use the
    tool; the results explain their own format, paging and budgets (a page names its
    ``cursor:``; a bad ``turn`` is answered with the turns there are, so the schema carries no
    bound for it). Plain ASCII, so the count does not depend on how a client escapes JSON.
    """
    return [
        {
            "type": "function",
            "function": {
                "name": "history_outline",
                "description": (
                    "See what compaction condensed and which checkpoints exist (c42, seqs, "
                    "~tokens, superseded) plus turns. Recover history with these tools, "
                    "not the session file."
                ),
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "history_read",
                "description": (
                    "Read exact originals: give exactly one of checkpoint (the span it "
                    "replaced), seq (forward from that event), turn (as recorded) or cursor "
                    "(next page)."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "checkpoint": {"type": "string"},
                        "seq": {"type": "integer", "minimum": 0},
                        "turn": {"type": "integer"},
                        "cursor": {"type": "string"},
                    },
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "history_search",
                "description": (
                    "Find a literal phrase (case-insensitive) in all history, condensed included."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "checkpoint": {"type": "string", "description": "only its span"},
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": config.search_max_hits,
                        },
                        "cursor": {"type": "string"},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            },
        },
    ]
