"""Finding a session again: the catalog, ``%dashr sessions``, ``attach --last``/``--read-only``,
errors in magic syntax, tab completion and ``%config Dashr``'s grouped help."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from helpers import run_cell as run  # tests/ is on sys.path under pytest
from IPython.core.completer import provisionalcompleter
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import dashr_ext
from dashr_ext import Dashr as Controller
from dashr_ext import _catalog
from dashr_ext._catalog import catalog, summarize
from dashr_ext._demo import demo_messages
from dashr_ext._magics import Dashr
from dashr_ext._magics.completion import MAGIC_OPTIONS, MATCHER_ID
from dashr_ext._magics.options import OPTION_GROUPS
from dashr_ext._magics.sessions import SessionTable
from dashr_ext._paths import dashr_home
from dashr_ext.errors import StoreError

MINUTE_NS = 60 * 1_000_000_000
T0_NS = 1_783_339_200 * 1_000_000_000  # 2026-07-06 12:00:00 UTC


# --------------------------------------------------------------------------- building blocks


def sessions_dir() -> Path:
    return dashr_home() / "sessions"


def recorded(path: Path, first: str, *, replies: int = 1, minute: int = 0) -> Path:
    """A session file at ``path`` whose first user message is ``first``; written at T0+minute."""
    with Controller.create(path) as d:
        d.record_openai({"role": "user", "content": first})
        for n in range(replies):
            d.record_openai({"role": "assistant", "content": f"reply {n}"})
    touch(path, minute)
    return path


def touch(path: Path, minute: int) -> None:
    stamp = T0_NS + minute * MINUTE_NS
    os.utime(path, ns=(stamp, stamp))


def compacted_demo(path: Path, minute: int) -> Path:
    """The demo session compacted under a 6000-token window (several checkpoints)."""
    from dashr_ext import CompactionConfig

    config = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)
    with Controller.create(path, config=config) as d:
        for message in demo_messages():
            if message["role"] == "assistant":
                d.request_messages()
            d.record_openai(message)
        assert len(d.checkpoints()) >= 3
    touch(path, minute)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def new_shell(config: Config | None = None) -> InteractiveShell:
    config = config if config is not None else Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell(config=config)
    shell.magics_manager.load_all_lazy_magics()
    return shell


@pytest.fixture
def ip(shells: list[InteractiveShell], tmp_path: Path) -> InteractiveShell:
    """A loaded shell whose own session lives outside the sessions directory."""
    config = Config()
    config.Dashr.session_path = str(tmp_path / "this-kernel.jsonl")
    shells.append(new_shell(config))
    run(shells[-1], "%load_ext dashr_ext")
    return shells[-1]


def usage_error(ip: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a cell that must fail with a one-line UsageError; return that line."""
    capsys.readouterr()
    result = ip.run_cell(code)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    shown = "".join(capsys.readouterr()).strip()
    assert "Traceback" not in shown and shown.count("\n") == 0, shown
    return str(result.error_in_exec)


def controller(ip: InteractiveShell) -> Controller:
    d = ip.user_ns["dashr"]
    assert isinstance(d, Controller)
    return d


def completions(ip: InteractiveShell, code: str) -> list[str]:
    with provisionalcompleter():
        return [c.text for c in ip.Completer.completions(code, len(code))]


# --------------------------------------------------------------------------- the catalog


def test_catalog_lists_newest_first_with_time_events_checkpoints_and_first_user_message(
    tmp_path: Path,
) -> None:
    demo = compacted_demo(tmp_path / "demo.jsonl", minute=5)
    old = recorded(tmp_path / "old.jsonl", "Plot the weekly totals.", minute=1)
    new = recorded(tmp_path / "new.jsonl", "  Load\n data.csv  ", replies=3, minute=9)
    (tmp_path / "notes.txt").write_text("not a session")

    found = catalog(tmp_path, 10)

    assert [f.path for f in found.files] == [new, demo, old]
    assert found.total == 3
    first = found.files[0]
    assert first.modified_ms == (T0_NS + 9 * MINUTE_NS) // 1_000_000
    assert first.first_user_message == "  Load\n data.csv  "
    with Controller.open(demo, read_only=True) as d:
        expected_events, expected_checkpoints = len(d.session), len(d.checkpoints())
    assert (found.files[1].events, found.files[1].checkpoints) == (
        expected_events,
        expected_checkpoints,
    )
    assert found.files[1].checkpoints_exact
    assert found.files[1].first_user_message is not None
    assert found.files[1].first_user_message.startswith("Fix the failing retry tests")
    with Controller.open(new, read_only=True) as d:
        assert found.files[0].events == len(d.session)
    assert found.files[0].checkpoints == 0


def test_the_catalog_summarizes_only_the_newest_files_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [recorded(tmp_path / f"s{n:02d}.jsonl", f"task {n}", minute=n) for n in range(12)]
    digests = {p: (sha256(p), p.stat().st_mtime_ns) for p in paths}
    opened: list[Path] = []
    real = _catalog.summarize

    def counting(path: Path) -> _catalog.SessionFile:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(_catalog, "summarize", counting)
    with Controller.open(paths[-1]):  # a live writer holds the newest one's lock
        found = catalog(tmp_path, 4)

    assert [f.first_user_message for f in found.files] == ["task 11", "task 10", "task 9", "task 8"]
    assert opened == paths[:-5:-1]
    assert found.total == 12
    assert {p: (sha256(p), p.stat().st_mtime_ns) for p in paths[:-1]} == {
        p: digests[p] for p in paths[:-1]
    }


def test_the_catalog_reads_the_head_and_tail_not_the_middle(tmp_path: Path) -> None:
    path = recorded(tmp_path / "big.jsonl", "Summarize the logs.", replies=2)
    lines = path.read_bytes().splitlines(keepends=True)
    # A middle line that is not JSON: a full replay would stop at it; the catalog never parses it.
    path.write_bytes(b"".join([*lines[:-1], b"garbage " * 1000 + b"\n", lines[-1]]))

    f = summarize(path)

    assert f.first_user_message == "Summarize the logs."
    assert f.events == len(lines)  # the last line's seq + 1
    with pytest.raises(StoreError):
        Controller.open(path, read_only=True)


def test_a_torn_tail_is_not_counted(tmp_path: Path) -> None:
    path = recorded(tmp_path / "torn.jsonl", "Fix it.")
    events = len(path.read_bytes().splitlines())
    with path.open("ab") as fh:
        fh.write(b'{"seq":99,"type":"compaction/summary","ti')

    f = summarize(path)

    assert (f.events, f.checkpoints) == (events, 0)


def test_a_file_larger_than_the_scan_gives_a_lower_bound_of_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = compacted_demo(tmp_path / "demo.jsonl", minute=0)
    exact = summarize(demo).checkpoints
    monkeypatch.setattr(_catalog, "SCAN_BYTES", demo.stat().st_size // 2)

    f = summarize(demo)

    assert not f.checkpoints_exact and 0 < f.checkpoints < exact
    assert f.events == summarize(demo).events


def test_a_header_longer_than_the_head_still_names_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tools.jsonl"
    tools = [
        {"type": "function", "function": {"name": f"t{n}", "parameters": {}}} for n in range(50)
    ]
    with Controller.create(path, tools=tools, session_id="many-tools") as d:
        d.record_openai({"role": "user", "content": "hello"})
    events = summarize(path).events
    monkeypatch.setattr(_catalog, "HEAD_BYTES", 200)

    f = summarize(path)

    assert (f.session_id, f.first_user_message, f.events) == ("many-tools", None, events)
    assert events is not None and events > 2


def test_a_file_that_is_not_a_session_is_listed_as_such(tmp_path: Path) -> None:
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    (f,) = catalog(tmp_path, 5).files
    assert not f.is_session and f.events is None and f.first_user_message is None


def test_a_missing_directory_holds_no_sessions(tmp_path: Path) -> None:
    found = catalog(tmp_path / "nope", 5)
    assert (found.files, found.total) == ((), 0)


# --------------------------------------------------------------------------- %dashr sessions


def test_sessions_magic_lists_recent_sessions_newest_first(ip: InteractiveShell) -> None:
    d = sessions_dir()
    recorded(d / "a.jsonl", "Plot <weekly> totals & trends", minute=1)
    compacted_demo(d / "demo.jsonl", minute=2)
    (d / "notes.jsonl").write_text("[]\n")
    touch(d / "notes.jsonl", 0)

    table = run(ip, "%dashr sessions")

    assert isinstance(table, SessionTable)
    lines = str(table).splitlines()
    assert lines[0] == f"dashr sessions — 3 files in {d}, newest first"
    assert re.split(r"\s{2,}", lines[1]) == [
        "#",
        "last written",
        "events",
        "checkpoints",
        "first user message",
        "file",
    ]
    with Controller.open(d / "demo.jsonl", read_only=True) as demo:
        demo_counts = [str(len(demo.session)), str(len(demo.checkpoints()))]
    assert re.split(r"\s{2,}", lines[2].strip()) == [
        "1",
        "2026-07-06 12:02Z",
        *demo_counts,
        "Fix the failing retry tests in tests/test_retry.py. CI has…",
        str(d / "demo.jsonl"),
    ]
    with Controller.open(d / "a.jsonl", read_only=True) as a:
        a_events = len(a.session)
    assert re.split(r"\s{2,}", lines[3].strip())[1:] == [
        "2026-07-06 12:01Z",
        str(a_events),
        "0",
        "Plot <weekly> totals & trends",
        str(d / "a.jsonl"),
    ]
    assert re.split(r"\s{2,}", lines[4].strip())[-2:] == [
        "(not a session file)",
        str(d / "notes.jsonl"),
    ]
    assert lines[-1].startswith("note: %dashr attach PATH attaches one (--read-only when")
    html = table._repr_html_()
    assert html.startswith('<div class="dashr-report dashr-sessions"><p><b>dashr sessions')
    assert '<th style="text-align:right">events</th>' in html
    assert '<th style="text-align:left">first user message</th>' in html
    assert '<td style="text-align:left">Plot &lt;weekly&gt; totals &amp; trends</td>' in html
    assert html.count("<tr>") == 4


def test_sessions_marks_the_attached_one_and_bounds_the_list(ip: InteractiveShell) -> None:
    d = sessions_dir()
    for n in range(4):
        recorded(d / f"s{n}.jsonl", f"task {n}", minute=n)
    run(ip, f"%dashr attach {d / 's1.jsonl'}")

    table = run(ip, "%dashr sessions --limit 3")

    assert table.title == f"dashr sessions — the 3 newest of 4 files in {d}"
    assert [row[-1] for row in table.rows] == [
        str(d / "s3.jsonl"),
        str(d / "s2.jsonl"),
        f"{d / 's1.jsonl'} (attached)",
    ]
    assert table.notes[0] == "%dashr sessions --limit 4 lists all 4"


def test_sessions_lists_another_directory_and_says_when_it_is_empty(
    ip: InteractiveShell, tmp_path: Path
) -> None:
    other = tmp_path / "project"
    recorded(other / "run.jsonl", "Train the model.")
    assert [row[4] for row in run(ip, f"%dashr sessions {other}").rows] == ["Train the model."]
    empty = run(ip, f"%dashr sessions {tmp_path / 'none'}")
    assert empty.rows == () and empty.title == f"no session files in {tmp_path / 'none'}"


def test_sessions_rejects_a_bad_limit(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage_error(ip, "%dashr sessions --limit 0", capsys) == (
        "%dashr sessions: --limit: expected an integer >= 1, got 0; "
        "usage: %dashr sessions [DIR] [--limit N]"
    )
    assert usage_error(ip, "%dashr sessions --limit x", capsys) == (
        "%dashr sessions: --limit: expected an integer, got 'x'; "
        "usage: %dashr sessions [DIR] [--limit N]"
    )


# --------------------------------------------------------------------------- attach --last


def test_attach_last_attaches_the_newest_other_session_with_anything_recorded(
    ip: InteractiveShell,
) -> None:
    d = sessions_dir()
    wanted = recorded(d / "wanted.jsonl", "Fix the retry tests.", minute=1)
    Controller.create(d / "empty.jsonl").close()  # a kernel that loaded and recorded nothing
    touch(d / "empty.jsonl", 3)
    (d / "junk.jsonl").write_text("{}\n")
    touch(d / "junk.jsonl", 4)
    older = recorded(d / "older.jsonl", "Something older.", minute=0)

    report = run(ip, "%dashr attach --last")

    assert controller(ip).session.path == wanted
    assert report.title == f"attached session {controller(ip).session.id}"
    touch(wanted, 5)  # the attached one is now the newest: --last means another one
    run(ip, "%dashr attach --last")
    assert controller(ip).session.path == older


def test_attach_last_with_nothing_to_attach_says_so(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage_error(ip, "%dashr attach --last", capsys) == (
        f"no session in {sessions_dir()} to attach besides this one (none has anything "
        "recorded); %dashr sessions lists them, %dashr attach PATH attaches a file elsewhere"
    )


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (
            "%dashr attach",
            "%dashr attach: give a session file PATH or --last (neither given); usage: "
            "%dashr attach PATH [--read-only] | %dashr attach --last [--read-only]",
        ),
        (
            "%dashr attach x.jsonl --last",
            "%dashr attach: give a session file PATH or --last (both given); usage: "
            "%dashr attach PATH [--read-only] | %dashr attach --last [--read-only]",
        ),
        (
            "%dashr attach --lats",
            "%dashr attach: unrecognized arguments: --lats; usage: "
            "%dashr attach PATH [--read-only] | %dashr attach --last [--read-only]",
        ),
    ],
)
def test_attach_takes_a_path_or_last(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, message: str
) -> None:
    before = controller(ip)
    assert usage_error(ip, cell, capsys) == message
    assert controller(ip) is before


# --------------------------------------------------------------------------- attach --read-only


def test_attach_read_only_reads_a_session_another_writer_holds(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "busy.jsonl"
    run(ip, "%config Dashr.retain_tokens = 1500")
    run(ip, "%config Dashr.recency_window_tokens = 6000")
    with Controller.create(path) as writer:
        writer.record_openai(list(demo_messages()))  # well above the 6000-token trigger
        digest = sha256(path)

        report = run(ip, f"%dashr attach --read-only {path}")

        d = controller(ip)
        assert d.session.read_only and d.session.path == path
        assert report.title == f"attached session {writer.session.id} (read-only)"
        assert report.notes[-1].startswith("read-only: nothing is recorded or compacted here")
        assert "Fix the failing retry tests" in str(run(ip, "%history_read --seq 0"))
        assert str(run(ip, "%compact --dry-run")).startswith("dry run: %compact would condense")
        assert usage_error(ip, "%compact", capsys) == (
            "this session is attached read-only (%dashr attach --read-only): nothing can be "
            "recorded or compacted; %dashr attach PATH attaches it for writing"
        )
        assert sha256(path) == digest
    run(ip, f"%dashr attach {path}")  # the writer is gone: attach it for writing
    assert not controller(ip).session.read_only


# --------------------------------------------------------------------------- magic syntax


def test_attach_to_a_missing_file_names_the_magics(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.jsonl"
    assert usage_error(ip, f"%dashr attach {missing}", capsys) == (
        f"no such session file: {missing}; %dashr sessions lists the recent ones"
    )
    assert not missing.exists()


def test_attach_to_a_locked_session_suggests_the_read_only_magic(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "my runs" / "busy.jsonl"
    with Controller.create(path):
        line = usage_error(ip, f"%dashr attach '{path}'", capsys)
    assert line == (
        f"{path}: another writer holds this session's lock (one writer per session: another "
        f"kernel or process has it open); %dashr attach --read-only '{path}' inspects it, or "
        "close the other writer first"
    )


def test_a_locked_session_path_at_load_says_what_to_do(
    shells: list[InteractiveShell], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "busy.jsonl"
    config = Config()
    config.Dashr.session_path = str(path)
    shells.append(new_shell(config))
    with Controller.create(path):
        line = usage_error(shells[-1], "%load_ext dashr_ext", capsys)
    assert line == (
        f"Dashr.session_path {path}: another writer holds this session's lock (one writer per "
        "session: another kernel or process has it open); close that writer, or set "
        f"Dashr.session_path to another file (then %dashr attach --read-only {path} inspects it)"
    )


def test_agent_without_an_endpoint_names_the_config_magic(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DASHR_BASE_URL", raising=False)
    monkeypatch.delenv("DASHR_MODEL", raising=False)
    assert usage_error(ip, "%%agent\nPlot the totals.", capsys) == (
        "Dashr.agent_base_url: expected an http(s) API root such as "
        "'https://api.deepseek.com/v1' (or env DASHR_BASE_URL), got None; set it with "
        "%config Dashr.agent_base_url = URL"
    )
    run(ip, "%config Dashr.agent_base_url = 'http://127.0.0.1:9/v1'")
    assert usage_error(ip, "%%agent\nPlot the totals.", capsys) == (
        "Dashr.agent_model: expected a model name such as 'deepseek-chat' (or env "
        "DASHR_MODEL), got None; set it with %config Dashr.agent_model = NAME"
    )


PYTHON_SPELLINGS = re.compile(r"Store\.|read_only=|ChatClient|\w\(|\(\)")
"""What a magic's message must not say: Python calls, keyword arguments, internal classes."""


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (
            "%history_read",
            "%history_read: give exactly one of CHECKPOINT, --seq N, --turn N or --cursor TOKEN, "
            "e.g. %history_read c20, %history_read --seq 0 or %history_read --turn 1",
        ),
        (
            "%history_read c5",
            "unknown checkpoint 'c5': this session has no checkpoints yet (nothing has been "
            "compacted); read its history with %history_read --seq 0",
        ),
        (
            "%history_read --seq -1",
            "--seq: expected an integer >= 0 (an event seq; this session has seqs 0-0), got -1",
        ),
        (
            "%history_search x --limit 0",
            "--limit: expected an integer in [1, 20], got 0; it counts the hits of one page (a "
            "page that stops short names the cursor of the next)",
        ),
        (
            "%history_search ''",
            "QUERY: expected a non-empty phrase to search for (a case-insensitive literal "
            "match), got ''",
        ),
        (
            "%dashr",
            "%dashr needs a subcommand: status | config | sessions [DIR] [--limit N] | attach "
            "PATH [--read-only] | attach --last [--read-only] | export PATH | snapshot save "
            "PATH | snapshot load PATH | pin TEXT… | pins | unpin ID | turns (%dashr? shows the "
            "manual)",
        ),
        (
            "%dashr snapshot",
            "%dashr snapshot: give save or load; usage: %dashr snapshot save PATH | "
            "%dashr snapshot load PATH",
        ),
        ("%dashr status now", "%dashr status: unrecognized arguments: now; usage: %dashr status"),
    ],
)
def test_magic_errors_name_magic_syntax(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, message: str
) -> None:
    line = usage_error(ip, cell, capsys)
    assert line == message
    assert not PYTHON_SPELLINGS.search(line.replace("(nothing", "").replace("(an event", ""))


def test_unknown_checkpoints_point_at_the_outline_magic(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    path = compacted_demo(sessions_dir() / "demo.jsonl", minute=0)
    run(ip, f"%dashr attach {path}")
    ids = ", ".join(cp.id for cp in controller(ip).checkpoints())
    assert usage_error(ip, "%history_read c1", capsys) == (
        f"unknown checkpoint 'c1'; known checkpoints: {ids} (%history_outline lists them)"
    )


def test_running_the_quick_tour_twice_names_the_python_call_that_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Controller.create("agent.jsonl").close()
    with pytest.raises(StoreError) as info:
        Controller.create("agent.jsonl")
    assert str(info.value) == (
        "agent.jsonl: already exists; Dashr.open('agent.jsonl') continues it, or choose a new "
        "path (Dashr.create() without one makes a new file in $DASHR_HOME/sessions)"
    )
    with pytest.raises(StoreError) as missing:
        Controller.open("other.jsonl")
    assert str(missing.value) == (
        "other.jsonl: no such session file; Dashr.create('other.jsonl') starts a new session there"
    )


# --------------------------------------------------------------------------- tab completion


def test_tab_completes_subcommands_options_and_session_files(ip: InteractiveShell) -> None:
    d = sessions_dir()
    newest = recorded(d / "b.jsonl", "newer", minute=2)
    older = recorded(d / "a.jsonl", "older", minute=1)
    run(ip, f"%dashr attach {recorded(d / 'c.jsonl', 'attached', minute=3)}")
    assert completions(ip, "%dashr ") == [
        "status",
        "config",
        "sessions",
        "attach",
        "export",
        "snapshot",
        "pin",
        "pins",
        "unpin",
        "turns",
    ]
    assert completions(ip, "%dashr s") == ["status", "sessions", "snapshot"]
    assert completions(ip, "%dashr snapshot ") == ["save", "load"]
    assert completions(ip, "%dashr attach ") == [
        str(newest),
        str(older),
        "--last",
        "--read-only",
    ]
    assert completions(ip, "%dashr attach --last --") == ["--read-only"]
    assert completions(ip, "%dashr sessions --") == ["--limit"]
    assert completions(ip, "%compact --") == ["--dry-run", "--prune-only"]
    assert completions(ip, "%%agent --m") == ["--max-steps"]
    assert completions(ip, "%history_search retry --") == [
        "--checkpoint",
        "--limit",
        "--cursor",
        "--all",
    ]


def test_tab_completes_checkpoint_ids(ip: InteractiveShell) -> None:
    path = compacted_demo(sessions_dir() / "demo.jsonl", minute=0)
    run(ip, f"%dashr attach {path}")
    ids = [cp.id for cp in controller(ip).checkpoints()]
    assert completions(ip, "%history_read ") == [*ids, "--seq", "--turn", "--cursor"]
    assert completions(ip, "%history_read c1") == [i for i in ids if i.startswith("c1")]
    assert completions(ip, "%history_search retry --checkpoint ") == ids


def test_tab_completes_pin_ids_and_leaves_pin_text_alone(ip: InteractiveShell) -> None:
    d = controller(ip)
    first, second = d.pin("Never push to main"), d.pin("Run the tests with -x")
    assert completions(ip, "%dashr pi") == ["pin", "pins"]
    assert completions(ip, "%dashr unpin ") == [first.id, second.id]
    assert completions(ip, f"%dashr unpin {second.id[:-1]}") == [
        p.id for p in (first, second) if p.id.startswith(second.id[:-1])
    ]
    assert not {first.id, second.id} & set(completions(ip, "%dashr pin "))
    assert not {first.id, second.id} & set(completions(ip, f"%dashr unpin {first.id} "))


def test_tab_completion_steps_aside_where_it_has_nothing_to_list(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = compacted_demo(sessions_dir() / "demo.jsonl", minute=0)
    run(ip, f"%dashr attach {path}")
    ids = {cp.id for cp in controller(ip).checkpoints()}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "snapshot.pkl").write_text("")
    assert "snapshot.pkl" in completions(ip, "%dashr export sn")  # IPython's file completion
    for code in ("%history_read --seq ", "%history_read c39 ", "%history_search "):
        assert not ids & set(completions(ip, code)), code


def test_the_completion_tables_match_the_magics_parsers() -> None:
    for name, options in MAGIC_OPTIONS.items():
        method = getattr(Dashr, name.lstrip("%"))
        flags = {s for a in method.parser._actions for s in a.option_strings} - {"-h", "--help"}
        assert set(options) == flags, name


def test_unload_removes_the_completer(ip: InteractiveShell) -> None:
    ids = [getattr(m, "matcher_identifier", None) for m in ip.Completer.custom_matchers]
    assert ids.count(MATCHER_ID) == 1
    run(ip, "%reload_ext dashr_ext")
    ids = [getattr(m, "matcher_identifier", None) for m in ip.Completer.custom_matchers]
    assert ids.count(MATCHER_ID) == 1
    dashr_ext.unload_ipython_extension(ip)
    assert all(
        getattr(m, "matcher_identifier", None) != MATCHER_ID for m in ip.Completer.custom_matchers
    )
    assert "sessions" not in completions(ip, "%dashr ")


# --------------------------------------------------------------------------- %config Dashr


def test_config_help_says_what_the_options_are_and_groups_them(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    run(ip, "%config Dashr")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Dashr options: the settings of dashr_ext (context compaction and recall)"
    assert "Dashr(Magics)" not in out
    assert "    %config Dashr.NAME = VALUE" in lines and "    c.Dashr.NAME = VALUE" in lines
    headings = [lines[i - 1] for i, line in enumerate(lines) if set(line) == {"="} and i > 1]
    assert headings == [
        "Compaction: when a pass runs and what it keeps (CompactionConfig)",
        "Recall: what history_outline, history_read and history_search return",
        "Summarizer: who writes the checkpoints' summaries",
        "Agent: the model %%agent talks to",
        "Bridge: the dashr comm a harness outside the kernel drives",
        "Session files: where %load_ext starts or attaches its session",
    ]
    starts = [lines.index(h) for h in headings] + [len(lines)]
    for (_name, _summary, names), start, end in zip(
        OPTION_GROUPS, starts, starts[1:], strict=False
    ):
        section = lines[start:end]
        listed = [
            line.split("=")[0][len("Dashr.") :] for line in section if line.startswith("Dashr.")
        ]
        assert listed == list(names)
    assert sum(len(names) for _n, _s, names in OPTION_GROUPS) == len(
        Dashr.class_traits(config=True)
    )
    assert "    Current: 'summary'" in lines
