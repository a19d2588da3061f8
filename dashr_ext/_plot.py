"""Token pressure over a session: the series (pure) and its plot (matplotlib, optional).

:func:`pressure_series` replays the log once and returns the request size after every event
that changed the surface: the envelope (system prompt, tool schemas, reply priming) plus the
tokens of every surface node, the meter's local count (the same metric compaction passes
compare). It is O(events): a replace subtracts only the nodes it shadows (its
``sourceEventSeqs``), and node counts come from the meter's per-seq cache.

:func:`plot_pressure` draws that series with the compaction trigger, the retain budget and a
marker per committed checkpoint. It needs matplotlib, the ``plot`` extra::

    pip install 'dashr_ext[plot]'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._checkpoints import checkpoint_of
from ._events import Replace
from ._payloads import TurnLandings
from ._pruned import pruned_info

if TYPE_CHECKING:
    from ._config import CompactionConfig
    from ._controller import Dashr
    from ._meter import TokenMeter
    from ._session import Session

__all__ = ["Compaction", "PressureSeries", "plot_pressure", "pressure_series"]

PLOT_EXTRA_HINT = "pip install 'dashr_ext[plot]'"


@dataclass(frozen=True)
class Compaction:
    """A committed checkpoint as the series sees it."""

    seq: int
    """Seq of the checkpoint node (the surface change)."""
    checkpoint: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class PressureSeries:
    """Request size after each surface change, and the budgets it is measured against."""

    seqs: tuple[int, ...]
    """Seq of each event that changed the surface, ascending."""
    tokens: tuple[int, ...]
    """Envelope plus surface node tokens right after the event of the same index."""
    compactions: tuple[Compaction, ...]
    trigger_tokens: int
    """A pressure pass runs when the request is above this (see ``CompactionConfig``)."""
    threshold_tokens: int
    recency_window_tokens: int | None
    retain_tokens: int

    @property
    def peak_tokens(self) -> int:
        return max(self.tokens, default=0)


def pressure_series(
    session: Session,
    meter: TokenMeter,
    config: CompactionConfig,
    *,
    extra_tokens: int = 0,
    recall_tokens: int = 0,
) -> PressureSeries:
    """Replay ``session``'s log into the request size after every surface change.

    ``extra_tokens`` are envelope tokens every request carries beyond the session header
    (tool schemas a harness adds); ``recall_tokens`` those of the recall tools, which
    requests carry from the first checkpoint (or pruned output, or committed turn landing) on.
    """
    nodes: dict[int, int] = {}
    node_sum = 0
    envelope = 0
    system_prompt: str | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    seqs: list[int] = []
    tokens: list[int] = []
    compactions: list[Compaction] = []
    recallable = False
    landings = TurnLandings()
    for event in session.events:
        if event.type == "session/header":
            system_prompt = event.data.get("systemPrompt")
            tools = event.data.get("tools")
            envelope = meter.envelope_tokens(system_prompt, tools) + extra_tokens
            continue
        if event.type == "system/message":
            system_prompt = event.message.text
            envelope = meter.envelope_tokens(system_prompt, tools) + extra_tokens
            if recallable:
                envelope += recall_tokens
            continue
        op = event.surface_op
        if op is None:
            committed = landings.committed
            landings.fold(event)
            if landings.committed > committed and not recallable:
                recallable = True  # a turn landing committed: the recall tools join too
                envelope += recall_tokens
                if tokens:
                    tokens[-1] = envelope + node_sum
            continue
        before = envelope + node_sum
        if isinstance(op, Replace):
            for seq in event.source_event_seqs or ():
                node_sum -= nodes.pop(seq, 0)
        count = meter.node_tokens(event)
        nodes[event.seq] = count
        node_sum += count
        seqs.append(event.seq)
        tokens.append(envelope + node_sum)
        checkpoint = checkpoint_of(event, session.events)
        if (
            isinstance(op, Replace)
            and not recallable
            and (checkpoint is not None or pruned_info(event) is not None)
        ):
            recallable = True  # the recall tools join the request (a checkpoint or a prune)
            envelope += recall_tokens
            tokens[-1] = envelope + node_sum
        if checkpoint is not None and isinstance(op, Replace):
            compactions.append(Compaction(event.seq, checkpoint, before, envelope + node_sum))
    return PressureSeries(
        seqs=tuple(seqs),
        tokens=tuple(tokens),
        compactions=tuple(compactions),
        trigger_tokens=config.trigger_tokens,
        threshold_tokens=config.threshold_tokens,
        recency_window_tokens=config.recency_window_tokens,
        retain_tokens=config.retain_budget,
    )


def plot_pressure(dashr: Dashr, ax: Any = None) -> Any:
    """Draw :func:`pressure_series` of ``dashr``'s session; returns the matplotlib Axes."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            f"plot_pressure needs matplotlib, which is not installed: {PLOT_EXTRA_HINT}"
        ) from exc
    extra, recall = dashr.extra_envelope()
    series = pressure_series(
        dashr.session, dashr.meter, dashr.config, extra_tokens=extra, recall_tokens=recall
    )
    new_figure = ax is None
    if ax is None:
        _fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.step(series.seqs, series.tokens, where="post", color="tab:blue", label="request tokens")
    trigger = (
        f"recency window ({series.trigger_tokens})"
        if series.recency_window_tokens == series.trigger_tokens
        else f"threshold ({series.trigger_tokens})"
    )
    ax.axhline(series.trigger_tokens, color="tab:red", linestyle="--", label=f"trigger: {trigger}")
    ax.axhline(
        series.retain_tokens,
        color="tab:green",
        linestyle=":",
        label=f"retain ({series.retain_tokens})",
    )
    for c in series.compactions:
        ax.axvline(c.seq, color="tab:gray", alpha=0.5, linewidth=1)
        ax.annotate(
            c.checkpoint,
            (c.seq, c.tokens_before),
            textcoords="offset points",
            xytext=(2, 4),
            fontsize=8,
            color="tab:gray",
        )
    ax.set_xlabel("event seq")
    ax.set_ylabel("tokens")
    ax.set_title(f"Context pressure: session {dashr.session.id}")
    ax.set_ylim(bottom=0, top=max(series.peak_tokens, series.trigger_tokens) * 1.12)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    if new_figure:
        ax.figure.tight_layout()
    return ax
