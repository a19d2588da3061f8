"""The agent: a small tool-using loop over a session, in this process or in a kernel.

:class:`Agent` talks to any OpenAI-compatible ``/chat/completions`` endpoint through a
:class:`~dashr_ext.ChatClient` and to its session through an :class:`AgentHost`: a
:class:`~dashr_ext.Dashr` here (its ``run_cell`` tool runs code through
:mod:`dashr_ext._cells`) or a :class:`~dashr_ext.bridge.KernelSession` (the same loop; cells
run in that kernel). The recall tools are offered once a checkpoint exists. SPEC §10 and §15::

    from dashr_ext import CompactionConfig, Dashr
    from dashr_ext.agent import Agent

    d = Dashr.create(config=CompactionConfig(recency_window_tokens=60_000, retain_tokens=8_000))
    agent = Agent(d, base_url="https://api.deepseek.com/v1", model="deepseek-chat",
                  shell=get_ipython(), on_event=lambda step: print(step.line()))
    print(agent.run_turn("Load data.csv and tell me which column has missing values."))

    # The same loop against a session living in a Jupyter kernel:
    agent = Agent(KernelSession(kernel_client), base_url=..., model=...)

This module never imports IPython; cells run in a shell only through :mod:`dashr_ext._cells`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._agent_host import AgentHost, CellResult, DashrHost, host_problem, tool_name
from ._cells import (
    DEFAULT_TOOL_OUTPUT_MAX_CHARS,
    RUN_CELL,
    CellOutput,
    run_cell,
    run_cell_schema,
    truncate_output,
)
from ._controller import Dashr
from ._jsontext import MAX_JSON_DEPTH, json_depth, loads_json, utf8_json
from ._plaintext import PlainText
from ._recall import TOOL_NAMES
from ._redaction import Secret, scrub_keys
from ._templates import render
from .errors import AgentError, ConfigError, EndpointError, RecallError

if TYPE_CHECKING:
    # Annotations only: the shell is passed through to dashr_ext._cells, never used here.
    from IPython.core.interactiveshell import InteractiveShell

    from ._client import ChatClient

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TOOL_OUTPUT_MAX_CHARS",
    "RUN_CELL",
    "Agent",
    "AgentHost",
    "AgentReply",
    "CellOutput",
    "CellResult",
    "DashrHost",
    "StepReport",
    "run_cell",
    "run_cell_schema",
]

PURPOSE = "agent"
"""The ``X-Dashr-Purpose`` header of the agent's own requests."""
DEFAULT_MAX_STEPS = 30

TurnEndReason = Literal["completed", "max-steps"]


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class StepReport:
    """What one step did; :meth:`line` is its one-line progress text."""

    turn: int
    step: int
    tools: tuple[str, ...]
    """Names of the tools called, in order (empty for the final answer)."""
    tool_errors: tuple[bool, ...]
    """For each tool call, whether its result is an error."""
    tokens: int
    """The measured size of the request that was answered (``dashr.measure().total``)."""
    prompt_tokens: int | None
    """The prompt size the provider reported, if it did."""
    compacted: tuple[str, ...]
    """Checkpoints committed before this step's request (pressure or overflow), oldest first."""
    compaction_errors: tuple[str, ...]
    """Errors of compaction passes that failed before this step's request."""
    overflow_retry: bool
    """The provider said the request was too long; it was compacted and sent once more."""

    def line(self) -> str:
        """E.g. ``step 3: run_cell · ~5231 tokens · compacted → c57``."""
        tools = ", ".join(
            f"{name} (error)" if failed else name
            for name, failed in zip(self.tools, self.tool_errors, strict=True)
        )
        parts = [f"step {self.step}: {tools or 'answer'}", f"~{self.tokens} tokens"]
        if self.overflow_retry:
            parts.append("context overflow → retried once")
        if self.compacted:
            parts.append("compacted → " + ", ".join(self.compacted))
        parts.extend(f"compaction failed: {error}" for error in self.compaction_errors)
        return " · ".join(parts)


class AgentReply(PlainText):
    """The final assistant text of a turn (``str``), with how the turn went.

    ``reason`` is ``"completed"`` or ``"max-steps"`` (then the text is the last assistant text,
    possibly empty); ``steps`` the step reports; ``checkpoints`` the checkpoints committed
    during the turn. IPython shows the plain text.
    """

    reason: TurnEndReason
    turn: int
    steps: tuple[StepReport, ...]
    checkpoints: tuple[str, ...]

    def __new__(
        cls,
        text: str,
        *,
        reason: TurnEndReason,
        turn: int,
        steps: tuple[StepReport, ...],
        checkpoints: tuple[str, ...],
    ) -> AgentReply:
        obj = super().__new__(cls, text)
        obj.reason = reason
        obj.turn = turn
        obj.steps = steps
        obj.checkpoints = checkpoints
        return obj


# --------------------------------------------------------------------------- the loop


@dataclass(frozen=True)
class _Call:
    id: str
    name: str
    arguments: str
    """The JSON text recorded in the session."""
    problem: str | None = None
    """Why the call cannot run as sent (e.g. its arguments are not JSON)."""


@dataclass(frozen=True)
class _Exchange:
    message: dict[str, Any]
    calls: tuple[_Call, ...]
    tokens: int
    prompt_tokens: int | None
    overflow_retry: bool


class Agent:
    """A tool-using agent loop over a session (see the module doc).

    ``host`` is a :class:`~dashr_ext.Dashr` (cells run in this process) or any
    :class:`AgentHost`, e.g. a :class:`~dashr_ext.bridge.KernelSession` (cells run in its
    kernel, where the extension binds the archive names itself). Give either ``client``
    (a :class:`~dashr_ext.ChatClient`, not closed by the agent) or ``base_url`` / ``model``
    / ``api_key`` (each else from ``DASHR_BASE_URL``, ``DASHR_MODEL`` and
    ``DASHR_API_KEY``/``DEEPSEEK_API_KEY``/``OPENAI_API_KEY``). With a ``Dashr``, ``shell``
    is the IPython shell cells run in; without one they run in ``namespace`` (default: a new
    dict); either way it gets ``dashr_compaction_archive`` and the ``history_*`` helpers of
    this session, so the instructions in checkpoint footers work as written (see
    :class:`DashrHost`). Tool results are cut to ``tool_output_max_chars`` around an
    explicit ``… [output truncated: +N chars] …`` marker. ``system_prompt`` replaces the
    session's; when neither exists, ``prompts/agent.md`` is installed at the first turn.
    ``max_tokens``, ``temperature`` and ``extra_body`` go into every request body.
    ``on_event`` is called with a :class:`StepReport` after every step.
    """

    def __init__(
        self,
        host: Dashr | AgentHost,
        *,
        client: ChatClient | None = None,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        shell: InteractiveShell | None = None,
        namespace: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        on_event: Callable[[StepReport], None] | None = None,
    ) -> None:
        from ._client import ChatClient  # httpx loads with the first agent, not on import

        # First, before any check can raise: no frame of a traceback holds the key itself.
        key = Secret(api_key)
        api_key = None
        _check_int("max_steps", max_steps, 1)
        _check_int("tool_output_max_chars", tool_output_max_chars, 200)
        if max_tokens is not None:
            _check_int("max_tokens", max_tokens, 1)
        if system_prompt is not None and (not isinstance(system_prompt, str) or not system_prompt):
            raise ConfigError("Agent.system_prompt", "a non-empty string or None", system_prompt)
        if shell is not None and namespace is not None:
            raise ConfigError(
                "Agent.namespace",
                "None when a shell is given (cells run in shell.user_ns)",
                "a dict",
            )
        if not isinstance(host, Dashr):
            problem = host_problem(host)
            if problem is not None:
                raise ConfigError("Agent.host", "a Dashr or an AgentHost", problem)
            if shell is not None or namespace is not None:
                raise ConfigError(
                    "Agent.shell",
                    "None unless the host is a Dashr (cells run where the host runs them)",
                    "a shell" if shell is not None else "a namespace",
                )
        if client is not None:
            if not isinstance(client, ChatClient):
                raise ConfigError("Agent.client", "a ChatClient or None", client)
            given = [
                name
                for name, value in (("base_url", base_url), ("model", model))
                if value is not None
            ] + (["api_key"] if key.given else [])
            if given:
                raise ConfigError(
                    "Agent.client",
                    "either client or base_url/model/api_key, not both",
                    f"client and {', '.join(given)}",
                )
            self.client = client
            self._owns_client = False
        else:
            self.client = ChatClient(base_url, model, key, label="agent")
            self._owns_client = True
        self.host: AgentHost = (
            DashrHost(host, shell=shell, namespace=namespace) if isinstance(host, Dashr) else host
        )
        self.dashr: Dashr | None = host if isinstance(host, Dashr) else None
        """The session when it lives in this process (None for a remote host)."""
        self.shell = shell
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.tool_output_max_chars = tool_output_max_chars
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.on_event = on_event
        self._running = False
        self._schema = run_cell_schema(tool_output_max_chars)
        self._install_schema()

    def __repr__(self) -> str:
        # Tolerates a half-built agent: a traceback shown with its locals reprs __init__'s self.
        if not all(hasattr(self, a) for a in ("client", "host", "shell", "max_steps")):
            return "<Agent (not initialised)>"
        if self.dashr is None:
            return (
                f"<Agent model={self.client.model!r} on {self.host!r}, max_steps={self.max_steps}>"
            )
        where = "IPython shell" if self.shell is not None else "plain namespace"
        return (
            f"<Agent model={self.client.model!r} session={self.dashr.session.id} ({where}), "
            f"max_steps={self.max_steps}>"
        )

    def close(self) -> None:
        """Close the HTTP client when the agent created it; withdraw its ``run_cell`` schema.

        The schema leaves the host's ``extra_tools`` only while it is still this agent's
        (another agent may have replaced it since); a remote host's list holds copies, so
        there an entry equal to this agent's schema leaves.
        """
        tools = self.host.extra_tools
        local = self.dashr is not None
        kept = [t for t in tools if (t is not self._schema if local else t != self._schema)]
        if len(kept) != len(tools):
            self.host.extra_tools = kept
        if self._owns_client:
            self.client.close()

    def _install_schema(self) -> None:
        """Make this agent's schema the one ``run_cell`` entry of the host's ``extra_tools``.

        The meter counts ``extra_tools`` in every request's envelope; the schema depends on
        ``tool_output_max_chars``, so an earlier agent's entry is replaced, not added to.
        """
        tools = self.host.extra_tools
        kept = [t for t in tools if tool_name(t) != RUN_CELL]
        at = next((i for i, t in enumerate(tools) if tool_name(t) == RUN_CELL), len(kept))
        kept.insert(at, self._schema)
        if kept != tools or self.dashr is not None:
            self.host.extra_tools = kept

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tools(self) -> list[dict[str, Any]]:
        """The ``tools`` of the next request: ``run_cell``, then the recall tools if offered."""
        return [run_cell_schema(self.tool_output_max_chars), *self.host.tool_schemas()]

    # ------------------------------------------------------------------ a turn

    def run_turn(self, user_text: str) -> AgentReply:
        """Work on ``user_text`` until the model answers without a tool call or steps run out.

        The turn ends ``completed`` (an answer without a tool call) or ``max-steps``. Each
        step is ``begin_step``; ``host.request_messages()`` (the pressure check, which may
        compact, plus the post-compaction pointer); the request; the provider's ``usage``
        through ``host.report_usage``; the assistant message; one result per tool call;
        ``end_step``. Every message goes through the session, with explicit markers.

        When the provider answers that the request is too long
        (:attr:`~dashr_ext.errors.EndpointError.context_length`), ``host.handle_overflow()``
        runs and, when it reduced the context, the request is sent again exactly once;
        otherwise, or when the retry fails too, the :class:`~dashr_ext.errors.EndpointError`
        is raised. Any exception, ``KeyboardInterrupt`` included, leaves a consistent log
        before it propagates: each tool call still without a result gets one saying it was
        interrupted, and the turn ends ``interrupted`` (``KeyboardInterrupt``) or ``error``;
        a turn a dead process left open is closed the same way when the next turn starts.
        """
        if not isinstance(user_text, str) or not user_text.strip():
            raise AgentError(f"user_text: expected a non-empty string, got {user_text!r}")
        if self._running:
            raise AgentError("a turn of this agent is already running; wait for it to finish")
        self._running = True
        try:
            return self._run_turn(user_text)
        finally:
            self._running = False

    def _run_turn(self, user_text: str) -> AgentReply:
        host = self.host
        self._install_schema()  # closed and reused, or another agent's schema since
        self._close_turn("interrupted", "the process running this turn stopped")
        self._install_system_prompt()
        start = len(host)
        host.begin_turn()
        turn = host.open_turn or 0
        steps: list[StepReport] = []
        text = ""
        try:
            host.record_openai({"role": "user", "content": user_text})
            for _ in range(self.max_steps):
                report, text, done = self._step(turn)
                steps.append(report)
                if self.on_event is not None:
                    self.on_event(report)
                if done:
                    host.end_turn("completed")
                    return self._reply(text, "completed", turn, steps, start)
            host.end_turn("max-steps")
            return self._reply(text, "max-steps", turn, steps, start)
        except BaseException as exc:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
            try:
                self._close_turn(reason, f"{type(exc).__name__} ended the turn")
            except Exception as cleanup:
                exc.add_note(f"dashr_ext.agent: the turn could not be closed cleanly: {cleanup}")
            raise

    def _step(self, turn: int) -> tuple[StepReport, str, bool]:
        """One step: request, assistant message, tool results. (report, text, turn done)."""
        host = self.host
        host.begin_step()
        open_step = host.open_step
        step = open_step[1] if open_step is not None else 0
        watch = len(host)
        exchange = self._request()
        compacted, compaction_errors = host.compactions(watch)
        host.record_openai(exchange.message)
        failed: list[bool] = []
        for call in exchange.calls:
            text, is_error, interrupted = self._run_tool(call)
            host.append_tool_result(
                call.id, text, tool_name=call.name, is_error=is_error or interrupted
            )
            failed.append(is_error or interrupted)
            if interrupted:
                raise KeyboardInterrupt
        host.end_step()
        report = StepReport(
            turn=turn,
            step=step,
            tools=tuple(call.name for call in exchange.calls),
            tool_errors=tuple(failed),
            tokens=exchange.tokens,
            prompt_tokens=exchange.prompt_tokens,
            compacted=compacted,
            compaction_errors=compaction_errors,
            overflow_retry=exchange.overflow_retry,
        )
        content = exchange.message.get("content")
        return report, content if isinstance(content, str) else "", not exchange.calls

    def _reply(
        self, text: str, reason: TurnEndReason, turn: int, steps: list[StepReport], start: int
    ) -> AgentReply:
        compacted, _ = self.host.compactions(start)
        return AgentReply(text, reason=reason, turn=turn, steps=tuple(steps), checkpoints=compacted)

    # ------------------------------------------------------------------ one request

    def _request(self) -> _Exchange:
        host = self.host
        messages = host.request_messages()
        tokens = host.measure().total
        overflow_retry = False
        try:
            data = self.client.complete(self._body(messages), purpose=PURPOSE)
        except EndpointError as exc:
            if not exc.context_length or not host.handle_overflow():
                raise
            overflow_retry = True
            messages = host.request_messages()
            tokens = host.measure().total
            data = self.client.complete(self._body(messages), purpose=PURPOSE)
        message, calls = self._assistant_message(data)
        usage = data.get("usage")
        prompt_tokens = _usage_int(usage, "prompt_tokens")
        if prompt_tokens is not None:
            # Before the assistant message is recorded: the report describes the request.
            host.report_usage(prompt_tokens, _usage_int(usage, "completion_tokens"))
        return _Exchange(message, calls, tokens, prompt_tokens, overflow_retry)

    def _body(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.client.model,
            "messages": messages,
            "tools": self.tools(),
            "stream": False,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    def _assistant_message(
        self, data: Mapping[str, Any]
    ) -> tuple[dict[str, Any], tuple[_Call, ...]]:
        """The OpenAI assistant message to record, and its tool calls made safe to record."""
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            raise EndpointError(
                f"agent: {self.client.url} answered without choices[0].message "
                f"(keys: {sorted(data)[:10]})",
                status_code=200,
            )
        message = utf8_json(message)  # a "\ud800" escape must not end the turn at the write
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            content = str(content)
        calls = self._calls(message.get("tool_calls"))
        record: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            record["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            record["reasoning_content"] = reasoning
        refusal = message.get("refusal")
        if isinstance(refusal, str):
            record["refusal"] = refusal
        return record, calls

    def _calls(self, raw: object) -> tuple[_Call, ...]:
        """Tool calls with ids unique in the session and arguments that are JSON objects."""
        if not isinstance(raw, list):
            return ()
        host = self.host
        length: int | None = None  # over a remote host, len() is a round trip: only if needed
        used: set[str] = set()
        calls: list[_Call] = []
        for i, item in enumerate(raw):
            call = item if isinstance(item, Mapping) else {}
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            name = function.get("name")
            name = name if isinstance(name, str) and name else "unnamed"
            arguments, problem = _call_arguments(function.get("arguments"))
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                length = len(host) if length is None else length
                call_id = f"call_{length}_{i}"
            base, n = call_id, 1
            while call_id in used or host.tool_call_seq(call_id) is not None:
                n += 1
                call_id = f"{base}~{n}"
            used.add(call_id)
            calls.append(_Call(call_id, name, arguments, problem))
        return tuple(calls)

    # ------------------------------------------------------------------ tools

    def _run_tool(self, call: _Call) -> tuple[str, bool, bool]:
        """(result text, is error, interrupted) of one tool call."""
        if call.problem is not None:
            return f"error: {call.name}: {call.problem}", True, False
        arguments = loads_json(call.arguments)
        if call.name == RUN_CELL:
            code = arguments.get("code")
            unknown = sorted(set(arguments) - {"code"})
            if not isinstance(code, str) or unknown:
                return (
                    'error: run_cell takes exactly one argument, "code" (a string of Python); '
                    f"got {sorted(arguments)}",
                    True,
                    False,
                )
            output = self.host.run_cell(code)
            # Keys are scrubbed before the cut, which could split one (SPEC §12).
            return (
                truncate_output(scrub_keys(output.text), self.tool_output_max_chars),
                output.is_error,
                output.interrupted,
            )
        if call.name in TOOL_NAMES:
            try:
                # The JSON text as recorded, not the parsed object: a "\ud800" escape in it
                # stays an escape on its way to a remote host, whose check then refuses it.
                text = self.host.call_tool(call.name, call.arguments)
            except RecallError as exc:
                return f"error: {exc}", True, False
            return truncate_output(scrub_keys(text), self.tool_output_max_chars), False, False
        offered = ", ".join(t["function"]["name"] for t in self.tools())
        return f"error: unknown tool {call.name!r}; the tools are: {offered}", True, False

    # ------------------------------------------------------------------ bookkeeping

    def _install_system_prompt(self) -> None:
        host = self.host
        current = host.system_prompt
        wanted = self.system_prompt
        if wanted is None and current is None:
            wanted = render("agent", tool_output_max_chars=self.tool_output_max_chars).strip()
        if wanted is not None and wanted != current:
            host.record_openai({"role": "system", "content": wanted})

    def _close_turn(self, reason: str, why: str) -> None:
        """Answer every tool call still waiting for a result, then end the open turn."""
        host = self.host
        if host.read_only:
            return
        for call_id in host.pending_tool_calls():
            host.append_tool_result(
                call_id,
                f"[{reason}: {why} before this tool call finished; it may not have run, "
                "or run only in part]",
                is_error=True,
            )
        if host.open_turn is not None:
            host.end_turn(reason)


# --------------------------------------------------------------------------- helpers


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"Agent.{name}", f"an integer >= {low}", value)


def _call_arguments(raw: object) -> tuple[str, str | None]:
    """The JSON text to record for a call's arguments, and why the call cannot run (or None).

    The text is parsed strictly (:func:`~dashr_ext._jsontext.loads_json`: no ``NaN``, at most
    ``MAX_JSON_DEPTH`` levels, no recursion); arguments that fail are recorded wrapped as
    ``{"unparsed_arguments": "<what the model sent>"}``.
    """
    if raw is None:
        raw = "{}"
    elif not isinstance(raw, str):
        if json_depth(raw) > MAX_JSON_DEPTH:  # json.dumps would recurse that deep
            problem = f"the arguments nest more than {MAX_JSON_DEPTH} levels deep"
            return json.dumps({"unparsed_arguments": f"({problem})"}), problem
        raw = json.dumps(raw, ensure_ascii=False)
    # Several providers send "" for a tool without parameters: no arguments.
    text = raw if raw.strip() else "{}"
    try:
        parsed = loads_json(text)
    except ValueError as exc:
        problem = f"the arguments are not valid JSON ({exc})"
    else:
        if isinstance(parsed, dict):
            return text, None
        problem = f"the arguments must be a JSON object, got {type(parsed).__name__}"
    # The session stores JSON arguments; keep what the model sent, wrapped.
    return json.dumps({"unparsed_arguments": text}, ensure_ascii=False), problem


def _usage_int(usage: object, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
