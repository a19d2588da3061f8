"""The recall tools for function calling: schemas and checking a model's arguments (SPEC 8).

The schemas are static text plus the configured budgets. :func:`tool_arguments` turns a
model's tool call into keyword arguments or raises :class:`RecallError` with a message meant
to be sent back to the model as the tool's (error) result. A JSON arguments string must be
strict JSON (no ``NaN`` or ``Infinity``) nested at most ``MAX_JSON_DEPTH`` (64) levels deep
(:func:`~dashr_ext._jsontext.loads_json`, which never recurses into a ``RecursionError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import RecallConfig
from .._jsontext import loads_json
from .._payloads import RECALL_TOOL_NAMES
from ..errors import RecallError
from .render import END_OF_RANGE

__all__ = ["ACCEPTED_ARGUMENTS", "TOOL_NAMES", "tool_arguments", "tool_schemas"]

TOOL_NAMES: tuple[str, ...] = RECALL_TOOL_NAMES
ACCEPTED_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "history_outline": (),
    "history_read": ("checkpoint", "seq", "cursor"),
    "history_search": ("query", "checkpoint", "limit"),
}


def tool_arguments(name: str, arguments: object) -> dict[str, Any]:
    """The keyword arguments of a recall tool call (JSON string or mapping), ``None`` dropped.

    Raises :class:`RecallError` for an unknown tool, arguments that are not a JSON object,
    unknown argument names, or a search without its query.
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
            "accepted: query, checkpoint, limit"
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
    return value


_RECOVER = (
    "This is the supported way to recover history that compaction condensed into a "
    "checkpoint summary; do not read or decompress the session file."
)


def tool_schemas(config: RecallConfig) -> list[dict[str, Any]]:
    """The OpenAI function-calling entries of the recall tools (static text plus budgets)."""
    checkpoint_param = {
        "type": "string",
        "description": "A checkpoint id such as c42, as named in checkpoint footers, the "
        "compaction pointer or history_outline.",
    }
    return [
        {
            "type": "function",
            "function": {
                "name": "history_outline",
                "description": (
                    "List this session's history: every compaction checkpoint (id such as "
                    "c42, the seqs and ~tokens it replaced, whether a later checkpoint "
                    "superseded it, a one-line preview) and the turns with their seq ranges. "
                    f"{_RECOVER} Output is at most about {config.outline_max_chars} "
                    "characters: checkpoints are always listed in full, turns may be elided."
                ),
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "history_read",
                "description": (
                    "Read the original transcript (User/Assistant/tool calls/Tool result, each "
                    "with its event seq) that compaction replaced. Give exactly one argument: "
                    "checkpoint reads the exact span that checkpoint replaced (superseded "
                    "checkpoints included), seq reads the log forward from that event, cursor "
                    f"continues a previous page. {_RECOVER} Pages hold at most "
                    f"{config.read_max_chars} characters and {config.read_max_events} events; "
                    "a page ends with 'cursor: <token>' when more follows, else "
                    f"'{END_OF_RANGE}'."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "checkpoint": {
                            **checkpoint_param,
                            "description": "Read the span this checkpoint replaced, e.g. c42.",
                        },
                        "seq": {
                            "type": "integer",
                            "minimum": 0,
                            "description": "Read this session's log forward from this event seq.",
                        },
                        "cursor": {
                            "type": "string",
                            "description": "The token after 'cursor:' on the last line of a "
                            f"previous page (pages are at most {config.read_max_chars} "
                            f"characters / {config.read_max_events} events).",
                        },
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
                    "Find a phrase in this session's full history: every span replaced by a "
                    "checkpoint and the visible conversation. Case-insensitive literal phrase "
                    "match (words may span whitespace; no regex, fuzzy or semantic matching). "
                    "Returns numbered hits with seq, shadowed/visible, owning checkpoint, time "
                    "and a snippet, then 'scanned N, matched M, truncated true|false'; read "
                    f"around a hit with history_read. {_RECOVER}"
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {
                            "type": "string",
                            "description": "The exact phrase to find (case-insensitive).",
                        },
                        "checkpoint": {
                            **checkpoint_param,
                            "description": "Search only the span this checkpoint replaced.",
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": config.search_max_hits,
                            "description": "Most hits to show (1-"
                            f"{config.search_max_hits}, default {config.search_max_hits}); the "
                            f"result is at most {config.read_max_chars} characters.",
                        },
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            },
        },
    ]
