"""The small-scale survival protocol: passes of ``Dashr`` over ``small_sessions`` at budgets.

A **budget** is a share (:data:`BUDGETS`) of the session's original request-visible text in
characters: the system prompt and every message's text (tool calls' names and arguments
included) as ``request_messages()`` renders it before any compaction. A **pass** is one
``Dashr.compact()`` with ``auto=False`` (no other compaction runs), ``retain_tokens`` the
measured size of the last exchange (the last two surface nodes: a user message and the
reply) and ``max_summary_tokens`` what the budget leaves beside the system prompt and that
tail, in tokens (``budget_tokens = budget_chars × tokens/chars`` of the session's own
text, counted with ``d.meter.count_text``), clamped up to the config's minimum
(:data:`MIN_SUMMARY_TOKENS`; :attr:`Pass.clamped` says when).

**Feasible**: the budget holds the system prompt, the tail and :data:`FOOTER_TOKENS` of
checkpoint framing. Each pass lands in one case (:attr:`Pass.case`):

* ``fit``: the whole request after the pass (system, checkpoint with its framing, tail,
  pointer) is within the budget in characters;
* ``over``: it committed, the budget was feasible, and the request is over it;
* ``shrunk`` / ``grew``: infeasible, committed, and the request got strictly smaller /
  did not;
* ``declined``: ``compact()`` returned None or raised a ``dashr_ext.errors`` error, and the
  request is exactly as before;
* ``error``: any other exception, or a decline that changed the request.

**Compliant**: ``fit``, or (infeasible and ``shrunk`` or ``declined``).

Runs (:func:`replay`): one pass; five passes in the **same session** (after each pass a
segment of more conversation is recorded, with its own ground truth, and the budget is the
share of everything recorded so far); five passes **fed back** (the request after a pass,
without the pointer, recorded as the only input of a fresh session, the checkpoint as a
user message; the budget stays the original's). Every pass is scored
(``small_sessions.score``); :attr:`Run.lost` counts the items present after pass k >= 2
and missing after pass k + 1 while current and the budget did not shrink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from small_sessions import Score, SmallSession, Truth, normalize, request_text, score

from dashr_ext import CompactionConfig, Dashr, Summarizer
from dashr_ext._config import MIN_SUMMARY_TOKENS
from dashr_ext.errors import DashrError

__all__ = [
    "BUDGETS",
    "FOOTER_TOKENS",
    "FRAMING_TOKENS",
    "MIN_SUMMARY_TOKENS",
    "MODES",
    "PASSES",
    "Pass",
    "Run",
    "replay",
]

BUDGETS = (0.10, 0.20, 0.30)
PASSES = 5
MODES = ("1 pass", "same session", "fed back")
FOOTER_TOKENS = MIN_SUMMARY_TOKENS
"""The least checkpoint a pass makes (the minimal footer line, its message and a line of
summary): a budget without room for it is infeasible."""
FRAMING_TOKENS = 32
"""The minimal footer line (25–29 tokens) and its message's overhead: what a checkpoint
adds besides what it says."""


@dataclass(frozen=True)
class Pass:
    """One pass: sizes in characters, its case and its score."""

    index: int
    budget_chars: int
    original_chars: int
    """The uncompacted request text the budget is a share of."""
    before_chars: int
    after_chars: int
    feasible: bool
    case: str
    max_summary_tokens: int
    clamped: bool
    framing_chars: int
    """Request text that is neither the system prompt, a recorded message nor a summary
    body: checkpoint framing, footers, markers, pointers."""
    score: Score
    present: frozenset[tuple[str, str]]
    """(key, text) of the current values present."""
    current: frozenset[tuple[str, str]]
    error: str = ""

    @property
    def compliant(self) -> bool:
        return self.case == "fit" or (not self.feasible and self.case in ("shrunk", "declined"))


@dataclass(frozen=True)
class Run:
    session: str
    size: str
    ratio: float
    mode: str
    passes: tuple[Pass, ...]

    @property
    def final(self) -> Pass:
        return self.passes[-1]

    @property
    def compliant(self) -> bool:
        return all(p.compliant for p in self.passes)

    @property
    def feasible(self) -> bool:
        return all(p.feasible for p in self.passes)

    @property
    def lost(self) -> int:
        """Items present after pass k >= 2, current and missing after k + 1 (budget kept)."""
        return sum(self._lost(k) for k in range(1, len(self.passes) - 1))

    @property
    def lost_first(self) -> int:
        """The same from pass 1 to pass 2."""
        return self._lost(0) if len(self.passes) > 1 else 0

    def _lost(self, k: int) -> int:
        a, b = self.passes[k], self.passes[k + 1]
        if b.budget_chars < a.budget_chars:
            return 0
        return len((a.present & b.current) - b.present)


# --------------------------------------------------------------------------- one pass


def _retained_tokens(d: Dashr) -> int:
    nodes = dict(d.measure().nodes)
    return max(1, sum(nodes.get(q, 0) for q in d.session.surface[-2:]))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("role", "content", "tool_calls", "tool_call_id")
    return all(a.get(k) == b.get(k) for k in keys)


def _split(
    d: Dashr, request: Sequence[Mapping[str, Any]], recorded: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[Mapping[str, Any], str]], int]:
    """The request's messages after the system prompt, each as (message, what): ``raw``
    (a recorded message), ``checkpoint`` (holds a summary body) or ``pointer``; and the
    characters of the summary bodies shown."""
    summaries = sorted(
        (
            str(e.data.get("summary") or "")
            for e in d.session.events
            if e.type == "compaction/summary"
        ),
        key=len,
        reverse=True,
    )
    out: list[tuple[Mapping[str, Any], str]] = []
    body = 0
    for m in request[1:]:
        if any(_same(m, r) for r in recorded):
            out.append((m, "raw"))
            continue
        text = str(m.get("content") or "")
        shown = next((s for s in summaries if s and s in text), "")
        body += len(shown)
        out.append((m, "checkpoint" if shown else "pointer"))
    return out, body


@dataclass(frozen=True)
class _Setting:
    budget_chars: int
    original_chars: int
    tokens_per_char: float
    truth: Truth


def _pass(d: Dashr, index: int, setting: _Setting, recorded: Sequence[Mapping[str, Any]]) -> Pass:
    before = d.request_messages()
    before_text = request_text(before)
    system = str(before[0].get("content") or "")
    tail_chars = len(request_text(before[-2:]))
    budget_tokens = int(setting.budget_chars * setting.tokens_per_char)
    room = (
        budget_tokens - d.meter.count_text(system) - d.meter.count_text(request_text(before[-2:]))
    )
    max_summary = max(MIN_SUMMARY_TOKENS, room)
    footer_chars = FOOTER_TOKENS / setting.tokens_per_char
    feasible = setting.budget_chars >= len(system) + tail_chars + footer_chars
    d.config = CompactionConfig(
        auto=False, retain_tokens=_retained_tokens(d), max_summary_tokens=max_summary
    )
    committed, error, clean = False, "", True
    try:
        committed = d.compact() is not None
    except DashrError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # an unexpected failure is a case of its own
        error, clean = f"{type(exc).__name__}: {exc}", False
    after = d.request_messages()
    after_text = request_text(after)
    if not committed and after_text != before_text:
        clean = False
    if not clean:
        case = "error"
    elif len(after_text) <= setting.budget_chars:
        case = "fit"
    elif not committed:
        case = "declined"
    elif feasible:
        case = "over"
    else:
        case = "shrunk" if len(after_text) < len(before_text) else "grew"
    parts, body = _split(d, after, recorded)
    framing = sum(len(request_text([m])) for m, what in parts if what != "raw") - body
    result = score(after_text, setting.truth)
    texts = {v.key: v.text for v in setting.truth.current}
    return Pass(
        index=index,
        budget_chars=setting.budget_chars,
        original_chars=setting.original_chars,
        before_chars=len(before_text),
        after_chars=len(after_text),
        feasible=feasible,
        case=case,
        max_summary_tokens=max_summary,
        clamped=room < MIN_SUMMARY_TOKENS,
        framing_chars=framing,
        score=result,
        present=frozenset((k, texts[k]) for k, ok in result.present.items() if ok),
        current=frozenset(texts.items()),
        error=error,
    )


# --------------------------------------------------------------------------- runs

SummarizerFactory = Callable[[Callable[[], Truth]], "str | Summarizer"]
"""Makes the summarizer of a run, given a function returning the truth that holds now."""


def _setting(
    d: Dashr, system: str, recorded: Sequence[Mapping[str, Any]], ratio: float, truth: Truth
) -> _Setting:
    text = request_text([{"content": system}, *recorded])
    tokens = d.meter.count_text(text)
    return _Setting(int(ratio * len(text)), len(text), tokens / len(text), truth)


def replay(
    session: SmallSession,
    ratio: float,
    summarizer: SummarizerFactory | None = None,
) -> dict[str, Run]:
    """The three runs of ``session`` at ``ratio`` (:data:`MODES` → run); the first pass
    is shared (it is the same operation in each)."""
    now: list[Truth] = [session.truth]
    made = summarizer(lambda: now[0]) if summarizer is not None else "extractive"
    recorded: list[Mapping[str, Any]] = list(session.messages)
    d = Dashr.create(
        config=CompactionConfig(auto=False),
        summarizer=made,
        system_prompt=session.system,
        in_memory=True,
    )
    try:
        d.record_openai(list(session.messages))
        first = _setting(d, session.system, recorded, ratio, session.truth)
        same = [_pass(d, 1, first, recorded)]
        fed_input = [
            m for m, what in _split(d, d.request_messages(), recorded)[0] if what != "pointer"
        ]
        for k, segment in enumerate(session.segments, start=2):
            d.record_openai(list(segment.messages))
            recorded.extend(segment.messages)
            now[0] = segment.truth
            setting = _setting(d, session.system, recorded, ratio, segment.truth)
            same.append(_pass(d, k, setting, recorded))
    finally:
        d.close()
    now[0] = session.truth
    fed = [same[0]]
    for k in range(2, PASSES + 1):
        messages = [_as_input(m) for m in fed_input]
        with Dashr.create(
            config=CompactionConfig(auto=False),
            summarizer=summarizer(lambda: now[0]) if summarizer is not None else "extractive",
            system_prompt=session.system,
            in_memory=True,
        ) as fresh:
            fresh.record_openai(messages)
            fed.append(_pass(fresh, k, first, messages))
            fed_input = [
                m
                for m, what in _split(fresh, fresh.request_messages(), messages)[0]
                if what != "pointer"
            ]
    name, size = session.name, session.size
    return {
        MODES[0]: Run(name, size, ratio, MODES[0], tuple(same[:1])),
        MODES[1]: Run(name, size, ratio, MODES[1], tuple(same)),
        MODES[2]: Run(name, size, ratio, MODES[2], tuple(fed)),
    }


def _as_input(message: Mapping[str, Any]) -> dict[str, Any]:
    """A request message to record in a fresh session (a checkpoint becomes a user message)."""
    out = {
        k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "tool_call_id")
    }
    if out.get("role") not in ("user", "assistant", "tool"):
        out["role"] = "user"
    return out


def present_values(text: str, truth: Truth) -> list[str]:
    """The current values of ``truth`` that ``text`` shows (for messages of failed checks)."""
    t = normalize(text)
    return [v.text for v in truth.current if normalize(v.text) in t]
