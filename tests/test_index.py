"""Search across sessions: the SQLite FTS5 index of a directory's session logs.

The index must find exactly what each session's own ``history_search`` finds (same seqs, same
owners, same snippets), follow the logs incrementally (only appended bytes are read), and be
disposable: a missing, corrupt or foreign index file is rebuilt from the logs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import corpus_files, load_corpus
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import dashr_ext
from dashr_ext import CompactionConfig, RecallConfig
from dashr_ext._cli import main
from dashr_ext._controller import Dashr
from dashr_ext._demo import demo_messages
from dashr_ext._recall import index as index_module
from dashr_ext._recall.index import INDEX_FILE, SessionIndex, find_all, search_all
from dashr_ext._recall.index_units import fts_query, plan_update
from dashr_ext.errors import SearchIndexError

BIG = RecallConfig(search_max_hits=200, read_max_chars=1_000_000)
QUERIES = (
    "retry budget",
    "RETRY BUDGET",
    "Retry",
    "e",  # one character: no trigram, the stored text is scanned
    "fi",
    "zz",
    "[tool call]",
    "AssertionError: expected",
    "def ",
    "straße",
    "STRASSE",
    "ﬁle",  # the ligature finds "file" (NFKC)
    "cafe\u0301",  # decomposed é finds the composed one
    "café",
    "日本語",
    "😀 ok",
    "seq",
    "the",
    "import",
    "nothing like this anywhere",
)


# --------------------------------------------------------------------------- sessions


def demo_session(path: Path) -> Path:
    """The demo session compacted under a 6000-token window: checkpoints and pruned originals."""
    config = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)
    with Dashr.create(path, config=config) as d:
        for message in demo_messages():
            if message["role"] == "assistant":
                d.request_messages()
            d.record_openai(message)
        assert d.checkpoints() and d.session.events  # compacted
        assert any(k.startswith("p") for k in d.archive)  # pruned originals
    return path


def unicode_session(path: Path) -> Path:
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "Die STRASSE heißt Straße; ein ﬁle im Café"})
        d.record_openai(
            {"role": "assistant", "content": "cafe\u0301 日本語のテキスト 😀 OK, retry"}
        )
        d.record_openai({"role": "user", "content": "e"})
        d.record_openai({"role": "assistant", "content": "done"})
    return path


def running_step_session(path: Path) -> Path:
    """A session whose last step is still running: its seqs are left out of search."""
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "find the retry budget"})
        d.record_openai(
            {
                "role": "assistant",
                "content": "looking for the retry budget now",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "grep", "arguments": '{"pattern": "retry budget"}'},
                    }
                ],
            }
        )
        assert d.session.executing_seqs()
    return path


def corpus_session(source: Path, path: Path) -> Path:
    data = load_corpus(source)
    config = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)
    with Dashr.create(path, config=config, summarizer="extractive", tools=data["tools"]) as d:
        for message in data["messages"]:
            d.record_openai(message)
            d.request_messages()
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session files built once: synthetic ones, plus a few corpus sessions when present."""
    home = tmp_path_factory.mktemp("index_home")
    old = os.environ.get("DASHR_HOME")
    os.environ["DASHR_HOME"] = str(home)
    try:
        d = tmp_path_factory.mktemp("sessions")
        demo_session(d / "demo.jsonl")
        unicode_session(d / "unicode.jsonl")
        running_step_session(d / "running.jsonl")
        with Dashr.create(d / "empty.jsonl"):
            pass
        files = corpus_files()
        picked = [p for p in files if "swe-gemini" in str(p)][:2]
        picked += [p for p in files if "openhands" in str(p)][:2]
        for source in picked:
            corpus_session(source, d / f"corpus-{source.stem}.jsonl")
    finally:
        if old is None:
            os.environ.pop("DASHR_HOME", None)
        else:
            os.environ["DASHR_HOME"] = old
    return d


@pytest.fixture
def sessions(built: Path, tmp_path: Path) -> Path:
    """A fresh copy of the built session files (a test may change them)."""
    d = tmp_path / "sessions"
    shutil.copytree(built, d)
    return d


def own_hits(path: Path, query: str) -> tuple[int, list[str]]:
    """``history_search`` of one session: matched count and the hit lines, numbers dropped."""
    with Dashr.open(path, read_only=True, recall=BIG) as d:
        text = str(d.history_search(query))
    matched = int(re.search(r", (\d+) matched, showing", text).group(1))  # type: ignore[union-attr]
    lines = text.split("\n")[1:-1]
    return matched, [re.sub(r"^\d+\. ", "", line) for line in lines if line[:1].isdigit()] + [
        line for line in lines if line.startswith("…")
    ]


def index_hits(found: index_module.Found, name: str) -> tuple[int, list[str]]:
    row = next(r for r in found.sessions if r.name == name)
    hits = found.hits(row, BIG) if name in found.matched else []
    metas = [re.sub(r"^\d+\. session \S+ \| ", "", h.lines(1)[0]) for h in hits]
    return len(hits), metas[:200] + [h.lines(1)[1] for h in hits[:200]]


# --------------------------------------------------------------------------- same hits


def test_the_index_finds_what_each_sessions_history_search_finds(sessions: Path) -> None:
    names = sorted(p.name for p in sessions.glob("*.jsonl"))
    assert len(names) >= 4
    for query in QUERIES:
        found = find_all(sessions, query)
        assert sorted(r.name for r in found.sessions) == names
        for name in names:
            assert index_hits(found, name) == own_hits(sessions / name, query), (query, name)
    # the cases that make attribution non-trivial were exercised
    found = find_all(sessions, "retry budget")
    owners = {h.hit.owner for h in found.hits(_row(found, "demo.jsonl"), BIG)}
    assert any(o.startswith("c") for o in owners) and any(o.startswith("p") for o in owners)
    assert found.matched["running.jsonl"] == [2, 4]  # the index holds the running step's
    assert [h.hit.seq for h in found.hits(_row(found, "running.jsonl"), BIG)] == [2]
    assert found.matched["running.jsonl"] == [2]  # ... its own search leaves it out


def _row(found: index_module.Found, name: str) -> index_module.SessionRow:
    return next(r for r in found.sessions if r.name == name)


@pytest.mark.parametrize("tokenizer", ["trigram-full", "unicode61"])
def test_every_index_kind_confirms_the_same_matches(
    sessions: Path, tmp_path: Path, tokenizer: str
) -> None:
    for query in QUERIES:
        trigram = find_all(sessions, query).matched
        other = find_all(sessions, query, index_path=tmp_path / "u.sqlite3", tokenizer=tokenizer)
        assert other.matched == trigram, query


def test_short_phrases_scan_and_longer_ones_narrow() -> None:
    assert fts_query("ab", "trigram") is None
    assert fts_query("abc", "trigram") == '"abc"'
    assert fts_query("abcab", "trigram") == '"abc" AND "bca" AND "cab"'  # each trigram once
    assert fts_query('say "hi"', "trigram-full") == '"say ""hi"""'
    long = fts_query("x" + "".join(chr(0x4E00 + i) for i in range(100)), "trigram")
    assert long is not None and long.count(" AND ") == 23 and long.startswith('"x')
    assert fts_query("retry budget", "unicode61") == '"budget"*'  # "retry" may be a word's tail
    assert fts_query(" x.y z", "unicode61") == '"x" AND "y" AND "z"*'
    assert fts_query("word", "unicode61") is None


def test_the_rendered_result_names_session_seq_and_checkpoint(sessions: Path) -> None:
    result = search_all(sessions, "retry budget", limit=3)
    lines = str(result).split("\n")
    assert re.fullmatch(
        r'history_search "retry budget" in \d+ sessions — \d+ events scanned, \d+ matched in '
        r"\d+ sessions, showing 3",
        lines[0],
    )
    assert re.fullmatch(r"1\. session \S+\.jsonl \| seq \d+ \| \w+ \| \S+ \| .*Z", lines[1])
    assert "more matches than shown: narrow with a longer phrase, --limit up to 20" in str(result)
    assert lines[-1].endswith("truncated true")
    assert result._repr_html_().count("<mark>") == 3
    # newest session first: the one written last comes first
    os.utime(sessions / "unicode.jsonl", ns=(2**62, 2**62))
    assert (
        str(search_all(sessions, "retry"))
        .split("\n")[1]
        .startswith("1. session unicode.jsonl | seq 4 | visible | (visible)")
    )
    zero = str(search_all(sessions, "nothing like this anywhere"))
    assert "0 matched in 0 sessions, showing 0\nno matches in" in zero


def test_a_session_whose_hits_are_not_shown_is_not_opened(
    sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real = index_module.Found.hits

    def counting(self: index_module.Found, row: index_module.SessionRow, config: RecallConfig):  # type: ignore[no-untyped-def]
        opened.append(row.name)
        return real(self, row, config)

    monkeypatch.setattr(index_module.Found, "hits", counting)
    os.utime(sessions / "demo.jsonl", ns=(2**62, 2**62))
    assert "showing 1" in str(search_all(sessions, "retry budget", limit=1))
    assert opened == ["demo.jsonl"]


# --------------------------------------------------------------------------- incremental


def test_an_appended_event_is_found_after_reading_only_the_new_bytes(sessions: Path) -> None:
    first = find_all(sessions, "zebra crossing 42")
    assert first.stats.rebuilt and set(first.stats.read) == {
        p.name for p in sessions.glob("*.jsonl")
    }
    assert first.matched == {}
    path = sessions / "demo.jsonl"
    before = path.stat().st_size
    with Dashr.open(path) as d:
        d.record_openai({"role": "user", "content": "Is the Zebra  crossing 42 done?"})
    grown = path.stat().st_size - before
    found = find_all(sessions, "zebra crossing 42")
    assert found.stats.read == {"demo.jsonl": grown}  # nothing else was read
    assert found.stats.checked <= 2 * 4096 and not found.stats.reindexed
    assert not found.stats.rebuilt
    seq = found.matched["demo.jsonl"][0]
    assert index_hits(found, "demo.jsonl") == own_hits(path, "zebra crossing 42")
    assert found.hits(_row(found, "demo.jsonl"), BIG)[0].hit.seq == seq
    again = find_all(sessions, "zebra crossing 42")
    assert again.stats.read == {} and again.stats.checked == 0  # unchanged files: not opened


def test_a_torn_last_line_is_indexed_once_it_is_complete(sessions: Path) -> None:
    path = sessions / "unicode.jsonl"
    line = (
        '{"seq":5,"type":"user/message","time":1764460000000,"surfaceOp":"append","data":'
        '{"message":{"id":"m5","role":"user","source":{"kind":"user"},'
        '"content":[{"type":"text","text":"half written okapi"}]}}}\n'
    )
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line[:40])
    assert find_all(sessions, "okapi").matched == {}
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line[40:])
    found = find_all(sessions, "okapi")
    assert found.matched == {"unicode.jsonl": [5]}
    assert found.stats.read == {"unicode.jsonl": len(line) - 40 + 40}  # from the line's start


def test_a_replaced_session_file_is_indexed_again(sessions: Path) -> None:
    find_all(sessions, "x")
    # another file renamed over it: another inode
    shutil.copy(sessions / "running.jsonl", sessions / "other")
    os.replace(sessions / "other", sessions / "unicode.jsonl")
    found = find_all(sessions, "retry budget")
    assert found.stats.reindexed == ["unicode.jsonl"]
    assert "unicode.jsonl" not in find_all(sessions, "straße").matched
    assert index_hits(found, "unicode.jsonl") == own_hits(
        sessions / "unicode.jsonl", "retry budget"
    )


def test_a_file_rewritten_in_place_is_indexed_again(sessions: Path) -> None:
    find_all(sessions, "x")
    path = sessions / "running.jsonl"
    ino = path.stat().st_ino
    data = (sessions / "demo.jsonl").read_bytes()
    with path.open("r+b") as fh:  # same inode, larger, other bytes
        fh.write(data)
    assert path.stat().st_ino == ino
    found = find_all(sessions, "retry budget")
    assert found.stats.reindexed == ["running.jsonl"]
    assert index_hits(found, "running.jsonl") == own_hits(path, "retry budget")
    # shrunk: indexed again too
    with Dashr.create(sessions / "small.jsonl") as d:
        d.record_openai({"role": "user", "content": "tiny"})
    path.write_bytes((sessions / "small.jsonl").read_bytes())
    found = find_all(sessions, "tiny")
    assert "running.jsonl" in found.stats.reindexed
    assert found.matched == {"running.jsonl": [2], "small.jsonl": [2]}


def test_a_removed_session_leaves_the_index(sessions: Path) -> None:
    find_all(sessions, "x")
    (sessions / "unicode.jsonl").unlink()
    found = find_all(sessions, "straße")
    assert found.stats.removed == ["unicode.jsonl"] and found.matched == {}


def test_files_that_are_not_searchable_sessions_are_named(sessions: Path) -> None:
    (sessions / "notes.jsonl").write_text('{"hello": "world"}\n')
    lines = (sessions / "unicode.jsonl").read_text(encoding="utf-8").split("\n")
    lines[2] = "{not json"
    (sessions / "unicode.jsonl").write_text("\n".join(lines), encoding="utf-8")
    text = str(search_all(sessions, "retry budget"))
    assert "skipped notes.jsonl: line 1: " in text
    assert "skipped unicode.jsonl: line 3: not a JSON object" in text
    assert "session unicode.jsonl" not in text and "session demo.jsonl" in text


# --------------------------------------------------------------------------- disposable


def _same_results(sessions: Path) -> dict[str, dict[str, list[int]]]:
    return {q: find_all(sessions, q).matched for q in ("retry budget", "e", "straße", "the")}


@pytest.mark.parametrize("damage", ["garbage", "truncated", "schema", "foreign", "deleted"])
def test_a_missing_or_damaged_index_is_rebuilt_from_the_logs(sessions: Path, damage: str) -> None:
    expected = _same_results(sessions)
    index = sessions / INDEX_FILE
    assert index.is_file()
    if damage == "garbage":
        index.write_bytes(os.urandom(8192))
    elif damage == "truncated":
        data = index.read_bytes()
        index.write_bytes(data[: len(data) // 3])
    elif damage == "schema":
        con = sqlite3.connect(index)
        con.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
        con.commit()
        con.close()
    elif damage == "foreign":
        index.unlink()
        con = sqlite3.connect(index)
        con.execute("CREATE TABLE notes(x)")
        con.commit()
        con.close()
    else:
        index.unlink()
    found = find_all(sessions, "retry budget")
    assert found.stats.rebuilt
    assert set(found.stats.read) == {p.name for p in sessions.glob("*.jsonl")}
    assert _same_results(sessions) == expected
    assert not find_all(sessions, "x").stats.rebuilt  # the new file is used from then on


def test_an_unwritable_directory_searches_with_an_index_in_memory(
    sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = find_all(sessions, "retry budget").matched
    (sessions / INDEX_FILE).unlink()

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "read-only directory")

    monkeypatch.setattr(index_module.os, "replace", refuse)
    with SessionIndex(sessions) as index:
        index.update()
        assert index.in_memory and index.candidates("retry budget") == expected
    assert not (sessions / INDEX_FILE).exists()


def test_sqlite_without_fts5_is_a_clear_typed_error(
    sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "_FTS_MODULE", "fts5_missing")
    with pytest.raises(SearchIndexError, match=r"needs SQLite's FTS5 with its trigram tokenizer"):
        find_all(sessions, "retry")
    assert main(["search", "--all", str(sessions), "retry"]) == 1


def test_concurrent_searches_share_one_index(sessions: Path) -> None:
    expected = {q: find_all(sessions, q).matched for q in ("retry budget", "straße")}
    (sessions / INDEX_FILE).unlink()
    results: list[dict[str, list[int]]] = []
    errors: list[BaseException] = []

    def search(query: str) -> None:
        try:
            results.append(find_all(sessions, query).matched)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(q,)) for q in ["retry budget", "straße"] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(map(str, results)) == sorted(map(str, [*expected.values()] * 3))


def test_processes_building_the_index_at_once_agree(sessions: Path) -> None:
    expected = find_all(sessions, "retry budget").matched
    (sessions / INDEX_FILE).unlink()
    code = (
        "import sys, json; from pathlib import Path; "
        "from dashr_ext._recall.index import find_all; "
        "print(json.dumps(find_all(Path(sys.argv[1]), 'retry budget').matched))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(dashr_ext.__file__).parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(sessions)], stdout=subprocess.PIPE, env=env
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert all(json.loads(out) == expected for out in outputs)
    assert not find_all(sessions, "retry budget").stats.rebuilt


def test_an_index_another_process_is_writing_is_waited_for_not_replaced(
    sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_all(sessions, "x")
    index = sessions / INDEX_FILE
    ino = index.stat().st_ino
    monkeypatch.setattr(index_module, "BUSY_SECONDS", 0.05)
    writer = sqlite3.connect(index, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(SearchIndexError, match=r"is busy: another process has been writing"):
            find_all(sessions, "retry budget")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert index.stat().st_ino == ino  # not rebuilt under the writer's feet
    assert not find_all(sessions, "retry budget").stats.rebuilt


def test_the_update_plan_follows_the_file() -> None:
    from dashr_ext._recall.index_units import Recorded, Stat

    seen = Stat(1, 2, 100, 5)
    recorded = Recorded(seen, 90)
    assert plan_update(None, seen) == "reindex"
    assert plan_update(recorded, seen) == "skip"
    assert plan_update(recorded, Stat(1, 2, 150, 6)) == "append"
    assert plan_update(recorded, Stat(1, 2, 95, 6)) == "append"  # still past what was indexed
    assert plan_update(recorded, Stat(1, 2, 80, 6)) == "reindex"  # shrank
    assert plan_update(recorded, Stat(1, 3, 150, 6)) == "reindex"  # another file


# --------------------------------------------------------------------------- the CLI


def test_cli_search_all_names_sessions(
    sessions: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["search", "--all", str(sessions), "retry budget", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "showing 2" in out and re.search(r"^1\. session \S+ \| seq \d+ \| ", out, re.M)
    assert out == str(search_all(sessions, "retry budget", limit=2)) + "\n"
    # DIR defaults to $DASHR_HOME/sessions
    home = sessions.parent / "home"
    shutil.copytree(sessions, home / "sessions")
    monkeypatch.setenv("DASHR_HOME", str(home))
    assert main(["search", "--all", "straße"]) == 0
    assert "1. session unicode.jsonl | seq 2 | visible" in capsys.readouterr().out


def test_cli_search_all_errors_name_flags(
    sessions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["search", "--all", str(sessions), "x", "--checkpoint", "c4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dashr search: error: --checkpoint names a checkpoint of one session")
    assert main(["search", "--all", str(sessions / "nowhere"), "x"]) == 1
    assert "nowhere: not a directory; --all searches every session file in DIR" in (
        capsys.readouterr().err
    )
    assert main(["search", "--all", str(sessions), "  "]) == 1
    assert "query: expected a non-empty phrase" in capsys.readouterr().err
    assert main(["search", str(sessions / "demo.jsonl")]) == 2
    assert "give FILE and QUERY, or --all [DIR] QUERY" in capsys.readouterr().err


def test_cli_search_all_without_a_session_directory_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DASHR_HOME", str(tmp_path / "home"))
    assert main(["search", "--all", "retry"]) == 1
    err = capsys.readouterr().err
    assert "sessions: no session directory yet" in err
    assert "dashr search --all DIR QUERY" in err
    assert not (tmp_path / "home").exists()  # a search creates nothing


# --------------------------------------------------------------------------- the magic


@pytest.fixture
def shell(sessions: Path, tmp_path: Path) -> Iterator[InteractiveShell]:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.Dashr.session_dir = str(sessions)
    config.Dashr.session_path = str(tmp_path / "this-kernel.jsonl")
    ip = InteractiveShell(config=config)
    ip.run_cell("%load_ext dashr_ext").raise_error()
    yield ip
    dashr_ext.unload_ipython_extension(ip)


def test_history_search_all_magic_searches_the_session_directory(
    shell: InteractiveShell, sessions: Path
) -> None:
    result = shell.run_cell("%history_search --all 'retry budget' --limit 3")
    result.raise_error()
    assert str(result.result) == str(search_all(sessions, "retry budget", limit=3))
    assert "<mark>" in result.result._repr_html_() and "session " in result.result._repr_html_()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "%history_search --all x --checkpoint c4",
            "%history_search --all: --checkpoint names a checkpoint of one session",
        ),
        ("%history_search --all x --limit 0", "--limit: expected an integer in [1, 20], got 0"),
    ],
)
def test_history_search_all_magic_errors_in_magic_syntax(
    shell: InteractiveShell, line: str, message: str
) -> None:
    result = shell.run_cell(line)
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec).startswith(message)
