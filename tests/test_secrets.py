"""API keys stay secret: out of tracebacks' local variables, and out of the log (SPEC §12)."""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._client import ChatClient
from dashr_ext._redaction import API_KEY_ENV, REDACTED, configured_keys, scrub_keys
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext.agent import Agent
from dashr_ext.errors import EndpointError, SummarizerEndpointError
from dashr_ext.testing import (
    Reply,
    ScriptedServer,
    answer,
    call_run_cell,
    chat_completion,
)

# Module constants, never locals: the frames walked below must not hold them themselves.
MARKER = "sk-marker-7f3a9c2e5b1d4086-SECRET"
ENV_MARKER = "sk-env-4be1c07d9a2f5638-SECRET"
AGENT_MARKER = "sk-agent-91d3e6f0b82c4a57-SECRET"
SUMMARIZER_MARKER = "sk-summ-0c5a7e9b3d1f8264-SECRET"
CLIENT_MARKER = "sk-client-5d2e8a0f6c3b9147-SECRET"  # only one short-lived client holds it
MARKERS = (MARKER, ENV_MARKER, AGENT_MARKER, SUMMARIZER_MARKER)
URL = "https://api.example.test/v1"


@pytest.fixture(autouse=True)
def _no_api_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in API_KEY_ENV:
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- tracebacks


def _timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


ERROR_KINDS: dict[str, tuple[Callable[[httpx.Request], httpx.Response], tuple[Any, ...]]] = {
    # kind: (the endpoint's answer, (status_code, attempts, context_length) of the error)
    "http-401": (
        lambda r: httpx.Response(401, json={"error": {"message": f"bad key {MARKER}"}}),
        (401, 1, False),
    ),
    "http-500-exhausted": (
        lambda r: httpx.Response(500, text=f"upstream failed for {MARKER}"),
        (500, 3, False),
    ),
    "timeout": (_timeout, (None, 3, False)),
    "malformed-json": (
        lambda r: httpx.Response(200, text=f"<html>proxy page for {MARKER}</html>"),
        (200, 1, False),
    ),
    "context-length": (
        lambda r: httpx.Response(
            400,
            json={"error": {"message": f"maximum context length is 8192 tokens ({MARKER})"}},
        ),
        (400, 1, True),
    ),
}


def chained(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception chained to it (causes and contexts, transitively)."""
    todo: list[BaseException | None] = [exc]
    seen: list[BaseException] = []
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        yield e
        todo += [e.__cause__, e.__context__]


def _shown(value: object) -> str:
    try:
        return f"{value!r}\n{value!s}"
    except Exception as exc:  # a broken repr shows nothing
        return type(exc).__name__


def leaks(exc: BaseException) -> list[str]:
    """Where a marker key shows: messages of ``exc`` and its chain, and the repr/str of
    every local variable of every frame of their tracebacks."""
    found: list[str] = []
    for e in chained(exc):
        if any(m in _shown(e) for m in MARKERS):
            found.append(f"message of {type(e).__name__}")
        tb = e.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            for name, value in frame.f_locals.items():
                if any(m in _shown(value) for m in MARKERS):
                    found.append(f"{frame.f_code.co_name}() local {name!r}")
            tb = tb.tb_next
    return found


def failing_client(kind: str, seen: list[httpx.Request]) -> ChatClient:
    respond = ERROR_KINDS[kind][0]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return respond(request)

    async def ahandler(request: httpx.Request) -> httpx.Response:
        return handler(request)

    return ChatClient(
        URL,
        "m",
        MARKER,
        max_retries=2,
        transport=httpx.MockTransport(handler),
        async_transport=httpx.MockTransport(ahandler),
        sleep=lambda seconds: None,
    )


def provoke(call: Callable[[], object]) -> tuple[BaseException, list[str]]:
    """The exception ``call`` raises, and the text of the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
        except Exception as exc:
            return exc, [str(w.message) for w in caught]
    raise AssertionError("no exception was raised")


@pytest.mark.parametrize("kind", sorted(ERROR_KINDS))
def test_no_frame_of_an_endpoint_error_holds_the_key(kind: str) -> None:
    seen: list[httpx.Request] = []
    client = failing_client(kind, seen)
    exc, warned = provoke(lambda: client.complete({"messages": []}))

    assert isinstance(exc, EndpointError)
    assert (exc.status_code, exc.attempts, exc.context_length) == ERROR_KINDS[kind][1]
    assert leaks(exc) == []
    assert [w for w in warned if MARKER in w] == []
    # The key still goes where it belongs: the Authorization header of every attempt.
    assert [r.headers["authorization"] for r in seen] == [f"Bearer {MARKER}"] * exc.attempts


@pytest.mark.parametrize("kind", sorted(ERROR_KINDS))
def test_no_frame_of_an_async_endpoint_error_holds_the_key(kind: str) -> None:
    client = failing_client(kind, [])
    exc, warned = provoke(lambda: asyncio.run(client.acomplete({"messages": []})))

    assert isinstance(exc, EndpointError)
    assert (exc.status_code, exc.attempts, exc.context_length) == ERROR_KINDS[kind][1]
    assert leaks(exc) == []
    assert [w for w in warned if MARKER in w] == []


@pytest.mark.parametrize("kind", sorted(ERROR_KINDS))
def test_no_frame_of_a_summarizer_endpoint_error_or_its_chain_holds_the_key(kind: str) -> None:
    summarizer = LLMSummarizer(
        base_url=URL,
        model="m",
        api_key=MARKER,
        max_retries=2,
        transport=httpx.MockTransport(ERROR_KINDS[kind][0]),
        sleep=lambda seconds: None,
    )
    request = SummaryRequest(
        span=[],
        previous_summary=None,
        max_summary_tokens=200,
        prefix_messages=[{"role": "user", "content": "fix the bug"}],
        count_tokens=len,
    )
    exc, warned = provoke(lambda: summarizer.summarize(request))

    assert isinstance(exc, SummarizerEndpointError)
    assert exc.__context__ is not None  # the client's error is chained: walked too
    assert leaks(exc) == []
    assert [w for w in warned if MARKER in w] == []


def test_no_frame_of_the_agents_endpoint_error_holds_the_key(tmp_path: Path) -> None:
    reply = Reply(401, {"error": {"message": f"Incorrect API key provided: {AGENT_MARKER}"}})
    with ScriptedServer(default=reply) as server:
        dashr = Dashr.create(tmp_path / "s.jsonl")
        agent = Agent(dashr, base_url=server.base_url, model="m", api_key=AGENT_MARKER)
        exc, warned = provoke(lambda: agent.run_turn("hello"))
        sent = [r.headers.get("authorization") for r in server.requests]

    assert isinstance(exc, EndpointError) and exc.status_code == 401
    assert "Incorrect API key provided: ***" in str(exc)
    assert leaks(exc) == []
    assert [w for w in warned if AGENT_MARKER in w] == []
    assert sent == [f"Bearer {AGENT_MARKER}"]


def test_no_frame_of_a_failed_compaction_holds_the_key(tmp_path: Path) -> None:
    reply = Reply(500, {"error": {"message": f"upstream rejected {SUMMARIZER_MARKER}"}})
    with ScriptedServer(default=reply) as server:
        summarizer = LLMSummarizer(
            base_url=server.base_url, model="m", api_key=SUMMARIZER_MARKER, max_retries=0
        )
        config = CompactionConfig(recency_window_tokens=3000, retain_tokens=500)
        dashr = Dashr.create(tmp_path / "s.jsonl", config=config, summarizer=summarizer)
        for _ in range(2):
            dashr.record_openai({"role": "user", "content": "a long request " * 200})
            dashr.record_openai({"role": "assistant", "content": "a long answer " * 200})
        exc, warned = provoke(dashr.compact)

    assert isinstance(exc, SummarizerEndpointError) and exc.status_code == 500
    assert str(exc).endswith("HTTP 500: upstream rejected ***")
    assert leaks(exc) == []
    assert [w for w in warned if SUMMARIZER_MARKER in w] == []


# --------------------------------------------------------------------------- the log


def test_scrub_keys_replaces_each_configured_key_and_leaves_short_values_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_MARKER)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "abc1234")  # 7 characters: not scrubbed
    client = ChatClient(URL, "m", CLIENT_MARKER)
    data = {
        "text": f"env {ENV_MARKER}, client {CLIENT_MARKER}, short abc1234",
        "nested": [{"arguments": json.dumps({"code": f"print('{CLIENT_MARKER}')"})}, 3, None],
        "pair": ("x", ENV_MARKER),
        CLIENT_MARKER: "dict keys are left alone",
    }
    untouched = {"text": "nothing secret here", "list": ["a", 1]}

    scrubbed = scrub_keys(data)

    assert scrubbed == {
        "text": f"env {REDACTED}, client {REDACTED}, short abc1234",
        "nested": [{"arguments": json.dumps({"code": f"print('{REDACTED}')"})}, 3, None],
        "pair": ("x", REDACTED),
        CLIENT_MARKER: "dict keys are left alone",
    }
    assert data["text"].startswith(f"env {ENV_MARKER}")  # the input is not modified
    assert scrub_keys(untouched) is untouched
    assert {ENV_MARKER, CLIENT_MARKER} <= set(configured_keys())
    assert "abc1234" not in configured_keys()
    # Read at scrub time: an unset variable and a client that is gone are no longer scrubbed.
    del client
    gc.collect()
    monkeypatch.delenv("OPENAI_API_KEY")
    assert scrub_keys(f"{ENV_MARKER} {CLIENT_MARKER}") == f"{ENV_MARKER} {CLIENT_MARKER}"


def test_every_recorded_string_is_scrubbed_of_configured_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DASHR_API_KEY", ENV_MARKER)
    summarizer = LLMSummarizer(base_url=URL, model="m", api_key=SUMMARIZER_MARKER)
    path = tmp_path / "s.jsonl"
    dashr = Dashr.create(path, summarizer=summarizer)
    dashr.record_openai({"role": "user", "content": f"my key is {ENV_MARKER}"})
    dashr.record_openai(
        {
            "role": "assistant",
            "content": f"using {SUMMARIZER_MARKER}",
            "reasoning_content": f"the key {ENV_MARKER} is set",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": f"echo {ENV_MARKER}"}),
                    },
                }
            ],
        }
    )
    dashr.record_openai({"role": "tool", "tool_call_id": "call_0", "content": ENV_MARKER})
    dashr.session.append_log("x-test/note", {"seen": [f"key={SUMMARIZER_MARKER}"]})

    text = path.read_text(encoding="utf-8")
    assert [m for m in MARKERS if m in text] == []
    events = [e.to_json() for e in dashr.session.events]
    assert [m for m in MARKERS if m in json.dumps(events)] == []
    user, assistant, tool = dashr.request_messages()
    assert user["content"] == f"my key is {REDACTED}"
    assert assistant["content"] == f"using {REDACTED}"
    assert assistant["reasoning_content"] == f"the key {REDACTED} is set"
    arguments = assistant["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"command": f"echo {REDACTED}"}
    assert tool["content"] == REDACTED
    assert events[-1]["data"] == {"seen": [f"key={REDACTED}"]}


def test_a_cell_that_prints_the_key_records_archives_and_sends_it_redacted(
    tmp_path: Path, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_MARKER)
    code = (
        "import os\n"
        "print('env', os.environ['OPENAI_API_KEY'])\n"
        "print('agent', agent_key)\n"
        "print('summarizer', summarizer_key)\n"
        "for i in range(40):\n"
        "    print(f'row {i:02d}', 'data ' * 10)"
    )
    shell.user_ns.update(agent_key=AGENT_MARKER, summarizer_key=SUMMARIZER_MARKER)
    path = tmp_path / "s.jsonl"
    with ScriptedServer(summarizer=chat_completion("## Summary\n- printed the keys")) as server:
        server.script(call_run_cell(code), answer("Printed."), answer("Still here."))
        summarizer = LLMSummarizer(base_url=server.base_url, model="m", api_key=SUMMARIZER_MARKER)
        dashr = Dashr.create(path, summarizer=summarizer)
        agent = Agent(dashr, base_url=server.base_url, model="m", api_key=AGENT_MARKER, shell=shell)
        assert agent.run_turn("Show me the keys.") == "Printed."
        result = next(e for e in dashr.session.events if e.type == "tool/result")
        assert result.message.text.startswith(
            f"env {REDACTED}\nagent {REDACTED}\nsummarizer {REDACTED}\nrow 00 data "
        )
        surface = dashr.session.surface  # the cell's result goes to the archive:
        assert dashr.compact(start_seq=surface[0], end_seq=result.seq) is not None
        assert agent.run_turn("Anything else?") == "Still here."
        bodies = [r.body.decode("utf-8") for r in server.requests]
        purposes = [r.purpose for r in server.requests]
        messages = dashr.request_messages()
        archive = json.dumps(dashr.archive)
        dashr.close()

    assert purposes == ["agent", "agent", "compaction", "agent"]
    assert REDACTED in bodies[1] and REDACTED in archive
    shown = {
        "log": path.read_text(encoding="utf-8"),
        "archive": archive,
        "request_messages": json.dumps(messages),
        **{f"request {i}": body for i, body in enumerate(bodies)},
    }
    assert {where: [m for m in MARKERS if m in text] for where, text in shown.items()} == {
        where: [] for where in shown
    }
