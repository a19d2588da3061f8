"""The bridge protocol's pure core, called directly: every operation, its schema, its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._bridge import OPS, handle
from dashr_ext._bridge.protocol import MAX_REQUEST_BYTES, hello, schema
from dashr_ext._bridge.wire import (
    compaction_from_json,
    compaction_json,
    measurement_from_json,
    measurement_json,
)
from dashr_ext._demo import demo_messages
from dashr_ext._magics.bridge import TraitsHost
from dashr_ext.bridge import _remote_error
from dashr_ext.errors import ConfigError, EndpointError, InternalError, PinError, SurfaceError


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": f"#/$defs/{name}"})


def call(target: Any, op: str, **args: Any) -> dict[str, Any]:
    reply = handle(target, {"version": 1, "id": f"r-{op}", "op": op, "args": args})
    validator("reply").validate(reply)
    assert reply["id"] == f"r-{op}"
    return reply


def ok(target: Any, op: str, **args: Any) -> dict[str, Any]:
    reply = call(target, op, **args)
    assert reply["ok"], reply
    validator(f"results/{op}").validate(reply["result"])
    return dict(reply["result"])


@pytest.fixture
def d(tmp_path: Path) -> Dashr:
    config = CompactionConfig(recency_window_tokens=5500, retain_tokens=1500)
    controller = Dashr.create(tmp_path / "s.jsonl", config=config)
    for message in demo_messages():
        if message["role"] == "assistant":
            controller.request_messages()
        controller.record_openai(message)
    return controller


def test_the_schema_is_valid_and_names_every_operation() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    defs = schema()["$defs"]
    assert set(defs["args"]) == set(OPS) == set(defs["results"])
    assert set(defs["request"]["properties"]["op"]["enum"]) == set(OPS)
    validator("hello").validate(hello())


def test_every_read_operation_answers_with_its_schema(d: Dashr) -> None:
    status = ok(d, "status")
    assert status["events"] == len(d.session) and status["checkpoints"] == [
        cp.id for cp in d.checkpoints()
    ]
    first = status["checkpoints"][0]
    assert ok(d, "outline")["text"] == str(d.history_outline())
    assert ok(d, "read", checkpoint=first)["text"] == str(d.history_read(first))
    assert ok(d, "search", query="retry", limit=2)["text"] == str(
        d.history_search("retry", limit=2)
    )
    assert ok(d, "request_tools")["tools"] == d.request_tools()
    assert ok(d, "tool_schemas")["tools"] == d.tool_schemas()
    assert ok(d, "measure")["total"] == d.measure().total
    assert ok(d, "state")["systemPrompt"] == d.session.system_prompt
    assert ok(d, "compactions")["checkpoints"] == status["checkpoints"]
    text = ok(d, "call_tool", name="history_read", arguments={"checkpoint": first})["text"]
    assert text == d.call_tool("history_read", {"checkpoint": first})
    request = ok(d, "request_messages")
    assert request["messages"] == d.session.messages() and request["compacted"] == []


def test_writing_operations_record_what_the_controller_would(d: Dashr) -> None:
    events = len(d.session)
    result = ok(d, "record", messages=[{"role": "user", "content": "next, please"}], echo=True)
    assert result["events"] == len(d.session) > events
    assert [e["seq"] for e in result["recorded"]] == list(range(events, len(d.session)))
    assert ok(d, "turn", action="end", reason="completed")["event"]["type"] == "turn/end"
    usage = ok(d, "report_usage", promptTokens=5000, completionTokens=12)
    assert usage["event"]["data"]["promptTokens"] == 5000
    plan = ok(d, "compact", dryRun=True)["plan"]
    assert plan is not None and plan["shadowedSeqs"] and plan["engine"] == "summary"
    assert len(d.session) == usage["seq"] + 1  # the dry run committed nothing
    done = ok(d, "compact")["result"]
    assert done is not None and done["checkpoint"] == f"c{done['summarySeq']}"
    assert ok(d, "handle_overflow") == {"changed": True}
    assert (
        ok(d, "extra_tools", tools=[{"type": "function", "function": {"name": "run_cell"}}])[
            "tools"
        ]
        == d.extra_tools
    )


def test_progress_is_reported_while_a_pass_runs_and_only_then(d: Dashr) -> None:
    seen: list[tuple[str, str]] = []
    engine = d.engine
    reply = handle(
        d,
        {"version": 1, "id": "p", "op": "compact", "args": {}},
        lambda phase, detail: seen.append((phase, detail)),
    )
    assert reply["ok"] and reply["result"]["result"] is not None
    assert [p for p, _ in seen][-2:] == ["committing", "done"]
    assert engine.progress is None  # set for that request only
    seen.clear()
    handle(d, {"version": 1, "id": "s", "op": "status"}, lambda *a: seen.append(a))
    assert seen == []


def test_malformed_requests_are_protocol_errors(d: Dashr) -> None:
    before = d.session.path.read_bytes()  # type: ignore[union-attr]
    cases: list[tuple[object, str | None, str]] = [
        ("status", None, "must be a JSON object"),
        ({"version": 1, "id": "a", "op": "nope"}, "a", "unknown operation 'nope'"),
        ({"version": 1, "id": 7, "op": "status"}, None, "id: 7 is not of type 'string'"),
        ({"version": True, "id": "b", "op": "status"}, "b", "version: expected one of [1]"),
        ({"version": 1, "id": "c", "op": "read", "args": {"seq": -1}}, "c", "args.seq"),
        ({"version": 1, "id": "d", "op": "status", "args": {"x": 1}}, "d", "accepted: (none)"),
        ({"version": 1, "id": "e", "op": "status", "extra": 1}, "e", "'extra' was unexpected"),
        (
            {"version": 1, "id": "f", "op": "turn", "args": {"action": "begin", "reason": "x"}},
            "f",
            "reason is only for action 'end'",
        ),
        (
            {"version": 1, "id": "g", "op": "compact", "args": {"dryRun": True, "pruneOnly": True}},
            "g",
            "cannot be combined",
        ),
        ({"version": 1, "id": "h", "op": "search", "args": {"query": "\udc80"}}, "h", "\\udc80"),
    ]
    nested: Any = "deep"
    for _ in range(80):
        nested = [nested]
    cases.append(
        (
            {"version": 1, "id": "i", "op": "record", "args": {"messages": nested}},
            "i",
            "levels deep",
        )
    )
    for request, rid, needle in cases:
        reply = handle(d, request)
        assert reply["ok"] is False and reply["id"] == rid, (request, reply)
        assert reply["error"]["type"] == "ProtocolError" and needle in reply["error"]["message"]
        json.dumps(reply, ensure_ascii=False).encode("utf-8")  # sendable as it is
    assert d.session.path.read_bytes() == before  # type: ignore[union-attr]


def test_the_default_size_cap_is_64_mib(d: Dashr) -> None:
    room = MAX_REQUEST_BYTES - 200
    request = {"version": 1, "id": "big", "op": "search", "args": {"query": "x" * room}}
    assert handle(d, request)["ok"]
    request["args"]["query"] += "x" * 400  # type: ignore[index]
    reply = handle(d, request)
    assert reply["error"]["type"] == "ProtocolError"
    assert f"at most {MAX_REQUEST_BYTES} are accepted" in reply["error"]["message"]


def test_operation_errors_keep_their_class_and_anything_else_is_internal(d: Dashr) -> None:
    reply = call(d, "compact", startSeq=1, endSeq=2)
    assert reply["error"]["type"] == "SurfaceError"
    reply = call(d, "configure", settings={"retain_tokens": 99_999})
    assert reply["error"]["type"] == "ConfigError" and reply["error"]["field"] == "retain_tokens"
    assert reply["error"]["message"].startswith("retain_tokens: expected fewer tokens than")

    class Broken:
        @property
        def controller(self) -> Dashr:
            raise RuntimeError("disk on fire")

        def configure(self, settings: Any) -> dict[str, Any]:
            return {}

    reply = call(Broken(), "status")
    assert reply["error"] == {"type": "InternalError", "message": "RuntimeError: disk on fire"}


def test_configure_through_the_extension_is_all_or_nothing(tmp_path: Path) -> None:
    shell = InteractiveShell.instance()
    shell.config.Dashr.session_path = str(tmp_path / "k.jsonl")
    try:
        shell.extension_manager.load_extension("dashr_ext")
        host = TraitsHost(shell.magics_manager.registry["Dashr"])  # type: ignore[arg-type]
        before = host.settings()
        for settings, field in (
            ({"retain_tokens": 2000, "recency_window_tokens": "big"}, "recency_window_tokens"),
            ({"recency_window_tokens": 4000, "retain_tokens": 5000}, "retain_tokens"),
            ({"agent_max_steps": 0}, "agent_max_steps"),
            ({"retain_tokens": 1000, "no_such_option": 1}, "settings.no_such_option"),
        ):
            reply = call(host, "configure", settings=settings)
            assert reply["error"]["type"] == "ConfigError" and reply["error"]["field"] == field
            assert host.settings() == before
        # Two settings that are only valid together are accepted together.
        after = ok(
            host, "configure", settings={"recency_window_tokens": 4000, "retain_tokens": 900}
        )
        assert after["settings"]["retain_tokens"] == 900
        assert host.controller.config.trigger_tokens == 4000
    finally:
        shell.extension_manager.unload_extension("dashr_ext")
        del shell.config.Dashr["session_path"]


def test_results_cross_the_wire_unchanged(d: Dashr) -> None:
    result = d.compact()
    assert result is not None
    assert compaction_from_json(json.loads(json.dumps(compaction_json(result)))) == result
    measured = d.measure()
    back = measurement_from_json(json.loads(json.dumps(measurement_json(measured))))
    assert (back.total, back.counted, back.envelope, back.anchored) == (
        measured.total,
        measured.counted,
        measured.envelope,
        measured.anchored,
    )


def test_an_error_reply_becomes_the_same_error_class_on_the_client() -> None:
    exc = _remote_error({"type": "SurfaceError", "message": "no such seq"})
    assert type(exc) is SurfaceError and str(exc) == "no such seq"
    exc = _remote_error({"type": "ConfigError", "message": "x: bad", "field": "x"})
    assert isinstance(exc, ConfigError) and exc.field == "x"
    exc = _remote_error({"type": "EndpointError", "message": "down"})
    assert isinstance(exc, EndpointError) and exc.context_length is False
    exc = _remote_error({"type": "ValueError", "message": "odd"})
    assert type(exc) is InternalError and str(exc) == "ValueError: odd"


def test_pin_unpin_and_pins_do_what_the_controller_does(d: Dashr) -> None:
    assert ok(d, "pins") == {"pins": []}
    first = ok(d, "pin", text="  Never push to main.")
    pinned = d.pins()[0]
    expected = {"id": pinned.id, "text": "Never push to main.", "seq": pinned.seq}
    assert first == {"pin": expected, "pins": [expected]}
    second = ok(d, "pin", text="Run the tests with -x.")["pin"]
    assert ok(d, "pins")["pins"] == [expected, second]
    assert ok(d, "unpin", id=pinned.id) == {"pin": expected, "pins": [second]}
    assert [p.id for p in d.pins()] == [second["id"]]
    events = len(d.session)
    for op, args, kind, message in (
        ("unpin", {"id": "pin1"}, "PinError", "no current pin 'pin1' to unpin; current pins: "),
        ("pin", {"text": "   "}, "PinError", "pin text: expected a non-empty string"),
        ("pin", {"text": "x " * 9000}, "PinError", "pins would take ~"),
        ("pin", {"text": ""}, "ProtocolError", ""),
        ("pin", {}, "ProtocolError", ""),
        ("unpin", {"id": 3}, "ProtocolError", ""),
        ("pins", {"all": True}, "ProtocolError", ""),
    ):
        reply = call(d, op, **args)
        assert not reply["ok"] and reply["error"]["type"] == kind, (op, args)
        assert reply["error"]["message"].startswith(message)
    assert len(d.session) == events  # a refused request records nothing
    exc = _remote_error({"type": "PinError", "message": "pins would take ~9 tokens"})
    assert type(exc) is PinError and isinstance(exc, ValueError)
