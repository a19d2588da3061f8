"""One agent for both places: the same loop over a session in a Jupyter kernel.

``Agent(KernelSession(...))`` runs the loop of ``Agent(Dashr(...))``: the model is called from
this process, the session, its archive and the ``run_cell`` cells live in a real kernel
(jupyter_client, the ``dashr`` comm). ``dashr agent --start | --kernel`` runs a turn from the
command line. The model is the scripted OpenAI-compatible server on loopback.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import orphan_results

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._agent_host import HOST_MEMBERS, DashrHost, host_problem
from dashr_ext._cli import main
from dashr_ext._client import ChatClient
from dashr_ext._events import Event
from dashr_ext._formats.openai import to_openai
from dashr_ext.agent import RUN_CELL, Agent, StepReport, run_cell_schema
from dashr_ext.bridge import KernelSession
from dashr_ext.errors import ConfigError
from dashr_ext.testing import (
    RecordedRequest,
    Responder,
    ScriptedServer,
    answer,
    call_run_cell,
    call_tool,
    latest_checkpoint,
    read_archive,
)

GOLDEN = Path(__file__).resolve().parent / "golden"
WINDOW = {"recency_window_tokens": 2500, "retain_tokens": 600}


def batch_cell(i: int, rows: int = 30) -> str:
    """A cell whose output (~300 tokens) is deterministic and unique to batch ``i``."""
    return (
        "import random\n"
        f"rng = random.Random({i})\n"
        f'print("batch {i} | token %08x" % rng.getrandbits(32))\n'
        f"for k in range({rows}):\n"
        f'    print(f"  batch {i} row {{k:02d}} value={{rng.randint(1000, 9999)}}")'
    )


def task_script() -> list[Responder]:
    """Two turns: eight batches (compacting), then a search and a read of the archive."""
    return [
        *(call_run_cell(batch_cell(i)) for i in range(8)),
        answer("Loaded eight batches."),
        call_tool("history_search", {"query": "batch 0 | token"}),
        read_archive(),
        answer("Done."),
    ]


TURNS = ("Load eight batches of readings.", "What did the first archived tool result say?")


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[KernelSession]:
    """A new kernel of this interpreter (DASHR_HOME is the test's), its session attached."""
    with KernelSession.start(session_path=tmp_path / "kernel.jsonl") as ks:
        yield ks


def agent_for(host: Any, server: ScriptedServer, **options: Any) -> Agent:
    return Agent(host, base_url=server.base_url, model="scripted-model", api_key=None, **options)


def tool_results(d: Dashr) -> list[Event]:
    return [e for e in d.session.events if e.type == "tool/result"]


def kernel_log(ks: KernelSession) -> Dashr:
    """The kernel's session file, read from this process (the kernel holds the writer lock)."""
    assert ks.session_path is not None
    return Dashr.open(ks.session_path, read_only=True)


MINUTE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}Z")
"""A logged time as a search hit or a read page shows it (to the minute, UTC)."""


def clockless(value: Any) -> Any:
    """``value`` (JSON) with every logged minute replaced by the same placeholder."""
    return json.loads(MINUTE.sub("<minute>", json.dumps(value)))


def lines(steps: tuple[StepReport, ...]) -> list[str]:
    return [step.line() for step in steps]


# --------------------------------------------------------------------------- the same loop


@pytest.mark.slow
def test_the_agent_in_a_kernel_compacts_and_reads_an_original_back_byte_for_byte(
    kernel: KernelSession, server: ScriptedServer
) -> None:
    kernel.configure(**WINDOW)
    server.script(*task_script())
    agent = agent_for(kernel, server)

    first = agent.run_turn(TURNS[0])
    second = agent.run_turn(TURNS[1])

    assert (first.reason, first.text, len(first.steps)) == ("completed", "Loaded eight batches.", 9)
    assert (second.reason, second.text, len(second.steps)) == ("completed", "Done.", 3)
    assert len(first.checkpoints) >= 2
    # Every compaction the kernel committed shows in the very next request's footers.
    requests = server.model_requests
    assert len(requests) == 12
    for step, request in zip([*first.steps, *second.steps], requests, strict=True):
        for checkpoint in step.compacted[-1:]:
            text = "\n".join(str(m.get("content") or "") for m in request.messages)
            assert f"[checkpoint {checkpoint}" in text  # its footer, in any form
    assert requests[0].tool_names == [RUN_CELL]
    assert requests[-1].tool_names == [
        RUN_CELL,
        "history_outline",
        "history_read",
        "history_search",
    ]

    with kernel_log(kernel) as d:
        # run_cell ran in the kernel and printed the archive entry of the newest checkpoint
        # the model was shown: its first tool result, byte for byte.
        read = tool_results(d)[-1]
        checkpoint = latest_checkpoint(requests[10])
        assert checkpoint is not None and checkpoint in first.checkpoints + second.checkpoints
        entry = d.archive[checkpoint]["tool_results"][0]
        original = d.session.event(entry["seq"]).message.text
        assert d.session.is_current(entry["seq"]) is False  # only the archive holds it now
        assert original.startswith("batch ")
        assert (read.message.text, read.message.is_error) == (original + "\n", False)
        # The search ran through the kernel's recall tool.
        search = tool_results(d)[-2]
        assert search.message.tool_name == "history_search"
        assert "batch 0 | token" in search.message.text
        # One consistent log: both turns closed, every call answered, the run_cell schema
        # counted in the kernel's envelope while the agent lives.
        assert [(t.reason, len(t.steps)) for t in d.session.turns] == [
            ("completed", 9),
            ("completed", 3),
        ]
        assert d.session.pending_tool_calls() == []
        assert orphan_results(to_openai(d.session)) == []
    assert kernel.extra_tools == [run_cell_schema()]
    agent.close()
    assert kernel.extra_tools == []


@pytest.mark.slow
def test_a_kernel_session_and_a_local_one_see_the_same_requests_and_steps(
    kernel: KernelSession, tmp_path: Path
) -> None:
    """One loop, two places: the same script gives the same model requests, step for step."""
    kernel.configure(**WINDOW)
    runs: list[tuple[list[RecordedRequest], list[str], list[str], list[dict[str, Any]]]] = []
    local = Dashr.create(tmp_path / "local.jsonl", session_id="local")
    local.config = CompactionConfig(**WINDOW)  # recorded in the log, as configure() records it
    for host in (local, kernel):
        with ScriptedServer() as server:
            server.script(*task_script())
            with agent_for(host, server) as agent:
                replies = [agent.run_turn(text) for text in TURNS]
            if host is local:
                messages = to_openai(local.session)
            else:
                with kernel_log(kernel) as d:
                    messages = to_openai(d.session)
            runs.append(
                (
                    server.model_requests,
                    [line for r in replies for line in lines(r.steps)],
                    [c for r in replies for c in r.checkpoints],
                    messages,
                )
            )
    (local_requests, local_steps, local_cps, local_messages) = runs[0]
    (remote_requests, remote_steps, remote_cps, remote_messages) = runs[1]
    assert len(local_cps) >= 3
    assert remote_steps == local_steps
    assert remote_cps == local_cps
    # A search hit names the minute its event was logged: the two runs may straddle one.
    assert clockless([r.json for r in remote_requests]) == clockless(
        [r.json for r in local_requests]
    )
    assert clockless(remote_messages) == clockless(local_messages)
    assert MINUTE.search(json.dumps([r.json for r in local_requests]))  # what is masked


@pytest.mark.slow
def test_errors_in_the_kernel_are_tool_errors_and_the_turn_still_closes(
    kernel: KernelSession, server: ScriptedServer
) -> None:
    server.script(
        call_run_cell("1 / 0"),
        call_tool("history_read", {"checkpoint": "c999"}),
        call_tool("no_such_tool", {}),
        call_run_cell("value = 6 * 7\nvalue"),
        answer("42."),
    )
    with agent_for(kernel, server) as agent:
        reply = agent.run_turn("Divide, then multiply.")
    assert reply.text == "42."
    assert [(s.tools, s.tool_errors) for s in reply.steps] == [
        (("run_cell",), (True,)),
        (("history_read",), (True,)),
        (("no_such_tool",), (True,)),
        (("run_cell",), (False,)),
        ((), ()),
    ]
    with kernel_log(kernel) as d:
        results = [(e.message.is_error, e.message.text) for e in tool_results(d)]
    assert [error for error, _ in results] == [True, True, True, False]
    assert "ZeroDivisionError" in results[0][1]
    assert results[1][1].startswith("error: ")
    assert results[2][1].startswith("error: unknown tool 'no_such_tool'; the tools are: run_cell")
    assert results[3][1] == "42"
    # The cell ran in the kernel's namespace: the variable is there for the next cell.
    assert kernel.run_cell("print(value)").text == "42\n"


def test_an_agent_host_is_checked_by_name_without_running_anything(
    tmp_path: Path, server: ScriptedServer
) -> None:
    client = ChatClient("http://127.0.0.1:9/v1", "m", api_key=None)
    with pytest.raises(ConfigError, match=r"Agent\.host: expected a Dashr or an AgentHost, got "):
        Agent(object(), client=client)  # type: ignore[arg-type]
    assert host_problem(object()) == f"object object without {', '.join(HOST_MEMBERS)}"

    class Probe:
        """Every member present; a property that runs would fail the check."""

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"{name} was run")

    for name in HOST_MEMBERS:
        if name != "__len__":
            setattr(Probe, name, property(lambda self: 1 / 0))
    Probe.__len__ = lambda self: 1 // 0  # type: ignore[method-assign]
    assert host_problem(Probe()) is None
    with Dashr.create(tmp_path / "s.jsonl") as d:
        assert host_problem(DashrHost(d)) is None
        host = DashrHost(d)
        with pytest.raises(ConfigError, match=r"Agent\.shell: expected None unless the host"):
            Agent(host, client=client, namespace={})


def test_any_agent_host_runs_the_loop_and_writes_the_log_a_dashr_does(tmp_path: Path) -> None:
    """A host exposing only the AgentHost names gives the log Agent(Dashr) gives."""

    class OnlyTheProtocol:
        def __init__(self, inner: DashrHost) -> None:
            self._inner = inner
            self.used: set[str] = set()

        def __len__(self) -> int:
            self.used.add("__len__")
            return len(self._inner)

        def __getattr__(self, name: str) -> Any:
            assert name in HOST_MEMBERS, name
            self.used.add(name)
            return getattr(self._inner, name)

    for name in HOST_MEMBERS:  # visible to the static check, forwarded when called
        if name not in ("__len__", "extra_tools"):
            setattr(
                OnlyTheProtocol,
                name,
                property(lambda self, n=name: self.__getattr__(n)),  # type: ignore[misc]
            )
    OnlyTheProtocol.extra_tools = property(  # type: ignore[attr-defined]
        lambda self: self.__getattr__("extra_tools"),
        lambda self, tools: setattr(self._inner, "extra_tools", tools),
    )
    logs = []
    for wrap in (False, True):
        with ScriptedServer() as scripted:
            scripted.script(call_run_cell("print(6 * 7)"), answer("42."))
            path = tmp_path / f"{wrap}.jsonl"
            ticks = itertools.count(1_783_339_200_000, 1000)
            with Dashr.create(path, session_id="same", clock=functools.partial(next, ticks)) as d:
                host: Any = OnlyTheProtocol(DashrHost(d, namespace={})) if wrap else d
                with agent_for(host, scripted) as agent:
                    assert agent.run_turn("Multiply.") == "42."
                if wrap:
                    assert host.used >= {"record_openai", "append_tool_result", "run_cell"}
            logs.append(path.read_bytes().split(b"\n"))
    assert logs[0] == logs[1]


def test_the_agent_in_this_process_writes_the_pinned_log(tmp_path: Path) -> None:
    """Agent(Dashr) reaches its session only through DashrHost, and writes what it wrote
    before: tests/golden/agent.jsonl (two turns: compactions, an error cell, an overflow
    retry, recall, a bad call, an unknown tool, the archive read back)."""
    spec = importlib.util.spec_from_file_location(
        "build_agent_golden", GOLDEN / "build_agent_golden.py"
    )
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    log, steps = builder.run(tmp_path)
    assert steps[5:10] == [
        "step 6: run_cell · ~1796 tokens · compacted → c31",
        "step 7: run_cell · ~2255 tokens",
        "step 8: run_cell · ~1754 tokens · compacted → c45",
        "step 9: run_cell (error) · ~2213 tokens",
        "step 10: answer · ~2360 tokens",
    ]
    assert steps[10] == (
        "step 1: history_search · ~796 tokens · context overflow → retried once · compacted → c66"
    )
    expected = (GOLDEN / "agent.jsonl").read_bytes()
    assert log.split(b"\n") == expected.split(b"\n")


# --------------------------------------------------------------------------- dashr agent


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["DASHR_HOME"] = str(home)
    env.pop("DASHR_BASE_URL", None)
    env.pop("DASHR_MODEL", None)
    return env


def dashr_agent(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dashr_ext._cli", "agent", *args],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )


def own_lines(stderr: str) -> list[str]:
    """stderr without the kernel's own log lines (``[IPKernelApp] …``)."""
    return [line for line in stderr.splitlines() if not line.startswith("[IPKernelApp]")]


@pytest.mark.slow
def test_dashr_agent_start_runs_turns_in_a_kernel_of_its_own(
    tmp_path: Path, server: ScriptedServer
) -> None:
    session = tmp_path / "cli.jsonl"
    server.script(
        call_run_cell("total = 6 * 7\nprint(total)"),
        answer("The total is 42."),
        call_run_cell("print('total' in globals())"),
        answer("A new kernel: the variable is gone, the session is not."),
    )
    common = ["--start", "--base-url", server.base_url, "--model", "scripted-model"]
    common += ["--session", str(session), "--set", "retain_tokens=600"]
    common += ["--set", "recency_window_tokens=2500"]

    first = dashr_agent(*common, "Multiply six by seven.", home=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "The total is 42.\n"
    assert own_lines(first.stderr) == [
        "step 1: run_cell · ~347 tokens",
        "step 2: answer · ~396 tokens",
        f"turn 1: completed in 2 steps; session {session}",
    ]
    second = dashr_agent(*common, "Is the total still defined?", home=tmp_path)
    assert second.returncode == 0, second.stderr
    assert own_lines(second.stderr)[-1] == f"turn 2: completed in 2 steps; session {session}"

    # The kernels are gone: their writer lock is released, this process may write.
    with Dashr.open(session) as d:
        assert [(t.reason, len(t.steps)) for t in d.session.turns] == [
            ("completed", 2),
            ("completed", 2),
        ]
        assert [e.message.text for e in tool_results(d)] == ["42\n", "False\n"]
    # The second turn's request carried the first turn: the session went on.
    assert [m["role"] for m in server.model_requests[2].messages][:5] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


@pytest.mark.slow
def test_dashr_agent_kernel_runs_a_turn_in_a_running_kernel_and_leaves_it_running(
    kernel: KernelSession, server: ScriptedServer, tmp_path: Path
) -> None:
    assert kernel.manager is not None
    server.script(call_run_cell("total = 6 * 7\nprint(total)"), answer("42."))
    done = dashr_agent(
        "--kernel",
        kernel.manager.connection_file,
        "--base-url",
        server.base_url,
        "--model",
        "scripted-model",
        "Multiply six by seven.",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42.\n"
    assert own_lines(done.stderr)[-1] == (
        f"turn 1: completed in 2 steps; session {kernel.session_path}"
    )
    assert kernel.manager.is_alive()
    assert kernel.run_cell("print(total)").text == "42\n"  # the cell ran in this kernel
    assert kernel.state()["openTurn"] is None
    assert kernel.extra_tools == []  # the agent withdrew its run_cell schema


def interrupted_cli_turn(where: list[str], home: Path, server: ScriptedServer) -> None:
    """Run ``dashr agent`` on a cell that sleeps; Ctrl-C it once the cell runs."""
    started = home / "cell-started"
    server.script(
        call_run_cell(f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(600)")
    )
    argv = ["agent", *where, "--timeout", "30", "Wait."]
    argv += ["--base-url", server.base_url, "--model", "scripted-model"]
    process = subprocess.Popen(
        [sys.executable, "-m", "dashr_ext._cli", *argv],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not started.exists():  # the cell is running in the kernel
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert out == ""
    assert own_lines(err)[-1] == "dashr agent: interrupted; the turn ended 'interrupted'"


def assert_interrupted(d: Dashr) -> None:
    (turn,) = d.session.turns
    assert turn.reason == "interrupted"
    (result,) = tool_results(d)
    assert result.message.is_error
    assert result.message.text.startswith("[interrupted: KeyboardInterrupt ended the turn")
    assert d.session.pending_tool_calls() == []


@pytest.mark.slow
def test_ctrl_c_stops_the_cell_in_a_started_kernel_and_the_turn_is_recorded_interrupted(
    tmp_path: Path, server: ScriptedServer
) -> None:
    session = tmp_path / "cli.jsonl"
    interrupted_cli_turn(["--start", "--session", str(session)], tmp_path, server)
    with Dashr.open(session) as d:  # the kernel is gone: its writer lock with it
        assert_interrupted(d)


@pytest.mark.slow
def test_ctrl_c_stops_the_cell_in_a_connected_kernel_which_keeps_running(
    kernel: KernelSession, tmp_path: Path, server: ScriptedServer
) -> None:
    assert kernel.manager is not None
    interrupted_cli_turn(["--kernel", kernel.manager.connection_file], tmp_path, server)
    assert kernel.manager.is_alive()
    assert kernel.run_cell("print('still here')").text == "still here\n"
    with kernel_log(kernel) as d:
        assert_interrupted(d)


def test_dashr_agent_usage_and_input_errors_come_before_any_kernel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    started: list[object] = []
    monkeypatch.setattr(KernelSession, "start", lambda **kw: started.append(kw))
    monkeypatch.setattr(KernelSession, "connect", lambda *a, **kw: started.append(a))

    def run(*argv: str) -> tuple[int, str]:
        try:
            code = main(["agent", *argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
        err = capsys.readouterr().err
        return code, err

    code, err = run("--start", "--kernel", "k.json", "task")
    assert code == 2 and "not allowed with argument" in err
    code, err = run("task")
    assert code == 2 and "one of the arguments --kernel --start is required" in err
    code, err = run("--kernel", str(tmp_path / "missing.json"), "task")
    assert (code, err) == (1, f"dashr agent: no such file: {tmp_path / 'missing.json'}\n")
    code, err = run("--start", "--set", "retain_tokens", "task")
    assert (code, err) == (1, "dashr agent: --set: expected NAME=VALUE, got 'retain_tokens'\n")
    code, err = run("--start", "--base-url", "http://127.0.0.1:9/v1", "task")
    assert code == 1 and err.startswith("dashr agent: ChatClient.model: expected ")
    assert started == []
