"""Checkpoint size against the trigger on the corpus: what a pass adds to the request.

Replays every corpus session (OpenAI chat format, ``shared/corpus`` beside the repository;
skipped when absent) through ``Dashr.request_messages()`` under two recency windows with
the offline summarizer, and after every pass records the checkpoint node plus the pointer
message (the tokens the pass added) as a fraction of the trigger, and the request total
against the window. ``--record`` writes the section of ``bench/RESULTS.md``; ``--label``
names the code measured (run it on two checkouts to compare, the same script each time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

from bench_common import machine_notes, record_section

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._payloads import POINTER_SOURCE

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
WINDOWS = ((20_000, 4_000), (8_000, 2_000))


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*/*.json") if p.name != "LICENSE.md")


def replay(path: Path, window: int, retain: int) -> list[tuple[float, int]]:
    """(tokens the pass added / trigger, request total) after every pass of one session."""
    data = json.loads(path.read_text(encoding="utf-8"))
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=retain)
    out: list[tuple[float, int]] = []
    with Dashr.create(in_memory=True, config=config, tools=data.get("tools")) as d:
        s = d.session
        for message in data["messages"]:
            d.record_openai(message)
            before = len(d.checkpoints())
            d.request_messages()
            if len(d.checkpoints()) == before:
                continue
            measured = d.measure()
            nodes = dict(measured.nodes)
            current = [cp.node_seq for cp in d.checkpoints() if cp.superseded_by is None]
            pointers = [q for q in s.surface if s.event(q).message.source_kind == POINTER_SOURCE]
            added = sum(nodes[q] for q in [*current, *pointers] if q in nodes)
            out.append((added / config.trigger_tokens, measured.total))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    files = corpus_files()
    if not files:
        print(f"corpus absent ({CORPUS}): skipped")
        return
    rows = []
    for window, retain in WINDOWS:
        shares: list[float] = []
        over = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path in files:
                for share, total in replay(path, window, retain):
                    shares.append(share)
                    over += total > window
        q = statistics.quantiles(shares, n=10) if len(shares) > 1 else shares * 9
        rows.append(
            f"| {args.label} | {window // 1000}k / {retain // 1000}k | {len(shares)} | "
            f"{statistics.median(shares):.1%} | {q[-1]:.1%} | {max(shares):.1%} | {over} |"
        )
        print(rows[-1])
    if args.record:
        body = "\n".join(
            [
                f"Machine: {machine_notes()}.",
                "Every corpus session replayed under each recency window (retain given), the "
                "offline summarizer, defaults otherwise; after every pass: the checkpoint "
                "node(s) plus the pointer as a share of the trigger, and how many requests "
                "stayed over the window (those are sessions whose newest unit, or an oversize "
                "unit the tail keeps, is itself near or over the window).",
                "",
                "| code | window / retain | passes | added / trigger, median | p90 | max | "
                "requests over the window after a pass |",
                "| --- | --- | --- | --- | --- | --- | --- |",
                *rows,
            ]
        )
        record_section(f"## Checkpoint budget on the corpus ({args.label})", body)


if __name__ == "__main__":
    main()
