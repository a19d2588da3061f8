"""ChatClient: the shared OpenAI-compatible client (unit tests over httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from dashr_ext.client import PURPOSE_HEADER, ChatClient
from dashr_ext.errors import (
    ConfigError,
    EndpointError,
    SummarizerEndpointError,
    SummarizerError,
)
from dashr_ext.testing import chat_completion, context_length_error

KEY = "sk-client-1234567890-SECRET"


def client_for(
    *replies: httpx.Response, seen: list[httpx.Request], **options: object
) -> ChatClient:
    queue = iter(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(queue)

    return ChatClient(
        "https://api.example.test/v1",
        "model-a",
        KEY,
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
