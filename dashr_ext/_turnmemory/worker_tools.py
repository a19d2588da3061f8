"""The four editor tools of an ``llm`` turn worker, and their pure dispatcher (SPEC §6.4).

:func:`editor_tool_schemas` gives the OpenAI ``tools`` entries of ``list_turn_nodes``,
``read_turn_nodes``, ``replace_turn_nodes`` and ``finish_turn_compression``; they are sent in
worker requests only, never in a main request (the controller's ``request_tools()`` knows
nothing of them). :func:`dispatch` runs one tool call against a
:class:`~dashr_ext._turnmemory.editor.TurnEditor` and returns the tool result's text: an edit
the editor refuses, a stale id and a failed final validation come back as the result, so the
worker can fix them; ``finish_turn_compression`` is the only way a worker succeeds; any other
tool name is refused without running anything. No I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TurnMemoryError, TurnValidationError
from .editor import TurnEditor, catalog_text

__all__ = [
    "EDITOR_TOOL_NAMES",
    "FINISH_TOOL",
    "LIST_TOOL",
    "READ_TOOL",
    "REPLACE_TOOL",
    "ToolOutcome",
    "dispatch",
    "editor_tool_schemas",
    "refusal",
]

LIST_TOOL = "list_turn_nodes"
READ_TOOL = "read_turn_nodes"
REPLACE_TOOL = "replace_turn_nodes"
FINISH_TOOL = "finish_turn_compression"
EDITOR_TOOL_NAMES = (LIST_TOOL, READ_TOOL, REPLACE_TOOL, FINISH_TOOL)
"""The editor tools, in the order a worker request offers them."""

_SCHEMAS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": LIST_TOOL,
            "description": (
                "List the current nodes of the turn being compressed: id, role, kind, size, "
                "changed or unchanged, capacity (the most nodes it may become) and a preview."
            ),
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
    {
        "type": "function",
        "function": {
            "name": READ_TOOL,
            "description": (
                "Read the full text of current nodes: an unchanged original shows its blocks "
                "in order, reasoning included; a rewritten node its accepted text. Long reads "
                "come in pages: read the same ids again with the offset the page names."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": 'Node ids or ranges, e.g. ["n2", "n4..n6", "r1"].',
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Character offset to start from (default 0).",
                    },
                    "max_chars": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Characters to return at most (capped by the host).",
                    },
                },
                "required": ["ids"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": REPLACE_TOOL,
            "description": (
                "Replace one current node or a contiguous range of current nodes with 1 or "
                "more new nodes (at most the range's capacity). Every new node may use only "
                "what the replaced range holds. The replaced ids become invalid; the result "
                "names the new r* ids and lists the current nodes."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "range": {
                        "type": "string",
                        "description": 'A current id ("n3") or a range "first..last".',
                    },
                    "nodes": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {
                                "role": {"type": "string", "enum": ["user", "assistant", "tool"]},
                                "content": {"type": "string"},
                                "toolCallId": {
                                    "type": "string",
                                    "description": (
                                        "Only for a tool node, which rewrites the one tool "
                                        "result it replaces (same call)."
                                    ),
                                },
                            },
                            "required": ["role", "content"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["range", "nodes"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": FINISH_TOOL,
            "description": (
                "Check the rewritten turn and hand it in. The only way the work is accepted; "
                "when a rule is broken the result lists every problem and the turn stays "
                "editable."
            ),
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
)

_ARGUMENTS = {
    LIST_TOOL: frozenset(),
    READ_TOOL: frozenset({"ids", "offset", "max_chars"}),
    REPLACE_TOOL: frozenset({"range", "nodes"}),
    FINISH_TOOL: frozenset(),
}


def editor_tool_schemas() -> list[dict[str, Any]]:
    """The OpenAI ``tools`` entries of the editor tools (a fresh copy each call)."""
    return copy.deepcopy(list(_SCHEMAS))


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call did: the result text, and whether it was an accepted edit, the
    accepted finish, or an error the worker should fix."""

    text: str
    accepted_edit: bool = False
    finished: bool = False
    error: bool = False


class _BadArguments(Exception):
    """The call's arguments are not what the tool takes (the message says what is)."""


def refusal(name: str) -> str:
    """The result of a call to a tool a turn worker may not use."""
    return (
        f"refused: {name!r} is not available while compressing a turn, and nothing was run. "
        f"Use only {', '.join(EDITOR_TOOL_NAMES)}."
    )


def dispatch(
    name: str, arguments: str | Mapping[str, Any] | None, editor: TurnEditor
) -> ToolOutcome:
    """Run the tool call ``name(arguments)`` (arguments as the model sent them: a JSON object
    text, or already parsed) against ``editor``; never raises for what the model sent."""
    if name not in _ARGUMENTS:
        return ToolOutcome(refusal(name), error=True)
    try:
        args = _parse(name, arguments)
        if name == LIST_TOOL:
            return ToolOutcome(_listing(editor))
        if name == READ_TOOL:
            return ToolOutcome(_read(editor, args))
        if name == REPLACE_TOOL:
            return _replace(editor, args)
        return _finish(editor)
    except _BadArguments as exc:
        return ToolOutcome(f"error: {exc}", error=True)
    except TurnMemoryError as exc:  # refused edits, stale ids, failed validation
        return ToolOutcome(f"error: {exc}", error=True)


def _parse(name: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        parsed: object = {}
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            raise _BadArguments(
                f"{name}: the arguments are not valid JSON ({exc}); expected a JSON object"
            ) from None
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        raise _BadArguments(
            f"{name}: expected the arguments as a JSON object, got {type(parsed).__name__}"
        )
    known = _ARGUMENTS[name]
    unknown = sorted(str(k) for k in parsed if k not in known)
    if unknown:
        accepted = ", ".join(sorted(known)) or "none"
        raise _BadArguments(f"{name}: unknown argument {unknown[0]!r}; it takes: {accepted}")
    return dict(parsed)


def _listing(editor: TurnEditor) -> str:
    rows = editor.list()
    head = (
        f"{len(rows)} current node{'s' if len(rows) != 1 else ''} (of "
        f"{len(editor.originals)} original), {editor.revision} accepted edit"
        f"{'s' if editor.revision != 1 else ''}:"
    )
    return f"{head}\n{catalog_text(rows)}"


def _read(editor: TurnEditor, args: Mapping[str, Any]) -> str:
    ids = args.get("ids")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise _BadArguments(
            f'{READ_TOOL}.ids: expected a list of node ids or ranges such as ["n2", '
            f'"n4..n6"], got {ids!r}'
        )
    offset = args.get("offset", 0)
    max_chars = args.get("max_chars")
    return str(editor.read(ids, offset=offset, max_chars=max_chars))


def _replace(editor: TurnEditor, args: Mapping[str, Any]) -> ToolOutcome:
    target = args.get("range")
    if not isinstance(target, str) or not target.strip():
        raise _BadArguments(
            f'{REPLACE_TOOL}.range: expected a current id ("n3") or a range "first..last", '
            f"got {target!r}"
        )
    if "nodes" not in args:
        raise _BadArguments(f"{REPLACE_TOOL}.nodes: missing; give the 1 or more new nodes")
    nodes = args["nodes"]
    if not isinstance(nodes, list):
        raise _BadArguments(
            f"{REPLACE_TOOL}.nodes: expected a list of {{role, content}} objects, got "
            f"{type(nodes).__name__}"
        )
    ids = editor.replace(target.strip(), nodes)
    by_id = {r.id: r for r in editor.list()}
    made = "\n".join(f"{i} draws on {', '.join(by_id[i].sources)}" for i in ids)
    text = (
        f"accepted: {target.strip()} is now {', '.join(ids)} (edit {editor.revision}).\n{made}\n\n"
        f"{_listing(editor)}"
    )
    return ToolOutcome(text, accepted_edit=True)


def _finish(editor: TurnEditor) -> ToolOutcome:
    try:
        editor.validate_final()
    except TurnValidationError as exc:  # every problem, for the worker to fix
        return ToolOutcome(
            f"error: {exc}\nNothing was handed in: fix these with {REPLACE_TOOL}, then call "
            f"{FINISH_TOOL} again.",
            error=True,
        )
    count = len(editor.nodes)
    return ToolOutcome(
        f"accepted: the rewritten turn is valid ({len(editor.originals)} → {count} node"
        f"{'s' if count != 1 else ''}); the turn compression is finished.",
        finished=True,
    )
