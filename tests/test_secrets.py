"""API keys stay secret: out of tracebacks' local variables, and out of the log (SPEC §12)."""

from __future__ import annotations

import asyncio
import gc
import json
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._cells import truncate_output
from dashr_ext._client import ChatClient
from dashr_ext._redaction import REDACTED, configured_keys, scrub_keys
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext.agent import Agent
from dashr_ext.errors import ConfigError, EndpointError, SummarizerEndpointError
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
RANDOM_KEY = "sk-proj-Q7wLx2NvB9cTzR4mKp8YhJ3sDf6GaU1eVo5"  # random, as real keys are
MARKERS = (MARKER, ENV_MARKER, AGENT_MARKER, SUMMARIZER_MARKER)
URL = "https://api.example.test/v1"


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


INIT_FAILURES: dict[str, tuple[Callable[[], object], str]] = {
    # kind: (a constructor given the key and a bad setting, the field its ConfigError names)
    "ChatClient": (lambda: ChatClient(URL, "m", api_key=MARKER, timeout=0), "ChatClient.timeout"),
    "ChatClient base_url": (lambda: ChatClient("ftp://x", "m", MARKER), "ChatClient.base_url"),
    "LLMSummarizer": (
        lambda: LLMSummarizer(base_url=URL, model="m", api_key=MARKER, max_tokens=0),
        "LLMSummarizer.max_tokens",
    ),
    "LLMSummarizer via its client": (  # re-raised: the client's error is chained, walked too
        lambda: LLMSummarizer(base_url=URL, model=" ", api_key=MARKER),
        "LLMSummarizer.model",
    ),
    "Agent": (
        lambda: Agent(
            Dashr.create(in_memory=True), base_url=URL, model="m", api_key=MARKER, max_steps=0
        ),
        "Agent.max_steps",
    ),
    "Agent via its client": (
        lambda: Agent(Dashr.create(in_memory=True), base_url="ftp://x", model="m", api_key=MARKER),
        "ChatClient.base_url",
    ),
}


@pytest.mark.parametrize("kind", sorted(INIT_FAILURES))
def test_no_frame_of_a_constructors_config_error_holds_the_key(kind: str) -> None:
    call, field = INIT_FAILURES[kind]
    exc, _ = provoke(call)

    assert isinstance(exc, ConfigError) and exc.field == field
    assert leaks(exc) == []
    # A traceback shown with its locals reprs the half-built object: that must work too.
    shown = [
        "".join(traceback.TracebackException.from_exception(e, capture_locals=True).format())
        for e in chained(exc)
    ]
    assert [MARKER in text for text in shown] == [False] * len(shown)
    assert "key = <secret>" in shown[-1]  # the innermost constructor holds it wrapped


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
        CLIENT_MARKER: "dict keys are scrubbed too",
    }
    untouched = {"text": "nothing secret here", "list": ["a", 1]}

    scrubbed = scrub_keys(data)

    assert scrubbed == {
        "text": f"env {REDACTED}, client {REDACTED}, short abc1234",
        "nested": [{"arguments": json.dumps({"code": f"print('{REDACTED}')"})}, 3, None],
        "pair": ("x", REDACTED),
        REDACTED: "dict keys are scrubbed too",
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


def test_dict_keys_are_scrubbed_and_a_clash_after_scrubbing_loses_no_entry() -> None:
    other = "sk-other-e4c1a7d93b2f0586-SECRET"
    data = {
        MARKER: 1,
        REDACTED: 2,  # already there, unchanged: keeps its name
        other: 3,
        f"{MARKER}~x": [{MARKER: MARKER}],
        7: "a non-string key is left as it is",
    }

    scrubbed = scrub_keys(data, [MARKER, other])

    assert scrubbed == {
        f"{REDACTED}~2": 1,
        REDACTED: 2,
        f"{REDACTED}~3": 3,
        f"{REDACTED}~x": [{REDACTED: REDACTED}],
        7: "a non-string key is left as it is",
    }
    assert list(scrubbed) == [f"{REDACTED}~2", REDACTED, f"{REDACTED}~3", f"{REDACTED}~x", 7]
    assert MARKER in data  # the input is not modified
    plain = {"a": {"b": [1]}}
    assert scrub_keys(plain, [MARKER]) is plain


def test_a_key_used_as_a_dict_key_is_never_recorded_or_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_MARKER)
    path = tmp_path / "s.jsonl"
    parameters = {"type": "object", "properties": {ENV_MARKER: {"type": "string"}}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    dashr = Dashr.create(path, tools=tools)
    dashr.session.append_log("x-harness/env", {"vars": {ENV_MARKER: "OPENAI_API_KEY"}})
    dashr.record_openai({"role": "user", "content": "hi", "metadata": {ENV_MARKER: 1}})
    live = (dashr.request_messages(), dashr.request_tools())
    dashr.close()

    scrubbed_tool = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {REDACTED: {"type": "string"}}},
        },
    }
    assert live[0] == [{"role": "user", "content": "hi", "metadata": {REDACTED: 1}}]
    assert live[1][0] == scrubbed_tool
    text = path.read_text(encoding="utf-8")
    assert ENV_MARKER not in text
    assert [
        json.loads(line)["data"]
        for line in text.splitlines()
        if json.loads(line)["type"] == "x-harness/env"
    ] == [{"vars": {REDACTED: "OPENAI_API_KEY"}}]
    reopened = Dashr.open(path)
    assert (reopened.request_messages(), reopened.request_tools()) == live
    reopened.close()


def _longest_piece(key: str, text: str) -> int:
    """The length of the longest run of ``key`` that shows in ``text``."""
    return max(
        (
            n
            for n in range(1, len(key) + 1)
            for i in range(len(key) - n + 1)
            if key[i : i + n] in text
        ),
        default=0,
    )


def test_the_agent_scrubs_a_cells_output_before_cutting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", RANDOM_KEY)
    path = tmp_path / "s.jsonl"
    # The cut keeps the last 54 characters: 20 'z's and the key's last 34 (unscrubbed).
    code = 'import os; print("y" * 1000 + os.environ["OPENAI_API_KEY"] + "z" * 20, end="")'
    with ScriptedServer() as server, Dashr.create(path) as dashr:
        server.script(call_run_cell(code), answer("done"))
        agent = Agent(dashr, base_url=server.base_url, model="m", tool_output_max_chars=200)
        assert agent.run_turn("show env") == "done"
        result = next(e for e in dashr.session.events if e.type == "tool/result")
        sent = json.dumps([r.json for r in server.requests])

    assert result.message.text == truncate_output("y" * 1000 + REDACTED + "z" * 20, 200)
    log = path.read_text(encoding="utf-8")
    # Without the scrub before the cut: 34 of the key's 43 characters, in both.
    assert max(_longest_piece(RANDOM_KEY, log), _longest_piece(RANDOM_KEY, sent)) < 8


def test_a_piece_of_a_key_left_at_either_end_of_a_string_is_scrubbed() -> None:
    key = RANDOM_KEY
    keys = [key]
    assert scrub_keys(key[9:] + "\nrest of the output", keys) == REDACTED + "\nrest of the output"
    assert scrub_keys("the output so far: " + key[:20], keys) == f"the output so far: {REDACTED}"
    assert scrub_keys(key[-8:] + " and " + key[:8], keys) == f"{REDACTED} and {REDACTED}"
    assert scrub_keys(key[5:30], keys) == REDACTED  # cut at both ends: 25 from inside
    assert scrub_keys({"k": [key[3:]]}, keys) == {"k": [REDACTED]}
    assert scrub_keys({key[:12]: 1}, keys) == {REDACTED: 1}
    # Left alone: shorter than 8 at an end, or 16 from inside, and any piece inside a string
    # (it cannot be told from ordinary text).
    for text in (key[-7:] + " x", "x " + key[:7], key[5:20], "a " + key[:20] + " b", "plain"):
        assert scrub_keys(text, keys) is text


def test_a_harness_that_cuts_a_key_records_neither_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", RANDOM_KEY)
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as dashr:
        dashr.record_openai(
            [
                {"role": "user", "content": "print the env"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"command": "env"}'},
                        },
                    ],
                },
                # The harness cut its tool output into two messages' worth, through the key.
                {
                    "role": "tool",
                    "tool_call_id": "c1",
                    "content": [
                        {"type": "text", "text": "KEY=" + RANDOM_KEY[:25]},
                        {"type": "text", "text": RANDOM_KEY[25:] + "\nHOME=/root"},
                    ],
                },
            ]
        )
        messages = dashr.request_messages()

    assert messages[-1]["content"] == [
        {"type": "text", "text": f"KEY={REDACTED}"},
        {"type": "text", "text": f"{REDACTED}\nHOME=/root"},
    ]
    assert _longest_piece(RANDOM_KEY, path.read_text(encoding="utf-8")) < 8
