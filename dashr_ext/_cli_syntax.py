"""The ``dashr`` command as its own output names it: hints that run as typed.

A hint the CLI prints is a command line: ``dashr read demo.jsonl c39`` when ``dashr`` is on
``PATH`` (the console script of an installed package), else the same command through the
interpreter that runs this one, ``/path/to/python -m dashr_ext read demo.jsonl c39`` (after
``.venv/bin/pip install .`` without an activated environment, ``dashr`` is not on ``PATH``):
:func:`~._cliparse.command_name`. :class:`CommandSyntax` spells recall's hints
(:mod:`dashr_ext._recall.syntax`) that way.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ._cliparse import command_name
from ._recall.syntax import Syntax

__all__ = ["CommandSyntax", "command_name"]


class CommandSyntax(Syntax):
    """Recall's hints as ``dashr`` commands on the session file ``file``."""

    def __init__(self, file: Path | str) -> None:
        self.command = command_name()
        self.file = shlex.quote(str(file))

    def outline(self) -> str:
        return f"{self.command} outline {self.file}"

    def read(
        self,
        checkpoint: str | None = None,
        seq: int | str | None = None,
        turn: int | str | None = None,
    ) -> str:
        if checkpoint is not None:
            where = checkpoint
        else:
            where = f"--turn {turn}" if turn is not None else f"--seq {seq}"
        return f"{self.command} read {self.file} {where}"

    def search(self, phrase: str | None = None) -> str:
        words = shlex.quote(phrase) if phrase is not None else "PHRASE"
        return f"{self.command} search {self.file} {words}"

    def argument(self, name: str, value: str | None = None) -> str:
        return f"--{name}" if value is None else f"--{name} {shlex.quote(value)}"

    def next_page(self, token: str) -> str | None:
        return f"next page: {self.command} read {self.file} --cursor {token}"
