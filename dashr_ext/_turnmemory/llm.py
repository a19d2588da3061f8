"""The ``llm`` turn compressor: model workers editing the working turn with four tools
(SPEC §6.4; seed 003, D-002, D-004, D-006, D-007, D-009).

:class:`LLMTurnCompressor` documents the worker loop; :mod:`.worker_tools` holds the tools
and their dispatcher, ``prompts/turn-compression.md`` the workers' instructions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .._client import DEFAULT_TIMEOUT, ChatClient
from .._jsontext import utf8_json
from .._redaction import Secret
from .._templates import Template, load_template, parse_template
from ..errors import ConfigError, EndpointError, TurnMemoryError
from .context import TurnContext
from .editor import TurnEditor, catalog_text
from .nodes import TurnNode
from .worker_tools import dispatch, editor_tool_schemas

__all__ = ["DEFAULT_MAX_STEPS", "PURPOSE", "TEMPLATE", "LLMTurnCompressor"]

PURPOSE = "compaction"
"""The ``X-Dashr-Purpose`` header of every worker request (turn memory is compaction traffic)."""
TEMPLATE = "turn-compression"
"""The workers' instructions: ``prompts/turn-compression.md``."""
DEFAULT_MAX_STEPS = 24
"""Model calls one worker may make before it counts as ended without a finish."""


@dataclass(frozen=True, slots=True)
class _End:
    """How one worker ended: with the accepted finish, or why not."""

    finished: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class _Call:
    id: str
    name: str
    arguments: str


class LLMTurnCompressor:
    """Rewrites a completed turn with a model behind an OpenAI-compatible endpoint.

    Set it as ``Dashr.turn_compressor`` (``d.turn_compressor = LLMTurnCompressor(
    base_url=..., model=...)``); the job then calls :meth:`compress` with the turn's nodes and
    a :class:`~.context.TurnContext`. The connection options are those of
    :class:`~dashr_ext._summarizers.llm.LLMSummarizer` (``base_url`` else ``DASHR_BASE_URL``,
    ``model`` else ``DASHR_MODEL``, ``api_key`` else ``DASHR_API_KEY`` / ``DEEPSEEK_API_KEY``
    / ``OPENAI_API_KEY``, ``timeout``, retries and backoff, ``headers``, ``transport``,
    ``sleep``, ``rng``; or ``client=`` to share a :class:`~dashr_ext._client.ChatClient`);
    ``max_tokens``, ``temperature`` and ``extra_body`` go into every request body,
    ``prompts_dir`` overrides where the template is read from. Workers run on the job's
    thread, so there is no async transport.

    **Workers.** A worker is a short tool loop over the job's
    :class:`~.editor.TurnEditor`: a request, then each tool call of the reply run by
    :func:`~.worker_tools.dispatch`, its result appended, and the next request, for at most
    ``max_steps`` requests. It succeeds only by an accepted ``finish_turn_compression``; a
    reply without a tool call, running out of steps, or a failed request (after the client's
    retries) ends it without one. Every accepted replace stays in the editor, so the next
    worker continues from it. The first worker of a job *forks* the main conversation: its
    request is the main request's prefix — ``model``, then ``messages`` (the system prompt and
    everything up to and including the turn's last node, as ``Session.messages()`` renders
    them, byte for byte), then ``tools`` starting with the main request's tools in their order —
    followed by the rendered template as a new user message; the editor tools come after the
    main tools, and a call to any tool but the four editor tools is refused without running
    anything. Every later worker is a *fresh* one: no prefix, only the editor tools, and the
    template rendered with the current catalog and the current nodes' text embedded.

    Why the fork keeps the main tools: its request is then the main request with additions
    only (two messages after the turn, four tools after the main ones), never a change, and
    its serialized body matches the main request's through the turn's last message. How much
    of it a provider's prompt cache serves depends on where the provider renders tool schemas:
    one that renders them before the messages reuses the prefix up to the main tools. The
    editor tools never reach a main request: ``Dashr.request_tools()`` does not know them.

    **Budget.** ``turn_worker_attempts`` (the context's ``worker_attempts``) counts
    consecutive workers that ended without an accepted edit; one accepted replace resets it
    (workers that keep making progress are not counted, each is bounded by ``max_steps``).
    When it is used up, :meth:`compress` raises :class:`~dashr_ext.errors.TurnMemoryError`
    saying how the last worker ended; the job records it as ``failed`` and the surface stays
    as it was. A template that is missing or fails to render raises
    :class:`~dashr_ext.errors.PromptError` before any request. A finish with no accepted edit
    returns None: the turn was already compact (a no-op). Once the context says the job is
    cancelled (the session closed), the worker stops before its next request.

    The template is read once per job, when it starts (an edit applies to the next job); every
    worker renders it with ``fork`` / ``fresh``, ``turn``, ``node_count``, ``catalog`` (the
    editor's catalog, inserted as is) and ``nodes`` (a fresh worker's view of the nodes; empty
    for the fork). Requests carry ``X-Dashr-Purpose: compaction``.
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
        max_steps: int = DEFAULT_MAX_STEPS,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
        client: ChatClient | None = None,
    ) -> None:
        # First, before any check can raise: no frame of a traceback holds the key itself.
        key = Secret(api_key)
        api_key = None
        for name, value in (("max_tokens", max_tokens), ("max_steps", max_steps)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"LLMTurnCompressor.{name}", "an integer >= 1", value)
        if client is None:
            client = ChatClient.for_owner(
                "LLMTurnCompressor",
                base_url,
                model,
                key,
                timeout=timeout,
                max_retries=max_retries,
                backoff_base=backoff_base,
                backoff_max=backoff_max,
                retry_after_max=retry_after_max,
                headers=headers,
                label="llm turn compressor",
                transport=transport,
                sleep=sleep,
                rng=rng,
            )
        elif not isinstance(client, ChatClient):
            raise ConfigError("LLMTurnCompressor.client", "a ChatClient or None", client)
        self._chat = client
        self.base_url = client.base_url
        self.model: str = client.model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.prompts_dir = prompts_dir
        self.max_steps = max_steps

    def __repr__(self) -> str:
        chat = getattr(self, "_chat", None)
        key = "set" if chat is not None and chat.has_key else "none"
        return (
            f"LLMTurnCompressor(base_url={getattr(self, 'base_url', None)!r}, "
            f"model={getattr(self, 'model', None)!r}, api_key=<{key}>, "
            f"max_steps={getattr(self, 'max_steps', None)})"
        )

    __str__ = __repr__

    @property
    def client(self) -> ChatClient:
        """The endpoint client (shared HTTP connections, retries, key handling)."""
        return self._chat

    def close(self) -> None:
        """Close the HTTP client; it reopens on demand."""
        self._chat.close()

    def __enter__(self) -> LLMTurnCompressor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ compress

    def __call__(self, nodes: Sequence[TurnNode]) -> TurnEditor | None:
        """Compress without a job's context: fresh workers only, the default budget."""
        return self.compress(nodes, None)

    def compress(self, nodes: Sequence[TurnNode], context: TurnContext | None) -> TurnEditor | None:
        """Run workers until one finishes (the editor), the turn needs nothing (None), or the
        budget is used up (:class:`~dashr_ext.errors.TurnMemoryError`)."""
        ctx = context if context is not None else TurnContext(0, "", (), ())
        editor = TurnEditor(nodes, read_max_chars=ctx.read_max_chars)
        template = parse_template(load_template(TEMPLATE, self.prompts_dir), f"{TEMPLATE}.md")
        idle = workers = 0
        while True:
            fork = context is not None and workers == 0
            prompt = _prompt(template, editor, ctx.turn, fork=fork)
            workers += 1
            before = editor.revision
            end = self._worker(editor, prompt, ctx if fork else None, ctx.cancelled)
            if end.finished:
                return editor if editor.revision else None
            idle = 0 if editor.revision > before else idle + 1
            if idle >= ctx.worker_attempts:
                raise TurnMemoryError(
                    f"llm turn compressor: {idle} consecutive worker{'s' if idle != 1 else ''} "
                    f"made no accepted edit (turn_worker_attempts={ctx.worker_attempts}; "
                    f"{workers} worker{'s' if workers != 1 else ''} in all); the last one "
                    f"ended: {end.reason}. The turn is left as it was."
                )

    def _worker(
        self,
        editor: TurnEditor,
        prompt: str,
        fork: TurnContext | None,
        cancelled: Callable[[], bool],
    ) -> _End:
        """One worker's tool loop (``fork``: the job's context, for the first worker)."""
        editor_tools = editor_tool_schemas()
        if fork is not None:
            messages: list[Mapping[str, Any]] = [*fork.messages]
            tools: list[Mapping[str, Any]] = [*fork.tools, *editor_tools]
        else:
            messages, tools = [], [*editor_tools]
        messages.append({"role": "user", "content": prompt})
        for step in range(self.max_steps):
            if cancelled():
                raise TurnMemoryError("llm turn compressor: cancelled (the session closed)")
            try:
                data = self._chat.complete(self._body(messages, tools), purpose=PURPOSE)
            except EndpointError as exc:
                return _End(False, f"its request failed: {exc}")
            reply = _reply(data, step)
            if isinstance(reply, str):
                return _End(False, reply)
            message, calls = reply
            messages.append(message)
            if not calls:
                return _End(
                    False, "it answered without calling a tool (no finish_turn_compression)"
                )
            for call in calls:
                outcome = dispatch(call.name, call.arguments, editor)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.text})
                if outcome.finished:
                    return _End(True)
        return _End(False, f"it used its {self.max_steps} requests without finishing")

    def _body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        # model, messages, tools first and in the main request's order: the prefix it shares
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "tools": list(tools),
            "stream": False,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body


# --------------------------------------------------------------------------- helpers


def _prompt(template: Template, editor: TurnEditor, turn: int, *, fork: bool) -> str:
    """The template rendered for one worker (raises PromptError when it does not render)."""
    nodes = editor.nodes
    embedded = "" if fork else str(editor.read(f"{nodes[0].id}..{nodes[-1].id}"))
    return template.render(
        {
            "fork": fork,
            "fresh": not fork,
            "turn": turn,
            "node_count": len(editor.originals),
            "catalog": catalog_text(editor.list()),
            "nodes": embedded,
        }
    )


def _reply(data: Mapping[str, Any], step: int) -> tuple[dict[str, Any], tuple[_Call, ...]] | str:
    """The assistant message to send back and its tool calls, or why the reply is unusable."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(message, Mapping):
        return f"its reply has no choices[0].message (keys: {sorted(data)[:10]})"
    message = utf8_json(message)
    content = message.get("content")
    raw = message.get("tool_calls")
    calls: list[_Call] = []
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        call = item if isinstance(item, Mapping) else {}
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        call_id = call.get("id")
        calls.append(
            _Call(
                call_id if isinstance(call_id, str) and call_id else f"call_{step}_{i}",
                name if isinstance(name, str) and name else "unnamed",
                arguments,
            )
        )
    record: dict[str, Any] = {
        "role": "assistant",
        "content": content if isinstance(content, str) else None,
    }
    if calls:
        record["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in calls
        ]
    return record, tuple(calls)
