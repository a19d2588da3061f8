"""``dashr`` (also ``python -m dashr_ext``): work with session files from the command line.

    dashr demo [--out FILE]            build, compact and recall a realistic demo session
    dashr inspect FILE                 events, turns, checkpoints, request tokens
    dashr outline FILE                 the history_outline text
    dashr read FILE c42 | --seq N | --turn N | --cursor TOKEN
    dashr search FILE QUERY [--checkpoint c42] [--limit N] [--cursor TOKEN]
    dashr search --all [DIR] QUERY [--limit N]    (DIR: $DASHR_HOME/sessions by default)
    dashr compact FILE [--prune-only] [--recency-window-tokens N] [--retain-tokens N]
    dashr turns FILE | dashr compact FILE --turns    turn memory's jobs; run them offline
    dashr import FILE [--format openai] [-o OUT.jsonl]
    dashr pin FILE TEXT… | dashr pins FILE | dashr unpin FILE ID
    dashr agent --kernel CONNECTION_FILE | --start [--base-url URL] [--model M] TASK

Errors print one line to stderr and exit with status 2 (bad usage) or 1 (bad input); they
name ``dashr`` commands and flags, not the Python calls behind them, and so do the hints of
the results: spelt ``dashr`` when that is on ``PATH``, else the console script beside the
interpreter or ``<python> -m dashr_ext`` (:func:`~._cliparse.command_name`), so that they
run as typed. ``dashr compact`` exits
with status 3 when its passes are committed but the request is still above the trigger; one
line on stderr says by how much and why. A pass longer than a second prints one stderr line
per phase (``dashr compact: summarizing 1 region (1.0 s)``). Output piped into a reader
that stops early (``dashr outline FILE | head``) ends quietly with status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._cli_demo import add_demo_parser, cmd_demo
from ._cli_pins import PIN_COMMANDS, add_pin_parsers
from ._cliparse import Parser as _Parser
from ._cliparse import command_name, session_file_hint
from ._cliparse import count as _count
from ._config import ENGINES, CompactionConfig, RecallConfig
from .errors import DashrError

if TYPE_CHECKING:
    from ._compaction.prune import PruneResult
    from ._controller import Dashr

__all__ = ["main"]


class _UsageError(Exception):
    """Arguments that parse but do not go together: status 2, like argparse's own errors."""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dashr", description="Recallable context compaction for LLM agent sessions.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    add_demo_parser(sub)

    inspect = sub.add_parser("inspect", help="summarize a session file")
    inspect.add_argument("file", type=Path)

    outline = sub.add_parser("outline", help="print the history outline")
    outline.add_argument("file", type=Path)

    read = sub.add_parser("read", help="read a checkpoint's originals, or forward from a seq")
    read.add_argument("file", type=Path)
    read.add_argument("checkpoint", nargs="?", help="checkpoint id, e.g. c42")
    read.add_argument("--seq", type=_count(0), help="read forward from this event seq")
    read.add_argument("--turn", type=_count(1), help="read this turn's original events")
    read.add_argument("--cursor", help="the token after 'cursor:' on a previous page")

    search = sub.add_parser("search", help="literal, case-insensitive search of the history")
    search.add_argument("file", metavar="FILE", help="the session file (with --all: DIR, optional)")
    search.add_argument("query", nargs="?", metavar="QUERY")
    search.add_argument("--checkpoint")
    search.add_argument(
        "--all",
        action="store_true",
        help="search every session file in DIR (default: $DASHR_HOME/sessions) through its "
        "index, DIR/.dashr-index.sqlite3 (built and updated from the logs)",
    )
    search.add_argument(
        "--limit",
        type=_count(1, RecallConfig().search_max_hits),
        help=f"hits per page (at most {RecallConfig().search_max_hits}); a page that stops "
        "short names the --cursor of the next",
    )
    search.add_argument("--cursor", help="the next page: the token a page that stops short names")

    compact = sub.add_parser(
        "compact",
        help="prune oversize outputs, then run one compaction pass on a session file",
        description="Prune oversize outputs (no model call), then run one summary pass; print "
        "what each did. When the request is still above the trigger afterwards, one line on "
        "stderr says by how much and why.",
        epilog="exit status: 0 done; 3 done (the passes are committed) but the request is "
        "still above the trigger; 1 bad input; 2 bad usage",
    )
    compact.add_argument("file", type=Path)
    compact.add_argument(
        "--turns",
        action="store_true",
        help="turn memory, offline (extractive), over every completed turn without a closed job "
        "(those it never covered too: an open never backfills them); status 1: one failed",
    )
    compact.add_argument(
        "--prune-only",
        action="store_true",
        help="only prune: every tool output and assistant text above the pruning threshold "
        "outside the retained tail, and any message above the oversize share; no summary pass",
    )
    # Without a flag, the settings the session's log records apply (defaults otherwise).
    compact.add_argument("--engine", choices=list(ENGINES))
    compact.add_argument(
        "--recency-window-tokens",
        type=int,
        help="compact above this many tokens; without --retain-tokens a pass keeps the retain "
        "budget the session records when below it, else the share of the trigger its retain "
        "and threshold ratios keep (20%% by default)",
    )
    compact.add_argument("--retain-tokens", type=int)
    compact.add_argument("--context-window-tokens", type=int)

    turns = sub.add_parser("turns", help="list turn memory's jobs, one line per turn")
    turns.add_argument("file", type=Path)

    imp = sub.add_parser("import", help="turn OpenAI chat messages into a session file")
    imp.add_argument(
        "file",
        type=Path,
        help='a JSON list of messages, {"messages": [...]}, or JSON Lines of messages',
    )
    imp.add_argument("--format", default="openai", choices=["openai"], help="(default: openai)")
    imp.add_argument("-o", "--output", type=Path, help="session file to write")
    add_pin_parsers(sub)
    _agent_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status."""
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit:
            sys.stdout.flush()  # `dashr --help | head`: a reader gone away shows here
            raise
        return _run(args)
    except BrokenPipeError:
        # The reader went away (`dashr outline f | head`): it took what it wanted, so stop
        # quietly and successfully, as `cat` or `grep` do.
        _drop_stdout()
        return 0


def _run(args: argparse.Namespace) -> int:
    handler = _COMMANDS[args.command]
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader gone away shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        raise  # an OSError, but not a bad input: main() ends quietly
    except _UsageError as exc:
        print(f"dashr {args.command}: error: {exc} (see --help)", file=sys.stderr)
        return 2
    except (DashrError, OSError, ValueError) as exc:
        flags = args.command != "agent"  # agent takes settings as --set NAME=VALUE
        message = _cli_wording(_one_line(exc), getattr(args, "file", None), flags=flags)
        print(f"dashr {args.command}: {message}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Point stdout at devnull, so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _print_out(lines: Sequence[str]) -> None:
    """Print ``lines``; a reader that went away (``| head``) only stops the printing."""
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and exc.filename:
        text = f"no such file: {exc.filename}"
    return " ".join(text.split())


_FLAGS = ("recency_window_tokens", "retain_tokens", "context_window_tokens")
"""Settings the commands take as flags: an error names ``--retain-tokens``, not the field."""


def _cli_wording(message: str, file: Path | None, *, flags: bool = True) -> str:
    """``message`` with the Python calls and fields it names given as ``dashr`` commands
    (and, with ``flags``, the settings a command takes as flags as those flags)."""
    path = shlex.quote(str(file)) if file is not None else "FILE"
    cmd = command_name()
    calls = (
        (r"history_outline\(\)", lambda m: f"{cmd} outline {path}"),
        (r'history_read\((?:checkpoint=)?"([cp]\d+)"\)', lambda m: f"{cmd} read {path} {m[1]}"),
        (r"history_read\(seq=(\d+)\)", lambda m: f"{cmd} read {path} --seq {m[1]}"),
        (r"history_read\(cursor=<[^>]*>\)", lambda m: f"{cmd} read {path} --cursor TOKEN"),
        (r'history_search\(("[^"]*"|query)\)', lambda m: f"{cmd} search {path} {m[1]}"),
        (r"\bhistory_read page\b", lambda m: "dashr read page"),
        (r"\bhistory_search page\b", lambda m: "dashr search page"),
        # A session another writer holds: the commands that only read it still do.
        (r"open it with read_only=True to inspect it", lambda m: f"{cmd} inspect {path} reads it"),
        (r"open it with read_only=True", lambda m: f"{cmd} inspect, outline and read read it"),
    )
    for pattern, command in calls:
        message = re.sub(pattern, command, message)
    for field in _FLAGS if flags else ():
        message = re.sub(rf"\b{field}\b", "--" + field.replace("_", "-"), message)
    return message


# --------------------------------------------------------------------------- commands


def _regular(path: Path, accepted: str | None = None) -> Path:
    """``path`` when it is a regular file (a FIFO or a device is never read); else an error
    saying what it is and what the command takes (by default: a session file)."""
    from ._recall.index_files import regular_file

    return regular_file(path, session_file_hint() if accepted is None else accepted)


def _open_read_only(path: Path) -> Any:
    from ._cli_syntax import CommandSyntax
    from ._controller import Dashr

    d = Dashr.open(_regular(path), read_only=True)
    d.recall.syntax = CommandSyntax(path)  # the results' hints name dashr commands
    return d


def _cmd_inspect(args: argparse.Namespace) -> int:
    with _open_read_only(args.file) as d:
        s = d.session
        measured = d.measure()
        print(f"session {s.id} ({s.path})")
        print(f"events: {len(s)}; turns: {len(s.turns)}; messages in the request: {len(s.surface)}")
        print(
            f"request tokens: ~{measured.total:,} (~{measured.envelope:,} of them the system "
            "prompt and tool schemas)"
        )
        cps = d.checkpoints()
        print(f"checkpoints: {len(cps)}")
        for cp in cps:
            state = f"superseded by {cp.superseded_by}" if cp.superseded_by else "current"
            role = "" if cp.role == "summary" else f" ({cp.role})"
            print(
                f"  {cp.id}{role}: shadows {_events(len(cp.shadowed_seqs))}, "
                f"~{cp.shadowed_tokens:,} tokens, {cp.trigger}, {state}"
            )
    return 0


def _cmd_outline(args: argparse.Namespace) -> int:
    with _open_read_only(args.file) as d:
        print(d.history_outline())
    return 0


def _cmd_read(args: argparse.Namespace) -> int:
    given = [
        name
        for name, value in (
            ("CHECKPOINT", args.checkpoint),
            ("--seq", args.seq),
            ("--turn", args.turn),
            ("--cursor", args.cursor),
        )
        if value is not None
    ]
    if len(given) != 1:
        got = "none" if not given else " and ".join(given)
        raise _UsageError(
            "give exactly one of CHECKPOINT (e.g. c42), --seq N, --turn N or --cursor TOKEN "
            f"(got {got})"
        )
    with _open_read_only(args.file) as d:
        print(d.history_read(args.checkpoint, args.seq, args.cursor, args.turn))
    return 0


def _cmd_turns(args: argparse.Namespace) -> int:
    from ._recall.turns import turn_listing

    hint = f"{command_name()} compact {shlex.quote(str(args.file))} --turns compresses them"
    with _open_read_only(args.file) as d:
        listing = turn_listing(d.turns(), d.session.events, d.session.id, hint)
    print("\n".join(listing.lines()))
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    if args.all:
        return _search_all(args)
    if args.query is None:
        raise _UsageError("give FILE and QUERY, or --all [DIR] QUERY to search every session")
    from ._cli_syntax import CommandSyntax
    from ._recall import cold
    from ._recall.cursor import parse_search_cursor
    from ._recall.hits import Paging

    after = None if args.cursor is None else parse_search_cursor(args.cursor, sys.maxsize)
    paging = Paging(after, CommandSyntax(args.file))  # a cursor past the end: the replay says
    accepted = (
        f"{session_file_hint()}; {command_name()} search --all DIR QUERY searches every "
        "session in DIR"
    )
    _regular(Path(args.file), accepted)
    if cold.ENABLED:  # a scan of the file's bytes; None when only a replay gives the answer
        found = cold.cold_search(Path(args.file), args.query, args.checkpoint, args.limit, paging)
        if found is not None:
            print(found)
            return 0
    with _open_read_only(Path(args.file)) as d:
        found = d.history_search(args.query, args.checkpoint, args.limit, args.cursor)
        print(found)
    return 0


def _search_all(args: argparse.Namespace) -> int:
    from ._paths import dashr_home
    from ._recall.index import search_all

    if args.checkpoint is not None:
        raise _UsageError(
            "--checkpoint names a checkpoint of one session; it does not go with --all "
            f"({command_name()} search FILE QUERY --checkpoint c42 searches one)"
        )
    if args.query is None:  # `dashr search --all QUERY`: the default directory
        directory, query = dashr_home() / "sessions", args.file
    else:
        directory, query = Path(args.file), args.query
    args.file = directory  # errors name the directory
    if args.query is None and not directory.exists():
        raise ValueError(
            f"{directory}: no session directory yet (no session has been recorded under "
            f"$DASHR_HOME); give one: {command_name()} search --all DIR QUERY"
        )
    if not directory.is_dir():
        raise ValueError(
            f"{directory}: not a directory; --all searches every session file in DIR "
            "(default: $DASHR_HOME/sessions)"
        )
    print(search_all(directory, query, limit=args.limit))
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from ._compaction.report import still_above
    from ._controller import Dashr
    from ._progress import LineSink, Progress

    _regular(args.file)
    given = {
        name: value
        for name in ("engine", "context_window_tokens", "recency_window_tokens", "retain_tokens")
        if (value := getattr(args, name)) is not None
    }
    if args.turns:
        return _compact_turns(args, bool(given))
    config = None  # the settings the log records apply; flags given override them, unrecorded
    if given:
        with Dashr.open(args.file, read_only=True) as logged:
            config = logged.config.with_changes(**_retain_for_window(logged.config, given))
    with Dashr.open(args.file, config=config) as d:
        with Progress(lambda: LineSink(sys.stderr, "dashr compact")).watch(d):
            lines = _prune_only(d) if args.prune_only else _compact(d)
        with d.session.lock:
            above = still_above(d.session, d.measure(), d.config, count_tokens=d.meter.count_text)
    # The passes are committed: what they did goes out even when stdout's reader is gone.
    _print_out(lines)
    if above is None:
        return 0
    print(f"dashr compact: {above}", file=sys.stderr)
    return 3


def _compact_turns(args: argparse.Namespace, flags: bool) -> int:
    """``dashr compact FILE --turns``: turn memory on for this run only (not recorded), every
    completed turn without a closed job queued and run with the extractive compressor."""
    from ._controller import Dashr
    from ._recall.turns import compact_lines
    from ._turnmemory.backfill import extractive_compressor

    if args.prune_only or flags:
        raise _UsageError("--turns takes no --prune-only, --engine or other pass setting")
    with _open_read_only(args.file) as logged:
        config, before = logged.config.with_changes(turn_memory=True), logged.turns()
    with Dashr.open(args.file, config=config) as d:
        d.turn_compressor = extractive_compressor(d.meter.count_text, config.turn_read_max_chars)
        d.queue_turns()
        d.wait_for_turns()
        lines, failed = compact_lines(before, d.turns())
    _print_out(lines)  # the landings are committed: what they did goes out even without a reader
    return 1 if failed else 0


def _retain_for_window(logged: CompactionConfig, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with a retain budget for a ``--recency-window-tokens`` given without
    ``--retain-tokens``: the recorded ``retain_tokens`` when it is below the window, else the
    share of the trigger the ratios keep without a window (``retain_ratio /
    threshold_ratio``, 0.16 / 0.8 = 20% by default)."""
    window = given.get("recency_window_tokens")
    if window is None or "retain_tokens" in given:
        return given
    if logged.retain_tokens is not None and logged.retain_tokens < window:
        return given
    context = given.get("context_window_tokens", logged.context_window_tokens)
    trigger = min(window, int(logged.threshold_ratio * context))
    share = logged.retain_ratio / logged.threshold_ratio
    return {**given, "retain_tokens": max(1, int(share * trigger))}


def _compact(d: Dashr) -> list[str]:
    """``dashr compact``: the prune pass (if any), then the summary pass."""
    before = d.measure().total
    try:
        result = d.compact()
    except DashrError:
        if d.last_prune is not None:  # committed before the summary pass failed
            _print_out([_prune_line(d.last_prune)])
        raise
    lines = [] if d.last_prune is None else [_prune_line(d.last_prune)]
    if result is None and not lines:
        return [f"nothing to compact (~{before:,} tokens on the surface)"]
    if result is None:
        return [*lines, f"nothing to summarize (~{d.measure().total:,} tokens on the surface)"]
    made = ", ".join(result.checkpoints) if len(result.checkpoints) > 1 else result.checkpoint
    lines.append(
        f"{made}: shadowed {_events(len(result.shadowed_seqs))}; "
        f"~{result.tokens_before:,} -> ~{result.tokens_after:,} tokens"
    )
    return lines


def _events(n: int) -> str:
    return "1 event" if n == 1 else f"{n} events"


def _prune_only(d: Dashr) -> list[str]:
    """``dashr compact --prune-only``: one prune pass, old outputs included."""
    result = d.prune()
    if result is None:
        return [f"nothing to prune (~{d.measure().total:,} tokens on the surface)"]
    return [_prune_line(result)]


def _prune_line(result: PruneResult) -> str:
    from ._compaction.report import pruned_names

    saved = result.tokens_before - result.tokens_after
    return (
        f"pruned {pruned_names(result)}; ~{result.tokens_before:,} -> "
        f"~{result.tokens_after:,} tokens ({saved:,} saved)"
    )


def _cmd_import(args: argparse.Namespace) -> int:
    from ._controller import Dashr
    from ._formats.openai import IMPORT_ACCEPTS, import_messages

    text = _regular(args.file, f"import reads {IMPORT_ACCEPTS}").read_text(encoding="utf-8")
    data, tools = import_messages(text, str(args.file))
    # Convert and validate every message before any file exists: bad input leaves nothing.
    with Dashr.create(in_memory=True, tools=tools) as probe:
        probe.record_openai(data)
    output: Path | None = args.output
    if output is not None and (output.exists() or output.is_symlink()):
        raise ValueError(f"{output}: already exists (left untouched); choose another -o path")
    created: Path | None = None
    try:
        with Dashr.create(output, tools=tools) as d:
            created = d.session.path
            d.record_openai(data)
            events = len(d.session)
    except BaseException:
        # Only a file this command created (Dashr.create never opens an existing one).
        if created is not None:
            created.unlink(missing_ok=True)
        raise
    print(f"{created}: {events} events from {len(data)} messages")
    return 0


# --------------------------------------------------------------------------- dashr agent


def _agent_parser(sub: Any) -> None:
    agent = sub.add_parser(
        "agent",
        help="run one agent turn on a session in a Jupyter kernel",
        description="Run one turn of dashr_ext.agent.Agent: the model is called from here, the "
        "session and the run_cell tool's cells live in the kernel. The answer goes to stdout, "
        "a line per step and one on how the turn ended to stderr. The API key comes from "
        "DASHR_API_KEY (or DEEPSEEK_API_KEY, OPENAI_API_KEY), never from the command line.",
        epilog="exit status: 0 the turn ended (completed, or at --max-steps: stderr says "
        "which); 1 bad input, a model or kernel error; 2 bad usage; 130 interrupted",
    )
    agent.add_argument("task", help="the user's message")
    where = agent.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--kernel",
        type=Path,
        metavar="CONNECTION_FILE",
        help="a running kernel's connection file (loads the extension there if needed; the "
        "kernel keeps running)",
    )
    where.add_argument(
        "--start",
        action="store_true",
        help="start a kernel of this Python for the turn, shut it down afterwards",
    )
    agent.add_argument(
        "--session",
        type=Path,
        metavar="FILE",
        help="attach this session file in the kernel first (created if missing)",
    )
    agent.add_argument("--base-url", help="the endpoint's API root (default: env DASHR_BASE_URL)")
    agent.add_argument("--model", help="the model (default: env DASHR_MODEL)")
    agent.add_argument("--max-steps", type=int, help="most model calls in the turn (default 30)")
    agent.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Dashr option in the kernel, as %%config Dashr.NAME = VALUE (repeatable; VALUE "
        "is read as JSON, else as text), e.g. --set recency_window_tokens=20000",
    )
    agent.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for each kernel reply"
    )


def _settings(pairs: Sequence[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--set: expected NAME=VALUE, got {pair!r}")
        try:
            settings[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            settings[name.strip()] = text
    return settings


def _cmd_agent(args: argparse.Namespace) -> int:
    from ._client import ChatClient
    from .agent import Agent
    from .bridge import KernelSession

    settings = _settings(args.set)
    if args.kernel is not None:
        _regular(args.kernel, "give a running kernel's connection file (kernel-*.json)")
    # The endpoint is checked before a kernel starts; the key comes from the environment.
    with ChatClient(args.base_url, args.model, label="agent") as client:
        options = {"session_path": args.session, "timeout": args.timeout}
        if args.start:
            ks = KernelSession.start(**options)
        else:
            ks = KernelSession.connect(args.kernel, **options)
        with ks:
            if settings:
                ks.configure(**settings)
            limit = {} if args.max_steps is None else {"max_steps": args.max_steps}
            with Agent(ks, client=client, on_event=_step_line, **limit) as agent:
                try:
                    with _interrupting(ks):
                        reply = agent.run_turn(args.task)
                except KeyboardInterrupt:
                    print("dashr agent: interrupted; the turn ended 'interrupted'", file=sys.stderr)
                    return 130
            print(
                f"turn {reply.turn}: {reply.reason} in {len(reply.steps)} steps"
                + (f", compacted → {', '.join(reply.checkpoints)}" if reply.checkpoints else "")
                + f"; session {ks.session_path}",
                file=sys.stderr,
            )
    _print_out([reply])
    return 0


@contextlib.contextmanager
def _interrupting(ks: Any) -> Iterator[None]:
    """Ctrl-C interrupts the kernel too: the cell the model asked for stops, so the agent can
    record the turn as interrupted at once (a signal when this process runs the kernel, else
    an ``interrupt_request`` on the control channel)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        with contextlib.suppress(Exception):  # a kernel already gone: nothing to stop
            if ks.manager is not None:
                ks.manager.interrupt_kernel()
            else:
                client = ks.client
                client.control_channel.send(client.session.msg("interrupt_request", {}))
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _step_line(step: Any) -> None:
    print(step.line(), file=sys.stderr, flush=True)


_COMMANDS = {
    "demo": cmd_demo,
    "inspect": _cmd_inspect,
    "outline": _cmd_outline,
    "read": _cmd_read,
    "search": _cmd_search,
    "compact": _cmd_compact,
    "turns": _cmd_turns,
    "import": _cmd_import,
    **PIN_COMMANDS,
    "agent": _cmd_agent,
}


if __name__ == "__main__":
    raise SystemExit(main())
