"""Turn-memory jobs survive kill -9 (SPEC §6.4): each runs once on the next writable open."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from turn_memory_support import ON, landed, orphan_calls, simple_compressor, turn_passes

from dashr_ext._controller import Dashr
from dashr_ext._formats.openai import to_openai
from dashr_ext._turnmemory import jobs as turn_jobs

TESTS = str(Path(__file__).parent)

PRELUDE = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from turn_memory_support import ON, simple_compressor, work_turn
from dashr_ext._controller import Dashr
"""

KILLED_IN_THE_JOB = """
def die(nodes):
    os.kill(os.getpid(), signal.SIGKILL)

d = Dashr.create({path!r}, ON)
d.turn_compressor = die
d.record_openai(work_turn(0))
d.wait_for_turns(60)
"""

KILLED_BEFORE_PENDING = """
from dashr_ext._session import Session
real = Session.append_log

def append_log(self, type, data):
    if type == "turn-memory/pending":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, type, data)

Session.append_log = append_log
d = Dashr.create({path!r})
d.config = ON  # recorded: the log says turn memory was on when the turn ended
d.record_openai(work_turn(0))
"""

KILLED_IN_THE_BATCH = """
import dashr_ext._store as store
real = store._write_fully

def write(fd, payload):
    if b'"trigger":"turn"' in payload:
        lines = payload.split(b"\\n")
        keep = sum(len(line) + 1 for line in lines[:{whole}]) + len(lines[{whole}]) // 2
        real(fd, payload[:keep])
        os.fsync(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    real(fd, payload)

store._write_fully = write
d = Dashr.create({path!r}, ON)
d.turn_compressor = simple_compressor
d.record_openai(work_turn(0))
d.wait_for_turns(60)
"""


@pytest.fixture(autouse=True)
def simple_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_jobs, "default_compressor", lambda *_: simple_compressor)


def killed(script: str, path: Path, **values: object) -> None:
    code = textwrap.dedent(PRELUDE + script).format(tests=TESTS, path=str(path), **values)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]


def reopen_runs_once(path: Path) -> list[dict[str, object]]:
    """Open as a writer: the job runs; the request stays valid and equals a replay; a second
    open finds nothing to do. Returns the request."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn tail, the repaired landing
        d = Dashr.open(path, ON)
    with d:
        assert d.wait_for_turns(60)
        assert [(r.turn, r.status) for r in d.turns()] == [(1, "landed")]
        assert landed(d) == [1]
        live = to_openai(d.session)
        assert orphan_calls(live) == []
        length = len(d.session)
    with Dashr.open(path, ON, read_only=True) as cold:
        assert to_openai(cold.session) == live
    with Dashr.open(path, ON) as again:
        assert again.wait_for_turns(60)
        assert len(again.session) == length  # nothing ran twice
        assert landed(again) == [1]
    return live


def test_a_kill_between_turn_end_and_landing_leaves_the_job_pending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    killed(KILLED_IN_THE_JOB, path)
    with Dashr.open(path, ON, read_only=True) as seen:
        assert [(r.turn, r.status) for r in seen.turns()] == [(1, "pending")]
        assert turn_passes(seen) == []
    live = reopen_runs_once(path)
    assert len(live) == 3  # user, condensed work, the final answer


def test_a_kill_before_the_pending_marker_is_recovered_from_the_logged_settings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    killed(KILLED_BEFORE_PENDING, path)
    with Dashr.open(path, read_only=True) as seen:
        assert not any(e.type == "turn-memory/pending" for e in seen.session.events)
        assert [(r.turn, r.status) for r in seen.turns()] == [(1, "pending")]
    reopen_runs_once(path)


def test_a_kill_in_the_middle_of_a_landing_batch_runs_the_job_again_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    killed(KILLED_IN_THE_BATCH, path, whole=2)  # the start and the first replace land
    with pytest.warns(Warning) as caught:
        d = Dashr.open(path, ON)
    with d:
        assert any("1 of 2 nodes landed" in str(w.message) for w in caught)
        assert d.wait_for_turns(60)
        (cut, cut_end), (run, run_end) = turn_passes(d)
        assert cut_end is not None and "interrupted" in cut_end.data["error"]
        assert run_end is not None and "error" not in run_end.data
        assert cut.data["job"] == run.data["job"]
    reopen_runs_once(path)


def test_a_kill_that_cut_only_the_closing_event_counts_as_landed(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    killed(KILLED_IN_THE_BATCH, path, whole=3)  # start and both replaces, half the end
    with pytest.warns(Warning) as caught:
        d = Dashr.open(path, ON)
    with d:
        assert any("landed but was not closed" in str(w.message) for w in caught)
        assert d.wait_for_turns(60)
        ((start, end),) = turn_passes(d)
        assert end is not None and "error" not in end.data
        checkpoint = start.data["checkpoint"]
        assert d.turns()[0].checkpoint == checkpoint
        assert set(d.archive) == {checkpoint}  # rebuilt from the log
    reopen_runs_once(path)
