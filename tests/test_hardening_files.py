"""Files that are not what they seem: NULs in searched text, special files, huge junk files.

* ``dashr search --all`` finds exactly what each session's own ``history_search`` finds,
  whatever characters the text holds (a NUL ends what SQLite's FTS5 reads of a text);
* every ``dashr`` command reads only a regular file and says what else it was given (a FIFO
  blocks a reader, ``/dev/zero`` never ends, a directory is no missing file);
* the cross-session index reads a bounded part of a file that cannot be a session log, and
  names every ``*.jsonl`` entry it could not read instead of leaving it out unsaid.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashr_ext import RecallConfig
from dashr_ext._cli import main
from dashr_ext._controller import Dashr
from dashr_ext._recall import index as index_module
from dashr_ext._recall import index_units
from dashr_ext._recall.index import find_all, search_all
from dashr_ext._recall.index_hits import SKIPPED_SHOWN

BIG = RecallConfig(search_max_hits=200, read_max_chars=1_000_000)
FIND_PRINT0 = "./src/a.txt\x00./src/b.txt\x00./tests/needle.py\x00./tests/other.py\x00"


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHR_HOME", str(tmp_path / "home"))


def record(path: Path, texts: list[str]) -> Path:
    """A session of alternating user and assistant messages with ``texts``, a closed turn."""
    with Dashr.create(path) as d:
        for i, text in enumerate(texts):
            d.record_openai({"role": "user" if i % 2 == 0 else "assistant", "content": text})
        if len(texts) % 2:
            d.record_openai({"role": "assistant", "content": "done"})
    return path


def own_seqs(path: Path, query: str) -> list[int]:
    """The seqs of the session's own ``history_search`` hits (opened read-only, its first
    search is the scan of its file)."""
    with Dashr.open(path, read_only=True, recall=BIG) as d:
        return hit_seqs(str(d.history_search(query)))


def hit_seqs(text: str) -> list[int]:
    return sorted(int(s) for s in re.findall(r"^\d+\. seq (\d+) \|", text, flags=re.M))


def all_seqs(directory: Path, query: str) -> dict[str, list[int]]:
    """The seqs of ``search --all`` hits, per session file name."""
    text = str(search_all(directory, query, config=BIG))
    found: dict[str, list[int]] = {}
    for name, seq in re.findall(r"^\d+\. session (\S+) \| seq (\d+) \|", text, flags=re.M):
        found.setdefault(name, []).append(int(seq))
    return {name: sorted(seqs) for name, seqs in found.items()}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- NULs and the index


def test_find_print0_output_is_found_across_sessions_as_in_its_own_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = record(tmp_path / "s" / "print0.jsonl", ["list the files", FIND_PRINT0])
    for query in ("needle.py", "b.txt", "other.py", "txt\x00./src"):
        assert own_seqs(path, query) == [4], query
        assert all_seqs(path.parent, query) == {"print0.jsonl": [4]}, query
    code, out, _ = run_cli(capsys, "search", "--all", str(path.parent), "needle.py")
    assert code == 0 and "1. session print0.jsonl | seq 4 |" in out


def test_a_nul_in_the_query_is_a_phrase_to_look_up_not_an_sqlite_error(tmp_path: Path) -> None:
    path = record(tmp_path / "s" / "print0.jsonl", ["list the files", FIND_PRINT0])
    for query in ("txt\x00./src/b", "\x00", "py\x00"):
        assert own_seqs(path, query) == [4], query
        assert all_seqs(path.parent, query) == {"print0.jsonl": [4]}, query
    assert own_seqs(path, "\x00\x00") == [] and all_seqs(path.parent, "\x00\x00") == {}


def test_the_placeholder_for_a_nul_is_never_taken_for_one(tmp_path: Path) -> None:
    placeholder = index_units.PLACEHOLDER
    path = record(tmp_path / "s" / "s.jsonl", [f"one{placeholder}two", "three\x00four"])
    assert all_seqs(path.parent, "one\x00two") == {}
    assert all_seqs(path.parent, f"three{placeholder}four") == {}
    assert all_seqs(path.parent, f"one{placeholder}two") == {"s.jsonl": [2]}
    assert all_seqs(path.parent, "three\x00four") == {"s.jsonl": [4]}


def test_a_lone_surrogate_escaped_in_a_log_is_indexed_and_found(tmp_path: Path) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["hello MARKER there"])
    path.write_text(path.read_text().replace("MARKER", "needle \\ud800 bytes"))
    assert own_seqs(path, "needle \ud800 bytes") == [2]
    assert all_seqs(path.parent, "needle \ud800 bytes") == {"s.jsonl": [2]}
    assert all_seqs(path.parent, "needle") == {"s.jsonl": [2]}


def test_a_backspace_is_found_by_the_scan_of_the_file_as_by_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # JSON writes U+0008 as the escape \b: no byte of the line is the character itself
    path = record(tmp_path / "s" / "s.jsonl", ["typed a\x08\x08b", "\x08"])
    with Dashr.open(path, recall=BIG) as live:
        assert hit_seqs(str(live.history_search("\x08"))) == [2, 4]
    assert own_seqs(path, "\x08") == [2, 4]  # the scan of the file
    assert all_seqs(path.parent, "\x08") == {"s.jsonl": [2, 4]}
    code, out, _ = run_cli(capsys, "search", str(path), "\x08\x08")
    assert code == 0 and hit_seqs(out) == [2]


_ALPHABET = st.one_of(  # the characters a JSON line escapes or FTS5 mishandles, and others
    st.characters(max_codepoint=0x20),  # NUL, the other control characters, space
    st.sampled_from(["\x7f", "\x85", "\u2028", "\ufffd", '"', "\\", "\u0301"]),
    st.sampled_from(["a", "b", "B", "e", "ß", "é", "ﬁ", "日"]),
)
_TEXTS = st.lists(st.text(_ALPHABET, min_size=1, max_size=12), min_size=1, max_size=4)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=_TEXTS, data=st.data())
def test_search_all_finds_what_the_sessions_own_search_finds_whatever_the_characters(
    texts: list[str], data: st.DataObject
) -> None:
    text = data.draw(st.sampled_from(texts), label="text")
    start = data.draw(st.integers(0, len(text) - 1), label="start")
    stop = data.draw(st.integers(start + 1, len(text)), label="stop")
    query = text[start:stop]
    with tempfile.TemporaryDirectory() as tmp:
        path = record(Path(tmp) / "drawn.jsonl", texts)
        try:
            own = own_seqs(path, query)
        except ValueError:  # a phrase history_search refuses (only whitespace)
            with pytest.raises(ValueError):
                all_seqs(path.parent, query)
            return
        assert all_seqs(path.parent, query) == ({"drawn.jsonl": own} if own else {})
        with Dashr.open(path, recall=BIG) as live:  # a writer searches its in-memory index
            assert hit_seqs(str(live.history_search(query))) == own


# --------------------------------------------------------------------------- special files


_ONE_CALL = (
    "import resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    "from dashr_ext._cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)
"""One ``dashr`` command in a child process, its memory bounded (``/dev/zero`` read whole
would take all there is)."""


def run_child(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command in a subprocess, killed after 20 s (a read that blocks fails the test)."""
    env = {**os.environ, "DASHR_HOME": str(cwd / "home")}
    return subprocess.run(
        [sys.executable, "-c", _ONE_CALL, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


@pytest.fixture
def special(tmp_path: Path) -> Path:
    """``fifo``, ``fifo-link`` and ``zero-link`` (to ``/dev/zero``) and a directory ``adir``."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fifo-link").symlink_to(tmp_path / "fifo")
    (tmp_path / "zero-link").symlink_to("/dev/zero")
    (tmp_path / "adir").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (("search", "fifo", "needle"), "is a FIFO (named pipe), not a regular file"),
        (("search", "/dev/zero", "needle"), "is a character device, not a regular file"),
        (("search", "fifo-link", "needle"), "is a symbolic link to a FIFO (named pipe)"),
        (("search", "zero-link", "needle"), "is a symbolic link to a character device"),
        (("inspect", "fifo"), "is a FIFO (named pipe)"),
        (("outline", "zero-link"), "is a symbolic link to a character device"),
        (("read", "fifo", "--seq", "0"), "is a FIFO (named pipe)"),
        (("compact", "fifo"), "is a FIFO (named pipe)"),
        (("import", "fifo"), "is a FIFO (named pipe)"),
        (("import", "/dev/zero"), "is a character device"),
        (("import", "zero-link"), "is a symbolic link to a character device"),
    ],
)
def test_a_command_given_a_fifo_or_a_device_says_so_instead_of_reading_it(
    special: Path, argv: tuple[str, ...], kind: str
) -> None:
    proc = run_child(special, *argv)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"dashr {argv[0]}: {argv[1]}: {kind}")
    accepted = "import reads OpenAI chat messages" if argv[0] == "import" else "a session file"
    assert accepted in proc.stderr


@pytest.mark.parametrize(
    ("argv", "accepted"),
    [
        (("inspect", "adir"), "give a session file (.jsonl)"),
        (("read", "adir", "c1"), "give a session file (.jsonl)"),
        (("search", "adir", "needle"), "dashr search --all DIR QUERY searches every session"),
        (("import", "adir"), "import reads OpenAI chat messages: a JSON list of messages"),
    ],
)
def test_a_command_given_a_directory_says_it_is_one_and_what_it_takes(
    special: Path,
    argv: tuple[str, ...],
    accepted: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(special)
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (1, "")
    assert err.startswith(f"dashr {argv[0]}: adir: is a directory, not a regular file; ")
    assert accepted in err and err.count("\n") == 1
    assert "no such file" not in err and "Errno" not in err


def test_import_of_a_session_log_says_it_is_one_and_what_import_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = record(tmp_path / "demo.jsonl", ["hello", "hi"])
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_cli(capsys, "import", str(log), "-o", str(tmp_path / "out.jsonl"))
    assert (code, out) == (1, "")
    assert "a dashr session log already" in err and "Extra data" not in err
    assert 'a JSON list of messages, {"messages": [...], "tools": [...]}, or JSON Lines' in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_import_reads_json_lines_of_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "where is the retry budget?"},
        {"role": "assistant", "content": "in config/settings.toml"},
    ]
    source = tmp_path / "chat.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in messages))
    out_file = tmp_path / "session.jsonl"
    code, out, _ = run_cli(capsys, "import", str(source), "-o", str(out_file))
    assert code == 0 and out.endswith("from 2 messages\n")
    assert len(own_seqs(out_file, "where is the retry budget?")) == 1
    assert len(own_seqs(out_file, "in config/settings.toml")) == 1
    source.write_text(json.dumps(messages[0]) + '\n{"content": "no role"}\n')
    code, _, err = run_cli(capsys, "import", str(source), "-o", str(tmp_path / "other.jsonl"))
    assert code == 1 and f"{source} line 2: an object without a role, not a message" in err
    assert not (tmp_path / "other.jsonl").exists()


# --------------------------------------------------------------------------- the index's files


def test_a_huge_unterminated_file_is_skipped_named_and_read_only_at_its_head(
    tmp_path: Path,
) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    junk = path.parent / "junk.jsonl"
    junk.write_bytes(b"x" * (4 << 20))  # no newline at all
    found = find_all(path.parent, "retry budget")
    assert found.matched == {"s.jsonl": [2]}
    assert 0 < found.stats.read["junk.jsonl"] <= 1 << 20  # its head, not its 4 MiB
    text = str(search_all(path.parent, "retry budget"))
    assert "skipped junk.jsonl: line 1: not a session file: no session header in its first" in text


def test_a_session_with_a_line_longer_than_the_bound_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_units, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(index_module, "READ_CHUNK", 256 << 10)
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    long_line = len(path.read_bytes().splitlines()) + 1
    with path.open("ab") as fh:
        fh.write(b'{"seq":5,"type":"user/message","time":0,"data":"' + b"x" * (3 << 20))
    found = find_all(path.parent, "retry budget")
    assert found.matched == {}
    assert found.stats.read["s.jsonl"] <= (1 << 20) + 2 * (256 << 10)  # not its 3 MiB
    text = str(search_all(path.parent, "retry budget"))
    assert f"skipped s.jsonl: line {long_line}: longer than 1 MiB without a newline" in text


def refuse_opening(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``os.open`` of ``path`` fails as for a file without read permission."""
    real_open = os.open

    def refuse(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.abspath(name) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)


@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """Makes a file unreadable: by its mode, and as root (who reads any mode) by refusing
    ``os.access`` and ``os.open`` of it too; the mode is given back afterwards."""
    made: list[Path] = []

    def make(path: Path) -> None:
        path.chmod(0)
        made.append(path)
        if os.geteuid() == 0:
            real_access = os.access
            monkeypatch.setattr(
                os,
                "access",
                lambda name, mode, **kw: (
                    os.path.abspath(name) != str(path) and real_access(name, mode, **kw)
                ),
            )
            refuse_opening(monkeypatch, path)

    yield make
    for path in made:
        path.chmod(0o600)


def test_an_unreadable_file_is_skipped_and_named(
    tmp_path: Path, unreadable: Callable[[Path], None]
) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    secret = record(path.parent / "secret.jsonl", ["the retry budget, secretly"])
    assert find_all(path.parent, "retry budget").matched == {"s.jsonl": [2], "secret.jsonl": [2]}
    unreadable(secret)  # indexed before: it leaves the index
    found = find_all(path.parent, "retry budget")
    assert found.matched == {"s.jsonl": [2]}
    assert found.stats.skipped == {"secret.jsonl": "cannot be read (permission denied)"}
    text = str(search_all(path.parent, "retry budget"))
    assert "skipped secret.jsonl: cannot be read (permission denied)" in text


def test_a_listed_file_that_cannot_be_opened_is_skipped_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    other = record(path.parent / "other.jsonl", ["the retry budget again"])
    assert find_all(path.parent, "retry budget").matched == {"s.jsonl": [2], "other.jsonl": [2]}
    with other.open("a") as fh:
        fh.write("\n")  # changed: the next update opens it
    refuse_opening(monkeypatch, other)
    found = find_all(path.parent, "retry budget")
    assert found.matched == {"s.jsonl": [2]}
    assert found.stats.skipped == {"other.jsonl": "cannot be read (permission denied)"}
    assert [r.name for r in found.sessions] == ["s.jsonl"]


def test_a_symlink_loop_and_a_fifo_in_the_directory_are_named_and_the_rest_searched(
    tmp_path: Path,
) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    (path.parent / "a.jsonl").symlink_to("b.jsonl")
    (path.parent / "b.jsonl").symlink_to("a.jsonl")
    os.mkfifo(path.parent / "pipe.jsonl")
    (path.parent / "gone.jsonl").symlink_to("nowhere.jsonl")
    text = str(search_all(path.parent, "retry budget"))
    assert "1. session s.jsonl | seq 2 |" in text
    assert "skipped a.jsonl: a symbolic link loop" in text
    assert "skipped b.jsonl: a symbolic link loop" in text
    assert "skipped pipe.jsonl: a FIFO (named pipe), not a regular file" in text
    assert "skipped gone.jsonl: a symbolic link to nothing" in text


def test_many_skipped_files_share_one_line_past_the_first_ones(tmp_path: Path) -> None:
    path = record(tmp_path / "s" / "s.jsonl", ["the retry budget"])
    for i in range(14):
        (path.parent / f"notes{i:02}.jsonl").write_text('{"hello": "world"}\n')
    lines = str(search_all(path.parent, "retry budget")).split("\n")
    skipped = [line for line in lines if line.startswith("skipped ")]
    assert len(skipped) == SKIPPED_SHOWN
    assert skipped[-1].startswith("skipped 5 more files: ")
