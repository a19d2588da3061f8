"""OpenAI chat-completions messages <-> session events (SPEC §3.5).

A pure translator: :func:`to_event_specs` turns messages into event specs, reading only the
session's tool calls (:class:`KnownToolCalls`); :func:`to_openai` derives messages back from
a session's envelope and surface (:class:`RequestSource`). ``Session.record_openai`` appends the
specs, letting the session write the turn/step markers their order implies (SPEC §3.3).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .._events import (
    Event,
    EventSpec,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    block_to_json,
    render_image,
)
from .._jsontext import MAX_JSON_DEPTH, json_depth, loads_json, utf8_json, utf8_text
from ..errors import FormatError

__all__ = [
    "IMPORT_ACCEPTS",
    "EnvelopeSource",
    "KnownToolCalls",
    "RequestSource",
    "envelope_messages",
    "event_to_openai",
    "import_messages",
    "to_event_specs",
    "to_openai",
]

_FIELD_DEPTH = MAX_JSON_DEPTH - 5
"""How deeply one field of a message may nest: event, data, message, openai, extra wrap it."""
_SAME_KEYS = "two keys are the same once made UTF-8-safe (a lone surrogate becomes U+FFFD)"
_KNOWN_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}


IMPORT_ACCEPTS = (
    'OpenAI chat messages: a JSON list of messages, {"messages": [...], "tools": [...]}, or '
    "JSON Lines with one message per line"
)
"""What :func:`import_messages` reads (error messages end with it)."""
_READS = f"import reads {IMPORT_ACCEPTS}"
_EVENT_KEYS = frozenset({"seq", "type", "time"})
"""Keys every dashr event has and no OpenAI message: a line holding them is a session log's."""


def import_messages(text: str, source: str) -> tuple[list[Any], Any]:
    """The messages and the tool schemas (None when not given) of a file to import.

    ``text`` is the file's content, ``source`` its name for messages. Raises
    :class:`~dashr_ext.errors.FormatError` saying what was found and what is read instead
    (:data:`IMPORT_ACCEPTS`); a dashr session log is named as such (it needs no import).
    The messages themselves are checked when they are translated (:func:`to_event_specs`).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":  # more than one JSON value: JSON Lines
            raise FormatError(source, f"not valid JSON ({exc}); {_READS}") from None
        return _json_lines(text, source), None
    except RecursionError:
        raise FormatError(source, f"nested too deeply; {_READS}") from None
    tools = None
    if isinstance(data, dict):
        if data.keys() >= _EVENT_KEYS:
            raise FormatError(source, _session_log())
        if "role" in data and "messages" not in data:  # one message (one line of JSON Lines)
            return [data], None
        tools = data.get("tools")
        data = data.get("messages")
    if not isinstance(data, list):
        got = "an object without messages" if isinstance(data, dict) else type(data).__name__
        raise FormatError(source, f"got {got}; {_READS}")
    return data, tools


def _json_lines(text: str, source: str) -> list[Any]:
    messages: list[Any] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            problem = f"not a JSON value ({why}); {_READS}"
            raise FormatError(f"{source} line {number}", problem) from None
        if isinstance(obj, dict) and obj.keys() >= _EVENT_KEYS:
            raise FormatError(source, _session_log())
        if not isinstance(obj, dict) or "role" not in obj:
            got = "an object without a role" if isinstance(obj, dict) else type(obj).__name__
            raise FormatError(f"{source} line {number}", f"{got}, not a message; {_READS}")
        messages.append(obj)
    return messages


def _session_log() -> str:
    return (
        "a dashr session log already (its lines are dashr events, not OpenAI messages): it "
        f"needs no import, dashr inspect, outline, read and search read it as it is; {_READS}"
    )


class KnownToolCalls(Protocol):
    """What translating messages reads of a session: the tool calls it already holds."""

    def pending_tool_calls(self) -> list[str]: ...

    def interrupted_tool_calls(self) -> list[str]: ...

    def tool_call_seq(self, tool_call_id: str) -> int | None: ...

    def tool_call_name(self, tool_call_id: str) -> str | None: ...


class EnvelopeSource(Protocol):
    """What the messages before the surface read of a session: its system prompt."""

    @property
    def system_message(self) -> Event | None: ...

    @property
    def system_prompt(self) -> str | None: ...


class RequestSource(EnvelopeSource, Protocol):
    """What deriving a request reads of a session: its envelope and current surface."""

    def surface_events(self) -> Iterable[Event]: ...


def to_event_specs(
    calls: KnownToolCalls, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]
) -> list[EventSpec]:
    """Translate OpenAI chat message(s) into event specs, checking them against ``calls``.

    Raises :class:`~dashr_ext.errors.FormatError` naming the first bad field.

    The accepted message shapes:

    * ``{"role": "system", "content": str | [text parts]}`` — an envelope change
      (``system/message``, log-only), never a surface node;
    * ``{"role": "user", "content": str | [parts]}`` with ``text`` and ``image_url`` parts;
    * ``{"role": "assistant", "content": str | None | [parts], "tool_calls": [...],
      "reasoning_content": str}`` with ``text``, ``refusal`` and ``image_url`` parts (DeepSeek-style
      reasoning becomes a reasoning block; a refusal part becomes a text block, remembered as a
      refusal so it is emitted as one);
    * ``{"role": "tool", "tool_call_id": str, "content": str | [text parts]}``.

    The round-trip through :func:`to_openai` is exact except for these normalisations:

    1. ``tool_calls[].index`` (a streaming artefact) is dropped;
    2. key order follows this module, not the input;
    3. ``compact-checkpoint`` and ``context/message`` nodes render as ``user`` messages.

    Keys this module does not interpret (``name``, an assistant's top-level ``refusal`` and the
    like) are kept on the event under ``message["openai"]["extra"]`` and emitted again unchanged.
    So that a reopened session emits them as the live one did, a kept value must be strict JSON:
    objects with string keys (no two of which become the same when made UTF-8-safe), arrays,
    strings, finite numbers, booleans and null. An image part's ``detail`` must be a string.

    Input is made safe to log before it is translated: every string (keys included) goes through
    :func:`~dashr_ext._jsontext.utf8_text`, so surrogates UTF-8 cannot encode are replaced
    (a lone one by U+FFFD) rather than failing the write; each field of a message may nest at
    most ``MAX_JSON_DEPTH - 5`` levels (the event, ``data``, the message, ``openai`` and
    ``extra`` surround it in the log line); tool-call arguments must be strict JSON
    (:func:`~dashr_ext._jsontext.loads_json`: no ``NaN``, at most ``MAX_JSON_DEPTH`` levels);
    a base64 data URL must be valid base64.

    Malformed input raises :class:`~dashr_ext.errors.FormatError` naming the field (for a list,
    ``messages[3].tool_calls[0].function.arguments``); nothing is appended then, not even the
    valid messages before the bad one.
    """
    if isinstance(message, Mapping):
        items: list[tuple[str, Mapping[str, Any]]] = [("", message)]
    elif isinstance(message, Sequence) and not isinstance(message, str | bytes):
        items = []
        for i, m in enumerate(message):
            if not isinstance(m, Mapping):
                raise FormatError(f"messages[{i}]", f"expected an object, got {type(m).__name__}")
            items.append((f"messages[{i}].", m))
    else:
        raise FormatError(
            "message",
            f"expected an OpenAI message object or a list of them, got {type(message).__name__}",
        )
    conv = _Converter(calls)
    return [conv.convert(m, prefix) for prefix, m in items]


class _Converter:
    """Turns messages into event specs, tracking the tool calls of the batch so far."""

    def __init__(self, calls: KnownToolCalls) -> None:
        self.calls = calls
        # A call closed by a synthetic result still takes its real result (in its place).
        self.pending = dict.fromkeys([*calls.pending_tool_calls(), *calls.interrupted_tool_calls()])
        self.new_calls: dict[str, str] = {}

    def convert(self, m: Mapping[str, Any], p: str) -> EventSpec:
        for key, value in m.items():
            if json_depth(value, _FIELD_DEPTH) > _FIELD_DEPTH:
                raise FormatError(
                    f"{p}{key}",
                    f"nested more than {_FIELD_DEPTH} levels deep; a message field may nest "
                    f"at most {_FIELD_DEPTH} levels",
                )
        role = m.get("role")
        if role not in _KNOWN_KEYS:
            raise FormatError(
                f"{p}role", f"expected 'system', 'user', 'assistant' or 'tool', got {role!r}"
            )
        safe: set[str] = set()
        for key, value in m.items():  # what is kept as it came must read back the same
            if key not in _KNOWN_KEYS[role]:
                _check_kept(key, value, p)
            if utf8_text(key) in safe:
                raise FormatError(f"{p}{utf8_text(key)}", _SAME_KEYS)
            safe.add(utf8_text(key))
        m = utf8_json(dict(m))  # bounded above, so the walk ends even on a cyclic input
        extra = {k: v for k, v in m.items() if k not in _KNOWN_KEYS[role]}
        if role == "system":
            content, parts = _text_content(m, p, allow_none=False)
            msg = _message("system", {"kind": "system"}, content, parts, extra)
            return EventSpec("system/message", {"message": msg})
        if role == "user":
            content, parts = _user_content(m, p)
            msg = _message("user", {"kind": "user"}, content, parts, extra)
            return EventSpec("user/message", {"message": msg}, "append")
        if role == "assistant":
            return self._assistant(m, p, extra)
        return self._tool(m, p, extra)

    def _assistant(self, m: Mapping[str, Any], p: str, extra: dict[str, Any]) -> EventSpec:
        blocks: list[Any] = []
        reasoning = m.get("reasoning_content")
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise FormatError(f"{p}reasoning_content", "expected a string or null")
            blocks.append(ReasoningBlock(reasoning))
        content, parts, refusals = _assistant_content(m, p)
        blocks.extend(content)
        raw_calls = m.get("tool_calls")
        if raw_calls is not None:
            if not isinstance(raw_calls, list):
                raise FormatError(f"{p}tool_calls", "expected a list of tool calls or null")
            for i, call in enumerate(raw_calls):
                blocks.append(self._tool_call(call, f"{p}tool_calls[{i}]"))
        msg = _message("assistant", {"kind": "model", "model": None}, blocks, parts, extra)
        if refusals:
            msg.setdefault("openai", {})["refusals"] = refusals
        if raw_calls == []:
            msg.setdefault("openai", {})["emptyToolCalls"] = True
        elif raw_calls is None and "tool_calls" in m:
            msg.setdefault("openai", {})["nullToolCalls"] = True
        return EventSpec("assistant/message", {"message": msg}, "append")

    def _tool_call(self, call: object, p: str) -> ToolCallBlock:
        if not isinstance(call, Mapping):
            raise FormatError(p, f"expected an object, got {type(call).__name__}")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise FormatError(f"{p}.id", "expected a non-empty string")
        kind = call.get("type", "function")
        if kind != "function":
            raise FormatError(f"{p}.type", f"expected 'function', got {kind!r}")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise FormatError(f"{p}.function", "expected an object with 'name' and 'arguments'")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise FormatError(f"{p}.function.name", "expected a non-empty string")
        args = fn.get("arguments")
        if not isinstance(args, str):
            raise FormatError(
                f"{p}.function.arguments", f"expected a JSON string, got {type(args).__name__}"
            )
        try:
            loads_json(args)
        except ValueError as exc:
            raise FormatError(f"{p}.function.arguments", f"not valid JSON ({exc})") from None
        if call_id in self.new_calls or self.calls.tool_call_seq(call_id) is not None:
            raise FormatError(
                f"{p}.id", f"tool call id {call_id!r} is already used in this session"
            )
        self.new_calls[call_id] = name
        self.pending[call_id] = None
        return ToolCallBlock(call_id, name, args)

    def _tool(self, m: Mapping[str, Any], p: str, extra: dict[str, Any]) -> EventSpec:
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise FormatError(
                f"{p}tool_call_id", "missing: a tool message needs the id of its call"
            )
        if call_id not in self.pending:
            waiting = ", ".join(self.pending) or "none"
            raise FormatError(
                f"{p}tool_call_id",
                f"no tool call {call_id!r} is awaiting a result (awaiting: {waiting})",
            )
        del self.pending[call_id]
        content, parts = _text_content(m, p, allow_none=False)
        name = extra.get("name")
        tool_name = name if isinstance(name, str) else self._call_name(call_id)
        msg = _message("tool", {"kind": "tool"}, content, parts, extra)
        msg.update({"toolCallId": call_id, "toolName": tool_name, "isError": False})
        return EventSpec("tool/result", {"message": msg}, "append")

    def _call_name(self, call_id: str) -> str:
        return self.new_calls.get(call_id) or self.calls.tool_call_name(call_id) or ""


def _check_kept(key: object, value: object, p: str) -> None:
    """Refuse an uninterpreted field that would not read back from the log as it is now.

    Kept fields must be strict JSON: objects with string keys (no two the same once made
    UTF-8-safe), arrays, strings, finite numbers, booleans and null.
    """
    if not isinstance(key, str):
        raise FormatError(
            f"{p}{key!r}", f"not JSON data (keys must be strings, got {_key_shown(key)})"
        )
    todo: list[tuple[str, object]] = [(f"{p}{utf8_text(key)}", value)]
    while todo:  # json_depth bounded the nesting, so a cyclic value cannot get here
        field, item = todo.pop()
        children: list[tuple[str, object]] = []
        if isinstance(item, dict):
            names: set[str] = set()
            for k, v in item.items():
                if not isinstance(k, str):
                    raise FormatError(
                        field, f"not JSON data (keys must be strings, got {_key_shown(k)})"
                    )
                name = f"{field}.{utf8_text(k)}"
                if name in names:
                    raise FormatError(name, _SAME_KEYS)
                names.add(name)
                children.append((name, v))
        elif isinstance(item, list | tuple):
            children = [(f"{field}[{i}]", v) for i, v in enumerate(item)]
        elif isinstance(item, float) and not math.isfinite(item):
            raise FormatError(field, f"not JSON data (numbers must be finite, got {item!r})")
        elif item is not None and not isinstance(item, str | int | float):
            raise FormatError(field, f"not JSON data (a {type(item).__name__})")
        todo.extend(reversed(children))  # depth first, in order: the first bad field is named


def _key_shown(key: object) -> str:
    return f"the key {key!r} (of type {type(key).__name__})"


def _message(
    role: str,
    source: dict[str, Any],
    content: Sequence[Any],
    parts: bool,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "role": role,
        "source": source,
        "content": [block_to_json(b) for b in content],
    }
    openai: dict[str, Any] = {}
    if parts:
        openai["parts"] = True
    if extra:
        openai["extra"] = dict(extra)
    if openai:
        msg["openai"] = openai
    return msg


def _text_content(m: Mapping[str, Any], p: str, *, allow_none: bool) -> tuple[list[Any], bool]:
    """Content that may only hold text: a string, text parts, or (assistant) null."""
    content = m.get("content")
    if content is None:
        if allow_none:
            return [], False
        raise FormatError(f"{p}content", "expected a string or a list of text parts, got null")
    if isinstance(content, str):
        return [TextBlock(content)], False
    if isinstance(content, list):
        blocks: list[Any] = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise FormatError(
                    f"{p}content[{i}].type", f"expected a 'text' part here, got {kind!r}"
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise FormatError(f"{p}content[{i}].text", "expected a string")
            blocks.append(TextBlock(text))
        return blocks, True
    raise FormatError(
        f"{p}content", f"expected a string or a list of parts, got {type(content).__name__}"
    )


def _user_content(m: Mapping[str, Any], p: str) -> tuple[list[Any], bool]:
    content = m.get("content")
    if not isinstance(content, list):
        return _text_content(m, p, allow_none=False)
    blocks, _ = _parts(content, p, ("text", "image_url"))
    return blocks, True


def _assistant_content(m: Mapping[str, Any], p: str) -> tuple[list[Any], bool, list[int]]:
    """(blocks, given as parts, indices of the refusal parts) of an assistant's content."""
    content = m.get("content")
    if not isinstance(content, list):
        blocks, parts = _text_content(m, p, allow_none=True)
        return blocks, parts, []
    blocks, refusals = _parts(content, p, ("text", "refusal", "image_url"))
    return blocks, True, refusals


def _parts(content: list[Any], p: str, accepted: tuple[str, ...]) -> tuple[list[Any], list[int]]:
    """The blocks of content parts of the ``accepted`` types, and which parts were refusals."""
    blocks: list[Any] = []
    refusals: list[int] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in accepted:
            names = f"{', '.join(map(repr, accepted[:-1]))} or {accepted[-1]!r}"
            raise FormatError(f"{p}content[{i}].type", f"expected {names}, got {kind!r}")
        if kind == "image_url":
            blocks.append(_image(part, f"{p}content[{i}]"))
            continue
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise FormatError(f"{p}content[{i}].{key}", "expected a string")
        if kind == "refusal":
            refusals.append(i)
        blocks.append(TextBlock(text))
    return blocks, refusals


def _image(part: Mapping[str, Any], p: str) -> ImageBlock:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else None
    if not isinstance(url, str) or not url:
        raise FormatError(f"{p}.image_url.url", "expected a non-empty URL string")
    media_type, size = "image/*", None
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        media_type = header[5:].split(";")[0] or "image/*"
        if ";base64" in header:
            try:
                size = len(base64.b64decode(payload, validate=True))
            except ValueError:
                raise FormatError(f"{p}.image_url.url", "data URL is not valid base64") from None
    extra: dict[str, Any] = {"url": url}
    detail = image.get("detail") if isinstance(image, Mapping) else None
    if detail is not None:
        if not isinstance(detail, str):
            raise FormatError(
                f"{p}.image_url.detail",
                f"expected a string such as 'auto', 'low' or 'high', got {type(detail).__name__}",
            )
        extra["detail"] = detail
    import hashlib  # here: it loads OpenSSL, which a log without images never needs

    return ImageBlock(
        attachment_id=hashlib.sha256(url.encode()).hexdigest()[:16],
        media_type=media_type,
        width=None,
        height=None,
        bytes=size,
        extra=extra,
    )


# --------------------------------------------------------------------------- derive


def to_openai(session: RequestSource) -> list[dict[str, Any]]:
    """The next request's OpenAI messages: the system prompt, then the surface in order.

    Renders every node afresh; ``Session.messages`` gives the same list from renderings it
    keeps (:mod:`dashr_ext._surface`).
    """
    out = envelope_messages(session)
    for event in session.surface_events():
        out.append(event_to_openai(event))
    return out


def envelope_messages(session: EnvelopeSource) -> list[dict[str, Any]]:
    """The messages before the surface: the system prompt's, if there is one."""
    system = session.system_message
    if system is not None:
        return [_emit_system(system)]
    if session.system_prompt is not None:
        return [{"role": "system", "content": session.system_prompt}]
    return []


def _emit_system(event: Event) -> dict[str, Any]:
    msg = event.message
    openai = msg.extra.get("openai") or {}
    out: dict[str, Any] = {"role": "system", "content": _emit_text(msg.content, openai)}
    out.update(openai.get("extra") or {})
    return out


def event_to_openai(event: Event) -> dict[str, Any]:
    """One surface node as an OpenAI chat message."""
    msg = event.message
    openai: Mapping[str, Any] = msg.extra.get("openai") or {}
    out: dict[str, Any]
    if event.type == "assistant/message":
        parts = [b for b in msg.content if isinstance(b, TextBlock | ImageBlock)]
        shown = parts or openai.get("parts")
        out = {"role": "assistant", "content": _emit_text(parts, openai) if shown else None}
        calls = msg.tool_calls
        if openai.get("nullToolCalls"):
            out["tool_calls"] = None
        elif calls or openai.get("emptyToolCalls"):
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        reasoning = [b.text for b in msg.content if isinstance(b, ReasoningBlock)]
        if reasoning:
            out["reasoning_content"] = "\n".join(reasoning)
    elif event.type == "tool/result":
        out = {
            "role": "tool",
            "tool_call_id": msg.tool_call_id,
            "content": _emit_text(msg.content, openai),
        }
    else:
        out = {"role": "user", "content": _emit_text(msg.content, openai)}
    out.update(openai.get("extra") or {})
    return out


def _emit_text(blocks: Sequence[Any], openai: Mapping[str, Any]) -> Any:
    if openai.get("parts"):
        refusals = frozenset(openai.get("refusals") or ())
        parts: list[dict[str, Any]] = []
        for b in blocks:
            if isinstance(b, TextBlock) and len(parts) in refusals:
                parts.append({"type": "refusal", "refusal": b.text})
            elif isinstance(b, TextBlock):
                parts.append({"type": "text", "text": b.text})
            elif isinstance(b, ImageBlock) and "url" in b.extra:
                image: dict[str, Any] = {"url": b.extra["url"]}
                if "detail" in b.extra:
                    image["detail"] = b.extra["detail"]
                parts.append({"type": "image_url", "image_url": image})
            elif isinstance(b, ImageBlock):
                parts.append({"type": "text", "text": render_image(b)})
        return parts
    pieces = []
    for b in blocks:
        if isinstance(b, TextBlock):
            pieces.append(b.text)
        elif isinstance(b, ImageBlock):
            pieces.append(render_image(b))
    return "\n".join(pieces)
