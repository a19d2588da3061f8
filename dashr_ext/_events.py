"""Event and content-block model of the session log, with exact JSON round-trip.

One event is one JSON object on one line of the session file::

    {"seq": 12, "type": "assistant/message", "time": 1764460000123,
     "surfaceOp": "append", "data": {"message": {...}}}

``Event.from_json(obj).to_json() == obj`` for every valid object, including unknown
``x-*/…`` extension events and extra keys, which are preserved untouched.

Bounds that keep every line readable: ``time`` is epoch milliseconds from 0 to
:data:`MAX_TIME_MS` (the end of year 9999, what ``datetime`` can show); a new event
(:class:`EventSpec`) nests at most :data:`MAX_JSON_DEPTH` levels, its own object included,
and so do the JSON arguments of its tool calls (see :mod:`dashr_ext._jsontext`).
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ._blocks import (
    ContentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    block_from_json,
    block_to_json,
    render_image,
    text_blocks,
    texts,
)
from ._blocks import need as _need
from ._jsontext import MAX_JSON_DEPTH, json_depth, json_text_too_deep
from ._payloads import PIN_TYPES, TURN_MEMORY_DATA_TYPES, TURN_MEMORY_REQUIRED, pin_id_problem
from .errors import EventError

__all__ = [
    "LOG_ONLY_TYPES",
    "MARKER_TYPES",
    "MAX_TIME_MS",
    "ROLE_BY_TYPE",
    "SETTINGS_TYPES",
    "SURFACE_TYPES",
    "ContentBlock",
    "Event",
    "EventSpec",
    "ImageBlock",
    "Message",
    "ReasoningBlock",
    "Replace",
    "SurfaceOp",
    "TextBlock",
    "ToolCallBlock",
    "block_from_json",
    "block_to_json",
    "now_ms",
    "render_image",
    "text_blocks",
    "texts",
]

JSON: TypeAlias = dict[str, Any]

ROLE_BY_TYPE: Mapping[str, str] = {
    "user/message": "user",
    "assistant/message": "assistant",
    "tool/result": "tool",
    "context/message": "context",
}
SURFACE_TYPES = frozenset(ROLE_BY_TYPE)
LOG_ONLY_TYPES = frozenset(
    {
        "session/header",
        "system/message",
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "compaction/start",
        "compaction/summary",
        "compaction/end",
        "usage/report",
        "config/change",
        "pin/add",
        "pin/remove",
    }
    | TURN_MEMORY_REQUIRED.keys()
)

_KNOWN_TYPES = {kind: kind for kind in SURFACE_TYPES | LOG_ONLY_TYPES}

SETTINGS_TYPES = frozenset({"session/header", "config/change"})
"""Log-only types that describe a session rather than record anything in it."""

MARKER_TYPES = frozenset({"turn/start", "turn/end", "step/start", "step/end"})
"""The turn and step markers (:mod:`dashr_ext._turns` folds them)."""

# Required payload keys of the log-only types (SPEC 3.1.1); extra keys are allowed.
_REQUIRED_DATA: Mapping[str, tuple[str, ...]] = {
    "session/header": ("sessionId", "createdAt", "systemPrompt", "tools", "format"),
    "system/message": ("message",),
    "turn/start": ("turn",),
    "turn/end": ("turn", "reason"),
    "step/start": ("turn", "step"),
    "step/end": ("turn", "step"),
    "compaction/start": ("compactionId", "trigger", "engine"),
    "compaction/summary": (
        "compactionId",
        "checkpoint",
        "trigger",
        "engine",
        "summary",
        "shadowedRange",
        "shadowedSeqs",
        "shadowedTokenCount",
        "summarizer",
        "archive",
    ),
    "compaction/end": ("compactionId",),
    "usage/report": ("promptTokens", "completionTokens", "atSeq"),
    "config/change": ("compaction", "recall"),
    "pin/add": ("pin", "text"),
    "pin/remove": ("pin",),
    **TURN_MEMORY_REQUIRED,
}
_REQUIRED_SETS = {kind: frozenset(keys) for kind, keys in _REQUIRED_DATA.items()}
_N = type(None)
# Payload value types of the log-only vocabulary (int never accepts a bool).
_DATA_TYPES: Mapping[str, Mapping[str, tuple[type, ...]]] = {
    "session/header": {
        "sessionId": (str,),
        "createdAt": (int,),
        "systemPrompt": (str, _N),
        "tools": (list, _N),
        "format": (str,),
    },
    "turn/start": {"turn": (int,)},
    "turn/end": {"turn": (int,), "reason": (str,)},
    "step/start": {"turn": (int,), "step": (int,)},
    "step/end": {"turn": (int,), "step": (int,)},
    "compaction/start": {"compactionId": (str,), "trigger": (str,), "engine": (str,)},
    "compaction/summary": {
        "compactionId": (str,),
        "checkpoint": (str,),
        "trigger": (str,),
        "engine": (str,),
        "summary": (str,),
        "shadowedRange": (dict,),
        "shadowedSeqs": (list,),
        "shadowedTokenCount": (int,),
        "summarizer": (dict,),
        "archive": (dict,),
    },
    "compaction/end": {"compactionId": (str,), "error": (str, _N)},
    "usage/report": {"promptTokens": (int,), "completionTokens": (int, _N), "atSeq": (int,)},
    "config/change": {"compaction": (dict,), "recall": (dict,)},
    "pin/add": {"pin": (str,), "text": (str,)},
    "pin/remove": {"pin": (str,)},
    **TURN_MEMORY_DATA_TYPES,
}
_TYPE_NAMES = {str: "str", int: "int", list: "list", dict: "object", _N: "null"}


MAX_TIME_MS = 253_402_300_799_999
"""The latest accepted event time: 9999-12-31T23:59:59.999Z in epoch milliseconds."""


def now_ms() -> int:
    """The current time as epoch milliseconds (UTC)."""
    return _time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- messages

ROLES = {role: role for role in ("user", "assistant", "tool", "system")}
"""One string per role: parsed messages keep it rather than one copy each."""


class _NoExtra(Mapping[str, Any]):
    """An empty, read-only mapping that pickles (a ``mappingproxy`` does not) back to the one
    shared instance."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "_NO_EXTRA"


_NO_EXTRA: Mapping[str, Any] = _NoExtra()
"""The ``extra`` of every parsed message and event without extra keys: one shared, read-only."""

_MESSAGE_KEYS = ("id", "role", "source", "content", "toolCallId", "toolName", "isError")
_MESSAGE_KEY_SET = frozenset(_MESSAGE_KEYS)


@dataclass(frozen=True, slots=True)
class Message:
    """A conversation message: the payload of every surface event."""

    id: str
    role: str
    source: Mapping[str, Any]
    content: tuple[ContentBlock, ...]
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys beyond the vocabulary, preserved for the round-trip."""
    _tool_calls: tuple[ToolCallBlock, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Computed once: replay and every pairing check ask for a message's calls.
        calls = tuple([b for b in self.content if isinstance(b, ToolCallBlock)])
        object.__setattr__(self, "_tool_calls", calls)

    @property
    def source_kind(self) -> str:
        return str(self.source.get("kind", ""))

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (reasoning and tool calls excluded)."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def reasoning(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, ReasoningBlock))

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        """The tool-call blocks, in order (built once, with the message)."""
        return self._tool_calls

    @classmethod
    def _checked(
        cls,
        id: str,
        role: str,
        source: Mapping[str, Any],
        content: tuple[ContentBlock, ...],
        tool_call_id: str | None,
        tool_name: str | None,
        is_error: bool | None,
        extra: Mapping[str, Any],
    ) -> Message:
        """``Message(...)`` of fields already checked, built at half the cost of the
        dataclass's ``__init__`` (replay builds one per message line)."""
        message = object.__new__(cls)
        _SET_ID(message, id)
        _SET_ROLE(message, role)
        _SET_SOURCE(message, source)
        _SET_CONTENT(message, content)
        _SET_CALL_ID(message, tool_call_id)
        _SET_TOOL_NAME(message, tool_name)
        _SET_IS_ERROR(message, is_error)
        _SET_EXTRA(message, extra)
        _SET_CALLS(message, tuple([b for b in content if type(b) is ToolCallBlock]))
        return message

    @classmethod
    def from_json(cls, obj: object, where: str = "message") -> Message:
        if not isinstance(obj, dict):
            raise EventError(f"{where}: expected an object, got {type(obj).__name__}")
        msg_id, role, source = obj.get("id"), obj.get("role"), obj.get("source")
        raw_content = obj.get("content")
        if not (
            type(msg_id) is str
            and type(role) is str
            and type(source) is dict
            and type(raw_content) is list
        ):  # the slow path exists to name the bad field
            msg_id = _need(obj, "id", str, where)
            role = _need(obj, "role", str, where)
            source = _need(obj, "source", dict, where)
        if not isinstance(source.get("kind"), str):
            raise EventError(f"{where}.source.kind: expected a string such as 'user' or 'model'")
        if type(raw_content) is not list:
            raw_content = _need(obj, "content", list, where)
        content = tuple(
            [
                TextBlock(b["text"])
                if type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str
                else block_from_json(b, f"{where}.content[{i}]")
                for i, b in enumerate(raw_content)
            ]
        )
        role = ROLES.get(role, role)
        tool_call_id = tool_name = is_error = None
        if role == "tool":
            tool_call_id = _need(obj, "toolCallId", str, where)
            tool_name = _need(obj, "toolName", str, where)
            is_error = _need(obj, "isError", bool, where)
        extra = (
            _NO_EXTRA
            if obj.keys() <= _MESSAGE_KEY_SET
            else {k: v for k, v in obj.items() if k not in _MESSAGE_KEY_SET}
        )
        return cls(msg_id, role, source, content, tool_call_id, tool_name, is_error, extra)

    def to_json(self, order: tuple[str, ...] | None = None) -> JSON:
        """The message object; ``order``: its keys in this order (the order it was read in)."""
        out: JSON = {
            "id": self.id,
            "role": self.role,
            "source": dict(self.source),
            "content": [block_to_json(b) for b in self.content],
        }
        if self.role == "tool":
            out["toolCallId"] = self.tool_call_id
            out["toolName"] = self.tool_name
            out["isError"] = self.is_error
        out.update(self.extra)
        return out if order is None else {k: out[k] for k in order}


_BLOCK_KEYS = {TextBlock: 2, ReasoningBlock: 2, ToolCallBlock: 4}
"""How many keys the JSON of each kind of block holds (image blocks are never rebuilt)."""
_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
"""One shared tuple per key order of message objects read."""


def _rebuildable(raw: JSON, message: Message) -> tuple[str, ...] | None:
    """The key order of ``raw``, a message object, when ``message.to_json(order)`` gives it
    back exactly (no key was dropped in parsing, every block is rebuilt as read); else None."""
    if len(raw) != (7 if message.role == "tool" else 4) + len(message.extra):
        return None
    keys = _BLOCK_KEYS
    for b, block in zip(raw["content"], message.content, strict=True):
        if len(b) != keys.get(type(block), -1):
            return None
    return key_order(raw)


def key_order(raw: JSON) -> tuple[str, ...]:
    """The keys of ``raw`` in order, one shared tuple per order."""
    order = tuple(raw)
    return _ORDERS.setdefault(order, order) if len(_ORDERS) < 64 else order


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Replace:
    """``surfaceOp: {"op": "replace", "startSeq", "endSeq"}``: shadow a contiguous surface run."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | Replace

_EVENT_KEYS = ("seq", "type", "time", "surfaceOp", "sourceEventSeqs", "data")
_EVENT_KEY_SET = frozenset(_EVENT_KEYS)


# fmt: off
(_SET_ID, _SET_ROLE, _SET_SOURCE, _SET_CONTENT, _SET_CALL_ID, _SET_TOOL_NAME, _SET_IS_ERROR,
 _SET_EXTRA, _SET_CALLS) = (getattr(Message, name).__set__ for name in (
    "id", "role", "source", "content", "tool_call_id", "tool_name", "is_error", "extra",
    "_tool_calls"))
# fmt: on
"""The slots' own setters (a frozen dataclass refuses plain assignment)."""


_INT_TYPE = frozenset({int})
"""``_INT_TYPE.issuperset(map(type, items))``: every item an ``int`` (no ``bool``), checked
in C rather than one Python call an item (checkpoint and summary lines list thousands)."""


class Event:
    """One line of the session log. Treat as immutable once appended.

    A message event read from JSON does not keep its ``data`` object beside the parsed
    :attr:`message`: ``data`` is rebuilt from the message when asked for (the same keys in the
    same order, equal values), so a loaded log holds its text and structure once.
    """

    __slots__ = (
        "_data",
        "_message",
        "_order",
        "extra",
        "seq",
        "source_event_seqs",
        "surface_op",
        "time",
        "type",
    )

    def __init__(
        self,
        seq: int,
        type: str,
        time: int,
        data: JSON | None,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] | None = None,
        extra: Mapping[str, Any] = _NO_EXTRA,
        _message: Message | None = None,
        _order: tuple[str, ...] | None = None,
    ) -> None:
        # ``data`` None with ``_message`` and ``_order``: a parsed message event whose data is
        # rebuilt from its message (see :func:`_rebuildable`).
        if data is None and _message is None:
            raise EventError(f"event {seq} ({type}) data: expected a JSON object, got None")
        self.seq = seq
        self.type = type
        self.time = time
        self._data: JSON | None = data
        self.surface_op = surface_op
        self.source_event_seqs = source_event_seqs
        self.extra = extra  # keys beyond the vocabulary, kept for the round-trip (read-only)
        self._message = _message
        self._order = _order

    @property
    def data(self) -> JSON:
        """The ``data`` object of the event line."""
        data = self._data
        if data is None:  # a message event that keeps only its parsed message
            assert self._message is not None
            data = {"message": self._message.to_json(self._order)}
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (
            self.seq == other.seq
            and self.type == other.type
            and self.time == other.time
            and self.surface_op == other.surface_op
            and self.source_event_seqs == other.source_event_seqs
            and self.extra == other.extra
            and self.data == other.data
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Event(seq={self.seq!r}, type={self.type!r}, time={self.time!r}, "
            f"data={self.data!r}, surface_op={self.surface_op!r}, "
            f"source_event_seqs={self.source_event_seqs!r}, extra={self.extra!r})"
        )

    @property
    def is_surface(self) -> bool:
        return self.type in SURFACE_TYPES

    @property
    def message(self) -> Message:
        """The parsed message of a surface or ``system/message`` event (cached)."""
        if self._message is None:
            if "message" not in self.data:  # a rebuilt data always has its message
                raise EventError(f"event {self.seq} ({self.type}) carries no message")
            self._message = Message.from_json(
                self.data["message"], f"event {self.seq} data.message"
            )
        return self._message

    def to_json(self) -> JSON:
        out: JSON = {"seq": self.seq, "type": self.type, "time": self.time}
        if self.surface_op is not None:
            op = self.surface_op
            out["surfaceOp"] = (
                "append"
                if op == "append"
                else {"op": "replace", "startSeq": op.start_seq, "endSeq": op.end_seq}
            )
        if self.source_event_seqs is not None:
            out["sourceEventSeqs"] = list(self.source_event_seqs)
        out["data"] = self.data
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: object) -> Event:
        """Parse and validate one event object; raises :class:`EventError` naming the field."""
        if not isinstance(obj, dict):
            raise EventError(f"event: expected a JSON object, got {type(obj).__name__}")
        seq, kind, time, data = obj.get("seq"), obj.get("type"), obj.get("time"), obj.get("data")
        if not (
            type(seq) is int
            and type(kind) is str
            and type(time) is int
            and type(data) is dict
            and 0 <= time <= MAX_TIME_MS
        ):  # the slow path exists to name the bad field
            seq = _need(obj, "seq", int, "event")
            kind = _need(obj, "type", str, "event")
            time = _need(obj, "time", int, "event")
            data = _need(obj, "data", dict, "event")
            if not 0 <= time <= MAX_TIME_MS:
                raise EventError(
                    f"event.time: expected epoch milliseconds from 0 to {MAX_TIME_MS} "
                    f"(9999-12-31T23:59:59.999Z), got {time}"
                )
        if seq < 0:
            raise EventError(f"event.seq: expected an integer >= 0, got {seq}")
        kind = _KNOWN_TYPES.get(kind, kind)  # one string per type, not one per event
        raw_op = obj.get("surfaceOp")
        op: SurfaceOp | None
        if raw_op is None and kind not in SURFACE_TYPES:  # the common cases, decided here
            op = None
        elif raw_op == "append" and kind in SURFACE_TYPES:
            op = "append"
        else:
            op = _parse_surface_op(raw_op, kind)
        sources = obj.get("sourceEventSeqs")
        source_seqs: tuple[int, ...] | None = None
        if sources is not None:
            if not isinstance(sources, list) or not _INT_TYPE.issuperset(map(type, sources)):
                raise EventError("event.sourceEventSeqs: expected a list of integers")
            source_seqs = tuple(sources)
        extra = (
            _NO_EXTRA
            if obj.keys() <= _EVENT_KEY_SET
            else {k: v for k, v in obj.items() if k not in _EVENT_KEY_SET}
        )
        event = cls(seq, kind, time, data, op, source_seqs, extra)
        validate_payload(event)
        message = event._message
        if message is not None and len(data) == 1:  # {"message": …} alone: keep it parsed only
            order = _rebuildable(data["message"], message)
            if order is not None:
                event._data, event._order = None, order
        return event


def _parse_surface_op(raw: object, kind: str) -> SurfaceOp | None:
    if kind not in SURFACE_TYPES:
        if raw is not None:
            raise EventError(
                f"event.surfaceOp: only surface types ({', '.join(sorted(SURFACE_TYPES))}) "
                f"may carry a surfaceOp, not {kind!r}"
            )
        return None
    if raw == "append":
        return "append"
    if isinstance(raw, dict) and raw.get("op") == "replace":
        start, end = raw.get("startSeq"), raw.get("endSeq")
        if type(start) is int and type(end) is int:  # a bool is not a seq
            return Replace(start, end)
        name, value = ("startSeq", start) if type(start) is not int else ("endSeq", end)
        raise EventError(
            f"event.surfaceOp.{name}: a replace needs integer startSeq and endSeq, "
            f"got {type(value).__name__}"
        )
    raise EventError(
        f"event.surfaceOp: expected 'append' or {{'op': 'replace', 'startSeq', 'endSeq'}} "
        f"on a {kind} event, got {raw!r}"
    )


def validate_payload(event: Event) -> None:
    """Check the payload keys of a known event type; ``x-*`` types are accepted as they are."""
    kind = event.type
    if kind in SURFACE_TYPES:
        message = event.message
        expected = ROLE_BY_TYPE[kind]
        if message.role != expected:
            raise EventError(
                f"event {event.seq} data.message.role: a {kind} event needs role "
                f"{expected!r}, got {message.role!r}"
            )
        if isinstance(event.surface_op, Replace) and not event.source_event_seqs:
            raise EventError(
                f"event {event.seq}: a replace must carry sourceEventSeqs covering what it shadows"
            )
        return
    if kind.startswith("x-"):
        return
    if kind not in LOG_ONLY_TYPES:
        raise EventError(
            f"event {event.seq}.type: unknown event type {kind!r}; accepted: "
            f"{', '.join(sorted(SURFACE_TYPES | LOG_ONLY_TYPES))}, or an 'x-…' extension type"
        )
    if not event.data.keys() >= _REQUIRED_SETS[kind]:
        for key in _REQUIRED_DATA[kind]:
            if key not in event.data:
                raise EventError(f"event {event.seq} ({kind}) data.{key}: missing (required)")
    for key, types in _DATA_TYPES.get(kind, {}).items():
        if key not in event.data:
            continue  # optional keys (e.g. compaction/end's error)
        value = event.data[key]
        if type(value) not in types:
            expected = " or ".join(_TYPE_NAMES[t] for t in types)
            raise EventError(
                f"event {event.seq} ({kind}) data.{key}: expected {expected}, "
                f"got {type(value).__name__}"
            )
    if kind == "compaction/summary" and not _INT_TYPE.issuperset(
        map(type, event.data["shadowedSeqs"])
    ):
        raise EventError(f"event {event.seq} (compaction/summary) data.shadowedSeqs: integers only")
    if kind == "system/message":
        message = event.message
        if message.role != "system":
            raise EventError(f"event {event.seq} data.message.role: expected 'system'")
    if kind in PIN_TYPES and (problem := pin_id_problem(kind, event.seq, event.data["pin"])):
        raise EventError(f"event {event.seq} ({kind}) data.pin: {problem}")


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An event before it is appended: the session assigns ``seq``, ``time`` and message ids."""

    type: str
    data: dict[str, Any]
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    time: int | None = None
    """Epoch ms; None means the session's clock at append time."""

    def __post_init__(self) -> None:
        # The event line wraps ``data`` in one more object (``surfaceOp`` nests only 2 deep).
        if json_depth(self.data, MAX_JSON_DEPTH - 1) > MAX_JSON_DEPTH - 1:
            raise EventError(
                f"{self.type} event data: nested more than {MAX_JSON_DEPTH - 1} levels deep "
                f"(a log line nests at most {MAX_JSON_DEPTH} levels, its own object included)"
            )
        message = self.data.get("message") if isinstance(self.data, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        for i, block in enumerate(content if isinstance(content, list) else ()):
            arguments = block.get("arguments") if isinstance(block, dict) else None
            if isinstance(arguments, str) and json_text_too_deep(arguments, MAX_JSON_DEPTH):
                raise EventError(
                    f"{self.type} event data.message.content[{i}].arguments: nested more than "
                    f"{MAX_JSON_DEPTH} levels deep"
                )
