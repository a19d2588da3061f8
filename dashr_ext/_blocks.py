"""Content blocks of a message (text, reasoning, tool calls, images) and their JSON.

Part of the event model of :mod:`dashr_ext._events`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .errors import EventError

__all__ = [
    "ContentBlock",
    "ImageBlock",
    "ReasoningBlock",
    "TextBlock",
    "ToolCallBlock",
    "block_from_json",
    "block_to_json",
    "need",
    "render_image",
    "text_blocks",
    "texts",
]

JSON: TypeAlias = dict[str, Any]

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


def need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
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


def optional_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
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
        return TextBlock(need(obj, "text", str, where))
    if kind == "reasoning":
        return ReasoningBlock(need(obj, "text", str, where))
    if kind == "tool-call":
        return ToolCallBlock(
            need(obj, "id", str, where),
            need(obj, "name", str, where),
            need(obj, "arguments", str, where),
        )
    if kind == "image":
        return ImageBlock(
            attachment_id=need(obj, "attachmentId", str, where),
            media_type=need(obj, "mediaType", str, where),
            width=optional_int(obj, "width", where),
            height=optional_int(obj, "height", where),
            bytes=optional_int(obj, "bytes", where),
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
