"""Opening a log is safe against what a log or a setting can hold: closed sessions are
collected, out-of-range recorded settings and checkpoint ids fail cleanly or count as absent,
and the files the package creates are private."""

from __future__ import annotations

import gc
import json
import logging
import os
import stat
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps
from helpers import run_cell as run
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext import CompactionConfig, Dashr, RecallConfig
from dashr_ext._bridge import handle
from dashr_ext._bridge.ops import ControllerHost
from dashr_ext._magics import Dashr as Magics
from dashr_ext._magics.bridge import TraitsHost
from dashr_ext._meter import TokenMeter
from dashr_ext._recall.index import find_all
from dashr_ext._session import Session
from dashr_ext._store import gc_paused
from dashr_ext.errors import ConfigError

HUGE = 10**400
HUGE_SHOWN = "10000000000000000000… (an integer of 401 digits)"
FILLER = "\n".join(f"line {i}: scheduler bookkeeping for attempt {i}" for i in range(40))


@pytest.fixture(autouse=True)
def _close_controllers() -> Iterator[None]:
    """Replaces the suite's fixture of that name, which keeps every controller a test makes
    until the test ends: the collection tests need closed ones to be garbage. The tests here
    close their controllers themselves."""
    yield


def compacted_session(path: Path, clock: Callable[[], int]) -> list[str]:
    """Two turns, each compacted by hand; the second checkpoint supersedes the first."""
    summarizer = ScriptedSummarizer(text="## Progress\n- Retry helper inspected.")
    with Dashr.create(
        path,
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        summarizer=summarizer,
        meter=TokenMeter("chars"),
        clock=clock,
    ) as d:
        d.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        d.record_openai({"role": "assistant", "content": "The budget is 3 attempts.\n" + FILLER})
        d.record_openai({"role": "user", "content": "Make the budget configurable."})
        d.record_openai({"role": "assistant", "content": "Added config.retry.maxAttempts."})
        first = d.compact(start_seq=d.session.surface[0], end_seq=d.session.surface[1])
        summarizer.text = "## Progress\n- Retry budget made configurable."
        d.record_openai({"role": "user", "content": "Now run the whole suite."})
        d.record_openai({"role": "assistant", "content": "All 42 tests pass.\n" + FILLER})
        d.record_openai({"role": "user", "content": "Thanks, and the docs?"})
        d.record_openai({"role": "assistant", "content": "Docs updated too."})
        second = d.compact(start_seq=d.session.surface[0], end_seq=d.session.surface[-3])
        assert first is not None and second is not None
        return [first.checkpoint, second.checkpoint]


def with_live_checkpoint_id(path: Path, checkpoint: str) -> Path:
    """A copy of the log whose newest checkpoint node's ``source.checkpoint`` is ``checkpoint``."""
    objs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    nodes = [
        o
        for o in objs
        if o["data"].get("message", {}).get("source", {}).get("kind") == "compact-checkpoint"
    ]
    nodes[-1]["data"]["message"]["source"]["checkpoint"] = checkpoint
    copy = path.with_name(f"crafted-{len(list(path.parent.iterdir()))}.jsonl")
    copy.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return copy


def with_config_change(path: Path, compaction: dict[str, Any], recall: dict[str, Any]) -> int:
    """Append a ``config/change`` line to the log; returns its seq."""
    seq = len(path.read_bytes().splitlines())
    line = {"seq": seq, "type": "config/change", "time": 1_783_339_200_000, "data": {}}
    line["data"] = {"compaction": compaction, "recall": recall}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return seq


def recorded_session(path: Path) -> None:
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        d.record_openai({"role": "assistant", "content": "The budget is 3 attempts."})


# --------------------------------------------------------------------------- collection


def test_a_closed_session_is_freed_by_young_collections_after_another_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(
        path,
        config=CompactionConfig(recency_window_tokens=3000, retain_tokens=800),
        summarizer=ScriptedSummarizer(),
    ) as d:
        record_steps(d, 30, chars=600, user="Fix the failing retry tests.")
        d.request_messages()
        assert d.checkpoints()
    gc.collect()
    thresholds = gc.get_threshold()
    # No automatic collection of generations 1 and 2: what gen-1 collections cannot free
    # sits in the oldest generation, left to a full collection.
    gc.set_threshold(thresholds[0], 1_000_000, 1_000_000)
    try:
        sessions: list[weakref.ref[Session]] = []
        for read_only in (True, False, True, False):
            # The previous controller is garbage (a cycle) while this one opens.
            with Dashr.open(path, read_only=read_only) as d:
                assert gc.get_freeze_count() == 0
                sessions.append(weakref.ref(d.session))
            del d
        gc.collect(1)
        assert [ref() for ref in sessions] == [None] * 4
    finally:
        gc.set_threshold(*thresholds)


def test_what_is_built_while_the_collector_is_paused_stays_young() -> None:
    class Node:
        peer: object = None

    gc.collect()
    with gc_paused():
        node = Node()
        node.peer = node  # a cycle: only the cyclic collector frees it
        ref = weakref.ref(node)
    assert gc.isenabled()
    del node
    gc.collect(1)
    assert ref() is None


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("group", "field", "accepted"),
    [
        ("compaction", "threshold_ratio", "a number in (0, 1)"),
        ("compaction", "stub_region_ratio", "a number in (0, 0.5]"),
        ("compaction", "context_window_tokens", "an integer in [256, 2**53]"),
        ("compaction", "chunk_tokens", "an integer in [256, 2**53]"),
        ("compaction", "archive_max_bytes", "an integer in [1, 2**53]"),
        ("recall", "read_max_chars", "an integer in [400, 1000000]"),
    ],
)
def test_a_huge_integer_in_a_config_change_fails_the_open_naming_its_event(
    tmp_path: Path, group: str, field: str, accepted: str
) -> None:
    path = tmp_path / "s.jsonl"
    recorded_session(path)
    seq = with_config_change(
        path,
        {field: HUGE} if group == "compaction" else {},
        {field: HUGE} if group == "recall" else {},
    )
    size = path.stat().st_size
    with pytest.raises(ConfigError) as caught:
        Dashr.open(path)
    assert str(caught.value) == (
        f"event {seq} (config/change) {group}.{field}: expected {accepted}, got {HUGE_SHOWN}"
    )
    assert path.stat().st_size == size
    with Dashr.open(path, config=CompactionConfig(), recall=RecallConfig()) as d:
        assert d.config == CompactionConfig()  # arguments win: the log's settings are not read


def test_inspect_reports_a_huge_recorded_setting_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    recorded_session(path)
    seq = with_config_change(path, {"threshold_ratio": HUGE}, {})
    done = subprocess.run(
        [sys.executable, "-m", "dashr_ext", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr == (
        f"dashr inspect: event {seq} (config/change) compaction.threshold_ratio: expected a "
        f"number in (0, 1), got {HUGE_SHOWN}\n"
    )


def configure(host: Any, settings: dict[str, Any]) -> dict[str, Any]:
    request = {"version": 1, "id": "r1", "op": "configure", "args": {"settings": settings}}
    return handle(host, request)


@pytest.mark.parametrize(
    ("field", "accepted"),
    [
        ("threshold_ratio", "a number in (0, 1)"),
        ("context_window_tokens", "an integer in [256, 2**53]"),
        ("read_max_chars", "an integer in [400, 1000000]"),
    ],
)
def test_bridge_configure_refuses_a_huge_integer_with_a_config_error(
    tmp_path: Path, shell: InteractiveShell, field: str, accepted: str
) -> None:
    shell.config.Dashr.session_path = str(tmp_path / "k.jsonl")
    shell.extension_manager.load_extension("dashr_ext")
    try:
        with Dashr.create(tmp_path / "s.jsonl") as d:
            magics = shell.magics_manager.registry["Dashr"]
            for host in (ControllerHost(d), TraitsHost(magics)):  # type: ignore[arg-type]
                before = configure(host, {})["result"]["settings"]
                reply = configure(host, {field: HUGE})
                assert reply["error"] == {
                    "type": "ConfigError",
                    "message": f"{field}: expected {accepted}, got {HUGE_SHOWN}",
                    "field": field,
                }
                assert configure(host, {})["result"]["settings"] == before
    finally:
        shell.extension_manager.unload_extension("dashr_ext")
        del shell.config.Dashr["session_path"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "%config Dashr.threshold_ratio = 10**400",
            f"threshold_ratio: expected a number in (0, 1), got {HUGE_SHOWN}",
        ),
        (
            "%config Dashr.stub_region_ratio = -10**400",
            "stub_region_ratio: expected a number in (0, 0.5], got "
            "-1000000000000000000… (an integer of 401 digits)",
        ),
        (
            "%config Dashr.context_window_tokens = 10**400",
            f"context_window_tokens: expected an integer in [256, 2**53], got {HUGE_SHOWN}",
        ),
        (
            "%config Dashr.read_max_chars = 10**5000",
            "read_max_chars: expected an integer in [400, 1000000], got an integer of more "
            f"than {sys.get_int_max_str_digits()} digits",
        ),
    ],
)
def test_config_refuses_a_huge_integer_like_any_bad_value(
    shell: InteractiveShell,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    line: str,
    message: str,
) -> None:
    shell.config.HistoryManager.hist_file = ":memory:"
    run(shell, "%load_ext dashr_ext")
    try:
        magics = shell.magics_manager.registry["Dashr"]
        assert isinstance(magics, Magics)
        before = dict(magics.trait_values(config=True))
        capsys.readouterr()
        with caplog.at_level(logging.ERROR):
            run(shell, line)
        assert caplog.records == []  # a refused value is one UsageError line, not a log record
        assert capsys.readouterr().err.startswith(f"UsageError: Dashr.{message}; it stays ")
        assert dict(magics.trait_values(config=True)) == before
        d = shell.user_ns["dashr"]
        assert (d.config, d.recall_config) == (CompactionConfig(), RecallConfig())
    finally:
        run(shell, "%unload_ext dashr_ext")


def test_a_settings_object_refuses_an_integer_too_long_to_write_out() -> None:
    with pytest.raises(ConfigError) as caught:
        CompactionConfig(context_window_tokens=10 ** (sys.get_int_max_str_digits() + 10))
    assert caught.value.field == "context_window_tokens"
    assert str(caught.value).endswith(
        f"got an integer of more than {sys.get_int_max_str_digits()} digits"
    )
    with pytest.raises(ConfigError, match=r"expected a number in \(0, 1\), got 1000"):
        CompactionConfig(retain_ratio=HUGE)
    assert CompactionConfig(context_window_tokens=2**53).threshold_tokens == int(0.8 * 2**53)


# --------------------------------------------------------------------------- checkpoint ids


def views(d: Dashr, ids: list[str]) -> tuple[Any, ...]:
    return (
        d.request_messages(),
        str(d.history_outline()),
        *(str(d.history_read(cid)) for cid in ids),
        [(c.id, c.summary_seq, c.superseded_by) for c in d.checkpoints()],
        sorted(d.archive),
    )


@pytest.mark.parametrize("crafted", ["cX", "", "c999999", "c-1", "c1", "c³0", "c030"])
def test_a_checkpoint_id_that_names_no_summary_counts_as_absent(
    tmp_path: Path, clock: Callable[[], int], crafted: str
) -> None:
    path = tmp_path / "s.jsonl"
    ids = compacted_session(path, clock)
    crafted_path = with_live_checkpoint_id(path, crafted)
    with Dashr.open(path, read_only=True) as reference:
        expected = views(reference, ids)
    with Dashr.open(crafted_path) as d:  # derived from its pass's summary, as for a foreign log
        assert views(d, ids) == expected
        assert views(d, ids) == expected  # and again: nothing broke after the first request


@pytest.mark.parametrize("crafted", ["cX", "c1.5", "c³0", "c1_4"])
def test_a_pass_over_a_checkpoint_whose_id_is_not_a_seq_merges_its_passs_summary(
    tmp_path: Path, clock: Callable[[], int], crafted: str
) -> None:
    path = tmp_path / "s.jsonl"
    compacted_session(path, clock)
    crafted_path = with_live_checkpoint_id(path, crafted)
    previous: list[str | None] = []
    for log in (path, crafted_path):
        summarizer = ScriptedSummarizer(text="## Progress\n- Suite green, docs updated.")
        with Dashr.open(log, summarizer=summarizer, meter=TokenMeter("chars"), clock=clock) as d:
            d.record_openai({"role": "user", "content": "Release it."})
            d.record_openai({"role": "assistant", "content": "Tagged v1.4.0.\n" + FILLER})
            surface = d.session.surface
            result = d.compact(start_seq=surface[0], end_seq=surface[-3])
            assert result is not None
            d.request_messages()
        previous.append(summarizer.requests[0].previous_summary)
    assert previous[0] is not None and "made configurable" in previous[0]  # the live one's
    assert previous[1] == previous[0]


# --------------------------------------------------------------------------- file modes


def test_the_search_index_and_its_lock_file_are_private(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    recorded_session(sessions / "s.jsonl")
    index = tmp_path / "index.sqlite3"
    umask = os.umask(0o022)
    try:
        assert find_all(sessions, "retry", index_path=index).matched
    finally:
        os.umask(umask)
    assert stat.S_IMODE((sessions / "s.jsonl").stat().st_mode) == 0o600
    for made in (index, Path(f"{index}.lock")):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600, made
