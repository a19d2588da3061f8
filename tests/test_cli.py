"""The ``dashr`` command line: every command on a demo and a corpus session, and bad input."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files
from helpers import record_steps

from dashr_ext import Dashr
from dashr_ext._cli import main
from dashr_ext._cliparse import command_name, session_file_hint
from dashr_ext._demo import DEMO_TOOLS, SCRIPTED_NOTE, demo_facts, demo_messages
from dashr_ext._formats.openai import to_openai


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def demo_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "demo.jsonl"
    code, _out, _ = run(capsys, "demo", "--out", str(path))
    assert code == 0 and path.is_file()
    return path


def test_demo_prints_outline_footer_archive_read_and_a_search_hit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    facts = demo_facts()
    assert re.search(r"dashr demo: \d+ events, [2-9]\d* compaction passes", out)
    assert "history_outline — " in out
    # The demo's 6k window gets the compact form: one footer line with both routes back.
    footer = re.search(r"^\[checkpoint (c\d+) · #\d+–#\d+ · \d+ events · .*\]$", out, re.M)
    assert footer is not None
    assert f'dashr_compaction_archive["{footer.group(1)}"]' in footer.group(0)
    assert f"dashr_compaction_archive['{footer.group(1)}']['tool_results']" in out
    assert SCRIPTED_NOTE in out  # the failing test run shown is the demo's, not the reader's
    assert f'history_search "{facts["error"]}"' in out
    assert re.search(r"^1\. seq \d+ \| shadowed \| c\d+ \| ", out, flags=re.M)
    assert facts["error"] in out


def test_inspect_outline_read_and_search_on_the_demo_session(
    demo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", str(demo_file))
    assert code == 0
    assert out.startswith("session demo (")
    checkpoints = re.findall(r"^  (c\d+): shadows", out, flags=re.M)
    assert len(checkpoints) >= 2
    code, outline, _ = run(capsys, "outline", str(demo_file))
    assert code == 0 and all(cp in outline for cp in checkpoints)
    code, page, _ = run(capsys, "read", str(demo_file), checkpoints[0])
    assert code == 0 and page.startswith(f"history_read checkpoint {checkpoints[0]} — ")
    cursor = re.search(r"^cursor: (\S+)$", page, flags=re.M)
    if cursor:
        code, more, _ = run(capsys, "read", str(demo_file), "--cursor", cursor.group(1))
        assert code == 0 and "history_read" in more
    code, seq_page, _ = run(capsys, "read", str(demo_file), "--seq", "3")
    assert code == 0 and "User (seq 3): " in seq_page
    facts = demo_facts()
    code, hits, _ = run(capsys, "search", str(demo_file), facts["magic_number"], "--limit", "2")
    assert code == 0 and "matched" in hits and facts["magic_number"] in hits


def test_import_and_compact_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "chat.json"
    source.write_text(json.dumps({"messages": demo_messages(), "tools": DEMO_TOOLS}))
    out_file = tmp_path / "imported.jsonl"
    code, out, _ = run(capsys, "import", str(source), "--format", "openai", "-o", str(out_file))
    assert code == 0 and out.startswith(f"{out_file}: ")
    code, out, err = run(
        capsys,
        "compact",
        str(out_file),
        "--recency-window-tokens",
        "6000",
        "--retain-tokens",
        "1500",
    )
    assert code == 0, err
    assert re.match(r"c\d+: shadowed \d+ events; ~[\d,]+ -> ~[\d,]+ tokens", out)
    code, out, _ = run(capsys, "inspect", str(out_file))
    assert "checkpoints: 1" in out


@pytest.mark.corpus
def test_every_command_on_a_corpus_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = corpus_files()
    if not files:
        pytest.skip("../shared/corpus is absent")
    session_file = tmp_path / "corpus.jsonl"
    assert (
        run(capsys, "import", str(files[0]), "--format", "openai", "-o", str(session_file))[0] == 0
    )
    code, out, _ = run(
        capsys,
        "compact",
        str(session_file),
        "--recency-window-tokens",
        "20000",
        "--retain-tokens",
        "4000",
    )
    assert code == 0
    found = re.search(r"^(c\d+): shadowed", out, flags=re.M)
    assert found, out
    checkpoint = found.group(1)
    assert run(capsys, "outline", str(session_file))[0] == 0
    code, page, _ = run(capsys, "read", str(session_file), checkpoint)
    assert code == 0 and page.startswith(f"history_read checkpoint {checkpoint}")
    code, hits, _ = run(capsys, "search", str(session_file), "THOUGHT", "--checkpoint", checkpoint)
    assert code == 0 and f"| shadowed | {checkpoint} |" in hits


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "/nonexistent/s.jsonl"], "dashr inspect: no such file: /nonexistent/s.jsonl"),
        (["read", "{demo}", "c999999"], "dashr read: unknown checkpoint 'c999999'"),
        (["search", "{demo}", "   "], "dashr search: "),
        (["import", "{bad}", "--format", "openai"], "dashr import: "),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_exit_1(
    argv: list[str],
    message: str,
    demo_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    args = [a.replace("{demo}", str(demo_file)).replace("{bad}", str(bad)) for a in argv]
    code, out, err = run(capsys, *args)
    assert code == 1
    assert out == ""
    assert err.startswith(message)
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_flags_exit_2_with_a_one_line_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dashr_ext._cli", "search", "f.jsonl", "q", "--limit", "many"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "--limit: invalid int value: 'many'" in proc.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "dashr_ext._cli", "compact", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert helped.returncode == 0 and "--recency-window-tokens" in helped.stdout


def test_demo_that_never_compacts_prints_the_outline_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "demo", "--recency-window-tokens", "100000", "--retain-tokens", "1500"
    )
    assert (code, err) == (0, "")
    assert re.match(r"dashr demo: \d+ events, 0 compaction passes", out)
    assert "history_outline — " in out
    assert re.search(
        r"^nothing was compacted: the session \(~[\d,]+ tokens\) never went over the trigger "
        r"\(100,000 tokens\); try a smaller --recency-window-tokens$",
        out,
        flags=re.M,
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--recency-window-tokens", "0"],
            "dashr demo: --recency-window-tokens: expected an integer >= 1, got 0\n",
        ),
        (
            ["--recency-window-tokens", "3000", "--retain-tokens", "5000"],
            "dashr demo: --retain-tokens: expected fewer tokens than --recency-window-tokens "
            "(3000), got 5000\n",
        ),
    ],
)
def test_demo_flags_are_checked_by_the_compaction_config(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "demo", *flags) == (1, "", message)


MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def test_a_failed_import_leaves_no_file_and_the_same_output_path_works_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([*MESSAGES, {"role": "bogus", "content": "x"}]))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(MESSAGES))
    out_file = tmp_path / "out.jsonl"
    code, out, err = run(capsys, "import", str(bad), "--format", "openai", "-o", str(out_file))
    assert (code, out) == (1, "")
    assert err == (
        "dashr import: messages[2].role: expected 'system', 'user', 'assistant' or 'tool', "
        "got 'bogus'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "good.json"]
    code, out, _ = run(capsys, "import", str(good), "--format", "openai", "-o", str(out_file))
    assert code == 0 and out.startswith(f"{out_file}: ")
    assert [m["role"] for m in json_messages(out_file)] == ["user", "assistant"]


def json_messages(path: Path) -> list[dict[str, object]]:
    from dashr_ext import Dashr

    with Dashr.open(path, read_only=True) as d:
        return to_openai(d.session)


def test_import_never_touches_an_existing_output_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(MESSAGES))
    existing = tmp_path / "existing.jsonl"
    existing.write_text("precious\n")
    code, out, err = run(capsys, "import", str(good), "--format", "openai", "-o", str(existing))
    assert (code, out) == (1, "")
    assert err == (
        f"dashr import: {existing}: already exists (left untouched); choose another -o path\n"
    )
    assert existing.read_text() == "precious\n"


def test_an_import_failing_while_writing_removes_the_file_it_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashr_ext._store import Store

    good = tmp_path / "good.json"
    good.write_text(json.dumps(MESSAGES))
    out_file = tmp_path / "out.jsonl"
    append = Store.append

    def disk_full_after_the_header(self: Store, objs: list[dict[str, object]]) -> object:
        if objs and objs[0].get("type") != "session/header":
            raise OSError(28, "No space left on device")
        return append(self, objs)

    monkeypatch.setattr(Store, "append", disk_full_after_the_header)
    code, out, err = run(capsys, "import", str(good), "--format", "openai", "-o", str(out_file))
    assert (code, out) == (1, "")
    assert err.startswith("dashr import: ") and "No space left on device" in err
    assert not out_file.exists()


def test_output_piped_into_head_stops_quietly() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        f"'{sys.executable}' -m dashr_ext._cli demo | head -n 2",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.splitlines()[0].startswith("dashr demo: ")
    assert len(done.stdout.splitlines()) == 2
    assert done.stderr == ""


# --------------------------------------------------------------------------- compact: pruning

SMALL_WINDOW = ["--context-window-tokens", "25000", "--retain-tokens", "3000"]  # trigger 20,000


def numbered(lines: int, width: int = 60) -> str:
    return "\n".join(f"{n:06d} " + "x" * width for n in range(1, lines + 1))


def call(name: str, arguments: str = "{}") -> dict[str, object]:
    return {"id": name, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def build_session(path: Path, newest: str, *, steps: int = 20) -> Path:
    """A session of ``steps`` ordinary tool steps, then the ``newest`` case."""
    from dashr_ext import Dashr

    with Dashr.create(path) as d:
        if newest != "only a huge output":
            record_steps(d, steps, chars=1200, user="Fix the failing test.")
        if newest == "tool output":  # one huge observation: pruning brings it under
            d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call("big")]})
            d.record_openai({"role": "tool", "tool_call_id": "big", "content": numbered(4000)})
        elif newest == "call arguments":  # a huge file write: pruning keeps tool calls
            arguments = json.dumps({"path": "fixture.txt", "content": "y " * 40_000})
            d.record_openai(
                {
                    "role": "assistant",
                    "content": "Writing it.",
                    "tool_calls": [call("w", arguments)],
                }
            )
        elif newest == "only a huge output":  # no history: nothing a summary could condense
            d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call("big")]})
            d.record_openai({"role": "tool", "tool_call_id": "big", "content": numbered(4000)})
        elif newest == "old outputs":  # four large outputs outside the retained tail
            record_steps(d, 4, chars=30_000, first=100)
            record_steps(d, 10, chars=1600, first=200)
    return path


def measured(path: Path) -> tuple[int, Any]:
    from dashr_ext import CompactionConfig, Dashr

    config = CompactionConfig(context_window_tokens=25_000, retain_tokens=3_000)
    d = Dashr.open(path, config=config, read_only=True)
    return d.measure().total, d


def test_compact_prunes_a_huge_newest_output_first_and_reports_both_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build_session(tmp_path / "s.jsonl", "tool output")
    before, d = measured(path)
    seq = next(
        e.seq
        for e in d.session.events
        if e.type == "tool/result" and e.message.tool_call_id == "big"
    )
    d.close()
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    code, out, err = run(capsys, "compact", str(path), *SMALL_WINDOW)
    assert (code, err) == (0, "")
    pruned, summary = out.splitlines()
    after_prune = int(re.fullmatch(r".*~([\d,]+) tokens \(.*", pruned).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert pruned == (
        f"pruned 1 message: p{seq}; ~{before:,} -> ~{after_prune:,} tokens "
        f"({before - after_prune:,} saved)"
    )
    assert after_prune < 20_000 < before
    _total, d = measured(path)
    with d:
        (cp,) = d.checkpoints()
        shadowed = len(cp.shadowed_seqs)
        assert f"p{seq}" in d.archive and cp.id in d.archive
    match = re.fullmatch(
        rf"{cp.id}: shadowed {shadowed} events; ~{after_prune:,} -> ~([\d,]+) tokens", summary
    )
    assert match and int(match.group(1).replace(",", "")) < after_prune
    # --prune-only on the same session prunes the same output to the same size.
    code, out, err = run(capsys, "compact", str(copy), *SMALL_WINDOW, "--prune-only")
    assert (code, out, err) == (0, pruned + "\n", "")


def test_compact_says_when_pruning_left_nothing_to_summarize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build_session(tmp_path / "s.jsonl", "only a huge output")
    before, d = measured(path)
    d.close()
    code, out, err = run(capsys, "compact", str(path), *SMALL_WINDOW)
    after, d = measured(path)
    with d:
        assert d.checkpoints() == []
        (key,) = d.archive
    assert (code, err) == (0, "")
    assert out == (
        f"pruned 1 message: {key}; ~{before:,} -> ~{after:,} tokens ({before - after:,} saved)\n"
        f"nothing to summarize (~{after:,} tokens on the surface)\n"
    )


def test_compact_says_on_stderr_why_the_request_is_still_above_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build_session(tmp_path / "s.jsonl", "call arguments")
    code, out, err = run(capsys, "compact", str(path), *SMALL_WINDOW)
    assert code == 3
    assert re.fullmatch(r"c\d+: shadowed \d+ events; ~[\d,]+ -> ~[\d,]+ tokens\n", out)
    total, d = measured(path)
    with d:
        last = d.session.units()[-1]
        nodes = d.measure().nodes[last.start : last.end]
        seqs = [s for s, _t in nodes]
        call_seq = next(
            e.seq for e in d.session.surface_events() if e.message.text == "Writing it."
        )
        call_tokens = dict(nodes)[call_seq]
        arguments = len(d.session.event(call_seq).message.tool_calls[0].arguments)
    assert total > 25_000
    assert err == (
        f"dashr compact: the request is still above the trigger: ~{total:,} tokens, "
        f"{total / 20_000:.1f}× the trigger (20,000) and {total / 25_000:.1f}× the context "
        f"window (25,000); the newest unit alone (seqs {min(seqs)}-{max(seqs)}, {len(seqs)} "
        f"messages) is ~{sum(t for _s, t in nodes):,} tokens; its largest, the assistant message "
        f"at seq {call_seq}, is ~{call_tokens:,} tokens and cannot shrink: pruning keeps its tool "
        f"calls ({arguments:,} chars of arguments) and its text is only 11 chars\n"
    )
    # Nothing more to do: still exit 3, still the reason.
    code, out, again = run(capsys, "compact", str(path), *SMALL_WINDOW, "--prune-only")
    assert (code, out) == (3, f"nothing to prune (~{total:,} tokens on the surface)\n")
    assert again == err


def test_prune_only_prunes_old_outputs_and_runs_no_summary_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = build_session(tmp_path / "s.jsonl", "old outputs", steps=6)
    before, d = measured(path)
    with d:
        big = [
            e.seq
            for e in d.session.events
            if e.type == "tool/result" and len(e.message.text) == 30_000
        ]
    assert len(big) == 4
    code, out, err = run(capsys, "compact", str(path), *SMALL_WINDOW, "--prune-only")
    after, d = measured(path)
    with d:
        assert d.checkpoints() == []
        assert sorted(k for k in d.archive) == [f"p{s}" for s in big]
    keys = ", ".join(f"p{s}" for s in big)
    assert (code, err) == (0, "")
    saved = before - after
    assert out == f"pruned 4 messages: {keys}; ~{before:,} -> ~{after:,} tokens ({saved:,} saved)\n"
    assert run(capsys, "compact", str(path), *SMALL_WINDOW, "--prune-only") == (
        0,
        f"nothing to prune (~{after:,} tokens on the surface)\n",
        "",
    )


def test_a_failed_summary_pass_still_reports_the_prune_pass_committed_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashr_ext._summarizers.extractive.summarizer import ExtractiveSummarizer

    def down(self: object, request: object) -> object:
        raise ConnectionError("summarizer unreachable")

    monkeypatch.setattr(ExtractiveSummarizer, "summarize", down)
    path = build_session(tmp_path / "s.jsonl", "tool output")
    code, out, err = run(capsys, "compact", str(path), *SMALL_WINDOW)
    assert code == 1
    assert re.fullmatch(
        r"pruned 1 message: p\d+; ~[\d,]+ -> ~[\d,]+ tokens \([\d,]+ saved\)\n", out
    )
    assert re.fullmatch(
        r"dashr compact: compaction pass p\d+ failed: ConnectionError: summarizer unreachable\n",
        err,
    )
    _total, d = measured(path)
    with d:
        assert [k for k in d.archive if k.startswith("p")] == [
            out.split(":")[1].split(";")[0].strip()
        ]
        assert d.checkpoints() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["compact", "f.jsonl", "--prune-only=yes"],
            "dashr compact: error: argument --prune-only: ignored explicit argument 'yes'",
        ),
        (
            ["inspect", "f.jsonl", "--prune-only"],
            "dashr: error: unrecognized arguments: --prune-only",
        ),
        (
            ["compact", "--prune-only"],
            "dashr compact: error: the following arguments are required: file",
        ),
    ],
)
def test_bad_prune_flags_are_a_one_line_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    _out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert err == f"{message} (see --help)\n"


def test_a_phrase_starting_with_a_dash_is_told_to_follow_a_double_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dashr search FILE "->"`` reads the phrase as an option: the error says how to
    search for it, and that way finds it."""
    log = tmp_path / "s.jsonl"
    with Dashr.create(log, durability="flush") as d:
        d.record_openai({"role": "user", "content": "parse a -> b then"})
    with pytest.raises(SystemExit) as exited:
        main(["search", str(log), "->"])
    _out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert err == (
        "dashr: error: unrecognized arguments: ->; a phrase starting with '-' goes after "
        f"'--' ({command_name()} search FILE -- '->') (see --help)\n"
    )
    assert main(["search", str(log), "--", "->"]) == 0
    assert "a -> b" in capsys.readouterr().out


def test_compact_help_documents_prune_only_and_exit_status_3() -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "dashr_ext._cli", "compact", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    text = " ".join(helped.stdout.split())
    assert helped.returncode == 0
    assert "--prune-only only prune" in text
    assert "3 done (the passes are committed) but the request is still above the trigger" in text


@pytest.mark.parametrize("newest", ["tool output", "call arguments"])
def test_compact_piped_into_head_stays_quiet_and_keeps_its_status(
    tmp_path: Path, newest: str
) -> None:
    path = build_session(tmp_path / "s.jsonl", newest)
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"'{sys.executable}' -m dashr_ext._cli compact '{path}' "
            f"{' '.join(SMALL_WINDOW)} | head -n 1; exit ${{PIPESTATUS[0]}}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(done.stdout.splitlines()) == 1
    if newest == "tool output":
        assert done.stdout.startswith("pruned 1 message: p")
        assert (done.returncode, done.stderr) == (0, "")
    else:
        assert re.match(r"c\d+: shadowed", done.stdout)
        assert done.returncode == 3
        assert done.stderr.startswith("dashr compact: the request is still above the trigger: ")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- polish


def dashr(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m dashr_ext ARGV`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "dashr_ext", *argv],
        capture_output=True,
        text=True,
        input=stdin,
        check=False,
        timeout=120,
    )


def test_python_m_dashr_ext_works_like_dashr(
    demo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, outline, _ = run(capsys, "outline", str(demo_file))
    done = dashr("outline", str(demo_file))
    assert (done.returncode, done.stdout, done.stderr) == (0, outline, "")
    helped = dashr("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: dashr ")
    assert "{demo,inspect,outline,read,search,compact,turns,import,pin,pins,unpin,agent}" in (
        helped.stdout
    )


@pytest.mark.parametrize(
    "argv",
    [["outline", "{demo}"], ["read", "{demo}", "--seq", "0"], ["search", "{demo}", "retry"]],
)
def test_a_reader_that_stops_early_ends_the_command_quietly_with_status_0(
    argv: list[str], demo_file: Path
) -> None:
    # `true` reads nothing and exits at once, so every write meets a closed pipe.
    command = " ".join(a.replace("{demo}", str(demo_file)) for a in argv)
    done = subprocess.run(
        [
            "bash",
            "-c",
            f"'{sys.executable}' -m dashr_ext {command} | true; exit ${{PIPESTATUS[0]}}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_import_reads_openai_messages_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "chat.json"
    source.write_text(json.dumps(MESSAGES))
    out_file = tmp_path / "s.jsonl"
    code, out, err = run(capsys, "import", str(source), "-o", str(out_file))
    assert (code, err) == (0, "")
    assert out == f"{out_file}: 7 events from 2 messages\n"


def test_demo_says_how_to_keep_its_session_and_try_the_other_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "demo")
    assert code == 0
    cmd = command_name()  # dashr on PATH, else the console script beside this interpreter
    assert out.endswith(
        "\nthe session was in a temporary directory (now removed): run "
        f"`{cmd} demo --out demo.jsonl` to keep it and try the inspect, outline, read, "
        "search and compact commands on it\n"
    )
    path = tmp_path / "demo.jsonl"
    code, out, _ = run(capsys, "demo", "--out", str(path))
    tail = out.split(f"\nsession file: {path}\ntry the other commands on it:\n", 1)[1]
    commands = [shlex.split(line) for line in tail.splitlines()]
    words = len(shlex.split(cmd))
    assert [c[: words + 1] for c in commands] == [
        [*shlex.split(cmd), "inspect"],
        [*shlex.split(cmd), "outline"],
        [*shlex.split(cmd), "read"],
        [*shlex.split(cmd), "search"],
    ]
    for command in commands:
        code, shown, err = run(capsys, *command[words:])
        assert (code, err) == (0, ""), command
        assert "matched 0" not in shown and "unknown" not in shown


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["read", "{demo}", "c999999"],
            "dashr read: unknown checkpoint 'c999999'; known checkpoints: {ids} "
            "({cmd} outline {demo} lists them)\n",
        ),
        (
            ["read", "{empty}", "c1"],
            "dashr read: unknown checkpoint 'c1': this session has no checkpoints yet (nothing "
            "has been compacted); read its history with {cmd} read {empty} --seq 0\n",
        ),
        (
            ["read", "{demo}", "--cursor", "zz"],
            "dashr read: malformed cursor 'zz': expected the token after 'cursor:' on the last "
            "line of a dashr read page, like 'c20@4:1200' (checkpoint c20, position 4, character "
            "1200) or 's7@12:0' (the log from seq 7, next seq 12)\n",
        ),
    ],
)
def test_errors_name_cli_commands_not_python_calls(
    argv: list[str],
    message: str,
    demo_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "empty.jsonl"
    imported = run(
        capsys, "import", str(_messages_file(tmp_path)), "--format", "openai", "-o", str(empty)
    )
    assert imported[0] == 0
    ids = ", ".join(
        re.findall(r"^  (c\d+): shadows", run(capsys, "inspect", str(demo_file))[1], re.M)
    )

    def fill(text: str) -> str:
        return (
            text.replace("{cmd}", command_name())
            .replace("{demo}", str(demo_file))
            .replace("{empty}", str(empty))
            .replace("{ids}", ids)
        )

    assert run(capsys, *map(fill, argv)) == (1, "", fill(message))


def _messages_file(directory: Path) -> Path:
    path = directory / "messages.json"
    path.write_text(json.dumps(MESSAGES))
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["read", "{demo}"],
            "dashr read: error: give exactly one of CHECKPOINT (e.g. c42), --seq N, --turn N or "
            "--cursor TOKEN (got none) (see --help)\n",
        ),
        (
            ["read", "{demo}", "c1", "--seq", "3"],
            "dashr read: error: give exactly one of CHECKPOINT (e.g. c42), --seq N, --turn N or "
            "--cursor TOKEN (got CHECKPOINT and --seq) (see --help)\n",
        ),
        (
            ["read", "{demo}", "--seq", "-1"],
            "dashr read: error: argument --seq: expected an integer >= 0, got -1 (see --help)\n",
        ),
        (
            ["search", "{demo}", "x", "--limit", "0"],
            "dashr search: error: argument --limit: expected an integer between 1 and 20, got 0 "
            "(see --help)\n",
        ),
    ],
)
def test_arguments_that_do_not_go_together_are_usage_errors(
    argv: list[str], message: str, demo_file: Path
) -> None:
    done = dashr(*(a.replace("{demo}", str(demo_file)) for a in argv))
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message)


def test_compact_uses_the_settings_the_log_records_and_flags_override_them_unrecorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dashr_ext import CompactionConfig, Dashr

    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        record_steps(d, 40, chars=1_600, user="go")
        d.config = CompactionConfig(recency_window_tokens=6_000, retain_tokens=1_500)  # recorded
    code, out, _err = run(capsys, "compact", str(path))
    assert code == 0 and "shadowed" in out
    with Dashr.open(path, read_only=True) as d:
        assert d.config.trigger_tokens == 6_000  # the log's settings applied, and still apply
        assert d.measure().total <= 6_000
        changes = sum(e.type == "config/change" for e in d.session.events)
    record = Dashr.open(path)
    record_steps(record, 40, chars=1_600, first=100)
    record.close()
    code, out, _err = run(capsys, "compact", str(path), "--recency-window-tokens", "9000")
    assert code == 0
    with Dashr.open(path, read_only=True) as d:
        assert d.config.trigger_tokens == 6_000  # the flag applied to that run only
        assert sum(e.type == "config/change" for e in d.session.events) == changes


def test_pin_pins_and_unpin_change_the_log_and_refusals_leave_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dashr_ext import CompactionConfig

    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.record_openai({"role": "user", "content": "Fix the failing retry tests."})
        d.config = CompactionConfig(max_summary_tokens=128)  # recorded: the commands use it
    assert run(capsys, "pins", str(path)) == (0, "no pins\n", "")
    code, out, err = run(capsys, "pin", str(path), "Never push to main.")
    with Dashr.open(path, read_only=True) as d:
        (first,) = d.pins()
    assert (code, out, err) == (0, f"pinned {first.id}: Never push to main.\n", "")
    code, out, _ = run(capsys, "pin", str(path), "Run", "the tests", "--", "-x")  # joined
    assert code == 0 and out.endswith(": Run the tests -x\n")
    code, out, _ = run(capsys, "pins", str(path))
    second = out.splitlines()[1].split()[0]
    assert out == f"{first.id}  Never push to main.\n{second}  Run the tests -x\n"
    before = path.read_bytes()
    for argv, message in (
        (
            ("unpin", str(path), "pin999"),
            f"no current pin 'pin999' to unpin; current pins: {first.id}, {second}",
        ),
        (("pin", str(path), " "), "pin text: expected a non-empty string"),
        (("pin", str(path), "always explain why " * 40), "(max_summary_tokens = 128) leaves "),
        (("pin", str(tmp_path / "missing.jsonl"), "x"), "no such file: "),
        (
            ("pins", str(tmp_path)),
            f"{tmp_path}: is a directory, not a regular file; {session_file_hint()}\n",
        ),
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (1, ""), argv
        assert err.startswith(f"dashr {argv[0]}: ") and message in err and err.count("\n") == 1
    assert path.read_bytes() == before
    code, out, _ = run(capsys, "unpin", str(path), first.id)
    assert (code, out) == (0, f"unpinned {first.id}: Never push to main.\n")
    assert run(capsys, "pins", str(path))[1] == f"{second}  Run the tests -x\n"


def test_pin_commands_without_their_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("pin", "f.jsonl"), ("unpin", "f.jsonl"), ("pins",)):
        with pytest.raises(SystemExit) as info:
            main(list(argv))
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dashr {argv[0]}: error: the following arguments are required")
