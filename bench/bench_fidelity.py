"""Handoff-fidelity probe: do planted facts and their updates survive compaction?

    python bench/bench_fidelity.py [--record]

K facts (decisions, constraints, values; each a distinctive literal) are planted into
realistic sessions as user or assistant messages at spread positions, and some of them are
later UPDATED to a new literal ("the cap is now 40"). The sessions are the demo session
(``dashr_ext.testing.demo_messages``), the longer corpus sessions (``../shared/corpus``,
skipped when absent) and the whole corpus concatenated. Each is replayed message by message
through ``Dashr.request_messages()`` (the pressure trigger: N passes) under the same window
for both engines (``recency_window_tokens=20000, retain_tokens=6000``, offline extractive
summarizer), at two checkpoint budgets:

* ``equal total``: the summary engine's ``max_summary_tokens`` is what the recallable
  engine may spend on checkpoints: its state cap (``state_max_tokens``; unset, a sixteenth of
  the trigger) plus ``stub_region_ratio × trigger`` (the stub region before the rollup);
* ``equal state``: ``max_summary_tokens`` = the state cap (the mutable document gets the
  same cap; the recallable engine has its stubs on top).

Then, in the final request's text: how many *current* values are present (higher is
better), how many *stale* (superseded) values are present (lower is better), and whether
they sit in checkpoints or in the verbatim tail; and recall: how many planted values
(current and stale) ``history_search`` finds (target 100 %). Deterministic: one run.
``--record`` rewrites this benchmark's section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import RESULTS, join_notes, machine_note_list, record_section  # noqa: E402
from bench_recallable import (  # noqa: E402
    RETAIN,
    WINDOW,
    Message,
    base_config,
    concatenated_corpus,
    corpus_files,
    engine_unavailable,
    load_session,
    render_message,
    replay,
)

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._checkpoints import checkpoint_of  # noqa: E402

SECTION = "## Recallable engine: handoff fidelity (bench/bench_fidelity.py)"
MIN_SESSION_TOKENS = 50_000
"""Corpus sessions shorter than this compact too few times to say anything."""


# --------------------------------------------------------------------------- the facts


@dataclass(frozen=True)
class Fact:
    """One planted fact: its message, its literal value, and maybe a later update."""

    name: str
    kind: str
    """``decision``, ``constraint`` or ``value``."""
    role: str
    """Who states it: ``user`` or ``assistant``."""
    text: str
    value: str
    update_role: str | None = None
    update_text: str | None = None
    new_value: str | None = None

    @property
    def current(self) -> str:
        return self.new_value or self.value

    @property
    def stale(self) -> str | None:
        return self.value if self.new_value else None


FACTS: tuple[Fact, ...] = (
    Fact(
        "gateway timeout",
        "value",
        "user",
        "One more thing before you go on: the payment gateway timeout must be 7350 ms "
        "(GATEWAY_TIMEOUT_MS=7350). Please keep that in mind for the client code.",
        "GATEWAY_TIMEOUT_MS=7350",
        "user",
        "Change of requirement from ops: use GATEWAY_TIMEOUT_MS=9120 from now on; the earlier "
        "figure no longer applies.",
        "GATEWAY_TIMEOUT_MS=9120",
    ),
    Fact(
        "vendored code",
        "constraint",
        "user",
        "Constraint: do not modify anything under vendor/ledgerkit/ — it is vendored and "
        "pinned by the platform team.",
        "vendor/ledgerkit/",
    ),
    Fact(
        "serializer",
        "decision",
        "assistant",
        "Decision: I will use orjson for the response serializer instead of the standard "
        "json module, because the settlement payloads are large and hot.",
        "orjson",
        "assistant",
        "Decision update: the serializer will be msgspec, because the approved-dependency "
        "list changed this week; I will adjust the imports when I touch that code.",
        "msgspec",
    ),
    Fact(
        "retry cap",
        "value",
        "user",
        "For the job runner, the retry cap is 25 attempts: set RETRY_CAP=25 wherever it is "
        "configured.",
        "RETRY_CAP=25",
        "user",
        "Update on the retry cap: it is now RETRY_CAP=40, the SRE team raised it this morning.",
        "RETRY_CAP=40",
    ),
    Fact(
        "public signature",
        "constraint",
        "user",
        "Keep the signature of settle_invoice_v2() unchanged; downstream teams call it directly.",
        "settle_invoice_v2()",
    ),
    Fact(
        "reproducing seed",
        "value",
        "assistant",
        "Note for later: the flaky failure reproduces reliably with pytest -p randomly "
        "--randomly-seed=81347, so I will use that seed to verify fixes.",
        "--randomly-seed=81347",
    ),
    Fact(
        "feature flag",
        "decision",
        "user",
        "We'll ship this behind the feature flag ledger_async_commit (default off).",
        "ledger_async_commit",
        "user",
        "Rename, please: the feature flag is called ledger_deferred_commit now (still "
        "default off).",
        "ledger_deferred_commit",
    ),
    Fact(
        "release tag",
        "value",
        "user",
        "When this is done, the release tag for the fix is v7.3.19.",
        "v7.3.19",
    ),
)

ACK = "Understood, noted."
PLANT_SPAN = (0.05, 0.40)
"""Share of the session's tokens over which the facts are planted."""
UPDATE_SPAN = (0.45, 0.65)
"""... and the updates (well before the retained tail of the final request)."""


def insertion_points(messages: Sequence[Message]) -> list[int]:
    """Indexes ``i`` where a message may be inserted before ``messages[i]``.

    Never between a tool call and its results (``messages[i]`` is not a ``tool`` message)
    and never before the first user request.
    """
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), len(messages))
    return [
        i
        for i in range(first_user + 1, len(messages) + 1)
        if i == len(messages) or messages[i]["role"] != "tool"
    ]


def spread_points(
    messages: Sequence[Message], sizes: Sequence[int], count: int, span: tuple[float, float]
) -> list[int]:
    """``count`` distinct insertion points spread evenly over ``span`` of the tokens.

    ``sizes[i]`` is the size of ``messages[i]``; the j-th point is the first insertion point
    at or after ``span[0] + (span[1] - span[0]) * j / max(1, count - 1)`` of the total.
    """
    if count == 0:
        return []
    total = sum(sizes)
    before = [0]
    for size in sizes:
        before.append(before[-1] + size)
    points = insertion_points(messages)
    chosen: list[int] = []
    for j in range(count):
        share = span[0] + (span[1] - span[0]) * (j / max(1, count - 1))
        target = share * total
        candidates = [i for i in points if before[i] >= target and i not in chosen]
        if not candidates:
            candidates = [i for i in points if i not in chosen]
        if not candidates:
            raise ValueError("not enough insertion points to plant the facts")
        chosen.append(candidates[0])
    return chosen


def plant(
    messages: Sequence[Message], sizes: Sequence[int], facts: Sequence[Fact] = FACTS
) -> list[Message]:
    """``messages`` with every fact and update inserted (a user fact gets a short ack)."""
    updates = [f for f in facts if f.update_text is not None]
    at = spread_points(messages, sizes, len(facts), PLANT_SPAN)
    up = spread_points(messages, sizes, len(updates), UPDATE_SPAN)
    inserts: dict[int, list[Message]] = {}
    for i, fact in zip(at, facts, strict=True):
        inserts.setdefault(i, []).extend(planted(fact.role, fact.text))
    for i, fact in zip(up, updates, strict=True):
        assert fact.update_role is not None and fact.update_text is not None
        inserts.setdefault(i, []).extend(planted(fact.update_role, fact.update_text))
    out: list[Message] = []
    for i, message in enumerate(messages):
        out.extend(inserts.get(i, []))
        out.append(message)
    out.extend(inserts.get(len(messages), []))
    return out


def planted(role: str, text: str) -> list[Message]:
    if role == "user":
        return [{"role": "user", "content": text}, {"role": "assistant", "content": ACK}]
    return [{"role": "assistant", "content": text}]


def literals(facts: Sequence[Fact] = FACTS) -> list[str]:
    """Every planted literal: current and stale values."""
    out = [f.current for f in facts]
    out += [f.stale for f in facts if f.stale is not None]
    return out


def clashes(messages: Sequence[Message], facts: Sequence[Fact] = FACTS) -> list[str]:
    """Planted literals that the session already contains (they would count falsely)."""
    text = "\n".join(render_message(m) for m in messages)
    return [v for v in literals(facts) if v in text]


# --------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Presence:
    """Where a value appears in the final request."""

    checkpoints: bool
    tail: bool

    @property
    def anywhere(self) -> bool:
        return self.checkpoints or self.tail


def presence(value: str, checkpoint_text: str, tail_text: str) -> Presence:
    return Presence(value in checkpoint_text, value in tail_text)


_MATCHED = re.compile(r"(\d+) matched")


def search_matches(result: str) -> int:
    """The ``N matched`` count of a ``history_search`` result's first line."""
    found = _MATCHED.search(result.split("\n", 1)[0])
    return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class Score:
    label: str
    engine: str
    budget: str
    passes: int
    checkpoint_tokens: int
    """Tokens of the final request's checkpoint nodes."""
    current: Mapping[str, Presence]
    stale: Mapping[str, Presence]
    found: Mapping[str, bool]

    def count(self, which: Mapping[str, Presence], where: str = "anywhere") -> int:
        return sum(1 for p in which.values() if getattr(p, where))


def score(d: Dashr, label: str, budget: str, passes: int, facts: Sequence[Fact] = FACTS) -> Score:
    """Count the planted values in ``d``'s next request, and search for each."""
    messages = d.session.messages()
    surface = d.session.surface
    offset = len(messages) - len(surface)
    checkpoint_parts: list[str] = []
    tail_parts: list[str] = []
    tokens = 0
    for pos, seq in enumerate(surface):
        text = render_message(messages[offset + pos])
        if checkpoint_of(d.session.event(seq)) is not None:
            checkpoint_parts.append(text)
            tokens += d.meter.count_text(text)
        else:
            tail_parts.append(text)
    cp_text, tail_text = "\n".join(checkpoint_parts), "\n".join(tail_parts)
    current = {f.name: presence(f.current, cp_text, tail_text) for f in facts}
    stale = {f.name: presence(f.stale, cp_text, tail_text) for f in facts if f.stale is not None}
    found = {v: search_matches(d.history_search(v)) > 0 for v in literals(facts)}
    return Score(label, d.config.engine, budget, passes, tokens, current, stale, found)


# --------------------------------------------------------------------------- sessions


def budgets() -> dict[str, dict[str, CompactionConfig]]:
    """Budget name → engine → config (same window and retain everywhere)."""
    rec = base_config("recallable")
    state = rec.state_budget
    equal_total = state + int(rec.stub_region_ratio * rec.trigger_tokens)
    return {
        f"equal total (summary max_summary_tokens={equal_total})": {
            "summary": base_config("summary", max_summary_tokens=equal_total),
            "recallable": rec,
        },
        f"equal state (summary max_summary_tokens={state})": {
            "summary": base_config("summary", max_summary_tokens=state),
            "recallable": rec,
        },
    }


def sessions(long: bool = True) -> list[tuple[str, list[Message], list[Message] | None]]:
    """(label, messages, tools) of every probed session, before planting."""
    from dashr_ext.testing import DEMO_TOOLS, demo_messages

    out: list[tuple[str, list[Message], list[Message] | None]] = [
        ("demo (8 turns)", demo_messages(turns=8), DEMO_TOOLS)
    ]
    files = corpus_files()
    for path in files:
        messages, tools = load_session(path)
        out.append((path.stem, messages, tools))
    if long and files:
        messages, tools = concatenated_corpus(files)
        out.append(("corpus concatenated", messages, tools))
    return out


def run(min_tokens: int = MIN_SESSION_TOKENS, long: bool = True) -> tuple[list[Score], list[str]]:
    from dashr_ext._meter import TokenMeter

    count = TokenMeter().count_text
    scores: list[Score] = []
    notes: list[str] = []
    unavailable = {
        e: reason
        for e in ("summary", "recallable")
        if (reason := engine_unavailable(base_config(e))) is not None
    }
    for engine, reason in unavailable.items():
        notes.append(f"{engine}: not measured, the engine is unavailable ({reason})")
    for label, messages, tools in sessions(long):
        sizes = [count(render_message(m)) for m in messages]
        if sum(sizes) < min_tokens:
            continue
        clash = clashes(messages)
        if clash:
            notes.append(f"{label}: skipped, it already contains {clash}")
            continue
        probe = plant(messages, sizes)
        for budget, configs in budgets().items():
            for engine, config in configs.items():
                if engine in unavailable:
                    continue
                r = replay(probe, config, label=label, tools=tools, keep=True)
                assert r.dashr is not None
                try:
                    s = score(r.dashr, label, budget, sum(x.passes for x in r.records))
                finally:
                    r.dashr.close()
                scores.append(s)
                print(f"{budget[:11]:11s} " + row(s, len(FACTS), len(literals())))
    return scores, notes


# --------------------------------------------------------------------------- report


def row(s: Score, k: int, n_literals: int) -> str:
    n_stale = len(s.stale)
    return (
        f"| {s.label} | {s.engine} | {s.passes} | {s.checkpoint_tokens:,} | "
        f"{s.count(s.current)}/{k} ({s.count(s.current, 'checkpoints')} in checkpoints) | "
        f"{s.count(s.stale)}/{n_stale} ({s.count(s.stale, 'checkpoints')} in checkpoints) | "
        f"{sum(s.found.values())}/{n_literals} |"
    )


def totals(scores: Sequence[Score]) -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    for s in scores:
        t = out.setdefault(
            (s.budget, s.engine),
            {"sessions": 0, "passes": 0, "current": 0, "current_cp": 0, "k": 0, "stale": 0,
             "stale_cp": 0, "n_stale": 0, "found": 0, "n_found": 0, "cp_tokens": 0},
        )  # fmt: skip
        t["sessions"] += 1
        t["passes"] += s.passes
        t["current"] += s.count(s.current)
        t["current_cp"] += s.count(s.current, "checkpoints")
        t["k"] += len(s.current)
        t["stale"] += s.count(s.stale)
        t["stale_cp"] += s.count(s.stale, "checkpoints")
        t["n_stale"] += len(s.stale)
        t["found"] += sum(s.found.values())
        t["n_found"] += len(s.found)
        t["cp_tokens"] += s.checkpoint_tokens
    return out


def total_lines(scores: Sequence[Score]) -> list[str]:
    lines = [
        "| budget | engine | sessions | passes | current values present (in checkpoints) | "
        "stale values present (in checkpoints) | found by history_search | mean checkpoint "
        "tokens in the final request |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (budget, engine), t in totals(scores).items():
        lines.append(
            f"| {budget} | {engine} | {t['sessions']} | {t['passes']} | "
            f"**{t['current']}/{t['k']}** ({t['current_cp']}) | "
            f"**{t['stale']}/{t['n_stale']}** ({t['stale_cp']}) | "
            f"{t['found']}/{t['n_found']} | {t['cp_tokens'] / max(1, t['sessions']):,.0f} |"
        )
    return lines


def per_fact_lines(scores: Sequence[Score]) -> list[str]:
    """Per budget and engine: in how many sessions each fact's current (stale) value survived."""
    head = " | ".join(f.name for f in FACTS)
    lines = [
        f"| budget | engine | {head} |",
        "| --- | --- " + "| --- " * len(FACTS) + "|",
    ]
    for (budget, engine), _t in totals(scores).items():
        mine = [s for s in scores if s.budget == budget and s.engine == engine]
        cells = []
        for f in FACTS:
            current = sum(s.current[f.name].anywhere for s in mine)
            cell = f"{current}"
            if f.stale is not None:
                cell += f" (stale {sum(s.stale[f.name].anywhere for s in mine)})"
            cells.append(cell)
        lines.append(f"| {budget.split(' (')[0]} | {engine} | " + " | ".join(cells) + " |")
    return lines


def verdict(scores: Sequence[Score]) -> list[str]:
    """Per budget: is the recallable engine no worse than the summary engine?"""
    t = totals(scores)
    out = []
    for budget in dict.fromkeys(s.budget for s in scores):
        s, r = t.get((budget, "summary")), t.get((budget, "recallable"))
        if s is None or r is None:
            out.append(f"{budget}: no comparison (an engine was not measured)")
            continue
        current = _compare(r["current"], s["current"], higher_is_better=True)
        stale = _compare(r["stale"], s["stale"], higher_is_better=False)
        found = _compare(r["found"], s["found"], higher_is_better=True)
        no_worse = "worse" not in (current, stale, found)
        out.append(
            f"{budget}: current values {r['current']}/{r['k']} (recallable) vs "
            f"{s['current']}/{s['k']} (summary): {current}; stale values {r['stale']}/"
            f"{r['n_stale']} vs {s['stale']}/{s['n_stale']}: {stale}; found by search "
            f"{r['found']}/{r['n_found']} vs {s['found']}/{s['n_found']}: {found}. Recallable is "
            f"{'no worse than' if no_worse else 'WORSE than'} summary at this budget"
        )
    return out


def _compare(recallable: int, summary: int, *, higher_is_better: bool) -> str:
    if recallable == summary:
        return "equal"
    return "better" if (recallable > summary) == higher_is_better else "worse"


def record(scores: Sequence[Score], notes: Sequence[str], machine: list[str]) -> None:
    facts = "; ".join(
        f"{f.name} ({f.kind}, {f.role}): `{f.value}`"
        + (f" → `{f.new_value}`" if f.new_value else "")
        for f in FACTS
    )
    body = [
        "Machine: " + join_notes(machine) + ".",
        f"{len(FACTS)} facts planted at {PLANT_SPAN[0]:.0%}–{PLANT_SPAN[1]:.0%} of each "
        f"session's tokens, {sum(1 for f in FACTS if f.new_value)} of them updated at "
        f"{UPDATE_SPAN[0]:.0%}–{UPDATE_SPAN[1]:.0%} (user facts get an assistant "
        f"'{ACK}'): {facts}. Sessions: the demo session (8 turns) and every corpus session of "
        f"at least {MIN_SESSION_TOKENS:,} tokens, plus the whole corpus concatenated. Both "
        f"engines: `recency_window_tokens={WINDOW}`, `retain_tokens={RETAIN}`, extractive "
        "summarizer, replayed through `request_messages()`. Counted in the final request "
        "(a value counts when its literal appears; 'in checkpoints' = in a checkpoint node, "
        "not the verbatim tail); search = `history_search(value)` matched. Deterministic: "
        "one run.",
        "",
        *(f"* {line}" for line in [*verdict(scores), *notes]),
        "",
        *total_lines(scores),
        "",
        f"Per fact: in how many of the {len({s.label for s in scores})} sessions its current "
        "value (and its superseded value) is in the final request:",
        "",
        *per_fact_lines(scores),
        "",
        "Per session (current / stale counted anywhere in the final request):",
        "",
        "| session | engine | passes | checkpoint tokens | current present | stale present | "
        "search found |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for budget in dict.fromkeys(s.budget for s in scores):
        body.append(f"| **{budget}** | | | | | | |")
        body += [row(s, len(FACTS), len(literals())) for s in scores if s.budget == budget]
    record_section(SECTION, "\n".join(body))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-long", action="store_true", help="skip the concatenated corpus")
    parser.add_argument("--min-tokens", type=int, default=MIN_SESSION_TOKENS)
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args(argv)
    scores, notes = run(args.min_tokens, long=not args.no_long)
    print()
    for line in [*total_lines(scores), "", *per_fact_lines(scores), "", *verdict(scores), *notes]:
        print(line)
    if args.record:
        record(scores, notes, machine_note_list(load_label=None))
        print(f"recorded in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
