"""The llm summarizer against a scripted OpenAI-compatible server over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from corpus_events import assistant, tool, user

from dashr_ext._summarizers import make_summarizer
from dashr_ext._summarizers.base import SummaryRequest
from dashr_ext._summarizers.llm import EndpointError, LLMSummarizer
from dashr_ext._templates import render
from dashr_ext.errors import ConfigError, SummarizerError
from dashr_ext.testing import (
    RecordedRequest,
    Reply,
    ScriptedServer,
    chat_completion,
    context_length_error,
    empty_content,
    malformed_json,
    rate_limited,
    server_error,
    slow,
)

KEY = "sk-test-9f8e7d6c5b4a-SECRET"
SUMMARY = "## Primary Request and Intent\n- Fix the retry budget in `src/retry.py`"
PREFIX = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "Fix the failing retry tests in tests/test_retry.py."},
    {
        "role": "assistant",
        "content": "I will run the tests first.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "FAILED tests/test_retry.py::test_budget",
    },
]
SPAN = [
    user(1, "Fix the failing retry tests in tests/test_retry.py. " * 20),
    assistant(2, "I will run the tests first.", [("call_1", "bash", {"command": "pytest -q"})]),
    tool(3, "call_1", "FAILED tests/test_retry.py::test_budget - AssertionError: 3 != 5\n" * 20),
]


def count_words(text: str) -> int:
    return len(text.split())


def make_request(**overrides: Any) -> SummaryRequest:
    fields: dict[str, Any] = {
        "span": SPAN,
        "previous_summary": None,
        "max_summary_tokens": 512,
        "prefix_messages": PREFIX,
        "count_tokens": count_words,
    }
    fields.update(overrides)
    return SummaryRequest(**fields)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def summarizer_for(server: ScriptedServer, sleeps: Sleeps, **options: Any) -> LLMSummarizer:
    options.setdefault("api_key", KEY)
    return LLMSummarizer(base_url=server.base_url, model="deepseek-chat", sleep=sleeps, **options)


# --------------------------------------------------------------------------- success


def test_success_replays_prefix_and_appends_the_instruction(
    server: ScriptedServer, sleeps: Sleeps
) -> None:
    server.script(chat_completion(SUMMARY, usage={"prompt_tokens": 900, "completion_tokens": 40}))
    with summarizer_for(server, sleeps) as s:
        result = s.summarize(make_request())

    assert result.text == SUMMARY
    assert result.kind == "llm"
    assert result.model == "scripted-model"
    assert result.usage == {"prompt_tokens": 900, "completion_tokens": 40}
    assert sleeps == []
    [req] = server.requests
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["x-dashr-purpose"] == "compaction"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    body = req.json
    assert body["model"] == "deepseek-chat"
    assert body["max_tokens"] == 512
    assert body["stream"] is False
    instruction = render("summarize", max_summary_tokens=512, previous_summary=None).strip()
    assert body["messages"] == [*PREFIX, {"role": "user", "content": instruction}]
    assert "tools" not in body


def test_previous_summary_and_tools_are_sent(server: ScriptedServer, sleeps: Sleeps) -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    server.script(chat_completion(SUMMARY))
    s = summarizer_for(server, sleeps, max_tokens=300, temperature=0.0)
    s.summarize(make_request(previous_summary="## Current Work\n- old state", tools=tools))
    body = server.requests[0].json
    assert body["tools"] == tools
    assert body["tool_choice"] == "none"
    assert body["max_tokens"] == 300
    assert body["temperature"] == 0.0
    final = body["messages"][-1]["content"]
    assert "<previous-summary>\n## Current Work\n- old state\n</previous-summary>" in final
    s.close()


def test_reasoning_tags_fences_and_wrappers_are_removed(
    server: ScriptedServer, sleeps: Sleeps
) -> None:
    wrapped = (
        "<think>let me think</think>\n```markdown\n"
        f"<compacted-summary>\n{SUMMARY}\n</compacted-summary>\n```"
    )
    server.script(chat_completion(wrapped))
    assert summarizer_for(server, sleeps).summarize(make_request()).text == SUMMARY


def test_no_key_sends_no_authorization(
    server: ScriptedServer, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DASHR_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    server.script(chat_completion(SUMMARY))
    s = summarizer_for(server, sleeps, api_key=None)
    s.summarize(make_request())
    assert "authorization" not in server.requests[0].headers
    assert "api_key=<none>" in repr(s)


def test_key_comes_from_the_environment_in_order(
    server: ScriptedServer, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    monkeypatch.setenv("DASHR_API_KEY", "sk-dashr")
    server.script(*(chat_completion(SUMMARY) for _ in range(3)))
    summarizer_for(server, sleeps, api_key=None).summarize(make_request())
    monkeypatch.delenv("DASHR_API_KEY")
    summarizer_for(server, sleeps, api_key=None).summarize(make_request())
    monkeypatch.delenv("DEEPSEEK_API_KEY")
    summarizer_for(server, sleeps, api_key=None).summarize(make_request())
    seen = [r.headers["authorization"] for r in server.requests]
    assert seen == ["Bearer sk-dashr", "Bearer sk-deepseek", "Bearer sk-openai"]


# --------------------------------------------------------------------------- retries


def test_429_honours_retry_after_then_succeeds(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(rate_limited(retry_after=2), chat_completion(SUMMARY))
    result = summarizer_for(server, sleeps).summarize(make_request())
    assert result.text == SUMMARY
    assert sleeps == [2.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body  # the same request, resent


def test_retry_after_is_capped(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(rate_limited(retry_after=3600), chat_completion(SUMMARY))
    summarizer_for(server, sleeps, retry_after_max=5.0).summarize(make_request())
    assert sleeps == [5.0]


def test_persistent_500_fails_after_max_retries_plus_one_attempts(
    server: ScriptedServer, sleeps: Sleeps
) -> None:
    server.default = server_error(500, "upstream exploded")
    s = summarizer_for(server, sleeps, max_retries=2, backoff_base=0.5, backoff_max=10.0)
    with pytest.raises(SummarizerError) as info:
        s.summarize(make_request())
    assert len(server.requests) == 3
    message = str(info.value)
    assert "failed after 3 attempts" in message
    assert "HTTP 500" in message and "upstream exploded" in message
    assert isinstance(info.value, EndpointError)
    assert (info.value.status_code, info.value.attempts) == (500, 3)
    # Exponential backoff with jitter: attempt k waits in [base*2^k/2, base*2^k].
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5
    assert 0.5 <= sleeps[1] <= 1.0


@pytest.mark.parametrize("status", [408, 409, 502, 503])
def test_other_retryable_statuses(server: ScriptedServer, sleeps: Sleeps, status: int) -> None:
    server.script(server_error(status), chat_completion(SUMMARY))
    assert summarizer_for(server, sleeps).summarize(make_request()).text == SUMMARY
    assert len(server.requests) == 2


def test_client_errors_are_not_retried(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(Reply(404, {"error": {"message": "model not found", "code": "model_not_found"}}))
    with pytest.raises(SummarizerError, match=r"rejected \(HTTP 404\): model not found"):
        summarizer_for(server, sleeps).summarize(make_request())
    assert len(server.requests) == 1
    assert sleeps == []


def test_read_timeout_is_retried_then_fails(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(slow(chat_completion(SUMMARY), 3.0), slow(chat_completion(SUMMARY), 3.0))
    s = summarizer_for(server, sleeps, timeout=httpx.Timeout(5.0, read=0.2), max_retries=1)
    with pytest.raises(
        SummarizerError, match=r"failed after 2 attempts: read timeout after 0\.2 s"
    ):
        s.summarize(make_request())
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_connect_error_is_retried(sleeps: Sleeps) -> None:
    with ScriptedServer() as s:
        dead_url = s.base_url  # nothing listens there once the server stops
    summarizer = LLMSummarizer(base_url=dead_url, model="m", max_retries=2, sleep=sleeps)
    with pytest.raises(SummarizerError, match="failed after 3 attempts: connection failed"):
        summarizer.summarize(make_request())
    assert len(sleeps) == 2


# --------------------------------------------------------------------------- bad output


def test_malformed_json_fails_without_retry(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(malformed_json())
    with pytest.raises(SummarizerError, match="not JSON"):
        summarizer_for(server, sleeps).summarize(make_request())
    assert len(server.requests) == 1


def test_missing_choices_fails(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(Reply(200, {"id": "x", "object": "chat.completion"}))
    with pytest.raises(SummarizerError, match=r"no choices\[0\]"):
        summarizer_for(server, sleeps).summarize(make_request())


def test_empty_content_fails(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(empty_content())
    with pytest.raises(SummarizerError, match="empty summary"):
        summarizer_for(server, sleeps).summarize(make_request())


def test_summary_not_smaller_than_the_span_fails(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(chat_completion("word " * 5000))
    with pytest.raises(SummarizerError, match="not smaller than the span"):
        summarizer_for(server, sleeps).summarize(make_request())


def test_context_length_error_falls_back_to_a_compact_transcript(
    server: ScriptedServer, sleeps: Sleeps
) -> None:
    server.script(context_length_error(), chat_completion(SUMMARY))
    result = summarizer_for(server, sleeps).summarize(make_request())
    assert result.text == SUMMARY
    first, second = server.requests
    assert len(first.json["messages"]) == len(PREFIX) + 1
    messages = second.json["messages"]
    assert messages[0] == PREFIX[0]  # the system prompt is kept
    assert [m["role"] for m in messages] == ["system", "user"]
    content = messages[1]["content"]
    assert content.startswith("<conversation>\nUser (seq 1): Fix the failing retry tests")
    assert "[tool call] bash" in content and "Tool result (seq 3): FAILED" in content
    assert content.endswith(
        render("summarize", max_summary_tokens=512, previous_summary=None).strip()
    )


def test_context_length_error_twice_is_a_summarizer_error(
    server: ScriptedServer, sleeps: Sleeps
) -> None:
    server.script(context_length_error(), context_length_error())
    with pytest.raises(EndpointError, match="exceeds the model's context window") as info:
        summarizer_for(server, sleeps).summarize(make_request())
    assert info.value.context_length is True
    assert len(server.requests) == 2


# --------------------------------------------------------------------------- secrets


def test_the_key_never_appears_in_repr_or_errors(server: ScriptedServer, sleeps: Sleeps) -> None:
    echo = Reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    server.script(echo)
    s = summarizer_for(server, sleeps)
    assert KEY not in repr(s) and KEY not in str(s)
    assert "api_key=<set>" in repr(s)
    assert KEY not in repr(vars(s))
    with pytest.raises(SummarizerError) as info:
        s.summarize(make_request())
    text = str(info.value)
    assert KEY not in text and KEY not in repr(info.value)
    assert "Incorrect API key provided: ***" in text
    assert info.value.__cause__ is None  # no chained httpx objects carrying headers
    assert KEY not in repr(info.value.__context__)

    # Retried failures and their final message are scrubbed too.
    server.default = Reply(503, f"overloaded; key={KEY}")
    with pytest.raises(SummarizerError) as info:
        summarizer_for(server, sleeps, max_retries=1).summarize(make_request())
    assert KEY not in str(info.value) and "key=***" in str(info.value)


def test_the_key_is_scrubbed_from_returned_text(server: ScriptedServer, sleeps: Sleeps) -> None:
    server.script(chat_completion(f"{SUMMARY}\n- token {KEY}"))
    result = summarizer_for(server, sleeps).summarize(make_request())
    assert KEY not in result.text and KEY not in repr(result)


# --------------------------------------------------------------------------- async


def test_async_summarize_retries_and_succeeds(server: ScriptedServer) -> None:
    server.script(rate_limited(retry_after=1), chat_completion(SUMMARY))
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)

    async def main() -> str:
        s = LLMSummarizer(base_url=server.base_url, model="m", api_key=KEY, asleep=asleep)
        try:
            return (await s.asummarize(make_request())).text
        finally:
            await s.aclose()

    assert asyncio.run(main()) == SUMMARY
    assert waited == [1.0]
    assert [r.headers["x-dashr-purpose"] for r in server.requests] == ["compaction"] * 2


def test_async_calls_run_concurrently(server: ScriptedServer) -> None:
    server.default = slow(chat_completion(SUMMARY), 0.3)

    async def main() -> list[str]:
        s = LLMSummarizer(base_url=server.base_url, model="m", api_key=KEY)
        try:
            results = await asyncio.gather(*(s.asummarize(make_request()) for _ in range(4)))
        finally:
            await s.aclose()
        return [r.text for r in results]

    loop_time = asyncio.new_event_loop()
    try:
        start = loop_time.time()
        texts = loop_time.run_until_complete(main())
        elapsed = loop_time.time() - start
    finally:
        loop_time.close()
    assert texts == [SUMMARY] * 4
    assert elapsed < 0.3 * 4 * 0.75  # wall time ≈ one call, not four


# --------------------------------------------------------------------------- unit (MockTransport)


def test_mock_transport_retries_on_503_and_reuses_one_client() -> None:
    seen: list[httpx.Request] = []
    replies = iter(
        [
            httpx.Response(503, json={"error": {"message": "busy"}}),
            httpx.Response(200, json=chat_completion(SUMMARY).body),
            httpx.Response(200, json=chat_completion(SUMMARY).body),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(replies)

    sleeps = Sleeps()
    s = LLMSummarizer(
        base_url="https://api.example.test/v1/",
        model="m",
        api_key=KEY,
        transport=httpx.MockTransport(handler),
        sleep=sleeps,
    )
    client = s._sync_client()
    assert s.summarize(make_request()).text == SUMMARY
    assert s.summarize(make_request()).text == SUMMARY
    assert s._sync_client() is client
    assert [str(r.url) for r in seen] == ["https://api.example.test/v1/chat/completions"] * 3
    assert len(sleeps) == 1
    assert json.loads(seen[0].content)["messages"][-1]["role"] == "user"
    s.close()
    assert s._client is None
    s.close()  # idempotent


# --------------------------------------------------------------------------- configuration


def test_configuration_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    with pytest.raises(ConfigError, match=r"LLMSummarizer\.base_url"):
        LLMSummarizer(model="m")
    with pytest.raises(ConfigError, match=r"LLMSummarizer\.model"):
        LLMSummarizer(base_url="http://localhost:11434/v1")
    with pytest.raises(ConfigError, match=r"LLMSummarizer.max_retries: expected an integer >= 0"):
        LLMSummarizer(base_url="http://x/v1", model="m", max_retries=-1)
    with pytest.raises(ConfigError, match=r"LLMSummarizer\.timeout"):
        LLMSummarizer(base_url="http://x/v1", model="m", timeout="soon")  # type: ignore[arg-type]
    monkeypatch.setenv("DASHR_BASE_URL", "http://localhost:8000/v1")
    monkeypatch.setenv("DASHR_MODEL", "qwen")
    s = LLMSummarizer()
    assert (s.url, s.model) == ("http://localhost:8000/v1/chat/completions", "qwen")


def test_make_summarizer_builds_llm_and_rejects_unknown_options() -> None:
    s = make_summarizer("llm", base_url="http://localhost:1/v1", model="m", api_key=KEY)
    assert isinstance(s, LLMSummarizer) and s.kind == "llm" and s.model == "m"
    with pytest.raises(ConfigError, match=r"llm summarizer options.*\['bogus'\]"):
        make_summarizer("llm", base_url="http://localhost:1/v1", model="m", bogus=1)


def test_scripted_server_computes_replies_from_requests(server: ScriptedServer) -> None:
    def echo_model(request: RecordedRequest) -> Reply:
        return chat_completion(f"## Current Work\n- for {request.json['model']}")

    server.script(echo_model)
    s = LLMSummarizer(base_url=server.base_url, model="echo-1", api_key=None)
    assert s.summarize(make_request()).text == "## Current Work\n- for echo-1"
