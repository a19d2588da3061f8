"""The IPython extension: ``%load_ext dashr_ext``, the ``Dashr`` options and the magics.

Loading attaches a session (a new one in ``$DASHR_HOME/sessions/``, or the file named by
``Dashr.session_path``) and binds in the user namespace:

``dashr``
    the controller (:class:`dashr_ext.Dashr`);
``dashr_compaction_archive``
    its archive dict, the very same object as ``dashr.archive``;
``history_outline``, ``history_read``, ``history_search``
    its recall methods, so ``print(history_search("retry budget"))`` works in any cell.

Every option is a trait of the ``Dashr`` configurable (the magics object registered by the
extension; the controller class is :class:`dashr_ext.Dashr`). In ``ipython_config.py``::

    c.Dashr.recency_window_tokens = 500000
    c.Dashr.retain_tokens = 50000

or live, validated as a whole and applied to the live session at once::

    %config Dashr.retain_tokens = 50000
    %config Dashr.recency_window_tokens = 500000
    %config Dashr                  # every option with its help and current value

A rejected value leaves the old one in place and prints one line naming the field, the
accepted range and the value received. ``session_dir`` and ``session_path`` are read when the
extension loads; ``%dashr attach PATH`` switches sessions later.

Magics (``%name?`` shows each one's manual)::

    %dashr status | config | attach PATH | export PATH | snapshot save PATH | snapshot load PATH
    %compact [--dry-run]
    %history_outline
    %history_read c42 | --seq N | --cursor TOKEN
    %history_search QUERY [--checkpoint c42] [--limit N]
    %%agent [--max-steps N]        (cell magic: one agent turn, the cell body is the message)

Results are display objects: notebooks show tables and highlighted hits, terminals and
``print()`` the exact plain text. Bad arguments raise :class:`~IPython.core.error.UsageError`
(one line, no traceback). ``%unload_ext dashr_ext`` removes exactly the names it bound (those
still bound to its objects), its magics and its configurable, and closes the session,
releasing the writer lock. The extension registers no event callbacks.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Enum, Float, Integer, TraitError, Unicode, observe, validate
from traitlets.utils.bunch import Bunch

if TYPE_CHECKING:
    from .agent import Agent, AgentReply, StepReport

from .config import ENGINES, CompactionConfig, RecallConfig
from .dashr import Dashr as DashrController
from .display import Report, compact_report, dry_run_report, status_report
from .errors import ConfigError, DashrError
from .recall import RecallResult
from .summarizers.base import Summarizer
from .summarizers.factory import SUMMARIZER_KINDS, make_summarizer

__all__ = [
    "NAMESPACE_NAMES",
    "SNAPSHOT_WARNING",
    "Dashr",
    "agent_cell",
    "load_ipython_extension",
    "load_snapshot",
    "save_snapshot",
    "unload_ipython_extension",
]

NAMESPACE_NAMES: tuple[str, ...] = (
    "dashr",
    "dashr_compaction_archive",
    "history_outline",
    "history_read",
    "history_search",
)
"""The user-namespace names the extension binds."""

SNAPSHOT_WARNING = (
    "warning: loading a snapshot runs code stored in the file (it is a pickle); "
    "only load files you saved yourself"
)

COMPACTION_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(CompactionConfig))
RECALL_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(RecallConfig))
SUMMARIZER_TRAITS: tuple[str, ...] = ("summarizer", "llm_base_url", "llm_model")
AGENT_TRAITS: tuple[str, ...] = (
    "agent_base_url",
    "agent_model",
    "agent_max_steps",
    "agent_tool_output_max_chars",
)

_COMPACTION = CompactionConfig()
_RECALL = RecallConfig()
_IPYTHON_HISTORY = re.compile(r"_+|_i+|_i?\d+")
"""IPython's output/input history names (``_``, ``__``, ``_i``, ``_ii``, ``_7``, ``_i7``)."""


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """Turn a dashr error (or a file error) into a one-line UsageError: no traceback."""
    try:
        yield
    except (DashrError, OSError) as exc:
        text = str(exc) or type(exc).__name__
        raise UsageError(" ".join(text.split())) from None


def _parse(magic: Callable[..., Any], line: str) -> Any:
    try:
        return parse_argstring(magic, line)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # shlex: e.g. an unbalanced quote
        raise UsageError(f"cannot split the arguments: {exc}") from None


def _unquote(token: str) -> str:
    """``"a b"`` or ``'a b'`` -> ``a b`` (IPython's splitter keeps the quotes)."""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1]
    return token


_F = TypeVar("_F", bound=Callable[..., Any])


class _Decorator(Protocol):
    def __call__(self, func: _F, /) -> _F: ...


_line_magic = cast(_Decorator, line_magic)
"""``line_magic`` with a precise type (IPython types it as returning a union)."""
_cell_magic = cast(_Decorator, cell_magic)


@contextmanager
def _agent_errors() -> Iterator[None]:
    """Bad agent options (a ValueError naming the field) as one-line usage errors."""
    try:
        yield
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from None


def _magic_arguments() -> _Decorator:
    """``magic_arguments()`` with a type (IPython's argument decorators are untyped)."""
    return cast(_Decorator, magic_arguments())  # type: ignore[no-untyped-call]


def _argument(*args: Any, **kwargs: Any) -> _Decorator:
    """``argument(...)`` with a type."""
    return cast(_Decorator, argument(*args, **kwargs))  # type: ignore[no-untyped-call]


# --------------------------------------------------------------------------- the magics


@magics_class
class Dashr(Magics):
    """The ``Dashr`` configurable: every option of the extension, and its magics.

    One instance exists per shell while the extension is loaded. It owns the controller
    (:attr:`controller`, bound to ``dashr`` in the user namespace).
    """

    # -- compaction (CompactionConfig) ---------------------------------------------------
    engine = Enum(
        ENGINES,
        default_value=_COMPACTION.engine,
        help="Compaction engine: 'summary' (one head-anchored checkpoint, merged forward).",
    ).tag(config=True)
    context_window_tokens = Integer(
        _COMPACTION.context_window_tokens,
        help="The model's context window, in tokens (>= 256).",
    ).tag(config=True)
    threshold_ratio = Float(
        _COMPACTION.threshold_ratio,
        help="Compact when the request exceeds this fraction of context_window_tokens; in (0, 1).",
    ).tag(config=True)
    retain_ratio = Float(
        _COMPACTION.retain_ratio,
        help="History a pass keeps verbatim, as a fraction of context_window_tokens (below "
        "threshold_ratio); used while retain_tokens is None.",
    ).tag(config=True)
    retain_tokens = Integer(
        _COMPACTION.retain_tokens,
        allow_none=True,
        help="History a pass keeps verbatim, in tokens; required, and below "
        "recency_window_tokens, when recency_window_tokens is set.",
    ).tag(config=True)
    recency_window_tokens = Integer(
        _COMPACTION.recency_window_tokens,
        allow_none=True,
        help="Compact when the request exceeds this many tokens, whatever the context window "
        "(None: off). Needs retain_tokens below it.",
    ).tag(config=True)
    max_summary_tokens = Integer(
        _COMPACTION.max_summary_tokens,
        help="Upper bound on a summary's size, in tokens (>= 128).",
    ).tag(config=True)
    compaction_retries = Integer(
        _COMPACTION.compaction_retries,
        help="Extra passes when a pass leaves the request above the trigger (0-10).",
    ).tag(config=True)
    auto = Bool(
        _COMPACTION.auto,
        help="Compact automatically when over the trigger, before each request "
        "(dashr.request_messages()).",
    ).tag(config=True)
    archive_max_bytes = Integer(
        _COMPACTION.archive_max_bytes,
        allow_none=True,
        help="Cap on the archive dict's size in bytes; the oldest entries become stubs that "
        "point at history_read (None: no cap).",
    ).tag(config=True)
    archive_reasoning = Bool(
        _COMPACTION.archive_reasoning,
        help="Keep the model's reasoning text in archive entries.",
    ).tag(config=True)

    # -- recall (RecallConfig) ------------------------------------------------------------
    read_max_chars = Integer(
        _RECALL.read_max_chars,
        help="Longest history_read page, in characters (400-1000000).",
    ).tag(config=True)
    read_max_events = Integer(
        _RECALL.read_max_events,
        help="Most events on one history_read page (1-1000).",
    ).tag(config=True)
    search_max_hits = Integer(
        _RECALL.search_max_hits,
        help="Most hits history_search shows (1-200); its limit argument may ask for fewer.",
    ).tag(config=True)
    outline_max_chars = Integer(
        _RECALL.outline_max_chars,
        help="Longest history_outline text (200-1000000); turns are elided past it, "
        "checkpoints never.",
    ).tag(config=True)
    pointer = Enum(
        ("inject", "off"),
        default_value=_RECALL.pointer,
        help="After a pass, add a short context message naming the checkpoint and the recall "
        "tools ('inject'), or not ('off').",
    ).tag(config=True)

    # -- summarizer --------------------------------------------------------------------------
    summarizer = Enum(
        SUMMARIZER_KINDS,
        default_value="extractive",
        help="Who writes summaries: 'extractive' (offline, deterministic, no key) or 'llm' (an "
        "OpenAI-compatible endpoint: llm_base_url, llm_model; the API key is read from "
        "DASHR_API_KEY, DEEPSEEK_API_KEY or OPENAI_API_KEY, never from here).",
    ).tag(config=True)
    llm_base_url = Unicode(
        None,
        allow_none=True,
        help="API root of the 'llm' summarizer, e.g. 'https://api.deepseek.com/v1' "
        "(None: env DASHR_BASE_URL).",
    ).tag(config=True)
    llm_model = Unicode(
        None,
        allow_none=True,
        help="Model of the 'llm' summarizer, e.g. 'deepseek-chat' (None: env DASHR_MODEL).",
    ).tag(config=True)

    # -- agent (%%agent) ------------------------------------------------------------------
    agent_base_url = Unicode(
        None,
        allow_none=True,
        help="API root of the model %%agent talks to, e.g. 'https://api.deepseek.com/v1' "
        "(None: env DASHR_BASE_URL). The API key is read from DASHR_API_KEY, DEEPSEEK_API_KEY "
        "or OPENAI_API_KEY, never from here.",
    ).tag(config=True)
    agent_model = Unicode(
        None,
        allow_none=True,
        help="Model %%agent uses, e.g. 'deepseek-chat' (None: env DASHR_MODEL).",
    ).tag(config=True)
    agent_max_steps = Integer(
        30, min=1, help="Most model calls one %%agent cell makes before it stops (>= 1)."
    ).tag(config=True)
    agent_tool_output_max_chars = Integer(
        10_000,
        min=200,
        help="run_cell output longer than this is cut (with a marker) before the model sees "
        "it (>= 200).",
    ).tag(config=True)

    # -- store ------------------------------------------------------------------------------
    session_dir = Unicode(
        None,
        allow_none=True,
        help="Directory for the session created at load (None: $DASHR_HOME/sessions). "
        "Read when the extension loads.",
    ).tag(config=True)
    session_path = Unicode(
        None,
        allow_none=True,
        help="Session file to attach at load, created when missing (None: a new session in "
        "session_dir). Read when the extension loads; %dashr attach PATH switches later.",
    ).tag(config=True)

    def __init__(self, shell: InteractiveShell | None = None, **kwargs: Any) -> None:
        # Set before the traits load their configuration: the observers look at them.
        self._controller: DashrController | None = None
        self._agent: Agent | None = None
        self._created_path: Path | None = None
        self._pushed: dict[str, object] = {}
        super().__init__(shell=shell, **kwargs)

    # ------------------------------------------------------------------ validation

    def compaction_config(self, **overrides: Any) -> CompactionConfig:
        """The :class:`CompactionConfig` of the current option values (plus ``overrides``)."""
        values = {name: getattr(self, name) for name in COMPACTION_TRAITS}
        return CompactionConfig(**{**values, **overrides})

    def recall_config(self, **overrides: Any) -> RecallConfig:
        """The :class:`RecallConfig` of the current option values (plus ``overrides``)."""
        values = {name: getattr(self, name) for name in RECALL_TRAITS}
        return RecallConfig(**{**values, **overrides})

    def make_summarizer(self, **overrides: Any) -> Summarizer:
        """A summarizer from ``summarizer`` / ``llm_base_url`` / ``llm_model``."""
        values = {name: getattr(self, name) for name in SUMMARIZER_TRAITS}
        values.update(overrides)
        if values["summarizer"] == "llm":
            return make_summarizer(
                "llm", base_url=values["llm_base_url"], model=values["llm_model"]
            )
        return make_summarizer(str(values["summarizer"]))

    @validate(*COMPACTION_TRAITS)
    def _check_compaction(self, proposal: Bunch) -> Any:
        with _trait_errors():
            self.compaction_config(**{proposal.trait.name: proposal.value})
        return proposal.value

    @validate(*RECALL_TRAITS)
    def _check_recall(self, proposal: Bunch) -> Any:
        with _trait_errors():
            self.recall_config(**{proposal.trait.name: proposal.value})
        return proposal.value

    @validate(*SUMMARIZER_TRAITS)
    def _check_summarizer(self, proposal: Bunch) -> Any:
        with _trait_errors():
            _close(self.make_summarizer(**{proposal.trait.name: proposal.value}))
        return proposal.value

    @observe(*COMPACTION_TRAITS)
    def _apply_compaction(self, change: Bunch) -> None:
        if self._controller is not None:
            self._controller.config = self.compaction_config()

    @observe(*RECALL_TRAITS)
    def _apply_recall(self, change: Bunch) -> None:
        if self._controller is not None:
            self._controller.recall_config = self.recall_config()

    @observe(*SUMMARIZER_TRAITS)
    def _apply_summarizer(self, change: Bunch) -> None:
        controller = self._controller
        if controller is None:
            return
        old = controller.summarizer
        controller.summarizer = self.make_summarizer()
        _close(old)

    # ------------------------------------------------------------------ the controller

    @property
    def controller(self) -> DashrController:
        """The session controller bound to ``dashr``."""
        if self._controller is None:
            raise UsageError("dashr_ext is not attached to a session; run %load_ext dashr_ext")
        return self._controller

    def start(self) -> None:
        """Create or open the configured session and bind the namespace names."""
        options: dict[str, Any] = {
            "config": self.compaction_config(),
            "recall": self.recall_config(),
            "summarizer": self.make_summarizer(),
        }
        path = Path(self.session_path).expanduser() if self.session_path else None
        if path is not None and path.exists():
            controller = DashrController.open(path, **options)
        else:
            if path is None and self.session_dir:
                from .paths import new_session_id

                path = Path(self.session_dir).expanduser() / f"{new_session_id()}.jsonl"
            controller = DashrController.create(path, **options)
            self._created_path = controller.session.path
        self._controller = controller
        self.push()

    def attach(self, path: str | Path) -> DashrController:
        """Switch to the session file at ``path``; the names are re-bound to the new controller."""
        target = Path(path).expanduser()
        current = self._controller
        if current is not None and _same_file(current.session.path, target):
            return current
        controller = DashrController.open(
            target,
            config=self.compaction_config(),
            recall=self.recall_config(),
            summarizer=self.make_summarizer(),
        )
        self.stop()
        self._controller = controller
        self.push()
        return controller

    def stop(self) -> None:
        """Unbind the names and close the session (an untouched session made at load is removed)."""
        self.drop()
        self._drop_agent()
        controller, self._controller = self._controller, None
        if controller is None:
            return
        untouched = len(controller.session) == 1  # only its header: nothing was recorded
        controller.close()
        created, self._created_path = self._created_path, None
        if created is not None and untouched and controller.session.path == created:
            created.unlink(missing_ok=True)

    def push(self) -> None:
        """Bind ``dashr``, the archive and the recall helpers of the live controller."""
        assert self.shell is not None
        c = self.controller
        names: dict[str, object] = {
            "dashr": c,
            "dashr_compaction_archive": c.archive,
            "history_outline": c.history_outline,
            "history_read": c.history_read,
            "history_search": c.history_search,
        }
        self.drop()
        self.shell.push(names, interactive=False)  # type: ignore[no-untyped-call]
        self._pushed = names

    def drop(self) -> None:
        """Remove the names this object bound, where they still hold its objects."""
        if self.shell is None:
            return
        user_ns, hidden = self.shell.user_ns, self.shell.user_ns_hidden
        for name, obj in self._pushed.items():
            if user_ns.get(name) is obj:
                del user_ns[name]
            if hidden.get(name) is obj:
                del hidden[name]
        self._pushed = {}

    # ------------------------------------------------------------------ %dashr

    @_line_magic
    @_magic_arguments()
    @_argument(
        "command",
        choices=("status", "config", "attach", "export", "snapshot"),
        metavar="COMMAND",
        help="status | config | attach PATH | export PATH | snapshot save PATH | "
        "snapshot load PATH",
    )
    @_argument("args", nargs="*", metavar="ARG", help="the subcommand's arguments")
    def dashr(self, line: str) -> Report:
        """Inspect and manage this kernel's dashr session.

        Subcommands:

          status               session, request tokens against the trigger, checkpoints, archive
          config               the effective configuration (change it with %config Dashr.NAME = …)
          attach PATH          switch to another session file (e.g. after a kernel restart);
                               the session, surface and archive are rebuilt from its log
          export PATH          copy the session's JSONL log to PATH (a new file)
          snapshot save PATH   save the user namespace with dill; unpicklable names are skipped
          snapshot load PATH   load a snapshot: this runs code from the file, so only load
                               files you saved yourself

        Examples::

          %dashr status
          %dashr attach ~/.dashr/sessions/20261130T012227123Z-3f9a1c.jsonl
        """
        args = _parse(self.dashr, line)
        words = [_unquote(a) for a in args.args]
        key = args.command
        if key == "snapshot":
            if not words or words[0] not in ("save", "load"):
                raise UsageError("usage: %dashr snapshot save PATH | %dashr snapshot load PATH")
            key = f"snapshot {words.pop(0)}"
        params, handler = _SUBCOMMANDS[key]
        if len(words) != len(params):
            raise UsageError(f"usage: %dashr {' '.join((key, *params))}")
        with _one_line_errors():
            return handler(self, *words)

    def _status(self) -> Report:
        return status_report(self.controller)

    def _config(self) -> Report:
        c = self.controller
        rows: list[tuple[str, object]] = [
            (name, repr(getattr(c.config, name))) for name in COMPACTION_TRAITS
        ]
        rows += [(name, repr(getattr(c.recall_config, name))) for name in RECALL_TRAITS]
        rows += [(name, repr(getattr(self, name))) for name in SUMMARIZER_TRAITS]
        rows += [(name, repr(getattr(self, name))) for name in AGENT_TRAITS]
        rows += [("session_dir", repr(self.session_dir)), ("session_path", repr(self.session_path))]
        return Report.of(
            "dashr configuration — change with %config Dashr.NAME = VALUE",
            rows,
            (f"session file: {c.session.path or '(in memory)'}",),
            kind="config",
        )

    def _attach(self, path: str) -> Report:
        c = self.attach(path)
        return Report.of(
            f"attached session {c.session.id}",
            [
                ("session file", c.session.path),
                ("events", len(c.session)),
                ("checkpoints", len(c.checkpoints())),
                ("archive", f"{len(c.archive)} entries"),
            ],
            ("dashr, dashr_compaction_archive and history_* now use this session",),
            kind="attach",
        )

    def _export(self, path: str) -> Report:
        c = self.controller
        source = c.session.path
        if source is None:
            raise UsageError("this session is in memory only; there is no file to export")
        target = Path(path).expanduser()
        if target.exists():
            raise UsageError(f"{target} already exists; choose a new path")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return Report.of(
            f"exported session {c.session.id}",
            [("from", source), ("to", target), ("events", len(c.session))],
            kind="export",
        )

    def _snapshot_save(self, path: str) -> Report:
        assert self.shell is not None
        target = Path(path).expanduser()
        saved, skipped = save_snapshot(self.shell, target, exclude=NAMESPACE_NAMES)
        notes = [f"not picklable, skipped: {', '.join(skipped)}"] if skipped else []
        notes.append(f"{', '.join(NAMESPACE_NAMES)} are re-bound by the extension, not saved")
        return Report.of(
            f"saved a snapshot of {len(saved)} names",
            [("file", target), ("names", ", ".join(saved) or "(none)")],
            notes,
            kind="snapshot",
        )

    def _snapshot_load(self, path: str) -> Report:
        assert self.shell is not None
        target = Path(path).expanduser()
        if not target.is_file():
            raise UsageError(f"no such snapshot file: {target}")
        print(SNAPSHOT_WARNING)
        loaded = load_snapshot(self.shell, target)
        self.push()
        return Report.of(
            f"loaded a snapshot of {len(loaded)} names",
            [("file", target), ("names", ", ".join(loaded) or "(none)")],
            (f"{', '.join(NAMESPACE_NAMES)} are bound to the live session again",),
            kind="snapshot",
        )

    # ------------------------------------------------------------------ %compact

    @_line_magic
    @_magic_arguments()
    @_argument(
        "--dry-run",
        action="store_true",
        help="show the range a pass would compact (seqs, events, tokens) and commit nothing",
    )
    def compact(self, line: str) -> Report:
        """Compact the session now (a manual pass), or preview it with --dry-run.

        The pass keeps the newest history that fits the retain budget and condenses
        everything before it into one checkpoint; the originals stay readable with
        history_read and dashr_compaction_archive.

        Examples::

          %compact --dry-run
          %compact
        """
        args = _parse(self.compact, line)
        with _one_line_errors():
            if args.dry_run:
                return dry_run_report(self.controller)
            return compact_report(self.controller)

    # ------------------------------------------------------------------ recall

    @_line_magic
    @_magic_arguments()
    def history_outline(self, line: str) -> RecallResult:
        """The session at a glance: every checkpoint, then the turns.

        Shows the event count, each checkpoint (id, shadowed seqs, tokens, time, current or
        superseded, a one-line preview) and the turn list. Same text as
        print(history_outline()).

        Examples::

          %history_outline
          print(history_outline())
        """
        _parse(self.history_outline, line)
        with _one_line_errors():
            return self.controller.history_outline()

    @_line_magic
    @_magic_arguments()
    @_argument("checkpoint", nargs="?", help="a checkpoint id, e.g. c42: its shadowed originals")
    @_argument("--seq", type=int, help="read this session's history forward from seq N")
    @_argument("--cursor", help="the next page: the token after 'cursor:' on a previous page")
    @no_var_expand
    def history_read(self, line: str) -> RecallResult:
        """Read the originals a checkpoint condensed, or the history from a seq, page by page.

        Give exactly one of CHECKPOINT, --seq or --cursor. A page ends with
        'cursor: TOKEN' when more follows, else with '… [end of this range]'.
        Same text as print(history_read(...)).

        Examples::

          %history_read c42
          %history_read --cursor c42@4:1200
        """
        args = _parse(self.history_read, line)
        checkpoint = _unquote(args.checkpoint) if args.checkpoint is not None else None
        cursor = _unquote(args.cursor) if args.cursor is not None else None
        with _one_line_errors():
            return self.controller.history_read(checkpoint=checkpoint, seq=args.seq, cursor=cursor)

    @_line_magic
    @_magic_arguments()
    @_argument("query", nargs="+", help="the literal text to find; quotes group words")
    @_argument("--checkpoint", help="search only this checkpoint's shadowed originals, e.g. c42")
    @_argument("--limit", type=int, help="show at most N hits (up to Dashr.search_max_hits)")
    @no_var_expand
    def history_search(self, line: str) -> RecallResult:
        """Find literal text anywhere in the session's history, compacted or visible.

        Case-insensitive; words match across any whitespace; quotes group words and are
        not part of the query; no $variable expansion. Each hit shows its seq, whether it
        is shadowed (and by which checkpoint) or visible, its time and a snippet.
        Same text as print(history_search(...)).

        Examples::

          %history_search retry budget
          %history_search "ValueError: x" --checkpoint c42 --limit 5
        """
        args = _parse(self.history_search, line)
        query = " ".join(_unquote(word) for word in args.query)
        checkpoint = _unquote(args.checkpoint) if args.checkpoint is not None else None
        with _one_line_errors():
            return self.controller.history_search(query, checkpoint=checkpoint, limit=args.limit)

    # ------------------------------------------------------------------ %%agent

    @_cell_magic
    @_magic_arguments()
    @_argument("--max-steps", type=int, help="at most N model calls for this cell")
    def agent(self, line: str, cell: str) -> AgentReply:
        """Run one agent turn: the cell body is the user's message.

        The agent calls the model at Dashr.agent_base_url / Dashr.agent_model (or env
        DASHR_BASE_URL / DASHR_MODEL; key from DASHR_API_KEY), runs the code it asks for
        with run_cell in this kernel, compacts before every request and reads compacted
        history back with the recall tools or dashr_compaction_archive. One progress line
        per step; the cell's result is the agent's final answer.

        Examples::

          %%agent
          Load data.csv and plot the weekly totals.

          %%agent --max-steps 5
          Which checkpoint holds the first traceback?
        """
        args = _parse(self.agent, line)
        if not cell.strip():
            raise UsageError("%%agent needs the user's message in the cell body")
        if args.max_steps is not None and args.max_steps < 1:
            raise UsageError(f"--max-steps: expected an integer >= 1, got {args.max_steps}")
        with _one_line_errors(), _agent_errors():
            agent = self._agent_for_cell()
            limit = agent.max_steps
            if args.max_steps is not None:
                agent.max_steps = args.max_steps
            try:
                return agent_cell(self.shell, self.controller, cell.strip(), agent=agent)
            finally:
                agent.max_steps = limit

    def _agent_for_cell(self) -> Agent:
        """The long-lived agent of this session (rebuilt after attach or option changes)."""
        from .agent import Agent

        if self._agent is None or self._agent.dashr is not self.controller:
            self._drop_agent()
            self._agent = Agent(
                self.controller,
                shell=self.shell,
                base_url=self.agent_base_url,
                model=self.agent_model,
                max_steps=self.agent_max_steps,
                tool_output_max_chars=self.agent_tool_output_max_chars,
            )
        return self._agent

    def _drop_agent(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()

    @observe(*AGENT_TRAITS)
    def _apply_agent(self, change: Bunch) -> None:
        self._drop_agent()  # the next %%agent cell builds one with the new options


_SUBCOMMANDS: Mapping[str, tuple[tuple[str, ...], Callable[..., Report]]] = {
    "status": ((), Dashr._status),
    "config": ((), Dashr._config),
    "attach": (("PATH",), Dashr._attach),
    "export": (("PATH",), Dashr._export),
    "snapshot save": (("PATH",), Dashr._snapshot_save),
    "snapshot load": (("PATH",), Dashr._snapshot_load),
}


@contextmanager
def _trait_errors() -> Iterator[None]:
    try:
        yield
    except ConfigError as exc:
        raise TraitError(str(exc)) from None


def _close(summarizer: object) -> None:
    close = getattr(summarizer, "close", None)
    if callable(close):
        close()


def _same_file(a: Path | None, b: Path) -> bool:
    if a is None:
        return False
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# --------------------------------------------------------------------------- %%agent


def agent_cell(
    shell: InteractiveShell | None,
    dashr: DashrController,
    cell: str,
    *,
    agent: Agent | None = None,
    out: TextIO | None = None,
    **options: Any,
) -> AgentReply:
    """Run one ``%%agent`` cell: a turn with ``cell`` as the user message.

    Prints one progress line per step to ``out`` (default ``sys.stdout``) as the steps finish,
    e.g. ``step 3: run_cell · ~5231 tokens · compacted → c57``, then a closing line when the
    turn hit ``max_steps``, and returns the :class:`~dashr_ext.agent.AgentReply` (the notebook
    shows its text). ``agent`` reuses a long-lived :class:`~dashr_ext.agent.Agent`; otherwise
    one is built from ``options`` (the ``Agent`` keywords) for this cell and closed after it.
    """
    from .agent import Agent

    stream = out if out is not None else sys.stdout

    def show(report: StepReport) -> None:
        print(report.line(), file=stream, flush=True)

    owned = agent is None
    if agent is None:
        agent = Agent(dashr, shell=shell, **options)
    elif options:
        raise ConfigError("agent_cell options", "none when an agent is given", sorted(options))
    previous, agent.on_event = agent.on_event, show
    try:
        reply = agent.run_turn(cell)
    finally:
        agent.on_event = previous
        if owned:
            agent.close()
    if reply.reason == "max-steps":
        steps = len(reply.steps)
        print(
            f"turn {reply.turn} stopped after {steps} step{'s' if steps != 1 else ''} "
            "(max_steps); send another cell to continue",
            file=stream,
            flush=True,
        )
    return reply


# --------------------------------------------------------------------------- snapshots


def _machinery(name: str, hidden: Mapping[str, object]) -> bool:
    """IPython's own names: the hidden namespace and the input/output history caches."""
    return name in hidden or _IPYTHON_HISTORY.fullmatch(name) is not None


def save_snapshot(
    shell: InteractiveShell, path: Path, *, exclude: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Save the user namespace with ``dill.dump_module``; returns (saved, skipped) names.

    IPython's own names, ``exclude`` and values dill cannot pickle (checked one by one with
    ``dill.pickles``) are left out: they are taken out of the namespace for the duration of
    the dump and put back. The dump is of the user module itself, so functions defined in
    the session keep the namespace as their globals when loaded.
    """
    import dill

    ns = shell.user_ns
    if shell.user_module.__dict__ is not ns:
        raise UsageError("snapshots need the user namespace to be the user module's namespace")
    hidden = shell.user_ns_hidden
    left_out: list[str] = []
    skipped: list[str] = []
    saved: list[str] = []
    for name, value in list(ns.items()):
        if name.startswith("__") and name.endswith("__"):
            continue  # module attributes (__name__, __builtins__, …) travel with the module
        if name in exclude or _machinery(name, hidden):
            left_out.append(name)
        elif dill.pickles(value, safe=True):
            saved.append(name)
        else:
            skipped.append(name)
    taken = {name: ns.pop(name) for name in left_out + skipped}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        dill.dump_module(str(path), module=shell.user_module)
    finally:
        ns.update(taken)
    return sorted(saved), sorted(skipped)


def load_snapshot(shell: InteractiveShell, path: Path) -> list[str]:
    """Load a :func:`save_snapshot` file into the user namespace; returns the names it set.

    This unpickles the file, which runs code it contains: only load files you saved.
    """
    import dill

    ns = shell.user_ns
    before = dict(ns)
    dill.load_module(str(path), module=shell.user_module)
    return sorted(
        name
        for name, value in ns.items()
        if not (name.startswith("__") and name.endswith("__"))
        and (name not in before or before[name] is not value)
    )


# --------------------------------------------------------------------------- load / unload


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Attach a session, bind the names and register the magics; a second call does nothing."""
    if isinstance(shell.magics_manager.registry.get("Dashr"), Dashr):
        return
    configurables = len(shell.configurables)
    try:
        magics = Dashr(shell=shell)
        with _one_line_errors():
            magics.start()
    except TraitError as exc:  # a bad value in the configuration (c.Dashr.…)
        del shell.configurables[configurables:]
        raise UsageError(f"dashr_ext: {exc}") from None
    except BaseException:
        del shell.configurables[configurables:]
        raise
    shell.register_magics(magics)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Undo :func:`load_ipython_extension`: names, magics, configurable; close the session."""
    manager = shell.magics_manager
    magics = manager.registry.get("Dashr")
    if not isinstance(magics, Dashr):
        return
    magics.stop()
    for kind, table in magics.magics.items():
        registered = manager.magics[kind]
        for name, func in table.items():
            if registered.get(name) is func:
                del registered[name]
    del manager.registry["Dashr"]
    shell.configurables[:] = [c for c in shell.configurables if id(c) != id(magics)]
