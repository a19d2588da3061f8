"""A scripted OpenAI-compatible HTTP server on loopback, for tests, demos and notebooks.

It speaks real HTTP (stdlib ``ThreadingHTTPServer`` in a background thread), so
clients are exercised with their real transport, timeouts and retries::

    from dashr_ext.testing import ScriptedServer, chat_completion, rate_limited

    with ScriptedServer() as server:
        server.script(rate_limited(retry_after=2), chat_completion("## Summary ..."))
        client = LLMSummarizer(base_url=server.base_url, model="m", api_key="k")
        ...
        assert server.requests[-1].json["messages"][-1]["role"] == "user"

**Script.** Replies are served in the order they were scripted; each is a :class:`Reply`
or a callable ``(RecordedRequest) -> Reply`` computed from the request. When the script
runs out, ``default`` (a reply or callable) answers, else a 500 that says so. Every
request is recorded (method, path, headers, raw body, parsed JSON, purpose), including the
ones answered by error replies.

**Compaction traffic.** Requests carrying ``X-Dashr-Purpose: compaction`` (the ``llm``
summarizer's) are answered by ``summarizer`` when it is set, without consuming the
script, so an agent's script and its compactions never interleave.

**Context-length errors on demand.** :meth:`ScriptedServer.overflow_next` makes the next
*n* model requests fail with a provider-style context-length error, and
``context_window_tokens`` fails every model request whose :func:`prompt_tokens` exceed it;
neither consumes the script, so the retried request gets the reply meant for it.

**A scripted model.** :func:`call_run_cell`, :func:`call_tool`, :func:`answer` and
:func:`read_archive` are responders for agent loops: they report provider-like ``usage``
computed from the request (:func:`prompt_tokens`) and give each tool call an id unique in
the server's life (``call_<request index>_<n>``). :func:`latest_checkpoint` finds the
newest checkpoint named in the footers a request carried, and :func:`last_tool_result`
the text of the request's last tool message.

**Bounded.** The server serves at most ``max_requests`` requests (later ones get a 503)
and stops by itself after ``idle_timeout_s`` seconds without a request; its threads are
daemons and idle keep-alive connections are closed after ``connection_timeout_s``.

**A realistic session without a model.** :func:`demo_messages` (with :data:`DEMO_TOOLS`,
:data:`DEMO_SYSTEM_PROMPT` and :func:`demo_facts`, the facts planted in it) is the scripted
coding-agent conversation ``dashr demo`` and the notebooks compact.

Reply helpers: :func:`chat_completion` (content and/or tool calls, usage),
:func:`rate_limited` (429 + ``Retry-After``), :func:`server_error`,
:func:`malformed_json`, :func:`empty_content`, :func:`context_length_error`,
:func:`slow` (delay before the response, to trigger client read timeouts) and
:func:`stream_chunks` (a ``text/event-stream`` body).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from ._demo import DEMO_SYSTEM_PROMPT, DEMO_TOOLS, demo_facts, demo_messages

if TYPE_CHECKING:
    from ._meter import TokenMeter

__all__ = [
    "ARCHIVE_REFERENCE",
    "DEMO_SYSTEM_PROMPT",
    "DEMO_TOOLS",
    "Computed",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedServer",
    "answer",
    "call_run_cell",
    "call_tool",
    "chat_completion",
    "context_length_error",
    "demo_facts",
    "demo_messages",
    "empty_content",
    "last_tool_result",
    "latest_checkpoint",
    "malformed_json",
    "prompt_tokens",
    "rate_limited",
    "read_archive",
    "server_error",
    "slow",
    "stations_task",
    "stream_chunks",
]

ARCHIVE_REFERENCE = re.compile(r'dashr_compaction_archive\["(c\d+)"\]')
"""How checkpoint footers and archive markers name an archive entry."""


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
    index: int = 0
    """0-based position among every request this server received."""

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def purpose(self) -> str | None:
        """The ``X-Dashr-Purpose`` header (``"compaction"``, ``"agent"``), if any."""
        return self.headers.get("x-dashr-purpose")

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the request body ([] when there are none)."""
        body = self.json
        messages = body.get("messages") if isinstance(body, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def tool_names(self) -> list[str]:
        """Names of the function tools the request offered, in order."""
        body = self.json
        tools = body.get("tools") if isinstance(body, dict) else None
        return [t["function"]["name"] for t in tools or [] if isinstance(t, dict)]


Computed = Callable[[RecordedRequest], Reply]
"""A reply computed from the request it answers."""
Responder = Reply | Computed
"""What a script holds: a fixed reply or one computed from the request."""


# --------------------------------------------------------------------------- replies


def chat_completion(
    content: str | None = "ok",
    *,
    model: str = "scripted-model",
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
    reasoning_content: str | None = None,
) -> Reply:
    """A 200 chat-completions response with one choice.

    ``tool_calls`` items are ``{"name", "arguments" (str or object), "id"?}``. Without
    ``usage``, a :class:`ScriptedServer` reports the request's own size
    (:func:`prompt_tokens`) like a provider would.
    """
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
        "usage": dict(usage) if usage is not None else None,
    }
    return Reply(200, body)


def _with_usage(reply: Reply, request: RecordedRequest) -> Reply:
    """A completion scripted without ``usage`` reports the size of the request it answers."""
    body = reply.body
    if not (isinstance(body, dict) and "usage" in body and body["usage"] is None):
        return reply
    choices = body.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content") or ""
    return replace(reply, body={**body, "usage": _usage(request, str(content))})


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
    """The 400 an OpenAI-style provider sends when the prompt exceeds the context window."""
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


# --------------------------------------------------------------------------- a scripted model


@cache
def _meter() -> TokenMeter:
    from ._meter import TokenMeter

    return TokenMeter()


def prompt_tokens(request: RecordedRequest) -> int:
    """The prompt size a provider would report for this request.

    Message texts, tool calls and tool schemas counted with the ``cl100k_base`` tokenizer,
    plus a few tokens of framing per message: deterministic, and close to what a real
    provider reports, so a meter anchored on it behaves as it would in production.
    """
    count = _meter().count_text
    total = 3
    for message in request.messages:
        total += 4 + count(_message_text(message))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += 4 + count(f"{function.get('name', '')} {function.get('arguments', '')}")
    body = request.json
    tools = body.get("tools") if isinstance(body, dict) else None
    if tools:
        total += count(json.dumps(tools, ensure_ascii=False))
    return total


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _usage(request: RecordedRequest, completion: str) -> dict[str, int]:
    prompt = prompt_tokens(request)
    completion_tokens = _meter().count_text(completion) + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


def call_tool(name: str, arguments: Mapping[str, Any], *, content: str | None = None) -> Computed:
    """A responder: the model calls tool ``name`` with ``arguments``, saying ``content``."""

    def respond(request: RecordedRequest) -> Reply:
        args = json.dumps(dict(arguments), ensure_ascii=False)
        call = {"id": f"call_{request.index}_0", "name": name, "arguments": args}
        return chat_completion(
            content, tool_calls=[call], usage=_usage(request, (content or "") + args)
        )

    return respond


def call_run_cell(code: str, *, content: str | None = None) -> Computed:
    """A responder: the model runs ``code`` with the ``run_cell`` tool."""
    return call_tool("run_cell", {"code": code}, content=content)


def answer(text: str | Callable[[RecordedRequest], str]) -> Computed:
    """A responder: the model's final text answer (no tool call), fixed or computed."""

    def respond(request: RecordedRequest) -> Reply:
        content = text(request) if callable(text) else text
        return chat_completion(content, usage=_usage(request, content))

    return respond


def latest_checkpoint(request: RecordedRequest) -> str | None:
    """The newest checkpoint id named (``dashr_compaction_archive["cN"]``) in the request.

    System messages are skipped: a system prompt may name an example id.
    """
    found: str | None = None
    for message in request.messages:
        if message.get("role") in ("system", "developer"):
            continue
        for match in ARCHIVE_REFERENCE.finditer(_message_text(message)):
            if found is None or int(match.group(1)[1:]) > int(found[1:]):
                found = match.group(1)
    return found


def last_tool_result(request: RecordedRequest) -> str | None:
    """The text of the request's last ``tool`` message, if any."""
    for message in reversed(request.messages):
        if message.get("role") == "tool":
            return _message_text(message)
    return None


def read_archive(
    code: str = 'print(dashr_compaction_archive["{checkpoint}"]["tool_results"][0]["text"])',
    *,
    content: str | None = "Reading the originals from the compaction archive.",
) -> Computed:
    """A responder: the model reads the archive entry of the newest checkpoint it was shown.

    ``code`` is formatted with ``checkpoint`` (the id found by :func:`latest_checkpoint` in
    the footers of the received messages). When the request names no checkpoint the model
    answers so in plain text instead of calling a tool.
    """

    def respond(request: RecordedRequest) -> Reply:
        checkpoint = latest_checkpoint(request)
        if checkpoint is None:
            return answer("I was shown no checkpoint footer, so there is no archive to read.")(
                request
            )
        return call_run_cell(code.replace("{checkpoint}", checkpoint), content=content)(request)

    return respond


# --------------------------------------------------------------------------- a scripted task

_STATION_SETUP = """\
import hashlib, random, statistics

def load_station(name, n=14):
    \"\"\"A simulated sensor feed: a calibration header, then one reading per line.\"\"\"
    rng = random.Random(name)
    print(f"station {name} | calibration {hashlib.sha1(name.encode()).hexdigest()[:10]}")
    rows = [round(rng.gauss(21.0, 1.8), 2) for _ in range(n)]
    for minute, celsius in enumerate(rows):
        print(f"  {name} t+{minute:02d}min {celsius:6.2f} C  rh={rng.randint(30, 70)}%")
    return rows

readings = {}
readings["north-1"] = load_station("north-1")"""
_STATION_MEANS = """\
means = {name: statistics.mean(rows) for name, rows in readings.items()}
print(", ".join(f"{name} {mean:.2f}" for name, mean in means.items()))"""
_WALK_BACK = """\
entry = dashr_compaction_archive["{checkpoint}"]
while entry["prior_checkpoints"]:  # back to the oldest checkpoint
    entry = dashr_compaction_archive[entry["prior_checkpoints"][0]["checkpoint"]]
print(entry["tool_results"][0]["text"])"""


def stations_task() -> list[tuple[str, list[Computed]]]:
    """The notebooks' scripted task: ``[(user prompt, responders of that turn), ...]``.

    Turn 1 loads eight simulated weather stations with ``run_cell`` (each prints a
    calibration header and fourteen readings: output that fills a small window) and reports
    the means. Turn 2 asks for the first station's calibration code, which by then only the
    archive holds: the model takes the checkpoint id from the footer it was shown, walks back
    through ``prior_checkpoints`` to the oldest entry and quotes what that cell printed.
    """
    stations = ["north-2", "east-1", "east-2", "south-1", "south-2", "west-1", "west-2"]

    def quote_calibration(request: RecordedRequest) -> str:
        found = re.search(r"station (\S+) \| calibration (\w+)", last_tool_result(request) or "")
        return (
            f"The first station, {found[1]}, printed calibration code {found[2]}." if found else "?"
        )

    load = [
        call_run_cell(_STATION_SETUP, content="I'll define a loader and start with north-1."),
        *(call_run_cell(f'readings["{s}"] = load_station("{s}")') for s in stations),
        call_run_cell(_STATION_MEANS),
        answer(lambda request: "Mean temperatures (°C): " + (last_tool_result(request) or "")),
    ]
    recall = [read_archive(_WALK_BACK), answer(quote_calibration)]
    return [
        ("Load the eight weather stations and report their mean temperatures.", load),
        ("Which calibration code did the first station print?", recall),
    ]


# --------------------------------------------------------------------------- the server


class _QuietServer(ThreadingHTTPServer):
    """Silent when a client disconnects (BrokenPipe/ConnectionReset); other errors print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)


class ScriptedServer:
    """Loopback HTTP server answering from a script (see the module docstring)."""

    def __init__(
        self,
        default: Responder | None = None,
        *,
        summarizer: Responder | None = None,
        context_window_tokens: int | None = None,
        max_requests: int = 10_000,
        idle_timeout_s: float = 600.0,
        connection_timeout_s: float = 30.0,
    ) -> None:
        self.default = default
        self.summarizer = summarizer
        """Answers ``X-Dashr-Purpose: compaction`` requests (None: they use the script)."""
        self.context_window_tokens = context_window_tokens
        """Model requests whose :func:`prompt_tokens` exceed this get a context-length error."""
        self.max_requests = max_requests
        self.idle_timeout_s = idle_timeout_s
        self.connection_timeout_s = connection_timeout_s
        self.requests: list[RecordedRequest] = []
        self._script: deque[Responder] = deque()
        self._overflows = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_activity = time.monotonic()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | None = None

    # ------------------------------------------------------------------ control

    def script(self, *responders: Responder) -> ScriptedServer:
        with self._lock:
            self._script.extend(responders)
        return self

    def overflow_next(self, count: int = 1) -> ScriptedServer:
        """The next ``count`` model requests fail with a context-length error (script kept)."""
        with self._lock:
            self._overflows += count
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._script)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """The requests that were not compaction requests (an agent's own calls)."""
        return [r for r in self.requests if r.purpose != "compaction"]

    @property
    def compaction_requests(self) -> list[RecordedRequest]:
        """The requests carrying ``X-Dashr-Purpose: compaction``."""
        return [r for r in self.requests if r.purpose == "compaction"]

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def url(self) -> str:
        if self._address is None:
            raise RuntimeError("the server was never started")
        host, port = self._address
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root: ``{url}/v1``."""
        return self.url + "/v1"

    def start(self) -> ScriptedServer:
        if self.running:
            return self
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = self.connection_timeout_s

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

        httpd = _QuietServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.timeout = 0.05
        host, port = httpd.server_address[:2]
        self._address = (str(host), int(port))
        self._httpd = httpd
        self._stop.clear()
        self._last_activity = time.monotonic()
        self._thread = threading.Thread(
            target=self._serve_until_stopped, args=(httpd,), name="scripted-server", daemon=True
        )
        self._thread.start()
        return self

    def _serve_until_stopped(self, httpd: ThreadingHTTPServer) -> None:
        try:
            while not self._stop.is_set():
                httpd.handle_request()
                if time.monotonic() - self._last_activity > self.idle_timeout_s:
                    break
        finally:
            httpd.server_close()

    def stop(self) -> None:
        """Stop serving and close the listening socket (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (
            f"<ScriptedServer {state}: {len(self.requests)} requests served, "
            f"{self.pending} scripted replies pending>"
        )

    # ------------------------------------------------------------------ serving

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._last_activity = time.monotonic()
            request.index = len(self.requests)
            self.requests.append(request)
            if request.index >= self.max_requests:
                return server_error(503, "scripted server: request limit reached")
            compaction = request.purpose == "compaction"
            responder: Responder | None
            if compaction and self.summarizer is not None:
                responder = self.summarizer
            elif not compaction and self._overflows > 0:
                self._overflows -= 1
                return context_length_error()
            elif (
                not compaction
                and self.context_window_tokens is not None
                and (size := prompt_tokens(request)) > self.context_window_tokens
            ):
                return context_length_error(self.context_window_tokens, size)
            else:
                responder = self._script.popleft() if self._script else self.default
        if responder is None:
            return server_error(500, "scripted server: no scripted response left")
        reply = responder(request) if callable(responder) else responder
        return _with_usage(reply, request)
