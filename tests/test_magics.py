"""The IPython extension in-process: load/unload, the Dashr options, the magics, display."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from helpers import record_steps
from helpers import run_cell as run  # tests/ is on sys.path under pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import dashr_ext
from dashr_ext import CompactionConfig, RecallConfig
from dashr_ext._compaction.report import still_above
from dashr_ext._controller import Dashr as Controller
from dashr_ext._demo import demo_facts, demo_messages
from dashr_ext._display import Report, status_report
from dashr_ext._magics import NAMESPACE_NAMES, SNAPSHOT_WARNING, Dashr, agent_cell
from dashr_ext._pins import pin_room, pins_tokens
from dashr_ext._recall import RecallResult

ERROR = demo_facts()["error"]  # "AssertionError: expected retry budget 3, got 5" (turn 1 only)


# --------------------------------------------------------------------------- fixtures


def new_shell(config: Config | None = None) -> InteractiveShell:
    config = config if config is not None else Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell(config=config)
    shell.magics_manager.load_all_lazy_magics()  # so that residue checks see only ours
    return shell


@pytest.fixture
def ip(shells: list[InteractiveShell]) -> InteractiveShell:
    shells.append(new_shell())
    return shells[-1]


def usage_error(ip: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a cell that must fail with a UsageError shown as one line; return that line."""
    capsys.readouterr()
    result = ip.run_cell(code)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    captured = capsys.readouterr()
    shown = (captured.out + captured.err).strip()
    assert "Traceback" not in shown
    assert shown.count("\n") == 0, shown
    assert shown == f"UsageError: {result.error_in_exec}"
    return str(result.error_in_exec)


def feed_demo(ip: InteractiveShell) -> None:
    """The demo agent session through the controller, as an agent loop records it."""
    run(
        ip,
        "from dashr_ext._demo import demo_messages\n"
        "for message in demo_messages():\n"
        "    if message['role'] == 'assistant':\n"
        "        dashr.request_messages()\n"
        "    dashr.record_openai(message)\n",
    )


@pytest.fixture
def compacted(ip: InteractiveShell) -> InteractiveShell:
    """A loaded shell whose session compacted several times under a 6000-token window."""
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.retain_tokens = 1500")
    run(ip, "%config Dashr.recency_window_tokens = 6000")
    feed_demo(ip)
    assert len(controller(ip).checkpoints()) >= 3
    return ip


def controller(ip: InteractiveShell) -> Controller:
    d = ip.user_ns["dashr"]
    assert isinstance(d, Controller)
    return d


def magics(ip: InteractiveShell) -> Dashr:
    m = ip.magics_manager.registry["Dashr"]
    assert isinstance(m, Dashr)
    return m


def shell_state(ip: InteractiveShell) -> dict[str, Any]:
    """What an extension can leave behind in a shell (IPython's history names aside)."""

    def names(ns: dict[str, Any]) -> list[str]:
        return sorted(n for n in ns if not re.fullmatch(r"_+|_i+|_i?\d+", n))

    return {
        "user_ns": names(ip.user_ns),
        "hidden": names(ip.user_ns_hidden),
        "callbacks": {name: list(cbs) for name, cbs in ip.events.callbacks.items()},
        "line_magics": dict(ip.magics_manager.magics["line"]),
        "cell_magics": dict(ip.magics_manager.magics["cell"]),
        "registry": sorted(ip.magics_manager.registry),
        "configurables": [id(c) for c in ip.configurables],
    }


# --------------------------------------------------------------------------- load / unload


def test_import_dashr_ext_imports_neither_ipython_nor_the_tokenizer_or_httpx() -> None:
    code = (
        "import sys, dashr_ext\n"
        "print(sorted(m for m in ('IPython', 'tiktoken', 'httpx', 'dill', 'matplotlib')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_load_ext_does_not_import_the_tokenizer_or_httpx(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell()\n"
        "ip.run_line_magic('load_ext', 'dashr_ext')\n"
        "assert 'dashr' in ip.user_ns\n"
        "print(sorted(m for m in ('tiktoken', 'httpx', 'dill', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DASHR_HOME": str(tmp_path)},
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_load_binds_the_controller_its_archive_and_the_recall_helpers(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    ns = ip.user_ns
    assert ns["dashr_compaction_archive"] is d.archive
    for name in ("history_outline", "history_read", "history_search"):
        helper = ns[name]
        assert helper.__self__ is d and helper.__func__ is getattr(Controller, name)
    assert set(NAMESPACE_NAMES) <= set(ip.user_ns_hidden)  # not listed by %who
    assert run(ip, "dashr_compaction_archive is dashr.archive") is True
    # the default location: $DASHR_HOME/sessions/<id>.jsonl
    home = Path(os.environ["DASHR_HOME"])
    assert d.session.path == home / "sessions" / f"{d.session.id}.jsonl"
    assert not d.session.path.exists()  # written from the first record on


def test_unload_removes_exactly_what_load_added_and_releases_the_lock(
    ip: InteractiveShell,
) -> None:
    before = shell_state(ip)
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    path = d.session.path
    assert path is not None
    run(ip, "dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    assert shell_state(ip) != before
    run(ip, "%unload_ext dashr_ext")
    assert shell_state(ip) == before
    assert "Dashr" not in [type(c).__name__ for c in ip.configurables]
    with Controller.open(path) as again:  # a writer can take the lock: it was released
        assert len(again.session) == len(d.session)


def test_unload_keeps_names_the_user_rebound(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "dashr = 'mine'\nhistory_search = len")
    run(ip, "%unload_ext dashr_ext")
    assert ip.user_ns["dashr"] == "mine"
    assert ip.user_ns["history_search"] is len
    for name in ("dashr_compaction_archive", "history_outline", "history_read"):
        assert name not in ip.user_ns


def test_an_untouched_session_file_created_at_load_is_removed_on_unload(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    c = Config()
    c.Dashr.session_path = str(tmp_path / "agent.jsonl")
    c.Dashr.retain_tokens = 1500  # recorded in the file: still nothing worth keeping
    shells.append(new_shell(c))
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")
    path = controller(ip).session.path
    assert path is not None and path.is_file()
    assert [e.type for e in controller(ip).session.events] == ["session/header", "config/change"]
    run(ip, "%unload_ext dashr_ext")
    assert not path.exists()


def test_loading_twice_keeps_the_same_controller(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    m = magics(ip)
    run(ip, "%load_ext dashr_ext")
    dashr_ext.load_ipython_extension(ip)
    assert controller(ip) is d
    assert magics(ip) is m
    assert [c for c in ip.configurables if isinstance(c, Dashr)] == [m]


def test_reload_leaves_one_magics_instance_bound_to_a_new_controller(
    ip: InteractiveShell,
) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    first = controller(ip)
    callbacks = {name: len(cbs) for name, cbs in ip.events.callbacks.items()}
    run(ip, "%reload_ext dashr_ext")
    second = controller(ip)
    m = magics(ip)
    assert second is not first
    assert [c for c in ip.configurables if isinstance(c, Dashr)] == [m]
    assert ip.magics_manager.magics["line"]["history_search"].__self__ is m
    assert ip.user_ns["dashr_compaction_archive"] is second.archive
    assert ip.user_ns["history_read"].__self__ is second
    assert {name: len(cbs) for name, cbs in ip.events.callbacks.items()} == callbacks
    assert [hook.__self__ for hook in ip.events.callbacks["pre_run_cell"]] == [m.progress]
    assert [hook.__self__ for hook in ip.events.callbacks["post_run_cell"]] == [
        m.progress,
        m.staging,
    ]
    assert first.session.path is not None
    with Controller.open(first.session.path):  # the first session was closed
        pass


# --------------------------------------------------------------------------- configuration


def test_every_config_field_is_a_trait_with_help() -> None:
    traits = Dashr.class_traits(config=True)
    names = [f.name for f in fields(CompactionConfig)] + [f.name for f in fields(RecallConfig)]
    names += ["summarizer", "llm_base_url", "llm_model", "session_dir", "session_path"]
    names += ["agent_base_url", "agent_model", "agent_max_steps", "agent_tool_output_max_chars"]
    names += ["bridge_max_request_bytes"]
    assert sorted(traits) == sorted(names)
    for name, trait in traits.items():
        assert trait.help, name
    assert "api_key" not in traits


def test_trait_defaults_equal_the_config_defaults(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    assert controller(ip).config == CompactionConfig()
    assert controller(ip).recall_config == RecallConfig()
    assert magics(ip).compaction_config() == CompactionConfig()


def test_config_magic_changes_the_live_controller(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.retain_tokens = 50000")
    run(ip, "%config Dashr.recency_window_tokens = 500000")
    run(ip, "%config Dashr.context_window_tokens = 1000000")
    run(ip, "%config Dashr.search_max_hits = 3")
    d = controller(ip)
    assert d.config.recency_window_tokens == 500_000
    assert d.config.retain_tokens == 50_000
    assert d.engine.config is d.config
    assert d.config.trigger_tokens == 500_000
    assert d.recall_config.search_max_hits == 3
    assert d.recall.config.search_max_hits == 3
    assert run(ip, "%config Dashr.recency_window_tokens") == 500_000


def test_a_rejected_config_value_is_one_line_and_leaves_the_old_value(
    ip: InteractiveShell, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    with caplog.at_level(logging.ERROR):
        run(ip, "%config Dashr.threshold_ratio = 2")
    assert caplog.records == []  # a UsageError line, not IPython's logged error
    assert capsys.readouterr().err == (
        "UsageError: Dashr.threshold_ratio: expected a number in (0, 1), got 2; it stays 0.8\n"
    )
    assert magics(ip).threshold_ratio == 0.8
    assert controller(ip).config.threshold_ratio == 0.8


def test_a_recency_window_without_retain_tokens_is_held_back(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    run(ip, "%config Dashr.recency_window_tokens = 500000")
    assert capsys.readouterr().err == (
        "UsageError: Dashr options not applied yet: retain_tokens: expected an absolute token "
        "count when recency_window_tokens is set (recency_window_tokens = 500000), got None\n"
    )
    assert magics(ip).recency_window_tokens == 500_000  # kept, waiting for retain_tokens
    assert controller(ip).config.recency_window_tokens is None


def test_config_lists_every_option_with_its_help(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    run(ip, "%config Dashr")
    out = capsys.readouterr().out
    assert out.startswith("Dashr options: the settings of dashr_ext")
    for name in Dashr.class_traits(config=True):
        assert f"Dashr.{name}=" in out
    assert "Compact when the request exceeds this many tokens" in out


def test_ipython_config_file_settings_apply_at_load(shells: list[InteractiveShell]) -> None:
    c = Config()
    c.Dashr.recency_window_tokens = 500_000
    c.Dashr.retain_tokens = 50_000
    c.Dashr.context_window_tokens = 1_000_000
    c.Dashr.read_max_chars = 2000
    shells.append(new_shell(c))
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    assert d.config.recency_window_tokens == 500_000
    assert d.config.retain_tokens == 50_000
    assert d.config.context_window_tokens == 1_000_000
    assert d.recall_config.read_max_chars == 2000


def test_an_invalid_config_file_fails_the_load_with_one_line_and_no_residue(
    shells: list[InteractiveShell], capsys: pytest.CaptureFixture[str]
) -> None:
    c = Config()
    c.Dashr.threshold_ratio = 1.5
    shells.append(new_shell(c))
    ip = shells[-1]
    before = shell_state(ip)
    line = usage_error(ip, "%load_ext dashr_ext", capsys)
    assert line == "dashr_ext: threshold_ratio: expected a number in (0, 1), got 1.5"
    assert shell_state(ip) == before


def test_session_path_option_creates_then_reattaches_the_named_file(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    c = Config()
    c.Dashr.session_path = str(tmp_path / "agent.jsonl")
    shells.append(new_shell(c))
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")
    assert controller(ip).session.path == tmp_path / "agent.jsonl"
    run(ip, "dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    run(ip, "%reload_ext dashr_ext")
    assert controller(ip).session.path == tmp_path / "agent.jsonl"
    assert len(controller(ip).session) > 1


def test_session_dir_option_places_new_sessions(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    c = Config()
    c.Dashr.session_dir = str(tmp_path / "runs")
    shells.append(new_shell(c))
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")
    path = controller(ip).session.path
    assert path is not None and path.parent == tmp_path / "runs"


def test_the_llm_summarizer_is_validated_then_installed(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    run(ip, "%config Dashr.summarizer = 'llm'")
    assert capsys.readouterr().err.startswith(
        "UsageError: Dashr options not applied yet: summarizer = 'llm' needs llm_base_url: expected"
    )
    assert controller(ip).summarizer.kind == "extractive"
    run(ip, "%config Dashr.llm_base_url = 'http://127.0.0.1:9/v1'")
    run(ip, "%config Dashr.llm_model = 'deepseek-chat'")
    d = controller(ip)
    assert (d.summarizer.kind, d.summarizer.model) == ("llm", "deepseek-chat")
    assert d.engine.summarizer is d.summarizer


# --------------------------------------------------------------------------- %dashr


def test_status_reports_session_tokens_thresholds_checkpoints_and_archive(
    compacted: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert run(compacted, "%dashr status") is None  # displayed, not returned
    d = controller(compacted)
    report = status_report(d)
    assert capsys.readouterr().out == f"{report}\n"
    measured = d.measure()
    cps = d.checkpoints()
    lines = str(report).splitlines()
    assert lines[0] == f"dashr status — session {d.session.id}"
    rows = dict(report.rows)
    assert rows["session file"] == str(d.session.path)
    assert rows["events"] == f"{len(d.session)} (seqs 0-{len(d.session) - 1}), 3 turns"
    assert rows["request tokens"].startswith(f"~{measured.total} of 6000 (")
    assert rows["trigger"] == "compacts above 6000 tokens"
    assert rows["recency window"] == "6000 tokens"
    assert rows["threshold"] == "102400 tokens (0.8 × 128000)"
    assert rows["retain"] == "1500 tokens kept verbatim by a pass"
    assert rows["engine"] == "summary (auto on), summarizer extractive"
    assert rows["checkpoints"] == f"{len(cps)} (current: {cps[-1].id})"
    assert rows["archive"].startswith(f"{len(d.archive)} entries, ~")
    assert repr(report) == str(report)
    assert "<table>" in report._repr_html_()
    assert report._repr_html_() == status_report(d)._repr_html_()
    assert " at 0x" not in report._repr_html_()


def test_config_subcommand_shows_the_effective_configuration(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.retain_tokens = 1500")
    report = run(ip, "%dashr config")
    rows = dict(report.rows)
    assert rows["retain_tokens"] == "1500"
    assert rows["recency_window_tokens"] == "None"
    assert rows["pointer"] == "'inject'"
    assert rows["summarizer"] == "'extractive'"
    assert len(rows) == len(Dashr.class_traits(config=True))


def test_attach_switches_the_controller_and_rebinds_every_name(
    compacted: InteractiveShell, tmp_path: Path
) -> None:
    original = controller(compacted)
    path = original.session.path
    assert path is not None
    archive_json = json.dumps(original.archive, sort_keys=True)
    other = tmp_path / "other.jsonl"
    Controller.create(other).close()
    run(compacted, f"%dashr attach {other}")
    assert controller(compacted).session.path == other
    report = run(compacted, f"%dashr attach '{path}'")
    d = controller(compacted)
    assert d is not original
    assert report.title == f"attached session {d.session.id}"
    assert compacted.user_ns["dashr_compaction_archive"] is d.archive
    assert compacted.user_ns["history_search"].__self__ is d
    assert json.dumps(d.archive, sort_keys=True) == archive_json
    assert run(compacted, "dashr_compaction_archive is dashr.archive") is True
    assert str(run(compacted, "history_outline()")) == str(original.history_outline())


def test_attach_to_a_locked_session_keeps_the_current_one(
    compacted: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = controller(compacted)
    with Controller.create(tmp_path / "busy.jsonl") as other:
        line = usage_error(compacted, f"%dashr attach {other.session.path}", capsys)
    assert "busy.jsonl" in line and "lock" in line
    assert controller(compacted) is before
    assert compacted.user_ns["dashr_compaction_archive"] is before.archive


def test_export_copies_the_session_log(compacted: InteractiveShell, tmp_path: Path) -> None:
    target = tmp_path / "out" / "copy.jsonl"
    report = run(compacted, f"%dashr export {target}")
    d = controller(compacted)
    assert d.session.path is not None
    assert target.read_bytes() == d.session.path.read_bytes()
    assert dict(report.rows)["events"] == str(len(d.session))


def test_snapshot_round_trip_restores_the_namespace_and_skips_unpicklable_names(
    compacted: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip = compacted
    run(
        ip,
        "settings = {'retry': {'max_attempts': 3}}\n"
        "def attempts():\n"
        "    return settings['retry']['max_attempts']\n"
        "pending = (n for n in range(3))\n",
    )
    path = tmp_path / "ns.pkl"
    saved = run(ip, f"%dashr snapshot save {path}")
    assert dict(saved.rows)["names"] == "attempts, demo_messages, message, settings"
    assert saved.notes[0] == "not picklable, skipped: pending"
    assert ip.user_ns["pending"] is not None  # the live namespace is untouched
    run(ip, "del settings, attempts\ndashr = None")
    capsys.readouterr()
    loaded = run(ip, f"%dashr snapshot load {path}")
    assert capsys.readouterr().out.splitlines()[0] == SNAPSHOT_WARNING
    assert "attempts" in dict(loaded.rows)["names"]
    assert run(ip, "attempts()") == 3
    run(ip, "settings['retry']['max_attempts'] = 5")
    assert run(ip, "attempts()") == 5  # the loaded function's globals are the namespace
    assert run(ip, "dashr is history_search.__self__ and dashr_compaction_archive is dashr.archive")
    assert ERROR in str(run(ip, f"history_search({ERROR!r})"))


# --------------------------------------------------------------------------- %compact


def test_compact_dry_run_shows_the_range_and_commits_nothing(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.auto = False")
    feed_demo(ip)
    d = controller(ip)
    assert d.session.path is not None
    events, size = len(d.session), d.session.path.stat().st_size
    a, b = d.engine.select(d.measure()) or (0, -1)
    seqs = list(d.session.surface[a : b + 1])
    tokens = sum(t for _, t in d.measure().nodes[a : b + 1])
    report = run(ip, "%compact --dry-run")
    rows = dict(report.rows)
    assert rows["range"] == f"seqs {min(seqs)}-{max(seqs)} (surface positions {a}-{b})"
    assert rows["events"] == str(len(seqs))
    assert rows["estimated tokens"] == f"~{tokens}"
    assert report.notes == ("nothing was committed",)
    assert (len(d.session), d.session.path.stat().st_size) == (events, size)
    assert d.checkpoints() == []
    done = run(ip, "%compact")
    (cp,) = d.checkpoints()
    assert done.title == f"compacted {len(seqs)} events into checkpoint {cp.id}"
    assert list(cp.shadowed_seqs) == seqs
    assert cp.id in d.archive


def test_compact_with_nothing_to_compact_says_so(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    assert run(ip, "%compact").title == "nothing to compact"
    assert run(ip, "%compact --dry-run").title == "dry run: nothing to compact"


def pruning_shell(ip: InteractiveShell) -> Controller:
    """A loaded shell with a 20,000-token trigger that compacts only when asked."""
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.auto = False")
    run(ip, "%config Dashr.retain_tokens = 3000")
    run(ip, "%config Dashr.recency_window_tokens = 20000")
    return controller(ip)


def numbered(lines: int, width: int = 60) -> str:
    return "\n".join(f"{n:06d} " + "x" * width for n in range(1, lines + 1))


def huge_output(d: Controller) -> int:
    """One huge newest tool output; its seq."""
    call = {"id": "big", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call]})
    d.record_openai({"role": "tool", "tool_call_id": "big", "content": numbered(4000)})
    return len(d.session) - 1


def test_compact_dry_run_says_what_the_prune_step_would_prune_and_the_range_after_it(
    ip: InteractiveShell,
) -> None:
    d = pruning_shell(ip)
    record_steps(d, 20, chars=1200, user="Fix the failing test.")
    seq = huge_output(d)
    (item,) = d.engine.plan_prune(d.measure(), old=False)
    assert d.session.path is not None
    size = d.session.path.stat().st_size
    report = run(ip, "%compact --dry-run")
    events = int(dict(report.rows)["events"])
    assert report.title == f"dry run: %compact would prune 1 message and condense {events} events"
    saved = item.tokens_before - item.tokens_after
    assert dict(report.rows)["prune first"] == f"1 message: seq {seq} (~{saved:,} saved)"
    assert report.notes == (
        "nothing was committed",
        "the range is planned on the sizes pruning would leave",
    )
    assert d.session.path.stat().st_size == size and d.last_prune is None
    assert f'<td style="text-align:left">1 message: seq {seq} (~{saved:,} saved)</td>' in (
        report._repr_html_()
    )
    run(ip, "%compact")  # the pass condenses the range the preview showed
    (cp,) = d.checkpoints()
    assert len(cp.shadowed_seqs) == events
    span = f"seqs {min(cp.shadowed_seqs)}-{max(cp.shadowed_seqs)}"
    assert dict(report.rows)["range"] == f"{span} (surface positions 0-{events - 1})"


def test_compact_reports_the_prune_pass_before_the_checkpoint(ip: InteractiveShell) -> None:
    d = pruning_shell(ip)
    record_steps(d, 20, chars=1200, user="Fix the failing test.")
    seq = huge_output(d)
    before = d.measure().total
    report = run(ip, "%compact")
    pruned = d.last_prune
    (cp,) = d.checkpoints()
    assert pruned is not None and [n.seq for n in pruned.pruned] == [seq]
    saved = pruned.tokens_before - pruned.tokens_after
    rows = dict(report.rows)
    assert report.title.startswith("compacted ") and report.title.endswith(f"checkpoint {cp.id}")
    assert rows["pruned first"] == f"1 message: p{seq} (~{saved:,} saved)"
    assert rows["request tokens"].startswith(f"~{before:,} -> ~")
    assert report.notes == ()  # under the trigger: nothing to warn about
    assert report.text.splitlines()[1] == f"pruned first    1 message: p{seq} (~{saved:,} saved)"


def test_compact_says_when_pruning_left_nothing_to_summarize(ip: InteractiveShell) -> None:
    d = pruning_shell(ip)
    seq = huge_output(d)  # the whole session is one step: nothing a summary could condense
    before = d.measure().total
    report = run(ip, "%compact")
    after = d.measure().total
    assert d.checkpoints() == [] and d.last_prune is not None
    assert report.title == "pruned 1 message; nothing to summarize"
    assert report.rows == (
        ("pruned first", f"1 message: p{seq} (~{before - after:,} saved)"),
        ("request tokens", f"~{before:,} -> ~{after:,}"),
    )
    assert report.notes == ()


def test_compact_notes_why_the_request_is_still_above_the_trigger(ip: InteractiveShell) -> None:
    d = pruning_shell(ip)
    record_steps(d, 20, chars=1200, user="Write the fixture.")
    arguments = json.dumps({"path": "fixture.txt", "content": "y " * 40_000})
    call = {"id": "w", "type": "function", "function": {"name": "write", "arguments": arguments}}
    d.record_openai({"role": "assistant", "content": "Writing it.", "tool_calls": [call]})
    report = run(ip, "%compact")
    assert len(d.checkpoints()) == 1 and d.last_prune is None
    expected = still_above(d.session, d.measure(), d.config, count_tokens=d.meter.count_text)
    assert expected is not None and "its text is only 11 chars" in expected
    assert report.notes == (expected,)
    assert report.text.splitlines()[-1] == f"note: {expected}"
    assert "the newest unit alone, the assistant message at seq " in expected
    assert f"<p><em>note:</em> {expected}</p>" in report._repr_html_()
    again = run(ip, "%compact --prune-only")  # nothing prunable: the same reason instead
    assert (again.title, again.notes) == ("nothing to prune", (expected,))


def test_compact_prune_only_prunes_old_outputs_and_condenses_nothing(
    ip: InteractiveShell,
) -> None:
    d = pruning_shell(ip)
    record_steps(d, 6, chars=1200, user="Read the modules.")
    record_steps(d, 4, chars=30_000, first=100)
    record_steps(d, 10, chars=1600, first=200)
    big = [
        e.seq for e in d.session.events if e.type == "tool/result" and len(e.message.text) == 30_000
    ]
    before = d.measure().total
    report = run(ip, "%compact --prune-only")
    after = d.measure().total
    keys = ", ".join(f"p{s}" for s in big)
    assert report.title == "pruned 4 messages"
    assert report.rows == (
        ("pruned", f"4 messages: {keys} (~{before - after:,} saved)"),
        ("request tokens", f"~{before:,} -> ~{after:,}"),
        ("read back", f'history_read(seq={big[0]}) or dashr_compaction_archive["p{big[0]}"]'),
    )
    assert d.checkpoints() == [] and report.notes == ()
    again = run(ip, "%compact --prune-only")
    assert again.title == "nothing to prune"
    assert again.notes == (
        "no tool output or assistant text above 2,500 tokens outside the retained tail, and "
        "no message above 5,000 tokens",
    )


# --------------------------------------------------------------------------- recall magics


def test_outline_magic_equals_the_helper(compacted: InteractiveShell) -> None:
    result = run(compacted, "%history_outline")
    assert isinstance(result, RecallResult)
    assert result.text == controller(compacted).history_outline().text
    assert "<table>" in result._repr_html_()


def test_search_magic_takes_quoted_and_unquoted_queries(compacted: InteractiveShell) -> None:
    d = controller(compacted)
    unquoted = run(compacted, "%history_search retry budget")
    assert unquoted.text == d.history_search("retry budget").text
    quoted = run(compacted, f'%history_search "{ERROR}" --limit 2')
    assert quoted.text == d.history_search(ERROR, limit=2).text
    assert quoted.text.startswith(f'history_search "{ERROR}"')
    cp = d.checkpoints()[0].id
    scoped = run(compacted, f"%history_search 'retry budget' --checkpoint {cp} --limit 1")
    assert scoped.text == d.history_search("retry budget", checkpoint=cp, limit=1).text
    assert "<mark>" in quoted._repr_html_()


def test_search_magic_finds_a_phrase_starting_with_a_dash_after_a_double_dash(
    compacted: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    d = controller(compacted)
    result = run(compacted, "%history_search --limit 2 -- -> retry")
    assert result.text == d.history_search("-> retry", limit=2).text
    other = usage_error(compacted, "%history_read --seq -x", capsys)  # no phrase to search
    assert other == "argument --seq: expected one argument"


def test_search_magic_does_not_expand_variables(compacted: InteractiveShell) -> None:
    run(compacted, "x = 'retry'")
    result = run(compacted, "%history_search $x {x}")
    assert result.text.startswith('history_search "$x {x}"')


def test_read_magic_by_checkpoint_seq_and_cursor(compacted: InteractiveShell) -> None:
    d = controller(compacted)
    cp = d.checkpoints()[0].id
    assert run(compacted, f"%history_read {cp}").text == d.history_read(cp).text
    first = run(compacted, "%history_read --seq 3")
    assert first.text == d.history_read(seq=3).text
    token = first.text.splitlines()[-1].removeprefix("cursor: ")
    assert token != first.text.splitlines()[-1]
    assert run(compacted, f"%history_read --cursor {token}").text == (
        d.history_read(cursor=token).text
    )
    pasted = run(compacted, f'%history_read --cursor "cursor: {token}"')  # copied with its label
    assert pasted.text == d.history_read(cursor=token).text


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("%dashr", "%dashr needs a subcommand: status | config | sessions"),
        ("%dashr bogus", "argument COMMAND: invalid choice: 'bogus'"),
        ("%dashr attach", "usage: %dashr attach PATH"),
        ("%dashr status now", "usage: %dashr status"),
        ("%dashr attach /nonexistent/session.jsonl", "/nonexistent/session.jsonl"),
        ("%dashr snapshot", "usage: %dashr snapshot save PATH | %dashr snapshot load PATH"),
        ("%dashr snapshot load /nonexistent.pkl", "no such snapshot file: /nonexistent.pkl"),
        ("%compact --bogus", "unrecognized arguments: --bogus"),
        (
            "%compact --dry-run --prune-only",
            "%compact: give --dry-run or --prune-only, not both (--dry-run previews %compact, "
            "its prune step included)",
        ),
        ("%history_outline extra", "unrecognized arguments: extra"),
        ("%history_read", "%history_read: give exactly one of CHECKPOINT, --seq N, --turn N or"),
        ("%history_read c1 --seq 2", "%history_read: give exactly one of CHECKPOINT, --seq N"),
        ("%history_read --seq x", "--seq: expected an integer, got 'x'"),
        ("%history_read c99999", "c99999"),
        ("%history_read --cursor nonsense", "nonsense"),
        ("%history_search", "the following arguments are required: query"),
        ("%history_search retry --limit x", "--limit: expected an integer, got 'x'"),
        ("%history_search it's 'open", "cannot split the arguments: No closing quotation"),
        (
            "%history_search ->",
            "the following arguments are required: query; a phrase starting with '-' goes "
            "after '--' (%history_search -- ->)",
        ),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(
    compacted: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, message: str
) -> None:
    assert message in usage_error(compacted, cell, capsys)


def test_export_refuses_to_overwrite(
    compacted: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "exists.jsonl"
    target.write_text("keep me")
    assert usage_error(compacted, f"%dashr export {target}", capsys).endswith(
        "already exists; choose a new path"
    )
    assert target.read_text() == "keep me"


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which a file opened without a mode is world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("command", ["export", "snapshot save"])
def test_export_and_snapshot_files_are_private_like_the_session(
    compacted: InteractiveShell, tmp_path: Path, command: str
) -> None:
    target = tmp_path / "out" / "file"
    run(compacted, f"%dashr {command} {target}")
    session = controller(compacted).session.path
    assert session is not None
    assert oct(target.stat().st_mode & 0o777) == oct(session.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("command", ["export", "snapshot save"])
@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "to-a-file"])
def test_export_and_snapshot_refuse_a_symlink_target(
    compacted: InteractiveShell,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    dangling: bool,
) -> None:
    pointee = tmp_path / "elsewhere"
    if not dangling:
        pointee.write_text("keep me")
    link = tmp_path / "link"
    link.symlink_to(pointee)
    assert usage_error(compacted, f"%dashr {command} {link}", capsys) == (
        f"{link} is a symbolic link; give the path of a regular file"
    )
    assert link.is_symlink()
    if dangling:
        assert not pointee.exists()
    else:
        assert pointee.read_text() == "keep me"


def test_magic_docstrings_are_manuals() -> None:
    for name in ("dashr", "compact", "history_outline", "history_read", "history_search"):
        doc = getattr(Dashr, name).__doc__
        assert doc.lstrip().startswith("::\n\n  %" + name), name  # the usage line first
        assert "Examples::" in doc, name
        examples = doc.split("Examples::", 1)[1]
        assert examples.count(f"%{name}") + examples.count("print(") >= 2, name


# --------------------------------------------------------------------------- display


def test_report_text_and_html_are_deterministic() -> None:
    report = Report.of("dashr status — session s1", [("events", 3), ("file", "<a&b>")], ["n1"])
    assert str(report) == "dashr status — session s1\nevents  3\nfile    <a&b>\nnote: n1"
    assert repr(report) == str(report)
    assert report._repr_html_() == (
        '<div class="dashr-report dashr-report"><p><b>dashr status — session s1</b></p>'
        '<table><tr><th style="text-align:left">events</th><td style="text-align:left">3</td>'
        '</tr><tr><th style="text-align:left">file</th><td style="text-align:left">'
        "&lt;a&amp;b&gt;</td></tr></table><p><em>note:</em> n1</p></div>"
    )


def test_archive_entries_read_like_the_originals(compacted: InteractiveShell) -> None:
    d = controller(compacted)
    first = d.checkpoints()[0].id
    text = run(compacted, f"dashr_compaction_archive[{first!r}]['tool_results'][0]['text']")
    originals = {m["content"] for m in demo_messages() if m["role"] == "tool"}
    assert text in originals


# --------------------------------------------------------------------------- %%agent


def test_agent_cell_runs_a_turn_against_the_configured_endpoint(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    from dashr_ext.testing import ScriptedServer, answer, call_run_cell

    run(ip, "%load_ext dashr_ext")
    with ScriptedServer() as server:
        server.script(call_run_cell("print(6 * 7)"), answer("The answer is 42."))
        run(ip, f"%config Dashr.agent_base_url = {server.base_url!r}")
        run(ip, "%config Dashr.agent_model = 'scripted'")
        capsys.readouterr()
        run(ip, "%%agent\nWhat is six times seven?")
        shown = capsys.readouterr().out
        assert re.match(
            r"step 1: run_cell · ~\d+ tokens\n"
            r"  run_cell:\n    print\(6 \* 7\)\n  output:\n    42\n"
            r"step 2: answer · ~\d+ tokens\n",
            shown,
        )
        assert shown.rstrip().endswith("The answer is 42.")  # the reply, displayed as text
        (first, _second) = server.model_requests
        assert first.json["model"] == "scripted"
        assert first.messages[-1] == {"role": "user", "content": "What is six times seven?"}
    d = controller(ip)
    results = [e.message.text for e in d.session.events if e.type == "tool/result"]
    assert results == ["42\n"]
    (turn,) = d.session.turns
    assert turn.reason == "completed" and len(turn.steps) == 2


def test_agent_cell_streams_one_line_per_step_and_returns_the_reply(
    tmp_path: Path, clock: Callable[[], int]
) -> None:
    from dashr_ext.agent import Agent
    from dashr_ext.testing import ScriptedServer, answer, call_run_cell

    with (
        ScriptedServer() as server,
        Controller.create(tmp_path / "agent.jsonl", session_id="agent-test", clock=clock) as d,
    ):
        server.script(call_run_cell("6 * 7"), answer("It is 42."))
        out = io.StringIO()
        reply = agent_cell(
            None, d, "What is 6 * 7?", out=out, base_url=server.base_url, model="m", api_key=None
        )
        assert reply == "It is 42." and reply.reason == "completed"
        first, second = reply.steps
        assert out.getvalue().splitlines() == [
            first.line(),
            "  run_cell:",
            "    6 * 7",
            "  output:",
            "    42",
            second.line(),
        ]
        assert out.getvalue().startswith("step 1: run_cell · ~")
        results = [e.message.text for e in d.session.events if e.type == "tool/result"]
        assert results[0] == "42"

        server.default = call_run_cell("print('more')")
        out = io.StringIO()
        agent = Agent(
            d, base_url=server.base_url, model="scripted-model", api_key=None, max_steps=1
        )
        reply = agent_cell(None, d, "Again.", agent=agent, out=out)
        assert out.getvalue().splitlines()[-1] == (
            "turn 2 stopped after 1 step (max_steps); send another cell to continue"
        )
        assert agent.on_event is None  # the cell's progress printer was removed again


def test_agent_cell_bad_input_is_a_one_line_usage_error(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    assert (
        usage_error(ip, "%%agent\n   ", capsys)
        == "%%agent needs the user's message in the cell body"
    )
    assert "--max-steps: expected an integer >= 1, got 0" in usage_error(
        ip, "%%agent --max-steps 0\nhello", capsys
    )
    run(ip, "%config Dashr.agent_max_steps = 0")  # rejected by the trait, old value kept
    assert magics(ip).agent_max_steps == 30


def test_changing_agent_options_leaves_one_run_cell_schema_in_the_envelope(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashr_ext.agent import run_cell_schema

    monkeypatch.setenv("DASHR_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DASHR_MODEL", "m")
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    empty = d.measure().total
    magics(ip)._agent_for_cell()
    with_agent = d.measure().total
    for limit in (5000, 6000):
        run(ip, f"%config Dashr.agent_tool_output_max_chars = {limit}")
        magics(ip)._agent_for_cell()
    assert d.extra_tools == [run_cell_schema(6000)]
    assert d.measure().total - empty == with_agent - empty  # counted once
    run(ip, "%config Dashr.agent_tool_output_max_chars = 7000")  # drops the agent
    assert d.extra_tools == []


def test_config_engine_recallable_compacts_into_stubs_and_a_state(ip: InteractiveShell) -> None:
    from dashr_ext.testing import demo_messages

    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.retain_tokens = 1500")
    run(ip, "%config Dashr.recency_window_tokens = 6000")
    run(ip, "%config Dashr.engine = 'recallable'")
    d = controller(ip)
    assert d.engine.name == "recallable"
    for message in demo_messages():
        d.record_openai(message)
        d.request_messages()
    roles = [cp.role for cp in d.checkpoints()]
    assert "stub" in roles and "state" in roles
    for cp in d.checkpoints():  # no stub indexes only the previous state (a wasted stub)
        if cp.role == "stub":
            data = d.session.event(cp.summary_seq).data
            assert data["summarizer"]["kind"] == "extractive", data["summary"]
    archive = ip.user_ns["dashr_compaction_archive"]
    checkpoints = sorted(k for k in archive if "pruned" not in archive[k]["meta"])
    assert checkpoints == sorted(cp.id for cp in d.checkpoints())  # one entry each
    pruned = [e for e in archive.values() if "pruned" in e["meta"]]  # and one per pruned output
    assert all(e["meta"]["checkpoint"] == f"p{e['meta']['pruned']}" for e in pruned)
    outline = run(ip, "%history_outline")
    assert "| stub, summary seq" in str(outline) and "| state, summary seq" in str(outline)


# --------------------------------------------------------------------------- pins


def test_pin_pins_and_unpin_magics_take_the_rest_of_the_line(ip: InteractiveShell) -> None:
    run(ip, "%load_ext dashr_ext")
    d = controller(ip)
    report = run(ip, '%dashr pin "Never push to main"')
    (first,) = d.pins()
    assert first.text == "Never push to main" and report.title == f"pinned {first.id}"
    run(ip, '%dashr pin don\'t use  -x, "ever"  ')  # as typed: not split, not unquoted
    second = d.pins()[1]
    assert second.text == 'don\'t use  -x, "ever"'
    run(ip, "%dashr pin 'a' and 'b'")  # quotes not around the whole text stay
    third = d.pins()[2]
    assert third.text == "'a' and 'b'"
    listed = run(ip, "%dashr pins")
    assert listed.title == "3 pins, carried first by every checkpoint"
    assert listed.rows == tuple((p.id, p.text) for p in (first, second, third))
    tokens = pins_tokens(d.pins(), d.meter.count_text)
    assert listed.notes[0].startswith(
        f"~{tokens} tokens of the {pin_room(d.config.summary_budget)}"
    )
    removed = run(ip, f"%dashr unpin {first.id}")
    assert removed.title == f"unpinned {first.id}" and d.pins() == (second, third)
    assert [e.type for e in d.session.events].count("pin/add") == 3


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("%dashr pin", "%dashr pin: give the TEXT to pin; usage: %dashr pin TEXT…"),
        ("%dashr pin    ", "%dashr pin: give the TEXT to pin; usage: %dashr pin TEXT…"),
        ("%dashr pin ''", "%dashr pin: give the TEXT to pin; usage: %dashr pin TEXT…"),
        ('%dashr pin " "', "%dashr pin: give the TEXT to pin; usage: %dashr pin TEXT…"),
        ("%dashr unpin", "%dashr unpin: the following arguments are required: id"),
        ("%dashr unpin pin999", "no current pin 'pin999' to unpin; current pins: none"),
        ("%dashr pins now", "%dashr pins: unrecognized arguments: now; usage: %dashr pins"),
    ],
)
def test_pin_magic_errors_are_one_line(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, message: str
) -> None:
    run(ip, "%load_ext dashr_ext")
    assert usage_error(ip, cell, capsys).startswith(message)
    assert "pin/add" not in [e.type for e in controller(ip).session.events]


def test_a_pin_that_does_not_fit_is_a_one_line_error_and_records_nothing(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.max_summary_tokens = 128")
    d = controller(ip)
    events = len(d.session)
    line = usage_error(ip, "%dashr pin " + "always explain why " * 40, capsys)
    assert line.startswith("pins would take ~") and "(max_summary_tokens = 128) leaves" in line
    assert len(d.session) == events and d.pins() == ()


def test_pins_of_a_session_attached_read_only_are_listed_but_not_changed(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pinned.jsonl"
    with Controller.create(path) as writer:
        pinned = writer.pin("Never push to main")
        run(ip, "%load_ext dashr_ext")
        run(ip, f"%dashr attach --read-only {path}")
        assert run(ip, "%dashr pins").rows == ((pinned.id, pinned.text),)
        for cell in ("%dashr pin more", f"%dashr unpin {pinned.id}"):
            assert "attached read-only" in usage_error(ip, cell, capsys)
        assert writer.pins() == (pinned,)
