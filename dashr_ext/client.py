"""A small client for OpenAI-compatible ``POST {base_url}/chat/completions`` endpoints.

:class:`ChatClient` is shared by the ``llm`` summarizer and the notebook agent. It works
with DeepSeek, OpenAI, vLLM, Ollama, a LiteLLM proxy or anything else that speaks the
chat-completions protocol::

    with ChatClient("https://api.deepseek.com/v1", "deepseek-chat") as client:
        data = client.complete({"messages": [{"role": "user", "content": "Hi"}]})
        print(data["choices"][0]["message"]["content"])

**Failures** raise :class:`~dashr_ext.errors.EndpointError`. Connect errors, timeouts,
408/409/429 and 5xx responses are retried ``max_retries`` times with exponential backoff and
jitter (a ``Retry-After`` header is honoured, capped at ``retry_after_max`` seconds); other
HTTP errors and a body that is not a JSON object fail at once. A 400/413/422 whose message
says the request is too long sets ``EndpointError.context_length``.

**The API key** (argument ``api_key``, else ``DASHR_API_KEY``, else ``DEEPSEEK_API_KEY``,
else ``OPENAI_API_KEY``; none is fine for keyless local servers) is sent only in the
``Authorization`` header. It never appears in ``repr()`` or in error messages; text from the
server is scrubbed of it before it is shown (:meth:`ChatClient.redact`).

``purpose`` (``complete(body, purpose="compaction")``) is sent as the ``X-Dashr-Purpose``
header, so a proxy can tell compaction traffic from an agent's own calls.
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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from .errors import ConfigError, EndpointError

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "DEFAULT_TIMEOUT",
    "MODEL_ENV",
    "PURPOSE_HEADER",
    "ChatClient",
    "EndpointError",
]

API_KEY_ENV: tuple[str, ...] = ("DASHR_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY")
"""Environment variables searched, in order, for the API key."""
BASE_URL_ENV = "DASHR_BASE_URL"
"""Environment variable read when ``base_url`` is not given."""
MODEL_ENV = "DASHR_MODEL"
"""Environment variable read when ``model`` is not given."""

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=10.0)
"""Seconds: connect 10, read 120 (a long completion is slow), write 30, pool 10."""

PURPOSE_HEADER = "X-Dashr-Purpose"

_RETRY_STATUS = frozenset({408, 409, 429})
_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|too many tokens|prompt is too long|"
    r"input is too long|reduce the length|exceeds? the (?:model|maximum)",
    re.I,
)


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


class ChatClient:
    """One OpenAI-compatible endpoint: a long-lived HTTP client, retries and key handling.

    ``base_url`` (else ``DASHR_BASE_URL``) is the API root, e.g. ``https://api.deepseek.com/v1``
    or ``http://localhost:11434/v1``; ``model`` (else ``DASHR_MODEL``) fills the body's
    ``model`` when a request leaves it out. ``label`` prefixes error messages (``"agent"``,
    ``"llm summarizer"``). ``transport`` / ``async_transport`` replace httpx's network
    transport (tests, proxies); ``sleep`` / ``asleep`` replace the backoff sleeps and ``rng``
    the jitter. One ``httpx.Client`` (and, on first async use, one ``httpx.AsyncClient``)
    serves every call; :meth:`close` releases them, and they reopen on demand.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        retry_after_max: float = 60.0,
        headers: Mapping[str, str] | None = None,
        label: str = "chat endpoint",
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
                "ChatClient.base_url",
                "an http(s) API root such as 'https://api.deepseek.com/v1' "
                f"(or env {BASE_URL_ENV})",
                base_url,
            )
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                "ChatClient.model",
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
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            _check_number("timeout", timeout, 0.001)
            timeout = httpx.Timeout(float(timeout))
        elif not isinstance(timeout, httpx.Timeout):
            raise ConfigError("ChatClient.timeout", "seconds (> 0) or an httpx.Timeout", timeout)
        if api_key is None:
            api_key = next((os.environ[v] for v in API_KEY_ENV if os.environ.get(v)), None)
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError("ChatClient.api_key", "a string or None", type(api_key).__name__)
        from . import __version__

        self._key = _Secret(api_key or None)
        self._user_agent = f"dashr_ext/{__version__}"
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model.strip()
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.retry_after_max = float(retry_after_max)
        self.extra_headers = dict(headers or {})
        self.label = label
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
            f"ChatClient(base_url={self.base_url!r}, model={self.model!r}, api_key=<{key}>, "
            f"max_retries={self.max_retries})"
        )

    __str__ = __repr__

    @property
    def has_key(self) -> bool:
        """Whether requests carry an ``Authorization`` header."""
        return self._key.get() is not None

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client(s). The client can still be used: they reopen on demand."""
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

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        """Whether the synchronous ``httpx.Client`` is open."""
        return self._client is not None

    def http_client(self) -> httpx.Client:
        """The long-lived synchronous ``httpx.Client`` (opened on first use)."""
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

    # ------------------------------------------------------------------ requests

    def complete(self, body: Mapping[str, Any], *, purpose: str | None = None) -> dict[str, Any]:
        """POST ``body`` (``model`` filled in when missing); the response's JSON object."""
        payload, headers = self._prepare(body, purpose)
        client = self.http_client()
        attempts = self.max_retries + 1
        last: _Retry | None = None
        for attempt in range(attempts):
            try:
                response = client.post(self.url, content=payload, headers=headers)
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

    async def acomplete(
        self, body: Mapping[str, Any], *, purpose: str | None = None
    ) -> dict[str, Any]:
        """:meth:`complete` for async code (calls on one event loop share one client)."""
        payload, headers = self._prepare(body, purpose)
        client = self._async_client()
        attempts = self.max_retries + 1
        last: _Retry | None = None
        for attempt in range(attempts):
            try:
                response = await client.post(self.url, content=payload, headers=headers)
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

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the API key replaced by ``***``."""
        key = self._key.get()
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _prepare(
        self, body: Mapping[str, Any], purpose: str | None
    ) -> tuple[bytes, dict[str, str]]:
        full = dict(body)
        full.setdefault("model", self.model)
        payload = json.dumps(full, ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": self._user_agent,
            **self.extra_headers,
        }
        if purpose is not None:
            headers[PURPOSE_HEADER] = purpose
        key = self._key.get()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return payload, headers

    def _handle(self, response: httpx.Response, attempt: int) -> dict[str, Any]:
        status = response.status_code
        if 200 <= status < 300:
            try:
                data = json.loads(response.content)
            except ValueError as exc:
                raise EndpointError(
                    self.redact(
                        f"{self.label}: {self.url} answered HTTP {status} with a body that is "
                        f"not JSON ({exc}): {_snippet(response.text)}"
                    ),
                    status_code=status,
                    attempts=attempt,
                ) from None
            if not isinstance(data, dict):
                raise EndpointError(
                    f"{self.label}: {self.url} answered with JSON {type(data).__name__}, "
                    "expected an object with 'choices'",
                    status_code=status,
                    attempts=attempt,
                )
            return data
        detail = self.redact(_error_detail(response))
        if status in _RETRY_STATUS or status >= 500:
            delay = _retry_after(response.headers.get("Retry-After"))
            raise _Retry(f"HTTP {status}: {detail}", delay, status)
        context_length = status in (400, 413, 422) and bool(_CONTEXT_LENGTH.search(detail))
        what = "the request exceeds the model's context window" if context_length else "rejected"
        raise EndpointError(
            f"{self.label}: {self.url}: {what} (HTTP {status}): {detail}",
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
            self.redact(
                f"{self.label}: {self.url} failed after {attempts} attempt"
                f"{'s' if attempts != 1 else ''}: {reason}"
            ),
            status_code=last.status if last is not None else None,
            attempts=attempts,
        )


# --------------------------------------------------------------------------- helpers


def _check_number(name: str, value: object, low: float, *, integer: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:  # type: ignore[operator]
        accepted = f"{'an integer' if integer else 'a number'} >= {low}"
        raise ConfigError(f"ChatClient.{name}", accepted, value)


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
