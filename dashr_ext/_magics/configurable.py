"""The ``Dashr`` configurable: the extension's options and its magics (SPEC §9).

One instance per shell while the extension is loaded. Its traits are the options
(``%config Dashr.NAME = VALUE``): each value is checked on its own when set, and each group
(:mod:`.options`) is applied to the live controller as soon as its options agree (until then
it is held back, :mod:`.settings`). Its methods are the magics, each docstring a user manual.
"""

from __future__ import annotations

from argparse import REMAINDER
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, magics_class, no_var_expand
from traitlets import Bool, Enum, Integer, TraitError, Unicode, observe, validate
from traitlets.utils.bunch import Bunch

from .._bridge.comm import CommBridge
from .._bridge.protocol import MAX_REQUEST_BYTES
from .._config import ENGINES, CompactionConfig, RecallConfig
from .._controller import Dashr as DashrController
from .._display import Report, compact_report, dry_run_report, prune_report
from .._recall import RecallResult
from .._summarizers.base import Summarizer
from .._summarizers.factory import SUMMARIZER_KINDS
from ..agent import Agent, AgentReply
from ..errors import ConfigError
from .agent_turn import agent_cell
from .arguments import (
    agent_errors,
    argument,
    cell_magic,
    line_magic,
    magic_arguments,
    one_line_errors,
    parse,
    unquote,
)
from .attachment import Attachment, same_file
from .bridge import TraitsHost
from .options import (
    AGENT_TRAITS,
    COMPACTION_DEFAULTS,
    COMPACTION_TRAITS,
    RECALL_DEFAULTS,
    RECALL_TRAITS,
    SUMMARIZER_TRAITS,
    close_summarizer,
    options_help,
    summarizer_of,
    trait_errors,
)
from .progress import CellProgress
from .refusals import show_refusal
from .search_all import search_sessions
from .settings import Ratio, Staging, own_summarizer_field, show_settings
from .subcommands import COMMANDS, USAGE, documented, rest_of_line
from .subcommands import run as run_subcommand
from .turn_options import TurnMemoryOptions

__all__ = ["Dashr"]


@magics_class
class Dashr(TurnMemoryOptions, Magics):
    """The ``Dashr`` configurable: every option of the extension, and its magics.

    One instance exists per shell while the extension is loaded. It owns the controller
    (:attr:`controller`, bound to ``dashr`` in the user namespace).
    """

    # -- compaction (CompactionConfig) ---------------------------------------------------
    engine = Enum(
        ENGINES,
        default_value=COMPACTION_DEFAULTS.engine,
        help="Compaction engine: 'summary' (one head-anchored checkpoint, merged forward) or "
        "'recallable' (frozen index stubs plus one state checkpoint).",
    ).tag(config=True)
    context_window_tokens = Integer(
        COMPACTION_DEFAULTS.context_window_tokens,
        help="The model's context window, in tokens (>= 256).",
    ).tag(config=True)
    threshold_ratio = Ratio(
        COMPACTION_DEFAULTS.threshold_ratio,
        help="Compact when the request exceeds this fraction of context_window_tokens; in (0, 1).",
    ).tag(config=True)
    retain_ratio = Ratio(
        COMPACTION_DEFAULTS.retain_ratio,
        help="History a pass keeps verbatim, as a fraction of context_window_tokens (below "
        "threshold_ratio); used while retain_tokens is None.",
    ).tag(config=True)
    retain_tokens = Integer(
        COMPACTION_DEFAULTS.retain_tokens,
        allow_none=True,
        help="History a pass keeps verbatim, in tokens; required, and below "
        "recency_window_tokens, when recency_window_tokens is set.",
    ).tag(config=True)
    recency_window_tokens = Integer(
        COMPACTION_DEFAULTS.recency_window_tokens,
        allow_none=True,
        help="Compact when the request exceeds this many tokens, whatever the context window "
        "(None: off). Needs retain_tokens below it.",
    ).tag(config=True)
    max_summary_tokens = Integer(
        COMPACTION_DEFAULTS.max_summary_tokens,
        allow_none=True,
        help="Upper bound on everything a pass adds to the request (framing, pins, names, summary, "
        "footers, marker, pointer), in tokens (>= 48; None: 15% of the trigger, 256-8192).",
    ).tag(config=True)
    compaction_retries = Integer(
        COMPACTION_DEFAULTS.compaction_retries,
        help="Extra passes when a pass leaves the request above the trigger (0-10).",
    ).tag(config=True)
    auto = Bool(
        COMPACTION_DEFAULTS.auto,
        help="Compact automatically when over the trigger, before each request "
        "(dashr.request_messages()).",
    ).tag(config=True)
    archive_max_bytes = Integer(
        COMPACTION_DEFAULTS.archive_max_bytes,
        allow_none=True,
        help="Cap on the archive dict's size in bytes; the oldest entries become stubs that "
        "point at history_read (None: no cap).",
    ).tag(config=True)
    archive_reasoning = Bool(
        COMPACTION_DEFAULTS.archive_reasoning,
        help="Keep the model's reasoning text in archive entries.",
    ).tag(config=True)
    prune = Bool(
        COMPACTION_DEFAULTS.prune,
        help="Prune oversize outputs (head and tail kept, original archived) before "
        "summarizing; no model call.",
    ).tag(config=True)
    prune_tool_output_tokens = Integer(
        COMPACTION_DEFAULTS.prune_tool_output_tokens,
        allow_none=True,
        help="Tool outputs and assistant texts above this many tokens are pruning "
        "candidates (>= 64; None: an eighth of the trigger, 1024-8192).",
    ).tag(config=True)
    prune_keep_chars = Integer(
        COMPACTION_DEFAULTS.prune_keep_chars,
        help="Characters of head and tail a pruned output keeps (200-100000).",
    ).tag(config=True)
    oversize_ratio = Ratio(
        COMPACTION_DEFAULTS.oversize_ratio,
        help="A message above this share of the trigger is pruned wherever it is, the "
        "newest included; no unit of the retained tail stays larger; in (0, 1).",
    ).tag(config=True)

    show_superseded = Bool(
        COMPACTION_DEFAULTS.show_superseded,
        help="Show a superseded value as (was …) after its current one in a checkpoint "
        "summary (default: only current values).",
    ).tag(config=True)

    chunk_tokens = Integer(
        COMPACTION_DEFAULTS.chunk_tokens,
        allow_none=True,
        help="recallable engine: stale history per index stub, in tokens "
        "(>= 2 × state_max_tokens; None: a quarter of a pass, at most 8192).",
    ).tag(config=True)
    stub_tokens = Integer(
        COMPACTION_DEFAULTS.stub_tokens,
        allow_none=True,
        help="recallable engine: size of one index stub, in tokens (32-2048, at most "
        "chunk_tokens / 8; None: 160).",
    ).tag(config=True)
    state_max_tokens = Integer(
        COMPACTION_DEFAULTS.state_max_tokens,
        allow_none=True,
        help="recallable engine: upper bound on the state checkpoint, in tokens (>= 128; "
        "None: a sixteenth of the trigger, 512-4096).",
    ).tag(config=True)
    stub_region_ratio = Ratio(
        COMPACTION_DEFAULTS.stub_region_ratio,
        help="recallable engine: the oldest stubs roll up into one directory node when the "
        "stubs pass this share of the trigger; in (0, 0.5].",
    ).tag(config=True)

    # -- recall (RecallConfig) ------------------------------------------------------------
    read_max_chars = Integer(
        RECALL_DEFAULTS.read_max_chars,
        help="Longest history_read page, in characters (400-1000000).",
    ).tag(config=True)
    read_max_events = Integer(
        RECALL_DEFAULTS.read_max_events,
        help="Most events on one history_read page (1-1000).",
    ).tag(config=True)
    search_max_hits = Integer(
        RECALL_DEFAULTS.search_max_hits,
        help="Most hits history_search shows (1-200); its limit argument may ask for fewer.",
    ).tag(config=True)
    outline_max_chars = Integer(
        RECALL_DEFAULTS.outline_max_chars,
        help="Longest history_outline text (200-1000000); turns are elided past it, "
        "checkpoints never.",
    ).tag(config=True)
    pointer = Enum(
        ("inject", "off"),
        default_value=RECALL_DEFAULTS.pointer,
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

    # -- bridge (the dashr comm) ---------------------------------------------------------
    bridge_max_request_bytes = Integer(
        MAX_REQUEST_BYTES,
        min=1024,
        help="Largest request the dashr comm accepts, in bytes of JSON (>= 1024); a larger "
        "one gets a ProtocolError reply and changes nothing.",
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

    @classmethod
    def class_get_help(cls, inst: Any = None) -> str:
        """``%config Dashr``: what these options are, grouped (:func:`.options.options_help`)."""
        return options_help(cls, inst)

    def __init__(self, shell: InteractiveShell | None = None, **kwargs: Any) -> None:
        # Set before the traits load their configuration: the observers look at them.
        self._controller: DashrController | None = None
        self._agent: Agent | None = None
        self._attachment = Attachment(shell)
        self.staging = Staging(shell)
        """Option groups held back until they agree; its ``after_cell`` runs after each cell."""
        super().__init__(shell=shell, **kwargs)
        self.bridge = CommBridge(
            lambda: TraitsHost(self), lambda: int(self.bridge_max_request_bytes)
        )
        """The ``dashr`` comm target; registered while the extension is loaded."""
        self.progress = CellProgress(shell, lambda: self._controller)
        """Progress displays of slow passes and retried requests; per cell while loaded."""

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
        return summarizer_of({**values, **overrides})

    def update_config(self, config: Any) -> None:
        """``%config Dashr.NAME = VALUE``: a refused value is one UsageError line (IPython
        would log traitlets' error) and the option keeps its value."""
        try:
            super().update_config(config)
        except TraitError as exc:
            show_refusal(self, self.shell, config.get("Dashr", {}), exc)

    @validate(*COMPACTION_TRAITS)
    def _check_compaction(self, proposal: Bunch) -> Any:
        with trait_errors():
            CompactionConfig.check_field(proposal.trait.name, proposal.value)
        return proposal.value

    @validate(*RECALL_TRAITS)
    def _check_recall(self, proposal: Bunch) -> Any:
        with trait_errors():
            RecallConfig.check_field(proposal.trait.name, proposal.value)
        return proposal.value

    @validate(*SUMMARIZER_TRAITS)
    def _check_summarizer(self, proposal: Bunch) -> Any:
        name = proposal.trait.name
        try:
            close_summarizer(self.make_summarizer(**{name: proposal.value}))
        except ConfigError as exc:
            if own_summarizer_field(name, exc):  # else it waits for another option
                raise TraitError(str(exc)) from None
        return proposal.value

    @observe(*COMPACTION_TRAITS)
    def _apply_compaction(self, change: Bunch) -> None:
        if self._controller is not None:
            with self.staging.apply("compaction"):
                self._controller.config = self.compaction_config()

    @observe(*RECALL_TRAITS)
    def _apply_recall(self, change: Bunch) -> None:
        if self._controller is not None:
            with self.staging.apply("recall"):
                self._controller.recall_config = self.recall_config()

    @observe(*SUMMARIZER_TRAITS)
    def _apply_summarizer(self, change: Bunch) -> None:
        controller = self._controller
        if controller is None:
            return
        with self.staging.apply("summarizer"):
            summarizer = self.make_summarizer()
            old, controller.summarizer = controller.summarizer, summarizer
            close_summarizer(old)

    # ------------------------------------------------------------------ the controller

    @property
    def controller(self) -> DashrController:
        """The session controller bound to ``dashr``."""
        if self._controller is None:
            raise UsageError("dashr_ext is not attached to a session; run %load_ext dashr_ext")
        return self._controller

    def start(self) -> None:
        """Create or open the configured session and bind the namespace names (a new session
        records the options as its settings; an existing one's settings become the options)."""
        with trait_errors():  # the options must agree at load
            config, recall = self.compaction_config(), self.recall_config()
        options = {"summarizer": self.make_summarizer()}
        controller = self._attachment.open(self.session_path, self.session_dir, options)
        try:
            if self._attachment.created:
                controller.config, controller.recall_config = config, recall
            else:
                self._show_settings(controller)
        except BaseException:
            self._attachment.close(controller)
            raise
        self._controller = controller
        self.push()

    def session_line(self) -> str:
        """The line ``%load_ext`` prints: the session file it created or attached."""
        return self._attachment.describe(self.controller)

    def attach(self, path: str | Path, read_only: bool = False) -> DashrController:
        """Switch to the session file at ``path`` (its settings become the options); the names
        are re-bound to the new controller.

        ``read_only=True`` takes no writer lock: a session another kernel writes can be read
        (attaching it again reads what was written since).
        """
        target = Path(path).expanduser()
        current = self._controller
        if (
            current is not None
            and not read_only
            and not current.session.read_only
            and same_file(current.session.path, target)
        ):
            return current
        controller = DashrController.open(
            target, read_only=read_only, summarizer=self.make_summarizer()
        )
        self.stop()
        self._show_settings(controller)
        self._controller = controller
        self.push()
        return controller

    def _show_settings(self, controller: DashrController) -> None:
        assert self._controller is None  # so that the options are not applied back
        show_settings(self, controller)
        self.staging.release("compaction", "recall")

    def stop(self) -> None:
        """Unbind the names and close the session (an untouched session made at load is removed)."""
        self.drop()
        self._drop_agent()
        controller, self._controller = self._controller, None
        if controller is not None:
            self._attachment.close(controller)

    def push(self) -> None:
        """Bind ``dashr``, the archive and the recall helpers of the live controller."""
        self._attachment.bind(self.controller)

    def drop(self) -> None:
        """Remove the names this object bound, where they still hold its objects."""
        self._attachment.unbind()

    # ------------------------------------------------------------------ %dashr

    @line_magic
    @magic_arguments()
    @argument("command", nargs="?", choices=COMMANDS, metavar="COMMAND", help=USAGE)
    @argument("args", nargs=REMAINDER, metavar="ARG", help="the subcommand's arguments")
    @documented  # the manual: subcommands.MANUAL
    def dashr(self, line: str) -> Any:
        raw = rest_of_line(line)  # `pin TEXT…`: the text as typed, not split into words
        if raw is not None:
            return run_subcommand(self, *raw)
        args = parse(self.dashr, line)
        return run_subcommand(self, args.command, [unquote(a) for a in args.args])

    # ------------------------------------------------------------------ %compact

    @line_magic
    @magic_arguments()
    @argument(
        "--dry-run",
        action="store_true",
        help="show what a pass would prune and compact (seqs, events, tokens); commit nothing",
    )
    @argument(
        "--prune-only",
        action="store_true",
        help="only prune (old outputs included); no summary pass, no model call",
    )
    def compact(self, line: str) -> Report:
        """Compact the session now (a manual pass), or preview it with --dry-run.

        Oversize outputs are pruned first (head and tail kept, the original archived as
        p<seq>); then the pass keeps the newest history that fits the retain budget and
        condenses everything before it into one checkpoint. The originals stay readable
        with history_read and dashr_compaction_archive. --prune-only runs one prune pass
        instead: every tool output and assistant text above the pruning threshold outside
        the retained tail, and any oversize message. When the request is still above the
        trigger afterwards, a note says by how much and why. A pass longer than a second
        shows its progress: the phase, and each retry of the endpoint with its reason.

        Examples::

          %compact --dry-run
          %compact
          %compact --prune-only
        """
        args = parse(self.compact, line)
        if args.dry_run and args.prune_only:
            raise UsageError(
                "%compact: give --dry-run or --prune-only, not both (--dry-run previews "
                "%compact, its prune step included)"
            )
        with one_line_errors(), self.progress.scope():
            if args.dry_run:
                return dry_run_report(self.controller)
            if args.prune_only:
                return prune_report(self.controller)
            return compact_report(self.controller)

    # ------------------------------------------------------------------ recall

    @line_magic
    @magic_arguments()
    def history_outline(self, line: str) -> RecallResult:
        """The session at a glance: every checkpoint, then the turns.

        Shows the event count, each checkpoint (id, shadowed seqs, tokens, time, current or
        superseded, a one-line preview) and the turn list. Same text as
        print(history_outline()).

        Examples::

          %history_outline
          print(history_outline())
        """
        parse(self.history_outline, line)
        with one_line_errors():
            return self.controller.history_outline()

    @line_magic
    @magic_arguments()
    @argument("checkpoint", nargs="?", help="a checkpoint id, e.g. c42: its shadowed originals")
    @argument("--seq", type=int, help="read this session's history forward from seq N")
    @argument("--turn", type=int, help="read turn N's original events (turn memory's too)")
    @argument("--cursor", help="the next page: the token after 'cursor:' on a previous page")
    @no_var_expand
    def history_read(self, line: str) -> RecallResult:
        """Read the originals a checkpoint condensed, the history from a seq, or a turn as it
        was recorded (before turn memory rewrote it), page by page.

        Give exactly one of CHECKPOINT, --seq, --turn or --cursor. A page ends with
        'cursor: TOKEN' when more follows, else with '… [end of this range]'.
        Same text as print(history_read(...)).

        Examples::

          %history_read c42
          %history_read --turn 3
          %history_read --cursor c42@4:1200
        """
        args = parse(self.history_read, line)
        if sum(v is not None for v in (args.checkpoint, args.seq, args.turn, args.cursor)) != 1:
            raise UsageError(
                "%history_read: give exactly one of CHECKPOINT, --seq N, --turn N or --cursor "
                "TOKEN, e.g. %history_read c20, %history_read --seq 0 or %history_read --turn 1"
            )
        checkpoint = unquote(args.checkpoint) if args.checkpoint is not None else None
        cursor = unquote(args.cursor) if args.cursor is not None else None
        with one_line_errors():
            return self.controller.history_read(checkpoint, args.seq, cursor, args.turn)

    @line_magic
    @magic_arguments()
    @argument("query", nargs="+", help="the literal text to find; quotes group words")
    @argument("--checkpoint", help="search only this checkpoint's shadowed originals, e.g. c42")
    @argument("--limit", type=int, help="show at most N hits (up to Dashr.search_max_hits)")
    @argument("--cursor", help="the next page: the token a page that stops short names (h17)")
    @argument("--all", action="store_true", help="search every session in Dashr.session_dir")
    @no_var_expand
    def history_search(self, line: str) -> RecallResult:
        """Find literal text anywhere in the session's history, compacted or visible.

        Case-insensitive; words match across any whitespace; quotes group words and are
        not part of the query; no $variable expansion. Each hit shows its seq, whether it
        is shadowed (and by which checkpoint) or visible, its time and a snippet; a page
        that stops short names the --cursor of the next one.
        Same text as print(history_search(...)). --all searches every session file in
        Dashr.session_dir instead (through its index; each hit names its session).

        Examples::

          %history_search retry budget
          %history_search "ValueError: x" --checkpoint c42 --limit 5
          %history_search retry budget --cursor h17
          %history_search --all retry budget
        """
        args = parse(self.history_search, line)
        query = " ".join(unquote(word) for word in args.query)
        checkpoint = unquote(args.checkpoint) if args.checkpoint is not None else None
        cursor = unquote(args.cursor) if args.cursor is not None else None
        if args.all:  # every session file of the directory, through its index
            config = self.recall_config()
            return search_sessions(self.session_dir, query, checkpoint, args.limit, config, cursor)
        with one_line_errors():
            return self.controller.history_search(
                query, checkpoint=checkpoint, limit=args.limit, cursor=cursor
            )

    # ------------------------------------------------------------------ %%agent

    @cell_magic
    @magic_arguments()
    @argument("--max-steps", type=int, help="at most N model calls for this cell")
    def agent(self, line: str, cell: str) -> AgentReply:
        """Run one agent turn: the cell body is the user's message.

        The agent calls the model at Dashr.agent_base_url / Dashr.agent_model (or env
        DASHR_BASE_URL / DASHR_MODEL; key from DASHR_API_KEY), runs the code it asks for
        with run_cell in this kernel, compacts before every request and reads compacted
        history back with the recall tools or dashr_compaction_archive. Each step shows its
        line, the code run_cell ran and an excerpt of its output; slow passes and retried
        requests show their progress; the cell's result is the final answer (as Markdown).

        Examples::

          %%agent
          Load data.csv and plot the weekly totals.

          %%agent --max-steps 5
          Which checkpoint holds the first traceback?
        """
        args = parse(self.agent, line)
        if not cell.strip():
            raise UsageError("%%agent needs the user's message in the cell body")
        if args.max_steps is not None and args.max_steps < 1:
            raise UsageError(f"--max-steps: expected an integer >= 1, got {args.max_steps}")
        with one_line_errors(), agent_errors():
            agent = self._agent_for_cell()
            limit = agent.max_steps
            if args.max_steps is not None:
                agent.max_steps = args.max_steps
            try:
                with self.progress.scope() as progress:
                    return agent_cell(
                        self.shell, self.controller, cell.strip(), agent=agent, progress=progress
                    )
            finally:
                agent.max_steps = limit

    def _agent_for_cell(self) -> Agent:
        """The long-lived agent of this session (rebuilt after attach or option changes)."""
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
