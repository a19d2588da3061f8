"""The code-composed text of a checkpoint, per budget: which form, how many tokens, what share.

For each checkpoint budget (``max_summary_tokens``) one pass over the same ~40k-token session;
the fixed text is the checkpoint node's text without its body (pins, summary, names), plus
the pointer message when the pass added one. Deterministic (no timing): one run is the figure.

    python bench/bench_framing.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._config import MIN_SUMMARY_TOKENS
from dashr_ext._payloads import POINTER_SOURCE
from dashr_ext.errors import CompactionError

try:
    from dashr_ext._compaction.compose import checkpoint_body
    from dashr_ext._footers import framing_cap
except ImportError:  # a version before the budget-scaled framing: its summary is the body

    def checkpoint_body(data: Any) -> str:
        return str(data["summary"])

    def framing_cap(budget: int) -> int:
        return min(64, budget) if budget < 256 else int(budget * 0.12)


BUDGETS = tuple(
    b
    for b in (48, 64, 128, 200, 256, 384, 512, 1024, 2048, 2500, 4096, 8192)
    if b >= MIN_SUMMARY_TOKENS
)


def session(path: Path, budget: int) -> Dashr:
    config = CompactionConfig(
        context_window_tokens=200_000,
        recency_window_tokens=120_000,
        retain_tokens=1_000,
        max_summary_tokens=budget,
    )
    d = Dashr.create(path, config=config, system_prompt="You are a coding agent.")
    d.record_openai({"role": "user", "content": "Fix the failing retry tests in src/retry.py."})
    for i in range(40):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat src/m{i}.py"})},
        }
        d.record_openai(
            [
                {"role": "assistant", "content": f"Reading module {i}.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": f"def f{i}():\n" * 400},
            ]
        )
    return d


def main() -> int:
    print(f"{'budget':>7} {'form':>8} {'fixed':>6} {'cap':>5} {'share':>6} {'checkpoint':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for budget in BUDGETS:
            d = session(Path(tmp) / f"s{budget}.jsonl", budget)
            try:
                d.compact()
            except CompactionError as exc:  # the smallest budgets leave no room for a summary
                print(f"{budget:>7} declined: {exc}")
                d.close()
                continue
            cp = d.checkpoints()[-1]
            data = d.session.event(cp.summary_seq).data
            text = d.session.event(cp.node_seq).message.text
            fixed = text.replace(checkpoint_body(data), "", 1)
            pointer = "".join(
                str(m["content"])
                for m in d.request_messages()
                if m["role"] == "user" and "condensed into checkpoint" in str(m["content"])
            )
            assert not pointer or any(
                d.session.event(q).message.source_kind == POINTER_SOURCE for q in d.session.surface
            )
            tokens = d.meter.count_text(fixed + pointer)
            form = getattr(cp, "form", "full")
            print(
                f"{budget:>7} {form:>8} {tokens:>6} {framing_cap(budget):>5} "
                f"{tokens / budget:>6.1%} {d.meter.count_text(text):>10}"
            )
            d.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
