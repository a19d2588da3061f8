"""Rough edges at the seams: search paging over the bridge, command-line messages that name
commands (not Python calls), ``dashr compact`` with one window flag, the pin commands' file
check, and session listings over directories holding links that go nowhere."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import needle_session, run_cell
from inprocess import cli, kernel_session
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._bridge import handle
from dashr_ext._bridge.protocol import schema
from dashr_ext._catalog import catalog, session_files
from dashr_ext._cli import _cli_wording
from dashr_ext._cliparse import command_name, session_file_hint

DOCS = Path(__file__).resolve().parents[1] / "docs" / "bridge.md"
HIT = re.compile(r"^(\d+)\. seq (\d+) \|", re.M)
NEXT = re.compile(r'page on with cursor="(h\d+)"')


def pages(search: Callable[[str | None], str]) -> list[str]:
    """Every page of a search: the first, then the one each page's cursor names."""
    found = [search(None)]
    while (token := NEXT.search(found[-1])) is not None:
        assert len(found) < 20, "the cursor does not move on"
        found.append(search(token.group(1)))
    return found


# --------------------------------------------------------------------------- bridge paging


def test_the_bridge_pages_a_search_with_the_cursor_as_the_in_process_api_does(
    tmp_path: Path,
) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        expected = {
            e.seq for e in d.session.events if e.type == "tool/result"
        }  # every needle, found without recall
        ks = kernel_session(d)
        remote = pages(lambda cursor: str(ks.history_search("needle", cursor=cursor)))
        local = pages(lambda cursor: str(d.history_search("needle", cursor=cursor)))
        limited = pages(lambda cursor: str(ks.history_search("needle", limit=7, cursor=cursor)))
    assert remote == local
    assert [len(HIT.findall(p)) for p in remote] == [20, 20, 20, 5]
    shown = [int(seq) for page in remote for _n, seq in HIT.findall(page)]
    assert len(shown) == len(set(shown)) == 65 and set(shown) == expected
    limited_seqs = [int(seq) for page in limited for _n, seq in HIT.findall(page)]
    assert limited_seqs == shown and len(limited) == 10


def test_the_search_op_takes_a_cursor_string_and_refuses_anything_else(tmp_path: Path) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        first = str(d.history_search("needle"))
        token = NEXT.search(first).group(1)  # type: ignore[union-attr]
        args = {"query": "needle", "cursor": token}
        reply = handle(d, {"version": 1, "id": "r1", "op": "search", "args": args})
        assert reply["ok"] is True
        assert reply["result"]["text"] == str(d.history_search("needle", cursor=token))
        bad = {"query": "needle", "cursor": 17}
        reply = handle(d, {"version": 1, "id": "r2", "op": "search", "args": bad})
        assert reply["ok"] is False and reply["error"]["type"] == "ProtocolError"
        assert reply["error"]["message"] == "args.cursor: 17 is not of type 'string'"
        wrong = {"query": "needle", "cursor": "c20@4:1200"}
        reply = handle(d, {"version": 1, "id": "r3", "op": "search", "args": wrong})
        assert reply["error"]["type"] == "RecallError"
        assert "(that is a history_read cursor)" in reply["error"]["message"]


def test_the_bridge_doc_lists_every_field_of_the_search_op() -> None:
    text = DOCS.read_text("utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("* `search` `{"))
    fields = set(re.findall(r'"(\w+)"\??:', line))
    assert fields == set(schema()["$defs"]["args"]["search"]["properties"])
    # The transcript's search reply has today's header, with the note on other events.
    assert re.search(
        r"— \d+ events scanned \(every message; the log's \d+ other events are settings, "
        r"markers and compaction records\), \d+ matched, showing 1",
        text,
    )


# --------------------------------------------------------------------------- CLI wording


def test_a_command_given_a_directory_names_the_commands_that_write_a_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd = command_name()
    hint = f"give a session file (.jsonl), as {cmd} demo --out FILE or {cmd} import writes one"
    assert session_file_hint() == hint
    assert cli(capsys, "inspect", str(tmp_path)) == (
        1,
        "",
        f"dashr inspect: {tmp_path}: is a directory, not a regular file; {hint}\n",
    )
    assert cli(capsys, "search", str(tmp_path), "x") == (
        1,
        "",
        f"dashr search: {tmp_path}: is a directory, not a regular file; {hint}; "
        f"{cmd} search --all DIR QUERY searches every session in DIR\n",
    )


def test_a_session_another_writer_holds_is_refused_naming_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "held session.jsonl"
    with Dashr.create(path) as writer:
        writer.record_openai({"role": "user", "content": "Fix the retry tests."})
        before = path.read_bytes()
        for argv in (("pin", str(path), "Never push."), ("compact", str(path))):
            code, out, err = cli(capsys, *argv)
            assert (code, out) == (1, "")
            assert err == (
                f"dashr {argv[0]}: {path}: another writer holds this session's lock (one "
                f"writer per session); {command_name()} inspect {shlex.quote(str(path))} "
                "reads it, or close the other writer first\n"
            )
        assert path.read_bytes() == before
    # Where the platform has no file locks, the message names the commands that only read.
    unlocked = "s.jsonl: writing a session needs POSIX file locking, which this platform lacks"
    assert _cli_wording(f"{unlocked}; open it with read_only=True", Path("s.jsonl")) == (
        f"{unlocked}; {command_name()} inspect, outline and read read it"
    )


# --------------------------------------------------------------------------- dashr compact


@pytest.fixture
def demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "demo.jsonl"
    assert cli(capsys, "demo", "--out", str(path))[0] == 0
    return path


def copy(path: Path, name: str) -> Path:
    target = path.with_name(name)
    target.write_bytes(path.read_bytes())
    return target


def test_compact_takes_a_recency_window_alone(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Dashr.open(demo, read_only=True) as d:
        assert (d.config.recency_window_tokens, d.config.retain_tokens) == (None, None)
    explicit = copy(demo, "explicit.jsonl")
    code, out, err = cli(capsys, "compact", str(demo), "--recency-window-tokens", "10000")
    assert (code, err) == (0, "")
    assert re.fullmatch(r"c\d+: shadowed \d+ events; ~[\d,]+ -> ~[\d,]+ tokens\n", out)
    # The retain budget is the share of the trigger the default ratios keep: 0.16 / 0.8.
    flags = ("--recency-window-tokens", "10000", "--retain-tokens", "2000")
    assert cli(capsys, "compact", str(explicit), *flags) == (0, out, "")
    with Dashr.open(demo, read_only=True) as d:  # the flags were not recorded
        assert (d.config.recency_window_tokens, d.config.retain_tokens) == (None, None)


def test_compact_with_a_window_alone_keeps_a_recorded_retain_budget_below_it(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Dashr.open(demo) as d:
        d.config = CompactionConfig(retain_tokens=1200)  # recorded in the log
    explicit = copy(demo, "explicit.jsonl")
    code, out, err = cli(capsys, "compact", str(demo), "--recency-window-tokens", "10000")
    assert (code, err) == (0, "")
    flags = ("--recency-window-tokens", "10000", "--retain-tokens", "1200")
    assert cli(capsys, "compact", str(explicit), *flags) == (0, out, "")
    # A recorded budget the new window leaves no room for gives way to the window's share.
    small = copy(demo, "small.jsonl")
    again = copy(demo, "again.jsonl")
    code, out, err = cli(capsys, "compact", str(small), "--recency-window-tokens", "1000")
    assert (code, err) == (0, "")
    flags = ("--recency-window-tokens", "1000", "--retain-tokens", "200")
    assert cli(capsys, "compact", str(again), *flags) == (0, out, "")


def test_compact_still_refuses_a_retain_budget_above_the_window_it_is_given(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = demo.read_bytes()
    flags = ("--recency-window-tokens", "1000", "--retain-tokens", "2000")
    assert cli(capsys, "compact", str(demo), *flags) == (
        1,
        "",
        "dashr compact: --retain-tokens: expected fewer tokens than --recency-window-tokens "
        "(1000), got 2000\n",
    )
    assert demo.read_bytes() == before


# --------------------------------------------------------------------------- pin commands


def test_the_pin_commands_say_what_a_path_is_when_it_is_not_a_session_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(tmp_path / "loop.jsonl")
    hint = session_file_hint()
    for argv, said in (
        (("pins", str(fifo)), f"{fifo}: is a FIFO (named pipe), not a regular file; {hint}"),
        (("pin", str(loop), "x"), f"{loop}: a symbolic link loop; {hint}"),
        (
            ("unpin", str(tmp_path), "pin1"),
            f"{tmp_path}: is a directory, not a regular file; {hint}",
        ),
        (("pins", str(tmp_path / "missing.jsonl")), f"no such file: {tmp_path / 'missing.jsonl'}"),
    ):
        assert cli(capsys, *argv) == (1, "", f"dashr {argv[0]}: {said}\n"), argv


# --------------------------------------------------------------------------- session listings


def test_session_listings_skip_link_loops_and_other_non_regular_entries(
    tmp_path: Path, shells: list[InteractiveShell]
) -> None:
    directory = tmp_path / "sessions"
    directory.mkdir()
    with Dashr.create(directory / "run.jsonl") as d:
        d.record_openai({"role": "user", "content": "Train the model."})
    (directory / "a.jsonl").symlink_to(directory / "b.jsonl")
    (directory / "b.jsonl").symlink_to(directory / "a.jsonl")  # a loop: ELOOP on stat
    (directory / "gone.jsonl").symlink_to(directory / "nothing")
    (directory / "dir.jsonl").mkdir()
    os.mkfifo(directory / "pipe.jsonl")
    (directory / "link.jsonl").symlink_to(directory / "run.jsonl")  # a link to a session counts
    # One modification time (the link's is its target's): by name, newest first.
    assert session_files(directory) == [directory / "run.jsonl", directory / "link.jsonl"]
    assert catalog(directory, 10).total == 2

    ip = InteractiveShell(config=Config({"HistoryManager": {"hist_file": ":memory:"}}))
    shells.append(ip)
    run_cell(ip, "%load_ext dashr_ext")
    table = run_cell(ip, f"%dashr sessions {directory}")
    assert [row[4] for row in table.rows] == ["Train the model."] * 2
    assert table.title == f"dashr sessions — 2 files in {directory}, newest first"
