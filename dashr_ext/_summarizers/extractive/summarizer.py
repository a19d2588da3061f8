"""The extractive summarizer: the pipeline from a span to its summary (SPEC §5.2).

Read the span into facts, carry the previous summary forward, add the new bullets and
the keyword line, then fit the token budget.
"""

from __future__ import annotations

from pathlib import Path

from ..._templates import state_sections, summary_sections
from ...errors import ConfigError, DashrError, SummarizerError
from ..base import SUMMARY_MODES, SummaryRequest, SummaryResult
from .anchors import add_anchors
from .items import N_SECTIONS, REQUEST, Items
from .reading import read_span
from .render import fit, parse_summary
from .sections import carry, carry_state, fill
from .state import state_text
from .stub import stub_text

__all__ = ["ExtractiveSummarizer"]


class ExtractiveSummarizer:
    """Rule-based summaries: offline, deterministic, no key (the embedded default).

    It fills the eight sections of ``prompts/summarize.md`` (their headings are read
    from the template) from the shadowed span by rules, never by a model:

    ==========================  ==================================================
    section                     filled from
    ==========================  ==================================================
    Primary Request and Intent  the first user request verbatim (clipped at a line
                                break), then every later user request
    Key Technical Concepts      identifiers the assistant quoted in backticks, most
                                mentioned first
    Files and Code              the file operations of tool calls (the archive's
                                extractor, :mod:`dashr_ext._fileops`) and the paths
                                a command ran or named, with what was done to them
                                (viewed, edited, deleted, ran, …) and the last
                                edit's first line
    Errors and Fixes            exact error lines of tool results (exception lines,
                                pytest ``FAILED``, ``error:``), with the command
                                that produced them and whether a later run of that
                                command succeeded
    Pending Jobs                a request still without a final answer; "TODO" /
                                "still need to" sentences of the assistant
    Current Work                the last assistant text; the last commands run
    Next Step                   the last "next / I'll / let me" sentence of the
                                assistant, else the last command to continue from;
                                ``(none)`` when the last request was answered
    Critical Context            decision sentences ("because", "instead of", "the
                                root cause is"…), commands run repeatedly (test and
                                reproduction commands), context messages, and one
                                keyword line of literal anchors grouped by kind
                                (:func:`~.anchors.add_anchors`)
    ==========================  ==================================================

    Merging: with a previous summary (``request.previous_summary``, or the text of a
    checkpoint node inside the span) its bullets are carried forward section by
    section, new bullets are added after them, and nothing is said twice: equal bullets
    collapse, a file's operations are added up, an error keeps its latest status, the
    keyword line is one union, and Current Work / Next Step are replaced by the newer
    state.

    Budget: every bullet has a priority; while the rendered summary exceeds
    ``request.max_summary_tokens`` (counted with ``request.count_tokens``) the
    lowest-priority bullet is dropped. The output is a pure function of the request:
    the same input gives byte-identical output.

    **Stub mode** (``request.mode == "stub"``, SPEC §6.3) writes an index stub of the
    span: up to three lines (``Request (seq N): …`` the chunk's user request(s),
    ``Done: …`` the commands run, files touched or tools called, ``Outcome: …`` the last
    command's failure or tally and the last assistant text), then one
    ``Keywords: errors: …; paths: …; values: …; config: …; ids: …; commands: …`` line of
    the span's literal anchors (at most ``anchors_per_kind`` of each kind) that no line of
    ``request.index_keywords`` already holds. Checkpoint nodes are skipped, the background
    state is never used. Each line is first held to its share of the budget (together
    about 60%, the rest is the keyword line's); over budget, anchors are dropped (least
    salient first), then the lines are clipped further.

    **State mode** (``request.mode == "state"``) writes the state checkpoint: the sections
    of ``prompts/state.md`` (Goal, Constraints, Decisions, Current State, Key Values, Open
    Questions, Next Steps; headings read from the template) filled by the same rules, with
    the user's rule-setting sentences as constraints. ``request.previous_summary`` is
    merged as above, whether it is a previous state or an eight-section summary being
    adopted (its sections are mapped: Primary Request → Goal, Files/Errors/Current Work →
    Current State, Pending Jobs → Open Questions, Critical Context → Decisions or
    Constraints, its keyword line → Key Values).

    ``prompts_dir`` overrides where ``summarize.md`` and ``state.md`` (the section
    headings) are read from; the other options bound individual bullets, in characters.
    """

    kind = "extractive"
    model: str | None = None

    def __init__(
        self,
        *,
        prompts_dir: str | Path | None = None,
        first_request_chars: int = 1500,
        request_chars: int = 400,
        current_work_chars: int = 600,
        anchors_per_kind: int = 6,
    ) -> None:
        for name, value, low in (
            ("first_request_chars", first_request_chars, 40),
            ("request_chars", request_chars, 40),
            ("current_work_chars", current_work_chars, 40),
            ("anchors_per_kind", anchors_per_kind, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"ExtractiveSummarizer.{name}", f"an integer >= {low}", value)
        self.prompts_dir = prompts_dir
        self.first_request_chars = first_request_chars
        self.request_chars = request_chars
        self.current_work_chars = current_work_chars
        self.anchors_per_kind = anchors_per_kind

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Summarize ``request.span`` as its mode asks, within the token budget."""
        if not isinstance(request.max_summary_tokens, int) or request.max_summary_tokens <= 0:
            raise SummarizerError(
                f"max_summary_tokens must be a positive integer, got {request.max_summary_tokens!r}"
            )
        if request.mode not in SUMMARY_MODES:
            raise SummarizerError(
                f"extractive summarizer: unknown mode {request.mode!r}; expected one of "
                + ", ".join(repr(m) for m in SUMMARY_MODES)
            )
        if request.mode == "stub":
            return self._result(stub_text(request, self.anchors_per_kind))
        try:
            sections = summary_sections(self.prompts_dir)
            headings = state_sections(self.prompts_dir) if request.mode == "state" else ()
        except DashrError as exc:
            raise SummarizerError(f"extractive summarizer: {exc}") from None
        if request.mode == "state":
            return self._result(
                state_text(
                    request,
                    sections,
                    headings,
                    anchors_per_kind=self.anchors_per_kind,
                    first_request_chars=self.first_request_chars,
                    request_chars=self.request_chars,
                    current_work_chars=self.current_work_chars,
                )
            )
        if len(sections) != N_SECTIONS:
            raise SummarizerError(
                f"extractive summarizer: summarize.md lists {len(sections)} sections "
                f"({', '.join(sections)}); it fills exactly {N_SECTIONS}"
            )
        span = read_span(request)
        previous = [request.previous_summary] if request.previous_summary else []
        previous += span.previous
        items = Items()
        old = [parse_summary(text, sections) for text in previous]
        limit = max(160, request.max_summary_tokens)  # ~4 chars a token: a bullet ≤ ~1/4 budget
        carry(items, old, span)
        fill(
            items,
            span,
            has_previous_request=any(o[REQUEST] for o in old),
            first_request_chars=min(self.first_request_chars, limit),
            request_chars=min(self.request_chars, limit),
            current_work_chars=self.current_work_chars,
        )
        carry_state(items, old)
        add_anchors(items, span, old, self.anchors_per_kind)
        text = fit(items, sections, request.count_tokens, request.max_summary_tokens)
        return self._result(text)

    def _result(self, text: str) -> SummaryResult:
        return SummaryResult(text=text, kind=self.kind, model=None)
