"""Settings across kernel restarts, the lazy session file and ``%config`` order, in a real
Jupyter kernel driven over the protocol (the kernel harness is test_kernel's)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_kernel import SETUP, Kernel, running_kernel

pytestmark = pytest.mark.slow

NEW = re.compile(r"dashr_ext: new session file (\S+) \(written from the first record on\)")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHR_")}
    with running_kernel(tmp_path_factory.mktemp("kernel_settings_home"), env) as k:
        yield k


@pytest.fixture
def fresh(kernel: Kernel) -> Kernel:
    kernel.restart()
    return kernel


def settings(k: Kernel) -> str:
    """trigger, recency window and retain budget of the live controller."""
    code = "c = dashr.config\nprint(c.trigger_tokens, c.recency_window_tokens, c.retain_tokens)"
    return k.execute(code).stdout


def test_restart_then_attach_restores_the_settings(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    assert settings(fresh) == "6000 6000 1500\n"
    fresh.restart()
    fresh.execute("%load_ext dashr_ext")
    assert settings(fresh) == "102400 None None\n"  # a new kernel: the defaults
    fresh.execute(f"%dashr attach {path}")
    assert settings(fresh) == "6000 6000 1500\n"
    assert fresh.execute("%config Dashr.recency_window_tokens").plain == "6000"
    status = dict(
        line.split(maxsplit=1) for line in fresh.execute("%dashr status").plain.splitlines()[1:]
    )
    assert status["trigger"] == "compacts above 6000 tokens"


def test_a_session_file_named_at_load_brings_its_settings(fresh: Kernel) -> None:
    path = fresh.execute(SETUP).stdout.splitlines()[-1]
    events = fresh.execute("print(len(dashr.session), len(dashr.checkpoints()))").stdout.split()
    fresh.restart()
    out = fresh.execute(f"get_ipython().config.Dashr.session_path = {path!r}\n%load_ext dashr_ext")
    assert out.stdout == (
        f"dashr_ext: attached session file {path} ({events[0]} events, {events[1]} "
        "checkpoints; its recorded settings apply)\n"
    )
    assert settings(fresh) == "6000 6000 1500\n"


def test_load_ext_names_its_file_and_writes_it_only_on_the_first_record(fresh: Kernel) -> None:
    sessions = fresh.home / "sessions"
    before = set(sessions.iterdir()) if sessions.exists() else set()
    loaded = []
    for _ in range(3):  # kernels that load the extension and never record anything
        out = fresh.execute("%load_ext dashr_ext\n%config Dashr.retain_tokens = 1500")
        match = NEW.fullmatch(out.stdout.rstrip("\n"))
        assert match is not None, out.stdout
        loaded.append(Path(match[1]))
        fresh.execute("dashr.request_messages(); print(dashr.session.path)")
        fresh.restart()
    assert [p.parent for p in loaded] == [sessions] * 3
    assert len(set(loaded)) == 3
    after = set(sessions.iterdir()) if sessions.exists() else set()
    assert after == before  # no empty session files left behind
    out = fresh.execute("%load_ext dashr_ext")
    match = NEW.fullmatch(out.stdout.rstrip("\n"))
    assert match is not None
    path = Path(match[1])
    fresh.execute("dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    assert path.is_file()
    assert set(sessions.iterdir()) == before | {path}


def test_config_order_does_not_matter_and_a_problem_is_said_once(fresh: Kernel) -> None:
    fresh.execute("%load_ext dashr_ext")
    first = fresh.execute("%config Dashr.recency_window_tokens = 6000")
    assert first.stderr == (
        "UsageError: Dashr options not applied yet: retain_tokens: expected an absolute token "
        "count when recency_window_tokens is set (recency_window_tokens = 6000), got None\n"
    )
    assert settings(fresh) == "102400 None None\n"  # held back; said once
    assert fresh.execute("print('unrelated')").stderr == ""
    second = fresh.execute("%config Dashr.retain_tokens = 1500")
    assert second.stderr == ""
    assert settings(fresh) == "6000 6000 1500\n"
    fresh.restart()
    fresh.execute("%load_ext dashr_ext")
    both = fresh.execute(
        "%config Dashr.recency_window_tokens = 6000\n%config Dashr.retain_tokens = 1500"
    )
    assert both.stderr == ""
    assert settings(fresh) == "6000 6000 1500\n"
    llm = fresh.execute(
        "%config Dashr.summarizer = 'llm'\n"
        "%config Dashr.llm_base_url = 'http://127.0.0.1:9/v1'\n"
        "%config Dashr.llm_model = 'scripted'\n"
        "print(dashr.summarizer.kind, dashr.summarizer.model)"
    )
    assert (llm.stdout, llm.stderr) == ("llm scripted\n", "")
