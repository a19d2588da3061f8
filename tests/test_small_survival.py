"""Small-scale survival: short and medium sessions compacted to 10%, 20% and 30% of their text.

The sessions (``small_sessions``) and the pass protocol (``small_protocol``) define the
terms; every session is replayed at every budget, with one pass, five passes in the same
session and five passes fed back. The suite asserts, per size class:

* every pass is compliant (within the budget, or, where the budget is infeasible, a
  strictly smaller checkpoint or a clean decline);
* at 20%, at least 90% of the current values are present, over the feasible runs;
* no superseded value is shown, not even as ``(was ...)``;
* nothing present after pass 2 is lost by pass 5;
* no fact is shown twice.

The first tests check the instrument itself: the sessions are deterministic, of their
size class, plant every string only where they say, and a plain checklist of the current
values fits every feasible 20% budget, so the bar can be met.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cache

import pytest
from small_protocol import BUDGETS, FOOTER_TOKENS, FRAMING_TOKENS, MODES, Run, replay
from small_sessions import (
    KINDS,
    SmallSession,
    Truth,
    checklist,
    message_text,
    normalize,
    occurrences,
    request_text,
    score,
    sessions,
)

from dashr_ext import SummaryRequest, SummaryResult, TokenMeter

COUNTS = {"small": 30, "medium": 18}
SESSIONS = {size: sessions(size, n) for size, n in COUNTS.items()}
PRESENT_AT_20 = 0.90
_METER = TokenMeter()


def _all() -> list[SmallSession]:
    return [s for group in SESSIONS.values() for s in group]


def _text(session: SmallSession, extra: int = 0) -> str:
    messages = [*session.messages, *(m for seg in session.segments[:extra] for m in seg.messages)]
    return request_text([{"content": session.system}, *messages])


@cache
def runs(size: str, ratio: float) -> list[dict[str, Run]]:
    return [replay(s, ratio) for s in SESSIONS[size]]


# --------------------------------------------------------------------------- the instrument


def test_sessions_are_the_same_in_every_process() -> None:
    """Recorded figures (bench/RESULTS.md) refer to exactly these sessions."""
    for size, group in SESSIONS.items():
        again = sessions(size, len(group))
        assert again == group
    blob = json.dumps([[s.system, s.messages, [g.messages for g in s.segments]] for s in _all()])
    assert hashlib.sha256(blob.encode()).hexdigest()[:16] == SESSIONS_DIGEST


SESSIONS_DIGEST = "737adbf85680c726"


def test_sessions_are_of_their_size_class() -> None:
    for s in SESSIONS["small"]:
        assert 100 <= _METER.count_text(_text(s)) <= 600, s.name
    for s in SESSIONS["medium"]:
        assert 2000 <= len(_text(s)) <= 8000, s.name


def test_every_planted_string_is_where_the_truth_says() -> None:
    """Each value at its statements only; old values before their update, never in the
    last exchange of any stretch; repeats at two seqs; no value inside another."""
    for s in _all():
        stretches = [(s.messages, s.truth)]
        recorded = list(s.messages)
        for seg in s.segments:
            recorded.extend(seg.messages)
            stretches.append((tuple(recorded), seg.truth))
        strings = [v.text for v in s.segments[-1].truth.current] + list(
            s.segments[-1].truth.superseded
        )
        for a in strings:
            assert not [b for b in strings if a != b and normalize(a) in normalize(b)], (s.name, a)
        for messages, truth in stretches:
            last = len(messages) - 2
            for v in truth.current:
                at = occurrences(messages, v.text)
                assert at and max(at) < last, (s.name, v.text, at)
            for old in truth.superseded:
                at = occurrences(messages, old)
                assert at and max(at) < last, (s.name, old, at)
            for sentence in truth.repeated:
                assert len(occurrences(messages, sentence)) == 2, (s.name, sentence)
        assert s.messages[-2]["role"] == "user" and s.messages[-1]["role"] == "assistant"
        assert "tool_calls" not in s.messages[-1]


def test_the_sessions_cover_every_kind_label_source_and_trap() -> None:
    seen = {(v.kind, v.labelled, v.source) for s in _all() for v in s.truth.current}
    assert {k for k, _, _ in seen} == set(KINDS)
    for kind in KINDS:
        assert {lab for k, lab, _ in seen if k == kind} == {True, False}, kind
    assert {src for _, _, src in seen} == {"user", "assistant", "tool"}
    for size, group in SESSIONS.items():
        assert sum(bool(s.truth.superseded) for s in group) >= 0.6 * len(group), size
        assert sum(bool(s.truth.repeated) for s in group) >= 0.3 * len(group), size
        near = [
            s
            for s in group
            if len({v.key for v in s.truth.current if v.key.startswith(_FAMILY_PREFIXES)}) >= 2
        ]
        assert len(near) == len(group), size  # a near-duplicate pair in every session
        chit_chat_first = [s for s in group if not _mentions_a_value(s, 0)]
        assert 0 < len(chit_chat_first) < len(group), size
        assert any(m.get("tool_calls") for s in group for m in s.messages)


_FAMILY_PREFIXES = ("budget.", "url.", "date.", "limit.", "id.", "host.")


def _mentions_a_value(s: SmallSession, index: int) -> bool:
    values = [*s.truth.current, *(v for seg in s.segments for v in seg.truth.current)]
    text = normalize(message_text(s.messages[index]))
    return any(normalize(v.text) in text for v in values) or bool(
        set(s.truth.superseded) & {o for o in s.truth.superseded if normalize(o) in text}
    )


def test_a_plain_checklist_fits_every_feasible_budget_at_20_percent() -> None:
    """The bar can be met: where the budget holds the system prompt, the last exchange
    and the least checkpoint, it also holds the least framing and every current value,
    one per line."""
    for s in _all():
        text = _text(s)
        tokens_per_char = _METER.count_text(text) / len(text)
        budget = int(0.20 * len(text))
        kept = len(s.system) + len(request_text(s.messages[-2:]))
        if budget >= kept + FOOTER_TOKENS / tokens_per_char:
            framing = FRAMING_TOKENS / tokens_per_char
            assert kept + framing + len(checklist(s.truth)) <= budget, s.name


def test_the_score_reads_was_notes_repeats_and_case() -> None:
    from small_sessions import Value

    truth = Truth(
        current=(
            Value("b", "$500", "value", False, "user"),
            Value("r", "never push straight to main", "rule", True, "user", rule=True),
        ),
        superseded=("$800",),
        repeated=("RULE: never push straight to main.",),
    )
    s = score("Budget $500 (was $800). Never push   straight to MAIN.", truth)
    assert s.share == 1.0 and s.stale == ("$800",) and s.duplicates == 0
    assert s.rules == (1, 1) and s.labelled == (1, 1)
    twice = score("RULE: never push straight to main. RULE: never push straight to main.", truth)
    assert twice.present == {"b": False, "r": True} and twice.duplicates == 2


class ChecklistSummarizer:
    """Writes the current values one per line: what a summary needs to pass the bar."""

    kind = "checklist"
    model: str | None = None

    def __init__(self, truth: Callable[[], Truth]) -> None:
        self.truth = truth

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult(checklist(self.truth()), self.kind, None)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def test_the_protocol_scores_a_checklist_in_full_and_stale_free() -> None:
    """The driver credits a summary that keeps everything, in every mode and pass."""
    for s in (*SESSIONS["small"][:3], *SESSIONS["medium"][:3]):
        for mode, run in replay(s, 0.30, ChecklistSummarizer).items():
            for p in run.passes:
                if p.case in ("fit", "over", "shrunk", "grew"):
                    assert p.score.share == 1.0, (s.name, mode, p.index, p.case)
                    assert p.score.stale == () and p.score.duplicates == 0, (s.name, mode)
            assert run.lost == 0


# --------------------------------------------------------------------------- the suite

KNOWN = "the extractive summary and the checkpoint framing do not meet this yet"


def _xfail(failing: set[tuple[object, ...]], *params: object) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN)] if params in failing else []
    return pytest.param(*params, marks=marks, id="-".join(_id(p) for p in params))


def _id(p: object) -> str:
    return f"{round(p * 100)}%" if isinstance(p, float) else str(p).replace(" ", "-")


# The parameters that fail today, each xfail(strict=True): drop one from its set once it
# passes (a strict xfail that passes fails the suite).
_BY_BUDGET = {(z, r) for z in COUNTS for r in BUDGETS}
FAILING_COMPLIANCE: set[tuple[object, ...]] = set()
FAILING_PRESENT: set[tuple[object, ...]] = {(z, m) for z in COUNTS for m in MODES} - {
    ("medium", "1 pass"),
    ("medium", "same session"),
    ("medium", "fed back"),
}
FAILING_STALE: set[tuple[object, ...]] = set(_BY_BUDGET)
FAILING_LOST: set[tuple[object, ...]] = {(z, "same session") for z in COUNTS}
FAILING_DUPLICATES: set[tuple[object, ...]] = {("medium", 0.30)}


@pytest.mark.parametrize(
    ("size", "ratio"), [_xfail(FAILING_COMPLIANCE, z, r) for z in COUNTS for r in BUDGETS]
)
def test_every_pass_is_compliant(size: str, ratio: float) -> None:
    bad = [
        f"{r.session} {r.mode} pass {p.index}: {p.case} ({p.after_chars} > {p.budget_chars})"
        for group in runs(size, ratio)
        for r in group.values()
        for p in r.passes
        if not p.compliant
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("size", "mode"), [_xfail(FAILING_PRESENT, z, m) for z in COUNTS for m in MODES]
)
def test_at_20_percent_nine_in_ten_current_values_survive(size: str, mode: str) -> None:
    finals = [g[mode].final for g in runs(size, 0.20) if g[mode].feasible]
    assert finals, "no feasible run"
    present = sum(sum(p.score.present.values()) for p in finals)
    total = sum(len(p.score.present) for p in finals)
    assert present / total >= PRESENT_AT_20, f"{present}/{total}"


@pytest.mark.parametrize(
    ("size", "ratio"), [_xfail(FAILING_STALE, z, r) for z in COUNTS for r in BUDGETS]
)
def test_no_superseded_value_is_shown(size: str, ratio: float) -> None:
    shown = [
        f"{r.session} {r.mode} pass {p.index}: {p.score.stale}"
        for group in runs(size, ratio)
        for r in group.values()
        for p in r.passes
        if p.score.stale and p.case != "declined"
    ]
    assert shown == []


@pytest.mark.parametrize(
    ("size", "mode"), [_xfail(FAILING_LOST, z, m) for z in COUNTS for m in MODES[1:]]
)
def test_nothing_present_after_pass_2_is_lost_by_pass_5(size: str, mode: str) -> None:
    lost = [
        f"{g[mode].session} {round(ratio * 100)}%: {g[mode].lost}"
        for ratio in BUDGETS
        for g in runs(size, ratio)
        if g[mode].lost
    ]
    assert lost == []


@pytest.mark.parametrize(
    ("size", "ratio"), [_xfail(FAILING_DUPLICATES, z, r) for z in COUNTS for r in BUDGETS]
)
def test_no_fact_is_shown_twice(size: str, ratio: float) -> None:
    twice = [
        f"{r.session} {r.mode} pass {p.index}: {p.score.duplicates}"
        for group in runs(size, ratio)
        for r in group.values()
        for p in r.passes
        if p.score.duplicates and p.case != "declined"
    ]
    assert twice == []
