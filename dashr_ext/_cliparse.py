"""argparse for the ``dashr`` command: one-line errors, help as wide as the terminal, bounded
integers, and the command's own name as its hints spell it (:mod:`._cli` holds the
commands)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Parser", "command_name", "count", "dash_hint", "session_file_hint"]


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's formatter, as wide as shutil makes it, with no import of shutil (bz2, lzma)."""
    columns = 0
    with contextlib.suppress(KeyError, ValueError):
        columns = int(os.environ["COLUMNS"])
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no stdout (None), or not a terminal
            columns = 80
    return argparse.HelpFormatter(prog, width=columns - 2)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, naming ``--help`` (no usage dump); a
    search phrase read as an option (``dashr search FILE "->"``) is told to follow ``--``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"formatter_class": _formatter, **kwargs})

    def error(self, message: str) -> Any:  # one line, no usage dump
        head, _, rest = message.partition("unrecognized arguments: ")
        if not head:
            message += dash_hint(rest.split(), f"{command_name()} search FILE", shlex.quote)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def dash_hint(words: Iterable[str], command: str, quote: Callable[[str], str] = str) -> str:
    """What to add to a usage error when one of ``words`` starts with a single ``-`` (argparse
    read a search phrase such as ``->`` as an option): that it goes after ``--``, as
    ``command`` takes it (the word written with ``quote``); "" when none does."""
    dashed = next((w for w in words if w.startswith("-") and not w.startswith("--")), None)
    if dashed is None:
        return ""
    return f"; a phrase starting with '-' goes after '--' ({command} -- {quote(dashed)})"


def count(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {text}")
        return value

    parse.__name__ = "int"  # argparse names it: "invalid int value: 'x'", as for type=int
    return parse


def command_name() -> str:
    """How to run this command here, as the hints it prints spell it (so they run as typed).

    ``dashr`` when a ``dashr`` executable is on ``PATH``; else the console script beside
    the interpreter running this (``.venv/bin/dashr`` after ``.venv/bin/pip install .``
    without an activated environment; relative to the working directory when under it);
    else ``<python> -m dashr_ext``. The lookup is :func:`shutil.which`'s, without importing
    shutil (a one-off ``dashr search`` would pay for the compression modules it imports).
    """
    if _executable(os.environ.get("PATH", os.defpath).split(os.pathsep)):
        return "dashr"
    beside = _executable([os.path.dirname(sys.executable)])
    if beside is not None:
        relative = os.path.relpath(beside)
        return shlex.quote(relative if not relative.startswith(os.pardir) else beside)
    return f"{shlex.quote(sys.executable)} -m dashr_ext"


def session_file_hint() -> str:
    """What a command that reads a session takes, as its errors end: the commands that write
    one, spelt as :func:`command_name` spells them."""
    cmd = command_name()
    return f"give a session file (.jsonl), as {cmd} demo --out FILE or {cmd} import writes one"


def _executable(directories: Iterable[str]) -> str | None:
    """The first ``dashr`` executable in ``directories``, else None."""
    names = ("dashr.exe", "dashr") if sys.platform == "win32" else ("dashr",)
    for directory in directories:
        for name in names:
            candidate = os.path.join(directory or os.curdir, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None
