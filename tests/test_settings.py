"""Settings in the log (config/change), which settings win, the lazy session file, and
``%config`` in any order, in-process (the real-kernel versions are in test_kernel_settings)."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cell as run  # tests/ is on sys.path under pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from dashr_ext import CompactionConfig, Dashr, RecallConfig
from dashr_ext._events import Event
from dashr_ext._magics import Dashr as Magics
from dashr_ext._store import Store
from dashr_ext.errors import ConfigError, EventError, StoreError

WINDOW = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def changes(path: Path) -> list[dict[str, Any]]:
    """The ``data`` of every config/change in the file at ``path``."""
    return [e["data"] for e in log_lines(path) if e["type"] == "config/change"]


# --------------------------------------------------------------------------- the controller


def test_a_change_on_a_live_session_is_recorded_and_open_restores_it(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "Fix the retry tests."})
        d.config = WINDOW
        d.recall_config = RecallConfig(search_max_hits=5)
    assert changes(path) == [
        {"compaction": {"retain_tokens": 1500, "recency_window_tokens": 6000}, "recall": {}},
        {"compaction": {}, "recall": {"search_max_hits": 5}},
    ]
    with Dashr.open(path) as again:
        assert again.config == WINDOW
        assert again.config.trigger_tokens == 6000
        assert again.recall_config == RecallConfig(search_max_hits=5)
        assert again.engine.config is again.config


def test_an_explicit_config_wins_over_the_log_and_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "Fix the retry tests."})
        d.config = WINDOW
        d.recall_config = RecallConfig(search_max_hits=5)
    size = path.stat().st_size
    with Dashr.open(path, config=CompactionConfig()) as overridden:
        assert overridden.config == CompactionConfig()
        assert overridden.config.trigger_tokens == 102_400
        assert overridden.recall_config == RecallConfig(search_max_hits=5)  # not overridden
    with Dashr.open(path, recall=RecallConfig()) as overridden:
        assert overridden.config == WINDOW
        assert overridden.recall_config == RecallConfig()
    assert path.stat().st_size == size  # an argument is this controller's, not the log's
    with Dashr.open(path) as again:
        assert again.config == WINDOW


def test_only_changed_fields_are_recorded_and_a_reset_records_the_default(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.config = WINDOW
        d.config = WINDOW  # equal: nothing new
        d.config = WINDOW.with_changes(retain_tokens=2000)
        d.config = CompactionConfig()
    assert changes(path) == [
        {"compaction": {"retain_tokens": 1500, "recency_window_tokens": 6000}, "recall": {}},
        {"compaction": {"retain_tokens": 2000}, "recall": {}},
        {"compaction": {"retain_tokens": None, "recency_window_tokens": None}, "recall": {}},
    ]
    with Dashr.open(path) as again:
        assert again.config == CompactionConfig()


def test_a_read_only_controller_uses_the_log_and_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.config = WINDOW
    size = path.stat().st_size
    with Dashr.open(path, read_only=True) as reader:
        assert reader.config == WINDOW
        reader.config = CompactionConfig()
        assert reader.config == CompactionConfig()
    assert path.stat().st_size == size


def test_a_recorded_value_that_does_not_validate_names_its_event(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.session.append_log("config/change", {"compaction": {"retain_tokens": -1}, "recall": {}})
    with pytest.raises(ConfigError) as caught:
        Dashr.open(path)
    assert str(caught.value) == (
        "event 1 (config/change) compaction.retain_tokens: expected an integer >= 1, got -1"
    )
    with Dashr.open(path, config=CompactionConfig(), recall=RecallConfig()) as d:
        assert d.config == CompactionConfig()  # arguments win: the log's settings are not read


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"compaction": {}}, "data.recall: missing (required)"),
        ({"compaction": [], "recall": {}}, "data.compaction: expected object, got list"),
    ],
)
def test_a_config_change_event_must_carry_both_groups(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(EventError, match=re.escape(f"event 1 (config/change) {problem}")):
        Event.from_json({"seq": 1, "type": "config/change", "time": 0, "data": data})


def test_the_settings_event_carries_settings_only_never_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdef0123456789abcdef"
    monkeypatch.setenv("DASHR_API_KEY", key)
    monkeypatch.setenv("DASHR_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DASHR_MODEL", "deepseek-chat")
    path = tmp_path / "s.jsonl"
    with Dashr.create(path, summarizer="llm") as d:
        d.config = WINDOW
        d.record_openai({"role": "user", "content": f"my key is {key}"})
    (change,) = changes(path)
    assert set(change) == {"compaction", "recall"}
    assert set(change["compaction"]) <= {f for f in CompactionConfig.__dataclass_fields__}
    assert key not in path.read_text()


def test_every_field_has_its_own_check() -> None:
    from dataclasses import fields

    from dashr_ext._config import _COMPACTION_CHECKS, _RECALL_CHECKS

    assert sorted(_COMPACTION_CHECKS) == sorted(f.name for f in fields(CompactionConfig))
    assert sorted(_RECALL_CHECKS) == sorted(f.name for f in fields(RecallConfig))


def test_fields_are_checked_one_by_one_and_together() -> None:
    CompactionConfig.check_field("recency_window_tokens", 6000)  # alone it is fine
    with pytest.raises(ConfigError, match="recency_window_tokens is set"):
        CompactionConfig(recency_window_tokens=6000)  # together with retain_tokens=None: not
    with pytest.raises(ConfigError, match=r"^threshold_ratio: expected a number in \(0, 1\)"):
        CompactionConfig.check_field("threshold_ratio", 2)
    with pytest.raises(ConfigError, match=r"^pointer: expected 'inject' or 'off'"):
        RecallConfig.check_field("pointer", "on")
    with pytest.raises(ConfigError, match=r"^nope: expected one of the fields engine, "):
        CompactionConfig.check_field("nope", 1)


# --------------------------------------------------------------------------- the lazy file


def test_a_lazy_session_writes_its_file_with_the_first_record(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "s.jsonl"
    d = Dashr.create(path, lazy=True)
    assert d.session.path == path and not path.exists()
    d.config = WINDOW  # settings alone write nothing
    assert not path.exists() and len(d.session) == 2
    d.record_openai({"role": "user", "content": "Fix the retry tests."})
    assert [e["type"] for e in log_lines(path)] == [
        "session/header",
        "config/change",
        "turn/start",
        "user/message",
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(StoreError, match="lock"):
        Dashr.open(path)  # the writer lock was taken with the file
    d.close()
    with Dashr.open(path) as again:
        assert [e.to_json() for e in again.session.events] == log_lines(path)
        assert again.config == WINDOW


def test_a_lazy_session_closed_before_any_record_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    d = Dashr.create(path, lazy=True)
    d.config = WINDOW
    d.close()
    assert not path.exists()
    with pytest.raises(StoreError, match="closed"):
        d.record_openai({"role": "user", "content": "too late"})
    assert not path.exists() and len(d.session) == 2


def test_a_lazy_session_refuses_an_existing_name_up_front(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("")
    with pytest.raises(StoreError, match="already exists"):
        Dashr.create(path, lazy=True)
    assert path.read_text() == ""


def test_a_lazy_file_that_cannot_be_created_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    d = Dashr.create(blocker / "s.jsonl", lazy=True)
    blocker.write_text("a file where the directory should be")
    before = [e.to_json() for e in d.session.events]
    with pytest.raises(StoreError, match="cannot create its directory"):
        d.record_openai({"role": "user", "content": "Fix the retry tests."})
    assert [e.to_json() for e in d.session.events] == before
    blocker.unlink()
    d.record_openai({"role": "user", "content": "Fix the retry tests."})  # a later try works
    assert len(log_lines(blocker / "s.jsonl")) == len(d.session) == 3
    d.close()


def test_a_deferred_store_checks_seqs_of_held_lines_and_writes_them_first(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    store = Store.create(path, deferred=True)
    store.hold([{"seq": 0, "type": "session/header"}])
    with pytest.raises(EventError, match=r"batch\[0\]\.seq: expected 1"):
        store.hold([{"seq": 2}])
    assert not path.exists()
    store.append([{"seq": 1, "type": "user/message"}])
    store.hold([{"seq": 2, "type": "config/change"}])  # the file exists: written at once
    assert [obj["seq"] for obj in log_lines(path)] == [0, 1, 2]
    store.close()


def test_a_forked_child_never_creates_a_lazy_sessions_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    d = Dashr.create(path, lazy=True)
    pid = os.fork()
    if pid == 0:  # the child: its record must fail, and leave no file
        try:
            d.record_openai({"role": "user", "content": "from the child"})
        except StoreError:
            os._exit(0 if not path.exists() else 2)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not path.exists()
    d.record_openai({"role": "user", "content": "from the parent"})
    assert path.exists()
    d.close()


# --------------------------------------------------------------------------- the extension


def new_shell(config: Config | None = None) -> InteractiveShell:
    config = config if config is not None else Config()
    config.HistoryManager.hist_file = ":memory:"
    return InteractiveShell(config=config)


@pytest.fixture
def ip(shells: list[InteractiveShell]) -> InteractiveShell:
    shells.append(new_shell())
    return shells[-1]


def controller(ip: InteractiveShell) -> Dashr:
    d = ip.user_ns["dashr"]
    assert isinstance(d, Dashr)
    return d


def magics(ip: InteractiveShell) -> Magics:
    m = ip.magics_manager.registry["Dashr"]
    assert isinstance(m, Magics)
    return m


def test_load_ext_writes_no_file_until_the_first_record(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    path = controller(ip).session.path
    assert path is not None
    assert capsys.readouterr().out == (
        f"dashr_ext: new session file {path} (written from the first record on)\n"
    )
    run(ip, "%config Dashr.retain_tokens = 1500")
    run(ip, "%config Dashr.recency_window_tokens = 6000")
    run(ip, "dashr.request_messages()")
    assert not path.parent.exists()  # not even $DASHR_HOME/sessions
    run(ip, "dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    assert [e["type"] for e in log_lines(path)] == [
        "session/header",
        "config/change",  # retain_tokens: fine on its own, applied at once
        "config/change",  # recency_window_tokens
        "turn/start",
        "user/message",
    ]
    assert changes(path)[1] == {"compaction": {"recency_window_tokens": 6000}, "recall": {}}
    run(ip, "%unload_ext dashr_ext")
    assert path.exists()  # something was recorded: kept


def test_load_ext_names_the_file_it_created_or_attached(
    shells: list[InteractiveShell], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Config()
    c.Dashr.session_path = str(tmp_path / "agent.jsonl")
    shells.append(new_shell(c))
    run(shells[-1], "%load_ext dashr_ext")
    assert capsys.readouterr().out == f"dashr_ext: new session file {tmp_path / 'agent.jsonl'}\n"
    run(shells[-1], "dashr.record_openai({'role': 'user', 'content': 'Fix the retry tests.'})")
    run(shells[-1], "%unload_ext dashr_ext")
    capsys.readouterr()
    shells.append(new_shell(c))
    run(shells[-1], "%load_ext dashr_ext")
    assert capsys.readouterr().out == (
        f"dashr_ext: attached session file {tmp_path / 'agent.jsonl'} (3 events, 0 checkpoints; "
        "its recorded settings apply)\n"
    )


def test_a_new_session_records_the_options_it_was_loaded_with(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    c = Config()
    c.Dashr.recency_window_tokens = 6000
    c.Dashr.retain_tokens = 1500
    c.Dashr.search_max_hits = 5
    c.Dashr.session_path = str(tmp_path / "agent.jsonl")
    shells.append(new_shell(c))
    run(shells[-1], "%load_ext dashr_ext")
    assert changes(tmp_path / "agent.jsonl") == [
        {"compaction": {"retain_tokens": 1500, "recency_window_tokens": 6000}, "recall": {}},
        {"compaction": {}, "recall": {"search_max_hits": 5}},
    ]


def test_attach_restores_the_recorded_settings_and_the_options_show_them(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    path = tmp_path / "agent.jsonl"
    with Dashr.create(path) as d:
        d.config = WINDOW
        d.recall_config = RecallConfig(read_max_chars=1200)
        d.record_openai({"role": "user", "content": "Fix the retry tests."})
    shells.append(new_shell())
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")  # a fresh kernel: every option at its default
    run(ip, f"%dashr attach {path}")
    d = controller(ip)
    assert d.config == WINDOW and d.config.trigger_tokens == 6000
    assert d.recall_config == RecallConfig(read_max_chars=1200)
    m = magics(ip)
    assert (m.recency_window_tokens, m.retain_tokens, m.read_max_chars) == (6000, 1500, 1200)
    assert m.compaction_config() == WINDOW
    rows = dict(run(ip, "%dashr config").rows)
    assert (rows["recency_window_tokens"], rows["retain_tokens"]) == ("6000", "1500")
    assert len(changes(path)) == 2  # attaching records nothing
    run(ip, "%config Dashr.retain_tokens = 2000")  # a later change goes to this session's log
    assert changes(path)[-1] == {"compaction": {"retain_tokens": 2000}, "recall": {}}
    with Dashr.open(path, read_only=True) as reader:
        assert reader.config == WINDOW.with_changes(retain_tokens=2000)


@pytest.mark.parametrize(
    "lines",
    [
        ("recency_window_tokens = 6000", "retain_tokens = 1500"),
        ("retain_tokens = 1500", "recency_window_tokens = 6000"),
    ],
    ids=["window-first", "retain-first"],
)
@pytest.mark.parametrize("one_cell", [True, False], ids=["one-cell", "two-cells"])
def test_config_order_does_not_matter(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    lines: tuple[str, str],
    one_cell: bool,
) -> None:
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    cells = (
        ["\n".join(f"%config Dashr.{line}" for line in lines)]
        if one_cell
        else [f"%config Dashr.{line}" for line in lines]
    )
    for cell in cells:
        run(ip, cell)
    err = capsys.readouterr().err
    assert controller(ip).config == WINDOW
    if one_cell or lines[0].startswith("retain"):
        assert err == ""
    else:  # the window waited one cell for retain_tokens, and said so once
        assert err.count("\n") == 1 and err.startswith("UsageError: Dashr options not applied")


def test_a_cross_field_problem_is_reported_once_naming_both_options(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run(ip, "%load_ext dashr_ext")
    run(ip, "%config Dashr.retain_tokens = 1500")
    capsys.readouterr()
    run(ip, "%config Dashr.recency_window_tokens = 1000")
    line = (
        "UsageError: Dashr options not applied yet: retain_tokens: expected fewer tokens than "
        "recency_window_tokens (1000), got 1500\n"
    )
    assert capsys.readouterr().err == line
    assert controller(ip).config == CompactionConfig(retain_tokens=1500)  # kept what it had
    run(ip, "x = 1")
    run(ip, "%config Dashr.search_max_hits = 3")  # another group: applied, no repeat
    assert capsys.readouterr().err == ""
    assert controller(ip).recall_config.search_max_hits == 3
    run(ip, "%config Dashr.recency_window_tokens = 6000")
    assert capsys.readouterr().err == ""
    assert controller(ip).config == WINDOW
    run(ip, "%config Dashr.recency_window_tokens = 1000")  # the same problem again: shown again
    assert capsys.readouterr().err == line


def test_a_value_bad_on_its_own_is_still_refused_at_once(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    with caplog.at_level(logging.ERROR):
        run(ip, "%config Dashr.recency_window_tokens = -5")
    assert caplog.records == []  # one UsageError line, and nothing is held back
    assert capsys.readouterr().err == (
        "UsageError: Dashr.recency_window_tokens: expected an integer >= 1, got -5; it stays None\n"
    )
    run(ip, "pass")
    assert capsys.readouterr().err == ""
    assert magics(ip).recency_window_tokens is None


def test_summarizer_llm_may_come_before_its_endpoint(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    run(ip, "%load_ext dashr_ext")
    capsys.readouterr()
    run(
        ip,
        "%config Dashr.summarizer = 'llm'\n"
        "%config Dashr.llm_base_url = 'http://127.0.0.1:9/v1'\n"
        "%config Dashr.llm_model = 'deepseek-chat'",
    )
    assert capsys.readouterr().err == ""
    d = controller(ip)
    assert (d.summarizer.kind, d.summarizer.model) == ("llm", "deepseek-chat")
    assert d.engine.summarizer is d.summarizer
    capsys.readouterr()
    with caplog.at_level(logging.ERROR):
        run(ip, "%config Dashr.llm_base_url = 'ftp://nowhere'")  # wrong on its own: refused
    assert caplog.records == []
    assert capsys.readouterr().err.startswith("UsageError: Dashr.llm_base_url: expected")
    assert magics(ip).llm_base_url == "http://127.0.0.1:9/v1"


def test_options_that_disagree_at_load_fail_it_with_one_line(
    shells: list[InteractiveShell], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Config()
    c.Dashr.recency_window_tokens = 6000
    c.Dashr.session_dir = str(tmp_path / "runs")
    shells.append(new_shell(c))
    ip = shells[-1]
    result = ip.run_cell("%load_ext dashr_ext")
    assert result.error_in_exec is not None
    assert str(result.error_in_exec) == (
        "dashr_ext: retain_tokens: expected an absolute token count when recency_window_tokens "
        "is set (recency_window_tokens = 6000), got None"
    )
    assert "Dashr" not in ip.magics_manager.registry
    assert not (tmp_path / "runs").exists()


def test_export_before_any_record_says_there_is_nothing_yet(
    ip: InteractiveShell, tmp_path: Path
) -> None:
    run(ip, "%load_ext dashr_ext")
    path = controller(ip).session.path
    result = ip.run_cell(f"%dashr export {tmp_path / 'copy.jsonl'}")
    assert str(result.error_in_exec) == (
        f"nothing recorded yet: {path} is written from the first record on"
    )
    assert not (tmp_path / "copy.jsonl").exists()
