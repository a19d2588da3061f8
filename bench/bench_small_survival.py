"""Small-scale survival per size class, budget, pass count and mode.

    python bench/bench_small_survival.py [--small N] [--medium N] [--record LABEL]

The sessions are ``tests/small_sessions.py``'s generated agent sessions (small: 100-600
tokens, medium: 2k-8k characters; seeds 0 onwards), the protocol
``tests/small_protocol.py``: budgets of 10%, 20% and 30% of the original request text in
characters, passes of ``Dashr.compact()`` with the last exchange retained and
``max_summary_tokens`` what the budget leaves (clamped up to 48, the least
``max_summary_tokens``), one pass, five in the same session (more conversation recorded
between passes) and five fed back (the request after a pass is a fresh session's only
input). Per cell, over the runs whose every pass was feasible: current values present
(share), superseded values shown, duplicates, labelled and rule values present, compliant
runs, request chars after the last pass / original, items lost from pass k >= 2 to k + 1
(and from 1 to 2), framing chars (request text that is neither system prompt, recorded
message nor summary body; mean per run); the infeasible runs (some pass below system + tail
+ 48 tokens, the least checkpoint) are counted separately with their compliance and cases.
Deterministic: one run. ``--record LABEL`` writes the section "Small-scale survival: LABEL"
of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import join_notes, machine_note_list, package_commit, record_section  # noqa: E402
from small_protocol import BUDGETS, MODES, Run, replay  # noqa: E402
from small_sessions import SIZES, sessions  # noqa: E402

SECTION = "## Small-scale survival (bench/bench_small_survival.py): {label}"


def run(counts: dict[str, int]) -> tuple[dict[tuple[str, float, str], list[Run]], float]:
    cells: dict[tuple[str, float, str], list[Run]] = {}
    start = time.perf_counter()
    for size, count in counts.items():
        for session in sessions(size, count):
            for ratio in BUDGETS:
                for mode, result in replay(session, ratio).items():
                    cells.setdefault((size, ratio, mode), []).append(result)
    return cells, time.perf_counter() - start


def _share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "-"


def row(key: tuple[str, float, str], group: list[Run]) -> str:
    size, ratio, mode = key
    ok = [r for r in group if r.feasible]
    infeasible = [r for r in group if not r.feasible]
    finals = [r.final for r in ok]
    present = sum(sum(p.score.present.values()) for p in finals)
    total = sum(len(p.score.present) for p in finals)
    labelled = [p.score.labelled for p in finals]
    rules = [p.score.rules for p in finals]
    scored = [p for r in ok for p in r.passes if p.case != "declined"]
    stale = sum(len(p.score.stale) for p in scored)
    dups = sum(p.score.duplicates for p in scored)
    ratio_after = [p.after_chars / p.original_chars for p in finals]
    framing = [p.framing_chars for p in finals]
    cases = Counter(p.case for r in infeasible for p in r.passes)
    clamped = sum(any(p.clamped for p in r.passes) for r in group)
    cells = [
        size,
        f"{round(ratio * 100)}%",
        mode,
        f"{len(ok)}",
        f"**{_share(present, total)}**",
        str(stale),
        str(dups),
        _share(sum(h for h, _ in labelled), sum(n for _, n in labelled)),
        _share(sum(h for h, _ in rules), sum(n for _, n in rules)),
        f"{sum(r.compliant for r in ok)}/{len(ok)}",
        f"{sum(ratio_after) / len(ratio_after):.2f}" if ratio_after else "-",
        f"{sum(r.lost for r in ok)} ({sum(r.lost_first for r in ok)})" if mode != MODES[0] else "-",
        f"{sum(framing) / len(framing):.0f}" if framing else "-",
        f"{len(infeasible)}: {sum(r.compliant for r in infeasible)} compliant"
        + (f" ({', '.join(f'{c} {n}' for c, n in sorted(cases.items()))})" if cases else ""),
        str(clamped),
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = [
    "| size | budget | passes / mode | feasible runs | current values present | superseded "
    "shown | duplicates | labelled present | rules present | compliant | chars after / "
    "original | lost k>=2 (1→2) | framing chars | infeasible runs | clamped |",
    "| --- " * 15 + "|",
]


def table(cells: dict[tuple[str, float, str], list[Run]]) -> list[str]:
    keys = [(z, r, m) for z in SIZES for r in BUDGETS for m in MODES if (z, r, m) in cells]
    return [*HEADER, *(row(k, cells[k]) for k in keys)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=60, help="small sessions (default 60)")
    parser.add_argument("--medium", type=int, default=40, help="medium sessions (default 40)")
    parser.add_argument("--record", metavar="LABEL", help="write 'Small-scale survival: LABEL'")
    args = parser.parse_args()
    counts = {"small": args.small, "medium": args.medium}
    cells, seconds = run(counts)
    lines = table(cells)
    print("\n".join(lines))
    print(f"({seconds:.1f} s)")
    body = [
        f"Machine: {join_notes(machine_note_list(None))}. Package at: `{package_commit()}`.",
        "",
        f"Sessions: {counts['small']} small (seeds 0-{counts['small'] - 1}, 100-600 tokens) "
        f"and {counts['medium']} medium (seeds 0-{counts['medium'] - 1}, 2k-8k characters) "
        "from `tests/small_sessions.py`; protocol `tests/small_protocol.py` (budget = share "
        "of the original request text in characters; last exchange retained; "
        "`max_summary_tokens` = what the budget leaves, at least 48; extractive "
        "summarizer). Scores are over the feasible runs, at the last pass: values present, "
        "of all current ones; superseded values shown and duplicates summed over every "
        "pass; compliant runs (every pass compliant); lost: items present after pass k >= 2 "
        "and missing after k + 1 (in brackets 1 → 2); framing chars: mean per run after "
        "the last pass. Infeasible runs (a pass whose budget is below system + tail + 48 "
        "tokens): count, compliant ones and the cases of their passes. Clamped: runs where "
        f"`max_summary_tokens` was raised to 48. Deterministic: one run ({seconds:.0f} s).",
        "",
        *lines,
    ]
    if args.record:
        record_section(SECTION.format(label=args.record), "\n".join(body))
        print(f"recorded: {SECTION.format(label=args.record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
