"""What a fresh ``dashr`` process imports: a one-off command pays only for what it uses.

``dashr search FILE QUERY`` is a new process per search, so its imports are part of every
search's wall time (``rg -F -i`` over the same file takes ~25 ms). These tests count the
modules a command leaves in ``sys.modules``; they never time anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._cli_syntax import CommandSyntax
from dashr_ext._recall import cold

CHILD = """
import contextlib, io, json, sys
from dashr_ext._cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""

NEVER = (
    # the replay (the cold search builds an event with its parse_event alone): a cold
    # search scans the file's bytes instead
    "dashr_ext._session",
    "dashr_ext._store",
    "dashr_ext._surface",
    "dashr_ext._formats.openai",
    "dashr_ext._turns",
    # the compaction engine, the archive and what only other commands use
    "dashr_ext._controller",
    "dashr_ext._compaction",
    "dashr_ext._summarizers",
    "dashr_ext._meter",
    "dashr_ext._archive",
    "dashr_ext._fileops",
    "dashr_ext._footers",
    "dashr_ext._progress",
    "dashr_ext._recall.index",
    # the standard library's and the dependencies' heavier modules
    "tempfile",
    "shutil",
    "hashlib",
    "signal",
    "sqlite3",
    "concurrent.futures",
    "httpx",
    "tiktoken",
    "IPython",
    "jupyter_client",
)
"""Modules a cold ``dashr search`` (and ``dashr --help``) must not import."""

NOT_FOR_HELP = (
    *NEVER,
    # no log is read: no event types, no JSON parser for logs, no recall
    "msgspec",
    "dashr_ext._events",
    "dashr_ext._jsontext",
    "dashr_ext._recall",
)


def run_cli(*argv: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _call(i: int, content: str) -> list[dict[str, object]]:
    """An assistant message calling ``bash`` and the call's result."""
    call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": f"Step {i}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": content},
    ]


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session file with checkpoints and a pruned output, its turns marked: the cold
    search decodes the compaction events and the replacements and answers by itself."""
    path = tmp_path_factory.mktemp("startup") / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=300)
    with Dashr.create(path, config=config, durability="flush") as d:
        for turn in range(8):
            d.record_openai({"role": "user", "content": f"Task {turn}: the flaky scheduler."})
            for i in range(3):
                d.request_messages()
                big = turn == 2 and i == 1  # pruned in place: its original is recallable
                d.record_openai(_call(turn * 10 + i, "log line\n" * (3000 if big else 40)))
            d.request_messages()
            d.record_openai({"role": "assistant", "content": f"Turn {turn} done."})
        assert len(d.checkpoints()) >= 2
        assert any(key.startswith("p") for key in d.archive)  # the pruned original
    assert cold.search_bytes(path.read_bytes(), "scheduler", None, None) is not None
    return path


def test_a_cold_search_imports_neither_the_replay_nor_the_engine(compacted: Path) -> None:
    with Dashr.open(compacted, read_only=True) as d:
        d.recall.syntax = CommandSyntax(compacted)  # the command's hints name commands
        replayed = str(d.history_search("scheduler"))
    result = run_cli("search", str(compacted), "scheduler")
    assert result["code"] == 0
    assert result["out"] == replayed + "\n"
    assert "| shadowed | c" in replayed  # hits attributed to their checkpoints
    modules = set(result["modules"])  # type: ignore[call-overload]
    assert "dashr_ext._recall.cold" in modules  # the byte scan answered, not a replay
    loaded = sorted(m for m in modules if m.split(".")[0] in {n.split(".")[0] for n in NEVER})
    assert [m for m in NEVER if m in modules] == [], loaded


def test_help_imports_no_log_machinery() -> None:
    result = run_cli("--help")
    assert result["code"] == 0
    assert "dashr search FILE QUERY" not in str(result["out"])  # argparse's own help text
    assert "{demo,inspect,outline,read,search,compact,turns,import,pin,pins,unpin,agent}" in str(
        result["out"]
    )
    modules = set(result["modules"])  # type: ignore[call-overload]
    assert [m for m in NOT_FOR_HELP if m in modules] == []


READ_ONLY_NEVER = (
    # the summarizer's pipeline loads with a first summary; a read-only open makes none
    "dashr_ext._summarizers.extractive.gather",
    "dashr_ext._summarizers.extractive.stub",
    "concurrent.futures",  # summaries of several regions at once
    "importlib.resources",  # templates of an installed package (it imports tempfile)
    "tempfile",
    "shutil",
    "hashlib",  # image attachment ids and new session ids (OpenSSL)
    "tiktoken",  # nothing is measured
    "httpx",
    "IPython",
    "jupyter_client",
)
"""Modules ``dashr outline`` and ``dashr read`` (a read-only ``Dashr.open``) must not import."""


@pytest.mark.parametrize("command", ["outline", "read"])
def test_outline_and_read_import_no_summarizer_pipeline(compacted: Path, command: str) -> None:
    with Dashr.open(compacted, read_only=True) as d:
        d.recall.syntax = CommandSyntax(compacted)  # the command's hints name commands
        first = d.checkpoints()[0].id
        expected = str(d.history_outline() if command == "outline" else d.history_read(first))
    result = run_cli(command, str(compacted), *([first] if command == "read" else []))
    assert result["code"] == 0
    assert result["out"] == expected + "\n"
    modules = set(result["modules"])  # type: ignore[call-overload]
    assert "dashr_ext._controller" in modules  # a replay answered
    assert [m for m in READ_ONLY_NEVER if m in modules] == []


def test_a_new_session_imports_no_json_decoder_it_does_not_use(tmp_path: Path) -> None:
    """msgspec decodes logs; a session created afresh (or an extension loaded before any log
    is read) decodes none, so it is not imported."""
    code = (
        "import sys\n"
        "from dashr_ext import Dashr\n"
        f"d = Dashr.create({str(tmp_path / 's.jsonl')!r})\n"
        "d.record_openai([{'role': 'user', 'content': 'hello'}])\n"
        "print('msgspec' in sys.modules, 'dashr_ext._recall.cold' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
