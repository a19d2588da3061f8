"""Turn memory in a real session: turn size, session-level passes, facts, job time, prefix.

    python bench/bench_turn_memory.py [--quick] [--runs 3] [--record]

Sessions: every corpus session (``shared/corpus`` beside the repository, read by path;
skipped when absent; ``--quick``: the two smallest) replayed as consecutive turns of one
session (each user message opens a turn, which ends before the next user message; the
system message becomes the session's system prompt), and scripted notebook sessions
(:mod:`notebook_turns`: ``run_cell`` turns with planted facts, deterministic).

Each session is replayed twice into a real ``Dashr`` (``Dashr.create`` on a file in a
temporary folder, ``recency_window_tokens=20000, retain_tokens=4000``, the offline extractive
summarizer, every other setting at its default), once with ``turn_memory`` off and once on,
as a harness drives it: explicit turn markers, ``request_messages()`` (the pressure check,
so prune and summary passes run there) before each assistant message, ``end_turn()`` after
the turn's last message, then ``wait_for_turns()`` so a landing precedes the next turn.

Measured, per run:

1. **Turn size**: tokens after / before of the completed turns as ``Dashr.turns()`` reports
   them (a no-op counts its tokens unchanged), over all turns and over turns of at least
   ``turn_min_tokens`` (target <= 0.35); turns cut by a session pass (no sizes) and turns
   with no assistant message are counted apart. Beside it: the turns a job left as they
   were because they end with a tool result, as ``compress_turn`` alone rewrites them; the
   landed turns as recorded and as the job read them (a prune pass may shrink them first);
   and the compressor alone on the corpus without passes (``bench_turn_extractive``).
2. **Session-level passes** (committed ``compaction/start`` with a pressure, overflow or
   manual trigger) with turn memory over without, summed over the sessions (target <= 0.5).
3. **Facts** in each landed turn, verbatim in its nodes right after the landing (target >=
   95 %): in notebook sessions the planted ones (decision, error line, final answer, paths,
   command); in corpus sessions the ones ``bench_turn_extractive.facts_of`` reads from the
   turn's nodes as the job received them (final answer, error lines, paths, commands).
4. **Job time** of a ~20k-token turn (target p95 <= 100 ms): ``turn_nodes`` +
   ``compress_turn`` + ``validate_final`` + ``plan_landing``, once per turn, in memory, the
   meter's node counts cached (as request checks leave them); over scripted turns grown to
   ~20k tokens and corpus turns of 15k-30k. Also what a harness waits, ``end_turn()`` to
   ``wait_for_turns()``, for landed turns of 10k tokens or more (file, fsync).
5. **Prompt-cache prefix**: for every landing, the request (``session.messages()``) just
   before ``end_turn()`` and right after the landing: whether every message before the
   turn and the tools are byte-identical (as JSON), and the tokens of the longest common
   prefix of the two requests rendered ChatML-style (``bench_recallable``) with the meter's
   encoding, against the tokens before the turn.

``--runs`` repeats everything (default 3) in this process; a target is met when it is in
every run; a row shows each run's value, or one value when all agree. ``--record`` writes
the section "Turn memory" of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_turn_extractive as extractive_bench  # noqa: E402
import tiktoken  # noqa: E402
from bench_common import join_notes, machine_note_list, package_commit, record_section  # noqa: E402
from bench_recallable import RequestTokens, common_prefix  # noqa: E402
from bench_turn_extractive import corpus_files, facts_of, turns_of  # noqa: E402
from notebook_turns import RUN_CELL_TOOL, SYSTEM, Facts, notebook_session, sized_session  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._meter import TokenMeter  # noqa: E402
from dashr_ext._payloads import TRIGGERS  # noqa: E402
from dashr_ext._session import Session  # noqa: E402
from dashr_ext._turnmemory import TurnNode, turn_nodes  # noqa: E402
from dashr_ext._turnmemory.extractive import compress_turn  # noqa: E402
from dashr_ext._turnmemory.jobs import default_compressor  # noqa: E402
from dashr_ext._turnmemory.landing import plan_landing  # noqa: E402

SECTION = "## Turn memory (bench/bench_turn_memory.py)"
WINDOW, RETAIN = 20_000, 4_000
NOTEBOOK_SEEDS = tuple(range(1, 9))
NOTEBOOK_TURNS = 16
SIZED_SEEDS = tuple(range(1, 9))
SIZED_TURNS = 6
SIZED_TOKENS = 20_000
CORPUS_BAND = (15_000, 30_000)
"""Corpus turns timed as "about 20k tokens": this many tokens, lower bound included."""
LATENCY_MIN_TOKENS = 10_000
ENDS_IN_TOOL = "the turn runs from a user node to a tool node"
"""How a job's close reason starts for a turn that ends with a tool result."""

Message = dict[str, Any]


@dataclass(frozen=True)
class Script:
    """One session to replay: its turns, and the facts planted in each (None: corpus)."""

    name: str
    system: str | None
    tools: list[Message] | None
    turns: list[list[Message]]
    planted: list[Facts] | None = None


def corpus_scripts(quick: bool) -> list[Script]:
    out = []
    for path in corpus_files(quick):
        data = json.loads(path.read_text(encoding="utf-8"))
        messages = data["messages"]
        system = next((m["content"] for m in messages if m.get("role") == "system"), None)
        out.append(Script(path.stem, system, data.get("tools"), turns_of(messages)))
    return out


def notebook_scripts(
    seeds: Sequence[int] = NOTEBOOK_SEEDS, turns: int = NOTEBOOK_TURNS
) -> list[Script]:
    out = []
    for seed in seeds:
        ns = notebook_session(seed, turns)
        out.append(Script(ns.name, SYSTEM, [RUN_CELL_TOOL], ns.turns, ns.facts))
    return out


# --------------------------------------------------------------------------- prefix probe


@dataclass(frozen=True)
class Snapshot:
    """A request as the provider would get it, and where the turn starts in it."""

    messages: tuple[str, ...]
    """Each message as JSON (what the bytes of the request are made of)."""
    tools: str
    turn_at: int
    """Index of the turn's first message: everything before it is the prefix to keep."""
    raw: list[Message]


def snapshot(d: Dashr, turn_start_seq: int) -> Snapshot:
    """The request now; the turn is the surface nodes after its ``turn/start``."""
    with d.session.lock:
        surface = list(d.session.surface)
        messages = d.session.messages()
    offset = len(messages) - len(surface)  # the system prompt (and nothing else) leads
    first = next((k for k, seq in enumerate(surface) if seq > turn_start_seq), len(surface))
    return Snapshot(
        tuple(json.dumps(m, ensure_ascii=False) for m in messages),
        json.dumps(d.request_tools(), ensure_ascii=False),
        offset + first,
        messages,
    )


@dataclass(frozen=True)
class Probe:
    held: bool
    """Every message before the turn, and the tools, byte-identical after the landing."""
    prefix_tokens: int
    """Tokens of the request before the turn (before the landing)."""
    kept_tokens: int
    """Longest common token prefix of the requests before and after the landing."""
    request_tokens: int
    """The whole request before the landing."""


def probe(
    before: Snapshot, after: Snapshot, tokenize: Callable[[Sequence[Message]], list[list[int]]]
) -> Probe:
    """What a landing kept of the request before it (pure)."""
    k = before.turn_at
    held = (
        before.tools == after.tools
        and len(after.messages) >= k
        and before.messages[:k] == after.messages[:k]
    )
    a, b = tokenize(before.raw), tokenize(after.raw)
    return Probe(held, sum(map(len, a[:k])), common_prefix(a, b)[0], sum(map(len, a)))


# --------------------------------------------------------------------------- replay


@dataclass
class Replay:
    """What one replay of one session found."""

    passes: int = 0
    prunes: int = 0
    sizes: list[tuple[int, int]] = field(default_factory=list)
    """(tokens before, after) of every completed turn with sizes, turn memory on."""
    cut: int = 0
    """Completed turns closed without sizes (a session pass had cut into them)."""
    unanswered: list[int] = field(default_factory=list)
    """Tokens of each turn holding no assistant message (a user message alone)."""
    sizes_if_all: list[tuple[int, int]] = field(default_factory=list)
    """:attr:`sizes`, with the turns in :attr:`ending_in_tool` as ``compress_turn`` alone
    rewrites them."""
    ending_in_tool: list[tuple[int, int]] = field(default_factory=list)
    """(tokens, tokens after ``compress_turn`` alone) of the turns the job left as they were
    because they end with a tool result."""
    landed: list[tuple[int, int, int]] = field(default_factory=list)
    """(tokens as recorded, as the job read them, after) of every landed turn: a prune pass
    may have shrunk a turn's outputs before its job ran."""
    statuses: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    """Why no-op and failed turns closed, by the reason's opening words."""
    facts: dict[str, list[int]] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    warnings: int = 0

    def fact(self, kind: str, kept: bool) -> None:
        pair = self.facts.setdefault(kind, [0, 0])
        pair[0] += int(kept)
        pair[1] += 1


def replay(script: Script, turn_memory: bool, folder: Path, tokenize: Callable[..., Any]) -> Replay:
    """Replay ``script`` into a real ``Dashr`` as a harness does (module docstring)."""
    config = CompactionConfig(
        recency_window_tokens=WINDOW, retain_tokens=RETAIN, turn_memory=turn_memory
    )
    path = folder / f"{script.name}-{'on' if turn_memory else 'off'}.jsonl"
    out = Replay()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = Dashr.create(path, config=config, system_prompt=script.system, tools=script.tools)
        received: list[tuple[TurnNode, ...]] = []
        default = default_compressor(d.meter.count_text, config.turn_read_max_chars)

        def compressor(nodes: Sequence[TurnNode]) -> Any:
            received.append(tuple(nodes))
            return default(nodes)

        d.turn_compressor = compressor
        try:
            for k, turn in enumerate(script.turns):
                start = d.session.begin_turn()
                for message in turn:
                    if message.get("role") == "assistant":
                        d.request_messages()
                    d.record_openai(message)
                before = snapshot(d, start.seq) if turn_memory else None
                received.clear()
                began = time.perf_counter()
                end = d.end_turn()
                d.wait_for_turns()
                took = time.perf_counter() - began
                if before is None:
                    continue
                number = int(start.data["turn"])
                record = next(r for r in d.turns() if r.turn == number)
                out.statuses[record.status] = out.statuses.get(record.status, 0) + 1
                if record.reason is not None:
                    why = reason_key(record.reason)
                    out.reasons[why] = out.reasons.get(why, 0) + 1
                if record.tokens_before is None or record.tokens_after is None:
                    out.cut += 1
                    continue
                if not any(m.get("role") == "assistant" for m in turn):
                    out.unanswered.append(record.tokens_before)
                    continue
                pair = (record.tokens_before, record.tokens_after)
                out.sizes.append(pair)
                if record.reason is not None and record.reason.startswith(ENDS_IN_TOOL):
                    nodes = turn_nodes(d.session, number, meter=d.meter)
                    alone = compress_turn(nodes, count_tokens=d.meter.count_text)
                    if alone is not None:
                        pair = (record.tokens_before, alone.tokens_after)
                    out.ending_in_tool.append(pair)
                out.sizes_if_all.append(pair)
                if record.status != "landed":
                    continue
                recorded = sum(
                    d.meter.node_tokens(e)
                    for e in d.session.events[start.seq : end.seq]
                    if e.surface_op == "append"
                )
                out.landed.append((recorded, record.tokens_before, record.tokens_after))
                if record.tokens_before >= LATENCY_MIN_TOKENS:
                    out.latencies.append(took)
                out.probes.append(probe(before, snapshot(d, start.seq), tokenize))
                text = "\n".join(n.text for n in turn_nodes(d.session, number))
                planted = script.planted[k] if script.planted is not None else None
                found = planted if planted is not None else facts_of(received[0])
                for kind, values in found.items():
                    for value in sorted(set(values)):
                        out.fact(kind, value in text)
            out.passes, out.prunes = session_passes(d)
        finally:
            d.close()
    out.warnings = len(caught)
    return out


def reason_key(reason: str) -> str:
    """A close reason without its figures: the words before the first parenthesis or colon."""
    return re.split(r"[(:;]", re.sub(r"^turn \d+ ", "the turn ", reason), maxsplit=1)[0].strip()


def session_passes(d: Dashr) -> tuple[int, int]:
    """(committed summary passes, committed prune passes) of the log; turn landings excluded."""
    events = d.session.events
    ends = {e.data["compactionId"]: e for e in events if e.type == "compaction/end"}
    passes = prunes = 0
    for e in events:
        if e.type != "compaction/start":
            continue
        end = ends.get(e.data["compactionId"])
        if end is None or "error" in end.data:
            continue
        passes += e.data["trigger"] in TRIGGERS
        prunes += e.data["trigger"] == "prune"
    return passes, prunes


# --------------------------------------------------------------------------- job time


def job_time(session: Session, turn: int, meter: TokenMeter) -> float:
    """Seconds for what a job computes for ``turn`` (read, compress, validate, plan)."""
    began = time.perf_counter()
    nodes = turn_nodes(session, turn, meter=meter)
    done = compress_turn(nodes, count_tokens=meter.count_text)
    if done is not None:
        done.editor.validate_final()
        plan_landing(
            nodes,
            done.editor.as_data(),
            turn=turn,
            job="j0",
            start_seq=len(session),
            at_ms=0,
            session_id=session.id,
            event_of=session.event,
            count_tokens=meter.count_text,
        )
    return time.perf_counter() - began


def job_times(scripts: Sequence[Script], low: int, high: int) -> tuple[list[float], list[int]]:
    """(seconds, tokens) of one job per turn of ``low`` to ``high`` tokens."""
    times: list[float] = []
    sizes: list[int] = []
    for script in scripts:
        s = Session.create(in_memory=True, system_prompt=script.system, tools=script.tools)
        for turn in script.turns:
            s.begin_turn()
            s.record_openai(turn)
            s.end_turn()
        meter = TokenMeter()
        for number in range(1, len(script.turns) + 1):
            if not any(m.get("role") == "assistant" for m in script.turns[number - 1]):
                continue
            nodes = turn_nodes(s, number, meter=meter)  # the counts the request checks cached
            tokens = sum(n.tokens or 0 for n in nodes)
            if not low <= tokens < high:
                continue
            if not times and not sizes:
                job_time(s, number, meter)  # warm-up: first use of the code paths
            times.append(job_time(s, number, meter))
            sizes.append(tokens)
    return times, sizes


# --------------------------------------------------------------------------- one run


def run_once(
    files: Sequence[Path],
    corpus: Sequence[Script],
    notebooks: Sequence[Script],
    sized: Sequence[Script],
    tokenize: Callable[..., Any],
    min_tokens: int,
) -> dict[str, str]:
    """Every figure of one run, by row name (each value a string)."""
    rows: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-turn-memory-") as tmp:
        for label, scripts in (("corpus", corpus), ("notebook", notebooks)):
            if not scripts:
                continue
            off = [replay(s, False, Path(tmp), tokenize) for s in scripts]
            on = [replay(s, True, Path(tmp), tokenize) for s in scripts]
            rows |= replay_rows(label, off, on, min_tokens)
            if label == "corpus" and files:
                rows |= alone_rows(files, min_tokens)
    sized_times, sized_tokens = job_times(sized, 0, 10**9)
    rows["job time, scripted turns of ~20k tokens (p95 ≤ 100 ms)"] = times_text(
        sized_times, sized_tokens
    )
    if corpus:
        times, tokens = job_times(corpus, *CORPUS_BAND)
        name = (
            f"job time, corpus turns of {CORPUS_BAND[0] // 1000}k-{CORPUS_BAND[1] // 1000}k tokens"
        )
        rows[name + " (p95 ≤ 100 ms)"] = times_text(times, tokens)
    return rows


def alone_rows(files: Sequence[Path], min_tokens: int) -> dict[str, str]:
    """The extractive compressor alone on every corpus turn holding an assistant message,
    no session passes (``bench_turn_extractive``): what the in-session figures compare to."""
    buckets = extractive_bench.run_once(files, min_tokens, 1)
    rows = {}
    for totals, name in zip(buckets.values(), ("all", f"≥ {min_tokens:,}"), strict=True):
        pair = f"{totals.tokens_after:,} / {totals.tokens_before:,}, {totals.turns} turns"
        ratio = totals.tokens_after / totals.tokens_before if totals.tokens_before else 1.0
        key = f"corpus: compress_turn alone, no passes (bench_turn_extractive), {name} turns"
        rows[key] = f"{ratio:.3f} ({pair})"
    return rows


def ratio_text(pairs: Sequence[tuple[int, int]]) -> str:
    before, after = sum(b for b, _ in pairs), sum(a for _, a in pairs)
    if not before:
        return "–"
    return f"{after / before:.3f} ({after:,} / {before:,}, {len(pairs)} turns)"


def replay_rows(
    label: str, off: Sequence[Replay], on: Sequence[Replay], min_tokens: int
) -> dict[str, str]:
    sizes = [p for r in on for p in r.sizes]
    unanswered = [t for r in on for t in r.unanswered]
    tool_ended = [p for r in on for p in r.ending_in_tool]
    statuses = dict(sum((Counter(r.statuses) for r in on), Counter()))
    rows = {
        f"{label}: completed turns by status": ", ".join(
            f"{k} {v}" for k, v in sorted(statuses.items())
        )
        + f" (no sizes: {sum(r.cut for r in on)})",
        f"{label}: why turns were left as they were": "; ".join(
            f"{k} {v}" for k, v in sorted(sum((Counter(r.reasons) for r in on), Counter()).items())
        )
        or "–",
        f"{label}: turns with no assistant message (not counted below)": (
            f"{len(unanswered)} ({sum(unanswered):,} tokens)"
        ),
        f"{label}: tokens after / before, all turns (≤ 0.35)": ratio_text(sizes),
        f"{label}: tokens after / before, turns ≥ {min_tokens:,} (≤ 0.35)": ratio_text(
            [p for p in sizes if p[0] >= min_tokens]
        ),
    }
    landed = [t for r in on for t in r.landed]
    rows[f"{label}: landed turns, tokens as recorded → as the job read them → after"] = (
        f"{sum(t[0] for t in landed):,} → {sum(t[1] for t in landed):,} → "
        f"{sum(t[2] for t in landed):,} ({len(landed)} turns)"
    )
    if tool_ended:
        rows[f"{label}: turns ending with a tool result, left as they were"] = (
            f"{len(tool_ended)} ({sum(b for b, _ in tool_ended):,} tokens); "
            f"compress_turn alone: {ratio_text(tool_ended).split(' (')[0]}"
        )
        alone = [p for r in on for p in r.sizes_if_all]
        rows[f"{label}: tokens after / before, all turns, those compressed too"] = ratio_text(alone)
    p_off, p_on = sum(r.passes for r in off), sum(r.passes for r in on)
    fewer = sum(b.passes < a.passes for a, b in zip(off, on, strict=True))
    more = sum(b.passes > a.passes for a, b in zip(off, on, strict=True))
    rows[f"{label}: session passes with / without turn memory (≤ 0.5)"] = (
        f"{p_on / p_off:.3f} ({p_on} / {p_off}; sessions fewer {fewer}, more {more}, of {len(on)})"
        if p_off
        else f"– ({p_on} / 0)"
    )
    rows[f"{label}: prune passes with / without"] = (
        f"{sum(r.prunes for r in on)} / {sum(r.prunes for r in off)}"
    )
    facts: dict[str, list[int]] = {}
    for r in on:
        for kind, (k, n) in r.facts.items():
            pair = facts.setdefault(kind, [0, 0])
            pair[0], pair[1] = pair[0] + k, pair[1] + n
    kept = total = 0
    for kind, (k, n) in sorted(facts.items()):
        kept, total = kept + k, total + n
        rows[f"{label}: {kind}s kept verbatim"] = f"{k}/{n}"
    rows[f"{label}: facts kept verbatim in landed turns (≥ 95%)"] = (
        f"{kept / total:.1%} ({kept}/{total})" if total else "–"
    )
    probes = [p for r in on for p in r.probes]
    if probes:
        held = sum(p.held for p in probes)
        rows[f"{label}: landings with the request before the turn byte-identical"] = (
            f"{held}/{len(probes)}"
        )
        prefix = sum(p.prefix_tokens for p in probes)
        kept_tokens = sum(min(p.kept_tokens, p.prefix_tokens) for p in probes)
        rows[f"{label}: tokens before the turn kept across a landing"] = (
            f"{kept_tokens / prefix:.1%} ({kept_tokens:,} of {prefix:,})"
        )
        rows[f"{label}: common token prefix of the requests around a landing, median"] = (
            f"{statistics.median(p.kept_tokens for p in probes):,.0f} tokens of a "
            f"{statistics.median(p.request_tokens for p in probes):,.0f}-token request"
        )
    latencies = [t for r in on for t in r.latencies]
    rows[f"{label}: end_turn → landed, turns ≥ {LATENCY_MIN_TOKENS // 1000}k tokens"] = times_text(
        latencies, None
    )
    rows[f"{label}: warnings during the replays (off / on)"] = (
        f"{sum(r.warnings for r in off)} / {sum(r.warnings for r in on)}"
    )
    return rows


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


def times_text(values: Sequence[float], tokens: Sequence[int] | None) -> str:
    if not values:
        return "–"
    text = (
        f"p50 {statistics.median(values) * 1e3:.1f} ms, p95 {percentile(values, 0.95) * 1e3:.1f}"
        f" ms, max {max(values) * 1e3:.1f} ms ({len(values)} turns"
    )
    if tokens:
        text += f", {min(tokens):,}-{max(tokens):,} tokens"
    return text + ")"


# --------------------------------------------------------------------------- report


TARGET = re.compile(r"\((p95 )?(≤|≥) ([\d.]+)( ms|%)?\)$")


def verdict(name: str, values: Sequence[str]) -> str:
    """Whether the target a row names, ``(≤ 0.35)``, ``(≥ 95%)`` or ``(p95 ≤ 100 ms)``, is
    met in every run: the leading figure (the p95 one for times) against the target."""
    target = TARGET.search(name)
    if target is None:
        return ""
    if any(v.startswith("–") for v in values):
        return "–"
    limit = float(target.group(3))
    met = []
    for value in values:
        found = re.search(r"p95 ([\d.]+)", value) if target.group(1) else None
        found = found or re.match(r"([\d.]+)", value)
        if found is None:
            return "no figure"
        figure = float(found.group(1))
        met.append(figure <= limit if target.group(2) == "≤" else figure >= limit)
    if all(met):
        return f"met in {len(met)}/{len(met)}"
    return "missed in run " + ", ".join(str(k + 1) for k, ok in enumerate(met) if not ok)


def report(runs: Sequence[dict[str, str]]) -> list[str]:
    """One row per figure: each run's value (once when every run agrees), and the target."""
    names = " | ".join(f"run {k}" for k in range(1, len(runs) + 1))
    lines = [f"| measurement | {names} | target |", "| --- |" + " --- |" * (len(runs) + 1)]
    for name in runs[0]:
        values = [r.get(name, "–") for r in runs]
        check = verdict(name, values)
        if len(set(values)) == 1:
            same = f"{values[0]} (same in all {len(runs)} runs) |" + " |" * (len(runs) - 1)
            lines.append(f"| {name} | {same} {check} |")
        else:
            lines.append(f"| {name} | " + " | ".join(values) + f" | {check} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two corpus sessions, fewer scripts")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write the RESULTS.md section")
    args = parser.parse_args(argv)
    files = corpus_files(args.quick)
    corpus = corpus_scripts(args.quick)
    if not corpus:
        print(f"corpus absent ({extractive_bench.CORPUS}): corpus rows skipped")
    notebooks = notebook_scripts(NOTEBOOK_SEEDS[:2] if args.quick else NOTEBOOK_SEEDS)
    meter = TokenMeter()
    seeds = SIZED_SEEDS[:2] if args.quick else SIZED_SEEDS
    sized = [
        Script(ns.name, SYSTEM, [RUN_CELL_TOOL], ns.turns, ns.facts)
        for ns in (sized_session(s, SIZED_TURNS, SIZED_TOKENS, meter.count_text) for s in seeds)
    ]
    tokenize = RequestTokens(tiktoken.get_encoding(meter.effective_encoding).encode_ordinary)
    min_tokens = CompactionConfig().turn_min_tokens
    machine = machine_note_list()
    runs = []
    for k in range(max(1, args.runs)):
        began = time.perf_counter()
        runs.append(run_once(files, corpus, notebooks, sized, tokenize, min_tokens))
        print(f"run {k + 1}: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    machine.append(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    lines = report(runs)
    print(f"Machine: {join_notes(machine)}. Package at: `{package_commit()}`.\n")
    print("\n".join(lines))
    if args.record:
        record(lines, machine, (len(corpus), len(notebooks), len(sized)))
    return 0


def tree_note() -> str:
    """Says so when the package's files differ from that commit (the code measured is the
    tree as it was when the run began)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "dashr_ext"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return " plus uncommitted changes to dashr_ext/ (the tree as the run began)" if out else ""


def record(lines: Sequence[str], machine: Sequence[str], counts: tuple[int, int, int]) -> None:
    corpus, notebooks, sized = counts
    min_tokens = CompactionConfig().turn_min_tokens
    body = [
        f"Machine: {join_notes(machine)} (2 CPUs, shared with other work: timings are noisy). "
        f"Package at: `{package_commit()}`{tree_note()}.",
        "",
        f"`python bench/bench_turn_memory.py --record`: {corpus} corpus sessions and {notebooks} "
        f"scripted notebook sessions of {NOTEBOOK_TURNS} turns, each replayed into a real "
        "`Dashr` (file, fsync) as consecutive turns, turn memory off and on, "
        f"`recency_window_tokens={WINDOW}, retain_tokens={RETAIN}`, extractive summarizer, "
        f"`turn_min_tokens={min_tokens}`; `request_messages()` before each assistant message, "
        "`end_turn()` + `wait_for_turns()` after each turn. Job time over "
        f"{sized} scripted sessions of {SIZED_TURNS} turns of ~{SIZED_TOKENS:,} tokens and the "
        "corpus turns of 15k-30k tokens, one job per turn (no best-of). Three runs in one "
        "process; a value shown once is the same in every run. Facts: planted ones in the "
        "notebook sessions, in the corpus those `bench_turn_extractive.facts_of` reads from the "
        "turn the job received; checked in the turn's nodes right after its landing.",
        "",
        *lines,
    ]
    record_section(SECTION, "\n".join(body))


if __name__ == "__main__":
    sys.exit(main())
