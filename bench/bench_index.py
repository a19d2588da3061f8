"""Search across 200 sessions: the SQLite FTS5 index against opening and searching each one.

Builds a directory of session files in a temp dir — every corpus session
(``../shared/corpus``) replayed with compaction (extractive summarizer), then synthetic
sessions up to ``--sessions`` — and, in each of ``--runs`` runs, for each tokenizer
(``trigram``, ``unicode61``):

* the first build of the index (``SessionIndex.update`` on an empty index) and its size;
* an update after one event is appended to one session, and an update with nothing new;
* each query through the index (``search_all``: update check, FTS narrowing, literal
  confirmation, the shown sessions opened for their hits), against scanning every session
  the way ``dashr search FILE`` does (``Dashr.open(read_only=True)`` + ``history_search``),
  and ``rg -F -i -l`` over the directory as a floor (left out when ``rg`` is absent);
* correctness: the matches per session through either index equal each session's own
  ``history_search`` count.

``--record`` rewrites the "Search across sessions" section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import RESULTS, ROOT, join_notes, machine_note_list, record_section

from dashr_ext import CompactionConfig, RecallConfig
from dashr_ext._controller import Dashr
from dashr_ext._recall.index import INDEX_FILE, SessionIndex, find_all, search_all

SECTION = "## Search across sessions (bench/bench_index.py)"
CORPUS = ROOT.parent / "shared" / "corpus"
WORDS = [
    "request",
    "retry",
    "budget",
    "timeout",
    "gateway",
    "settings",
    "config",
    "parser",
    "token",
    "value",
    "error",
    "warning",
    "module",
    "function",
    "class",
    "return",
    "import",
    "test",
    "assert",
    "expected",
    "got",
    "none",
    "true",
    "false",
    "handler",
    "queue",
    "worker",
    "cache",
    "index",
    "search",
    "query",
    "session",
    "checkpoint",
    "summary",
    "archive",
    "window",
]
QUERIES = {
    "rare phrase (1 session)": "ticket k-00042 escalated",
    "part of a word (1 session)": "0042",
    "common word": "error",
    "code phrase": "def test_",
    "2 chars (no trigram)": "qz",
}
KINDS = ("trigram", "trigram-full", "unicode61")
"""``trigram``: no positions (the default); ``trigram-full``: with positions (phrase queries)."""
QUERY_CALLS = 5
BIG = RecallConfig(search_max_hits=200, read_max_chars=1_000_000)


def corpus_sessions(directory: Path) -> int:
    files = sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []
    config = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        out = directory / f"corpus-{path.stem}.jsonl"
        with Dashr.create(
            out, config=config, summarizer="extractive", tools=data["tools"], durability="flush"
        ) as d:
            for message in data["messages"]:
                d.record_openai(message)
                d.request_messages()
    return len(files)


def synthetic_session(path: Path, k: int, rng: random.Random) -> None:
    """Turns of a user task, assistant tool calls and ~1 KB tool results, one rare marker."""
    with Dashr.create(path, durability="flush") as d:
        steps = rng.randint(20, 60)
        d.record_openai(
            {"role": "user", "content": f"ticket K-{k:05d} escalated: look at the retry budget"}
        )
        for step in range(steps):
            args = json.dumps({"command": f"grep -rn 'attempt {step}' src/"})
            d.record_openai(
                {
                    "role": "assistant",
                    "content": " ".join(rng.choices(WORDS, k=12)),
                    "tool_calls": [
                        {
                            "id": f"c{step}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": args},
                        }
                    ],
                }
            )
            lines = [" ".join(rng.choices(WORDS, k=rng.randint(4, 14))) for _ in range(14)]
            d.record_openai(
                {"role": "tool", "tool_call_id": f"c{step}", "content": "\n".join(lines)}
            )
        d.record_openai({"role": "assistant", "content": "Done."})


def build(directory: Path, count: int) -> tuple[int, int]:
    corpus = corpus_sessions(directory)
    rng = random.Random(17)
    for k in range(count - corpus):
        synthetic_session(directory / f"synthetic-{k:04d}.jsonl", k, rng)
    return corpus, count - corpus


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def scan(directory: Path, query: str) -> dict[str, int]:
    """What ``dashr search FILE`` does, for every file: matches per session."""
    out: dict[str, int] = {}
    for path in sorted(directory.glob("*.jsonl")):
        with Dashr.open(path, read_only=True, recall=BIG) as d:
            text = str(d.history_search(query))
        found = re.search(r", (\d+) matched, showing", text)
        n = int(found.group(1)) if found else 0
        if n:
            out[path.name] = n
    return out


def exact_counts(directory: Path, query: str, tokenizer: str, index: Path) -> dict[str, int]:
    found = find_all(directory, query, index_path=index, tokenizer=tokenizer)
    return {r.name: len(found.hits(r, BIG)) for r in found.sessions if r.name in found.matched}


def rg(directory: Path, query: str) -> float | None:
    if shutil.which("rg") is None:
        return None
    seconds, _ = timed(
        lambda: subprocess.run(
            ["rg", "-F", "-i", "-l", "--glob", "*.jsonl", query, str(directory)],
            capture_output=True,
            check=False,
        )
    )
    return seconds


def index_row(directory: Path, tokenizer: str) -> dict[str, float]:
    """First build, size, an update with nothing new, an update after one appended event."""
    index = directory / f"bench-{tokenizer}.sqlite3"
    index.unlink(missing_ok=True)
    row: dict[str, float] = {}
    with SessionIndex(directory, path=index, tokenizer=tokenizer) as idx:
        row["build"], stats = timed(idx.update)
        assert stats.rebuilt and len(stats.read) == len(list(directory.glob("*.jsonl")))
        row["size"] = index.stat().st_size
        row["noop"], _ = timed(idx.update)
        target = sorted(directory.glob("synthetic-*.jsonl"))[0]
        with Dashr.open(target, durability="flush") as d:
            d.record_openai({"role": "user", "content": f"appended note {time.time_ns()}"})
        row["append"], stats = timed(idx.update)
        assert list(stats.read) == [target.name]
    return row


def query_times(
    directory: Path, rows: dict[str, dict[str, float]], scans: dict[str, float]
) -> None:
    """Each query through each index kind, interleaved (the kinds share the machine's noise),
    the median of :data:`QUERY_CALLS` calls."""
    for label, query in QUERIES.items():
        samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(QUERY_CALLS):
            for kind in KINDS:
                index = directory / f"bench-{kind}.sqlite3"
                seconds, _ = timed(
                    lambda q=query, i=index, k=kind: search_all(
                        directory, q, index_path=i, tokenizer=k
                    )
                )
                samples[kind].append(seconds)
        for kind in KINDS:
            rows[kind][f"q:{label}"] = statistics.median(samples[kind])
            rows[kind][f"x:{label}"] = scans[label] / rows[kind][f"q:{label}"]


def spread(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return fmt.format(statistics.median(values)) + f" ({fmt.format(lo)}–{fmt.format(hi)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="reuse (or build once into) this directory")
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_index_") as tmp:
        directory = args.dir or Path(tmp) / "sessions"
        if not directory.is_dir() or not any(directory.glob("*.jsonl")):
            directory.mkdir(parents=True, exist_ok=True)
            seconds, (corpus, synthetic) = timed(lambda: build(directory, args.sessions))
            print(f"built {corpus} corpus + {synthetic} synthetic sessions in {seconds:.0f} s")
        files = sorted(directory.glob("*.jsonl"))
        log_bytes = sum(p.stat().st_size for p in files)
        corpus = sum(1 for p in files if p.name.startswith("corpus-"))
        print(f"{len(files)} sessions ({corpus} from the corpus), {log_bytes / 1e6:.1f} MB of logs")
        (directory / INDEX_FILE).unlink(missing_ok=True)

        # correctness: every query, both tokenizers, against each session's own search
        wrong: list[str] = []
        truth = {label: scan(directory, q) for label, q in QUERIES.items()}
        for tokenizer in KINDS:
            index = directory / f"check-{tokenizer}.sqlite3"
            for label, query in QUERIES.items():
                if exact_counts(directory, query, tokenizer, index) != truth[label]:
                    wrong.append(f"{tokenizer}/{label}")
            index.unlink()
        print("correctness:", "identical" if not wrong else f"DIFFERENT: {wrong}")

        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        scan_times: dict[str, list[float]] = {label: [] for label in QUERIES}
        rg_times: dict[str, list[float]] = {label: [] for label in QUERIES}
        for run in range(args.runs):
            scans = {
                label: timed(lambda q=q: scan(directory, q))[0] for label, q in QUERIES.items()
            }
            for label, seconds in scans.items():
                scan_times[label].append(seconds)
                floor = rg(directory, QUERIES[label])
                if floor is not None:
                    rg_times[label].append(floor)
            rows = {kind: index_row(directory, kind) for kind in KINDS}
            query_times(directory, rows, scans)
            for kind in KINDS:
                runs[kind].append(rows[kind])
                print(
                    f"run {run + 1} {kind}: "
                    + ", ".join(f"{k} {v:.3f}" for k, v in rows[kind].items() if k != "size")
                )
        lines = table(runs, scan_times, rg_times, log_bytes)
        print("\n".join(lines))
        if args.record:
            notes = machine_note_list()
            body = [
                f"{len(files)} session files ({corpus} corpus sessions replayed with compaction, "
                f"the rest synthetic), {log_bytes / 1e6:.1f} MB of logs; {args.runs} runs, each "
                "figure the median with the spread (min–max) over the runs; query times are the "
                f"median of {QUERY_CALLS} calls within a run, the index kinds interleaved. "
                "Correctness: every query's matches per session through every index kind "
                + ("equal" if not wrong else f"DIFFER from ({', '.join(wrong)})")
                + " each session's own history_search.",
                "",
                f"`python bench/bench_index.py --record` ({join_notes(notes)})",
                "",
                *lines,
            ]
            record_section(SECTION, "\n".join(body))
            print(f"recorded in {RESULTS.relative_to(ROOT)}")


def table(
    runs: dict[str, list[dict[str, float]]],
    scan_times: dict[str, list[float]],
    rg_times: dict[str, list[float]],
    log_bytes: int,
) -> list[str]:
    def col(rs: list[dict[str, float]], key: str, fmt: str, scale: float = 1.0) -> str:
        return spread([r[key] * scale for r in rs], fmt)

    def row(name: str, key: str, fmt: str, scale: float = 1.0) -> str:
        return f"| {name} | " + " | ".join(col(runs[k], key, fmt, scale) for k in KINDS) + " |"

    lines = [
        "| measurement | trigram, no positions (default) | trigram with positions | unicode61 |",
        "| --- | --- | --- | --- |",
        row("first build (s)", "build", "{:.2f}"),
        row(f"index size (MB; logs {log_bytes / 1e6:.1f} MB)", "size", "{:.1f}", 1e-6),
        row("update, one event appended to one session (ms)", "append", "{:.1f}", 1e3),
        row("update, nothing new (ms)", "noop", "{:.1f}", 1e3),
    ]
    for label, query in QUERIES.items():
        lines.append(row(f'query "{query}" — {label} (ms)', f"q:{label}", "{:.1f}", 1e3))
        lines.append(
            f"| … scanning every session instead (open + history_search): "
            f"{spread(scan_times[label], '{:.2f}')} s, that is the index × | "
            + " | ".join(col(runs[k], f"x:{label}", "{:.0f}") for k in KINDS)
            + " |"
        )
        if rg_times[label]:
            floor = spread([t * 1e3 for t in rg_times[label]], "{:.1f}")
            lines.append(
                "| … `rg -F -i -l` over the directory (ms; no attribution, no snippets) | "
                f"{floor} | | |"
            )
    return lines


if __name__ == "__main__":
    main()
