"""A small client for OpenAI-compatible ``POST {base_url}/chat/completions`` endpoints.

Shared by the ``llm`` summarizer and the notebook agent (SPEC §5.2, §10);
:class:`ChatClient` documents retries and key handling.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import json
import math
import os
import random
import re
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ._redaction import API_KEY_ENV, Secret, error_detail, redact_key, snippet
from ._version import __version__
from .errors import ConfigError, EndpointError

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "DEFAULT_TIMEOUT",
    "MODEL_ENV",
    "PURPOSE_HEADER",
    "ChatClient",
    "RetryNotice",
]

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


_AsyncState = tuple[
    "httpx.AsyncClient | None",
    "asyncio.AbstractEventLoop | None",
    "AsyncGenerator[None, None] | None",
]
"""An async client, the event loop it belongs to and its shutdown guard."""


class _Retry(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, delay: float | None, status: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay
        self.status = status


@dataclass(frozen=True)
class RetryNotice:
    """An attempt that failed in a way worth retrying (what :attr:`ChatClient.on_retry` gets).

    ``delay_s`` is the wait before the next attempt, or None when this was the last attempt
    and the call is about to raise (:attr:`gave_up`).
    """

    label: str
    """The client's label (``"agent"``, ``"llm summarizer"``)."""
    attempt: int
    """The attempt that failed, from 1."""
    attempts: int
    """Attempts the call may make (``max_retries + 1``)."""
    reason: str
    """Why it failed, e.g. ``HTTP 503: overloaded`` (scrubbed of the key)."""
    delay_s: float | None
    status: int | None = None

    @property
    def gave_up(self) -> bool:
        return self.delay_s is None

    @property
    def text(self) -> str:
        """E.g. ``llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded); retrying
        in 0.5 s``."""
        head = f"{self.label}: attempt {self.attempt} of {self.attempts} failed ({self.reason})"
        if self.delay_s is None:
            return f"{head}; giving up"
        return f"{head}; retrying in {self.delay_s:.1f} s"


class _BearerAuth(httpx.Auth):
    """Sets ``Authorization: Bearer <key>`` as httpx sends each request.

    The key is read from its :class:`Secret` inside httpx's auth flow, so no frame of
    :class:`ChatClient` ever holds it in a local variable: a traceback printed with its
    locals (Sentry, ``pytest -l``) cannot show it.
    """

    def __init__(self, key: Secret) -> None:
        self._key = key

    def __repr__(self) -> str:
        return f"_BearerAuth({self._key!r})"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._key.get():
            request.headers["Authorization"] = "Bearer " + str(self._key.get())
        yield request


class ChatClient:
    """One OpenAI-compatible endpoint: a long-lived HTTP client, retries and key handling.

    ``base_url`` (else ``DASHR_BASE_URL``) is the API root, e.g. ``https://api.deepseek.com/v1``
    or ``http://localhost:11434/v1``; ``model`` (else ``DASHR_MODEL``) fills the body's
    ``model`` when a request leaves it out. ``label`` prefixes error messages (``"agent"``,
    ``"llm summarizer"``). ``transport`` / ``async_transport`` replace httpx's network
    transport (tests, proxies); ``sleep`` / ``asleep`` replace the backoff sleeps and ``rng``
    the jitter. One ``httpx.Client`` serves every call, and one ``httpx.AsyncClient`` every
    async call on one event loop (it is closed when that loop shuts down, or when a call
    comes from another loop); :meth:`close` releases them, and they reopen on demand.

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
    ``Authorization`` header, set in httpx's auth flow, so no local variable of a failing call
    holds it (a traceback shown with its locals cannot leak it); it is wrapped first thing in
    ``__init__``, so a ``ConfigError`` for another argument cannot either (the agent and the
    summarizer pass theirs already wrapped). It never appears in ``repr()``
    or in error messages; text from the server is scrubbed of it before it is cut to a snippet
    and shown, and a piece of the key left by any later cut is scrubbed too
    (:meth:`ChatClient.redact`). While the client lives, a session log records ``[redacted]``
    in its place (:func:`~dashr_ext._redaction.scrub_keys`).

    ``purpose`` (``complete(body, purpose="compaction")``) is sent as the ``X-Dashr-Purpose``
    header, so a proxy can tell compaction traffic from an agent's own calls.

    ``on_retry`` (argument or attribute) is called with a :class:`RetryNotice` each time an
    attempt fails in a way worth retrying: before the backoff sleep, and once more before
    the call gives up. Progress displays show it; an exception it raises is ignored.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | Secret | None = None,
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
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> None:
        # First, before any check can raise: no frame of a traceback holds the key itself.
        key = api_key if isinstance(api_key, Secret) else Secret(api_key)
        api_key = None
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
        if key.wrong_type is not None:
            raise ConfigError("ChatClient.api_key", "a string or None", key.wrong_type)
        if not key.given:
            key = Secret(next((os.environ[v] for v in API_KEY_ENV if os.environ.get(v)), None))
        self._key = key if key.get() else Secret(None)
        self._auth = _BearerAuth(self._key)
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
        self._aclient_guard: AsyncGenerator[None, None] | None = None
        self._closing: set[concurrent.futures.Future[None]] = set()
        self.on_retry = on_retry
        """Called with a :class:`RetryNotice` for each failed attempt worth retrying."""

    @classmethod
    def for_owner(cls, owner: str, *args: Any, **options: Any) -> ChatClient:
        """A client for ``owner`` (``"LLMSummarizer"``): a bad option's error names the
        owner's argument (``LLMSummarizer.timeout``), not the client's."""
        try:
            return cls(*args, **options)
        except ConfigError as exc:
            name = exc.field.removeprefix("ChatClient.")
            raise ConfigError(f"{owner}.{name}", exc.accepted, exc.received) from None

    def __repr__(self) -> str:
        # Tolerates a half-built client: a traceback shown with its locals reprs __init__'s self.
        secret = getattr(self, "_key", None)
        key = "set" if secret is not None and secret.get() else "none"
        return (
            f"ChatClient(base_url={getattr(self, 'base_url', None)!r}, "
            f"model={getattr(self, 'model', None)!r}, api_key=<{key}>, "
            f"max_retries={getattr(self, 'max_retries', None)})"
        )

    __str__ = __repr__

    @property
    def has_key(self) -> bool:
        """Whether requests carry an ``Authorization`` header."""
        return self._key.get() is not None

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client(s). The client can still be used: they reopen on demand.

        The async client is closed on its event loop: at once when that loop is idle, as a
        task on it when it is running (a notebook's loop always is), by hand when it is
        already closed (its connections' sockets are released directly).
        """
        with self._lock:
            client, self._client = self._client, None
            taken = self._take_async()
        if client is not None:
            client.close()
        self._release(*taken)

    async def aclose(self) -> None:
        """Close the clients from async code."""
        with self._lock:
            aclient, loop, guard = self._take_async()
        if aclient is not None and loop is asyncio.get_running_loop():
            await _close_async(aclient, guard)
        else:
            self._release(aclient, loop, guard)
        self.close()

    def _take_async(self) -> _AsyncState:
        """Detach the async client, its loop and its guard (call with the lock held)."""
        taken = (self._aclient, self._aclient_loop, self._aclient_guard)
        self._aclient = self._aclient_loop = self._aclient_guard = None
        return taken

    def _forget(self, aclient: httpx.AsyncClient) -> None:
        """Drop ``aclient`` if it is still the current one (its loop is shutting down)."""
        with self._lock:
            if self._aclient is aclient:
                self._take_async()

    def _release(
        self,
        aclient: httpx.AsyncClient | None,
        loop: asyncio.AbstractEventLoop | None,
        guard: AsyncGenerator[None, None] | None,
    ) -> None:
        """Close ``aclient`` (an ``httpx.AsyncClient`` bound to ``loop``) from sync code."""
        if aclient is None or aclient.is_closed:
            return
        if loop is None or loop.is_closed():
            _release_sockets(aclient)
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is None and not loop.is_running():
            loop.run_until_complete(_close_async(aclient, guard))
            return
        # The loop is busy (running here or in another thread), or this thread runs another
        # loop: hand the close to the client's own loop, which runs it when it gets to it.
        future = asyncio.run_coroutine_threadsafe(_close_async(aclient, guard), loop)
        self._closing.add(future)
        future.add_done_callback(self._closing.discard)

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
        """The ``httpx.AsyncClient`` of the running event loop (one per loop).

        A client from another loop is closed first. Each client is also closed when its loop
        shuts down (``asyncio.run`` does that at its end): a guard registered as one of the
        loop's async generators closes it in ``loop.shutdown_asyncgens()``.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            current = self._aclient
            if current is not None and self._aclient_loop is loop and not current.is_closed:
                return current
            old = self._take_async()
            client = httpx.AsyncClient(
                timeout=self.timeout, transport=self._async_transport, follow_redirects=False
            )
            guard = _shutdown_guard(weakref.ref(self), client)
            self._aclient, self._aclient_loop, self._aclient_guard = client, loop, guard
        _start(guard)
        self._release(*old)
        return client

    # ------------------------------------------------------------------ requests

    def complete(self, body: Mapping[str, Any], *, purpose: str | None = None) -> dict[str, Any]:
        """POST ``body`` (``model`` filled in when missing); the response's JSON object."""
        payload, headers = self._prepare(body, purpose)
        client = self.http_client()
        attempts = self.max_retries + 1
        last: _Retry | None = None
        for attempt in range(attempts):
            try:
                response = client.post(self.url, content=payload, headers=headers, auth=self._auth)
                return self._handle(response, attempt + 1)
            except _Retry as retry:
                last = retry
            except httpx.TransportError as exc:
                last = self._transport_retry(exc)
            delay = self._delay(attempt, last.delay) if attempt + 1 < attempts else None
            self._notify(last, attempt + 1, attempts, delay)
            if delay is not None:
                self._sleep(delay)
        raise self._exhausted(last, attempts)

    def _transport_retry(self, exc: httpx.TransportError) -> _Retry:
        """A timeout or connection failure, as a retryable attempt."""
        if isinstance(exc, httpx.TimeoutException):
            return _Retry(_describe_timeout(exc, self.timeout), None, None)
        return _Retry(f"connection failed ({type(exc).__name__}: {exc})", None, None)

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
                response = await client.post(
                    self.url, content=payload, headers=headers, auth=self._auth
                )
                return self._handle(response, attempt + 1)
            except _Retry as retry:
                last = retry
            except httpx.TransportError as exc:
                last = self._transport_retry(exc)
            delay = self._delay(attempt, last.delay) if attempt + 1 < attempts else None
            self._notify(last, attempt + 1, attempts, delay)
            if delay is not None:
                if self._asleep is not None:
                    await self._asleep(delay)
                elif self._custom_sleep:
                    self._sleep(delay)
                else:
                    await asyncio.sleep(delay)
        raise self._exhausted(last, attempts)

    def _notify(self, failed: _Retry, attempt: int, attempts: int, delay: float | None) -> None:
        """Tell :attr:`on_retry` about a failed attempt (never lets it break the call)."""
        callback = self.on_retry
        if callback is None:
            return
        notice = RetryNotice(
            self.label, attempt, attempts, self.redact(failed.reason), delay, failed.status
        )
        with contextlib.suppress(Exception):
            callback(notice)

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the API key replaced by ``***``.

        A piece of the key that some truncation left behind is scrubbed as well: any run of
        at least ``8`` characters that starts the key or ends it (and, for a key of 16
        characters or more, any run of at least 16 characters from inside it).
        """
        return redact_key(text, self._key.get())

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
        return payload, headers  # the key is added by self._auth, out of every local

    def _handle(self, response: httpx.Response, attempt: int) -> dict[str, Any]:
        status = response.status_code
        if 200 <= status < 300:
            data, problem = _parse_json(response.content)
            if problem is not None:
                # Redact the whole body before cutting it: a key cut in two survives redact().
                raise EndpointError(
                    self.redact(
                        f"{self.label}: {self.url} answered HTTP {status} with a body that is "
                        f"not JSON ({problem}): {snippet(self.redact(response.text))}"
                    ),
                    status_code=status,
                    attempts=attempt,
                )
            if not isinstance(data, dict):
                raise EndpointError(
                    f"{self.label}: {self.url} answered with JSON {type(data).__name__}, "
                    "expected an object with 'choices'",
                    status_code=status,
                    attempts=attempt,
                )
            return data
        detail = self.redact(error_detail(response, self.redact))
        if status in _RETRY_STATUS or status >= 500:
            delay = _retry_after(response.headers.get("Retry-After"))
            raise _Retry(f"HTTP {status}: {detail}", delay, status)
        context_length = status in (400, 413, 422) and bool(_CONTEXT_LENGTH.search(detail))
        what = "the request exceeds the model's context window" if context_length else "rejected"
        raise EndpointError(
            self.redact(f"{self.label}: {self.url}: {what} (HTTP {status}): {detail}"),
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


def _parse_json(content: bytes) -> tuple[Any, str | None]:
    """(the JSON value, None), or (None, why it is not JSON).

    Returned, not raised: an error raised while the decoder's exception is being handled
    would chain it, and its traceback holds the whole body (which may echo the key).
    """
    try:
        return json.loads(content), None
    except ValueError as exc:
        return None, str(exc)
    except RecursionError:
        return None, "nested too deeply to parse"


def _check_number(name: str, value: object, low: float, *, integer: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:  # type: ignore[operator]
        accepted = f"{'an integer' if integer else 'a number'} >= {low}"
        raise ConfigError(f"ChatClient.{name}", accepted, value)


async def _shutdown_guard(
    owner: weakref.ref[ChatClient], client: httpx.AsyncClient
) -> AsyncGenerator[None, None]:
    """Suspended for the life of ``client``; closing the generator closes the client."""
    try:
        yield
    finally:
        chat = owner()
        if chat is not None:
            chat._forget(client)
        await client.aclose()


def _start(guard: AsyncGenerator[None, None]) -> None:
    """Run ``guard`` to its ``yield``: the running loop now tracks it as one of its async
    generators and closes it in ``shutdown_asyncgens()``."""
    step = guard.asend(None).__await__()
    with contextlib.suppress(StopIteration):
        step.send(None)


async def _close_async(
    aclient: httpx.AsyncClient, guard: AsyncGenerator[None, None] | None
) -> None:
    if guard is not None:
        await guard.aclose()
    await aclient.aclose()


def _release_sockets(aclient: httpx.AsyncClient) -> None:
    """Free the sockets of an ``httpx.AsyncClient`` whose event loop is closed.

    httpx can only close such a client with ``await aclose()``, which needs the loop it was
    used on; with that loop closed, each pooled connection's asyncio transport is finished
    by hand instead (what the loop would have run), so no socket is left open. Best effort:
    anything not laid out as expected is left alone.
    """
    transports = [getattr(aclient, "_transport", None)]
    transports += list(getattr(aclient, "_mounts", {}).values())
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        for connection in list(getattr(pool, "connections", None) or ()):
            inner = getattr(connection, "_connection", None)
            stream: Any = getattr(inner, "_network_stream", None)
            stream = getattr(stream, "_stream", None)
            stream = getattr(stream, "transport_stream", stream)  # TLS wraps the socket stream
            raw = getattr(stream, "_transport", None)
            if raw is None or getattr(raw, "_sock", None) is None:
                continue
            lost = getattr(raw, "_call_connection_lost", None)
            if lost is not None:
                with contextlib.suppress(Exception):  # best effort on a dead loop
                    lost(None)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        # "nan" and "inf" parse as floats; neither is a delay time.sleep accepts.
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    seconds = float(when.timestamp()) - time.time()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


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
