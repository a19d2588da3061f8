"""Fact survival per fact kind, budget and pass count, on the fact-survival suite's sessions.

    python bench/bench_survival.py [--engine summary|recallable|both] [--record LABEL]

The sessions are ``tests/survival_sessions.py``'s three generated agent sessions (50-54k
tokens each, 18 typed facts, 8 of them updated, long filler before, between and after
them). Each is replayed through ``Dashr`` at budgets of 10%, 20% and 30% of its
uncompacted request size (``recency_window_tokens`` = budget, ``retain_tokens`` = 35% of
it, ``compaction_retries=0``, ``max_summary_tokens`` at its default, offline extractive
summarizer), with one pass at the end, and with the pressure check before every model turn
from the point where five passes run. Reported per cell: in how many of the 6 facts of a
kind (2 per session) the current value is verbatim in the final request; stale values
presented as current in a checkpoint (outside ``(was …)``); planted values
``history_search`` finds at their message; passes run; the largest request sent (measured
after every pressure check) against the budget, and how many requests went over it.
Deterministic: one run. ``--record LABEL`` writes the section "Fact survival: LABEL" of
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import join_notes, machine_note_list, package_commit, record_section  # noqa: E402
from survival_sessions import (  # noqa: E402
    BUDGETS,
    FACT_KINDS,
    PASS_COUNTS,
    RETAIN_SHARE,
    SESSIONS,
    Outcome,
    original_tokens,
    replay_passes,
)

SECTION = "## Fact survival: {label} (bench/bench_survival.py)"


def run(engine: str) -> tuple[dict[tuple[float, int], list[Outcome]], float]:
    """Every session at every budget and pass count; the outcomes and the wall time (s)."""
    cells: dict[tuple[float, int], list[Outcome]] = {}
    start = time.perf_counter()
    for ratio in BUDGETS:
        for passes in PASS_COUNTS:
            for session in SESSIONS:
                outcome, d = replay_passes(session, ratio, passes, engine=engine)
                d.close()
                cells.setdefault((ratio, passes), []).append(outcome)
    return cells, time.perf_counter() - start


def _col(ratio: float, passes: int) -> str:
    return f"{round(ratio * 100)}% × {passes} pass{'es' if passes > 1 else ''}"


def table(cells: dict[tuple[float, int], list[Outcome]]) -> list[str]:
    keys = [(r, p) for r in BUDGETS for p in PASS_COUNTS]
    lines = [
        "| | " + " | ".join(_col(r, p) for r, p in keys) + " |",
        "| --- |" + " --- |" * len(keys),
    ]
    for kind in FACT_KINDS:
        row = []
        for key in keys:
            hits = [o.present[k] for o in cells[key] for k, kd in o.kinds.items() if kd == kind]
            row.append(f"{sum(hits)}/{len(hits)}")
        lines.append(f"| {kind} | " + " | ".join(row) + " |")

    def total(key: tuple[float, int]) -> str:
        hits = [ok for o in cells[key] for ok in o.present.values()]
        return f"**{sum(hits)}/{len(hits)} ({100 * sum(hits) / len(hits):.0f}%)**"

    def per_session(key: tuple[float, int]) -> str:
        return " · ".join(f"{100 * o.present_share:.0f}%" for o in cells[key])

    def stale(key: tuple[float, int]) -> str:
        bad = [b for o in cells[key] for b in o.stale.values()]
        return f"{sum(bad)}/{len(bad)}"

    def found(key: tuple[float, int]) -> str:
        n = sum(len(o.present) + len(o.stale) for o in cells[key])
        missed = sum(len(o.not_found) for o in cells[key])
        return f"{n - missed}/{n}"

    def passes(key: tuple[float, int]) -> str:
        runs = " · ".join(str(o.passes) for o in cells[key])
        failed = sum(o.failed_passes for o in cells[key])
        return runs + (f" ({failed} failed)" if failed else "")

    def fit(key: tuple[float, int]) -> str:
        worst = max(o.largest_request / o.budget_tokens for o in cells[key])
        over = sum(len(o.over_budget) for o in cells[key])
        return f"{worst:.2f}" + (f" ({over} over)" if over else "")

    for name, fn in (
        ("**all current values**", total),
        ("current values per session", per_session),
        ("stale presented as current", stale),
        ("found by history_search", found),
        ("passes run per session", passes),
        ("largest request / budget", fit),
    ):
        lines.append(f"| {name} | " + " | ".join(fn(k) for k in keys) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["summary", "recallable", "both"], default="both")
    parser.add_argument(
        "--record", metavar="LABEL", help="write the section 'Fact survival: LABEL'"
    )
    args = parser.parse_args()
    engines = ["summary", "recallable"] if args.engine == "both" else [args.engine]
    sizes = ", ".join(f"{s.name} {original_tokens(s):,}" for s in SESSIONS)
    body = [
        f"Machine: {join_notes(machine_note_list(None))}. Package at: `{package_commit()}`.",
        "",
        f"Sessions (uncompacted request tokens): {sizes}; 18 facts each (2 per kind), 8 "
        f"updated. Budget = share of the uncompacted size; `retain_tokens` = "
        f"{RETAIN_SHARE:.0%} of it; one pass per pressure check; `max_summary_tokens` "
        "default; extractive summarizer. '1 pass': one pressure check after the whole "
        "session; '5 passes': a check before every model turn from the latest turn that "
        "gives at least 5. Cells: current values verbatim in the final request, of 6 per "
        "kind (3 sessions × 2). Stale: an updated fact's old value in a checkpoint outside "
        "`(was …)`, of 24. Found: planted values (old and new) `history_search` lists at "
        "the message stating them, of 78. Deterministic: one run.",
    ]
    for engine in engines:
        cells, seconds = run(engine)
        lines = table(cells)
        print(f"\nengine {engine} ({seconds:.1f} s)")
        print("\n".join(lines))
        body += ["", f"Engine `{engine}` ({seconds:.1f} s for the 18 replays):", "", *lines]
    if args.record:
        record_section(SECTION.format(label=args.record), "\n".join(body))
        print(f"recorded: {SECTION.format(label=args.record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
