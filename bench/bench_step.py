"""Per-step cost benchmark: one agent step and one meter check as the session grows (issue 17).

Run ``python bench/bench_step.py`` from the project root. A step is what the agent loop does
around each model call: ``record_openai`` of an assistant message with a tool call and of
its result, then ``request_messages()`` (the pressure check, then the request's messages).
A meter check is ``measure()`` after one more node. Both are timed at 1k, 10k, 100k and 1M
events (median over many steps), and each figure is given as a ratio to the 1k one
(target: flat within 1.5×). Two session shapes:

* **history** — every event still on the surface (one early checkpoint with its pointer,
  three pruned outputs): the surface grows with the history, the worst case. What still
  grows there is the list ``request_messages()`` returns, one pointer per message; its
  copy is timed apart (``list copy``), and so is the step without it.
* **compacted** — the same history behind one checkpoint, a surface of about 2,000 nodes
  (what a context window holds): a step must cost the same at 1k and at 1M events.

Baseline, same process: the old request path, every message rendered afresh
(``to_openai``), on the same session.

Each shape runs in a fresh process that builds every size, then times them in turns (a step
on each size, then the next step), so the ratios compare figures of one process taken side
by side. ``--runs 3`` (the default) repeats the whole bench three times and gives the
median of the run medians with the spread (min–max). ``--record``
writes the "Per-step cost" section of ``bench/RESULTS.md``. ``--log PATH`` adds a row for a
real compacted log (e.g. the 100k-event log ``bench/scale_log.py`` builds), opened and
stepped the same way.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import join_notes, machine_note_list, record_section  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._events import Event, EventSpec, Replace  # noqa: E402
from dashr_ext._formats.openai import to_openai  # noqa: E402
from dashr_ext._session import Session  # noqa: E402

SECTION = "## Per-step cost (bench/bench_step.py)"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
SERIALIZE_SECTION = (
    "## Per-step cost: the list against the request it carries (bench/bench_step.py)"
)
SERIALIZE_NOTE = (
    "`python bench/bench_step.py --serialize --runs 3`: the history shape (a session that never"
    " compacts), each run a fresh process; `request_messages()` with no new node (the pressure"
    " check and the new list: the part of a step that grows with the surface), best of 7,"
    " against `json.dumps` of the list it returns (what httpx and the OpenAI client do with it"
    " before sending), best of 3; min – max over the runs, ms."
)
SURFACE = 2_000
"""Surface nodes of the compacted shape."""
HUGE = 10**9
T0 = 1_764_460_000_000
BIG = " ".join(f"w{i}" for i in range(1500))
CONFIG = CompactionConfig(
    context_window_tokens=HUGE,
    recency_window_tokens=HUGE // 2,
    retain_tokens=400,
    prune_tool_output_tokens=500,
)
"""A threshold out of reach: the steps measured never compact."""


# --------------------------------------------------------------------------- sessions


def _event(seq: int, kind: str, role: str, text: str, **extra: Any) -> Event:
    source = {"user": {"kind": "user"}, "assistant": {"kind": "model", "model": None}}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}, *extra.pop("calls", [])]
    message = {
        "id": f"m{seq}",
        "role": role,
        "source": source.get(role, {"kind": "tool"}),
        "content": blocks,
        **extra,
    }
    return Event(seq, kind, T0 + seq, {"message": message}, "append")


def _steps(count: int) -> tuple[list[Event], list[int]]:
    """About ``count`` events of agent steps; the seqs of the three big outputs near the end."""
    header = {
        "sessionId": f"bench{count}",
        "createdAt": T0,
        "systemPrompt": "You are a careful coding agent.",
        "tools": None,
        "format": "dashr/1",
    }
    events = [Event(0, "session/header", T0, header)]
    last = (count - 4) * 20 // 41 - 2  # about the last step (a task takes one event in 41)
    big = {last - 60, last - 50, last - 40}
    starts = []
    step = 0
    while len(events) < count - 3:
        seq = len(events)
        if step % 20 == 0:
            events.append(_event(seq, "user/message", "user", f"Task {step}: fix the retry tests"))
            seq += 1
        call = {"type": "tool-call", "id": f"t{step}", "name": "bash", "arguments": '{"c":1}'}
        events.append(_event(seq, "assistant/message", "assistant", f"step {step}", calls=[call]))
        output = f"output of step {step}\n" + (BIG if step in big else "2 passed")
        if step in big:
            starts.append(seq)
        events.append(
            _event(
                seq + 1,
                "tool/result",
                "tool",
                output,
                toolCallId=f"t{step}",
                toolName="bash",
                isError=False,
            )
        )
        step += 1
    return events, [starts[0], starts[-1] + 1]


def _checkpoint(session: Session, a: int, b: int) -> None:
    """One checkpoint over surface positions ``a..b`` (a pass as the log records it)."""
    surface = session.surface
    shadowed = list(surface[a : b + 1])
    n = len(session)
    checkpoint = f"c{n + 1}"
    summary = {
        "compactionId": f"p{n}",
        "checkpoint": checkpoint,
        "trigger": "manual",
        "engine": "summary",
        "summary": "- The retry tests: steps so far.",
        "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
        "shadowedSeqs": shadowed,
        "shadowedTokenCount": 20 * len(shadowed),
        "summarizer": {"kind": "bench", "model": None},
        "archive": {},
    }
    node = {
        "role": "user",
        "source": {"kind": "compact-checkpoint", "checkpoint": checkpoint, "compactionId": f"p{n}"},
        "content": [{"type": "text", "text": "- The retry tests: steps so far."}],
    }
    start = {"compactionId": f"p{n}", "trigger": "manual", "engine": "summary"}
    session.append(
        [
            EventSpec("compaction/start", start),
            EventSpec("compaction/summary", summary),
            EventSpec(
                "user/message",
                {"message": node},
                Replace(shadowed[0], shadowed[-1]),
                (*shadowed, n, n + 1),
            ),
            EventSpec("compaction/end", {"compactionId": f"p{n}"}),
        ]
    )


def build(count: int, shape: str) -> Dashr:
    events, (first_big, last_big) = _steps(count)
    session = Session(events)
    # history: the first 20 nodes; compacted: all but the last SURFACE nodes (ends balanced:
    # a checkpoint ends on a tool result, so the next node is an assistant or a task)
    end = 20 if shape == "history" else max(20, len(session.surface) - SURFACE)
    surface = session.surface
    while session.event(surface[end]).type != "tool/result":
        end += 1
    _checkpoint(session, 0, end)
    d = Dashr(session, config=CONFIG, summarizer="extractive")
    pruned = d.prune(start_seq=first_big, end_seq=last_big)
    assert pruned is not None and len(pruned.pruned) == 3, pruned
    d.request_messages()  # the pointer; every cache warm
    return d


# --------------------------------------------------------------------------- timing


class Stepper:
    def __init__(self, d: Dashr) -> None:
        self.d = d
        self.calls = 0

    def record(self) -> None:
        self.calls += 1
        call = f"b{self.calls}"
        fn = {"name": "bash", "arguments": "{}"}
        self.d.record_openai(
            [
                {
                    "role": "assistant",
                    "content": "go",
                    "tool_calls": [{"id": call, "function": fn}],
                },
                {"role": "tool", "tool_call_id": call, "content": "ok"},
            ]
        )


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Probe:
    """The timed calls on one session; each returns its time in seconds."""

    def __init__(self, d: Dashr) -> None:
        self.d = d
        self.stepper = Stepper(d)
        self.kept: list[Any] = []  # the previous request lives until the next, as in a loop

    def step(self) -> float:
        self.stepper.record()
        return timed(lambda: self.kept.__setitem__(slice(None), [self.d.request_messages()]))

    def step_total(self) -> float:
        return timed(self.step)

    def no_copy(self) -> float:
        """The step minus the list it returns (what no cache can avoid)."""
        d = self.d

        def run() -> None:
            self.stepper.record()
            d.engine.before_request(d._extra())
            d.session._rendered.sync(d.session._surface, d.session.events)

        return timed(run)

    def copy(self) -> float:
        rendered = self.d.session._rendered.items
        return timed(lambda: self.kept.__setitem__(slice(None), [list(rendered)]))

    def measure(self) -> float:
        self.d.record_openai({"role": "user", "content": "and the next one"})
        return timed(self.d.measure)


class Collections:
    """Cyclic GC collections (count, seconds) while ``on``, through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.on = False
        self.count = 0
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self.on:
            self.count += 1
            self.seconds += time.perf_counter() - self._start


def alone(probes: dict[int, Probe], steps: int) -> dict[int, dict[str, float]]:
    """Each size stepped by itself, as one agent loop steps its session (the other sizes'
    requests dropped): ``steps`` steps, each keeping its request until the next frees it, then
    as many bare copies ``list(items)`` of the rendered messages, each kept until the next.
    The mean of the steps includes the cyclic GC's collections their allocations trigger
    (timed apart too), which a median leaves out."""
    out = {}
    collections = Collections()
    gc.callbacks.append(collections)
    try:
        for n, probe in probes.items():
            for other in probes.values():
                other.kept.clear()
            for _ in range(5):
                probe.step_total()
            collections.count, collections.seconds = 0, 0.0
            collections.on = True
            step_times = [probe.step_total() for _ in range(steps)]
            collections.on = False
            probe.kept.clear()
            for _ in range(3):
                probe.copy()
            copy_times = [probe.copy() for _ in range(steps)]
            probe.kept.clear()
            out[n] = {
                "alone": statistics.median(step_times) * 1e3,
                "alone_mean": statistics.mean(step_times) * 1e3,
                "alone_copy": statistics.median(copy_times) * 1e3,
                "gc": collections.seconds / steps * 1e3,
                "collections": collections.count,
            }
    finally:
        gc.callbacks.remove(collections)
    return out


def measure_all(ds: dict[int, Dashr], steps: int) -> dict[int, dict[str, float]]:
    """Medians in ms per size; the sizes take turns, so the machine's noise hits them alike."""
    probes = {n: Probe(d) for n, d in ds.items()}
    kinds = ("step_total", "no_copy", "copy", "measure")
    samples: dict[int, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in ds}
    for _ in range(10):  # warm-up
        for probe in probes.values():
            probe.step_total()
            probe.measure()
    for kind in kinds:
        for _ in range(steps):
            for n, probe in probes.items():
                samples[n][kind].append(getattr(probe, kind)())
    by_itself = alone(probes, steps)
    out = {}
    for n, d in ds.items():
        reps = 3 if len(d.session.surface) >= 500_000 else 7
        old = [timed(lambda d=d: to_openai(d.session)) for _ in range(reps)]
        assert d.request_messages() == to_openai(d.session)
        out[n] = {
            "surface": len(d.session.surface),
            "events": len(d.session),
            "step": statistics.median(samples[n]["step_total"]) * 1e3,
            "no_copy": statistics.median(samples[n]["no_copy"]) * 1e3,
            "copy": statistics.median(samples[n]["copy"]) * 1e3,
            "measure": statistics.median(samples[n]["measure"]) * 1e3,
            "old": statistics.median(old) * 1e3,
            **by_itself[n],
        }
    return out


def run_shape(shape: str, sizes: list[int], steps: int) -> dict[int, dict[str, float]]:
    return measure_all({n: build(n, shape) for n in sizes}, steps)


def run_log(path: Path, steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_step") as tmp:
        copy = Path(tmp) / "log.jsonl"
        copy.write_bytes(path.read_bytes())  # never write into the given log
        d = Dashr.open(copy, config=CONFIG, summarizer="extractive", durability="flush")
        d.request_messages()
        out = measure_all({0: d}, steps)[0]
        d.close()
    return out


# --------------------------------------------------------------------------- report


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f}–{max(values):.3f})"


def ratio_spread(values: list[float], base: list[float]) -> str:
    ratios = [v / b for v, b in zip(values, base, strict=True)]
    return f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"


def run_serialize(sizes: list[int]) -> dict[int, dict[str, float]]:
    """For each size of the history shape: ``request_messages()`` (no new node: the pressure
    check and the list) against ``json.dumps`` of the list it returns, what an HTTP client
    does with it (httpx and the OpenAI client serialise with ``json``). Best of runs, ms."""
    out: dict[int, dict[str, float]] = {}
    for n in sizes:
        d = build(n, "history")
        messages = d.request_messages()
        gc.collect()
        request = min(timed(d.request_messages) for _ in range(7)) * 1000
        dumps = min(timed(partial(json.dumps, messages)) for _ in range(3)) * 1000
        out[n] = {"surface": len(messages), "request": request, "dumps": dumps}
        del d, messages
        gc.collect()
    return out


def serialize_report(runs: list[dict[str, dict[str, float]]], sizes: list[int]) -> list[str]:
    lines = [
        "| events | surface | `request_messages()` | `json.dumps` of its list | request / dumps |",
        "|---|---|---|---|---|",
    ]
    for n in sizes:
        rs = [r[str(n)] for r in runs]
        shares = [r["request"] / r["dumps"] for r in rs]
        lines.append(
            f"| {n:,} | {rs[0]['surface']:,.0f} | {spread([r['request'] for r in rs])} "  # ms
            f"| {spread([r['dumps'] for r in rs])} "
            f"| {min(shares) * 100:.1f} % – {max(shares) * 100:.1f} % |"
        )
    return lines


def child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _columns(
    runs: dict[tuple[str, int], list[dict[str, float]]], sizes: list[int]
) -> Iterator[tuple[str, int, dict[str, list[float]], dict[str, list[float]]]]:
    """Each shape and size measured, with its figures by column and the first size's."""
    for shape in ("history", "compacted"):
        base = runs.get((shape, sizes[0]))
        for n in sizes:
            rs = runs.get((shape, n))
            if rs and base:
                yield (
                    shape,
                    n,
                    {k: [r[k] for r in rs] for k in rs[0]},
                    {k: [r[k] for r in base] for k in base[0]},
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--log", type=Path, help="a real session log to step as well")
    parser.add_argument("--record", action="store_true")
    parser.add_argument(
        "--serialize",
        action="store_true",
        help="time request_messages() against json.dumps of its list (history shape) instead",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, what, steps = args.child
        if kind == "log":
            print(json.dumps(run_log(Path(what), int(steps))))
        elif kind == "serialize":
            print(json.dumps(run_serialize([int(x) for x in what.split(",")])))
        else:
            sizes = [int(x) for x in what.split(",")]
            print(json.dumps(run_shape(kind, sizes, int(steps))))
        return
    sizes = [int(x) for x in args.sizes.split(",")]
    notes = machine_note_list()
    if args.serialize:
        measured = [child(["serialize", args.sizes, "0"]) for _ in range(args.runs)]
        lines = serialize_report(measured, sizes)
        print("\n".join(lines))
        if args.record:
            body = "\n".join([f"Machine: {join_notes(notes)}.", "", SERIALIZE_NOTE, "", *lines])
            record_section(SERIALIZE_SECTION, body)
        return
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for r in range(args.runs):
        for shape in ("history", "compacted"):
            res_by_size = child([shape, args.sizes, str(args.steps)])
            for key, res in res_by_size.items():
                n = int(key)
                runs.setdefault((shape, n), []).append(res)
                print(
                    f"run {r + 1} {shape:9} {n:>9,} events: surface {res['surface']:,.0f}, "
                    f"step {res['step']:.3f} ms (without the list {res['no_copy']:.3f}, list copy "
                    f"{res['copy']:.3f}), measure {res['measure']:.3f} ms, old request "
                    f"{res['old']:.1f} ms; alone: step {res['alone']:.3f} (copy "
                    f"{res['alone_copy']:.3f}), mean {res['alone_mean']:.3f}, GC "
                    f"{res['gc']:.3f} ms/step ({res['collections']:.0f} collections)",
                    flush=True,
                )
        if args.log:
            res = child(["log", str(args.log), str(args.steps)])
            runs.setdefault(("log", 0), []).append(res)
            print(f"run {r + 1} log: {res}", flush=True)
    lines = report(runs, sizes, args)
    print("\n".join(lines))
    if args.record:
        body = "\n".join([f"Machine: {join_notes(notes)}.", "", *lines])
        record_section(SECTION, body)


def report(
    runs: dict[tuple[str, int], list[dict[str, float]]], sizes: list[int], args: Any
) -> list[str]:
    cmd = f"python bench/bench_step.py --runs {args.runs} --steps {args.steps}"
    if args.log:
        cmd += f" --log {args.log}"
    lines = [
        f"`{cmd}`: {args.runs} runs, each shape in a fresh process timing its sizes in turns; "
        "median of the run medians (min–max over the runs), ms per call; ratios to the 1k "
        "figure of the same process. Sessions grow by about 1,000 nodes while timed (the "
        "surface column is the final size). A step "
        "is `record_openai` of an assistant tool call and its result, then `request_messages()`; "
        'measure is `measure()` after one more node. "old request" renders every message '
        "afresh (`to_openai`, the code path before this change) on the same session.",
        "",
        "| shape | events | surface | step | ratio | step without the list | ratio | list copy "
        "| measure | ratio | old request | old / step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for shape, n, col, bcol in _columns(runs, sizes):
        old_ratio = [o / s for o, s in zip(col["old"], col["step"], strict=True)]
        lines.append(
            f"| {shape} | {n:,} | {statistics.median(col['surface']):,.0f} "
            f"| {spread(col['step'])} | {ratio_spread(col['step'], bcol['step'])} "
            f"| {spread(col['no_copy'])} | {ratio_spread(col['no_copy'], bcol['no_copy'])} "
            f"| {spread(col['copy'])} "
            f"| {spread(col['measure'])} | {ratio_spread(col['measure'], bcol['measure'])} "
            f"| {spread(col['old'])} | {statistics.median(old_ratio):.0f}× |"
        )
        for key, label in (
            ("step", "step"),
            ("no_copy", "step without the list"),
            ("measure", "measure"),
        ):
            if n == sizes[0]:
                continue
            worst = max(v / b for v, b in zip(col[key], bcol[key], strict=True))
            verdicts.append((shape, n, label, worst))
    if ("log", 0) in runs:
        rs = runs[("log", 0)]
        col = {k: [r[k] for r in rs] for k in rs[0]}
        lines.append(
            f"| log ({args.log.name}) | {statistics.median(col['events']):,.0f} "
            f"| {statistics.median(col['surface']):,.0f} | {spread(col['step'])} | – "
            f"| {spread(col['no_copy'])} | – | {spread(col['copy'])} | {spread(col['measure'])} "
            f"| – | {spread(col['old'])} | – |"
        )
    lines += alone_report(runs, sizes, args.steps)
    lines.append("")
    lines.append("Target, flat within 1.5× of the 1k figure (worst run; the first table):")
    lines.append("")
    for shape, n, label, worst in verdicts:
        mark = "met" if worst <= 1.5 else "MISSED"
        lines.append(f"* {shape}, {label}, {n:,} events: {worst:.2f}× — {mark}")
    return lines


def alone_report(
    runs: dict[tuple[str, int], list[dict[str, float]]], sizes: list[int], steps: int
) -> list[str]:
    """The second table: each size stepped by itself (see :func:`alone`)."""
    lines = [
        "",
        f"Each size stepped by itself, as one agent loop steps its session ({steps} steps, "
        "the other sizes' requests dropped), then as many bare copies: the step's median; the "
        "step minus the copy (per run, medians); the bare copy `list(items)` of the n rendered "
        "messages, each kept until the next frees it as a step frees the previous request (the "
        "one cost the contract, a new list each call, makes grow); its share of the step's "
        "growth over the 1k figure; the mean step, which includes the cyclic GC's collections "
        "the steps trigger, and the time in those collections per step (collections per run).",
        "",
        "| shape | events | step alone | ratio | step − copy | ratio | list copy | copy's share "
        "of the growth | mean step | ratio | GC ms/step (collections) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, n, col, bcol in _columns(runs, sizes):
        rest = [a - c for a, c in zip(col["alone"], col["alone_copy"], strict=True)]
        brest = [a - c for a, c in zip(bcol["alone"], bcol["alone_copy"], strict=True)]
        grow = [a - b for a, b in zip(col["alone"], bcol["alone"], strict=True)]
        copy_grow = [a - b for a, b in zip(col["alone_copy"], bcol["alone_copy"], strict=True)]
        if n == sizes[0] or min(grow) < 0.5 * statistics.median(bcol["alone"]):
            share = "–"
        else:
            shares = [c / g * 100 for c, g in zip(copy_grow, grow, strict=True)]
            share = f"{statistics.median(shares):.0f}% ({min(shares):.0f}–{max(shares):.0f})"
        lines.append(
            f"| {shape} | {n:,} | {spread(col['alone'])} "
            f"| {ratio_spread(col['alone'], bcol['alone'])} "
            f"| {spread(rest)} | {ratio_spread(rest, brest)} | {spread(col['alone_copy'])} "
            f"| {share} | {spread(col['alone_mean'])} "
            f"| {ratio_spread(col['alone_mean'], bcol['alone_mean'])} "
            f"| {spread(col['gc'])} ({'/'.join(f'{c:.0f}' for c in col['collections'])}) |"
        )
    return lines


if __name__ == "__main__":
    main()
