"""Archive cost on real sessions: memory overhead and rebuild time on open.

    python bench/bench_archive.py [--record]

For every corpus session (``../shared/corpus``), replays it through
``Dashr.request_messages()`` with recency 20000 / retain 4000 and the offline summarizer,
then measures:

* memory: deep size of the archive dict (every object counted once, strings included as
  if the archive stood alone) against the raw shadowed text (UTF-8 bytes of every shadowed
  message's text, reasoning and tool-call arguments). Target <= 1.5x.
* rebuild: ``Dashr.open(path, read_only=True)`` of the largest session, and the archive
  rebuild alone (``rebuild_archive``) against the baseline of replaying the session
  without it (``Session.open``). Target < 1 s.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import machine_notes, record_section  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._compaction.commit import rebuild_archive  # noqa: E402
from dashr_ext._events import ReasoningBlock, TextBlock, ToolCallBlock  # noqa: E402
from dashr_ext._session import Session  # noqa: E402

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and everything it references, each object counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        size += sum(deep_size(v, seen) for v in obj)
    return size


def vars_of(block: Any) -> list[Any]:
    """The field values of a slotted content block."""
    return [getattr(block, name) for name in block.__slots__]


def shadowed_text_bytes(session: Session, seqs: list[int]) -> int:
    total = 0
    for seq in seqs:
        for block in session.event(seq).message.content:
            if isinstance(block, TextBlock | ReasoningBlock):
                total += len(block.text.encode())
            elif isinstance(block, ToolCallBlock):
                total += len(block.arguments.encode()) + len(block.name)
    return total


def replay(path: Path, data: dict[str, Any], target: Path) -> Dashr:
    config = CompactionConfig(recency_window_tokens=20_000, retain_tokens=4_000)
    d = Dashr.create(target, config=config, tools=data.get("tools"), durability="flush")
    for message in data["messages"]:
        d.record_openai(message)
        d.request_messages()
    return d


def best_of(fn: Any, repeat: int = 5) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> int:
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the section of RESULTS.md")
    args = parser.parse_args()
    files = sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []
    if not files:
        print("corpus absent: nothing to measure")
        return 0
    rows = []
    total_archive = total_raw = total_added = 0
    largest: tuple[int, Path] = (0, files[0])
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files):
            with path.open(encoding="utf-8") as fh:
                data = json.load(fh)
            target = Path(tmp) / f"s{i}.jsonl"
            with replay(path, data, target) as d:
                seqs = [q for cp in d.checkpoints() for q in cp.shadowed_seqs]
                raw = shadowed_text_bytes(d.session, seqs)
                size = deep_size(d.archive)
                held: set[int] = set()
                for event in d.session.events:
                    deep_size(event.data, held)
                    if event.is_surface:
                        deep_size(list(event.message.content), held)
                        for block in event.message.content:
                            deep_size(list(vars_of(block)), held)
                added = deep_size(d.archive, held)
            total_archive += size
            total_added += added
            total_raw += raw
            if raw:
                rows.append((path.stem, len(d.checkpoints()), raw, size))
            largest = max(largest, (target.stat().st_size, target))
        ratios = [size / raw for _, _, raw, size in rows]
        big = largest[1]

        def open_full() -> None:
            Dashr.open(big, read_only=True).close()

        def open_session() -> None:
            Session.open(big, read_only=True).close()

        session = Session.open(big, read_only=True)

        def rebuild_only() -> None:
            rebuild_archive(session, CompactionConfig().archive_max_bytes, {})

        big_mb = big.stat().st_size / 1e6
        full_best, full_med = best_of(open_full)
        base_best, base_med = best_of(open_session)
        rb_best, rb_med = best_of(rebuild_only)
        n_events = len(session)
        session.close()

    lines = [
        f"Machine: {machine_notes()}.",
        "",
        f"* archive memory / raw shadowed text over {len(rows)} compacted corpus sessions: "
        f"{total_archive / total_raw:.2f}x overall (target <= 1.5x); per session "
        f"min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x",
        f"* raw shadowed text {total_raw / 1e6:.2f} MB, "
        f"archive deep size {total_archive / 1e6:.2f} MB "
        "(every object counted as if the archive stood alone)",
        f"* memory the archive adds to a kernel that already holds the session log (objects "
        f"shared with the log not counted): {total_added / 1e6:.2f} MB = "
        f"{total_added / total_raw:.2f}x the raw shadowed text",
        f"* largest session file ({big_mb:.2f} MB, {n_events} events): "
        f"Dashr.open with archive rebuild {full_best * 1000:.1f} ms "
        f"(median {full_med * 1000:.1f}); "
        f"baseline Session.open {base_best * 1000:.1f} ms (median {base_med * 1000:.1f}); "
        f"rebuild_archive alone {rb_best * 1000:.1f} ms (median {rb_med * 1000:.1f}); "
        f"ratio open/baseline {full_best / base_best:.2f} (target < 1 s: "
        f"{'met' if full_best < 1 else 'MISSED'})",
    ]
    print("\n".join(lines))
    if args.record:
        record_section("## Archive (bench/bench_archive.py)", "\n".join(lines))
    return 0


if __name__ == "__main__":
    print(f"python {platform.python_version()}")
    raise SystemExit(main())
