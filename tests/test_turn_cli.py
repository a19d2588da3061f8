"""``dashr read FILE --turn N``, ``dashr turns FILE`` and ``dashr compact FILE --turns``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from turn_memory_support import work_turn

from dashr_ext._cli import main
from dashr_ext._cli_syntax import CommandSyntax, command_name
from dashr_ext._controller import Dashr
from dashr_ext._recall.turns import turn_listing
from dashr_ext._turnmemory import backfill
from dashr_ext._turnmemory.backfill import backfill_jobs


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``dashr ARGV`` in this process: its status (argparse's too), stdout and stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def small_turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Thanks {i}."},
        {"role": "assistant", "content": "You are welcome."},
    ]


@pytest.fixture
def off_file(tmp_path: Path) -> Path:
    """Two long work turns and a short one, recorded while turn memory was off (the log
    records turn_min_tokens 50, so both long ones are eligible)."""
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.config = d.config.with_changes(turn_min_tokens=50)
        d.record_openai(work_turn(0))
        d.record_openai(small_turn(1))
        d.record_openai(work_turn(2))
    return path


def config_changes(path: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["data"] for e in events if e["type"] == "config/change"]


# --------------------------------------------------------------------------- compact --turns


def test_compact_turns_compresses_every_completed_turn_offline_once(
    off_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changes = config_changes(off_file)
    code, out, err = run(capsys, "compact", str(off_file), "--turns")
    assert (code, err) == (0, "")
    with Dashr.open(off_file, read_only=True) as d:
        records = d.turns()
        assert [(r.turn, r.status) for r in records] == [(1, "landed"), (2, "no-op"), (3, "landed")]
        assert out.splitlines() == [
            f"turn {r.turn}: {line}"
            for r, line in zip(records, [_text(r) for r in records], strict=True)
        ]
        assert re.match(r"turn 1: landed: 5 → \d nodes, ~[\d,]+ → ~[\d,]+ tokens, archived", out)
        assert "turn 2: no-op: 2 nodes" in out
        # the originals are still there, whatever the rewrite says
        page = str(d.history_read(turn=1))
        assert "FAILED: IndexError" in page and "row 59 of run 0" in page
    assert config_changes(off_file) == changes  # turn memory was on for the run only
    code, out, err = run(capsys, "compact", str(off_file), "--turns")
    assert (code, out, err) == (
        0,
        "no completed turn left to compress (3 turns with a job, all closed)\n",
        "",
    )


def _text(record: Any) -> str:
    from dashr_ext._recall.turns import record_text

    return record_text(record)


def test_compact_turns_runs_the_extractive_compressor_and_reports_a_failure(
    off_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the compressor broke")

    monkeypatch.setattr(backfill, "compress_turn", broken)
    code, out, err = run(capsys, "compact", str(off_file), "--turns")
    assert (code, err) == (1, "")
    assert out.splitlines()[0] == (
        "turn 1: failed: 5 nodes, ~"
        + out.split("~", 1)[1].split(" ", 1)[0]
        + " tokens; RuntimeError: the compressor broke"
    )
    assert out.splitlines()[1].startswith("turn 2: no-op: 2 nodes")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prune-only"], "--turns takes no --prune-only, --engine or other pass setting"),
        (["--retain-tokens", "100"], "--turns takes no --prune-only, --engine or other pass"),
    ],
)
def test_compact_turns_takes_no_pass_settings(
    off_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    before = off_file.read_bytes()
    code, out, err = run(capsys, "compact", str(off_file), "--turns", *extra)
    assert (code, out) == (2, "")
    assert err.startswith(f"dashr compact: error: {message}") and err.endswith("(see --help)\n")
    assert off_file.read_bytes() == before


def test_compact_turns_on_a_file_another_writer_holds_says_so(
    off_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Dashr.open(off_file):
        code, out, err = run(capsys, "compact", str(off_file), "--turns")
    assert (code, out) == (1, "")
    assert err.startswith("dashr compact: ") and err.count("\n") == 1


# --------------------------------------------------------------------------- turns FILE


def test_turns_lists_jobs_read_only_while_a_writer_holds_the_file(
    off_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd = command_name()
    code, out, err = run(capsys, "turns", str(off_file))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        f"note: no job: turns 1-3, completed while turn memory was off (an open never backfills "
        f"them); {cmd} compact {off_file} --turns compresses them"
    ]
    assert run(capsys, "compact", str(off_file), "--turns")[0] == 0
    with Dashr.open(off_file) as writer:  # holds the writer lock
        code, out, err = run(capsys, "turns", str(off_file))
        expected = turn_listing(writer.turns(), writer.session.events, writer.session.id, "")
    assert (code, err) == (0, "")
    assert out.splitlines() == expected.lines()
    assert out.splitlines()[0].endswith(": 3 turns (2 landed, 1 no-op)")
    assert re.fullmatch(
        r"turn 1  landed: 5 → \d nodes, ~[\d,]+ → ~[\d,]+ tokens, archived as t\d+",
        out.splitlines()[1],
    )


def test_turns_piped_into_head_stops_quietly(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    with Dashr.create(path, durability="flush") as d:
        d.record_openai([m for i in range(2500) for m in small_turn(i)])
        assert len(backfill_jobs(d.session)) == 2500  # pending rows: over a pipe's buffer
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"'{sys.executable}' -m dashr_ext turns '{path}' | head -n 2; exit ${{PIPESTATUS[0]}}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1] == "turn 1     pending: its job has not run yet"


# --------------------------------------------------------------------------- read --turn


def test_read_turn_reads_the_originals_with_command_hints(
    off_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "compact", str(off_file), "--turns")[0] == 0
    with Dashr.open(off_file) as d:
        d.recall_config = d.recall_config.with_changes(read_max_chars=600)
    with Dashr.open(off_file, read_only=True) as d:
        d.recall.syntax = CommandSyntax(off_file)
        expected = str(d.history_read(turn=3))
        outline = str(d.history_outline())
    code, out, err = run(capsys, "read", str(off_file), "--turn", "3")
    assert (code, out, err) == (0, expected + "\n", "")
    cursor = re.search(r"^cursor: (t3@\d+:\d+)$", out, re.M)
    assert cursor is not None
    assert f"next page: {command_name()} read {off_file} --cursor {cursor.group(1)}" in out
    code, page, _ = run(capsys, "read", str(off_file), "--cursor", cursor.group(1))
    assert code == 0 and page.startswith(out.split("\n", 1)[0])
    code, out, _ = run(capsys, "outline", str(off_file))
    assert out == outline + "\n"
    assert (
        f"compressed turns: 2; read one's originals: {command_name()} read {off_file} --turn 3"
        in out.splitlines()
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (
            ["--turn", "9"],
            1,
            "dashr read: unknown turn 9: this session has turns 1-3 ({cmd} outline {file} "
            "lists them)\n",
        ),
        (
            ["--turn", "0"],
            2,
            "dashr read: error: argument --turn: expected an integer >= 1, got 0 (see --help)\n",
        ),
        (
            ["--turn", "1", "--seq", "0"],
            2,
            "dashr read: error: give exactly one of CHECKPOINT (e.g. c42), --seq N, --turn N or "
            "--cursor TOKEN (got --seq and --turn) (see --help)\n",
        ),
    ],
)
def test_bad_turn_reads_are_one_line_errors(
    off_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], status: int, message: str
) -> None:
    code, out, err = run(capsys, "read", str(off_file), *argv)
    assert (code, out) == (status, "")
    assert err == message.format(cmd=command_name(), file=off_file)
