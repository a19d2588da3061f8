"""Replay: a session file folded back into its session, line by line (SPEC §3, §12).

Nearly every line of a log is a turn or step marker or a message appended in the shape the
session writes it. :func:`parse_event` builds those directly, without the checks
:meth:`Event.from_json` makes to name a bad field, and hands every other line to it. Either
way the event is the one ``Event.from_json`` returns, and a line it refuses gets its error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._events import (
    _DATA_TYPES,
    _KNOWN_TYPES,
    _MESSAGE_KEY_SET,
    _NO_EXTRA,
    MAX_TIME_MS,
    ROLE_BY_TYPE,
    ROLES,
    SURFACE_TYPES,
    ContentBlock,
    Event,
    Message,
    TextBlock,
    ToolCallBlock,
    key_order,
)
from .errors import CorruptLogError, EventError, SurfaceError

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["parse_event", "replay"]

_MARKER_FIELDS = {
    kind: tuple((key, types[0]) for key, types in _DATA_TYPES[kind].items())
    for kind in ("turn/start", "turn/end", "step/start", "step/end")
}
"""What ``Event.from_json`` checks of a marker's payload: keys holding one type each."""


def replay(store: Store, check: Callable[[Event], None], apply: Callable[[Event], None]) -> None:
    """Fold every line of ``store``'s file in order through ``check`` and ``apply`` (a
    session's). Raises :class:`CorruptLogError` naming the first line that is not an event
    or cannot follow the events before it."""
    from ._store import gc_paused  # here: parse_event alone (the cold search) needs no store

    with gc_paused():  # replay builds many long-lived objects: collecting only costs time
        events, _torn = store.load(_parsed)
        for lineno, event in enumerate(events, 1):
            try:
                if isinstance(event, str):  # why the line is not an event
                    raise EventError(event)
                check(event)
            except (EventError, SurfaceError) as exc:
                raise CorruptLogError(str(store.path), lineno, str(exc)) from None
            apply(event)


def _parsed(obj: dict[str, Any]) -> Event | str:
    """``obj`` as an event, else why it is not one (the first bad line may come after one
    that is an event but cannot follow the events before it: that one is reported)."""
    try:
        return _common_event(obj) or Event.from_json(obj)  # parse_event, one call less
    except EventError as exc:
        return str(exc)


def parse_event(obj: object) -> Event:
    """``Event.from_json(obj)``, built directly for a marker or an appended message."""
    return _common_event(obj) or Event.from_json(obj)


def _common_event(obj: object) -> Event | None:
    """The event of a marker or an appended message of text and tool calls, with no keys
    but ``seq``, ``type``, ``time``, ``data`` (and ``surfaceOp: "append"``) and a payload
    ``Event.from_json`` accepts; else None."""
    if type(obj) is not dict:
        return None
    try:
        seq, kind, time, data = obj["seq"], obj["type"], obj["time"], obj["data"]
    except KeyError:
        return None
    if not (
        type(seq) is int
        and type(kind) is str
        and type(time) is int
        and type(data) is dict
        and 0 <= time <= MAX_TIME_MS
        and seq >= 0
    ):
        return None
    kind = _KNOWN_TYPES.get(kind, kind)  # one string per type, not one per event
    size = len(obj)
    if size == 4:
        fields = _MARKER_FIELDS.get(kind)
        if fields is None:
            return None
        for key, expected in fields:  # the required keys: only extra ones may be absent
            if type(data.get(key)) is not expected:
                return None
        return Event(seq, kind, time, data, None, None, _NO_EXTRA)
    if size != 5 or kind not in SURFACE_TYPES or obj.get("surfaceOp") != "append":
        return None
    parsed = _common_message(data.get("message"))
    if parsed is None or parsed[0].role != ROLE_BY_TYPE[kind]:
        return None
    message, order = parsed
    if order is not None and len(data) == 1:  # the message gives back the data: keep it alone
        return Event(seq, kind, time, None, "append", None, _NO_EXTRA, message, order)
    return Event(seq, kind, time, data, "append", None, _NO_EXTRA, message)


def _common_message(obj: object) -> tuple[Message, tuple[str, ...] | None] | None:
    """``Message.from_json(obj)`` of a message of text and tool-call blocks with no extra
    keys, with the key order in which its ``to_json`` gives back ``obj`` (None when a key
    would be dropped); else None."""
    if type(obj) is not dict or not obj.keys() <= _MESSAGE_KEY_SET:
        return None
    exact = True
    try:
        msg_id, role, source, raw = obj["id"], obj["role"], obj["source"], obj["content"]
        if not (
            type(msg_id) is str
            and type(role) is str
            and type(source) is dict
            and type(raw) is list
            and type(source["kind"]) is str
        ):
            return None
        role = ROLES.get(role, role)
        blocks: list[ContentBlock] = []
        for b in raw:
            if type(b) is not dict:
                return None
            kind = b["type"]
            if kind == "text":
                text = b["text"]
                if type(text) is not str:
                    return None
                blocks.append(TextBlock(text))
                exact = exact and len(b) == 2
            elif kind == "tool-call":
                call_id, name, arguments = b["id"], b["name"], b["arguments"]
                if not (type(call_id) is str and type(name) is str and type(arguments) is str):
                    return None
                blocks.append(ToolCallBlock(call_id, name, arguments))
                exact = exact and len(b) == 4
            else:
                return None
        if role != "tool":
            blocks_ = tuple(blocks)
            message = Message._checked(msg_id, role, source, blocks_, None, None, None, _NO_EXTRA)
            return message, key_order(obj) if exact and len(obj) == 4 else None
        call_id, name, is_error = obj["toolCallId"], obj["toolName"], obj["isError"]
    except KeyError:
        return None
    if not (type(call_id) is str and type(name) is str and type(is_error) is bool):
        return None
    message = Message._checked(
        msg_id, role, source, tuple(blocks), call_id, name, is_error, _NO_EXTRA
    )
    return message, key_order(obj) if exact and len(obj) == 7 else None
