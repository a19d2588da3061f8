"""Display objects for the magics: exact plain text for ``print()``, a table for notebooks.

A :class:`Report` is what ``%dashr status``, ``%dashr config``, ``%compact`` and the other
``%dashr`` subcommands return; a :class:`StepView` is one ``%%agent`` step (the code each
``run_cell`` ran, an excerpt of its output), and :class:`MarkdownReply` the turn's answer.
``str()`` and ``repr()`` are the plain text (what a terminal and an agent's ``print()``
show); :meth:`Report._repr_html_` renders the same rows as an HTML table. Both are pure
functions of the rows: no clock, no memory addresses, no IPython import.

Plain text layout::

    dashr status — session quickstart
    session file    /tmp/dashr-nb/sessions/quickstart.jsonl
    events          189 (seqs 0-188), 3 turns
    note: <one line per note>
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ._cells import RUN_CELL
from ._compaction.report import pruned_names, still_above
from ._jsontext import arguments_object
from ._plaintext import ShownAsText
from ._recall.render import counted, seq_range
from .agent import AgentReply
from .errors import CompactionError

if TYPE_CHECKING:
    from ._compaction.prune import PruneResult
    from ._controller import Dashr
    from ._events import Event

__all__ = [
    "MarkdownReply",
    "Report",
    "StepView",
    "ToolCallView",
    "compact_report",
    "dry_run_report",
    "prune_report",
    "status_report",
    "step_view",
]


@dataclass(frozen=True, repr=False)
class Report(ShownAsText):
    """A titled list of ``(name, value)`` rows and free-text notes."""

    title: str
    rows: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    kind: str = "report"
    """A short name for the CSS class (``dashr-status``, ``dashr-config``, …)."""

    @classmethod
    def of(
        cls,
        title: str,
        rows: Sequence[tuple[str, object]] = (),
        notes: Sequence[str] = (),
        kind: str = "report",
    ) -> Report:
        """Build a report; row values are shown with ``str()``."""
        return cls(title, tuple((name, str(value)) for name, value in rows), tuple(notes), kind)

    @property
    def text(self) -> str:
        """The plain text: the title, one aligned line per row, then ``note: …`` lines."""
        width = max((len(name) for name, _ in self.rows), default=0)
        lines = [self.title]
        lines.extend(f"{name.ljust(width)}  {value}" for name, value in self.rows)
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        out = [f'<div class="dashr-report dashr-{esc(self.kind)}"><p><b>{esc(self.title)}</b></p>']
        if self.rows:
            out.append("<table>")
            out.extend(
                f'<tr><th style="text-align:left">{esc(name)}</th>'
                f'<td style="text-align:left">{esc(value)}</td></tr>'
                for name, value in self.rows
            )
            out.append("</table>")
        out.extend(f"<p><em>note:</em> {esc(note)}</p>" for note in self.notes)
        out.append("</div>")
        return "".join(out)


# --------------------------------------------------------------------------- reports


def _size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    if n_bytes < 1024 * 1024:
        return f"{n_bytes / 1024:.1f} KiB"
    return f"{n_bytes / (1024 * 1024):.1f} MiB"


def _seq_span(seqs: Sequence[int]) -> str:
    return seq_range(min(seqs), max(seqs)) if seqs else "no seqs"


def status_report(c: Dashr) -> Report:
    """``%dashr status``: where the session is, how full the request is, what was compacted."""
    s = c.session
    cfg = c.config
    measured = c.measure()
    trigger = cfg.trigger_tokens
    cps = c.checkpoints()
    current = [cp.id for cp in cps if cp.superseded_by is None]
    pins = c.pins()
    archive_bytes = len(json.dumps(c.archive, ensure_ascii=False, default=str).encode("utf-8"))
    anchored = " (anchored on the provider's usage report)" if measured.anchored else ""
    # A new session's file is written from its first record on (the header waits for it).
    unwritten = s.path is not None and not s.path.exists()
    events = f"{len(s)} ({seq_range(0, len(s) - 1)}), {counted(len(s.turns), 'turn')}"
    file = f"{s.path} (written from the first record on)" if unwritten else s.path
    entries = "entry" if len(c.archive) == 1 else "entries"
    rows: list[tuple[str, object]] = [
        ("session file", file or "(in memory)"),
        ("events", f"{len(s)} (header only; nothing recorded yet)" if unwritten else events),
        ("surface", counted(len(s.surface), "node")),
        (
            "request tokens",
            f"~{measured.total} of {trigger} ({100 * measured.total // max(trigger, 1)}% of "
            f"the trigger){anchored}",
        ),
        ("trigger", f"compacts above {trigger} tokens"),
        (
            "recency window",
            f"{cfg.recency_window_tokens} tokens"
            if cfg.recency_window_tokens is not None
            else "off",
        ),
        (
            "threshold",
            f"{cfg.threshold_tokens} tokens ({cfg.threshold_ratio} × {cfg.context_window_tokens})",
        ),
        ("retain", f"{cfg.retain_budget} tokens kept verbatim by a pass"),
        (
            "engine",
            f"{cfg.engine} (auto {'on' if cfg.auto else 'off'}), summarizer "
            f"{c.summarizer.kind}" + (f" ({c.summarizer.model})" if c.summarizer.model else ""),
        ),
        (
            "checkpoints",
            f"{len(cps)}" + (f" (current: {', '.join(current)})" if current else ""),
        ),
        ("archive", f"{len(c.archive)} {entries}, ~{_size(archive_bytes)}"),
        ("checkpoint budget", f"{cfg.summary_budget} tokens (framing, pins, names, summary)"),
        ("pins", f"{len(pins)}" + (f" ({', '.join(p.id for p in pins)})" if pins else "")),
    ]
    return Report.of(f"dashr status — session {s.id}", rows, kind="status")


def dry_run_report(c: Dashr) -> Report:
    """``%compact --dry-run``: what a manual pass would prune and condense; commits nothing."""
    s = c.session
    with s.lock:  # plan on the state measured, whatever other threads record
        measured = c.measure()
        items = c.engine.plan_prune(measured, old=False) if c.config.prune else []
        saved = sum(i.tokens_before - i.tokens_after for i in items)
        # The summary range of the surface as pruning would leave it: same nodes, smaller.
        sizes = {i.position: i.tokens_after for i in items}
        pruned = replace(
            measured,
            total=measured.total - saved,
            counted=measured.counted - saved,
            nodes=[(q, sizes.get(p, t)) for p, (q, t) in enumerate(measured.nodes)],
        )
        try:
            plan = c.engine.plan("manual", pruned)
        except CompactionError as exc:  # declined: no checkpoint fits under the span
            return Report.of(
                "dry run: %compact would decline",
                [("reason", str(exc)), ("request tokens", f"~{measured.total:,}")],
                ("nothing was committed",),
                kind="compact",
            )
    prune_rows: list[tuple[str, object]] = []
    if items:
        label = "seq" if len(items) == 1 else "seqs"
        listed = ", ".join(str(i.event.seq) for i in items)
        prune_rows.append(
            ("prune first", f"{_messages(len(items))}: {label} {listed} (~{saved:,} saved)")
        )
    what = f"prune {_messages(len(items))}"
    if plan is None:
        rows: list[tuple[str, object]] = [
            *prune_rows,
            ("request tokens", f"~{measured.total:,}"),
            ("retain", f"{c.config.retain_budget:,}"),
        ]
        if items:
            return Report.of(
                f"dry run: %compact would {what} and condense nothing",
                rows,
                ("nothing was committed",),
                kind="compact",
            )
        return Report.of(
            "dry run: nothing to compact",
            rows,
            ("the surface already fits the retain budget; nothing was committed",),
            kind="compact",
        )
    a, b = plan.regions[0].first, plan.regions[-1].last
    seqs = [q for region in plan.regions for q in region.seqs]
    kept = len(s.surface) - len(seqs)
    rows = [
        *prune_rows,
        ("range", f"{_seq_span(seqs)} (surface positions {a}-{b})"),
        ("events", len(seqs)),
        ("estimated tokens", f"~{plan.shadowed_tokens:,}"),
    ]
    if len(plan.regions) > 1:  # the recallable engine: index stubs, then the state
        rows.append(("checkpoints", f"{len(plan.regions) - 1} index stubs and the state"))
    rows += [
        ("kept verbatim", counted(kept, "node")),
        ("request tokens now", f"~{measured.total:,}"),
    ]
    notes = ["nothing was committed"]
    if items:
        notes.append("the range is planned on the sizes pruning would leave")
    return Report.of(
        f"dry run: %compact would {what + ' and ' if items else ''}condense {len(seqs)} events",
        rows,
        notes,
        kind="compact",
    )


def compact_report(c: Dashr) -> Report:
    """``%compact``: prune oversize outputs, run a manual pass and describe both."""
    result = c.compact("manual")
    pruned = c.last_prune
    above = _still_above(c)
    prune_rows = [] if pruned is None else [("pruned first", _pruned_row(pruned))]
    if result is None and pruned is not None:
        return Report.of(
            f"pruned {_messages(len(pruned.pruned))}; nothing to summarize",
            [*prune_rows, ("request tokens", _change(pruned.tokens_before, c.measure().total))],
            (above,) if above else (),
            kind="compact",
        )
    if result is None:
        return Report.of(
            "nothing to compact",
            [("request tokens", f"~{c.measure().total:,}")],
            (above or "the surface already fits the retain budget",),
            kind="compact",
        )
    archived = (
        " / ".join(f"{name} ×{n}" for name, n in result.archived.items() if n)
        if result.archived is not None
        else "archiving failed (the log still has the originals)"
    )
    made = result.checkpoints or (result.checkpoint,)
    into = (
        f"checkpoint {result.checkpoint}"
        if len(made) == 1
        else f"{len(made) - 1} index stubs ({', '.join(made[:-1])}) and state {result.checkpoint}"
    )
    before = result.tokens_before if pruned is None else pruned.tokens_before
    return Report.of(
        f"compacted {len(result.shadowed_seqs)} events into {into}",
        [
            *prune_rows,
            ("range", _seq_span(result.shadowed_seqs)),
            ("request tokens", _change(before, result.tokens_after)),
            ("archive", f'dashr_compaction_archive["{result.checkpoint}"]: {archived or "empty"}'),
            ("read back", f'history_read("{result.checkpoint}")'),
        ],
        (above,) if above else (),
        kind="compact",
    )


def prune_report(c: Dashr) -> Report:
    """``%compact --prune-only``: one prune pass (old outputs included) and what it did."""
    result = c.prune()
    above = _still_above(c)
    if result is None:
        cfg = c.config
        why = (
            f"no tool output or assistant text above {cfg.prune_threshold:,} tokens outside "
            f"the retained tail, and no message above {cfg.oversize_tokens:,} tokens"
        )
        return Report.of(
            "nothing to prune",
            [("request tokens", f"~{c.measure().total:,}")],
            (above or why,),
            kind="compact",
        )
    first = result.pruned[0]
    read = f"history_read(seq={first.seq})"
    if first.archive_key is not None:
        read += f' or dashr_compaction_archive["{first.archive_key}"]'
    return Report.of(
        f"pruned {_messages(len(result.pruned))}",
        [
            ("pruned", _pruned_row(result)),
            ("request tokens", _change(result.tokens_before, result.tokens_after)),
            ("read back", read),
        ],
        (above,) if above else (),
        kind="compact",
    )


def _messages(n: int) -> str:
    return counted(n, "message")


def _change(before: int, after: int) -> str:
    """``~21,710 -> ~1,949``: the request's tokens before and after, one format."""
    return f"~{before:,} -> ~{after:,}"


def _pruned_row(result: PruneResult) -> str:
    return f"{pruned_names(result)} (~{result.tokens_before - result.tokens_after:,} saved)"


def _still_above(c: Dashr) -> str | None:
    with c.session.lock:
        return still_above(c.session, c.measure(), c.config, count_tokens=c.meter.count_text)


# --------------------------------------------------------------------------- %%agent

EXCERPT_LINES = 8
"""Lines of a tool's output a step shows (the last ones for an error: the exception ends it)."""
EXCERPT_LINE_CHARS = 200
_PRE = "font-family:monospace;line-height:1.25;"
"""Inline, so a page without a notebook's stylesheet (an HTML export) shows code as code."""


@dataclass(frozen=True)
class ToolCallView:
    """One tool call of a step: what it ran and what came back."""

    name: str
    code: str | None
    """The code of a ``run_cell`` call; None for the other tools (see :attr:`arguments`)."""
    arguments: str
    output: str
    """An excerpt of the result (:func:`output_excerpt`)."""
    is_error: bool


@dataclass(frozen=True, repr=False)
class StepView(ShownAsText):
    """One ``%%agent`` step: its progress line, then each call's code and output excerpt.

    Plain text indents the code and the excerpt under the line; HTML puts them in a
    collapsed ``<details>`` whose summary is the line, the code syntax-highlighted.
    """

    line: str
    calls: tuple[ToolCallView, ...] = ()

    @property
    def text(self) -> str:
        lines = [self.line]
        for call in self.calls:
            if call.code is not None:
                lines.append(f"  {call.name}:")
                lines.extend(_indent(call.code))
            else:
                lines.append(f"  {call.name} {call.arguments}")
            lines.append("  error:" if call.is_error else "  output:")
            lines.extend(_indent(call.output))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        line = f'<span style="font-family:monospace">{esc(self.line)}</span>'
        if not self.calls:
            return f'<div class="dashr-step">{line}</div>'
        first = next((c.code for c in self.calls if c.code and c.code.strip()), None)
        preview = ""
        if first is not None:
            head = first.strip().splitlines()[0][:80]
            more = " …" if len(first.strip().splitlines()) > 1 or len(head) == 80 else ""
            preview = f' <span style="color:#888;font-family:monospace">— {esc(head)}{more}</span>'
        out = [f'<details class="dashr-step"><summary>{line}{preview}</summary>']
        for call in self.calls:
            out.append('<div style="margin-left:1.5em">')
            if call.code is not None:
                out.append(_highlighted(call.code))
            else:
                out.append(
                    f'<pre style="{_PRE}margin:0.2em 0"><b>{esc(call.name)}</b> '
                    f"{esc(call.arguments)}</pre>"
                )
            color = "#b22222" if call.is_error else "#444"
            out.append(
                f'<pre class="dashr-output" style="{_PRE}color:{color};margin:0.2em 0 0.6em 0;'
                f'border-left:3px solid #ddd;padding-left:0.6em">{esc(call.output)}</pre>'
            )
            out.append("</div>")
        out.append("</details>")
        return "".join(out)


def step_view(line: str, events: Sequence[Event]) -> StepView:
    """The view of a step from the events it appended (its calls, then their results)."""
    calls: dict[str, tuple[str, str]] = {}
    results: dict[str, tuple[str, bool]] = {}
    for event in events:
        if event.type == "assistant/message":
            for block in event.message.tool_calls:
                calls[block.id] = (block.name, block.arguments)
        elif event.type == "tool/result":
            message = event.message
            if message.tool_call_id is not None:
                results[message.tool_call_id] = (message.text, bool(message.is_error))
    views = []
    for call_id, (name, arguments) in calls.items():
        text, is_error = results.get(call_id, ("(no result)", True))
        parsed = arguments_object(arguments) if name == RUN_CELL else None
        code = parsed.get("code") if parsed is not None else None
        views.append(
            ToolCallView(
                name,
                code if isinstance(code, str) else None,
                arguments,
                output_excerpt(text, is_error=is_error),
                is_error,
            )
        )
    return StepView(line, tuple(views))


def output_excerpt(text: str, *, is_error: bool = False) -> str:
    """At most :data:`EXCERPT_LINES` lines of ``text``, each cut to a readable width.

    The first lines, or for an error the last ones, with a line saying how many are left out.
    """
    lines = text.rstrip("\n").splitlines() or ["(no output)"]
    cut = [
        ln if len(ln) <= EXCERPT_LINE_CHARS else ln[: EXCERPT_LINE_CHARS - 1] + "…" for ln in lines
    ]
    hidden = len(cut) - EXCERPT_LINES
    if hidden <= 0:
        return "\n".join(cut)
    marker = f"… ({hidden} more line{'s' if hidden != 1 else ''})"
    if is_error:
        return "\n".join([marker, *cut[-EXCERPT_LINES:]])
    return "\n".join([*cut[:EXCERPT_LINES], marker])


def _indent(text: str) -> list[str]:
    return [f"    {line}" for line in text.rstrip("\n").splitlines()] or ["    "]


def _highlighted(code: str) -> str:
    """``code`` as HTML with inline colours (no stylesheet needed, so exports keep them)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:  # pragma: no cover - IPython brings pygments
        return f'<pre style="{_PRE}margin:0.2em 0">{html.escape(code)}</pre>'
    formatter = HtmlFormatter(
        noclasses=True, cssstyles="margin:0.2em 0", prestyles="font-family:monospace"
    )
    return str(highlight(code, PythonLexer(), formatter))


class MarkdownReply(AgentReply):
    """An :class:`~dashr_ext.agent.AgentReply` a notebook renders as Markdown (plain text
    stays the answer's exact text)."""

    @classmethod
    def of(cls, reply: AgentReply) -> MarkdownReply:
        return cls(
            reply.text,
            reason=reply.reason,
            turn=reply.turn,
            steps=reply.steps,
            checkpoints=reply.checkpoints,
        )

    def _repr_markdown_(self) -> str | None:
        return self.text if self.text.strip() else None
