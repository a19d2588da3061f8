"""A scripted OpenAI-compatible HTTP server on loopback, for end-to-end tests.

It speaks real HTTP (stdlib ``ThreadingHTTPServer`` in a background thread), so
clients are exercised with their real transport, timeouts and retries::

    with ScriptedServer() as server:
        server.script(rate_limited(retry_after=2), chat_completion("## Summary ..."))
        client = LLMSummarizer(base_url=server.base_url, model="m", api_key="k")
        ...
        assert server.requests[-1].json["messages"][-1]["role"] == "user"

Replies are served in the order they were scripted; each is a :class:`Reply` or
a callable ``(RecordedRequest) -> Reply`` computed from the request. When the
script runs out, ``default`` (a reply or callable) answers, else a 500 that
says so. Every request is recorded (method, path, headers, raw body, parsed
JSON), including the ones answered by error replies.

Reply helpers: :func:`chat_completion` (content and/or tool calls, usage),
:func:`rate_limited` (429 + ``Retry-After``), :func:`server_error`,
:func:`malformed_json`, :func:`empty_content`, :func:`context_length_error`,
:func:`slow` (delay before the response, to trigger client read timeouts) and
:func:`stream_chunks` (a ``text/event-stream`` body).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "RecordedRequest",
    "Reply",
    "ScriptedServer",
    "chat_completion",
    "context_length_error",
    "empty_content",
    "malformed_json",
    "rate_limited",
    "server_error",
    "slow",
    "stream_chunks",
]


@dataclass
class Reply:
    """One scripted HTTP response."""

    status: int = 200
    body: bytes | str | Mapping[str, Any] | list[Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before sending anything (simulates a slow server)."""

    def encoded(self) -> tuple[bytes, str]:
        if self.body is None:
            return b"", "text/plain"
        if isinstance(self.body, bytes):
            return self.body, "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode("utf-8"), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode("utf-8"), "application/json"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Responder = Reply | Callable[[RecordedRequest], Reply]


def chat_completion(
    content: str | None = "ok",
    *,
    model: str = "scripted-model",
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
    reasoning_content: str | None = None,
) -> Reply:
    """A 200 chat-completions response with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = list(tool_calls or [])
    if calls:
        message["tool_calls"] = [
            {
                "id": c.get("id", f"call_{i}"),
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"]
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments", {})),
                },
            }
            for i, c in enumerate(calls)
        ]
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    body = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1764460000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": dict(
            usage or {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        ),
    }
    return Reply(200, body)


def rate_limited(retry_after: float | str | None = 1) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
    return Reply(429, body, headers)


def server_error(status: int = 500, message: str = "internal error") -> Reply:
    return Reply(status, {"error": {"message": message, "type": "server_error"}})


def malformed_json() -> Reply:
    return Reply(200, b'{"choices": [ {"message": ', {"Content-Type": "application/json"})


def empty_content() -> Reply:
    return chat_completion("")


def context_length_error(limit: int = 128000, requested: int = 131072) -> Reply:
    message = (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{requested} tokens. Please reduce the length of the messages."
    )
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    return Reply(400, body)


def slow(reply: Reply, delay: float) -> Reply:
    return replace(reply, delay=delay)


def stream_chunks(chunks: Iterable[Mapping[str, Any]]) -> Reply:
    """A server-sent-events body: one ``data:`` line per chunk, then ``[DONE]``."""
    lines = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Reply(200, lines.encode("utf-8"), {"Content-Type": "text/event-stream"})


class ScriptedServer:
    """Loopback HTTP server answering from a script (see the module docstring)."""

    def __init__(self, default: Responder | None = None) -> None:
        self.default = default
        self.requests: list[RecordedRequest] = []
        self._script: deque[Responder] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    def script(self, *responders: Responder) -> ScriptedServer:
        with self._lock:
            self._script.extend(responders)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._script)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root: ``{url}/v1``."""
        return self.url + "/v1"

    def start(self) -> ScriptedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                recorded = RecordedRequest(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                reply = server._next(recorded)
                if reply.delay and server._stop.wait(reply.delay):
                    return
                data, content_type = reply.encoded()
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": content_type, **reply.headers}
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = _serve
            do_GET = _serve

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        httpd = self._httpd
        self._thread = threading.Thread(
            target=lambda: httpd.serve_forever(poll_interval=0.02),
            name="scripted-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ serving

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            responder = self._script.popleft() if self._script else self.default
        if responder is None:
            return server_error(500, "scripted server: no scripted response left")
        return responder(request) if callable(responder) else responder
