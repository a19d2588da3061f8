"""The extension in a real Jupyter kernel, driven over the protocol as a harness would."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import ThisInterpreter
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from dashr_ext import Dashr
from dashr_ext._demo import demo_facts
from dashr_ext._magics import SNAPSHOT_WARNING

pytestmark = pytest.mark.slow

ERROR = demo_facts()["error"]

SETUP = """\
%load_ext dashr_ext
%config Dashr.retain_tokens = 1500
%config Dashr.recency_window_tokens = 6000
from dashr_ext._demo import demo_messages
for message in demo_messages():
    if message["role"] == "assistant":
        dashr.request_messages()
    dashr.record_openai(message)
print(dashr.session.path)
"""


@dataclass
class Output:
    stdout: str = ""
    stderr: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    reply: dict[str, Any] = field(default_factory=dict)

    @property
    def plain(self) -> str:
        """text/plain of the cell's execute_result."""
        (result,) = self.results
        text: str = result["text/plain"]
        return text


@dataclass
class Kernel:
    manager: KernelManager
    client: BlockingKernelClient
    home: Path

    def execute(self, code: str, *, ok: bool = True) -> Output:
        """Run ``code`` like an agent's run_cell; collect what iopub carried."""
        out = Output()

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind in ("execute_result", "display_data"):
                out.results.append(content["data"])
            elif kind == "error":
                out.errors.append(content)

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=60)
        out.reply = reply["content"]
        if ok:
            assert reply["content"]["status"] == "ok", (out.errors, out.stderr)
        return out

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=60)


@contextlib.contextmanager
def running_kernel(home: Path, env: dict[str, str] | None = None) -> Iterator[Kernel]:
    """A kernel of this interpreter with ``DASHR_HOME=home``, shut down on exit."""
    manager = KernelManager(kernel_name="tests", kernel_spec_manager=ThisInterpreter())
    manager.start_kernel(env={**(os.environ if env is None else env), "DASHR_HOME": str(home)})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield Kernel(manager, client, home)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with running_kernel(tmp_path_factory.mktemp("kernel_home")) as k:
        yield k


@pytest.fixture
def fresh(kernel: Kernel) -> Kernel:
    kernel.restart()
    return kernel


def test_the_kernel_runs_this_interpreter(fresh: Kernel) -> None:
    out = fresh.execute("import sys, os; print(sys.executable); print(os.environ['DASHR_HOME'])")
    assert out.stdout.splitlines() == [sys.executable, str(fresh.home)]


def test_an_agent_reads_archived_originals_with_print(fresh: Kernel) -> None:
    path = Path(fresh.execute(SETUP).stdout.splitlines()[-1])
    with Dashr.open(path, read_only=True) as local:
        first = local.checkpoints()[0]
        tool_seq = next(
            q for q in first.shadowed_seqs if local.session.event(q).type == "tool/result"
        )
        original = local.session.event(tool_seq).message.text
    out = fresh.execute(f'print(dashr_compaction_archive["{first.id}"]["tool_results"][0]["text"])')
    assert out.stdout == original + "\n"
    out = fresh.execute(f'print(dashr_compaction_archive["{first.id}"]["meta"]["seqs"])')
    assert out.stdout == f"{list(first.shadowed_seqs)}\n"


def test_search_magic_output_is_the_plain_recall_text(fresh: Kernel) -> None:
    fresh.execute(SETUP)
    printed = fresh.execute(f"print(history_search({ERROR!r}))").stdout
    assert printed.startswith(f'history_search "{ERROR}" — ')
    magic = fresh.execute(f'%history_search "{ERROR}"')
    assert magic.plain + "\n" == printed
    assert "<mark>" in magic.results[0]["text/html"]
    status = fresh.execute("%dashr status")
    assert status.plain.startswith("dashr status — session ")
    assert "<table>" in status.results[0]["text/html"]


def test_bad_magic_arguments_are_one_line_usage_errors(fresh: Kernel) -> None:
    fresh.execute("%load_ext dashr_ext")
    out = fresh.execute("%history_read --seq x", ok=False)
    assert out.stderr == "UsageError: --seq: expected an integer, got 'x'\n"
    assert out.errors == [] and out.results == []
    assert out.reply["status"] == "error" and out.reply["ename"] == "UsageError"


def test_restart_then_attach_restores_session_surface_and_archive(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    state = (
        "import json\nprint(json.dumps([list(dashr.session.surface), dashr_compaction_archive]))"
    )
    before = json.loads(fresh.execute(state).stdout)
    assert len(before[1]) >= 3
    fresh.restart()
    fresh.execute("%load_ext dashr_ext")
    attached = fresh.execute(f"%dashr attach {path}")
    assert attached.plain.splitlines()[0].startswith("attached session ")
    after = json.loads(fresh.execute(state).stdout)
    assert after == before
    same = fresh.execute("print(dashr_compaction_archive is dashr.archive)").stdout
    assert same == "True\n"


def test_snapshot_round_trip_across_a_restart(fresh: Kernel, tmp_path: Path) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    snapshot = tmp_path / "namespace.pkl"
    fresh.execute(
        "budget = {'max_attempts': 3}\n"
        "def attempts():\n"
        "    return budget['max_attempts']\n"
        "class Policy:\n"
        "    def __init__(self, n):\n"
        "        self.n = n\n"
        "policy = Policy(5)\n"
        "pending = (n for n in range(3))\n"
    )
    saved = fresh.execute(f"%dashr snapshot save {snapshot}").plain
    assert "note: not picklable, skipped: pending" in saved
    fresh.restart()
    fresh.execute(f"%load_ext dashr_ext\n%dashr attach {path}")
    loaded = fresh.execute(f"%dashr snapshot load {snapshot}")
    assert loaded.stdout.splitlines()[0] == SNAPSHOT_WARNING
    out = fresh.execute(
        "print(attempts(), policy.n, 'pending' in dir())\n"
        f"print(history_search({ERROR!r}).splitlines()[-1])\n"
        "print(history_search.__self__ is dashr, dashr_compaction_archive is dashr.archive)"
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "3 5 False"
    assert lines[1].startswith("scanned ") and "matched 0" not in lines[1]
    assert lines[2] == "True True"
