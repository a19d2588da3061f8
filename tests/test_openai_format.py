"""Recording OpenAI chat messages and deriving them back (SPEC 3.5)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus
from helpers import append_context

from dashr_ext._events import ImageBlock, ReasoningBlock
from dashr_ext._formats.openai import to_event_specs, to_openai
from dashr_ext._session import Session
from dashr_ext.errors import FormatError


def tc(cid: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


NAN = float("nan")


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture
def session(tmp_path: Path, clock: Any) -> Session:
    s = Session.create(tmp_path / "s.jsonl", clock=clock)
    yield s
    s.close()


def test_a_tool_using_exchange_round_trips_and_infers_turns(session: Session) -> None:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing retry tests."},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [tc("c1", "read", '{"path": "src/retry.py"}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "RETRY_BUDGET = 3"},
        {"role": "assistant", "content": "The budget is 3."},
    ]
    session.record_openai(messages)
    assert to_openai(session) == messages
    assert session.system_prompt == "You are a coding agent."
    assert [e.type for e in session.events[1:]] == [
        "system/message",
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    (turn,) = session.turns
    assert (turn.reason, len(turn.steps)) == ("completed", 2)
    result = session.event(session.surface[2]).message
    assert (result.tool_call_id, result.tool_name, result.is_error) == ("c1", "read", False)


def test_reasoning_parts_images_and_extra_keys_round_trip(session: Session) -> None:
    image = "data:image/png;base64," + "iVBORw0KGgo="
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this plot?"},
                {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
            ],
            "name": "ana",
        },
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "The user wants a caption.",
            "tool_calls": [tc("c9")],
        },
        {"role": "tool", "tool_call_id": "c9", "content": "ok", "name": "bash"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [], "tool_calls": None},
    ]
    session.record_openai(messages)
    assert to_openai(session) == messages
    user = session.event(session.surface[0]).message
    img = user.content[1]
    assert isinstance(img, ImageBlock) and (img.media_type, img.bytes) == ("image/png", 8)
    assistant = session.event(session.surface[1]).message
    assert assistant.content[0] == ReasoningBlock("The user wants a caption.")


def test_assistant_refusals_and_images_round_trip_in_their_exact_shapes(
    session: Session,
) -> None:
    plot = {"url": "https://example.com/plot.png", "detail": "high"}
    messages = [
        {"role": "user", "content": "Draw the plot with our logo."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Here is the plot:"},
                {"type": "image_url", "image_url": plot},
                {"type": "refusal", "refusal": "I can't reproduce the logo."},
            ],
        },
        {"role": "user", "content": "Then describe it."},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        {"role": "user", "content": "Please?"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
    ]
    session.record_openai(copy.deepcopy(messages))
    assert to_openai(session) == messages
    assert session.path is not None
    with Session.open(session.path, read_only=True) as reopened:
        assert to_openai(reopened) == messages
    first = session.event(session.surface[1]).message
    assert first.text == "Here is the plot:\nI can't reproduce the logo."  # searchable, metered
    image = first.content[1]
    assert isinstance(image, ImageBlock) and image.extra == plot
    assert first.extra["openai"]["refusals"] == [2]
    top_level = session.event(session.surface[3]).message
    assert top_level.extra["openai"]["extra"] == {"refusal": "I can't help with that."}


def test_surrogates_in_input_are_replaced_and_the_record_is_valid_utf8(session: Session) -> None:
    session.record_openai(
        [
            {"role": "user", "content": "open caf\udce9.csv \ud83d\ude00", "name": "ana\ud800"},
            {"role": "assistant", "content": None, "tool_calls": [tc("c\udce9")]},
            {"role": "tool", "tool_call_id": "c\udce9", "content": "caf\udce9.csv"},
            {"role": "assistant", "content": [{"type": "text", "text": "x\udfff"}]},
        ]
    )
    assert to_openai(session) == [
        {"role": "user", "content": "open caf\ufffd.csv \U0001f600", "name": "ana\ufffd"},
        {"role": "assistant", "content": None, "tool_calls": [tc("c\ufffd")]},
        {"role": "tool", "tool_call_id": "c\ufffd", "content": "caf\ufffd.csv"},
        {"role": "assistant", "content": [{"type": "text", "text": "x\ufffd"}]},
    ]
    assert session.path is not None
    session.path.read_bytes().decode("utf-8")
    with Session.open(session.path, read_only=True) as reopened:
        assert reopened.event(reopened.surface[2]).message.text == "caf\ufffd.csv"


def test_documented_normalisations(session: Session) -> None:
    call = tc("c1")
    call["index"] = 0  # streaming artefact: dropped
    session.record_openai(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
        ],
    )
    ((compact_index_dropped,),) = [m["tool_calls"] for m in to_openai(session) if "tool_calls" in m]
    assert "index" not in compact_index_dropped
    append_context(
        session, "Context was condensed into checkpoint c4.", source_kind="history-access"
    )
    assert to_openai(session)[-1] == {
        "role": "user",
        "content": "Context was condensed into checkpoint c4.",
    }


@pytest.mark.parametrize(
    ("message", "field", "problem"),
    [
        ({"role": "tool", "content": "x"}, "tool_call_id", "missing"),
        (
            {"role": "tool", "tool_call_id": "nope", "content": "x"},
            "tool_call_id",
            "no tool call 'nope' is awaiting a result",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [tc("c2", arguments="{not json")]},
            "tool_calls[0].function.arguments",
            "not valid JSON",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [tc("c2", arguments="NaN")]},
            "tool_calls[0].function.arguments",
            "not valid JSON (NaN is not JSON; numbers must be finite)",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c2", arguments='{"x": -Infinity}')],
            },
            "tool_calls[0].function.arguments",
            "-Infinity is not JSON",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tc("c2", arguments="[" * 5000 + "]" * 5000)],
            },
            "tool_calls[0].function.arguments",
            "not valid JSON (nested more than 64 levels deep)",
        ),
        (
            {"role": "user", "content": "x", "meta": _nested(1000)},
            "meta",
            "nested more than 59 levels deep; a message field may nest at most 59 levels",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR!!w0="}}
                ],
            },
            "content[0].image_url.url",
            "data URL is not valid base64",
        ),
        (
            {"role": "assistant", "content": [{"type": "refusal", "refusal": None}]},
            "content[0].refusal",
            "expected a string",
        ),
        (
            {"role": "assistant", "content": [{"type": "input_audio"}]},
            "content[0].type",
            "expected 'text', 'refusal' or 'image_url', got 'input_audio'",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [tc("c2", arguments={"a": 1})]},  # type: ignore[arg-type]
            "tool_calls[0].function.arguments",
            "expected a JSON string, got dict",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c2", "type": "function"}],
            },
            "tool_calls[0].function",
            "expected an object",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": "c2"},
            "tool_calls",
            "expected a list",
        ),
        (
            {"role": "assistant", "content": 5},
            "content",
            "expected a string or a list of parts, got int",
        ),
        (
            {"role": "user", "content": [{"type": "audio"}]},
            "content[0].type",
            "expected 'text' or 'image_url'",
        ),
        ({"role": "user", "content": None}, "content", "got null"),
        ({"role": "user", "content": "x", "when": float("nan")}, "when", "not JSON data"),
        ({"role": "user", "content": "x", "meta": {1, 2}}, "meta", "not JSON data"),
        (
            {"role": "user", "content": "x", "metadata": {1: "a", "1": "b"}},
            "metadata",
            "not JSON data (keys must be strings, got the key 1 (of type int))",
        ),
        (
            {"role": "user", "content": "x", ("t",): 1},
            "('t',)",
            "keys must be strings, got the key ('t',) (of type tuple)",
        ),
        (
            {"role": "user", "content": "x", "meta": [{"ok": 1.5}, {"a": float("-inf")}]},
            "meta[1].a",
            "not JSON data (numbers must be finite, got -inf)",
        ),
        (
            {"role": "user", "content": "x", "meta": {"k": dict([("a\ud800", 1), ("a\udfff", 2)])}},
            "meta.k.a\ufffd",
            "two keys are the same once made UTF-8-safe",
        ),
        (
            dict([("role", "user"), ("content", "x"), ("n\ud800", 1), ("n\udfff", 2)]),
            "n\ufffd",
            "two keys are the same once made UTF-8-safe",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "http://x/a.png", "detail": NAN}}
                ],
            },
            "content[0].image_url.detail",
            "expected a string such as 'auto', 'low' or 'high', got float",
        ),
        (
            {"role": "function", "content": "x"},
            "role",
            "expected 'system', 'user', 'assistant' or 'tool'",
        ),
        (
            {"role": "assistant", "content": None, "reasoning_content": 3},
            "reasoning_content",
            "expected a string",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [tc("c1")]},
            "tool_calls[0].id",
            "already used",
        ),
    ],
)
def test_malformed_messages_name_the_field_and_change_nothing(
    session: Session, message: dict[str, Any], field: str, problem: str
) -> None:
    session.record_openai(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [tc("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
        ],
    )
    assert session.path is not None
    before = (session.path.read_bytes(), len(session.events), session.surface)
    with pytest.raises(FormatError) as info:
        session.record_openai(message)
    assert info.value.field == field
    assert problem in str(info.value)
    assert (session.path.read_bytes(), len(session.events), session.surface) == before


def test_kept_fields_read_back_from_the_log_as_they_were_recorded(
    session: Session, tmp_path: Path
) -> None:
    message = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png", "detail": "low"}}],
        "metadata": {"1": "b", "nested": [{"k": 1.5, "n": None, "t": True}, "s", 7]},
        "name": "ann",
    }
    session.record_openai(message)
    live = to_openai(session)
    session.close()
    reopened = Session.open(tmp_path / "s.jsonl")
    assert to_openai(reopened) == live == [message]
    reopened.close()


def test_a_bad_message_in_a_list_appends_none_of_the_list(session: Session) -> None:
    assert session.path is not None
    before = session.path.read_bytes()
    with pytest.raises(FormatError) as info:
        session.record_openai(
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "tool", "tool_call_id": "ghost", "content": "c"},
            ],
        )
    assert info.value.field == "messages[2].tool_call_id"
    assert session.path.read_bytes() == before and len(session.events) == 1


def test_non_message_input_is_rejected(session: Session) -> None:
    with pytest.raises(FormatError, match="expected an OpenAI message object or a list of them"):
        session.record_openai("hello")  # type: ignore[arg-type]
    with pytest.raises(FormatError, match=r"messages\[1\]: expected an object, got int"):
        session.record_openai([{"role": "user", "content": "a"}, 3])  # type: ignore[list-item]


class KnownCalls:
    """The tool calls a session holds, without a session (the translator reads only these)."""

    def __init__(self, names: dict[str, str] | None = None, pending: Sequence[str] = ()) -> None:
        self.names = names or {}
        self.pending = list(pending)

    def pending_tool_calls(self) -> list[str]:
        return list(self.pending)

    def interrupted_tool_calls(self) -> list[str]:
        return []

    def tool_call_seq(self, tool_call_id: str) -> int | None:
        return 7 if tool_call_id in self.names else None

    def tool_call_name(self, tool_call_id: str) -> str | None:
        return self.names.get(tool_call_id)


def test_translation_needs_only_the_known_tool_calls_and_writes_no_markers() -> None:
    calls = KnownCalls(names={"c1": "read"}, pending=["c1"])
    specs = to_event_specs(
        calls,
        [
            {"role": "tool", "tool_call_id": "c1", "content": "RETRY_BUDGET = 3"},
            {"role": "assistant", "content": "The budget is 3."},
        ],
    )
    assert [(s.type, s.surface_op) for s in specs] == [
        ("tool/result", "append"),
        ("assistant/message", "append"),
    ]
    assert specs[0].data["message"]["toolName"] == "read"  # looked up, not given
    with pytest.raises(FormatError, match="already used"):
        to_event_specs(calls, {"role": "assistant", "content": None, "tool_calls": [tc("c1")]})
    with pytest.raises(FormatError, match="awaiting: none"):
        to_event_specs(KnownCalls(), {"role": "tool", "tool_call_id": "c1", "content": "x"})


def test_record_returns_the_inferred_markers_with_the_messages(session: Session) -> None:
    events = session.record_openai(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    assert [(e.type, e.data.get("inferred")) for e in events] == [
        ("turn/start", True),
        ("user/message", None),
        ("step/start", True),
        ("assistant/message", None),
        ("step/end", True),
        ("turn/end", True),
    ]
    assert [e.seq for e in events] == list(range(1, 7))


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_sessions_round_trip_through_disk(path: Path, tmp_path: Path) -> None:
    data = load_corpus(path)
    messages = data["messages"]
    target = tmp_path / "s.jsonl"
    with Session.create(target, tools=data["tools"], durability="flush") as s:
        s.record_openai(messages)
    with Session.open(target, read_only=True) as s:
        derived = to_openai(s)
        assert s.tools == data["tools"]
    expected = copy.deepcopy(messages)
    index_dropped = 0
    for m in expected:
        for call in m.get("tool_calls") or []:
            if "index" in call:  # normalisation 1: streaming index dropped
                del call["index"]
                index_dropped += 1
    assert derived == expected
    assert index_dropped == sum("index" in c for m in messages for c in (m.get("tool_calls") or []))
