"""Finding and re-attaching a session, and tab completion, in a real Jupyter kernel."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_kernel import SETUP, Kernel, running_kernel

from dashr_ext import Dashr

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with running_kernel(tmp_path_factory.mktemp("kernel_home")) as k:
        yield k


@pytest.fixture
def fresh(kernel: Kernel) -> Kernel:
    kernel.restart()
    return kernel


def complete(kernel: Kernel, code: str) -> dict[str, Any]:
    """A ``complete_request`` with the cursor at the end of ``code``; the reply's content."""
    msg_id = kernel.client.complete(code, len(code))
    while True:
        reply = kernel.client.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            content: dict[str, Any] = reply["content"]
            assert content["status"] == "ok"
            return content


def test_after_a_restart_attach_last_finds_the_session_again(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    state = "import json\nprint(json.dumps([str(dashr.session.path), dashr_compaction_archive]))"
    before = json.loads(fresh.execute(state).stdout)
    fresh.restart()
    fresh.execute("%load_ext dashr_ext")

    listed = fresh.execute("%dashr sessions")
    attached = fresh.execute("%dashr attach --last")

    (html,) = [r["text/html"] for r in listed.results]
    assert "<th" in html and path in html
    rows = listed.plain.splitlines()
    assert rows[1].split()[:3] == ["#", "last", "written"]
    newest = next(line for line in rows[2:] if line.endswith(path))
    with Dashr.open(path, read_only=True) as d:
        counts = [str(len(d.session)), str(len(d.checkpoints()))]
    assert newest.split()[3:5] == counts
    assert "Fix the failing retry tests" in newest
    assert attached.plain.splitlines()[0].startswith("attached session ")
    assert json.loads(fresh.execute(state).stdout) == [path, before[1]]


def test_complete_request_lists_subcommands_options_and_checkpoint_ids(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    with Dashr.open(path, read_only=True) as d:
        ids = [cp.id for cp in d.checkpoints()]

    subcommands = complete(fresh, "%dashr s")
    options = complete(fresh, "%dashr attach --")
    checkpoints = complete(fresh, "%history_read ")
    agent = complete(fresh, "%%agent --m")

    assert subcommands["matches"] == ["status", "sessions", "snapshot"]
    assert (subcommands["cursor_start"], subcommands["cursor_end"]) == (7, 8)
    assert options["matches"] == ["--last", "--read-only"]
    assert checkpoints["matches"] == [*ids, "--seq", "--turn", "--cursor"]
    assert len(ids) >= 3
    assert agent["matches"] == ["--max-steps"]


def test_attach_read_only_in_a_second_kernel_reads_what_the_first_writes(
    fresh: Kernel, tmp_path: Path
) -> None:
    path = tmp_path / "shared.jsonl"
    with Dashr.create(path) as writer:  # this process is the writer; the kernel only reads
        writer.record_openai({"role": "user", "content": "Train the churn model."})
        locked = fresh.execute(f"%load_ext dashr_ext\n%dashr attach {path}", ok=False)
        assert locked.reply["ename"] == "UsageError"
        assert f"%dashr attach --read-only {path} inspects it" in locked.reply["evalue"]
        fresh.execute(f"%dashr attach --read-only {path}")
        before = fresh.execute("%history_read --seq 0").plain
        writer.record_openai({"role": "assistant", "content": "Done: AUC 0.91."})
        after = fresh.execute(f"%dashr attach --read-only {path}\n%history_read --seq 0").plain
    assert "Train the churn model." in before and "AUC 0.91" not in before
    assert "AUC 0.91" in after  # attaching again read what the writer added since
    written = fresh.execute(f"%dashr attach {path}\nprint(dashr.session.read_only)")
    assert written.stdout == "False\n"  # the writer is gone: attached for writing


def test_pins_survive_a_kernel_restart(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    fresh.execute('%dashr pin "Never push to main"\n%dashr pin Run the tests with -x')
    with Dashr.open(path, read_only=True) as d:
        pins = d.pins()
    assert [p.text for p in pins] == ["Never push to main", "Run the tests with -x"]
    fresh.restart()

    listed = fresh.execute(f"%load_ext dashr_ext\n%dashr attach {path}\n%dashr pins")
    ids = complete(fresh, "%dashr unpin ")

    rows = listed.plain.splitlines()
    assert rows[0] == "2 pins, carried first by every checkpoint"
    assert rows[1:3] == [f"{p.id}  {p.text}" for p in pins]
    assert ids["matches"] == [p.id for p in pins]
