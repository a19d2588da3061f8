"""Build the large compacted session logs the scale benchmarks read (not part of the package).

``python bench/scale_log.py --events 100000 --mb 100 --out /tmp/scale/log100.jsonl`` records
synthetic agent steps (a user task every 20 steps, an assistant message with a ``bash`` tool
call, a tool result of varied length) through a real file-backed ``Dashr`` with compaction
under a recency window, so the log holds what a long real session holds: message events,
``compaction/*`` batches, replace events and checkpoints. Sizes are chosen so that the log
reaches about ``--mb`` megabytes at ``--events`` events. The output is deterministic for a
seed (timestamps come from a counter).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dashr_ext import CompactionConfig, Dashr  # noqa: E402

VOCABULARY = (
    "the retry budget is read from config before each request and the helper returns a "
    "ValueError when the header is missing so we patch session.py to add Content-Length only "
    "for bodies and rerun the failing tests with pytest -x scheduler backoff attempt timeout "
    "traceback File line module assert expected got None True False self return def class "
    "straße café naïve résumé Überprüfung"
)
WORDS = VOCABULARY.split(" ")


def steps(rng: random.Random, result_chars: int) -> Iterator[dict[str, Any]]:
    pool = [" ".join(rng.choices(WORDS, k=rng.randint(4, 16))) for _ in range(20_000)]
    for step in itertools.count():
        if step % 20 == 0:
            yield {"role": "user", "content": f"Task {step}: {pool[step % len(pool)]}"}
        call_id = f"call_{step}"
        module = f"src/mod{step % 97}.py"
        command = f"grep -rn 'attempt {step}' src/ && sed -n {step % 500},+40p {module}"
        yield {
            "role": "assistant",
            "content": pool[(step * 7) % len(pool)],
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
        lines = [f"trace id {step:08x} for request {step}"]
        target = int(rng.expovariate(1 / result_chars))
        size = 0
        while size < target:
            line = pool[rng.randrange(len(pool))]
            lines.append(line)
            size += len(line) + 1
        yield {"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)}


def build(out: Path, events: int, mb: float, window: int, seed: int) -> dict[str, float]:
    out.unlink(missing_ok=True)
    rng = random.Random(seed)
    # ~ (mb bytes) / events per event, of which a third is envelope and the assistant text
    result_chars = max(200, int(mb * 1e6 / events * 3.0) - 300)
    clock = itertools.count(1_700_000_000_000, 1000)
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=window // 5)
    d = Dashr.create(
        out, config=config, summarizer="extractive", durability="flush", clock=lambda: next(clock)
    )
    start = time.perf_counter()
    with d:
        for message in steps(rng, result_chars):
            d.record_openai(message)
            if message["role"] == "tool":
                d.request_messages()
            if len(d.session) >= events:
                break
        d.record_openai({"role": "assistant", "content": "Done."})
    size = out.stat().st_size
    return {
        "events": len(d.session),
        "mb": size / 1e6,
        "checkpoints": len(d.checkpoints()),
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--window", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(build(args.out, args.events, args.mb, args.window, args.seed)))


if __name__ == "__main__":
    main()
