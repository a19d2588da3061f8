"""The ``recallable`` engine: frozen index stubs plus one state checkpoint (SPEC §6.3).

After every pass the request reads ``[system][stubs…][state][tail]``:

* newly stale history — from after the last committed stub (the surface head when none) to
  the retain boundary — splits into chunks (:mod:`.chunking`); each chunk becomes an
  **index stub**, its own checkpoint, committed once and never rewritten or re-compacted,
  so the request prefix up to the state stays byte-identical between passes (the
  provider's prompt cache keeps it);
* the **state checkpoint**, the working memory, replaces the trailing slice; it is rewritten
  every pass from the previous state (the merge base: the latest state-class summary in
  the log, or an adopted summary-engine checkpoint) plus everything newly stale. The
  superseded state node simply falls into the next pass's first chunk, shadowed like any
  history and still readable (``history_read`` of its checkpoint: the two-hop chain).

A pass summarizes all regions concurrently, off the surface; a failed stub becomes a
code-only pointer stub, a failed state fails the pass (nothing commits). The inflation
guard covers the whole pass; its failure defers the next attempt until more history is
stale (``deferredStaleTokens`` on ``compaction/end``). Regions then commit left to right,
one ``[compaction/summary, checkpoint]`` batch each, and ``compaction/end`` closes the
pass. A process killed between two batches leaves stubs with no state after them; the next
pressure check completes the pass from the log, without the guard. When the stubs pass
``stub_region_ratio × trigger`` the oldest roll up by code into one directory (:mod:`.rollup`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._checkpoints import Checkpoint, is_checkpoint
from .._events import Event, ToolCallBlock
from .._meter import MESSAGE_OVERHEAD_TOKENS
from .._payloads import POINTER_SOURCE, RECALL_TOOL_NAMES, SummarizerInfo, summary_payload
from .._summarizers.base import SummaryRequest, SummaryResult
from ..errors import CompactionError, SurfaceError
from .chunking import chunk_region
from .commit import ArchiveUndo, check_span_current, commit_pass, restore_archive
from .compose import MIN_SUMMARY_BODY, Composition, compose_region, layout_data
from .engine import (
    CompactionEngine,
    CompactionResult,
    ExtraEnvelope,
    GuardFailure,
    _Started,
    _warn_uncompacted,
)
from .layout import Declined
from .plan import PassPlan, Region, prefix_messages
from .rollup import entries_from_data, plan_rollup
from .selection import allowed_cuts, has_new_content, head_cut_for_retain
from .summarize import MAX_CONCURRENT_SUMMARIES, summarize_each

if TYPE_CHECKING:
    from .._meter import Measurement

__all__ = ["RecallableEngine", "RecallablePlan"]

INDEX_CLASSES = ("stub", "directory")
STATE_CLASSES = ("state", "summary")
CODE_SUMMARIZER: SummarizerInfo = {"kind": "code", "model": None}
_NO_EXTRA = ExtraEnvelope()
RECENT_STUBS = 2
"""Latest committed stubs a new stub's request reads for continuity."""


@dataclass(frozen=True)
class RecallablePlan(PassPlan):
    """A pass of the recallable engine: stub regions, then the state region (last)."""

    classes: tuple[str, ...] = ()
    """``"stub"`` or ``"state"`` per region, in region order."""
    request_of: tuple[int | None, ...] = ()
    """Index into :attr:`requests` per region, or None for a code-only pointer stub."""
    code_text: tuple[str | None, ...] = ()
    """The pointer stub text of each code-only region."""
    resume: bool = False
    """Completing a pass a killed process left half committed: commits without the guard."""


class RecallableEngine(CompactionEngine):
    name = "recallable"
    _nodes: tuple[int, dict[int, Checkpoint]] | None = None

    # ------------------------------------------------------------------ the surface's shape

    def _by_node(self) -> dict[int, Checkpoint]:
        """Current checkpoints by node seq, rebuilt only when the log has grown (every
        pre-request check asks for it, several times per pass)."""
        length = len(self.session)
        if self._nodes is None or self._nodes[0] != length:
            self._checkpoints.update(self.session)
            current = {cp.node_seq: cp for cp in self._checkpoints.items if not cp.superseded_by}
            self._nodes = (length, current)
        return self._nodes[1]

    def _index_end(self, by_node: dict[int, Checkpoint]) -> int:
        """Position after the last index node (stub or directory) at the surface head."""
        surface = self.session.surface
        k = 0
        while k < len(surface) and (cp := by_node.get(surface[k])) and cp.role in INDEX_CLASSES:
            k += 1
        return k

    def _interrupted(self) -> bool:
        """True when stubs are followed by no checkpoint: a pass died mid-commit.

        Every pass commits its state right after its stubs, so only the node after the
        index needs a look (not the whole surface).
        """
        by_node = self._by_node()
        lo = self._index_end(by_node)
        surface = self.session.surface
        if lo == 0 or by_node[surface[lo - 1]].role != "stub":
            return False
        return lo == len(surface) or surface[lo] not in by_node

    def _merge_base(self) -> str | None:
        """The raw text of the latest committed state-class checkpoint (adopted summary too)."""
        self._checkpoints.update(self.session)
        for cp in reversed(self._checkpoints.items):
            if cp.role in STATE_CLASSES:
                return str(summary_payload(self.session.event(cp.summary_seq))["summary"])
        return None

    def _deferral_margin(self) -> int:
        return self.config.chunk_budget // 4

    # ------------------------------------------------------------------ range choice

    def _stale_region(self, hi: int) -> tuple[int, int] | None:
        s = self.session
        lo = self._index_end(self._by_node())
        if hi <= lo:
            return None
        if not has_new_content(s.event(q) for q in s.surface[lo:hi]):
            return None  # only the previous state (and its pointer): nothing new
        return lo, hi - 1

    def select(self, measurement: Measurement, *, retry: bool = False) -> tuple[int, int] | None:
        s = self.session
        tokens = [t for _seq, t in measurement.nodes]
        hi = head_cut_for_retain(s.units(), s.balanced_cuts(), tokens, self.config.retain_budget)
        span = self._stale_region(hi)
        if span is None:
            return None
        deferred = self._deferred_until()
        if deferred is not None and sum(tokens[span[0] : span[1] + 1]) <= deferred:
            return None  # the guard refused this much; wait for more stale history
        return span

    def select_overflow(self) -> tuple[int, int] | None:
        return self._stale_region(self._overflow_cut())

    # ------------------------------------------------------------------ planning

    def plan(
        self,
        trigger: str,
        measurement: Measurement,
        span: tuple[int, int] | None = None,
        *,
        retry: bool = False,
        max_summary_tokens: int | None = None,
        resume: bool = False,
    ) -> PassPlan | None:
        with self.session.lock:
            self._check_measured(measurement)
            if span is not None:
                span = self._check_explicit(span)
            elif trigger == "context-overflow":
                span = self.select_overflow()
            elif resume:
                span = self._resume_span(measurement)
            else:
                span = self.select(measurement, retry=retry)
            if span is None:
                return None
            return self._plan_regions(trigger, measurement, span, resume)

    def _check_explicit(self, span: tuple[int, int]) -> tuple[int, int]:
        lo = self._index_end(self._by_node())
        a, b = span
        if a != lo:
            first = self.session.surface[lo] if lo < len(self.session.surface) else None
            raise SurfaceError(
                "the recallable engine compacts from the first node after its index stubs "
                f"(seq {first}); committed stubs are never compacted again"
            )
        checked = self._stale_region(b + 1)
        if checked is None:
            raise SurfaceError("the range holds nothing but the previous state checkpoint")
        return checked

    def _resume_span(self, measurement: Measurement) -> tuple[int, int] | None:
        s = self.session
        tokens = [t for _seq, t in measurement.nodes]
        hi = head_cut_for_retain(s.units(), s.balanced_cuts(), tokens, self.config.retain_budget)
        return self._stale_region(hi)

    def _plan_regions(
        self, trigger: str, measurement: Measurement, span: tuple[int, int], resume: bool
    ) -> RecallablePlan:
        s = self.session
        cfg = self.config
        surface = s.surface
        tokens = [t for _seq, t in measurement.nodes]
        lo, last = span
        allowed = allowed_cuts(s.units(), s.balanced_cuts())
        turn_starts = {
            k
            for k in range(lo, last + 1)
            if (e := s.event(surface[k])).type == "user/message" and e.message.source_kind == "user"
        }
        # At most MAX_CONCURRENT_SUMMARIES - 1 stubs: the whole pass is one round of calls.
        stale_tokens = sum(tokens[lo : last + 1])
        chunk = max(cfg.chunk_budget, -(-stale_tokens // (MAX_CONCURRENT_SUMMARIES - 1)))
        chunking = chunk_region(allowed, tokens, lo, last + 1, chunk, turn_starts)
        while len(chunking.chunks) > MAX_CONCURRENT_SUMMARIES - 1:  # turn-aligned ends
            chunk = chunk * 3 // 2
            chunking = chunk_region(allowed, tokens, lo, last + 1, chunk, turn_starts)
        by_node = self._by_node()
        index = [by_node[q] for q in surface[:lo] if q in by_node]
        keywords, recent = self._index_texts(index)
        base = self._merge_base()
        regions: list[Region] = []
        requests: list[SummaryRequest] = []
        classes: list[str] = []
        request_of: list[int | None] = []
        code_text: list[str | None] = []
        for a, b in _merge_empty(
            [*chunking.chunks, chunking.trailing],
            lambda a, b: bool(_content(s.event(q) for q in surface[a : b + 1])),
        ):
            seqs = tuple(surface[a : b + 1])
            regions.append(Region(a, b, seqs, sum(tokens[a : b + 1])))
        for region in regions[:-1]:
            content = _content(s.event(q) for q in region.seqs)
            classes.append("stub")
            if not content or all(_is_recalled(e) for e in content):
                request_of.append(None)
                code_text.append(_pointer_stub(content, recalled=bool(content)))
                continue
            request_of.append(len(requests))
            code_text.append(None)
            requests.append(
                SummaryRequest(
                    span=content,
                    previous_summary=None,
                    max_summary_tokens=cfg.stub_budget,
                    prefix_messages=(),
                    count_tokens=self.meter.count_text,
                    mode="stub",
                    background=base,
                    index_keywords=keywords,
                    recent_stubs=recent,
                )
            )
        stale = _content(s.event(q) for q in surface[lo : last + 1])
        classes.append("state")
        request_of.append(len(requests))
        code_text.append(None)
        laid = self._summary_room(
            (regions[-1].first, regions[-1].last),
            measurement,
            cfg.state_budget,
            "state",
            fit_room=False,
        )
        # Pins too large for the state: it is written as before, without them.
        layout = None if isinstance(laid, Declined) else laid
        requests.append(
            SummaryRequest(
                span=stale,
                previous_summary=base,
                max_summary_tokens=MIN_SUMMARY_BODY if layout is None else layout.summary_tokens,
                carried="" if layout is None else layout.carried,
                prefix_messages=prefix_messages(s, 0, last),
                count_tokens=self.meter.count_text,
                tools=s.tools,
                mode="state",
                show_superseded=cfg.show_superseded,
            )
        )
        return RecallablePlan(
            trigger,
            self.name,
            measurement,
            tuple(regions),
            tuple(requests),
            layout,
            classes=tuple(classes),
            request_of=tuple(request_of),
            code_text=tuple(code_text),
            resume=resume,
        )

    def _index_texts(self, index: Sequence[Checkpoint]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Keyword lines of every committed stub (directories included) and the latest stubs."""
        keywords: list[str] = []
        stubs: list[str] = []
        for cp in index:
            data = summary_payload(self.session.event(cp.summary_seq))
            keywords += [e.keywords for e in entries_from_data(data) if e.keywords]
            if cp.role == "stub":
                stubs.append(str(data["summary"]))
        return tuple(keywords), tuple(stubs[-RECENT_STUBS:])

    # ------------------------------------------------------------------ triggers

    def before_request(self, extra: ExtraEnvelope = _NO_EXTRA) -> list[CompactionResult]:
        results = self._resume(extra)
        return results + super().before_request(extra)

    def _resume(self, extra: ExtraEnvelope) -> list[CompactionResult]:
        """Complete a pass a killed process left with stubs but no state (SPEC §6.3)."""
        s = self.session
        if s.read_only:
            return []
        with s.lock:
            if self._slot.compaction_id is not None or not self._interrupted():
                return []
            plan = self.plan("pressure", self.measure(extra), resume=True)
            if plan is None:
                return []
            started = self._start(plan)
        try:
            return [self._finish(started, extra)[0]]
        except (CompactionError, SurfaceError) as exc:
            _warn_uncompacted(exc)
            return []

    # ------------------------------------------------------------------ the pass

    def _finish(
        self, started: _Started, extra: ExtraEnvelope
    ) -> tuple[CompactionResult, Measurement, int]:
        plan = started.plan
        if not isinstance(plan, RecallablePlan):  # pragma: no cover - engine invariant
            raise TypeError("a recallable pass needs a RecallablePlan")
        s = self.session
        self._report("summarizing", f"{len(plan.requests)} regions concurrently")
        outcomes = summarize_each(self.summarizer, plan.requests)
        state = outcomes[-1]
        if isinstance(state, Exception):
            self._fail(started, state, {})
        texts: list[tuple[str, SummarizerInfo]] = []
        for i in range(len(plan.classes)):
            k = plan.request_of[i]
            outcome = None if k is None else outcomes[k]
            if isinstance(outcome, SummaryResult):
                texts.append((outcome.text, {"kind": outcome.kind, "model": outcome.model}))
            else:
                content = _content(s.event(q) for q in plan.regions[i].seqs)
                text = plan.code_text[i] or _pointer_stub(content, recalled=False)
                texts.append((text, CODE_SUMMARIZER))
        undo: ArchiveUndo = {}
        with s.lock:
            try:
                check_span_current(s, plan.regions)  # appends after the span are fine
                compositions = self._compose(plan, texts, started.compaction_id, len(s))
                new = sum(c.checkpoint_tokens for c in compositions)
                if not plan.resume and new >= plan.shadowed_tokens:
                    raise GuardFailure(
                        f"inflation guard: the pass's checkpoints (~{new} tokens) are not "
                        f"smaller than what they would shadow (~{plan.shadowed_tokens} tokens); "
                        "nothing was committed, and the next attempt waits for more history",
                        plan.shadowed_tokens,
                    )
                archived = None
                for composition in compositions:  # left to right, one batch per region
                    error = commit_pass(
                        s,
                        self.archive,
                        composition,
                        start_seq=started.start_seq,
                        archive_max_bytes=self.config.archive_max_bytes,
                        undo=undo,
                        close=False,
                    )
                    undo.clear()  # committed: the archive entry stays with the log
                    archived = None if error is not None else composition.data["archive"]
                s.append_log("compaction/end", {"compactionId": started.compaction_id})
            except GuardFailure as exc:
                self._fail(started, exc, undo, {"deferredStaleTokens": exc.stale_tokens})
            except BaseException as exc:
                self._fail(started, exc, undo)
            self._slot.compaction_id = self._slot.thread = None
            self.last_error = None
            self._rollup()
            after = self.measure(extra)
            measured_at = len(s)
        state_cp = compositions[-1]
        result = CompactionResult(
            checkpoint=state_cp.checkpoint,
            trigger=plan.trigger,
            shadowed_seqs=tuple(q for c in compositions for q in c.shadowed),
            tokens_before=plan.measurement.total,
            tokens_after=after.total,
            archived=dict(archived) if archived is not None else None,  # type: ignore[arg-type]
            summary_seq=int(state_cp.checkpoint[1:]),
            compaction_id=started.compaction_id,
            checkpoints=tuple(c.checkpoint for c in compositions),
        )
        self._report(
            "done", f"{result.checkpoint}: ~{result.tokens_before} -> ~{after.total} tokens"
        )
        return result, after, measured_at

    def _compose(
        self,
        plan: RecallablePlan,
        texts: Sequence[tuple[str, SummarizerInfo]],
        compaction_id: str,
        first_seq: int,
    ) -> list[Composition]:
        """One composition per region; region ``i``'s summary event will be ``first_seq + 2i``."""
        s = self.session
        at_ms = self.clock()
        compositions = []
        for i, (region, (text, info)) in enumerate(zip(plan.regions, texts, strict=True)):
            compositions.append(
                compose_region(
                    region.seqs,
                    region.tokens,
                    [s.event(q) for q in region.seqs],
                    text,
                    info,
                    trigger=plan.trigger,
                    engine=self.name,
                    compaction_id=compaction_id,
                    summary_seq=first_seq + 2 * i,
                    at_ms=at_ms,
                    session_id=s.id,
                    archive_reasoning=self.config.archive_reasoning,
                    count_tokens=self.meter.count_text,
                    checkpoint_class=plan.classes[i],
                    extra=self._summary_extra(plan, i),
                )
            )
        return compositions

    @staticmethod
    def _summary_extra(plan: RecallablePlan, i: int) -> dict[str, Any] | None:
        """Keys beyond the protocol's: the state's wider input range, a resumed pass."""
        extra: dict[str, Any] = {"resumes": True} if plan.resume else {}
        if plan.classes[i] == "state" and plan.requests[-1].span:
            read = [e.seq for e in plan.requests[-1].span]
            # What the state was written from (the whole stale region), beyond what it
            # replaces (the trailing slice, its shadowedRange).
            extra["inputRange"] = {"start": min(read), "end": max(read)}
        if plan.classes[i] == "state" and plan.layout is not None:
            extra.update(layout_data(plan.layout))
        return extra or None

    # ------------------------------------------------------------------ rollup

    def _rollup(self) -> None:
        """Roll the oldest stubs into one directory when the index passes its share.

        Code only, under the session lock, as its own pass; skipped (and retried after the
        next pass) when the directory would not be smaller than what it replaces.
        """
        s = self.session
        cap = int(self.config.stub_region_ratio * self.config.trigger_tokens)
        by_node = self._by_node()
        lo = self._index_end(by_node)
        measured = dict(self.meter.measure(s).nodes)
        sizes = [measured[q] for q in s.surface[:lo]]
        index = [by_node[q] for q in s.surface[:lo]]
        plan = plan_rollup(
            [cp.role for cp in index],
            sizes,
            lambda k: entries_from_data(summary_payload(s.event(index[k].summary_seq))),
            cap,
            self.meter.count_text,
            MESSAGE_OVERHEAD_TOKENS,
        )
        if plan is None:
            return
        seqs = tuple(s.surface[plan.start : plan.end])
        start = s.append_log(
            "compaction/start",
            {"compactionId": f"p{len(s)}", "trigger": "pressure", "engine": self.name},
        )
        compaction_id = str(start.data["compactionId"])
        composition = compose_region(
            seqs,
            sum(sizes[plan.start : plan.end]),
            [s.event(q) for q in seqs],
            plan.text,
            CODE_SUMMARIZER,
            trigger="pressure",
            engine=self.name,
            compaction_id=compaction_id,
            summary_seq=len(s),
            at_ms=self.clock(),
            session_id=s.id,
            archive_reasoning=self.config.archive_reasoning,
            count_tokens=self.meter.count_text,
            checkpoint_class="directory",
            extra={"directory": [e.to_json() for e in plan.entries]},
        )
        undo: ArchiveUndo = {}
        try:
            commit_pass(
                s,
                self.archive,
                composition,
                start_seq=start.seq,
                archive_max_bytes=self.config.archive_max_bytes,
                undo=undo,
            )
        except Exception as exc:  # the main pass committed; the rollup waits for the next
            restore_archive(self.archive, undo)
            s.append_log("compaction/end", {"compactionId": compaction_id, "error": str(exc)})


def _merge_empty(
    regions: list[tuple[int, int]], has_content: Callable[[int, int], bool]
) -> list[tuple[int, int]]:
    """``regions`` with every chunk holding no history (only the previous state, or
    pointers) joined to the region after it: a stub that indexes nothing is a wasted one."""
    out: list[tuple[int, int]] = []
    carry: int | None = None
    for i, (a, b) in enumerate(regions):
        start = a if carry is None else carry
        if i < len(regions) - 1 and not has_content(start, b):
            carry = start
            continue
        out.append((start, b))
        carry = None
    return out


def _content(events: Any) -> list[Event]:
    """The events a stub or state summarizes: no checkpoints, no pointers (code-made)."""
    return [
        e
        for e in events
        if not is_checkpoint(e)
        and not (e.type == "context/message" and e.message.source_kind == POINTER_SOURCE)
    ]


def _is_recalled(event: Event) -> bool:
    """True for the recall tools' calls and results: history the model read back."""
    if event.type == "tool/result":
        return event.message.tool_name in RECALL_TOOL_NAMES
    if event.type == "assistant/message":
        calls = [b for b in event.message.content if isinstance(b, ToolCallBlock)]
        texts = [b for b in event.message.content if not isinstance(b, ToolCallBlock)]
        return (
            bool(calls)
            and not any(getattr(b, "text", "").strip() for b in texts)
            and all(c.name in RECALL_TOOL_NAMES for c in calls)
        )
    return False


def _pointer_stub(content: Sequence[Event], *, recalled: bool) -> str:
    """A code-only stub: what kind of events the chunk holds, without a model."""
    if recalled:
        return "Recalled earlier history (history_read / history_search output); nothing new."
    counts: dict[str, int] = {}
    tools: dict[str, int] = {}
    for event in content:
        counts[event.type] = counts.get(event.type, 0) + 1
        for block in event.message.content:
            if isinstance(block, ToolCallBlock):
                tools[block.name] = tools.get(block.name, 0) + 1
    labels = {
        "user/message": "user messages",
        "assistant/message": "assistant messages",
        "tool/result": "tool results",
        "context/message": "context messages",
    }
    parts = [f"{n} {labels.get(kind, kind)}" for kind, n in counts.items()]
    line = "No summary was written for this part (" + (", ".join(parts) or "no events") + ")."
    if tools:
        line += " Tools called: " + ", ".join(f"{name} ×{n}" for name, n in tools.items()) + "."
    return line
