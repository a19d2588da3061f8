"""The notebook agent, end to end over real loopback HTTP against the scripted server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import orphan_results, record_steps
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._cells import INTERRUPTED_CELL, truncate_output
from dashr_ext._client import ChatClient
from dashr_ext._events import Event
from dashr_ext._formats.openai import to_openai
from dashr_ext._pointer import pointer_text
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext.agent import RUN_CELL, Agent, StepReport, run_cell_schema
from dashr_ext.errors import AgentError, ConfigError, EndpointError
from dashr_ext.testing import (
    RecordedRequest,
    Reply,
    ScriptedServer,
    answer,
    call_run_cell,
    call_tool,
    chat_completion,
    latest_checkpoint,
    read_archive,
)

WINDOW = CompactionConfig(recency_window_tokens=2500, retain_tokens=600)
AGENT_KEY = "sk-agent-0a1b2c3d4e5f-SECRET"
SUMMARIZER_KEY = "sk-summarizer-6f7e8d9c-SECRET"
SUMMARY = "## Primary Request and Intent\n- Load the batches (summary written by the scripted LLM)"


def batch_cell(i: int, rows: int = 30) -> str:
    """A cell whose output (~300 tokens) is deterministic and unique to batch ``i``."""
    return (
        "import random\n"
        f"rng = random.Random({i})\n"
        f'print("batch {i} | token %08x" % rng.getrandbits(32))\n'
        f"for k in range({rows}):\n"
        f'    print(f"  batch {i} row {{k:02d}} value={{rng.randint(1000, 9999)}}")'
    )


@pytest.fixture
def dashr(tmp_path: Path, clock: Callable[[], int]) -> Iterator[Dashr]:
    d = Dashr.create(tmp_path / "agent.jsonl", config=WINDOW, session_id="agent-test", clock=clock)
    yield d
    d.close()


def agent_for(d: Dashr, server: ScriptedServer, **options: Any) -> Agent:
    options.setdefault("api_key", None)
    return Agent(d, base_url=server.base_url, model="scripted-model", **options)


def tool_results(d: Dashr) -> list[Event]:
    return [e for e in d.session.events if e.type == "tool/result"]


def texts(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in request.messages)


def assert_log_replays(d: Dashr) -> None:
    """The session file replays to exactly the live surface and messages."""
    assert d.session.path is not None
    with Dashr.open(d.session.path, read_only=True) as replayed:
        assert replayed.session.surface == d.session.surface
        assert to_openai(replayed.session) == to_openai(d.session)
        assert replayed.archive == d.archive


def assert_consistent(d: Dashr) -> None:
    assert d.session.open_turn is None
    assert d.session.pending_tool_calls() == []
    assert orphan_results(to_openai(d.session)) == []
    assert_log_replays(d)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_long_task_compacts_and_the_model_reads_an_original_back_byte_for_byte(
    server: ScriptedServer, dashr: Dashr
) -> None:
    server.script(
        *(call_run_cell(batch_cell(i)) for i in range(8)),
        answer("Loaded eight batches."),
        call_tool("history_search", {"query": "batch 0 | token"}),
        read_archive(),
        answer("Done."),
    )
    agent = agent_for(dashr, server)

    first = agent.run_turn("Load eight batches of readings.")
    second = agent.run_turn("What did the first archived tool result say?")

    assert (first.reason, first.text, len(first.steps)) == ("completed", "Loaded eight batches.", 9)
    assert (second.reason, second.text, len(second.steps)) == ("completed", "Done.", 3)
    assert len(first.checkpoints) >= 2
    assert [(t.reason, len(t.steps)) for t in dashr.session.turns] == [
        ("completed", 9),
        ("completed", 3),
    ]

    # One model request per step; every compaction shows in the very next request.
    steps = [*first.steps, *second.steps]
    requests = server.model_requests
    assert len(requests) == len(steps) == len(server.requests)
    assert all(r.purpose == "agent" for r in requests)
    checkpoints = {c.id: c for c in dashr.checkpoints()}
    seen_checkpoint = False
    for step, request in zip(steps, requests, strict=True):
        if step.compacted:
            current = checkpoints[step.compacted[-1]]
            assert f"[checkpoint {current.id}" in texts(request)  # its footer, in any form
            # A pointer message only with the full form; a compact footer is its own pointer.
            assert (pointer_text(current) in texts(request)) == (current.form == "full")
            assert latest_checkpoint(request) == current.id
            seen_checkpoint = True
        recall_tools = ["history_outline", "history_read", "history_search"]
        assert (
            request.tool_names == ["run_cell", *recall_tools] if seen_checkpoint else ["run_cell"]
        )
    assert requests[0].tool_names == ["run_cell"]

    # The recall tool ran through dashr.call_tool.
    search = tool_results(dashr)[-2]
    assert search.message.tool_name == "history_search"
    assert search.message.text.startswith('history_search "batch 0 | token"')
    assert "| shadowed |" in search.message.text

    # The archive read: the footer named the checkpoint, the cell printed the original.
    read_request = requests[-2]
    checkpoint = latest_checkpoint(read_request)
    assert checkpoint is not None
    read_call = dashr.session.event(tool_results(dashr)[-1].seq - 1).message.tool_calls[0]
    assert json.loads(read_call.arguments) == {
        "code": f'print(dashr_compaction_archive["{checkpoint}"]["tool_results"][0]["text"])'
    }
    original_seq = dashr.archive[checkpoint]["tool_results"][0]["seq"]
    original = dashr.session.event(original_seq).message.text
    assert original.startswith("batch ")
    read = tool_results(dashr)[-1].message
    assert (read.text, read.is_error) == (original + "\n", False)
    assert original not in texts(read_request)  # only the archive still had it verbatim

    assert_consistent(dashr)
    agent.close()


@pytest.mark.slow
def test_the_llm_summarizer_variant_gets_its_summaries_from_the_server_and_keeps_keys_secret(
    server: ScriptedServer, tmp_path: Path, clock: Callable[[], int]
) -> None:
    server.summarizer = chat_completion(SUMMARY, model="summarizer-model")
    summarizer = LLMSummarizer(base_url=server.base_url, model="sum", api_key=SUMMARIZER_KEY)
    path = tmp_path / "llm.jsonl"
    d = Dashr.create(path, config=WINDOW, summarizer=summarizer, clock=clock)
    server.script(*(call_run_cell(batch_cell(i)) for i in range(8)), answer("Loaded."))
    with agent_for(d, server, api_key=AGENT_KEY) as agent:
        reply = agent.run_turn("Load eight batches of readings.")

    assert reply.reason == "completed" and len(reply.checkpoints) >= 2
    for checkpoint in reply.checkpoints:
        node = d.session.event(next(c for c in d.checkpoints() if c.id == checkpoint).node_seq)
        assert SUMMARY in node.message.text
        summary_event = d.session.event(int(checkpoint[1:]))
        assert summary_event.data["summarizer"] == {"kind": "llm", "model": "summarizer-model"}
    # Compaction requests are told apart by their purpose and never consume the agent's script.
    assert len(server.model_requests) == len(reply.steps)
    assert len(server.compaction_requests) == len(reply.checkpoints)
    for request in server.compaction_requests:
        assert request.headers["authorization"] == f"Bearer {SUMMARIZER_KEY}"
        assert request.messages[0]["role"] == "system" and request.messages[-1]["role"] == "user"
    for request in server.model_requests:
        assert request.headers["authorization"] == f"Bearer {AGENT_KEY}"
    d.close()

    stored = path.read_text(encoding="utf-8")
    archived = json.dumps(d.archive)
    for key in (AGENT_KEY, SUMMARIZER_KEY):
        assert key not in stored and key not in archived
        assert key not in repr(agent) and key not in repr(summarizer)


def test_an_overflow_compacts_then_retries_the_request_exactly_once(
    server: ScriptedServer, tmp_path: Path, clock: Callable[[], int]
) -> None:
    d = Dashr.create(tmp_path / "overflow.jsonl", clock=clock)  # no pressure at this size
    server.script(*(call_run_cell(batch_cell(i)) for i in range(4)), answer("Done."))

    def reject_the_next_request(step: StepReport) -> None:
        if step.step == 3:
            server.overflow_next(1)

    agent = agent_for(d, server, on_event=reject_the_next_request)
    reply = agent.run_turn("Load four batches.")

    assert (reply.reason, reply.text, len(reply.steps)) == ("completed", "Done.", 5)
    requests = server.model_requests
    assert len(requests) == 5 + 1  # five steps, one retry
    step = reply.steps[3]
    assert step.overflow_retry and len(step.compacted) == 1
    [checkpoint] = d.checkpoints()
    assert (checkpoint.id, checkpoint.trigger) == (step.compacted[0], "context-overflow")
    rejected, retried = requests[3], requests[4]
    assert "[checkpoint c" not in texts(rejected)
    assert f"[checkpoint {checkpoint.id}" in texts(retried)
    assert len(retried.messages) < len(rejected.messages)
    assert [s.overflow_retry for s in reply.steps] == [False, False, False, True, False]
    assert_consistent(d)
    d.close()


def test_a_second_overflow_raises_the_providers_error_and_leaves_a_consistent_log(
    server: ScriptedServer, tmp_path: Path, clock: Callable[[], int]
) -> None:
    d = Dashr.create(tmp_path / "overflow.jsonl", clock=clock)
    server.script(*(call_run_cell(batch_cell(i)) for i in range(4)), answer("Done."))

    def reject_twice(step: StepReport) -> None:
        if step.step == 3:
            server.overflow_next(2)

    agent = agent_for(d, server, on_event=reject_twice)
    with pytest.raises(EndpointError, match="exceeds the model's context window") as info:
        agent.run_turn("Load four batches.")

    assert (info.value.context_length, info.value.status_code) == (True, 400)
    assert len(server.model_requests) == 3 + 2  # the retry was the only one
    assert [(t.reason, len(t.steps)) for t in d.session.turns] == [("error", 4)]
    assert [c.trigger for c in d.checkpoints()] == ["context-overflow"]  # kept in the log
    assert_consistent(d)
    d.close()


def test_an_overflow_with_nothing_to_compact_is_raised_without_a_retry(
    server: ScriptedServer, dashr: Dashr
) -> None:
    server.overflow_next(1)
    with pytest.raises(EndpointError) as info:
        agent_for(dashr, server).run_turn("Hello.")
    assert info.value.context_length
    assert len(server.requests) == 1
    assert dashr.session.turns[-1].reason == "error"
    assert_consistent(dashr)


def test_max_steps_ends_the_turn_and_the_next_turn_continues(
    server: ScriptedServer, dashr: Dashr
) -> None:
    server.default = call_run_cell("print('again')")
    agent = agent_for(dashr, server, max_steps=3)
    reply = agent.run_turn("Keep going.")
    assert (reply.reason, reply.text, len(reply.steps)) == ("max-steps", "", 3)
    assert len(server.requests) == 3
    assert [r.message.text for r in tool_results(dashr)] == ["again\n"] * 3
    assert_consistent(dashr)

    server.default = None
    server.script(answer("Stopped."))
    assert agent.run_turn("Stop now.") == "Stopped."
    assert [t.reason for t in dashr.session.turns] == ["max-steps", "completed"]


def test_a_keyboard_interrupt_during_a_tool_leaves_a_balanced_replayable_log(
    server: ScriptedServer, dashr: Dashr, clock: Callable[[], int]
) -> None:
    interrupted_cell = "print('partial')\nraise KeyboardInterrupt"
    server.script(
        chat_completion(
            "Two cells.",
            tool_calls=[
                {"id": "call_a", "name": "run_cell", "arguments": {"code": interrupted_cell}},
                {"id": "call_b", "name": "run_cell", "arguments": {"code": "print('never')"}},
            ],
        ),
        answer("Back again."),
    )
    namespace: dict[str, Any] = {}
    with pytest.raises(KeyboardInterrupt):
        agent_for(dashr, server, namespace=namespace).run_turn("Run two cells.")

    first, second = (r.message for r in tool_results(dashr))
    assert (first.tool_call_id, first.is_error) == ("call_a", True)
    assert first.text == f"partial\n{INTERRUPTED_CELL}"
    assert (second.tool_call_id, second.is_error) == ("call_b", True)
    assert second.text.startswith("[interrupted: KeyboardInterrupt ended the turn before this")
    assert [t.reason for t in dashr.session.turns] == ["interrupted"]
    assert_consistent(dashr)

    # A fresh process re-attaches and carries on from the same state.
    surface, messages, path = dashr.session.surface, to_openai(dashr.session), dashr.session.path
    dashr.close()
    assert path is not None
    with Dashr.open(path, clock=clock) as reopened:
        assert (reopened.session.surface, to_openai(reopened.session)) == (surface, messages)
        assert agent_for(reopened, server).run_turn("Continue.") == "Back again."
        assert [t.reason for t in reopened.session.turns] == ["interrupted", "completed"]
        assert orphan_results(server.requests[-1].messages) == []


def test_a_keyboard_interrupt_during_a_request_ends_the_turn_as_interrupted(
    dashr: Dashr,
) -> None:
    def stalled_then_interrupted(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    client = ChatClient(
        "http://model.test/v1", "m", transport=httpx.MockTransport(stalled_then_interrupted)
    )
    with pytest.raises(KeyboardInterrupt):
        Agent(dashr, client=client).run_turn("Hello?")
    types = [e.type for e in dashr.session.events]
    assert types[-4:] == ["user/message", "step/start", "step/end", "turn/end"]
    assert dashr.session.turns[-1].reason == "interrupted"
    assert_consistent(dashr)


def test_a_turn_a_dead_process_left_open_is_closed_when_the_next_turn_starts(
    server: ScriptedServer, tmp_path: Path, clock: Callable[[], int]
) -> None:
    path = tmp_path / "dead.jsonl"
    with Dashr.create(path, clock=clock) as d:
        d.session.begin_turn()
        d.record_openai({"role": "user", "content": "Inspect the data."})
        d.session.begin_step()
        call = {"id": "call_x", "type": "function", "function": {"name": "run_cell"}}
        call["function"]["arguments"] = json.dumps({"code": "import time; time.sleep(1e9)"})
        d.record_openai({"role": "assistant", "content": None, "tool_calls": [call]})
        # ... and the process died here.

    server.script(answer("Starting over."))
    with Dashr.open(path, clock=clock) as d:
        assert agent_for(d, server).run_turn("Start over.") == "Starting over."
        [result] = tool_results(d)
        assert (result.message.tool_call_id, result.message.is_error) == ("call_x", True)
        # Dashr.open answered the call the dead process left waiting (SPEC §6.5).
        assert result.message.source == {"kind": "synthetic", "reason": "reopened"}
        assert result.message.text.startswith("[no result recorded: the session was reopened")
        assert [t.reason for t in d.session.turns] == ["interrupted", "completed"]
        assert orphan_results(server.requests[0].messages) == []
        assert_consistent(d)


def test_malformed_and_unknown_tool_calls_get_error_results_and_the_turn_goes_on(
    server: ScriptedServer, dashr: Dashr
) -> None:
    def calls(*items: dict[str, Any]) -> Reply:
        return chat_completion(None, tool_calls=items)

    server.script(
        calls({"id": "call_1", "name": "run_cell", "arguments": "{not json"}),
        calls({"id": "call_1", "name": "run_cell", "arguments": {"code": "print(1)"}}),  # reused
        calls({"id": "call_2", "name": "bash", "arguments": {"command": "ls"}}),
        calls({"id": "call_3", "name": "run_cell", "arguments": {"source": "1"}}),
        calls({"id": "call_4", "name": "history_read", "arguments": {}}),
        answer("Done."),
    )
    assert agent_for(dashr, server).run_turn("Go.") == "Done."

    results = [r.message for r in tool_results(dashr)]
    assert [(m.tool_call_id, m.is_error) for m in results] == [
        ("call_1", True),
        ("call_1~2", False),
        ("call_2", True),
        ("call_3", True),
        ("call_4", True),
    ]
    assert results[0].text.startswith("error: run_cell: the arguments are not valid JSON")
    recorded = [
        c.arguments
        for e in dashr.session.events
        if e.type == "assistant/message"
        for c in e.message.tool_calls
    ]
    assert recorded[0] == json.dumps({"unparsed_arguments": "{not json"})
    assert results[1].text == "1\n"
    assert results[2].text == "error: unknown tool 'bash'; the tools are: run_cell"
    assert results[3].text.startswith('error: run_cell takes exactly one argument, "code"')
    assert results[4].text.startswith("error: history_read")
    assert_consistent(dashr)


def test_empty_arguments_of_a_parameterless_tool_mean_no_arguments(
    server: ScriptedServer, dashr: Dashr
) -> None:
    record_steps(dashr, 20, 400, user="Fix the retry tests")
    dashr.record_openai({"role": "assistant", "content": "done"})
    checkpoint = dashr.compact()
    assert checkpoint is not None
    outline = {"id": "x1", "name": "history_outline", "arguments": ""}
    server.script(chat_completion(None, tool_calls=[outline]), answer("ok"))
    assert agent_for(dashr, server).run_turn("What was compacted?") == "ok"
    [call] = [
        c
        for e in dashr.session.events
        if e.type == "assistant/message"
        for c in e.message.tool_calls
        if c.id == "x1"
    ]
    assert call.arguments == "{}"
    result = tool_results(dashr)[-1].message
    assert result.is_error is False
    assert result.text.startswith("history_outline — ")
    assert f"{checkpoint.checkpoint} | summary seq {checkpoint.summary_seq}" in result.text
    assert_consistent(dashr)


def test_tool_output_is_truncated_with_an_explicit_marker(
    server: ScriptedServer, dashr: Dashr
) -> None:
    server.script(call_run_cell("print('x' * 2000)"), answer("Long."))
    agent_for(dashr, server, tool_output_max_chars=500, namespace={}).run_turn("Print a lot.")
    [result] = tool_results(dashr)
    assert result.message.text == truncate_output("x" * 2000 + "\n", 500)
    assert "\n… [output truncated: +1538 chars] …\n" in result.message.text
    assert len(result.message.text) == 500


def test_a_cell_cannot_start_a_nested_turn(server: ScriptedServer, dashr: Dashr) -> None:
    namespace: dict[str, Any] = {}
    agent = agent_for(dashr, server, namespace=namespace)
    namespace["agent"] = agent
    server.script(call_run_cell("agent.run_turn('again')"), answer("Fine."))
    assert agent.run_turn("Try it.") == "Fine."
    [result] = tool_results(dashr)
    assert result.message.is_error
    assert result.message.text.endswith(
        "AgentError: a turn of this agent is already running; wait for it to finish"
    )


# --------------------------------------------------------------------------- progress lines


def test_step_report_lines() -> None:
    def report(**fields: Any) -> StepReport:
        base: dict[str, Any] = {
            "turn": 1,
            "step": 3,
            "tools": ("run_cell",),
            "tool_errors": (False,),
            "tokens": 5231,
            "prompt_tokens": 5400,
            "compacted": ("c57",),
            "compaction_errors": (),
            "overflow_retry": False,
        }
        return StepReport(**{**base, **fields})

    assert report().line() == "step 3: run_cell · ~5231 tokens · compacted → c57"
    assert report(step=4, tools=(), tool_errors=(), compacted=()).line() == (
        "step 4: answer · ~5231 tokens"
    )
    assert report(
        tools=("run_cell", "history_read"),
        tool_errors=(True, False),
        overflow_retry=True,
        compaction_errors=("inflation guard",),
    ).line() == (
        "step 3: run_cell (error), history_read · ~5231 tokens · context overflow → retried once"
        " · compacted → c57 · compaction failed: inflation guard"
    )


def test_the_agent_runs_cells_in_the_shell_and_binds_this_sessions_archive(
    shell: InteractiveShell, server: ScriptedServer, dashr: Dashr
) -> None:
    server.script(call_run_cell("total = 6 * 7\ntotal"), answer("42."))
    agent = agent_for(dashr, server, shell=shell)
    assert shell.user_ns["dashr_compaction_archive"] is dashr.archive
    assert shell.user_ns["history_search"] == dashr.history_search
    assert agent.run_turn("Multiply.") == "42."
    assert shell.user_ns["total"] == 42
    assert tool_results(dashr)[0].message.text == "42"


# --------------------------------------------------------------------------- configuration


def test_the_run_cell_schema_in_extra_tools_is_the_latest_agents_and_leaves_with_it(
    dashr: Dashr,
) -> None:
    client = ChatClient("http://127.0.0.1:9/v1", "m", api_key=None)
    other = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    dashr.extra_tools.append(other)

    def names() -> list[object]:
        return [t["function"]["name"] for t in dashr.extra_tools]

    first = Agent(dashr, client=client, tool_output_max_chars=5000)
    assert names() == ["lookup", RUN_CELL]
    before = dashr.measure().total
    second = Agent(dashr, client=client, tool_output_max_chars=6000)
    assert names() == ["lookup", RUN_CELL]
    assert dashr.extra_tools[1] == run_cell_schema(6000)
    assert dashr.measure().total == before  # one schema counted, not two
    first.close()  # no longer first's entry: left alone
    assert dashr.extra_tools[1] == run_cell_schema(6000)
    second.close()
    assert dashr.extra_tools == [other]


def test_importing_the_agent_loads_neither_ipython_nor_httpx() -> None:
    code = (
        "import sys, dashr_ext.agent\n"
        "print(sorted(m for m in ('IPython', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_agent_configuration_and_arguments_are_validated(dashr: Dashr) -> None:
    client = ChatClient("http://127.0.0.1:9/v1", "m", api_key=None)
    with pytest.raises(ConfigError, match="either client or base_url/model/api_key"):
        Agent(dashr, client=client, model="m")
    with pytest.raises(ConfigError, match=r"Agent\.max_steps: expected an integer >= 1, got 0"):
        Agent(dashr, client=client, max_steps=0)
    with pytest.raises(ConfigError, match=r"Agent\.tool_output_max_chars"):
        Agent(dashr, client=client, tool_output_max_chars=10)
    with pytest.raises(ConfigError, match=r"ChatClient\.base_url"):
        Agent(dashr, base_url="ftp://example.test", model="m")
    agent = Agent(dashr, client=client)
    before = len(dashr.session)
    with pytest.raises(AgentError, match="non-empty string"):
        agent.run_turn("   ")
    assert len(dashr.session) == before
    assert "api_key" not in repr(agent) and "plain namespace" in repr(agent)


@pytest.mark.slow
def test_the_agent_runs_unchanged_on_the_recallable_engine(
    server: ScriptedServer, tmp_path: Path, clock: Callable[[], int]
) -> None:
    """Same loop, other engine: requests read [system][stubs…][state][tail], the model
    reads a frozen stub's original back through the archive."""
    config = WINDOW.with_changes(engine="recallable")

    def read_first_stub(request: RecordedRequest) -> Reply:
        first = re.search(r"\[checkpoint (c\d+): shadows", texts(request))
        assert first is not None
        code = f'print(dashr_compaction_archive["{first.group(1)}"]["tool_results"][0]["text"])'
        return call_run_cell(code)(request)

    server.script(
        *(call_run_cell(batch_cell(i)) for i in range(8)),
        read_first_stub,
        answer("Done."),
    )
    with Dashr.create(tmp_path / "agent.jsonl", config=config, clock=clock) as d:
        agent = agent_for(d, server)
        reply = agent.run_turn("Load eight batches, then read the first one back.")
        assert (reply.reason, reply.text) == ("completed", "Done.")
        roles = {cp.id: cp.role for cp in d.checkpoints()}
        assert "stub" in roles.values() and "state" in roles.values()
        for request in server.model_requests:
            kinds = []  # each checkpoint message's own footer is its last one
            for m in request.messages:
                named = re.findall(r"\[checkpoint (c\d+): shadows", str(m.get("content") or ""))
                if named:
                    kinds.append(roles[named[-1]])
            assert kinds == sorted(kinds, key=lambda k: k == "state"), kinds  # state last
            assert kinds.count("state") <= 1 and "summary" not in kinds
        stub = next(c for c in d.checkpoints() if c.role == "stub")
        original = d.session.event(d.archive[stub.id]["tool_results"][0]["seq"]).message.text
        read = tool_results(d)[-1].message
        assert (read.text, read.is_error) == (original + "\n", False)
        assert_consistent(d)
        agent.close()
