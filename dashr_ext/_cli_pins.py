"""The ``dashr pin``, ``dashr pins`` and ``dashr unpin`` commands (:mod:`._cli` runs them).

    dashr pin FILE TEXT…     pin a statement every checkpoint carries verbatim
    dashr pins FILE          the current pins, one ``ID  TEXT`` line each
    dashr unpin FILE ID      unpin one

``pin`` and ``unpin`` open the session for writing (its writer lock), ``pins`` read-only.
A refusal (an empty text, pins that would not fit the checkpoint budget, an unknown id) is
one line on stderr and exit status 1; the file is left as it was.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._controller import Dashr

__all__ = ["PIN_COMMANDS", "add_pin_parsers"]


def add_pin_parsers(sub: Any) -> None:
    """Add the three pin commands to the ``dashr`` subparsers ``sub``."""
    pin = sub.add_parser(
        "pin",
        help="pin a statement every checkpoint of the session carries verbatim",
        description="Pin a statement: every later checkpoint carries it verbatim, first, inside "
        "its budget. Refused (exit status 1, the file untouched) when the pins would not fit "
        "the room the checkpoint budget (max_summary_tokens) leaves for them.",
    )
    pin.add_argument("file", type=Path)
    pin.add_argument("text", nargs="+", metavar="TEXT", help="the statement (words are joined)")
    pins = sub.add_parser("pins", help="list the session's pins: id and text")
    pins.add_argument("file", type=Path)
    unpin = sub.add_parser("unpin", help="unpin a statement (an id dashr pins lists)")
    unpin.add_argument("file", type=Path)
    unpin.add_argument("id", metavar="ID", help="the pin's id, e.g. pin12")


def _open(path: Path, read_only: bool = False) -> Dashr:
    """The session ``path`` names, once it is known to be a regular file (a directory or a
    FIFO is refused saying what it is; a missing file says ``no such file``)."""
    from ._cliparse import session_file_hint
    from ._controller import Dashr
    from ._recall.index_files import regular_file

    return Dashr.open(regular_file(path, session_file_hint()), read_only=read_only)


def _cmd_pin(args: argparse.Namespace) -> int:
    with _open(args.file) as d:
        pinned = d.pin(" ".join(args.text))
    print(f"pinned {pinned.id}: {pinned.text}")
    return 0


def _cmd_pins(args: argparse.Namespace) -> int:
    with _open(args.file, read_only=True) as d:
        current = d.pins()
    if not current:
        print("no pins")
    for pin in current:
        print(f"{pin.id}  {pin.text}")
    return 0


def _cmd_unpin(args: argparse.Namespace) -> int:
    with _open(args.file) as d:
        removed = d.unpin(args.id)
    print(f"unpinned {removed.id}: {removed.text}")
    return 0


PIN_COMMANDS = {"pin": _cmd_pin, "pins": _cmd_pins, "unpin": _cmd_unpin}
"""Command name -> its function."""
