"""Summaries written by a model behind any OpenAI-compatible ``/chat/completions`` API.

SPEC §5.2; :class:`LLMSummarizer` documents the cache reuse, failures and key handling.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from .._checkpoints import is_checkpoint
from .._client import DEFAULT_TIMEOUT, ChatClient
from .._events import Event, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock
from .._jsontext import utf8_text
from .._pruned import shown_seq
from .._redaction import Secret
from .._templates import render
from ..errors import (
    ConfigError,
    DashrError,
    EndpointError,
    SummarizerEndpointError,
    SummarizerError,
)
from .base import SUMMARY_MODES, SummaryRequest, SummaryResult, span_text
from .keywords import trim_stub

__all__ = [
    "EndpointError",
    "LLMSummarizer",
]

PURPOSE = "compaction"
"""The ``X-Dashr-Purpose`` header value of every summarize request."""

_THINK = re.compile(r"<think>.*?</think>", re.S)
_FENCE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.S)
_WRAPPER = re.compile(r"^<compacted-summary>\s*(.*?)\s*</compacted-summary>$", re.S)
_FALLBACK_MESSAGE_CHARS = 2000
_INSTRUCTIONS = {"summary": "summarize", "state": "state"}
"""The template of the instruction appended to the replayed prefix, by request mode."""


class LLMSummarizer:
    """Summaries from an OpenAI-compatible chat-completions endpoint.

    ``base_url`` (else ``DASHR_BASE_URL``) is the API root, e.g.
    ``https://api.deepseek.com/v1`` or ``http://localhost:11434/v1``; ``model``
    (else ``DASHR_MODEL``) the model name. ``max_tokens`` caps the completion
    (default: the request's ``max_summary_tokens``). The connection options
    (``timeout``, retries and backoff, ``headers``, ``transport`` /
    ``async_transport``, ``sleep`` / ``asleep``, ``rng``) are those of
    :class:`~dashr_ext._client.ChatClient`; pass ``client=`` to share one instead.
    One long-lived ``httpx.Client`` (and, on first async use, one
    ``httpx.AsyncClient``) serves every call; :meth:`close` releases them.

    :class:`LLMSummarizer` works with DeepSeek, OpenAI, vLLM, Ollama, a LiteLLM proxy
    or anything else that speaks ``POST {base_url}/chat/completions``; the HTTP side
    (retries, backoff, ``Retry-After``, key handling) is :class:`~dashr_ext._client.ChatClient`.

    **Prompt-cache reuse.** The request replays ``request.prefix_messages`` (the
    conversation exactly as the model last saw it, system prompt first, plus the
    same tool schemas) and appends the rendered ``prompts/summarize.md`` as the
    final user message. The provider's cached prefix is therefore reused and only
    the instruction and the summary are new tokens. If the provider answers that
    this request is too long for its context window, the summarizer retries once
    with a compact transcript of the span instead (each message clipped), which
    gives up the cache to get a summary at all.

    **Modes** (``request.mode``, SPEC §6.3). ``"state"`` works like a summary with
    ``prompts/state.md`` as the instruction (the state checkpoint; ``previous_summary`` may
    be a previous state or an eight-section summary to adopt). ``"stub"`` sends no replay:
    its body is layered so that sibling stub calls of one pass share a cached prefix —
    ``[system: the stub.md preamble] [user: the pass-start state, as background]
    [user: the index's keyword lines and the latest stubs] [user: the slice's compact
    transcript + the stub.md instruction]``; everything before the slice is byte-identical
    across the calls of a pass, and there are no tools. A stub reply is cut after its
    ``Keywords:`` line (the line ends a stub; trailing chatter goes), and the line is
    rewritten to start exactly ``Keywords:``; a reply without one is kept as it is (the
    engine copes). Checkpoint nodes in a stub's span are left out. A state must be
    smaller than the previous state and the span together (its input), a stub and a
    summary smaller than the span.

    **Failures** raise :class:`~dashr_ext.errors.SummarizerError`: connect errors,
    timeouts, 408/409/429 and 5xx responses are retried ``max_retries`` times with
    exponential backoff and jitter (a ``Retry-After`` header is honoured, capped at
    ``retry_after_max`` seconds); other HTTP errors, malformed JSON, a missing
    ``choices[0].message.content``, an empty summary and a summary that is not
    smaller (in ``request.count_tokens`` tokens) than the span it condenses fail at
    once. Endpoint failures are :class:`~dashr_ext.errors.SummarizerEndpointError`,
    which is also an :class:`~dashr_ext.errors.EndpointError`.

    **The API key** (argument ``api_key``, else ``DASHR_API_KEY``, else
    ``DEEPSEEK_API_KEY``, else ``OPENAI_API_KEY``; none is fine for keyless local
    servers) is sent only in the ``Authorization`` header. It never appears in
    ``repr()``, in error messages or in anything returned; text from the server is
    scrubbed of it before it is shown.

    Every request carries ``X-Dashr-Purpose: compaction`` so a proxy can tell
    compaction traffic from the agent's own calls.
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
        client: ChatClient | None = None,
    ) -> None:
        # First, before any check can raise: no frame of a traceback holds the key itself.
        key = Secret(api_key)
        api_key = None
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ConfigError("LLMSummarizer.max_tokens", "an integer >= 1", max_tokens)
        if client is None:
            client = ChatClient.for_owner(
                "LLMSummarizer",
                base_url,
                model,
                key,
                timeout=timeout,
                max_retries=max_retries,
                backoff_base=backoff_base,
                backoff_max=backoff_max,
                retry_after_max=retry_after_max,
                headers=headers,
                label="llm summarizer",
                transport=transport,
                async_transport=async_transport,
                sleep=sleep,
                asleep=asleep,
                rng=rng,
            )
        elif not isinstance(client, ChatClient):
            raise ConfigError("LLMSummarizer.client", "a ChatClient or None", client)
        self._chat = client
        self.base_url = client.base_url
        self.url = client.url
        self.model: str | None = client.model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.prompts_dir = prompts_dir

    def __repr__(self) -> str:
        # Tolerates a half-built summarizer: a traceback shown with its locals reprs
        # __init__'s self.
        chat = getattr(self, "_chat", None)
        key = "set" if chat is not None and chat.has_key else "none"
        return (
            f"LLMSummarizer(base_url={getattr(self, 'base_url', None)!r}, "
            f"model={getattr(self, 'model', None)!r}, api_key=<{key}>, "
            f"max_retries={getattr(chat, 'max_retries', None)})"
        )

    __str__ = __repr__

    @property
    def client(self) -> ChatClient:
        """The endpoint client (shared HTTP connections, retries, key handling)."""
        return self._chat

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client(s). The summarizer can still be used: they reopen on demand."""
        self._chat.close()

    async def aclose(self) -> None:
        """Close the clients from async code."""
        await self._chat.aclose()

    def __enter__(self) -> LLMSummarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_client(self) -> httpx.Client:
        return self._chat.http_client()

    @property
    def _client(self) -> httpx.Client | None:
        return self._chat.http_client() if self._chat.is_open else None

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
        if request.mode == "stub":
            return self._stub_body(request), None
        template = _INSTRUCTIONS.get(request.mode)
        if template is None:
            raise SummarizerError(
                f"llm summarizer: unknown mode {request.mode!r}; expected one of "
                + ", ".join(repr(m) for m in SUMMARY_MODES)
            )
        try:
            instruction = render(
                template,
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

    def _stub_body(self, request: SummaryRequest) -> dict[str, Any]:
        """The layered body of a stub call: what precedes the slice is shared by a pass.

        ``[system: preamble] [user: background state] [user: index keywords, latest stubs]
        [user: slice transcript + instruction]``, each part rendered from ``stub.md``; a part
        with nothing to say is left out. No tools: a stub call is not a replay.
        """
        span = _stub_span(request)
        if not span:
            raise SummarizerError(
                "llm summarizer: stub mode needs a span with at least one surface event "
                "that is not a checkpoint node"
            )
        index = "\n".join(line.strip() for line in request.index_keywords if line.strip())
        recent = "\n\n".join(stub.strip() for stub in request.recent_stubs if stub.strip())
        parts: list[dict[str, Any]] = [
            {"system": True},
            {"background": (request.background or "").strip()},
            {"index": index, "recent": recent},
        ]
        messages: list[dict[str, Any]] = []
        try:
            for role, flags in zip(("system", "user", "user"), parts, strict=True):
                if content := self._stub_part(request, **flags):
                    messages.append({"role": role, "content": content})
            instruction = self._stub_part(request, instruction=True)
        except DashrError as exc:
            raise SummarizerError(f"llm summarizer: {exc}") from None
        slice_text = _transcript(span) + ("\n\n" + instruction if instruction else "")
        messages.append({"role": "user", "content": slice_text})
        return self._body(messages, None, request)

    def _stub_part(self, request: SummaryRequest, **flags: Any) -> str:
        values: dict[str, Any] = {
            "system": False,
            "background": None,
            "index": None,
            "recent": None,
            "instruction": False,
        }
        values.update({k: v or None for k, v in flags.items()})
        return render(
            "stub",
            prompts_dir=self.prompts_dir,
            max_summary_tokens=request.max_summary_tokens,
            **values,
        ).strip()

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

    # ------------------------------------------------------------------ transport

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._chat.complete(body, purpose=PURPOSE)
        except EndpointError as exc:
            raise _as_summarizer_error(exc) from None

    async def _apost(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._chat.acomplete(body, purpose=PURPOSE)
        except EndpointError as exc:
            raise _as_summarizer_error(exc) from None

    def _redact(self, text: str) -> str:
        return self._chat.redact(text)

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
        if request.mode == "stub":
            text = trim_stub(text)
        if not text:
            reason = choices[0].get("finish_reason")
            raise SummarizerError(
                f"llm summarizer: the model returned an empty summary (finish_reason={reason!r})"
            )
        out_tokens = request.count_tokens(text)
        span = _stub_span(request) if request.mode == "stub" else request.span
        in_tokens = request.count_tokens(span_text(span))
        what = "the span"
        if request.mode == "state" and request.previous_summary:
            # A state rewrites the previous state with the span: both are its input.
            in_tokens += request.count_tokens(request.previous_summary)
            what = "the previous state and the span"
        if out_tokens >= in_tokens:
            raise SummarizerError(
                f"llm summarizer: the summary ({out_tokens} tokens) is not smaller than {what} "
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


def _as_summarizer_error(exc: EndpointError) -> SummarizerEndpointError:
    return SummarizerEndpointError(
        str(exc),
        status_code=exc.status_code,
        attempts=exc.attempts,
        context_length=exc.context_length,
    )


def _clean(text: str) -> str:
    """The summary without reasoning tags, a wrapping code fence or a wrapping summary tag.

    Surrogates UTF-8 cannot encode (a JSON ``"\\ud800"`` escape in the reply) are replaced
    first, as :func:`~dashr_ext._jsontext.utf8_text` does: a lone one by U+FFFD.
    """
    text = _THINK.sub("", utf8_text(text)).strip()
    if match := _FENCE.match(text):
        text = match.group(1).strip()
    if match := _WRAPPER.match(text):
        text = match.group(1).strip()
    return text


def _stub_span(request: SummaryRequest) -> list[Event]:
    """A stub's slice: the span's surface events without checkpoint nodes."""
    return [e for e in request.span if e.is_surface and not is_checkpoint(e)]


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
        lines.append(f"{label} (seq {shown_seq(event)}): {body}")
    lines.append("</conversation>")
    return "\n".join(lines)
