"""Recall benchmark: history_search throughput and history_read page latency (SPEC 13, 8).

Run ``python bench/bench_recall.py`` from the project root. Every figure is printed as an
absolute number and, where one applies, as a ratio to a baseline measured in the same run:

* search over every corpus session (``../shared/corpus``) recorded into one session and
  compacted under a 20k-token recency window, and over a synthetic log of about 100 MB of
  message text: the first call (which builds the normalised text cache) and warm calls, in
  MB of message text scanned per second. Baselines: one bare ``str.find`` over the same
  normalised text held as a single string (the floor of any literal scan), and a cacheless
  scan that renders and normalises every event on each call;
* page reads (``history_read`` from a seq, following a cursor, and a checkpoint's span) on
  a 1M-event log against a 10k-event log: the latency must not grow with the log.

Targets: a literal scan over 100 MB in < 1 s warm; a page from a 1M-event log in < 10 ms.
``--record`` rewrites the "Recall" section of ``bench/RESULTS.md`` with this run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import RESULTS, join_notes, machine_note_list, record_section, table_lines  # noqa: E402

from dashr_ext import CompactionConfig, Dashr, RecallConfig  # noqa: E402
from dashr_ext._events import Event, EventSpec, Replace  # noqa: E402
from dashr_ext._recall import Recall  # noqa: E402
from dashr_ext._recall.render import event_body  # noqa: E402
from dashr_ext._recall.search import normalize  # noqa: E402
from dashr_ext._session import Session  # noqa: E402

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
SECTION = "## Recall (bench/bench_recall.py)"
TARGETS: list[str] = []
"""One line per SPEC 13 target, filled in as the measurements come in."""

VOCABULARY = (
    "the retry budget is read from config before each request and the helper returns a "
    "ValueError when the header is missing so we patch session.py to add Content-Length only "
    "for bodies and rerun the failing tests with pytest -x scheduler backoff attempt timeout "
    "traceback File line module assert expected got None True False self return def class"
)


# --------------------------------------------------------------------------- helpers


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(fn) for _ in range(repeat))


def mb(chars: int) -> float:
    return chars / 1e6


def header_event() -> Event:
    data = {
        "sessionId": "bench",
        "createdAt": 0,
        "systemPrompt": None,
        "tools": None,
        "format": "dashr/1",
    }
    return Event(0, "session/header", 0, data)


def message(seq: int, kind: str, role: str, blocks: list[dict[str, Any]], **extra: Any) -> Event:
    source = {"user": {"kind": "user"}, "assistant": {"kind": "model", "model": None}}.get(
        role, {"kind": "tool"}
    )
    msg = {"id": f"m{seq}", "role": role, "source": source, "content": blocks, **extra}
    return Event(seq, kind, 1_783_339_200_000 + seq, {"message": msg}, "append")


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# --------------------------------------------------------------------------- logs


def corpus_session() -> tuple[Session, int] | None:
    """Every corpus session recorded one message at a time into one compacting session."""
    files = sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []
    if not files:
        return None
    config = CompactionConfig(recency_window_tokens=20_000, retain_tokens=4_000)
    d = Dashr.create(None, in_memory=True, config=config, summarizer="extractive")
    for k, path in enumerate(files):
        data = json.loads(path.read_text(encoding="utf-8"))
        for m in data["messages"]:
            if m["role"] == "system":
                continue
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"s{k}-{c['id']}"} for c in m["tool_calls"]]
            if m["role"] == "tool":
                m["tool_call_id"] = f"s{k}-{m['tool_call_id']}"
            d.record_openai(m)
            d.request_messages()
    return d.session, len(files)


def line_pool(rng: random.Random, size: int) -> list[str]:
    words = VOCABULARY.split()
    return [" ".join(rng.choices(words, k=rng.randint(4, 16))) for _ in range(size)]


def synthetic_text_session(target_mb: float) -> Session:
    """Steps of an assistant tool call and a ~4 KB tool result until ``target_mb`` of text."""
    rng = random.Random(7)
    pool = line_pool(rng, 50_000)
    events = [header_event()]
    chars = 0
    step = 0
    while chars < target_mb * 1e6:
        seq = len(events)
        if step % 20 == 0:
            events.append(
                message(seq, "user/message", "user", [text(f"Task {step}: " + pool[step])])
            )
            seq += 1
        args = json.dumps({"command": f"grep -rn 'attempt {step}' src/"})
        call = {"type": "tool-call", "id": f"t{step}", "name": "bash", "arguments": args}
        events.append(message(seq, "assistant/message", "assistant", [text(pool[-step]), call]))
        lines = [f"trace id {step:08x} for request {step}", *rng.choices(pool, k=60)]
        result = "\n".join(lines)
        events.append(
            message(
                seq + 1,
                "tool/result",
                "tool",
                [text(result)],
                toolCallId=f"t{step}",
                toolName="bash",
                isError=False,
            )
        )
        chars += len(result) + len(pool[-step]) + len(args)
        step += 1
    # a closing assistant message so that no step is left running
    events.append(message(len(events), "assistant/message", "assistant", [text("Done.")]))
    return Session(events)


def synthetic_event_session(count: int) -> Session:
    """``count`` events of short user/assistant turns, with one checkpoint in the middle."""
    events = [header_event()]
    for seq in range(1, count - 4):
        if seq % 2:
            body = f"question {seq} about the retry budget and the scheduler backoff settings"
            events.append(message(seq, "user/message", "user", [text(body)]))
        else:
            body = f"answer {seq}: the retry budget is read from config before each request"
            events.append(message(seq, "assistant/message", "assistant", [text(body)]))
    session = Session(events)
    a = count // 4 | 1
    b = a + min(20_000, count // 4) - 1
    shadowed = list(range(a, b + 1))
    n = len(session)
    checkpoint = f"c{n + 1}"
    summary = {
        "compactionId": "p1",
        "checkpoint": checkpoint,
        "trigger": "manual",
        "engine": "summary",
        "summary": "- The retry budget discussion.",
        "shadowedRange": {"start": a, "end": b},
        "shadowedSeqs": shadowed,
        "shadowedTokenCount": 20 * len(shadowed),
        "summarizer": {"kind": "bench", "model": None},
        "archive": {},
    }
    node = {
        "role": "user",
        "source": {"kind": "compact-checkpoint", "checkpoint": checkpoint, "compactionId": "p1"},
        "content": [text("- The retry budget discussion.")],
    }
    session.append(
        [
            EventSpec(
                "compaction/start", {"compactionId": "p1", "trigger": "manual", "engine": "x"}
            ),
            EventSpec("compaction/summary", summary),
            EventSpec("user/message", {"message": node}, Replace(a, b), (*shadowed, n, n + 1)),
            EventSpec("compaction/end", {"compactionId": "p1"}),
        ]
    )
    return session


# --------------------------------------------------------------------------- search


def bench_search(label: str, session: Session, queries: dict[str, str], repeat: int) -> list[Any]:
    rows: list[tuple[str, str]] = []
    r = Recall(session, RecallConfig())
    # the message text a scan covers
    scanned = sum(len(event_body(e)) for e in session.events if e.is_surface)
    first_query = next(iter(queries.values()))
    cold = timed(lambda: r.search(first_query))
    norm_text = "\n".join(normalize(event_body(e)) for e in session.events if e.is_surface)
    print(
        f"  {label}: {len(session):,} events, {mb(scanned):.1f} MB message text, "
        f"{mb(len(norm_text)):.1f} MB normalised"
    )
    rows.append(
        (
            f"{label}: first search (builds the cache)",
            f"{cold * 1000:.0f} ms ({mb(scanned) / cold:.0f} MB/s)",
        )
    )
    for name, query in queries.items():
        q = normalize(query)
        warm = median_time(lambda query=query: r.search(query), repeat)
        floor = median_time(lambda q=q: norm_text.count(q), repeat)
        result = r.search(query)
        matched = result.rsplit("\n", 1)[1].split(", ")[1]
        rows.append(
            (
                f"{label}: warm search, {name} ({matched} events)",
                f"{warm * 1000:.1f} ms ({mb(scanned) / warm:.0f} MB/s); baseline str.count "
                f"{floor * 1000:.1f} ms; ratio {warm / floor:.2f}×",
            )
        )
    first = normalize(first_query)

    def cacheless() -> int:
        return sum(first in normalize(event_body(e)) for e in session.events if e.is_surface)

    naive = timed(cacheless)
    warm = median_time(lambda: r.search(first_query), repeat)
    if scanned >= 50e6:
        slowest = max(median_time(lambda q=q: r.search(q), repeat) for q in queries.values())
        TARGETS.append(
            f"history_search over {mb(scanned):.0f} MB, warm: slowest query {slowest * 1000:.0f} "
            f"ms (target < 1 s): {'met' if slowest < 1 else 'MISSED'}; the first call also "
            f"builds the cache: {cold * 1000:.0f} ms"
        )
    rows.append(
        (
            f"{label}: cacheless scan (render + normalise every call)",
            f"{naive * 1000:.0f} ms; warm search is {naive / warm:.0f}× faster",
        )
    )
    return rows


# --------------------------------------------------------------------------- read


def read_latencies(r: Recall, session: Session, count: int, rng: random.Random) -> Iterator[float]:
    seqs = [e.seq for e in session.events if e.is_surface]
    for _ in range(count):
        seq = rng.choice(seqs)
        yield timed(lambda seq=seq: r.read(seq=seq))


def bench_read_text(label: str, session: Session, repeat: int) -> list[tuple[str, str]]:
    """Pages of large events (cut at the character budget) on a text-heavy log."""
    r = Recall(session, RecallConfig())
    r.read(seq=1)
    rng = random.Random(5)
    times = sorted(read_latencies(r, session, repeat, rng))
    page = r.read(seq=len(session) // 2)
    token = page.rsplit("\n", 1)[1].removeprefix("cursor: ")
    follow = [timed(lambda: r.read(cursor=token)) for _ in range(repeat)]
    return [
        (
            f"read, {label}: page from a random seq ({len(page):,} chars)",
            f"median {statistics.median(times) * 1000:.2f} ms, max {times[-1] * 1000:.2f} ms; "
            f"after a cursor {statistics.median(follow) * 1000:.2f} ms",
        )
    ]


def bench_read_log(size: int, repeat: int) -> tuple[float, list[tuple[str, str]]]:
    """Page-read latencies on one synthetic log of ``size`` events; (median, rows)."""
    t0 = time.perf_counter()
    session = synthetic_event_session(size)
    print(f"  {len(session):,}-event log built in {time.perf_counter() - t0:.1f} s")
    r = Recall(session, RecallConfig())
    cold = timed(lambda: r.read(seq=1))
    rng = random.Random(3)
    seq_times = sorted(read_latencies(r, session, repeat, rng))
    checkpoint = r.checkpoints()[0]
    page = r.read(checkpoint=checkpoint.id)
    token = page.rsplit("\n", 1)[1].removeprefix("cursor: ")
    deep = f"{checkpoint.id}@{len(checkpoint.shadowed_seqs) - 200}:0"
    cp_times = [timed(lambda: r.read(checkpoint=checkpoint.id)) for _ in range(repeat // 3)]
    cursor_times = [timed(lambda t=t: r.read(cursor=t)) for t in [token, deep] * (repeat // 6)]
    med = statistics.median(seq_times)
    p95 = seq_times[int(len(seq_times) * 0.95)]
    tag = f"{size // 1000}k" if size < 1_000_000 else f"{size // 1_000_000}M"
    span = len(checkpoint.shadowed_seqs)
    return med, [
        (f"read, {tag}-event log: first call (indexes the log)", f"{cold * 1000:.1f} ms"),
        (
            f"read, {tag}-event log: page from a random seq",
            f"median {med * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms, "
            f"max {seq_times[-1] * 1000:.2f} ms",
        ),
        (
            f"read, {tag}-event log: checkpoint page ({span:,}-event span)",
            f"median {statistics.median(cp_times) * 1000:.2f} ms",
        ),
        (
            f"read, {tag}-event log: page after a cursor",
            f"median {statistics.median(cursor_times) * 1000:.2f} ms",
        ),
    ]


def bench_reads(small: int, large: int, repeat: int) -> list[tuple[str, str]]:
    small_median, rows = bench_read_log(small, repeat)
    large_median, large_rows = bench_read_log(large, repeat)
    TARGETS.append(
        f"history_read page on a {large:,}-event log: median {large_median * 1000:.2f} ms "
        f"(target < 10 ms): {'met' if large_median < 0.01 else 'MISSED'}; "
        f"{large_median / small_median:.2f}× the {small:,}-event figure (O(page), not O(log))"
    )
    return [
        *rows,
        *large_rows,
        (
            f"read: page latency ratio, {large:,} vs {small:,} events (median)",
            f"{large_median / small_median:.2f}×",
        ),
    ]


# --------------------------------------------------------------------------- report


def record(rows: list[tuple[str, str]], notes: list[str], seconds: float) -> None:
    body = [
        "Machine: " + join_notes(notes) + f"; whole run {seconds:.0f} s.",
        "Warm figures are medians of repeated calls in one process; MB are millions of "
        "characters of message text (the event bodies history_read shows).",
        "",
        *(f"* {line}" for line in TARGETS),
        "",
        *table_lines(rows),
    ]
    record_section(SECTION, "\n".join(body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="synthetic message text, MB")
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the large log")
    parser.add_argument("--small-events", type=int, default=10_000, help="events in the small log")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per figure")
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()

    began = time.perf_counter()
    rows: list[tuple[str, str]] = []
    print("corpus ...")
    corpus = corpus_session()
    if corpus is None:
        rows.append(("corpus search", f"skipped ({CORPUS} absent)"))
    else:
        session, files = corpus
        cps = sum(1 for e in session.events if e.type == "compaction/summary")
        print(f"  {files} sessions, {cps} compaction passes")
        rows += bench_search(
            f"corpus ({files} sessions)",
            session,
            {
                "rare phrase": "Optimize .delete() to use only required fields",
                "common phrase": "Traceback (most recent call last)",
                "common word": "def",
                "no match": "exponential jitter budget",
            },
            args.repeat,
        )
        del session, corpus
    print(f"synthetic {args.mb:.0f} MB ...")
    session = synthetic_text_session(args.mb)
    rows += bench_search(
        f"synthetic {args.mb:.0f} MB",
        session,
        {
            "unique phrase": "trace id 000003e8 for request",
            "common phrase": "retry budget",
            "no match": "exponential jitter budget",
        },
        max(3, args.repeat // 6),
    )
    rows += bench_read_text(f"synthetic {args.mb:.0f} MB", session, args.repeat * 3)
    del session
    print("page reads ...")
    rows += bench_reads(args.small_events, args.events, args.repeat * 10)

    notes = machine_note_list(load_label=None)
    seconds = time.perf_counter() - began
    width = max(len(name) for name, _ in rows)
    print()
    for note in notes:
        print(note)
    print()
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print()
    for line in TARGETS:
        print(line)
    print(f"\nwhole run {seconds:.0f} s")
    if args.record:
        record(rows, notes, seconds)
        print(f"recorded in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
