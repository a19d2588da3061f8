"""Step 1 of a pass, ``plan``: what to compact and what the summarizer gets (SPEC §4.3).

Pure: from the session's current state, one :class:`~dashr_ext._meter.Measurement` and the
surface ranges an engine selected, it computes the regions (their seqs and token counts)
and one :class:`~dashr_ext._summarizers.base.SummaryRequest` per region, including the
request prefix the ``llm`` summarizer replays. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._checkpoints import summary_of
from .._events import Event
from .._formats.openai import event_to_openai, to_openai
from .._meter import Measurement
from .._payloads import summary_payload
from .._summarizers.base import SummaryRequest
from ..errors import SurfaceError

__all__ = ["PassPlan", "PlanView", "Region", "check_explicit_range", "plan_pass"]


class PlanView(Protocol):
    """The read-only view of a session that planning needs."""

    @property
    def id(self) -> str: ...

    @property
    def surface(self) -> Sequence[int]: ...

    @property
    def tools(self) -> list[dict[str, Any]] | None: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def system_message(self) -> Event | None: ...

    @property
    def events(self) -> Sequence[Event]: ...

    def event(self, seq: int) -> Event: ...

    def surface_events(self) -> Any: ...


@dataclass(frozen=True)
class Region:
    """One contiguous surface range a pass replaces by one checkpoint node."""

    first: int
    """Surface position of the first shadowed node."""
    last: int
    """Surface position of the last shadowed node (inclusive)."""
    seqs: tuple[int, ...]
    """The shadowed nodes, in surface order."""
    tokens: int
    """Their size in the measurement's metric (the inflation guard compares against it)."""


@dataclass(frozen=True)
class PassPlan:
    """Everything a pass decided before any I/O: the trigger, regions and summary requests."""

    trigger: str
    engine: str
    measurement: Measurement
    """The one measurement of the request this pass was planned on."""
    regions: tuple[Region, ...]
    requests: tuple[SummaryRequest, ...]
    """One summary request per region, in region order."""
    layout: Any = None
    """The :class:`~.layout.Layout` of a one-region pass's checkpoint (framing form, pins,
    names), or None (the recallable engine lays its checkpoints out itself)."""

    @property
    def shadowed_tokens(self) -> int:
        return sum(region.tokens for region in self.regions)


def plan_pass(
    view: PlanView,
    measurement: Measurement,
    spans: Sequence[tuple[int, int]],
    *,
    trigger: str,
    engine: str,
    max_summary_tokens: int,
    count_tokens: Callable[[str], int],
    show_superseded: bool = False,
    layout: Any = None,
) -> PassPlan:
    """The plan of a pass compacting surface positions ``spans`` (each inclusive)."""
    tokens_by_seq = dict(measurement.nodes)
    surface = view.surface
    regions: list[Region] = []
    requests: list[SummaryRequest] = []
    for a, b in spans:
        seqs = tuple(surface[a : b + 1])
        regions.append(Region(a, b, seqs, sum(tokens_by_seq[q] for q in seqs)))
        span_events = [view.event(q) for q in seqs]
        requests.append(
            SummaryRequest(
                span=span_events,
                previous_summary=previous_summary(view, span_events),
                max_summary_tokens=max_summary_tokens,
                prefix_messages=prefix_messages(view, a, b),
                count_tokens=count_tokens,
                tools=view.tools,
                show_superseded=show_superseded,
                carried="" if layout is None else layout.carried,
            )
        )
    return PassPlan(trigger, engine, measurement, tuple(regions), tuple(requests), layout)


def previous_summary(view: PlanView, span: Sequence[Event]) -> str | None:
    """The raw summaries of the checkpoints inside ``span`` (merged forward), or None.

    A checkpoint node whose pass's summary cannot be found (its ``source.checkpoint`` names
    none, and none can be derived) carries no summary forward: its text is in the span."""
    summaries = []
    for event in span:
        summary = summary_of(event, view.events)
        if summary is not None:
            summaries.append(str(summary_payload(summary)["summary"]))
    return "\n\n".join(summaries) if summaries else None


def prefix_messages(view: PlanView, a: int, b: int) -> list[dict[str, Any]]:
    """The request as the model saw it, up to the end of the compacted range ``a..b``."""
    messages = to_openai(view)
    offset = len(messages) - len(view.surface)
    if a == 0:
        return messages[: offset + b + 1]
    return [
        *messages[:offset],
        *(event_to_openai(view.event(q)) for q in view.surface[a : b + 1]),
    ]


class RangeView(Protocol):
    """What validating an explicit range needs."""

    @property
    def surface(self) -> Sequence[int]: ...

    def is_current(self, seq: int) -> bool: ...

    def position(self, seq: int) -> int: ...

    def balanced_cuts(self) -> list[bool]: ...

    def executing_seqs(self) -> set[int]: ...


def check_explicit_range(view: RangeView, start_seq: int, end_seq: int) -> tuple[int, int]:
    """Surface positions of the range ``start_seq..end_seq``, or a :class:`SurfaceError`."""
    for seq in (start_seq, end_seq):
        if not view.is_current(seq):
            raise SurfaceError(
                f"seq {seq} is not on the current surface; current seqs: "
                f"{_describe_seqs(view.surface)}"
            )
    a, b = view.position(start_seq), view.position(end_seq)
    if a > b:
        raise SurfaceError(f"start_seq {start_seq} comes after end_seq {end_seq} on the surface")
    cuts = view.balanced_cuts()
    if not (cuts[a] and cuts[b + 1]):
        raise SurfaceError(f"range {start_seq}..{end_seq} would split a tool call from its result")
    executing = view.executing_seqs()
    if any(seq in executing for seq in view.surface[a : b + 1]):
        raise SurfaceError("the range includes the step executing right now")
    return a, b


def _describe_seqs(seqs: Sequence[int]) -> str:
    if len(seqs) <= 12:
        return ", ".join(map(str, seqs))
    return f"{', '.join(map(str, seqs[:6]))}, …, {', '.join(map(str, seqs[-6:]))}"
