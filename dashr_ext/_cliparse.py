"""argparse for the ``dashr`` command: one-line errors, help as wide as the terminal, bounded
integers (:mod:`._cli` holds the commands)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Parser", "count", "dash_hint"]


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
            message += dash_hint(rest.split(), "dashr search FILE", shlex.quote)
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
