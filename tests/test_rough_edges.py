"""What a new user meets first: hints that run as typed, one-line errors, plain numbers and
words, and a search that pages on past its first hits."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import ScriptedSummarizer, needle_session, record_steps
from helpers import run_cell as run
from inprocess import cli
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._checkpoints import clipped
from dashr_ext._cliparse import command_name
from dashr_ext._demo import DEMO_TOOLS, SCRIPTED_NOTE, demo_messages
from dashr_ext._recall import cold
from dashr_ext._recall.hits import Paging
from dashr_ext._recall.outline import checkpoint_row, render_outline, turn_row
from dashr_ext._recall.render import event_body, one_line
from dashr_ext._recall.search import normalize
from dashr_ext.errors import RecallError

ROOT = Path(__file__).resolve().parents[1]
HIT = re.compile(r"^(\d+)\. seq (\d+) \|", re.M)
PYTHON_CALL = re.compile(r"history_\w+\(|\w+=\"")
"""A hint in Python syntax: ``history_read(...)``, ``checkpoint="c39"``."""


def holding(d: Dashr, phrase: str) -> set[int]:
    """The seqs of the message events whose text holds ``phrase`` (found without recall)."""
    return {
        e.seq
        for e in d.session.events
        if e.is_surface and normalize(phrase) in normalize(event_body(e, decoded=True))
    }


def page_through(search: Callable[[str | None], str], cursor: re.Pattern[str]) -> list[str]:
    """Every page of a search: the first, then the one each page's ``cursor`` names."""
    pages = [search(None)]
    while (found := cursor.search(pages[-1])) is not None:
        assert len(pages) < 20, "the cursor does not move on"
        pages.append(search(found.group(1)))
    return pages


def seqs_of(pages: list[str]) -> list[int]:
    return [int(seq) for page in pages for _number, seq in HIT.findall(page)]


# --------------------------------------------------------------------------- search pages


def test_search_pages_through_65_matches_with_the_cursor_none_repeated_none_missed(
    tmp_path: Path,
) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        expected = holding(d, "needle")
        assert len(expected) == 65
        pages = page_through(
            lambda cursor: str(d.history_search("needle", cursor=cursor)),
            re.compile(r'cursor="(h\d+)"'),
        )
    assert [len(HIT.findall(p)) for p in pages] == [20, 20, 20, 5]
    shown = seqs_of(pages)
    assert len(shown) == len(set(shown)) == 65 and set(shown) == expected
    numbers = [int(n) for page in pages for n, _seq in HIT.findall(page)]
    assert numbers == list(range(1, 66))  # numbered on from page to page
    assert all(
        p.split("\n")[0].endswith("65 matched, showing " + str(n))
        for p, n in zip(pages, [20, 20, 20, 5], strict=True)
    )
    assert [p.rsplit("\n", 1)[1] for p in pages] == [
        *["scanned 140, matched 65, truncated true"] * 3,
        "scanned 140, matched 65, truncated false",
    ]


def test_paging_goes_on_from_the_originals_to_the_checkpoint_summaries(tmp_path: Path) -> None:
    config = CompactionConfig(recency_window_tokens=3000, retain_tokens=400)
    with needle_session(tmp_path / "s.jsonl", config) as d:
        summaries = {c.node_seq for c in d.checkpoints()}
        expected = holding(d, "needle")
        assert summaries & expected and len(expected) > 65  # summaries quote the needles
        pages = page_through(
            lambda cursor: str(d.history_search("needle", limit=7, cursor=cursor)),
            re.compile(r'cursor="(h\d+)"'),
        )
    shown = seqs_of(pages)
    assert len(shown) == len(set(shown)) and set(shown) == expected
    originals = [s for s in shown if s not in summaries]
    assert shown == sorted(originals) + sorted(summaries & expected)  # originals first


def test_a_page_read_after_more_was_recorded_repeats_and_skips_nothing(tmp_path: Path) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        first = str(d.history_search("needle"))
        token = re.search(r'cursor="(h\d+)"', first).group(1)  # type: ignore[union-attr]
        d.record_openai({"role": "user", "content": "One more needle, please."})
        rest = page_through(
            lambda cursor: str(d.history_search("needle", cursor=cursor or token)),
            re.compile(r'cursor="(h\d+)"'),
        )
        shown = seqs_of([first, *rest])
        assert len(shown) == len(set(shown)) and set(shown) == holding(d, "needle")


def test_the_model_the_magic_and_the_cli_page_with_a_cursor_too(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shells: list[InteractiveShell],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "s.jsonl"
    needle_session(path).close()
    with Dashr.open(path, read_only=True) as d:
        expected = holding(d, "needle")
        tool = page_through(
            lambda cursor: d.call_tool(
                "history_search", json.dumps({"query": "needle", "cursor": cursor})
            ),
            re.compile(r'cursor="(h\d+)"'),
        )
    assert set(seqs_of(tool)) == expected and len(seqs_of(tool)) == 65

    def by_cli(cursor: str | None) -> str:
        code, out, err = cli(
            capsys, "search", str(path), "needle", *(["--cursor", cursor] if cursor else [])
        )
        assert (code, err) == (0, "")
        return out

    next_page = re.compile(r"page on with --cursor (h\d+)")
    pages = page_through(by_cli, next_page)
    assert seqs_of(pages) == seqs_of(tool)
    monkeypatch.setattr(cold, "ENABLED", False)  # a replay gives the same pages as the scan
    assert page_through(by_cli, next_page) == pages

    ip = InteractiveShell(config=Config({"HistoryManager": {"hist_file": ":memory:"}}))
    shells.append(ip)
    run(ip, "%load_ext dashr_ext")
    run(ip, f"%dashr attach --read-only {path}")
    magic = page_through(
        lambda cursor: str(
            run(ip, "%history_search needle" + (f" --cursor {cursor}" if cursor else ""))
        ),
        re.compile(r'cursor="(h\d+)"'),
    )
    assert seqs_of(magic) == seqs_of(tool)


def test_a_bad_search_cursor_says_what_a_cursor_is(tmp_path: Path) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        last = len(d.session) - 1
        for token, said in [
            ("c20@4:1200", "(that is a history_read cursor)"),
            ("17", "like 'h17' (the hits after the one at seq 17)"),
            (f"h{last + 1}", f"past the end of this session's log (the last seq is {last})"),
        ]:
            with pytest.raises(RecallError) as info:
                d.history_search("needle", cursor=token)
            assert said in str(info.value)
        assert 'cursor="' not in str(d.history_search("needle", cursor=f"h{last}"))
        assert "no matches after the cursor" in str(d.history_search("needle", cursor=f"h{last}"))
    assert (
        cold.search_bytes((tmp_path / "s.jsonl").read_bytes(), "needle", paging=Paging(last + 1))
        is None
    )


# --------------------------------------------------------------------------- CLI hints


def test_command_name_is_dashr_on_path_else_the_script_beside_python_else_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, python_dir = tmp_path / "bin", tmp_path / "venv" / "bin"
    bin_dir.mkdir()
    python_dir.mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(python_dir / "python"))
    assert command_name() == f"{python_dir / 'python'} -m dashr_ext"
    script = python_dir / "dashr"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert command_name() == os.path.join("venv", "bin", "dashr")  # as the user would type it
    (bin_dir / "dashr").write_text("#!/bin/sh\n")
    (bin_dir / "dashr").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert command_name() == "dashr"


@pytest.fixture
def demo_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "demo.jsonl"
    assert cli(capsys, "demo", "--out", str(path))[0] == 0
    return path


def test_every_hint_the_cli_prints_is_a_command_that_runs(
    demo_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(demo_file.parent / "no-dashr-here"))  # after pip install .
    cmd = command_name()
    assert cmd != "dashr"
    words = len(shlex.split(cmd))
    _code, outline, _ = cli(capsys, "outline", str(demo_file))
    recall_line = outline.splitlines()[-1]
    assert recall_line.startswith(f"recall: {cmd} read {demo_file} c")
    pruned = next(line for line in outline.splitlines() if line.startswith("pruned output"))
    assert f"read one whole: {cmd} read {demo_file} --seq " in pruned
    first = re.search(r"^(c\d+) \|", outline, re.M).group(1)  # type: ignore[union-attr]
    _code, page, _ = cli(capsys, "read", str(demo_file), first)
    *_, hint, cursor = page.splitlines()
    assert hint == f"next page: {cmd} read {demo_file} --cursor {cursor.removeprefix('cursor: ')}"
    _code, following, _ = cli(capsys, *shlex.split(hint.removeprefix("next page: "))[words:])
    assert following.startswith(f"history_read checkpoint {first} — ")
    _code, hits, _ = cli(capsys, "search", str(demo_file), "retry")
    note = hits.splitlines()[-2]
    assert note.startswith("more matches than shown: page on with --cursor h")
    assert "narrow with --checkpoint c" in note
    _code, none, _ = cli(capsys, "search", str(demo_file), "no such phrase anywhere")
    assert (
        f"{cmd} outline {demo_file}, or read a likely range with {cmd} read {demo_file} c" in none
    )
    code, _out, err = cli(capsys, "read", str(demo_file), "c999999")
    assert code == 1 and f"({cmd} outline {demo_file} lists them)" in err
    for text in (recall_line, pruned, hint, note, none.splitlines()[1], err):
        assert not PYTHON_CALL.search(text), text


def test_a_demo_out_file_that_exists_is_refused_in_cli_words(
    demo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = demo_file.read_bytes()
    code, out, err = cli(capsys, "demo", "--out", str(demo_file))
    assert (code, out) == (1, "")
    assert err == (
        f"dashr demo: {demo_file}: already exists (left untouched); choose another --out path, "
        f"or look at it with {command_name()} inspect {demo_file}\n"
    )
    assert "Dashr." not in err and demo_file.read_bytes() == before


def test_the_demo_speaks_of_the_request_and_labels_its_scripted_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _code, out, _ = cli(capsys, "demo", "--out", str(tmp_path / "demo.jsonl"))
    first = out.splitlines()[0]
    assert re.fullmatch(
        r"dashr demo: \d+ events, \d+ compaction passes; "
        r"the request is now ~\d{1,3}(,\d{3})* tokens",
        first,
    )
    assert "surface" not in first and "shadow" not in first
    label = next(line for line in out.splitlines() if SCRIPTED_NOTE in line)
    assert label.startswith("an original c") and label.endswith(f"({SCRIPTED_NOTE}):")
    assert "['tool_results'][" in label
    assert f"{command_name()} search {tmp_path / 'demo.jsonl'} " in out  # the search shown


# --------------------------------------------------------------------------- numbers and words


def test_compact_prints_one_number_format_and_chains_its_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=200_000, retain_tokens=1500)
    with Dashr.create(path, config=config, tools=DEMO_TOOLS) as d:
        for message in demo_messages():
            d.record_openai(message)
    code, out, err = cli(
        capsys, "compact", str(path), "--recency-window-tokens", "3000", "--retain-tokens", "300"
    )
    assert (code, err) == (0, "")
    number = r"~(\d{1,3}(?:,\d{3})*)"
    pruned, summary = out.splitlines()
    prune = re.fullmatch(
        rf"pruned 1 message: p\d+; {number} -> {number} tokens \([\d,]+ saved\)", pruned
    )
    condensed = re.fullmatch(rf"c\d+: shadowed \d+ events; {number} -> {number} tokens", summary)
    assert prune and condensed, out
    assert prune.group(2) == condensed.group(1)  # the prune's "after" is the pass's "before"
    code, out, _ = cli(
        capsys, "compact", str(path), "--recency-window-tokens", "3000", "--retain-tokens", "300"
    )
    assert re.fullmatch(rf"nothing to compact \({number} tokens on the surface\)\n", out)


def test_one_event_and_one_seq_read_as_singular(demo_file: Path) -> None:
    with Dashr.open(demo_file, read_only=True) as d:
        cp = d.checkpoints()[0]
        turn = d.session.turns[0]
    one = replace(cp, shadowed_seqs=(57,))
    assert "| 1 event, seq 57 |" in " | ".join(("", *checkpoint_row(one, 57, 57), ""))
    short = replace(turn, start_seq=7, end_seq=7)
    assert turn_row(short, 99, 1, 0, "hi")[1:3] == ("seq 7", "1 event")
    outline = render_outline(
        event_count=1, checkpoints=[], spans={}, turns=[], row_of=lambda t: (), max_chars=4000
    )
    assert outline.startswith("history_outline — 1 event (seq 0), 0 checkpoints, 0 turns")


def test_search_says_what_it_scanned_and_why_not_the_rest(tmp_path: Path) -> None:
    with needle_session(tmp_path / "s.jsonl") as d:
        header = str(d.history_search("needle")).split("\n")[0]
        events = len(d.session)
    found = re.search(
        r"— (\d+) events scanned \(every message; the log's (\d+) other events are "
        r"settings, markers and compaction records\), 65 matched, showing 20$",
        header,
    )
    assert found, header
    assert int(found.group(1)) + int(found.group(2)) == events


def test_outline_html_keeps_ids_and_ranges_on_one_line(demo_file: Path) -> None:
    with Dashr.open(demo_file, read_only=True) as d:
        html = d.history_outline()._repr_html_()
    nowrap = '<td style="text-align:left;vertical-align:top;white-space:nowrap">'
    wrap = '<td style="text-align:left;vertical-align:top">'
    assert f"{nowrap}c39</td>" in html and f"{nowrap}15 events, seqs 3-30</td>" in html
    assert f"{nowrap}seqs 2-59</td>" in html
    assert f"{wrap}Last assistant message (seq 29)" in html  # the preview may wrap


def test_previews_are_cut_at_a_word_boundary_with_an_ellipsis() -> None:
    text = "Fix the failing retry tests in tests/test_retry.py. CI has been red since yesterday"
    assert (
        one_line(text, 80)
        == "Fix the failing retry tests in tests/test_retry.py. CI has been red since…"
    )
    assert clipped("a" * 100, 10) == "a" * 9 + "…"  # one long word: cut inside it
    assert clipped("short", 10) == "short"


def test_a_long_checkpoint_preview_ends_at_a_word_with_an_ellipsis(tmp_path: Path) -> None:
    work = " ".join(f"word{i}" for i in range(60))
    summarizer = ScriptedSummarizer(text=f"## Current Work\n{work}")
    config = CompactionConfig(recency_window_tokens=2000, retain_tokens=300, auto=False)
    with Dashr.create(tmp_path / "s.jsonl", config=config, summarizer=summarizer) as d:
        record_steps(d, 6, user="Read the modules.")
        d.record_openai({"role": "assistant", "content": "Done."})
        d.record_openai({"role": "user", "content": "Next."})
        assert d.compact() is not None
        (cp,) = d.checkpoints()
    assert cp.preview.endswith("…") and len(cp.preview) <= 120
    assert work.startswith(cp.preview.removesuffix("…") + " ")  # whole words only


# --------------------------------------------------------------------------- magics


@pytest.fixture
def ip(shells: list[InteractiveShell]) -> InteractiveShell:
    shell = InteractiveShell(config=Config({"HistoryManager": {"hist_file": ":memory:"}}))
    shells.append(shell)
    run(shell, "%load_ext dashr_ext")
    return shell


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "%config Dashr.retain_tokens = -5",
            "UsageError: Dashr.retain_tokens: expected an integer >= 1, got -5; it stays None",
        ),
        (
            '%config Dashr.engine = "turn"',
            "UsageError: Dashr.engine: expected one of 'summary', 'recallable', got 'turn'; "
            "it stays 'summary'",
        ),
        (
            "%config Dashr.agent_max_steps = 0",
            "UsageError: Dashr.agent_max_steps: expected an integer >= 1, got 0; it stays 30",
        ),
    ],
)
def test_a_refused_config_value_is_one_usage_error_line(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    line: str,
    shown: str,
) -> None:
    capsys.readouterr()
    with caplog.at_level(logging.DEBUG):
        run(ip, line)
    assert capsys.readouterr().err == shown + "\n"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_non_integer_option_is_a_usage_error_in_plain_words(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError) as info:
        run(ip, "%history_search retry --limit abc")
    assert str(info.value) == "--limit: expected an integer, got 'abc'"


def test_status_shows_itself_in_a_script_and_says_nothing_is_recorded_yet(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    result = ip.run_cell("%dashr status", silent=True)  # as `ipython script.ipy` runs a line
    assert result.result is None and result.error_in_exec is None
    out = capsys.readouterr().out
    assert out.startswith("dashr status — session ")
    assert re.search(r"^events +1 \(header only; nothing recorded yet\)$", out, re.M)
    with pytest.raises(UsageError, match="nothing recorded yet"):
        run(ip, "%dashr export elsewhere.jsonl")
    run(ip, "dashr.record_openai({'role': 'user', 'content': 'hello'})")
    run(ip, "%dashr status")
    assert re.search(r"^events +\d+ \(seqs 0-\d+\), 1 turn$", capsys.readouterr().out, re.M)


# --------------------------------------------------------------------------- README


def test_the_readme_counts_the_notebooks_nbval_checks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    words = {3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"{words[len(notebooks)]} notebooks\n  checked by nbval" in readme
    paragraph = readme[readme.index("The notebooks in `notebooks/`") :].split("\n\n")[0]
    assert all(f"`{name}`" in paragraph for name in notebooks), paragraph


def test_a_sessions_repr_counts_in_the_singular_and_plural() -> None:
    with Dashr.create(in_memory=True) as d:
        assert repr(d).endswith(": 1 event, 0 checkpoints>")
        d.record_openai({"role": "user", "content": "Hi."})
        assert f": {len(d.session)} events, 0 checkpoints>" in repr(d)
