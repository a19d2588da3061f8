"""The ``llm`` turn compressor against the scripted OpenAI-compatible server (SPEC §6.4).

The main agent (:class:`~dashr_ext.agent.Agent`) and the turn workers talk to the same
loopback server: the agent's requests take the script, the workers' (``X-Dashr-Purpose:
compaction``) are answered by a :class:`Workers` script of their own, so the two never mix.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from turn_memory_support import ON, turn_passes

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._templates import load_template
from dashr_ext._turnmemory import TurnEditor, turn_nodes
from dashr_ext._turnmemory.compressors import ExtractiveTurnCompressor, make_turn_compressor
from dashr_ext._turnmemory.jobs import Job
from dashr_ext._turnmemory.llm import LLMTurnCompressor
from dashr_ext._turnmemory.worker_tools import (
    EDITOR_TOOL_NAMES,
    dispatch,
    editor_tool_schemas,
)
from dashr_ext.agent import Agent
from dashr_ext.errors import ConfigError
from dashr_ext.testing import (
    RecordedRequest,
    Reply,
    ScriptedServer,
    answer,
    call_run_cell,
    chat_completion,
    server_error,
)

MODEL = "scripted-model"
REQUEST = "Profile sensor_a.csv and sensor_b.csv and tell me which one has gaps."
FINAL = "sensor_b.csv has gaps: 14 missing readings between rows 200 and 260."
SHORT = "Ran the profiler on sensor_a.csv (clean) and sensor_b.csv (IndexError at row 200)."
EDITOR = frozenset(EDITOR_TOOL_NAMES)
_ids = itertools.count(1)


def sensor_cell(name: str, rows: int = 40) -> str:
    return f'for k in range({rows}):\n    print(f"{name} row {{k:03d}} reading={{(k * 37) % 101}}")'


class Workers:
    """The worker model: its replies in order, every worker request recorded; a request past
    the script gets a 500 (a test scripts exactly what it expects)."""

    def __init__(self) -> None:
        self.replies: deque[Reply | Callable[[RecordedRequest], Reply]] = deque()
        self.requests: list[RecordedRequest] = []

    def script(self, *replies: Reply | Callable[[RecordedRequest], Reply]) -> None:
        self.replies.extend(replies)

    def __call__(self, request: RecordedRequest) -> Reply:
        self.requests.append(request)
        if not self.replies:
            return server_error(500, "no worker reply scripted")
        reply = self.replies.popleft()
        return reply(request) if callable(reply) else reply


def use(name: str, **arguments: Any) -> Reply:
    """A worker reply calling one tool."""
    call = {"id": f"w{next(_ids)}", "name": name, "arguments": arguments}
    return chat_completion(None, tool_calls=[call])


def node(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def last_tool_text(request: RecordedRequest) -> str:
    message = request.messages[-1]
    assert message["role"] == "tool"
    return str(message["content"])


@pytest.fixture
def workers(server: ScriptedServer) -> Workers:
    w = Workers()
    server.summarizer = w
    return w


@pytest.fixture
def dashr(tmp_path: Path, server: ScriptedServer) -> Iterator[Dashr]:
    d = Dashr.create(tmp_path / "llm.jsonl", config=ON)
    d.turn_compressor = LLMTurnCompressor(base_url=server.base_url, model=MODEL, max_retries=0)
    yield d
    d.close()


def run_turn(
    d: Dashr, server: ScriptedServer, namespace: dict[str, Any] | None = None, text: str = REQUEST
) -> Agent:
    """One agent turn of six nodes: the request, two run_cell pairs, the final answer."""
    server.script(
        call_run_cell(sensor_cell("sensor_a.csv")),
        call_run_cell(sensor_cell("sensor_b.csv")),
        answer(FINAL),
    )
    agent = Agent(d, base_url=server.base_url, model=MODEL, api_key=None, namespace=namespace)
    assert agent.run_turn(text).reason == "completed"
    return agent


def turn_messages(d: Dashr) -> list[dict[str, Any]]:
    """The live request's messages from the first user message on."""
    messages = d.session.messages()
    start = next(i for i, m in enumerate(messages) if m["role"] == "user")
    return messages[start:]


def assert_unchanged(d: Dashr, server: ScriptedServer) -> None:
    """The surface is the turn as the agent recorded it: no landing, nothing replaced."""
    assert turn_passes(d) == []
    expected = [*server.model_requests[-1].messages, {"role": "assistant", "content": FINAL}]
    assert d.session.messages() == expected


def assert_no_editor_tool_in_main_requests(d: Dashr, server: ScriptedServer) -> None:
    assert server.model_requests
    for request in server.model_requests:
        assert not EDITOR & set(request.tool_names), request.tool_names
        assert not any(name in request.body.decode() for name in EDITOR)
    assert not EDITOR & {t["function"]["name"] for t in d.request_tools()}
    for event in d.session.events:  # the workers' conversations never reach the log
        assert not any(name in json.dumps(event.data) for name in EDITOR), event.type


# --------------------------------------------------------------------------- the worker loop


def test_list_read_replace_twice_and_finish_lands_the_turn(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    workers.script(
        use("list_turn_nodes"),
        use("read_turn_nodes", ids=["n1..n6"]),
        use(
            "replace_turn_nodes",
            range="n1..n6",
            nodes=[node("user", REQUEST), node("assistant", f"{SHORT} Both files read.\n{FINAL}")],
        ),
        use(
            "replace_turn_nodes",
            range="r1..r2",
            nodes=[node("user", REQUEST), node("assistant", f"{SHORT}\n{FINAL}")],
        ),
        use("finish_turn_compression"),
    )
    run_turn(dashr, server)
    assert dashr.wait_for_turns(60)

    [record] = dashr.turns()
    assert (record.status, record.nodes_before, record.nodes_after) == ("landed", 6, 2)
    assert turn_messages(dashr) == [node("user", REQUEST), node("assistant", f"{SHORT}\n{FINAL}")]
    r = workers.requests
    assert len(r) == 5 and workers.replies == deque()
    assert "n1 · user" in last_tool_text(r[1]) and "n6 · assistant" in last_tool_text(r[1])
    assert "sensor_b.csv row 039" in last_tool_text(r[2])  # the read shows the originals
    assert last_tool_text(r[3]).startswith("accepted: n1..n6 is now r1, r2 (edit 1)")
    assert last_tool_text(r[4]).startswith("accepted: r1..r2 is now r3, r4 (edit 2)")
    # Both landed nodes stand for all six originals (their semantic sources).
    originals = {n.seq for n in _originals(dashr)}
    landed = [
        e for e in dashr.session.events if e.is_surface and e.message.source_kind == "turn-memory"
    ]
    assert len(landed) == 2
    assert all(originals <= set(e.source_event_seqs or ()) for e in landed)
    assert dashr.session.path is not None
    with Dashr.open(dashr.session.path, read_only=True) as cold:
        assert cold.session.messages() == dashr.session.messages()
    assert_no_editor_tool_in_main_requests(dashr, server)


def _originals(d: Dashr) -> list[Any]:
    return [
        e
        for e in d.session.events
        if e.type in ("user/message", "assistant/message", "tool/result")
        and e.message.source_kind != "turn-memory"
    ]


def test_the_first_worker_reuses_the_main_request_prefix_byte_for_byte(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    workers.script(
        use(
            "replace_turn_nodes",
            range="n1..n6",
            nodes=[node("user", REQUEST), node("assistant", FINAL)],
        ),
        use("finish_turn_compression"),
    )
    run_turn(dashr, server)
    assert dashr.wait_for_turns(60)
    assert dashr.turns()[0].status == "landed"

    main, fork = server.model_requests[-1], workers.requests[0]
    # The raw body: everything up to the end of the main request's last message is shared.
    cut = main.body.index(b'], "tools": ')
    assert fork.body[:cut] == main.body[:cut]
    assert fork.body[cut : cut + 2] == b", "  # the fork's messages go on from there
    k = len(main.messages)
    assert main.messages[0]["role"] == "system"
    assert fork.messages[:k] == main.messages
    assert fork.messages[k] == {"role": "assistant", "content": FINAL}  # the turn's last node
    prompt = fork.messages[k + 1]
    assert prompt["role"] == "user" and "compress turn 1" in prompt["content"]
    assert len(fork.messages) == k + 2
    # Tools: the main request's, byte for byte and in order, then the four editor tools.
    tools = fork.json["tools"]
    assert json.dumps(tools[: len(main.json["tools"])]) == json.dumps(main.json["tools"])
    assert fork.tool_names[len(main.json["tools"]) :] == list(EDITOR_TOOL_NAMES)
    assert main.tool_names == ["run_cell"]
    assert fork.purpose == "compaction" and main.purpose == "agent"
    assert_no_editor_tool_in_main_requests(dashr, server)


def test_a_worker_that_stops_is_followed_by_a_fresh_one_from_the_accepted_state(
    tmp_path: Path, server: ScriptedServer, workers: Workers
) -> None:
    # One attempt: the first worker's accepted edit is what lets the second one run.
    config = ON.with_changes(turn_worker_attempts=1)
    with Dashr.create(tmp_path / "fresh.jsonl", config=config) as d:
        d.turn_compressor = make_turn_compressor(
            "llm", base_url=server.base_url, model=MODEL, max_retries=0
        )
        draft = f"{SHORT} (draft)\n{FINAL}"
        workers.script(
            use(
                "replace_turn_nodes",
                range="n1..n6",
                nodes=[node("user", REQUEST), node("assistant", draft)],
            ),
            chat_completion("I have rewritten the turn."),  # stops without finishing
            use("replace_turn_nodes", range="r2", nodes=[node("assistant", f"{SHORT}\n{FINAL}")]),
            use("finish_turn_compression"),
        )
        run_turn(d, server)
        assert d.wait_for_turns(60)

        assert [t.status for t in d.turns()] == ["landed"]
        assert turn_messages(d) == [node("user", REQUEST), node("assistant", f"{SHORT}\n{FINAL}")]
        first, fresh = workers.requests[0], workers.requests[2]
        assert len(first.messages) > 2 and len(fresh.messages) == 1  # no prefix
        assert fresh.tool_names == list(EDITOR_TOOL_NAMES)  # and only the editor tools
        prompt = fresh.messages[0]["content"]
        assert "compress turn" not in prompt and "one completed turn" in prompt
        assert "r1 · user · text" in prompt and "r2 · assistant · text" in prompt
        assert "changed" in prompt and "(draft)" in prompt  # the accepted text, embedded
        assert "sensor_a.csv row 000" not in prompt  # not the replaced originals
        assert_no_editor_tool_in_main_requests(d, server)


def test_three_workers_without_an_accepted_edit_leave_the_turn_and_record_why(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    workers.script(
        use("replace_turn_nodes", range="n1", nodes=[node("user", "a"), node("user", "b")]),
        chat_completion("Done."),
        chat_completion("Nothing to do."),
        Reply(400, {"error": {"message": "bad request", "type": "invalid_request_error"}}),
    )
    run_turn(dashr, server)
    assert dashr.wait_for_turns(60)

    [record] = dashr.turns()
    assert record.status == "failed" and record.reason is not None
    assert "3 consecutive workers made no accepted edit" in record.reason
    assert "its request failed" in record.reason and "HTTP 400" in record.reason
    assert "left as it was" in record.reason
    assert_unchanged(dashr, server)
    assert "n1 can be replaced by at most 1 node" in last_tool_text(workers.requests[1])
    assert [len(r.messages) == 1 for r in workers.requests] == [False, False, True, True]
    assert [e.type for e in dashr.session.events].count("turn-memory/failed") == 1
    assert_no_editor_tool_in_main_requests(dashr, server)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("Compress it.\n\n{{catalog}}\n{{not_a_variable}}\n", "unknown variable 'not_a_variable'"),
        ("{{#if fork}}never closed\n", "is never closed"),
        (None, "'turn-compression.md' not found"),
    ],
)
def test_a_template_that_fails_to_render_fails_the_job_and_the_next_job_reads_it_again(
    tmp_path: Path, server: ScriptedServer, workers: Workers, template: str | None, reason: str
) -> None:
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    path = prompts / "turn-compression.md"
    if template is not None:
        path.write_text(template, encoding="utf-8")
    with Dashr.create(tmp_path / "t.jsonl", config=ON) as d:
        d.turn_compressor = LLMTurnCompressor(
            base_url=server.base_url, model=MODEL, prompts_dir=prompts, max_retries=0
        )
        run_turn(d, server)
        assert d.wait_for_turns(60)
        [record] = d.turns()
        assert record.status == "failed" and reason in (record.reason or "")
        assert workers.requests == []  # no worker was started
        assert_unchanged(d, server)

        # Fixed on disk, the template applies to the very next job.
        path.write_text(load_template("turn-compression") + "\nMARK-7\n", encoding="utf-8")
        workers.script(
            use(
                "replace_turn_nodes",
                range="n1..n6",
                nodes=[node("user", "Again."), node("assistant", FINAL)],
            ),
            use("finish_turn_compression"),
        )
        run_turn(d, server, text="Again.")
        assert d.wait_for_turns(60)
        assert [t.status for t in d.turns()] == ["failed", "landed"]
        assert workers.requests[0].messages[-1]["content"].endswith("MARK-7\n")


def test_a_worker_calling_another_tool_is_refused_and_nothing_runs(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    namespace: dict[str, Any] = {}
    workers.script(
        use("run_cell", code="touched = True\nprint('ran')"),
        use("history_search", query="sensor"),
        use(
            "replace_turn_nodes",
            range="n1..n6",
            nodes=[node("user", REQUEST), node("assistant", FINAL)],
        ),
        use("finish_turn_compression"),
    )
    run_turn(dashr, server, namespace)
    results_before = [e.seq for e in dashr.session.events if e.type == "tool/result"]
    assert dashr.wait_for_turns(60)

    assert last_tool_text(workers.requests[1]).startswith("refused: 'run_cell' is not available")
    assert last_tool_text(workers.requests[2]).startswith("refused: 'history_search'")
    assert "touched" not in namespace
    assert [e.seq for e in dashr.session.events if e.type == "tool/result"] == results_before
    assert dashr.turns()[0].status == "landed"


def test_editor_tools_never_reach_a_main_request_before_during_or_after_a_job(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    during: list[set[str]] = []

    def look(request: RecordedRequest) -> Reply:  # runs while the job's worker waits on it
        during.append({t["function"]["name"] for t in dashr.request_tools()})
        return use(
            "replace_turn_nodes",
            range="n1..n6",
            nodes=[node("user", REQUEST), node("assistant", FINAL)],
        )

    workers.script(look, use("finish_turn_compression"))
    agent = run_turn(dashr, server)
    assert dashr.wait_for_turns(60)
    server.script(answer("Interpolate the gap linearly."))
    agent.run_turn("Should I interpolate the gap?")  # its request carries the compressed turn
    assert dashr.wait_for_turns(60)

    assert during and not EDITOR & during[0]
    assert not EDITOR & {t["function"]["name"] for t in agent.tools()}
    second = server.model_requests[-1]
    assert node("assistant", FINAL) in second.messages and len(second.messages) == 4
    assert_no_editor_tool_in_main_requests(dashr, server)


def test_a_closed_session_stops_its_worker_and_leaves_the_job_pending(
    dashr: Dashr, server: ScriptedServer, workers: Workers
) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold(request: RecordedRequest) -> Reply:
        entered.set()
        release.wait(30)
        return use("list_turn_nodes")

    workers.script(hold, use("finish_turn_compression"))
    run_turn(dashr, server)
    assert entered.wait(30)
    dashr._turn_jobs.close(timeout=0.01)  # stops waiting: the job in flight writes nothing more
    release.set()
    assert dashr.wait_for_turns(30)
    assert len(workers.requests) == 1  # no request after the close
    assert [t.status for t in dashr.turns()] == ["pending"]
    assert turn_passes(dashr) == []


# --------------------------------------------------------------------------- the tools


def small_editor(d: Dashr, server: ScriptedServer) -> TurnEditor:
    run_turn(d, server)
    assert d.wait_for_turns(60)
    return TurnEditor(turn_nodes(d.session, 1))


def test_the_dispatcher_turns_every_mistake_into_a_result(
    tmp_path: Path, server: ScriptedServer
) -> None:
    with Dashr.create(tmp_path / "d.jsonl") as d:  # turn memory off: the turn stays as it is
        editor = small_editor(d, server)
    assert [t["function"]["name"] for t in editor_tool_schemas()] == list(EDITOR_TOOL_NAMES)

    bad_json = dispatch("read_turn_nodes", "{ids: n1}", editor)
    assert bad_json.error and "not valid JSON" in bad_json.text
    unknown = dispatch("read_turn_nodes", '{"ids": ["n1"], "limit": 3}', editor)
    assert (
        unknown.error
        and "unknown argument 'limit'; it takes: ids, max_chars, offset" in unknown.text
    )
    assert dispatch("read_turn_nodes", {"ids": []}, editor).error
    paged = dispatch("read_turn_nodes", {"ids": ["n1..n6"], "max_chars": 50}, editor)
    assert not paged.error and "read the same nodes again with offset=50" in paged.text

    # A failed final validation comes back as the result, and the turn stays editable.
    half = dispatch("replace_turn_nodes", {"range": "n2..n6", "nodes": [node("user", "x")]}, editor)
    assert half.accepted_edit and "r1 draws on n2, n3, n4, n5, n6" in half.text
    failed = dispatch("finish_turn_compression", "", editor)
    assert failed.error and not failed.finished
    assert "[shape] the turn must end with an assistant node; r1 is user" in failed.text
    stale = dispatch(
        "replace_turn_nodes", {"range": "n3", "nodes": [node("assistant", "y")]}, editor
    )
    assert stale.error and "node n3 was replaced by r1" in stale.text
    fixed = dispatch(
        "replace_turn_nodes", {"range": "r1", "nodes": [node("assistant", FINAL)]}, editor
    )
    assert fixed.accepted_edit
    done = dispatch("finish_turn_compression", None, editor)
    assert done.finished and "6 → 2 nodes" in done.text
    refused = dispatch("bash", '{"command": "rm -rf /"}', editor)
    assert refused.error and not refused.finished and refused.text.startswith("refused: 'bash'")


def test_a_compressor_called_with_the_nodes_alone_runs_fresh_workers(
    tmp_path: Path, server: ScriptedServer, workers: Workers
) -> None:
    with Dashr.create(tmp_path / "alone.jsonl") as d:
        run_turn(d, server)
        nodes = turn_nodes(d.session, 1)
    workers.script(
        use(
            "replace_turn_nodes",
            range="n1..n6",
            nodes=[node("user", REQUEST), node("assistant", FINAL)],
        ),
        use("finish_turn_compression"),
    )
    compressor = LLMTurnCompressor(base_url=server.base_url, model=MODEL, max_retries=0)
    editor = compressor(nodes)
    assert editor is not None and [n.id for n in editor.nodes] == ["r1", "r2"]
    assert len(workers.requests[0].messages) == 1
    # A finish without any accepted edit: the turn is already compact (nothing to gain).
    workers.script(use("finish_turn_compression"))
    assert compressor(nodes) is None


def test_make_turn_compressor_names_both_and_the_extractive_one_matches_the_default(
    tmp_path: Path, server: ScriptedServer
) -> None:
    llm = make_turn_compressor("llm", base_url=server.base_url, model=MODEL, api_key="sk-secret-1")
    assert isinstance(llm, LLMTurnCompressor) and "sk-secret-1" not in repr(llm)
    with pytest.raises(
        ConfigError, match=r"make_turn_compressor\.kind: expected 'extractive' or 'llm'"
    ):
        make_turn_compressor("summary")
    with pytest.raises(ConfigError, match="no options for the extractive compressor"):
        make_turn_compressor("extractive", model="m")
    with pytest.raises(ConfigError, match=r"LLMTurnCompressor\.max_steps"):
        LLMTurnCompressor(base_url=server.base_url, model=MODEL, max_steps=0)

    landed = []
    for name, compressor in (("default", None), ("named", make_turn_compressor("extractive"))):
        with Dashr.create(tmp_path / f"{name}.jsonl", config=ON) as d:
            assert compressor is None or isinstance(compressor, ExtractiveTurnCompressor)
            d.turn_compressor = compressor
            run_turn(d, server)
            assert d.wait_for_turns(60)
            assert [t.status for t in d.turns()] == ["landed"]
            landed.append(turn_messages(d))
    assert landed[0] == landed[1]


def test_the_default_config_keeps_turn_memory_off_for_an_llm_compressor(
    tmp_path: Path, server: ScriptedServer, workers: Workers
) -> None:
    with Dashr.create(tmp_path / "off.jsonl", config=CompactionConfig()) as d:
        d.turn_compressor = LLMTurnCompressor(base_url=server.base_url, model=MODEL)
        run_turn(d, server)
        assert d.wait_for_turns(10)
        assert d.turns() == () and workers.requests == []


def test_the_context_cuts_the_main_request_after_the_turn_even_when_more_follows(
    tmp_path: Path, server: ScriptedServer
) -> None:
    with Dashr.create(tmp_path / "two.jsonl") as d:  # off: no job runs, both turns stay
        run_turn(d, server)
        run_turn(d, server, text="And the third file?")
        nodes = turn_nodes(d.session, 1)
        with d.session.lock:
            context = d._turn_jobs._context(Job(1, "j9", 9), nodes)
        messages = d.session.messages()
        cut = messages.index({"role": "user", "content": "And the third file?"})
        assert list(context.messages) == messages[:cut]
        assert context.messages[-1] == {"role": "assistant", "content": FINAL}
        assert list(context.tools) == d.request_tools()
        assert (context.turn, context.worker_attempts) == (1, d.config.turn_worker_attempts)


def test_a_bad_connection_option_names_the_compressors_argument() -> None:
    from dashr_ext._turnmemory.llm import LLMTurnCompressor

    with pytest.raises(ConfigError, match=r"LLMTurnCompressor\.max_retries: expected an integer"):
        LLMTurnCompressor(base_url="http://127.0.0.1:9", model="m", max_retries=-1)
