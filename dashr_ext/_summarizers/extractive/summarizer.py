"""The extractive summarizer: the pipeline from a span to its summary (SPEC §5.2).

Read the span into facts, carry the previous summary forward, add the new bullets and
the keyword line, then fit the token budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..._templates import state_sections, summary_sections
from ...errors import ConfigError, DashrError, SummarizerError
from ..base import SUMMARY_MODES, SummaryRequest, SummaryResult

if TYPE_CHECKING:
    from .gather import Limits

__all__ = ["ExtractiveSummarizer"]


class ExtractiveSummarizer:
    """Rule-based summaries: offline, deterministic, no key (the embedded default).

    It fills the eight sections of ``prompts/summarize.md`` (their headings are read
    from the template) from the shadowed span by rules, never by a model. Every sentence
    is scored by what it says (:mod:`.salience`: rules and constraints, deadlines,
    safety, goals, decisions, updates, errors, the literal values it carries), and the
    bullets' priorities follow that score, with recency breaking ties:

    ==========================  ==================================================
    section                     filled from
    ==========================  ==================================================
    Primary Request and Intent  the first user request that is more than a greeting,
                                verbatim (clipped at a line break; its most salient
                                sentences when the budget is short), then the other
                                user requests, ranked by salience
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
    Pending Jobs                each request after the last final answer, by what it
                                asks (its salient sentences); "TODO" / "still need
                                to" sentences of the assistant
    Current Work                the last assistant text; the last commands run
    Next Step                   answering the user's request when the user spoke
                                last, else the last "next / I'll / let me" sentence
                                of the assistant, else the last command to continue
                                from; the user's rules that bear on it. Left out
                                when the last request was answered
    Critical Context            the user's rules and constraints ("User rule (seq
                                N): never deploy on Fridays") and decisions;
                                decision sentences of the assistant ("because",
                                "instead of", "the root cause is"…); commands run
                                repeatedly; context messages; one ``Values —`` line
                                of labelled values (:mod:`.facts`: ``cap: `$450`
                                (was `$390`)``); one keyword line of literal anchors
                                grouped by kind (:func:`~.anchors.add_anchors`)
    ==========================  ==================================================

    A section with nothing to record is left out (no ``(none)`` bullet), and so is Next
    Step once the last request was answered: the absence says the work is complete.

    Values: a value stated for a label (a config key, or a user's "the cap is $390")
    is kept as a labelled pair. A later statement about the same label replaces it; the
    old value is shown only as ``(was …)``, and a bullet that still quotes it as
    current is rewritten, or dropped when that was all it said.

    Merging: with a previous summary (``request.previous_summary``, or the text of a
    checkpoint node inside the span) its bullets are carried forward section by
    section, new bullets are added after them, and nothing is said twice: equal bullets
    collapse, a file's operations are added up, an error keeps its latest status, the
    keyword line is one union, its labelled values are read back as values (so the span
    updates them), and Current Work / Next Step are replaced by the newer state.

    Budget: the output never exceeds ``request.max_summary_tokens`` (counted with
    ``request.count_tokens``). Items are taken by priority; a long request or message
    falls back to its most salient sentences before it is dropped, and a literal
    anchor outranks low-salience prose. The output is a pure function of the request:
    the same input gives byte-identical output.

    **Stub mode** (``request.mode == "stub"``, SPEC §6.3) writes an index stub of the
    span: up to three lines (``Request (seq N): …`` the chunk's user request(s), their
    most salient sentences when long, ``Done: …`` the commands run, files touched or tools
    called, ``Outcome: …`` the last command's failure or tally and the last assistant
    text), then one ``Keywords: errors: …; paths: …; values: …; config: …; ids: …;
    names: …; commands: …`` line of the span's literal anchors (at most
    ``anchors_per_kind`` of each kind, most salient first) that no line of
    ``request.index_keywords`` already holds. Checkpoint nodes are skipped, the background
    state is never used. Each line is first held to its share of the budget (together
    about 60%, the rest is the keyword line's); over budget, anchors are dropped (least
    salient first), then the lines are clipped further.

    **State mode** (``request.mode == "state"``) writes the state checkpoint: the sections
    of ``prompts/state.md`` (Goal, Constraints, Decisions, Current State, Key Values, Open
    Questions, Next Steps; headings read from the template) filled by the same rules: the
    user's rules are the constraints, the labelled values and anchors the key values.
    ``request.previous_summary`` is merged as above, whether it is a previous state or an
    eight-section summary being adopted (its sections are mapped: Primary Request → Goal,
    Files/Errors/Current Work → Current State, Pending Jobs → Open Questions, Critical
    Context → Decisions or Constraints, its values and keyword lines → Key Values).

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
        # The pipeline loads with the first summary, not with every session that may make one
        # (a read-only open for ``dashr outline`` or ``read`` builds a summarizer, never calls it).
        from .gather import gather
        from .items import N_SECTIONS
        from .reading import read_span
        from .render import fit, parse_summary, summary_layout
        from .state import state_text
        from .stub import stub_text

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
            limits = self.limits(request.show_superseded)
            return self._result(state_text(request, sections, headings, limits))
        if len(sections) != N_SECTIONS:
            raise SummarizerError(
                f"extractive summarizer: summarize.md lists {len(sections)} sections "
                f"({', '.join(sections)}); it fills exactly {N_SECTIONS}"
            )
        span = read_span(request)
        previous = [request.previous_summary] if request.previous_summary else []
        previous += span.previous
        old = [parse_summary(text, sections) for text in previous]
        items = gather(span, old, self.limits(request.show_superseded))
        budget = request.max_summary_tokens
        layout = summary_layout(sections, budget)
        text = fit(items, layout, request.count_tokens, budget, carried=request.carried)
        return self._result(text)

    def limits(self, show_superseded: bool = False) -> Limits:
        from .gather import Limits

        return Limits(
            self.first_request_chars,
            self.request_chars,
            self.current_work_chars,
            self.anchors_per_kind,
            show_superseded,
        )

    def _result(self, text: str) -> SummaryResult:
        return SummaryResult(text=text, kind=self.kind, model=None)
