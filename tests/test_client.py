"""ChatClient: the shared OpenAI-compatible client (unit tests over httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from pathlib import Path

import httpx
import pytest
from helpers import record_steps

from dashr_ext import CompactionConfig, CompactionWarning, Dashr
from dashr_ext._client import PURPOSE_HEADER, ChatClient, RetryNotice
from dashr_ext._redaction import redact_key, snippet
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext.errors import (
    ConfigError,
    EndpointError,
    SummarizerEndpointError,
    SummarizerError,
)
from dashr_ext.testing import Reply, ScriptedServer, chat_completion, context_length_error

KEY = "sk-client-1234567890-SECRET"


def client_for(
    *replies: httpx.Response, seen: list[httpx.Request], key: str = KEY, **options: object
) -> ChatClient:
    queue = iter(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(queue)

    return ChatClient(
        "https://api.example.test/v1",
        "model-a",
        key,
        transport=httpx.MockTransport(handler),
        sleep=lambda seconds: None,
        **options,  # type: ignore[arg-type]
    )


def test_complete_fills_in_the_model_and_sends_purpose_and_key() -> None:
    seen: list[httpx.Request] = []
    ok = httpx.Response(200, json=chat_completion("hi").body)
    with client_for(ok, ok, seen=seen) as client:
        data = client.complete({"messages": [{"role": "user", "content": "hello"}]})
        client.complete({"model": "model-b", "messages": []}, purpose="agent")
        http = client.http_client()
        assert client.http_client() is http  # one long-lived client
    assert data["choices"][0]["message"]["content"] == "hi"
    first, second = seen
    assert str(first.url) == "https://api.example.test/v1/chat/completions"
    assert json.loads(first.content)["model"] == "model-a"
    assert json.loads(second.content)["model"] == "model-b"
    assert PURPOSE_HEADER.lower() not in first.headers
    assert second.headers[PURPOSE_HEADER] == "agent"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert not client.is_open  # closed by the context manager


def test_context_length_refusals_are_flagged_and_not_retried() -> None:
    seen: list[httpx.Request] = []
    refusal = context_length_error(8192, 9000)
    reply = httpx.Response(refusal.status, json=refusal.body)
    client = client_for(reply, seen=seen, label="agent")
    with pytest.raises(EndpointError) as info:
        client.complete({"messages": []})
    error = info.value
    assert (error.context_length, error.status_code, error.attempts) == (True, 400, 1)
    assert str(error).startswith(
        "agent: https://api.example.test/v1/chat/completions: the request exceeds the model's "
        "context window (HTTP 400): This model's maximum context length is 8192 tokens."
    )
    assert not isinstance(error, SummarizerError)  # an agent's error, not a compaction failure
    assert len(seen) == 1


def test_retryable_failures_are_retried_then_reported_with_the_key_scrubbed() -> None:
    seen: list[httpx.Request] = []
    busy = httpx.Response(503, text=f"overloaded for {KEY}")
    client = client_for(busy, busy, seen=seen, max_retries=1)
    with pytest.raises(EndpointError, match=r"failed after 2 attempts: HTTP 503") as info:
        client.complete({"messages": []})
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert info.value.context_length is False
    assert KEY not in repr(client) and "api_key=<set>" in repr(client)


def test_summarizer_endpoint_errors_are_both_kinds() -> None:
    error = SummarizerEndpointError("down", status_code=502, attempts=4)
    assert isinstance(error, SummarizerError) and isinstance(error, EndpointError)
    assert (error.status_code, error.attempts, error.context_length) == (502, 4, False)


def test_configuration_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    with pytest.raises(ConfigError, match=r"ChatClient\.base_url"):
        ChatClient(None, "m")
    with pytest.raises(ConfigError, match=r"ChatClient\.model"):
        ChatClient("http://localhost:8000/v1", " ")
    with pytest.raises(ConfigError, match=r"ChatClient\.max_retries: expected an integer >= 0"):
        ChatClient("http://localhost:8000/v1", "m", max_retries=-1)
    monkeypatch.setenv("DASHR_BASE_URL", "http://localhost:8000/v1/")
    monkeypatch.setenv("DASHR_MODEL", "qwen")
    client = ChatClient()
    assert (client.url, client.model) == ("http://localhost:8000/v1/chat/completions", "qwen")


# --------------------------------------------------------------------------- the key at a cut

LONG_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3


def key_pieces(text: str) -> list[str]:
    """Every start of LONG_KEY of 8 characters or more that appears in ``text``."""
    return [LONG_KEY[:n] for n in range(8, len(LONG_KEY) + 1) if LONG_KEY[:n] in text]


def test_a_key_echoed_across_the_snippet_cut_is_scrubbed_whole() -> None:
    # 290 characters of message, then the key: the 300-character snippet ends inside it.
    message = "Incorrect API key provided. " + "x" * 257 + " key=" + LONG_KEY
    reply = httpx.Response(401, json={"error": {"message": message, "type": "invalid_request"}})
    client = client_for(reply, seen=[], key=LONG_KEY)
    with pytest.raises(EndpointError) as info:
        client.complete({"messages": []})
    text = str(info.value)
    assert key_pieces(text) == []
    assert "key=***" in text


def test_redact_scrubs_a_piece_of_the_key_left_by_someone_elses_cut() -> None:
    client = ChatClient("https://api.example.test/v1", "m", LONG_KEY)
    assert client.redact(f"head {LONG_KEY[:20]}… [+48 chars]") == "head ***… [+48 chars]"
    assert client.redact(f"…{LONG_KEY[-12:]} tail") == "…*** tail"
    assert client.redact("a key looks like sk-12345") == "a key looks like sk-12345"


def test_redact_key_leaves_text_alone_without_a_key_long_enough_to_scrub() -> None:
    assert redact_key("token abc here", None) == "token abc here"
    assert redact_key("token abc here", "abc") == "token abc here"
    assert redact_key("token abcd here, abcd", "abcd") == "token *** here, ***"


def test_a_snippet_is_one_line_cut_to_its_limit_with_a_note_of_the_rest() -> None:
    assert snippet("a\n  b\tc ") == "a b c"
    assert snippet("x" * 300) == "x" * 300
    assert snippet("x" * 305) == "x" * 300 + "… [+5 chars]"


def test_a_key_in_a_summarizer_error_reaches_neither_the_warning_nor_the_session_log(
    tmp_path: Path,
) -> None:
    message = "Incorrect API key provided: " + "x" * 262 + LONG_KEY
    path = tmp_path / "s.jsonl"
    with ScriptedServer(default=Reply(401, {"error": {"message": message}})) as server:
        summarizer = LLMSummarizer(
            base_url=server.base_url, model="m", api_key=LONG_KEY, max_retries=0
        )
        config = CompactionConfig(recency_window_tokens=3000, retain_tokens=500)
        dashr = Dashr.create(path, config=config, summarizer=summarizer)
        record_steps(dashr, 20, 400, user="fix it")
        dashr.record_openai({"role": "assistant", "content": "done"})
        with pytest.warns(CompactionWarning, match="HTTP 401") as caught:
            dashr.request_messages()
        dashr.close()
    assert [key_pieces(str(w.message)) for w in caught] == [[]]
    assert "Incorrect API key provided" in path.read_text(encoding="utf-8")
    assert key_pieces(path.read_text(encoding="utf-8")) == []


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_a_retry_after_that_is_not_a_finite_number_falls_back_to_backoff(value: str) -> None:
    seen: list[httpx.Request] = []
    slept: list[float] = []
    busy = httpx.Response(
        429, json={"error": {"message": "slow down"}}, headers={"Retry-After": value}
    )
    ok = httpx.Response(200, json=chat_completion("hi").body)
    client = client_for(busy, ok, seen=seen, max_retries=2, backoff_base=0.5)
    client._sleep = slept.append
    data = client.complete({"messages": []})
    assert data["choices"][0]["message"]["content"] == "hi"
    assert len(seen) == 2
    assert len(slept) == 1 and 0.25 <= slept[0] <= 0.5  # the first backoff step, jittered


# --------------------------------------------------------------------------- retry notices


def test_each_failed_attempt_is_announced_with_its_reason_and_wait() -> None:
    seen: list[httpx.Request] = []
    notices: list[RetryNotice] = []
    busy = httpx.Response(503, text=f"overloaded for {KEY}")
    limited = httpx.Response(
        429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "2"}
    )
    ok = httpx.Response(200, json=chat_completion("hi").body)
    client = client_for(busy, limited, ok, seen=seen, label="agent", on_retry=notices.append)
    client.complete({"messages": []})
    first, second = notices
    assert (first.label, first.attempt, first.attempts, first.status) == ("agent", 1, 4, 503)
    assert first.reason == "HTTP 503: overloaded for ***" and KEY not in first.text
    assert first.delay_s is not None and 0.25 <= first.delay_s <= 0.5  # backoff, jittered
    assert second.text == ("agent: attempt 2 of 4 failed (HTTP 429: slow down); retrying in 2.0 s")


def test_the_last_failed_attempt_is_announced_as_giving_up_sync_and_async() -> None:
    notices: list[RetryNotice] = []

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="overloaded")

    async def nap(seconds: float) -> None:
        pass

    client = ChatClient(
        "https://api.example.test/v1",
        "m",
        transport=httpx.MockTransport(failing),
        async_transport=httpx.MockTransport(failing),
        sleep=lambda seconds: None,
        asleep=nap,
        max_retries=1,
        on_retry=lambda n: [][0],  # a broken callback never breaks the call
    )
    with pytest.raises(EndpointError, match="failed after 2 attempts"):
        client.complete({"messages": []})
    client.on_retry = notices.append
    with pytest.raises(EndpointError, match="failed after 2 attempts"):
        client.complete({"messages": []})
    with pytest.raises(EndpointError, match="failed after 2 attempts"):
        asyncio.run(client.acomplete({"messages": []}))
    assert [(n.attempt, n.gave_up) for n in notices] == [(1, False), (2, True)] * 2
    assert notices[1].text == (
        "chat endpoint: attempt 2 of 2 failed (HTTP 503: overloaded); giving up"
    )
    client.close()


# --------------------------------------------------------------------------- async clients


def test_async_clients_are_closed_when_their_loop_ends_and_by_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[httpx.AsyncClient] = []

    class Recorded(httpx.AsyncClient):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            created.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", Recorded)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    gc.collect()  # what earlier tests left behind is not this test's to report
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ScriptedServer(default=chat_completion("hi")) as server:
            client = ChatClient(server.base_url, "m", api_key="k")
            asyncio.run(client.acomplete(body))
            asyncio.run(client.acomplete(body))
            client.close()
        gc.collect()
    assert len(created) == 2  # one per event loop
    assert [c.is_closed for c in created] == [True, True]
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_close_closes_the_async_client_of_an_idle_or_a_running_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[httpx.AsyncClient] = []

    class Recorded(httpx.AsyncClient):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            created.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", Recorded)
    body = {"messages": [{"role": "user", "content": "hi"}]}

    async def close_inside(client: ChatClient) -> bool:
        await client.acomplete(body)
        client.close()  # sync close while the loop runs, as in a notebook cell
        await asyncio.sleep(0.05)
        return created[-1].is_closed

    gc.collect()  # what earlier tests left behind is not this test's to report
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ScriptedServer(default=chat_completion("hi")) as server:
            client = ChatClient(server.base_url, "m", api_key="k")
            loop = asyncio.new_event_loop()
            loop.run_until_complete(client.acomplete(body))
            client.close()  # the loop is open and idle
            assert created[-1].is_closed
            loop.close()
            assert asyncio.run(close_inside(client)) is True
            # A loop closed without shutting down its async generators: the sockets are freed.
            loop = asyncio.new_event_loop()
            loop.run_until_complete(client.acomplete(body))
            loop.close()
            client.close()
        gc.collect()
    assert len(created) == 3
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_body_nested_too_deeply_to_parse_is_a_typed_endpoint_error() -> None:
    seen: list[httpx.Request] = []
    deep = httpx.Response(200, content=b"[" * 100_000 + b"]" * 100_000)
    with client_for(deep, seen=seen) as client, pytest.raises(EndpointError) as caught:
        client.complete({"messages": []})
    assert "not JSON (nested too deeply to parse)" in str(caught.value)
    assert caught.value.status_code == 200
