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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from ._jsontext import MAX_JSON_DEPTH, json_depth, json_text_too_deep
from .errors import EventError

__all__ = [
    "LOG_ONLY_TYPES",
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
    }
)

_KNOWN_TYPES = {kind: kind for kind in SURFACE_TYPES | LOG_ONLY_TYPES}

SETTINGS_TYPES = frozenset({"session/header", "config/change"})
"""Log-only types that describe a session rather than record anything in it."""

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
}
_TYPE_NAMES = {str: "str", int: "int", list: "list", dict: "object", _N: "null"}


MAX_TIME_MS = 253_402_300_799_999
"""The latest accepted event time: 9999-12-31T23:59:59.999Z in epoch milliseconds."""


def now_ms() -> int:
    """The current time as epoch milliseconds (UTC)."""
    return _time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    text: str
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallBlock:
    id: str
    name: str
    arguments: str
    """The call's arguments as a JSON string, exactly as the model produced them."""
    type: Literal["tool-call"] = "tool-call"


@dataclass(frozen=True, slots=True)
class ImageBlock:
    attachment_id: str
    media_type: str
    width: int | None
    height: int | None
    bytes: int | None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys beyond the vocabulary (e.g. ``url``), preserved for the round-trip."""
    type: Literal["image"] = "image"


ContentBlock: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ImageBlock


def render_image(block: ImageBlock) -> str:
    """The in-text placeholder of an image, e.g. ``[image image/png 800x600 attachment a1]``."""
    size = (
        f" {block.width}x{block.height}"
        if block.width is not None and block.height is not None
        else ""
    )
    return f"[image {block.media_type}{size} attachment {block.attachment_id}]"


_IMAGE_KEYS = ("type", "attachmentId", "mediaType", "width", "height", "bytes")


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    try:
        value = obj[key]
    except KeyError:
        raise EventError(f"{where}.{key}: missing (required)") from None
    if type(value) is kind:  # the common case, decided without isinstance machinery
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise EventError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
    return value


def _optional_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise EventError(f"{where}.{key}: expected int or null, got {type(value).__name__}")
    return value


def block_from_json(obj: object, where: str = "block") -> ContentBlock:
    """Parse one content block, raising :class:`EventError` naming the bad field."""
    if not isinstance(obj, dict):
        raise EventError(f"{where}: expected an object, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "text":
        return TextBlock(_need(obj, "text", str, where))
    if kind == "reasoning":
        return ReasoningBlock(_need(obj, "text", str, where))
    if kind == "tool-call":
        return ToolCallBlock(
            _need(obj, "id", str, where),
            _need(obj, "name", str, where),
            _need(obj, "arguments", str, where),
        )
    if kind == "image":
        return ImageBlock(
            attachment_id=_need(obj, "attachmentId", str, where),
            media_type=_need(obj, "mediaType", str, where),
            width=_optional_int(obj, "width", where),
            height=_optional_int(obj, "height", where),
            bytes=_optional_int(obj, "bytes", where),
            extra={k: v for k, v in obj.items() if k not in _IMAGE_KEYS},
        )
    raise EventError(
        f"{where}.type: unknown content block type {kind!r}; "
        "accepted: 'text', 'reasoning', 'tool-call', 'image'"
    )


def block_to_json(block: ContentBlock) -> JSON:
    if isinstance(block, TextBlock | ReasoningBlock):
        return {"type": block.type, "text": block.text}
    if isinstance(block, ToolCallBlock):
        return {
            "type": "tool-call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    return {
        "type": "image",
        "attachmentId": block.attachment_id,
        "mediaType": block.media_type,
        "width": block.width,
        "height": block.height,
        "bytes": block.bytes,
        **block.extra,
    }


# --------------------------------------------------------------------------- messages

_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})
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

    def to_json(self) -> JSON:
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
        return out


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class Replace:
    """``surfaceOp: {"op": "replace", "startSeq", "endSeq"}``: shadow a contiguous surface run."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | Replace

_EVENT_KEYS = ("seq", "type", "time", "surfaceOp", "sourceEventSeqs", "data")
_EVENT_KEY_SET = frozenset(_EVENT_KEYS)


@dataclass(slots=True)
class Event:
    """One line of the session log. Treat as immutable once appended."""

    seq: int
    type: str
    time: int
    data: JSON
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys beyond the vocabulary, preserved for the round-trip (read-only)."""
    _message: Message | None = field(default=None, repr=False, compare=False)

    @property
    def is_surface(self) -> bool:
        return self.type in SURFACE_TYPES

    @property
    def message(self) -> Message:
        """The parsed message of a surface or ``system/message`` event (cached)."""
        if self._message is None:
            if "message" not in self.data:
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
            if not isinstance(sources, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) for s in sources
            ):
                raise EventError("event.sourceEventSeqs: expected a list of integers")
            source_seqs = tuple(sources)
        extra = (
            _NO_EXTRA
            if obj.keys() <= _EVENT_KEY_SET
            else {k: v for k, v in obj.items() if k not in _EVENT_KEY_SET}
        )
        event = cls(seq, kind, time, data, op, source_seqs, extra)
        validate_payload(event)
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
    if kind == "compaction/summary" and not all(type(q) is int for q in event.data["shadowedSeqs"]):
        raise EventError(f"event {event.seq} (compaction/summary) data.shadowedSeqs: integers only")
    if kind == "system/message":
        message = event.message
        if message.role != "system":
            raise EventError(f"event {event.seq} data.message.role: expected 'system'")


def texts(blocks: Iterable[ContentBlock]) -> list[str]:
    """Every piece of searchable text in ``blocks``: text, reasoning, tool names and arguments."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, TextBlock | ReasoningBlock):
            out.append(b.text)
        elif isinstance(b, ToolCallBlock):
            out.append(f"{b.name} {b.arguments}")
    return out


def text_blocks(text: str | Sequence[ContentBlock]) -> tuple[ContentBlock, ...]:
    """Normalise a ``str`` or a block sequence into a block tuple."""
    if isinstance(text, str):
        return (TextBlock(text),)
    return tuple(text)


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
