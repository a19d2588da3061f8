"""Summaries written by a model behind any OpenAI-compatible ``/chat/completions`` API.

:class:`LLMSummarizer` works with DeepSeek, OpenAI, vLLM, Ollama, a LiteLLM proxy
or anything else that speaks ``POST {base_url}/chat/completions``.

**Prompt-cache reuse.** The request replays ``request.prefix_messages`` (the
conversation exactly as the model last saw it, system prompt first, plus the
same tool schemas) and appends the rendered ``prompts/summarize.md`` as the
final user message. The provider's cached prefix is therefore reused and only
the instruction and the summary are new tokens. If the provider answers that
this request is too long for its context window, the summarizer retries once
with a compact transcript of the span instead (each message clipped), which
gives up the cache to get a summary at all.

**Failures** raise :class:`~dashr_ext.errors.SummarizerError`: connect errors,
timeouts, 408/409/429 and 5xx responses are retried ``max_retries`` times with
exponential backoff and jitter (a ``Retry-After`` header is honoured, capped at
``retry_after_max`` seconds); other HTTP errors, malformed JSON, a missing
``choices[0].message.content``, an empty summary and a summary that is not
smaller (in ``request.count_tokens`` tokens) than the span it condenses fail at
once.

**The API key** (argument ``api_key``, else ``DASHR_API_KEY``, else
``DEEPSEEK_API_KEY``, else ``OPENAI_API_KEY``; none is fine for keyless local
servers) is sent only in the ``Authorization`` header. It never appears in
``repr()``, in error messages or in anything returned; text from the server is
scrubbed of it before it is shown.

Every request carries ``X-Dashr-Purpose: compaction`` so a proxy can tell
compaction traffic from the agent's own calls.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError, DashrError, SummarizerError
from ..events import Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock
from ..prompts import render
from .base import SummaryRequest, SummaryResult, is_checkpoint, span_text

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_TIMEOUT",
    "EndpointError",
    "LLMSummarizer",
]

API_KEY_ENV: tuple[str, ...] = ("DASHR_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY")
"""Environment variables searched, in order, for the API key."""
BASE_URL_ENV = "DASHR_BASE_URL"
MODEL_ENV = "DASHR_MODEL"

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=10.0)
"""Seconds: connect 10, read 120 (a long summary is slow), write 30, pool 10."""

PURPOSE_HEADER = "X-Dashr-Purpose"
_RETRY_STATUS = frozenset({408, 409, 429})
_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long|"
    r"input is too long|reduce the length|exceeds? the (?:model|maximum)",
    re.I,
)
_THINK = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.S)
_WRAPPER = re.compile(r"^<compacted-summary>\s*(.*?)\s*</compacted-summary>$", re.S)
_FALLBACK_MESSAGE_CHARS = 2000


class EndpointError(SummarizerError):
    """The endpoint failed. ``status_code`` is the last HTTP status (None: no response)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        attempts: int = 1,
        context_length: bool = False,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts
        self.context_length = context_length
        """True when the provider said the request exceeds the model's context window."""


class _Secret:
    """Holds the API key; its repr never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<none>"

    def get(self) -> str | None:
        return self._value


class _Retry(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, delay: float | None, status: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay
        self.status = status


class LLMSummarizer:
    """Summaries from an OpenAI-compatible chat-completions endpoint.

    ``base_url`` (else ``DASHR_BASE_URL``) is the API root, e.g.
    ``https://api.deepseek.com/v1`` or ``http://localhost:11434/v1``; ``model``
    (else ``DASHR_MODEL``) the model name. ``max_tokens`` caps the completion
    (default: the request's ``max_summary_tokens``). ``transport`` /
    ``async_transport`` replace httpx's network transport (tests, proxies);
    ``sleep`` / ``asleep`` replace the backoff sleeps and ``rng`` the jitter.
    One long-lived ``httpx.Client`` (and, on first async use, one
    ``httpx.AsyncClient``) serves every call; :meth:`close` releases them.
    """

    kind = "llm"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        retry_after_max: float = 60.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        prompts_dir: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV)
        model = model if model is not None else os.environ.get(MODEL_ENV)
        if not isinstance(base_url, str) or not re.match(r"^https?://[^\s/]+", base_url):
            raise ConfigError(
                "LLMSummarizer.base_url",
                "an http(s) API root such as 'https://api.deepseek.com/v1' "
                f"(or env {BASE_URL_ENV})",
                base_url,
            )
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                "LLMSummarizer.model",
                f"a model name such as 'deepseek-chat' (or env {MODEL_ENV})",
                model,
            )
        _check_number("max_retries", max_retries, 0, integer=True)
        for name, value in (
            ("backoff_base", backoff_base),
            ("backoff_max", backoff_max),
            ("retry_after_max", retry_after_max),
        ):
            _check_number(name, value, 0.0)
        if max_tokens is not None:
            _check_number("max_tokens", max_tokens, 1, integer=True)
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            _check_number("timeout", timeout, 0.001)
            timeout = httpx.Timeout(float(timeout))
        elif not isinstance(timeout, httpx.Timeout):
            raise ConfigError("LLMSummarizer.timeout", "seconds (> 0) or an httpx.Timeout", timeout)
        if api_key is None:
            api_key = next((os.environ[v] for v in API_KEY_ENV if os.environ.get(v)), None)
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError("LLMSummarizer.api_key", "a string or None", type(api_key).__name__)
        from .. import __version__

        self._key = _Secret(api_key or None)
        self._user_agent = f"dashr_ext/{__version__}"
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model: str | None = model.strip()
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.retry_after_max = float(retry_after_max)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_headers = dict(headers or {})
        self.extra_body = dict(extra_body or {})
        self.prompts_dir = prompts_dir
        self._transport = transport
        self._async_transport = async_transport
        self._sleep = sleep if sleep is not None else time.sleep
        self._asleep = asleep
        self._custom_sleep = sleep is not None
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        key = "set" if self._key.get() else "none"
        return (
            f"LLMSummarizer(base_url={self.base_url!r}, model={self.model!r}, api_key=<{key}>, "
            f"max_retries={self.max_retries})"
        )

    __str__ = __repr__

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client(s). The summarizer can still be used: they reopen on demand."""
        with self._lock:
            client, self._client = self._client, None
            aclient, self._aclient = self._aclient, None
        if client is not None:
            client.close()
        if aclient is not None:
            loop = self._aclient_loop
            self._aclient_loop = None
            if loop is not None and not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(aclient.aclose())

    async def aclose(self) -> None:
        """Close the clients from async code."""
        aclient, self._aclient = self._aclient, None
        if aclient is not None:
            await aclient.aclose()
        self.close()

    def __enter__(self) -> LLMSummarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=self.timeout, transport=self._transport, follow_redirects=False
                )
            return self._client

    def _async_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            self._aclient = httpx.AsyncClient(
                timeout=self.timeout, transport=self._async_transport, follow_redirects=False
            )
            self._aclient_loop = loop
        return self._aclient

    # ------------------------------------------------------------------ summarize

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Ask the model for the summary of ``request.span`` (blocking)."""
        body, fallback = self._bodies(request)
        try:
            data = self._post(body)
        except EndpointError as exc:
            if not (exc.context_length and fallback is not None):
                raise
            data = self._post(fallback)
        return self._result(data, request)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """Ask the model for the summary of ``request.span`` (async)."""
        body, fallback = self._bodies(request)
        try:
            data = await self._apost(body)
        except EndpointError as exc:
            if not (exc.context_length and fallback is not None):
                raise
            data = await self._apost(fallback)
        return self._result(data, request)

    def _bodies(self, request: SummaryRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The replayed-prefix body, and the compact-transcript body used on overflow."""
        try:
            instruction = render(
                "summarize",
                prompts_dir=self.prompts_dir,
                max_summary_tokens=request.max_summary_tokens,
                previous_summary=request.previous_summary,
            ).strip()
        except DashrError as exc:
            raise SummarizerError(f"llm summarizer: {exc}") from None
        transcript = {"role": "user", "content": _transcript(request.span) + "\n\n" + instruction}
        system = [
            dict(m) for m in request.prefix_messages[:1] if m.get("role") in ("system", "developer")
        ]
        fallback = self._body([*system, transcript], None, request)
        if not request.prefix_messages:
            return fallback, None
        messages = [dict(m) for m in request.prefix_messages]
        messages.append({"role": "user", "content": instruction})
        return self._body(messages, request.tools, request), fallback

    def _body(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        request: SummaryRequest,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens or request.max_summary_tokens,
            "stream": False,
        }
        if tools:
            body["tools"] = [dict(t) for t in tools]
            body["tool_choice"] = "none"
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": self._user_agent,
            **self.extra_headers,
            PURPOSE_HEADER: "compaction",
        }
        key = self._key.get()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    # ------------------------------------------------------------------ transport

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        client = self._sync_client()
        attempts = self.max_retries + 1
        last: _Retry | None = None
        for attempt in range(attempts):
            try:
                response = client.post(self.url, content=payload, headers=self._headers())
                return self._handle(response, attempt + 1)
            except _Retry as retry:
                last = retry
            except httpx.TimeoutException as exc:
                last = _Retry(_describe_timeout(exc, self.timeout), None, None)
            except httpx.TransportError as exc:
                last = _Retry(f"connection failed ({type(exc).__name__}: {exc})", None, None)
            if attempt + 1 < attempts:
                self._sleep(self._delay(attempt, last.delay))
        raise self._exhausted(last, attempts)

    async def _apost(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        client = self._async_client()
        attempts = self.max_retries + 1
        last: _Retry | None = None
        for attempt in range(attempts):
            try:
                response = await client.post(self.url, content=payload, headers=self._headers())
                return self._handle(response, attempt + 1)
            except _Retry as retry:
                last = retry
            except httpx.TimeoutException as exc:
                last = _Retry(_describe_timeout(exc, self.timeout), None, None)
            except httpx.TransportError as exc:
                last = _Retry(f"connection failed ({type(exc).__name__}: {exc})", None, None)
            if attempt + 1 < attempts:
                delay = self._delay(attempt, last.delay)
                if self._asleep is not None:
                    await self._asleep(delay)
                elif self._custom_sleep:
                    self._sleep(delay)
                else:
                    await asyncio.sleep(delay)
        raise self._exhausted(last, attempts)

    def _handle(self, response: httpx.Response, attempt: int) -> dict[str, Any]:
        status = response.status_code
        if 200 <= status < 300:
            try:
                data = json.loads(response.content)
            except ValueError as exc:
                raise EndpointError(
                    self._redact(
                        f"llm summarizer: {self.url} answered HTTP {status} with a body that is "
                        f"not JSON ({exc}): {_snippet(response.text)}"
                    ),
                    status_code=status,
                    attempts=attempt,
                ) from None
            if not isinstance(data, dict):
                raise EndpointError(
                    f"llm summarizer: {self.url} answered with JSON {type(data).__name__}, "
                    "expected an object with 'choices'",
                    status_code=status,
                    attempts=attempt,
                )
            return data
        detail = self._redact(_error_detail(response))
        if status in _RETRY_STATUS or status >= 500:
            return_delay = _retry_after(response.headers.get("Retry-After"))
            raise _Retry(f"HTTP {status}: {detail}", return_delay, status)
        context_length = status in (400, 413, 422) and bool(_CONTEXT_LENGTH.search(detail))
        what = "the request exceeds the model's context window" if context_length else "rejected"
        raise EndpointError(
            f"llm summarizer: {self.url} {what} (HTTP {status}): {detail}",
            status_code=status,
            attempts=attempt,
            context_length=context_length,
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_max)
        ceiling = min(self.backoff_max, self.backoff_base * (2.0**attempt))
        return ceiling * (0.5 + 0.5 * self._rng.random())

    def _exhausted(self, last: _Retry | None, attempts: int) -> EndpointError:
        reason = last.reason if last is not None else "no attempt was made"
        return EndpointError(
            self._redact(
                f"llm summarizer: {self.url} failed after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {reason}"
            ),
            status_code=last.status if last is not None else None,
            attempts=attempts,
        )

    def _redact(self, text: str) -> str:
        key = self._key.get()
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    # ------------------------------------------------------------------ response

    def _result(self, data: dict[str, Any], request: SummaryRequest) -> SummaryResult:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise SummarizerError(
                f"llm summarizer: the response has no choices[0] (keys: {sorted(data)[:10]})"
            )
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str):
            raise SummarizerError(
                "llm summarizer: choices[0].message.content is "
                f"{type(content).__name__}, expected a string"
            )
        text = self._redact(_clean(content or ""))
        if not text:
            reason = choices[0].get("finish_reason")
            raise SummarizerError(
                f"llm summarizer: the model returned an empty summary (finish_reason={reason!r})"
            )
        out_tokens = request.count_tokens(text)
        in_tokens = request.count_tokens(span_text(request.span))
        if out_tokens >= in_tokens:
            raise SummarizerError(
                f"llm summarizer: the summary ({out_tokens} tokens) is not smaller than the span "
                f"it condenses ({in_tokens} tokens)"
            )
        model = data.get("model")
        usage = data.get("usage")
        return SummaryResult(
            text=text,
            kind=self.kind,
            model=model if isinstance(model, str) and model else self.model,
            usage=usage if isinstance(usage, dict) else None,
        )


# --------------------------------------------------------------------------- helpers


def _check_number(name: str, value: object, low: float, *, integer: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:  # type: ignore[operator]
        accepted = f"{'an integer' if integer else 'a number'} >= {low}"
        raise ConfigError(f"LLMSummarizer.{name}", accepted, value)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(float(when.timestamp()) - time.time(), 0.0)


def _describe_timeout(exc: httpx.TimeoutException, timeout: httpx.Timeout) -> str:
    phase = {
        httpx.ConnectTimeout: ("connect", timeout.connect),
        httpx.ReadTimeout: ("read", timeout.read),
        httpx.WriteTimeout: ("write", timeout.write),
        httpx.PoolTimeout: ("pool", timeout.pool),
    }.get(type(exc))
    if phase is None:
        return f"timed out ({type(exc).__name__})"
    return f"{phase[0]} timeout after {phase[1]} s ({type(exc).__name__})"


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + f"… [+{len(text) - limit} chars]"


def _error_detail(response: httpx.Response) -> str:
    try:
        data = json.loads(response.content)
    except ValueError:
        return _snippet(response.text) or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            parts = [str(error[k]) for k in ("message", "code", "type") if error.get(k)]
            if parts:
                return _snippet(" | ".join(dict.fromkeys(parts)))
        elif isinstance(error, str):
            return _snippet(error)
    return _snippet(response.text)


def _clean(text: str) -> str:
    """The summary without reasoning tags, a wrapping code fence or a wrapping summary tag."""
    text = _THINK.sub("", text).strip()
    if match := _FENCE.match(text):
        text = match.group(1).strip()
    if match := _WRAPPER.match(text):
        text = match.group(1).strip()
    return text


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half} chars elided] …\n{text[-half:]}"


def _transcript(span: Sequence[Event]) -> str:
    """A compact, role-labelled transcript of the span (each message clipped)."""
    lines = ["<conversation>"]
    for event in span:
        if not event.is_surface:
            continue
        message = event.message
        parts: list[str] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ReasoningBlock):
                parts.append(f"(reasoning) {block.text}")
            elif isinstance(block, ToolCallBlock):
                parts.append(f"[tool call] {block.name} {block.arguments}")
            elif isinstance(block, ImageBlock):
                parts.append(f"[image {block.attachment_id}]")
        body = _clip_middle("\n".join(parts).strip(), _FALLBACK_MESSAGE_CHARS)
        if is_checkpoint(event):
            label = "Earlier summary"
        else:
            label = {
                "user/message": "User",
                "assistant/message": "Assistant",
                "tool/result": "Tool result",
                "context/message": "Context",
            }.get(event.type, event.type)
        lines.append(f"{label} (seq {event.seq}): {body}")
    lines.append("</conversation>")
    return "\n".join(lines)
