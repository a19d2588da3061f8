"""Hardening of the bridge and the recall tools: lone surrogates in a model's JSON arguments,
huge lists of non-objects, keys in cut schema messages, failed passes over the bridge, and
clients that hang up on the scripted server."""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps
from inprocess import kernel_session

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._bridge import handle
from dashr_ext._bridge.protocol import MAX_LISTED_ITEMS, MAX_MESSAGE_CHARS
from dashr_ext.agent import Agent
from dashr_ext.errors import RecallError, SummarizerError
from dashr_ext.testing import Reply, ScriptedServer, answer, chat_completion

SURROGATE_ARGUMENTS = '{"query": "\\ud800"}'
"""JSON text as a model sends it: the escape is six ASCII characters, the value a surrogate."""

DOCS = Path(__file__).resolve().parents[1] / "docs" / "bridge.md"


@pytest.fixture
def d(tmp_path: Path) -> Dashr:
    """A session with a checkpoint, so the recall tools search condensed history too."""
    config = CompactionConfig(recency_window_tokens=4000, retain_tokens=600)
    controller = Dashr.create(tmp_path / "s.jsonl", config=config)
    record_steps(controller, 16, 400, user="Fix the retry tests")
    controller.record_openai({"role": "assistant", "content": "Done with the first pass."})
    assert controller.compact() is not None
    return controller


def log_bytes(d: Dashr) -> bytes:
    assert d.session.path is not None
    return d.session.path.read_bytes()


def request(op: str, **args: Any) -> dict[str, Any]:
    return {"version": 1, "id": f"r-{op}", "op": op, "args": args}


# --------------------------------------------------------------------------- lone surrogates


def test_a_lone_surrogate_escape_in_json_arguments_is_a_recall_error(d: Dashr) -> None:
    before = log_bytes(d)
    for arguments in (SURROGATE_ARGUMENTS, {"query": "\ud800"}):
        with pytest.raises(
            RecallError, match=r"argument 'query' holds a lone surrogate \(\\ud800\)"
        ):
            d.call_tool("history_search", arguments)
    with pytest.raises(RecallError, match=r"history_read: argument 'cursor' .*\\udc80"):
        d.call_tool("history_read", '{"cursor": "c1@0:\\udc80"}')
    with pytest.raises(RecallError, match=r"an argument name holds a lone surrogate"):
        d.call_tool("history_search", '{"query": "x", "\\udfff": 1}')
    assert log_bytes(d) == before
    # A surrogate pair is one valid character, not an error.
    assert d.call_tool("history_search", '{"query": "\\ud83d\\ude00"}').startswith("history_search")


def test_a_lone_surrogate_in_call_tool_arguments_is_a_recall_error_reply(d: Dashr) -> None:
    before = log_bytes(d)
    reply = handle(d, request("call_tool", name="history_search", arguments=SURROGATE_ARGUMENTS))
    assert reply["ok"] is False
    assert reply["error"]["type"] == "RecallError"
    assert "argument 'query' holds a lone surrogate (\\ud800)" in reply["error"]["message"]
    json.dumps(reply, ensure_ascii=False).encode("utf-8")  # sendable as it is
    # Through KernelSession (the wire packed as jupyter_client packs it): the same class,
    # for the JSON text and for a mapping holding the surrogate itself.
    ks = kernel_session(d)
    for arguments in (SURROGATE_ARGUMENTS, {"query": "\ud800"}):
        with pytest.raises(RecallError, match=r"lone surrogate \(\\ud800\)"):
            ks.call_tool("history_search", arguments)
    assert log_bytes(d) == before
    assert ks.call_tool("history_search", {"query": "retry"}).startswith("history_search")


@pytest.mark.parametrize("over_the_bridge", [False, True])
def test_a_lone_surrogate_in_a_recall_call_is_the_tool_result_and_the_turn_goes_on(
    d: Dashr, server: ScriptedServer, over_the_bridge: bool
) -> None:
    call = {"id": "s1", "name": "history_search", "arguments": SURROGATE_ARGUMENTS}
    server.script(chat_completion(None, tool_calls=[call]), answer("Searched."))
    host: Any = kernel_session(d) if over_the_bridge else d
    agent = Agent(host, base_url=server.base_url, model="scripted-model", api_key=None)
    assert agent.run_turn("Find it.") == "Searched."
    [result] = [
        e.message
        for e in d.session.events
        if e.type == "tool/result" and e.message.tool_call_id == "s1"
    ]
    assert result.is_error is True
    assert result.text.startswith(
        "error: history_search: argument 'query' holds a lone surrogate (\\ud800)"
    )
    assert d.session.turns[-1].reason == "completed"
    # The model was told: the error is the tool message of the next request.
    assert server.requests[-1].messages[-1]["content"] == result.text


# --------------------------------------------------------------------------- huge bad lists


def test_a_record_of_many_non_objects_is_refused_naming_only_the_first_ones(d: Dashr) -> None:
    before = log_bytes(d)
    reply = handle(d, request("record", messages=[1] * 200_000))
    assert reply["error"]["type"] == "ProtocolError"
    message = reply["error"]["message"]
    listed = re.findall(r"\[\d+\] a number", message)
    assert listed == [f"[{i}] a number" for i in range(MAX_LISTED_ITEMS)]
    assert message.startswith("args.messages: expected a list of JSON objects; 200000 of its")
    assert message.endswith(", and 199990 more")
    assert len(message) < 500
    # Objects among them are skipped; each other item says what it is.
    mixed: list[Any] = [{"role": "user", "content": "hi"}, "x", None, [1], True, 2.5]
    reply = handle(d, request("record", messages=mixed))
    assert reply["error"]["message"] == (
        "args.messages: expected a list of JSON objects; 5 of its 6 items are not: "
        "[1] a string, [2] null, [3] an array, [4] a boolean, [5] a number"
    )
    reply = handle(d, request("extra_tools", tools=["run_cell"] * 50))
    assert reply["error"]["message"].endswith("[9] a string, and 40 more")
    assert log_bytes(d) == before


# --------------------------------------------------------------------------- keys in messages


def test_a_key_straddling_the_cut_of_a_schema_message_is_scrubbed_whole(
    d: Dashr, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdefghijKLMNOPQRSTUV"
    assert len(key) == 40
    monkeypatch.setenv("DASHR_API_KEY", key)
    # The schema's message is "'<value>' is not of type 'integer'": the key sits at
    # characters 381-420 of it, across the cut at 400.
    value = "x" * 380 + key + "y" * 100
    reply = handle(d, request("read", seq=value))
    assert reply["error"]["type"] == "ProtocolError"
    message = reply["error"]["message"]
    assert message.startswith("args.seq: 'xxx") and "[redacted]" in message
    pieces = {key[i : i + 8] for i in range(len(key) - 7)}
    assert not [p for p in pieces if p in message]
    assert len(message) <= len("args.seq: ") + MAX_MESSAGE_CHARS


# --------------------------------------------------------------------------- a failed pass


def test_a_failed_manual_pass_over_the_bridge_is_recorded_as_the_spec_says(d: Dashr) -> None:
    d.record_openai({"role": "user", "content": "Go on."})
    record_steps(d, 12, 400, first=100)
    d.record_openai({"role": "assistant", "content": "Second batch read."})
    d.summarizer = ScriptedSummarizer(fail=SummarizerError("the model is down"))
    surface, since = list(d.session.surface), len(d.session)
    reply = handle(d, request("compact"))
    assert reply["error"] == {"type": "SummarizerError", "message": "the model is down"}
    new = d.session.events[since:]
    assert [e.type for e in new] == ["compaction/start", "compaction/end"]
    start, end = (dict(e.data) for e in new)
    assert start["trigger"] == "manual"
    assert end == {"compactionId": start["compactionId"], "error": "the model is down"}
    assert list(d.session.surface) == surface
    compactions = handle(d, request("compactions", since=since))["result"]
    assert (compactions["checkpoints"], compactions["errors"]) == ([], ["the model is down"])
    # Refused before a pass starts: nothing is recorded.
    before = log_bytes(d)
    assert handle(d, request("compact", startSeq=1, endSeq=2))["error"]["type"] == "SurfaceError"
    assert handle(d, request("compact", startSeq=1))["error"]["type"] == "CompactionError"
    assert log_bytes(d) == before


def test_the_bridge_doc_says_which_failed_requests_change_the_log() -> None:
    text = " ".join(DOCS.read_text("utf-8").split())
    promise = text[text.index("A failed request never changes the log") :][:900]
    for needle in ("compaction/start", "compaction/end", "error", "SPEC §4.2", "changes nothing"):
        assert needle in promise, needle


# --------------------------------------------------------------------------- hang-ups


def _new_handlers_done(before: set[threading.Thread]) -> None:
    """Wait for the server's request threads started since ``before`` to finish."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        busy = [
            t
            for t in threading.enumerate()
            if t not in before and "process_request" in t.name and t.is_alive()
        ]
        if not busy:
            return
        busy[0].join(timeout=0.1)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a client that is killed does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_that_hangs_up_leaves_no_traceback_but_other_errors_still_print(
    capfd: pytest.CaptureFixture[str],
) -> None:
    def broken(request: Any) -> Reply:
        raise RuntimeError("scripted responder failed")

    before = set(threading.enumerate())
    with ScriptedServer(default=Reply(body=b"x" * (8 << 20))) as server:
        address = (server.url.split("//")[1].split(":")[0], int(server.url.rsplit(":", 1)[1]))
        # Mid-response: the 8 MB body is being written when the client resets.
        sock = socket.create_connection(address)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(100)
        _reset(sock)
        # Mid-request: in the body the headers announced, then in the request line.
        for partial in (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
            b"GET / HT",
        ):
            sock = socket.create_connection(address)
            sock.sendall(partial)
            time.sleep(0.2)  # let the server start reading it
            _reset(sock)
        _new_handlers_done(before)
        assert "Traceback" not in capfd.readouterr().err
        # Anything else still prints its traceback.
        server.default = broken
        with socket.create_connection(address) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.recv(100)
        _new_handlers_done(before)
    err = capfd.readouterr().err
    assert "Traceback" in err and "RuntimeError: scripted responder failed" in err
    assert "ConnectionResetError" not in err and "BrokenPipeError" not in err
