"""Progress of slow passes and retried requests; %%agent steps with their code and output.

The delayed display is driven by a manual clock and timers; the shells and the kernel run
with no delay (``delay_s = 0``: every pass shows), so nothing here depends on timing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cell as run  # tests/ is on sys.path under pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager
from test_kernel import ThisInterpreter
from traitlets.config import Config

import dashr_ext
from dashr_ext import _progress
from dashr_ext._cli import main
from dashr_ext._client import RetryNotice
from dashr_ext._controller import Dashr
from dashr_ext._demo import DEMO_TOOLS, demo_messages
from dashr_ext._display import MarkdownReply, StepView, output_excerpt
from dashr_ext._progress import LineSink, Progress, ProgressView
from dashr_ext.testing import (
    Reply,
    ScriptedServer,
    answer,
    call_run_cell,
    chat_completion,
    rate_limited,
    server_error,
)

SUMMARY = chat_completion("## Summary\nThe retry tests were fixed; the budget is 3.")


def busy(retry_after: str = "0") -> Reply:
    """A 503 the client retries at once (``Retry-After: 0``)."""
    reply = server_error(503, "overloaded")
    return Reply(reply.status, reply.body, {"Retry-After": retry_after})


# --------------------------------------------------------------------------- the tracker


@dataclass
class Timers:
    """Manual timers: ``fire()`` runs what is due, as a thread timer would later."""

    pending: list[list[Any]] = field(default_factory=list)

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        entry: list[Any] = [delay_s, callback, False]
        self.pending.append(entry)
        return lambda: entry.__setitem__(2, True)

    @property
    def live(self) -> int:
        return sum(1 for entry in self.pending if not entry[2])

    def fire(self) -> None:
        due, self.pending = self.pending, []
        for _delay, callback, cancelled in due:
            if not cancelled:
                callback()


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Shown:
    views: list[ProgressView] = field(default_factory=list)

    def show(self, view: ProgressView) -> None:
        self.views.append(view)


@dataclass
class Tracked:
    progress: Progress
    timers: Timers
    clock: Clock
    sinks: list[Shown]

    @property
    def views(self) -> list[ProgressView]:
        return [view for sink in self.sinks for view in sink.views]


@pytest.fixture
def tracked() -> Tracked:
    timers, clock, sinks = Timers(), Clock(), []

    def sink() -> Shown:
        sinks.append(Shown())
        return sinks[-1]

    progress = Progress(sink, delay_s=1.0, tick_s=1.0, clock=clock, schedule=timers.schedule)
    return Tracked(progress, timers, clock, sinks)


def notice(
    label: str = "llm summarizer", attempt: int = 1, delay: float | None = 0.5
) -> RetryNotice:
    return RetryNotice(label, attempt, 4, "HTTP 503: overloaded", delay, 503)


def test_a_pass_that_ends_within_the_delay_shows_nothing(tracked: Tracked) -> None:
    p = tracked.progress
    p.phase("summarizing", "1 region")
    tracked.clock.now = 0.4
    p.phase("committing", "compaction pass p12")
    p.phase("done", "c13: ~900 -> ~300 tokens")
    assert tracked.timers.live == 0  # the delay's timer was cancelled
    tracked.timers.fire()
    p.end()
    assert tracked.sinks == []


def test_a_slow_pass_appears_after_the_delay_and_follows_its_phases_and_retries(
    tracked: Tracked,
) -> None:
    p, clock = tracked.progress, tracked.clock
    p.phase("summarizing", "1 region")
    assert tracked.sinks == []
    clock.now = 1.0
    tracked.timers.fire()  # the delay passed: the display appears
    clock.now = 1.2
    p.retry(notice())
    clock.now = 2.5
    tracked.timers.fire()  # a tick: the elapsed time moves on
    p.phase("committing", "compaction pass p12")
    clock.now = 2.75
    p.phase("done", "c13: ~900 -> ~300 tokens")
    (sink,) = tracked.sinks
    assert [v.headline for v in sink.views] == [
        "dashr: summarizing 1 region · 1 s",
        "dashr: summarizing 1 region · 1 s",
        "dashr: summarizing 1 region · 2 s",
        "dashr: committing compaction pass p12 · 2 s",
        "dashr: compacted c13: ~900 -> ~300 tokens · 2.8 s",
    ]
    final = sink.views[-1]
    assert final.state == "done"
    assert final.retries == (
        "llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded); retrying in 0.5 s",
    )
    assert final.text == (
        "dashr: compacted c13: ~900 -> ~300 tokens · 2.8 s\n"
        "  llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded); retrying in 0.5 s"
    )
    html = final._repr_html_()
    assert 'class="dashr-progress dashr-progress-done"' in html
    assert "<li>llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded); retrying" in html
    assert tracked.timers.live == 0  # no tick after the end


@dataclass
class FakeEvent:
    type: str
    data: dict[str, Any]


@dataclass
class FakeLog:
    events: list[FakeEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)


def test_a_pass_whose_failure_is_logged_shows_failed_at_the_next_tick(tracked: Tracked) -> None:
    p = tracked.progress
    log = FakeLog([FakeEvent("compaction/start", {})])
    p.session = log  # type: ignore[assignment]
    p.phase("summarizing", "1 region")
    tracked.clock.now = 1.0
    tracked.timers.fire()
    log.events.append(FakeEvent("compaction/end", {"error": "llm summarizer gave up"}))
    tracked.clock.now = 2.0
    tracked.timers.fire()
    last = tracked.views[-1]
    assert (last.state, last.status) == ("failed", "compaction failed: llm summarizer gave up")
    assert tracked.timers.live == 0


def test_a_prune_only_pass_ends_as_pruned(tracked: Tracked) -> None:
    p = tracked.progress
    p.phase("pruning", "2 oversize output(s)")
    tracked.clock.now = 1.5
    tracked.timers.fire()
    p.end()
    assert [v.status for v in tracked.views] == [
        "pruning 2 oversize output(s)",
        "pruned 2 oversize output(s)",
    ]


def test_retries_outside_a_pass_are_a_request_that_ends_with_its_step(tracked: Tracked) -> None:
    p = tracked.progress
    p.retry(notice("agent"))
    tracked.clock.now = 1.0
    tracked.timers.fire()
    p.end()
    assert [(v.state, v.status) for v in tracked.views] == [
        ("running", "retrying the agent request"),
        ("done", "agent request went through after 1 retry"),
    ]
    p.retry(notice("agent", 1))
    tracked.clock.now = 2.0
    tracked.timers.fire()
    p.retry(notice("agent", 4, None))  # the last attempt: the call raises
    assert tracked.views[-1].retries[-1].endswith("; giving up")
    assert (tracked.views[-1].state, tracked.views[-1].status) == (
        "failed",
        "agent request failed after 4 attempts",
    )


def test_a_retried_request_ends_when_its_reply_is_logged_not_when_its_tools_finish(
    tracked: Tracked,
) -> None:
    p, log = tracked.progress, FakeLog()
    p.session = log  # type: ignore[assignment]
    p.retry(notice("agent"))
    log.events.append(FakeEvent("assistant/message", {}))  # answered at once
    tracked.clock.now = 1.0
    tracked.timers.fire()
    assert tracked.sinks == [] and tracked.timers.live == 0  # fast: nothing shown

    p.retry(notice("agent"))
    tracked.clock.now = 2.0
    tracked.timers.fire()
    log.events.append(FakeEvent("assistant/message", {}))  # then run_cell runs for a while
    tracked.clock.now = 3.0
    tracked.timers.fire()
    assert [(v.state, v.status) for v in tracked.views] == [
        ("running", "retrying the agent request"),
        ("done", "agent request went through after 1 retry"),
    ]
    assert tracked.timers.live == 0


def test_a_new_pass_while_one_shows_starts_a_new_display(tracked: Tracked) -> None:
    p = tracked.progress
    p.phase("summarizing", "1 region")
    tracked.clock.now = 1.0
    tracked.timers.fire()
    p.phase("summarizing", "3 regions concurrently")  # the first one never said done
    assert len(tracked.sinks) == 1
    assert tracked.sinks[0].views[-1].status == "summarizing 1 region ended"
    tracked.clock.now = 2.5
    tracked.timers.fire()
    assert [v.status for v in tracked.sinks[1].views] == ["summarizing 3 regions concurrently"]


def test_a_terminal_gets_one_line_per_change_and_none_per_tick() -> None:
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.extend(t for t in text.split("\n") if t)

        def flush(self) -> None:
            pass

    sink = LineSink(Stream(), "dashr compact")  # type: ignore[arg-type]
    running = ProgressView("summarizing 1 region", "running", 1.02)
    sink.show(running)
    sink.show(ProgressView("summarizing 1 region", "running", 2.0))  # a tick
    retried = ("llm summarizer: attempt 1 of 4 failed (HTTP 429: slow down); retrying in 2.0 s",)
    sink.show(ProgressView("summarizing 1 region", "running", 2.1, retried))
    sink.show(ProgressView("compacted c13: ~900 -> ~300 tokens", "done", 4.26, retried))
    assert lines == [
        "dashr compact: summarizing 1 region (1.0 s)",
        "dashr compact: llm summarizer: attempt 1 of 4 failed (HTTP 429: slow down); "
        "retrying in 2.0 s",
        "dashr compact: compacted c13: ~900 -> ~300 tokens (4.3 s)",
    ]


def test_watch_keeps_callbacks_already_set_and_restores_them(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    views: list[ProgressView] = []

    class Sink:
        def show(self, view: ProgressView) -> None:
            views.append(view)

    with Dashr.create(tmp_path / "s.jsonl") as d:
        d.engine.progress = lambda phase, detail: seen.append((phase, detail))
        previous = d.engine.progress
        progress = Progress(Sink, delay_s=0)
        with progress.watch(d), progress.watch(d):  # nested: fed once
            d.engine.progress("summarizing", "1 region")
        assert d.engine.progress is previous
    assert seen == [("summarizing", "1 region")]
    assert [v.status for v in views] == ["summarizing 1 region", "summarizing 1 region ended"]


# --------------------------------------------------------------------------- in a shell


def new_shell() -> InteractiveShell:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    return InteractiveShell(config=config)


@pytest.fixture
def ip() -> Iterator[InteractiveShell]:
    main_module = sys.modules.get("__main__")
    shell = new_shell()
    yield shell
    dashr_ext.unload_ipython_extension(shell)
    if main_module is not None:
        sys.modules["__main__"] = main_module


def llm_shell(ip: InteractiveShell, server: ScriptedServer) -> None:
    """The extension with the llm summarizer at ``server``, a demo session, no delay."""
    run(ip, "%load_ext dashr_ext")
    for line in (
        "%config Dashr.retain_tokens = 1500",
        "%config Dashr.recency_window_tokens = 6000",
        f"%config Dashr.llm_base_url = {server.base_url!r}",
        "%config Dashr.llm_model = 'm'",
        "%config Dashr.summarizer = 'llm'",
    ):
        run(ip, line)
    ip.magics_manager.registry["Dashr"].progress.delay_s = 0
    d = ip.user_ns["dashr"]
    for message in demo_messages():
        d.record_openai(message)


def test_compact_on_a_terminal_prints_each_phase_and_each_retry_with_its_reason(
    ip: InteractiveShell, server: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    llm_shell(ip, server)
    server.script(busy(), rate_limited(retry_after=0), SUMMARY)
    capsys.readouterr()
    run(ip, "%compact")
    lines = capsys.readouterr().err.splitlines()
    patterns = [
        r"dashr: summarizing 1 region \(\d+\.\d s\)",
        r"dashr: llm summarizer: attempt 1 of 4 failed \(HTTP 503: overloaded \| server_error\); "
        r"retrying in 0\.0 s",
        r"dashr: llm summarizer: attempt 2 of 4 failed \(HTTP 429: Rate limit reached \| "
        r"rate_limit_error\); retrying in 0\.0 s",
        r"dashr: committing compaction pass p\d+ \(\d+\.\d s\)",
        r"dashr: compacted c\d+: ~\d+ -> ~\d+ tokens \(\d+\.\d s\)",
    ]
    assert len(lines) == len(patterns), lines
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), line


def test_compact_in_a_notebook_shows_one_display_and_updates_it_in_place(
    ip: InteractiveShell, server: ScriptedServer
) -> None:
    llm_shell(ip, server)
    magics = ip.magics_manager.registry["Dashr"]
    magics.progress.live = True  # what a kernel's shell gets
    publisher = CapturingDisplayPublisher()
    ip.display_pub = publisher
    server.script(busy(), SUMMARY)
    report = run(ip, "%compact")
    assert str(report).startswith("compacted ")
    outputs = publisher.outputs
    ids = {o["transient"]["display_id"] for o in outputs}
    assert len(ids) == 1 and len(outputs) == 4
    assert [o["update"] for o in outputs] == [False, True, True, True]
    texts = [o["data"]["text/plain"] for o in outputs]
    retry = (
        "  llm summarizer: attempt 1 of 4 failed (HTTP 503: overloaded | server_error); "
        "retrying in 0.0 s"
    )
    assert texts[0] == "dashr: summarizing 1 region · 0 s"
    assert texts[1] == f"dashr: summarizing 1 region · 0 s\n{retry}"
    assert re.fullmatch(
        r"dashr: committing compaction pass p\d+ · 0 s\n" + re.escape(retry), texts[2]
    )
    assert re.fullmatch(
        r"dashr: compacted c\d+: ~\d+ -> ~\d+ tokens · \d+\.\d s\n" + re.escape(retry), texts[3]
    )
    assert "dashr-progress-done" in outputs[-1]["data"]["text/html"]


def test_a_failing_endpoint_ends_the_display_failed_with_the_reason(
    ip: InteractiveShell, server: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    llm_shell(ip, server)
    server.script(*(busy() for _ in range(4)))
    capsys.readouterr()
    ip.run_cell("%compact")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" failed (")[0] for line in lines[1:5]] == [
        f"dashr: llm summarizer: attempt {n} of 4" for n in (1, 2, 3, 4)
    ]
    assert lines[4].endswith("; giving up")
    assert re.fullmatch(
        r"dashr: compaction failed: llm summarizer: http://\S+ failed after 4 attempts: "
        r"HTTP 503: overloaded \| server_error \(\d+\.\d s\)",
        lines[5],
    )
    assert lines[6].startswith("UsageError: llm summarizer: http://")


def test_a_pressure_pass_in_a_users_loop_shows_its_failure_from_the_log(
    ip: InteractiveShell, server: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    llm_shell(ip, server)
    server.script(*(busy() for _ in range(4)))
    capsys.readouterr()
    run(ip, "import warnings\nwarnings.simplefilter('ignore')\nmessages = dashr.request_messages()")
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"dashr: summarizing 1 region \(\d+\.\d s\)", lines[0])
    assert lines[-1].startswith("dashr: compaction failed: llm summarizer: ")
    assert "failed after 4 attempts: HTTP 503" in lines[-1]


# --------------------------------------------------------------------------- %%agent


def agent_shell(ip: InteractiveShell, server: ScriptedServer) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, f"%config Dashr.agent_base_url = {server.base_url!r}")
    run(ip, "%config Dashr.agent_model = 'scripted'")
    ip.magics_manager.registry["Dashr"].progress.delay_s = 0


CODE = "import math\nrows = [math.sqrt(n) for n in range(3)]\nprint(rows)"


def test_agent_steps_show_the_code_and_an_output_excerpt_and_the_answer_as_markdown(
    ip: InteractiveShell, server: ScriptedServer
) -> None:
    agent_shell(ip, server)
    server.script(call_run_cell(CODE), call_run_cell("1 / 0"), answer("**Done**: see `rows`."))
    publisher = CapturingDisplayPublisher()
    ip.display_pub = publisher
    run(ip, "%%agent\nCompute the roots.")
    reply = ip.user_ns["_"]  # the cell's value (the agent's own cells reset the result)
    first, second, third = (o["data"] for o in publisher.outputs)
    assert re.fullmatch(
        r"step 1: run_cell · ~\d+ tokens\n"
        r"  run_cell:\n"
        r"    import math\n    rows = \[math.sqrt\(n\) for n in range\(3\)\]\n    print\(rows\)\n"
        r"  output:\n"
        r"    \[0\.0, 1\.0, 1\.4142135623730951\]",
        first["text/plain"],
    )
    html = first["text/html"]
    assert html.startswith('<details class="dashr-step"><summary>')
    assert "— import math …</span></summary>" in html
    assert '<span style="color: #008000; font-weight: bold">import</span>' in html  # highlighted
    assert ">[0.0, 1.0, 1.4142135623730951]</pre>" in html
    assert "  error:\n" in second["text/plain"]
    assert second["text/plain"].endswith("ZeroDivisionError: division by zero")
    assert "color:#b22222;" in second["text/html"]
    assert re.fullmatch(r"step 3: answer · ~\d+ tokens", third["text/plain"])
    assert third["text/html"].startswith('<div class="dashr-step">')
    assert isinstance(reply, MarkdownReply) and reply == "**Done**: see `rows`."
    data, _ = ip.display_formatter.format(reply)
    assert data["text/markdown"] == "**Done**: see `rows`."
    assert data["text/plain"] == "**Done**: see `rows`."


def test_agent_request_retries_are_shown_with_their_reason(
    ip: InteractiveShell, server: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    agent_shell(ip, server)
    server.script(rate_limited(retry_after=0), answer("Hello."))
    capsys.readouterr()
    run(ip, "%%agent\nSay hello.")
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(" (", 1)[0] if line.endswith(" s)") else line for line in lines] == [
        "dashr: retrying the agent request",
        "dashr: agent: attempt 1 of 4 failed (HTTP 429: Rate limit reached | "
        "rate_limit_error); retrying in 0.0 s",
        "dashr: agent request went through after 1 retry",
    ]


def test_an_output_excerpt_keeps_the_first_lines_or_the_end_of_an_error() -> None:
    text = "\n".join(f"line {n}" for n in range(1, 21))
    assert output_excerpt(text).splitlines() == [
        *(f"line {n}" for n in range(1, 9)),
        "… (12 more lines)",
    ]
    assert output_excerpt(text, is_error=True).splitlines() == [
        "… (12 more lines)",
        *(f"line {n}" for n in range(13, 21)),
    ]
    assert output_excerpt("x" * 500) == "x" * 199 + "…"
    assert output_excerpt("") == "(no output)"
    assert StepView("step 2: answer · ~10 tokens").text == "step 2: answer · ~10 tokens"


# --------------------------------------------------------------------------- the CLI


def test_dashr_compact_prints_a_stderr_line_per_phase_of_a_slow_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "chat.json"
    source.write_text(json.dumps({"messages": demo_messages(), "tools": DEMO_TOOLS}))
    session = tmp_path / "s.jsonl"
    assert main(["import", str(source), "--format", "openai", "-o", str(session)]) == 0
    monkeypatch.setattr(_progress, "DEFAULT_DELAY_S", 0.0)  # every pass counts as slow
    capsys.readouterr()
    flags = ["--recency-window-tokens", "6000", "--retain-tokens", "1500"]
    assert main(["compact", str(session), *flags]) == 0
    lines = capsys.readouterr().err.splitlines()
    patterns = [
        r"dashr compact: summarizing 1 region \(\d+\.\d s\)",
        r"dashr compact: committing compaction pass p\d+ \(\d+\.\d s\)",
        r"dashr compact: compacted c\d+: ~\d+ -> ~\d+ tokens \(\d+\.\d s\)",
    ]
    assert len(lines) == 3, lines
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), line


# --------------------------------------------------------------------------- in a kernel

KERNEL_SETUP = """\
%load_ext dashr_ext
get_ipython().magics_manager.registry["Dashr"].progress.delay_s = 0
from dashr_ext.testing import (
    Reply, ScriptedServer, answer, call_run_cell, chat_completion, demo_messages, server_error
)
server = ScriptedServer().start()
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelManager]:
    home = tmp_path_factory.mktemp("kernel_home")
    manager = KernelManager(kernel_name="tests", kernel_spec_manager=ThisInterpreter())
    manager.start_kernel(env={**os.environ, "DASHR_HOME": str(home)})
    try:
        yield manager
    finally:
        manager.shutdown_kernel(now=True)


@pytest.fixture
def fresh(kernel: KernelManager) -> Iterator[BlockingKernelClient]:
    kernel.restart_kernel(now=True)
    client = kernel.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield client
    finally:
        client.stop_channels()


def iopub(client: BlockingKernelClient, code: str) -> list[tuple[str, dict[str, Any]]]:
    """Every iopub message (type, content) a cell produced; the cell must succeed."""
    messages: list[tuple[str, dict[str, Any]]] = []
    reply = client.execute_interactive(
        code, output_hook=lambda m: messages.append((m["msg_type"], m["content"])), timeout=60
    )
    assert reply["content"]["status"] == "ok", messages
    return messages


@pytest.mark.slow
def test_a_slow_compact_in_a_kernel_is_one_display_updated_until_it_ends(
    fresh: BlockingKernelClient,
) -> None:
    iopub(fresh, KERNEL_SETUP)
    iopub(
        fresh,
        "%config Dashr.retain_tokens = 1500\n"
        "%config Dashr.recency_window_tokens = 6000\n"
        "%config Dashr.llm_base_url = server.base_url\n"
        "%config Dashr.llm_model = 'm'\n"
        "%config Dashr.summarizer = 'llm'\n"
        "for message in demo_messages():\n"
        "    dashr.record_openai(message)\n"
        "busy = server_error(503, 'overloaded')\n"
        "server.script(Reply(503, busy.body, {'Retry-After': '0'}), "
        "chat_completion('## Summary\\nThe retry tests were fixed.'))",
    )
    messages = iopub(fresh, "%compact")
    shown = [(k, c) for k, c in messages if k in ("display_data", "update_display_data")]
    assert [k for k, _ in shown] == ["display_data"] + ["update_display_data"] * (len(shown) - 1)
    assert len({c["transient"]["display_id"] for _, c in shown}) == 1
    first, last = shown[0][1]["data"], shown[-1][1]["data"]
    assert first["text/plain"] == "dashr: summarizing 1 region · 0 s"
    assert re.fullmatch(
        r"dashr: compacted c\d+: ~\d+ -> ~\d+ tokens · \d+\.\d s\n"
        r"  llm summarizer: attempt 1 of 4 failed \(HTTP 503: overloaded \| server_error\); "
        r"retrying in 0\.0 s",
        last["text/plain"],
    )
    assert 'class="dashr-progress dashr-progress-done"' in last["text/html"]
    (result,) = [c["data"] for k, c in messages if k == "execute_result"]
    assert result["text/plain"].startswith("compacted ")


@pytest.mark.slow
def test_agent_cell_in_a_kernel_shows_html_steps_and_a_markdown_answer(
    fresh: BlockingKernelClient,
) -> None:
    iopub(fresh, KERNEL_SETUP)
    iopub(
        fresh,
        "%config Dashr.agent_base_url = server.base_url\n"
        "%config Dashr.agent_model = 'scripted'\n"
        "server.script(call_run_cell('total = 6 * 7\\ntotal'), answer('The total is **42**.'))",
    )
    messages = iopub(fresh, "%%agent\nMultiply six by seven.")
    steps = [c["data"] for k, c in messages if k == "display_data"]
    assert [s["text/plain"].splitlines()[0].split(" · ")[0] for s in steps] == [
        "step 1: run_cell",
        "step 2: answer",
    ]
    assert steps[0]["text/plain"].splitlines()[1:] == [
        "  run_cell:",
        "    total = 6 * 7",
        "    total",
        "  output:",
        "    42",
    ]
    assert steps[0]["text/html"].startswith('<details class="dashr-step">')
    assert '<div class="highlight"' in steps[0]["text/html"]
    (result,) = [c["data"] for k, c in messages if k == "execute_result"]
    assert result["text/markdown"] == "The total is **42**."
    assert result["text/plain"] == "The total is **42**."
    assert not [k for k, _ in messages if k == "stream"]  # no stray text around the steps
