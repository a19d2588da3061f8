"""The on-disk event vocabulary: exact JSON round-trip and validation (SPEC 3.1)."""

from __future__ import annotations

from typing import Any

import pytest

from dashr_ext._archive import iso_utc
from dashr_ext._events import (
    MAX_TIME_MS,
    Event,
    ImageBlock,
    Message,
    ReasoningBlock,
    Replace,
    TextBlock,
    ToolCallBlock,
)
from dashr_ext._paths import utc_stamp
from dashr_ext._recall.render import minute_utc
from dashr_ext.errors import EventError

HEADER = {
    "seq": 0,
    "type": "session/header",
    "time": 1,
    "data": {
        "sessionId": "s1",
        "createdAt": 1,
        "systemPrompt": None,
        "tools": None,
        "format": "dashr/1",
    },
}
ASSISTANT = {
    "seq": 5,
    "type": "assistant/message",
    "time": 1764460000123,
    "surfaceOp": "append",
    "data": {
        "message": {
            "id": "m5",
            "role": "assistant",
            "source": {"kind": "model", "model": "deepseek-chat"},
            "content": [
                {"type": "reasoning", "text": "look at the helper"},
                {"type": "text", "text": "I will inspect the retry helper first."},
                {
                    "type": "tool-call",
                    "id": "call_1",
                    "name": "read",
                    "arguments": '{"path":"src/retry.ts"}',
                },
                {
                    "type": "image",
                    "attachmentId": "a1",
                    "mediaType": "image/png",
                    "width": 800,
                    "height": 600,
                    "bytes": 1234,
                },
            ],
        }
    },
}
TOOL_RESULT = {
    "seq": 6,
    "type": "tool/result",
    "time": 1764460000200,
    "surfaceOp": "append",
    "data": {
        "message": {
            "id": "m6",
            "role": "tool",
            "source": {"kind": "tool"},
            "toolCallId": "call_1",
            "toolName": "read",
            "isError": False,
            "content": [{"type": "text", "text": "export function retryBudget() { return 3 }"}],
        }
    },
}
REPLACE = {
    "seq": 9,
    "type": "user/message",
    "time": 1764460000300,
    "surfaceOp": {"op": "replace", "startSeq": 1, "endSeq": 6},
    "sourceEventSeqs": [1, 2, 5, 6, 7, 8],
    "data": {
        "message": {
            "id": "m9",
            "role": "user",
            "source": {"kind": "compact-checkpoint", "checkpoint": "c8"},
            "content": [{"type": "text", "text": "summary"}],
        }
    },
}


@pytest.mark.parametrize(
    "obj",
    [
        HEADER,
        ASSISTANT,
        TOOL_RESULT,
        REPLACE,
        {"seq": 3, "type": "turn/start", "time": 2, "data": {"turn": 1}},
        {
            "seq": 4,
            "type": "x-acme/trace",
            "time": 2,
            "data": {"anything": [1, {"goes": True}]},
            "note": "kept",
        },
        {
            "seq": 7,
            "type": "usage/report",
            "time": 3,
            "data": {"promptTokens": 120, "completionTokens": None, "atSeq": 6},
        },
    ],
    ids=["header", "assistant", "tool-result", "replace", "turn-start", "extension", "usage"],
)
def test_every_valid_event_round_trips_exactly(obj: dict[str, Any]) -> None:
    assert Event.from_json(obj).to_json() == obj


def test_parsed_message_exposes_typed_blocks() -> None:
    msg = Event.from_json(ASSISTANT).message
    assert isinstance(msg, Message)
    assert msg.reasoning == "look at the helper"
    assert msg.text == "I will inspect the retry helper first."
    assert msg.tool_calls == (ToolCallBlock("call_1", "read", '{"path":"src/retry.ts"}'),)
    assert isinstance(msg.content[0], ReasoningBlock)
    assert isinstance(msg.content[1], TextBlock)
    image = msg.content[3]
    assert isinstance(image, ImageBlock)
    assert (image.media_type, image.width, image.height, image.bytes) == (
        "image/png",
        800,
        600,
        1234,
    )
    result = Event.from_json(TOOL_RESULT).message
    assert (result.tool_call_id, result.tool_name, result.is_error) == ("call_1", "read", False)


def test_times_up_to_the_end_of_year_9999_are_accepted_and_render() -> None:
    first = Event.from_json(_with(HEADER, ("time",), 0)).time
    last = Event.from_json(_with(HEADER, ("time",), MAX_TIME_MS)).time
    assert (minute_utc(first), minute_utc(last)) == ("1970-01-01 00:00Z", "9999-12-31 23:59Z")
    assert iso_utc(last) == "9999-12-31T23:59:59.999Z"
    assert utc_stamp(last) == "99991231T235959999Z"


def test_replace_surface_op_is_typed() -> None:
    event = Event.from_json(REPLACE)
    assert event.surface_op == Replace(1, 6)
    assert event.source_event_seqs == (1, 2, 5, 6, 7, 8)


def _with(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(obj)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (_with(HEADER, ("seq",), -1), "event.seq: expected an integer >= 0, got -1"),
        (_with(HEADER, ("seq",), "0"), "event.seq: expected int, got str"),
        (_with(HEADER, ("time",), _DELETE), "event.time: missing (required)"),
        (_with(HEADER, ("type",), "bogus/kind"), "unknown event type 'bogus/kind'"),
        (_with(HEADER, ("data", "format"), _DELETE), "data.format: missing (required)"),
        (_with(HEADER, ("surfaceOp",), "append"), "only surface types"),
        (_with(ASSISTANT, ("surfaceOp",), "insert"), "event.surfaceOp: expected 'append'"),
        (
            _with(ASSISTANT, ("data", "message", "role"), "user"),
            "needs role 'assistant', got 'user'",
        ),
        (
            _with(ASSISTANT, ("data", "message", "content"), [{"type": "video"}]),
            "content[0].type: unknown content block type 'video'",
        ),
        (
            _with(
                ASSISTANT,
                ("data", "message", "content"),
                [{"type": "tool-call", "id": "x", "name": "n", "arguments": {}}],
            ),
            "content[0].arguments: expected str, got dict",
        ),
        (
            _with(TOOL_RESULT, ("data", "message", "toolCallId"), _DELETE),
            "toolCallId: missing (required)",
        ),
        (
            _with(TOOL_RESULT, ("data", "message", "isError"), "no"),
            "isError: expected bool, got str",
        ),
        (_with(REPLACE, ("sourceEventSeqs",), _DELETE), "a replace must carry sourceEventSeqs"),
        (
            _with(REPLACE, ("sourceEventSeqs",), [1, 2, True]),
            "event.sourceEventSeqs: expected a list of integers",
        ),
        (
            _with(REPLACE, ("sourceEventSeqs",), [1, 2.0]),
            "event.sourceEventSeqs: expected a list of integers",
        ),
        (
            _with(REPLACE, ("surfaceOp",), {"op": "replace", "startSeq": 1}),
            "a replace needs integer startSeq and endSeq",
        ),
        (
            _with(REPLACE, ("surfaceOp",), {"op": "replace", "startSeq": 1, "endSeq": True}),
            "event.surfaceOp.endSeq: a replace needs integer startSeq and endSeq, got bool",
        ),
        (
            _with(REPLACE, ("surfaceOp",), {"op": "replace", "startSeq": False, "endSeq": 6}),
            "event.surfaceOp.startSeq: a replace needs integer startSeq and endSeq, got bool",
        ),
        (
            _with(HEADER, ("time",), 10**20),
            "event.time: expected epoch milliseconds from 0 to 253402300799999 "
            "(9999-12-31T23:59:59.999Z), got 100000000000000000000",
        ),
        (_with(ASSISTANT, ("time",), -1), "event.time: expected epoch milliseconds"),
        (
            {"seq": 3, "type": "turn/start", "time": 2, "data": {"turn": "1"}},
            "data.turn: expected int, got str",
        ),
    ],
)
def test_invalid_events_name_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(EventError) as info:
        Event.from_json(obj)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"createdAt": "2025-01-01"}, "data.createdAt: expected int, got str"),
        ({"createdAt": None}, "data.createdAt: expected int, got NoneType"),
        ({"systemPrompt": 5}, "data.systemPrompt: expected str or null, got int"),
        ({"tools": {"a": 1}}, "data.tools: expected list or null, got dict"),
    ],
)
def test_header_payload_types_are_checked(data: dict[str, Any], message: str) -> None:
    obj = _with(HEADER, ("data",), {**HEADER["data"], **data})
    with pytest.raises(EventError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Event.from_json(obj)


def test_usage_and_summary_payload_types_are_checked() -> None:
    usage = {
        "seq": 7,
        "type": "usage/report",
        "time": 3,
        "data": {"promptTokens": 120, "completionTokens": "9", "atSeq": 6},
    }
    with pytest.raises(EventError, match="completionTokens: expected int or null, got str"):
        Event.from_json(usage)
    end = {"seq": 8, "type": "compaction/end", "time": 3, "data": {"compactionId": 5}}
    with pytest.raises(EventError, match="compactionId: expected str, got int"):
        Event.from_json(end)


@pytest.mark.parametrize("seqs", [[5, 6], [5, True], [5, 6.0], [5, "6"]])
def test_summary_shadowed_seqs_are_integers_only(seqs: list[Any]) -> None:
    data = {
        "compactionId": "k1",
        "checkpoint": "c42",
        "trigger": "manual",
        "engine": "summary",
        "summary": "s",
        "shadowedRange": {"start": 5, "end": 6},
        "shadowedSeqs": seqs,
        "shadowedTokenCount": 77,
        "summarizer": {"kind": "extractive", "model": None},
        "archive": {},
    }
    obj = {"seq": 42, "type": "compaction/summary", "time": 3, "data": data}
    if all(type(s) is int for s in seqs):
        assert Event.from_json(obj).data["shadowedSeqs"] == seqs
    else:
        with pytest.raises(EventError, match=r"data\.shadowedSeqs: integers only"):
            Event.from_json(obj)
