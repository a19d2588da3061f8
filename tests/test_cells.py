"""Running a cell for the agent's run_cell tool: capture, exception text, truncation."""

from __future__ import annotations

import linecache
import subprocess
import sys
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dashr_ext._cells import (
    CELL_SOURCES_KEPT,
    DEFAULT_TOOL_OUTPUT_MAX_CHARS,
    INTERRUPTED_CELL,
    NO_OUTPUT,
    RUN_CELL,
    CellOutput,
    run_cell,
    run_cell_schema,
    truncate_output,
)
from dashr_ext.errors import ConfigError

# --------------------------------------------------------------------------- fixtures


# --------------------------------------------------------------------------- CellOutput.text


def test_cell_output_text_is_stdout_stderr_results_then_the_error_one_per_line() -> None:
    out = CellOutput(
        stdout="hello", stderr="careful\n", results=("42", "'last'"), error="ValueError: bad"
    )
    assert out.text == "hello\ncareful\n42\n'last'\nValueError: bad"
    assert out.is_error


def test_cell_output_text_adds_no_newline_after_a_piece_that_ends_with_one() -> None:
    assert CellOutput(stdout="a\n", results=("1",)).text == "a\n1"
    assert CellOutput(stdout="a\n\n").text == "a\n\n"  # the piece itself is kept as is


def test_cell_output_text_skips_empty_pieces_and_says_when_there_was_no_output() -> None:
    assert CellOutput().text == NO_OUTPUT
    assert CellOutput(results=("", "x")).text == "x"
    assert not CellOutput(stdout="ok").is_error


def test_an_interrupted_cell_output_ends_with_the_interruption_line() -> None:
    out = CellOutput(stdout="partial", interrupted=True)
    assert out.text == f"partial\n{INTERRUPTED_CELL}"
    assert out.is_error
    assert CellOutput(interrupted=True).text == INTERRUPTED_CELL


# --------------------------------------------------------------------------- truncation


def test_truncate_output_keeps_the_head_and_the_tail_around_a_marker() -> None:
    text = "".join(f"{i:04d}\n" for i in range(1000))
    # 300 characters in all: a 37-character marker, 2/3 of the rest head, 1/3 tail.
    assert truncate_output(text, 300) == (
        text[:175] + "\n… [output truncated: +4737 chars] …\n" + text[-88:]
    )
    assert truncate_output("short", 300) == "short"


@pytest.mark.parametrize("length", [301, 337, 338, 1_000, 99_999, 100_000, 10_000_000])
def test_truncated_output_never_exceeds_max_chars_marker_included(length: int) -> None:
    text = "y" * length
    out = truncate_output(text, 300)
    marker = out[out.index("\n… [") : out.index("] …\n") + 4]
    assert len(out) == 300
    assert marker == f"\n… [output truncated: +{length - 300 + len(marker)} chars] …\n"


def test_truncate_output_keeps_only_the_head_when_the_marker_does_not_fit() -> None:
    assert truncate_output("abcdefghij" * 10, 20) == "abcdefghij" * 2


# --------------------------------------------------------------------------- the tool schema


def test_the_run_cell_schema_names_the_tool_its_one_argument_and_the_output_budget() -> None:
    schema = run_cell_schema(6000)
    function = schema["function"]
    assert (schema["type"], function["name"]) == ("function", RUN_CELL)
    assert function["parameters"]["required"] == ["code"]
    assert list(function["parameters"]["properties"]) == ["code"]
    assert function["parameters"]["additionalProperties"] is False
    assert "cut to about 6000 characters" in function["description"]
    assert run_cell_schema() == run_cell_schema(DEFAULT_TOOL_OUTPUT_MAX_CHARS)


# --------------------------------------------------------------------------- running cells


def test_run_cell_in_a_plain_namespace_captures_output_and_keeps_state() -> None:
    namespace: dict[str, Any] = {}
    out = run_cell("x = 20\nprint('hello')\nx + 22", namespace=namespace)
    assert out == CellOutput(stdout="hello\n", results=("42",))
    assert (out.text, out.is_error) == ("hello\n42", False)
    assert namespace["x"] == 20
    assert run_cell("x", namespace=namespace).text == "20"
    assert run_cell("y = x", namespace=namespace).text == "(no output)"
    assert run_cell("import sys\nprint('careful', file=sys.stderr)", namespace={}).stderr == (
        "careful\n"
    )


def test_run_cell_reports_exceptions_from_the_cells_own_frames() -> None:
    out = run_cell("print('before')\ndef f():\n    return 1 / 0\nf()", namespace={})
    assert out.is_error and out.stdout == "before\n"
    assert out.error is not None
    lines = out.error.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "ZeroDivisionError: division by zero"
    assert "    return 1 / 0" in lines
    assert "cells.py" not in out.error  # the runner's own frame is left out
    assert out.text.startswith("before\nTraceback (most recent call last):")

    syntax = run_cell("def f(:", namespace={})
    assert syntax.error is not None
    assert syntax.error.splitlines()[-1].startswith("SyntaxError:")

    interrupted = run_cell("print('partial')\nraise KeyboardInterrupt", namespace={})
    assert interrupted.interrupted and interrupted.is_error
    assert interrupted.text == f"partial\n{INTERRUPTED_CELL}"


def test_run_cell_needs_a_namespace_without_a_shell() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        run_cell("1")


def test_run_cell_in_an_ipython_shell_captures_everything_and_shows_nothing(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    count = shell.execution_count
    out = run_cell("x = 20\nprint('hello')\nx + 22", shell=shell)
    assert out == CellOutput(stdout="hello\n", results=("42",))
    assert shell.user_ns["x"] == 20
    assert shell.execution_count == count  # store_history=False
    assert shell.user_ns["Out"] == {}

    shown = run_cell("from IPython.display import display\ndisplay({'a': 1})\n'last'", shell=shell)
    assert shown.results == ("{'a': 1}", "'last'")

    failed = run_cell("def f():\n    return 1 / 0\nf()", shell=shell)
    assert failed.error is not None
    assert failed.error.splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert "    return 1 / 0" in failed.error
    assert "interactiveshell.py" not in failed.error

    syntax = run_cell("def f(:", shell=shell)
    assert syntax.error is not None and "SyntaxError" in syntax.error.splitlines()[-1]

    interrupted = run_cell("print('partial')\nraise KeyboardInterrupt", shell=shell)
    assert (interrupted.stdout, interrupted.interrupted) == ("partial\n", True)

    assert capsys.readouterr() == ("", "")  # no traceback or Out[] reached the notebook
    assert "_showtraceback" not in vars(shell)  # the shell's own method is back


UNDECODABLE_CELL = """\
import os, sys
name = os.fsdecode(b"caf\\xe9.csv")  # a Latin-1 file name, as os.listdir gives it
print(name)
print(name, file=sys.stderr)
class Shown:
    def __repr__(self):
        return name
Shown()"""


@pytest.mark.parametrize("where", ["namespace", "shell"])
def test_run_cell_replaces_surrogates_in_everything_it_captures(
    where: str, request: pytest.FixtureRequest
) -> None:
    place: dict[str, Any] = (
        {"shell": request.getfixturevalue("shell")} if where == "shell" else {"namespace": {}}
    )
    out = run_cell(UNDECODABLE_CELL, **place)
    assert out == CellOutput("caf\ufffd.csv\n", "caf\ufffd.csv\n", ("caf\ufffd.csv",))
    failed = run_cell("raise ValueError(name)", **place)
    assert failed.error is not None
    assert failed.error.splitlines()[-1] == "ValueError: caf\ufffd.csv"
    for text in (out.text, failed.text):
        text.encode("utf-8")  # loggable


def test_plain_namespace_cells_keep_a_bounded_number_of_sources_in_linecache() -> None:
    namespace: dict[str, Any] = {}
    run_cell("def f():\n    return 1 / 0", namespace=namespace)
    out = run_cell("f()", namespace=namespace)  # f's cell is recent: its line is shown
    assert out.error is not None and "    return 1 / 0" in out.error.splitlines()
    for i in range(3 * CELL_SOURCES_KEPT):
        run_cell(f"x = {i}", namespace=namespace)
    cells = [name for name in linecache.cache if name.startswith("<agent-cell-")]
    assert len(cells) == CELL_SOURCES_KEPT
    assert linecache.getline(cells[-1], 1) == f"x = {3 * CELL_SOURCES_KEPT - 1}"


def test_running_a_cell_in_a_plain_namespace_does_not_import_ipython() -> None:
    code = (
        "import sys\n"
        "from dashr_ext._cells import run_cell\n"
        "assert run_cell('6 * 7', namespace={}).text == '42'\n"
        "print('IPython' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
