"""``%dashr`` subcommands: one small function each, dispatched from :data:`SUBCOMMANDS`.

Each takes the ``Dashr`` configurable (seen through :class:`Host`) and the subcommand's
parsed arguments, and returns what the cell shows: a :class:`~dashr_ext._display.Report`,
or a :class:`~.sessions.SessionTable` (SPEC §9). ``%dashr status`` displays its report and
returns None instead, so it shows wherever it runs: a script (``ipython run.ipy``) shows no
cell results. Every error is a one-line ``UsageError`` in magic syntax.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from .._controller import Dashr as DashrController
from .._display import Report, status_report
from .._pins import pin_room, pins_tokens
from .._recall.turns import turn_listing
from ..errors import SessionLockedError
from .arguments import NOT_AN_INT, one_line_errors
from .attachment import NAMESPACE_NAMES, locked_error, sessions_dir
from .options import COMPACTION_TRAITS, OPTION_GROUPS, RECALL_TRAITS
from .sessions import last_session, session_table
from .snapshot import SNAPSHOT_WARNING, load_snapshot, refuse_symlink, save_snapshot

__all__ = [
    "COMMANDS",
    "MANUAL",
    "SUBCOMMANDS",
    "USAGE",
    "Host",
    "Subcommand",
    "documented",
    "rest_of_line",
    "run",
]

SESSIONS_LIMIT = 10
"""How many files ``%dashr sessions`` lists unless ``--limit`` says otherwise."""


class Host(Protocol):
    """What a subcommand needs of the ``Dashr`` configurable (its options are read by name)."""

    shell: InteractiveShell | None

    @property
    def session_dir(self) -> str | None: ...

    @property
    def controller(self) -> DashrController: ...

    def attach(self, path: str | Path, read_only: bool = False) -> DashrController: ...

    def push(self) -> None: ...


def status(host: Host, args: argparse.Namespace) -> None:
    report = status_report(host.controller)
    shell = host.shell
    if shell is None or shell.display_formatter is None:
        print(report)
        return
    data, metadata = shell.display_formatter.format(report)  # type: ignore[no-untyped-call]
    shell.display_pub.publish(data=data, metadata=metadata)


def config(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    live = {n: getattr(c.config, n) for n in COMPACTION_TRAITS}
    live.update({n: getattr(c.recall_config, n) for n in RECALL_TRAITS})
    rows: list[tuple[str, object]] = [
        (name, repr(live[name] if name in live else getattr(host, name)))
        for _group, _summary, names in OPTION_GROUPS
        for name in names
    ]
    return Report.of(
        "dashr configuration — change with %config Dashr.NAME = VALUE",
        rows,
        (f"session file: {c.session.path or '(in memory)'}",),
        kind="config",
    )


def _directory(host: Host) -> Path:
    return sessions_dir(host.session_dir)


def _attached(host: Host) -> Path | None:
    return host.controller.session.path


def sessions(host: Host, args: argparse.Namespace) -> object:
    if args.limit is not None and args.limit < 1:
        _usage_error("sessions", f"--limit: expected an integer >= 1, got {args.limit}")
    directory = Path(args.dir).expanduser() if args.dir else _directory(host)
    return session_table(directory, args.limit or SESSIONS_LIMIT, _attached(host))


def attach(host: Host, args: argparse.Namespace) -> Report:
    if (args.path is None) != bool(args.last):
        given = "both" if args.last else "neither"
        _usage_error("attach", f"give a session file PATH or --last ({given} given)")
    if args.last:
        target = last_session(_directory(host), _attached(host))
    else:
        target = Path(args.path).expanduser()
        if not target.is_file():
            raise UsageError(
                f"no such session file: {target}; %dashr sessions lists the recent ones"
            )
    try:
        c = host.attach(target, read_only=args.read_only)
    except SessionLockedError:
        raise locked_error(target) from None
    notes = ["dashr, dashr_compaction_archive and history_* now use this session"]
    if c.session.read_only:
        notes.append(
            "read-only: nothing is recorded or compacted here; %dashr attach PATH (without "
            "--read-only) continues it once no other kernel is writing it"
        )
    return Report.of(
        f"attached session {c.session.id}" + (" (read-only)" if c.session.read_only else ""),
        [
            ("session file", c.session.path),
            ("events", len(c.session)),
            ("checkpoints", len(c.checkpoints())),
            ("archive", f"{len(c.archive)} entries"),
        ],
        notes,
        kind="attach",
    )


def export(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    source = c.session.path
    if source is None:
        raise UsageError("this session is in memory only; there is no file to export")
    if not source.exists():
        raise UsageError(f"nothing recorded yet: {source} is written from the first record on")
    target = Path(args.path).expanduser()
    refuse_symlink(target)
    if target.exists():
        raise UsageError(f"{target} already exists; choose a new path")
    target.parent.mkdir(parents=True, exist_ok=True)
    _copy_private(source, target)
    return Report.of(
        f"exported session {c.session.id}",
        [("from", source), ("to", target), ("events", len(c.session))],
        kind="export",
    )


def _copy_private(source: Path, target: Path) -> None:
    """Copy ``source`` to a new file ``target`` of mode 0600, the session file's own.

    ``O_EXCL`` refuses an existing name, a symbolic link included; a failed copy is removed.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise UsageError(f"{target} already exists; choose a new path") from None
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as log:
            shutil.copyfileobj(log, out)
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def snapshot_save(host: Host, args: argparse.Namespace) -> Report:
    assert host.shell is not None
    target = Path(args.path).expanduser()
    saved, skipped = save_snapshot(host.shell, target, exclude=NAMESPACE_NAMES)
    notes = [f"not picklable, skipped: {', '.join(skipped)}"] if skipped else []
    notes.append(f"{', '.join(NAMESPACE_NAMES)} are re-bound by the extension, not saved")
    return Report.of(
        f"saved a snapshot of {len(saved)} names",
        [("file", target), ("names", ", ".join(saved) or "(none)")],
        notes,
        kind="snapshot",
    )


def snapshot_load(host: Host, args: argparse.Namespace) -> Report:
    assert host.shell is not None
    target = Path(args.path).expanduser()
    if not target.is_file():
        raise UsageError(f"no such snapshot file: {target}")
    print(SNAPSHOT_WARNING)
    loaded = load_snapshot(host.shell, target)
    host.push()
    return Report.of(
        f"loaded a snapshot of {len(loaded)} names",
        [("file", target), ("names", ", ".join(loaded) or "(none)")],
        (f"{', '.join(NAMESPACE_NAMES)} are bound to the live session again",),
        kind="snapshot",
    )


def pin(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    pinned = c.pin(args.text)
    return Report.of(
        f"pinned {pinned.id}",
        [("text", pinned.text), ("pins", len(c.pins()))],
        (f"every checkpoint from now on carries it verbatim; %dashr unpin {pinned.id} drops it",),
        kind="pins",
    )


def pins(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    current = c.pins()
    if not current:
        return Report.of("no pins; %dashr pin TEXT pins a statement", kind="pins")
    budget = c.config.summary_budget
    tokens = pins_tokens(current, c.meter.count_text)
    return Report.of(
        f"{len(current)} pin{'' if len(current) == 1 else 's'}, carried first by every checkpoint",
        [(p.id, p.text) for p in current],
        (
            f"~{tokens} tokens of the {pin_room(budget)} the checkpoint budget "
            f"({budget} tokens) leaves for pins; %dashr unpin ID drops one",
        ),
        kind="pins",
    )


def unpin(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    removed = c.unpin(args.id)
    return Report.of(
        f"unpinned {removed.id}",
        [("text", removed.text), ("pins left", len(c.pins()))],
        ("later checkpoints leave it out",),
        kind="pins",
    )


BACKFILL_HINT = (
    "dashr compact FILE --turns compresses them offline (from a shell, while no kernel has "
    "the session attached)"
)
"""How a ``%dashr turns`` note says to compress the turns turn memory never covered."""


def turns(host: Host, args: argparse.Namespace) -> Report:
    c = host.controller
    with c.session.lock:
        records = c.turns()
        listing = turn_listing(records, c.session.events, c.session.id, BACKFILL_HINT)
    return Report.of(listing.title, listing.rows, listing.notes, kind="turns")


# --------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class Subcommand:
    """One ``%dashr`` subcommand: its function, its usage forms, its arguments."""

    handler: Callable[[Host, argparse.Namespace], object]
    forms: tuple[str, ...]
    """Its usage forms after ``%dashr``, e.g. ``("attach PATH [--read-only]", …)``."""
    positional: str | None = None
    """The metavar of its one positional argument (``PATH``, ``DIR``), if any."""
    optional: bool = False
    """Whether that positional may be left out."""
    options: Mapping[str, type] = field(default_factory=dict)
    """Its options: ``bool`` a flag, ``int`` one integer value."""
    rest: bool = False
    """Whether its positional is the rest of the line as typed (``pin TEXT…``), not split."""

    @property
    def usage(self) -> str:
        return " | ".join(f"%dashr {form}" for form in self.forms)

    def parse(self, name: str, words: Sequence[str]) -> argparse.Namespace:
        """``words`` parsed; a bad one is a UsageError naming this subcommand's usage."""
        parser = _Parser(name, self.usage)
        if self.positional is not None:
            parser.add_argument(self.positional.lower(), nargs="?" if self.optional else None)
        for flag, kind in self.options.items():
            if kind is bool:
                parser.add_argument(flag, action="store_true")
            else:
                parser.add_argument(flag, type=kind)
        return parser.parse_args(list(words))


class _Parser(argparse.ArgumentParser):
    def __init__(self, name: str, usage: str) -> None:
        super().__init__(prog=f"%dashr {name}", usage=usage, add_help=False, allow_abbrev=False)

    def error(self, message: str) -> NoReturn:
        message = NOT_AN_INT.sub(r"\1: expected an integer, got \2", message)
        raise UsageError(f"{self.prog}: {message}; usage: {self.usage}")


def _usage_error(name: str, message: str) -> NoReturn:
    raise UsageError(f"%dashr {name}: {message}; usage: {SUBCOMMANDS[name].usage}")


SUBCOMMANDS: Mapping[str, Subcommand] = {
    "status": Subcommand(status, ("status",)),
    "config": Subcommand(config, ("config",)),
    "sessions": Subcommand(
        sessions, ("sessions [DIR] [--limit N]",), "DIR", optional=True, options={"--limit": int}
    ),
    "attach": Subcommand(
        attach,
        ("attach PATH [--read-only]", "attach --last [--read-only]"),
        "PATH",
        optional=True,
        options={"--last": bool, "--read-only": bool},
    ),
    "export": Subcommand(export, ("export PATH",), "PATH"),
    "snapshot save": Subcommand(snapshot_save, ("snapshot save PATH",), "PATH"),
    "snapshot load": Subcommand(snapshot_load, ("snapshot load PATH",), "PATH"),
    "pin": Subcommand(pin, ("pin TEXT…",), "TEXT", rest=True),
    "pins": Subcommand(pins, ("pins",)),
    "unpin": Subcommand(unpin, ("unpin ID",), "ID"),
    "turns": Subcommand(turns, ("turns",)),
}
"""``%dashr`` subcommand (``snapshot`` takes a second word) -> its :class:`Subcommand`."""

COMMANDS: tuple[str, ...] = tuple(dict.fromkeys(key.split()[0] for key in SUBCOMMANDS))
"""The first words ``%dashr`` accepts."""

USAGE = " | ".join(form for sub in SUBCOMMANDS.values() for form in sub.forms)
"""Every form, for the usage line."""


MANUAL = """Inspect and manage this kernel's dashr session.

Subcommands:

  status               session, request tokens against the trigger, checkpoints, archive
  config               the effective configuration (change it with %config Dashr.NAME = …)
  sessions [DIR]       the recent session files (newest first: time, events, checkpoints,
                       first user message); --limit N lists N (default 10)
  attach PATH          switch to another session file (e.g. after a kernel restart);
                       the session, surface and archive are rebuilt from its log;
                       --last: the newest other session with anything recorded;
                       --read-only: no lock, nothing recorded (a file another kernel
                       is writing)
  export PATH          copy the session's JSONL log to PATH (a new file)
  snapshot save PATH   save the user namespace with dill; unpicklable names are skipped
  snapshot load PATH   load a snapshot: this runs code from the file, so only load
                       files you saved yourself
  pin TEXT…            pin a statement: every checkpoint from now on carries it verbatim,
                       first; the rest of the line is the text (quotes around all of it
                       are dropped); refused when the pins would not fit the checkpoint
                       budget (max_summary_tokens)
  pins                 the current pins (id and text) and the tokens they take
  unpin ID             unpin one (an id %dashr pins lists)
  turns                turn memory's jobs, one line per completed turn it covered: pending,
                       landed (nodes and tokens before → after, the archive key t<seq>),
                       no-op or failed (with the reason); %history_read --turn N reads a
                       turn's original events

Pins are recorded in the log: %dashr attach PATH after a restart brings them back.

Examples::

  %dashr status
  %dashr sessions
  %dashr attach --last
  %dashr attach --read-only ~/.dashr/sessions/20261130T012227123Z-3f9a1c.jsonl
  %dashr pin Never push to main: open a pull request
  %dashr unpin pin12
  %dashr turns
"""
"""The ``%dashr`` magic's manual (``%dashr?`` shows it, with the usage line first)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def documented(magic: _F) -> _F:
    """The ``%dashr`` magic with :data:`MANUAL` as its docstring (decorate before IPython's
    ``magic_arguments`` reads it)."""
    magic.__doc__ = MANUAL
    return magic


def rest_of_line(line: str) -> tuple[str, list[str]] | None:
    """``(command, [text])`` when ``line`` is a subcommand that takes the rest of the line
    as it stands (``pin TEXT…``: no splitting, so quotes and dashes in it are kept; quotes
    around the whole of it are dropped); None for every other line."""
    parts = line.split(None, 1)
    sub = SUBCOMMANDS.get(parts[0]) if parts else None
    if sub is None or not sub.rest:
        return None
    text = parts[1].strip() if len(parts) > 1 else ""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" and text[0] not in text[1:-1]:
        text = text[1:-1]
    return parts[0], [text]


def run(host: Host, command: str | None, words: list[str]) -> Any:
    """``%dashr COMMAND WORD…``: parse the words for that subcommand and run it (for one
    taking the rest of the line, ``words`` is that text: see :func:`rest_of_line`)."""
    if command is None:
        raise UsageError(f"%dashr needs a subcommand: {USAGE} (%dashr? shows the manual)")
    key = command
    if command == "snapshot":
        if not words or words[0] not in ("save", "load"):
            raise UsageError(
                f"%dashr snapshot: give save or load; usage: {SUBCOMMANDS['snapshot save'].usage}"
                f" | {SUBCOMMANDS['snapshot load'].usage}"
            )
        key = f"snapshot {words.pop(0)}"
    sub = SUBCOMMANDS[key]
    if sub.rest:
        if not words or not words[0].strip():
            _usage_error(key, f"give the {sub.positional} to {key}")
        args = argparse.Namespace(**{str(sub.positional).lower(): words[0]})
    else:
        args = sub.parse(key, words)
    with one_line_errors():
        return sub.handler(host, args)
