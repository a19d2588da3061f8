"""Text and JSON from outside: made valid UTF-8 where they enter, nesting bounded when written.

SPEC §12: a lone surrogate in a cell's output or a model's reply must not end the agent's turn,
and everything the library writes must read back, also from deep in a caller's stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from corpus_events import assistant, tool, user

from dashr_ext import Dashr
from dashr_ext._events import EventSpec
from dashr_ext._jsontext import (
    MAX_JSON_DEPTH,
    json_depth,
    json_text_too_deep,
    loads_json,
    utf8_json,
    utf8_text,
)
from dashr_ext._recall.tools import tool_arguments
from dashr_ext._session import Session
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext.agent import Agent
from dashr_ext.errors import CorruptLogError, EventError, FormatError, RecallError
from dashr_ext.testing import Reply, ScriptedServer, answer, call_run_cell, chat_completion


@pytest.fixture
def dashr(tmp_path: Path, clock: Callable[[], int]) -> Iterator[Dashr]:
    d = Dashr.create(tmp_path / "bad-input.jsonl", session_id="bad-input", clock=clock)
    yield d
    d.close()


def nested(levels: int, leaf: Any = "leaf") -> Any:
    """``leaf`` inside ``levels`` lists: ``nested(2)`` is ``[["leaf"]]``."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def at_stack_depth(frames: int, call: Callable[[], Any]) -> Any:
    """``call()`` from ``frames`` frames deep (counting every frame of this thread's stack)."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    if depth < frames:
        return at_stack_depth(frames, call)
    return call()


def raw_reply(json_text: str) -> Reply:
    """A 200 chat-completions response with exactly this JSON text as its body."""
    return Reply(200, json_text, headers={"Content-Type": "application/json"})


# --------------------------------------------------------------------------- UTF-8


def test_utf8_text_joins_surrogate_pairs_and_replaces_lone_surrogates() -> None:
    assert utf8_text("caf\udce9.csv") == "caf\ufffd.csv"
    assert utf8_text("\ud800 and \udfff\ud800") == "\ufffd and \ufffd\ufffd"
    assert utf8_text("smile \ud83d\ude00") == "smile \U0001f600"
    assert utf8_text("high at the end \ud83d") == "high at the end \ufffd"
    untouched = "naïve ✓ \U0001f600"
    assert utf8_text(untouched) is untouched


def test_utf8_json_cleans_keys_and_values_at_any_depth_and_returns_clean_input_itself() -> None:
    clean = {"a": [1, "b", {"c": None}]}
    assert utf8_json(clean) is clean
    dirty = {"k\udce9": ("x\ud800", {"y": ["\udce9"]}), "n": 1.5}
    assert utf8_json(dirty) == {"k\ufffd": ["x\ufffd", {"y": ["\ufffd"]}], "n": 1.5}
    deep = nested(5000, "\udce9")
    cleaned = utf8_json(deep)  # no RecursionError
    for _ in range(5000):
        cleaned = cleaned[0]
    assert cleaned == "\ufffd"


def test_a_cell_printing_an_undecodable_file_name_is_recorded_and_the_turn_completes(
    server: ScriptedServer, dashr: Dashr, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / os.fsdecode(b"caf\xe9.csv")).touch()  # a Latin-1 file name
    (data / "plain.csv").touch()
    code = f"import os\nfor name in sorted(os.listdir({str(data)!r})):\n    print(name)"
    server.script(call_run_cell(code), answer("Two files."))
    agent = Agent(dashr, base_url=server.base_url, model="m", api_key=None, namespace={})

    reply = agent.run_turn("List the data files.")

    assert (reply, reply.reason) == ("Two files.", "completed")
    [result] = [e.message for e in dashr.session.events if e.type == "tool/result"]
    assert (result.text, result.is_error) == ("caf\ufffd.csv\nplain.csv\n", False)
    assert dashr.session.path is not None
    dashr.session.path.read_bytes().decode("utf-8")  # the whole log is valid UTF-8
    with Dashr.open(dashr.session.path, read_only=True) as reopened:
        texts = [e.message.text for e in reopened.session.events if e.type == "tool/result"]
    assert texts == ["caf\ufffd.csv\nplain.csv\n"]


def test_a_model_reply_with_an_escaped_lone_surrogate_is_recorded_and_the_turn_completes(
    server: ScriptedServer, dashr: Dashr
) -> None:
    call = {
        "id": "call_\udce9",  # json.dumps writes it as the escape "\\udce9"
        "type": "function",
        "function": {"name": "run_cell", "arguments": '{"code": "print(6 * 7)"}'},
    }
    first = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    final = '{"choices": [{"message": {"role": "assistant", "content": "It is 42 \\ud800."}}]}'
    server.script(raw_reply(json.dumps(first)), raw_reply(final))
    agent = Agent(dashr, base_url=server.base_url, model="m", api_key=None, namespace={})

    reply = agent.run_turn("What is six times seven?")

    assert (reply, reply.reason) == ("It is 42 \ufffd.", "completed")
    recorded = [e.message for e in dashr.session.events if e.is_surface]
    assert [m.text for m in recorded] == [
        "What is six times seven?",
        "",
        "42\n",
        "It is 42 \ufffd.",
    ]
    assert recorded[1].tool_calls[0].id == recorded[2].tool_call_id == "call_\ufffd"
    assert dashr.session.path is not None
    dashr.session.path.read_bytes().decode("utf-8")


def test_the_agent_records_a_refusal_and_refusal_parts_of_a_reply_as_sent(
    server: ScriptedServer, dashr: Dashr
) -> None:
    parts = [
        {"type": "text", "text": "Here is the chart:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}},
        {"type": "refusal", "refusal": "I can't add the watermark."},
    ]
    refused = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    server.script(
        raw_reply(json.dumps({"choices": [{"message": {"role": "assistant", "content": parts}}]})),
        raw_reply(json.dumps({"choices": [{"message": refused}]})),
    )
    agent = Agent(dashr, base_url=server.base_url, model="m", api_key=None, namespace={})

    assert agent.run_turn("Chart it with a watermark.").reason == "completed"
    assert agent.run_turn("Then remove the copyright notice.").reason == "completed"

    replies = [m for m in dashr.request_messages() if m["role"] == "assistant"]
    assert replies == [{"role": "assistant", "content": parts}, refused]


def test_an_llm_summary_with_a_lone_surrogate_is_cleaned(server: ScriptedServer) -> None:
    server.script(raw_reply('{"choices": [{"message": {"content": "Fixed caf\\udce9.py."}}]}'))
    summarizer = LLMSummarizer(base_url=server.base_url, model="m", api_key=None)
    span = [
        user(1, "Fix the failing retry tests in tests/test_retry.py. " * 20),
        assistant(2, "Running them.", [("call_1", "bash", {"command": "pytest -q"})]),
        tool(3, "call_1", "FAILED tests/test_retry.py::test_budget\n" * 20),
    ]
    request = SummaryRequest(
        span=span,
        previous_summary=None,
        max_summary_tokens=512,
        prefix_messages=[],
        count_tokens=lambda text: len(text.split()),
    )
    with summarizer:
        result = summarizer.summarize(request)
    assert result.text == "Fixed caf\ufffd.py."
    result.text.encode("utf-8")


# --------------------------------------------------------------------------- depth


def test_json_depth_and_text_depth_are_measured_without_recursion() -> None:
    assert json_depth("x") == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4
    assert json_depth(nested(100_000), limit=10) == 11  # stops counting past the limit
    assert json_text_too_deep("[" * 100_000, MAX_JSON_DEPTH)
    assert not json_text_too_deep(json.dumps(nested(MAX_JSON_DEPTH)), MAX_JSON_DEPTH)
    assert json_text_too_deep(json.dumps(nested(MAX_JSON_DEPTH + 1)), MAX_JSON_DEPTH)
    brackets_in_strings = json.dumps({"code": "[" * 500 + '\\"' + "{" * 500})
    assert not json_text_too_deep(brackets_in_strings, MAX_JSON_DEPTH)
    assert loads_json(brackets_in_strings) == json.loads(brackets_in_strings)


def test_event_data_nested_past_the_bound_is_refused_and_the_log_is_unchanged(
    dashr: Dashr,
) -> None:
    session = dashr.session
    assert session.path is not None
    before = (session.path.read_bytes(), len(session))
    # The line is the event object, then data, then the value: 2 levels around it.
    with pytest.raises(EventError, match=f"nested more than {MAX_JSON_DEPTH - 1} levels deep"):
        session.append_log("x-acme/trace", {"value": nested(MAX_JSON_DEPTH - 1)})
    with pytest.raises(EventError, match="nested more than"):
        session.append_log("x-acme/trace", {"value": nested(1000)})  # the reported case
    with pytest.raises(FormatError) as info:
        dashr.record_openai({"role": "user", "content": "hi", "meta": nested(1000)})
    assert info.value.field == "meta"
    with pytest.raises(EventError, match=r"content\[0\]\.arguments: nested more than 64"):
        session.append(
            [
                EventSpec(
                    "assistant/message",
                    {
                        "message": {
                            "role": "assistant",
                            "source": {"kind": "model"},
                            "content": [
                                {
                                    "type": "tool-call",
                                    "id": "c1",
                                    "name": "f",
                                    "arguments": json.dumps(nested(MAX_JSON_DEPTH + 1)),
                                }
                            ],
                        }
                    },
                    "append",
                )
            ]
        )
    assert (session.path.read_bytes(), len(session)) == before


def test_whatever_is_written_reopens_from_900_frames_deep(dashr: Dashr) -> None:
    session = dashr.session
    for levels in (MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, 80, 1000):
        with contextlib.suppress(EventError):  # refused, typed, past the bound
            session.append_log("x-acme/trace", {"value": nested(levels)})
    for levels in (MAX_JSON_DEPTH - 5, MAX_JSON_DEPTH - 4, 80):
        with contextlib.suppress(FormatError):
            dashr.record_openai({"role": "user", "content": f"{levels}", "meta": nested(levels)})
    path = session.path
    assert path is not None
    lines = path.read_text().splitlines()
    assert max(json_depth(json.loads(line), 1000) for line in lines) == MAX_JSON_DEPTH
    assert [e.data["value"] for e in session.events if e.type == "x-acme/trace"] == [
        nested(MAX_JSON_DEPTH - 2)
    ]
    assert sys.getrecursionlimit() == 1000

    reopened = at_stack_depth(900, lambda: Session.open(path, read_only=True))
    assert [e.to_json() for e in reopened.events] == [e.to_json() for e in session.events]
    controller = at_stack_depth(900, lambda: Dashr.open(path, read_only=True))
    [user_message] = [m for m in controller.request_messages() if m["role"] == "user"]
    assert user_message == {"role": "user", "content": "59", "meta": nested(MAX_JSON_DEPTH - 5)}


def test_the_recall_tools_refuse_deep_or_non_finite_arguments_with_a_recall_error() -> None:
    deep = '{"query": ' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(RecallError, match=f"invalid JSON \\(nested more than {MAX_JSON_DEPTH}"):
        at_stack_depth(900, lambda: tool_arguments("history_search", deep))
    with pytest.raises(RecallError, match="NaN is not JSON"):
        tool_arguments("history_search", '{"query": "retry", "limit": NaN}')
    with pytest.raises(RecallError, match="Infinity is not JSON"):
        tool_arguments("history_read", '{"seq": Infinity}')
    assert tool_arguments("history_search", '{"query": "retry", "limit": 3}') == {
        "query": "retry",
        "limit": 3,
    }


def test_the_agent_answers_deep_or_non_finite_arguments_with_an_error_result(
    server: ScriptedServer, dashr: Dashr
) -> None:
    deep = '{"code": ' + "[" * 5000 + "]" * 5000 + "}"
    server.script(
        chat_completion(None, tool_calls=[{"id": "c1", "name": "run_cell", "arguments": deep}]),
        chat_completion(
            None, tool_calls=[{"id": "c2", "name": "run_cell", "arguments": '{"code": NaN}'}]
        ),
        answer("Gave up."),
    )
    agent = Agent(dashr, base_url=server.base_url, model="m", api_key=None, namespace={})

    reply = at_stack_depth(400, lambda: agent.run_turn("Go."))

    assert (reply, reply.reason) == ("Gave up.", "completed")
    results = [e.message for e in dashr.session.events if e.type == "tool/result"]
    assert [(m.tool_call_id, m.is_error) for m in results] == [("c1", True), ("c2", True)]
    assert results[0].text == (
        "error: run_cell: the arguments are not valid JSON "
        f"(nested more than {MAX_JSON_DEPTH} levels deep)"
    )
    assert results[1].text == (
        "error: run_cell: the arguments are not valid JSON (NaN is not JSON; numbers must be "
        "finite)"
    )
    calls = [
        c
        for e in dashr.session.events
        if e.type == "assistant/message"
        for c in e.message.tool_calls
    ]
    assert [json.loads(c.arguments) for c in calls] == [
        {"unparsed_arguments": deep},
        {"unparsed_arguments": '{"code": NaN}'},
    ]


# --------------------------------------------------------------------------- time


def test_an_out_of_range_time_is_refused_on_append_and_named_with_its_line_on_load(
    dashr: Dashr, tmp_path: Path
) -> None:
    session = dashr.session
    assert session.path is not None
    before = session.path.read_bytes()
    with pytest.raises(EventError, match=r"event\.time: expected epoch milliseconds from 0 to"):
        session.append([EventSpec("x-acme/trace", {}, time=10**20)])
    with pytest.raises(EventError, match="got -1"):
        session.append([EventSpec("x-acme/trace", {}, time=-1)])
    assert session.path.read_bytes() == before

    bad = tmp_path / "bad-time.jsonl"
    line = {"seq": len(session), "type": "x-acme/trace", "time": 10**20, "data": {}}
    bad.write_bytes(before + json.dumps(line).encode() + b"\n")
    with pytest.raises(CorruptLogError) as info:
        Dashr.open(bad, read_only=True)
    assert info.value.line == len(session) + 1
    assert "event.time: expected epoch milliseconds from 0 to 253402300799999" in info.value.reason
