"""Pruning oversize units on the corpus: the request after compaction, requests over the window.

    python bench/bench_prune.py [--quick] [--runs N] [--record]

Corpus: every session of ``shared/corpus`` beside the repository (skipped when absent);
``--quick`` takes the two smallest sessions and a small concatenation target (the size the
probe test runs). Each part runs with ``prune=False`` and ``prune=True``; on code without
the ``prune`` setting only the first side runs.

1. Concatenation. The sessions are recorded one after another into ONE in-memory session
   with ``Dashr.record_openai``, whole corpus copies first, then session by session until
   the request measures at least ``TARGET_TOKENS``. The first session's system message is
   kept and every later one dropped (a later one would replace the prompt); tool call ids
   get a per-copy prefix (the corpus reuses ids such as ``call_2`` across sessions); the
   header's tools are the union of the sessions' tools by name. Then one ``compact()``
   (summary engine, extractive summarizer, 128k context window): ``measure().total``
   after, the newest unit's tokens after, the passes the call ran (prune and summary), the
   nodes pruned, its wall time. Done twice: in corpus order, and with the session holding
   the largest message moved to the end (so the newest unit is that message).
2. Windows. Every session replayed as an agent would: message by message, and before each
   assistant message ``request_messages()`` (the pressure trigger, so prune and summary
   passes run there) and ``measure()``. Under ``recency_window_tokens`` 20k (retain 4k)
   and 8k (retain 2k), the trigger being the window. A request above the trigger is
   *allowed* when the newest unit (the last of ``session.units()`` that is not the recall
   pointer alone, tokens from the measurement's node sizes) alone is above it; every
   request above is listed with its session and the largest node it carried. The request
   an agent would send after a session's last message (when that is not the assistant's)
   is counted apart, as the closing request.

The largest single message of the corpus is read off the first corpus copy of part 1.
``--runs N`` repeats the whole measurement in N fresh processes (token figures must agree;
times are given as median and range); ``--record`` writes the section of
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import join_notes, machine_note_list, package_commit, record_section  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._meter import Measurement  # noqa: E402
from dashr_ext._payloads import POINTER_SOURCE  # noqa: E402
from dashr_ext._turns import Unit  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
SECTION = "## Pruning (issue: oversize units) (bench/bench_prune.py)"
TARGET_TOKENS = 3_000_000
QUICK_TARGET_TOKENS = 40_000
QUICK_SESSIONS = 2
CONTEXT_WINDOW = 128_000
WINDOWS = ((20_000, 4_000), (8_000, 2_000))
HAS_PRUNE = "prune" in {f.name for f in dataclasses.fields(CompactionConfig)}
"""Whether this code has the ``prune`` setting (the "with pruning" side runs only then)."""


# --------------------------------------------------------------------------- corpus


def corpus_files(quick: bool = False, corpus: Path = CORPUS) -> list[Path]:
    """Every session file, by folder and name; ``quick``: the smallest two."""
    files = sorted(p for p in corpus.glob("*/*.json"))
    if quick:
        files = sorted(sorted(files, key=lambda p: p.stat().st_size)[:QUICK_SESSIONS])
    return files


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def session_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def with_call_prefix(message: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A copy of ``message`` whose tool call ids (and the id a result answers) carry ``prefix``."""
    out = dict(message)
    if out.get("tool_calls"):
        out["tool_calls"] = [{**call, "id": prefix + call["id"]} for call in out["tool_calls"]]
    if out.get("tool_call_id"):
        out["tool_call_id"] = prefix + out["tool_call_id"]
    return out


def union_tools(sessions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The sessions' tool schemas, the first of each function name."""
    seen: dict[str, dict[str, Any]] = {}
    for data in sessions:
        for tool in data.get("tools") or []:
            seen.setdefault(str(tool.get("function", {}).get("name")), tool)
    return list(seen.values())


def config(prune: bool, **changes: Any) -> CompactionConfig:
    """A config with pruning on or off (``prune`` is left out on code without it)."""
    if HAS_PRUNE:
        changes["prune"] = prune
    elif prune:
        raise RuntimeError("this code has no prune setting")
    return CompactionConfig(**changes)


def sides() -> tuple[bool, ...]:
    return (False, True) if HAS_PRUNE else (False,)


def newest_unit(d: Dashr) -> Unit | None:
    """The last unit of the surface that is not only the recall pointer message.

    The pointer (``context/message``, source ``history-access``) is injected after the
    newest unit once a checkpoint exists, so the literal last unit is often the pointer.
    """
    s = d.session
    surface = s.surface
    for unit in reversed(s.units()):
        kinds = {s.event(surface[i]).message.source_kind for i in range(unit.start, unit.end)}
        if kinds != {POINTER_SOURCE}:
            return unit
    return None


def unit_tokens(unit: Unit | None, measured: Measurement) -> int:
    """Node tokens of ``unit`` from the measurement's node sizes (0 for None)."""
    if unit is None:
        return 0
    return sum(tokens for _, tokens in measured.nodes[unit.start : unit.end])


@dataclasses.dataclass
class PassCounts:
    """What the compaction events appended since a point say."""

    prune_passes: int = 0
    summary_passes: int = 0
    failed_passes: int = 0
    pruned_nodes: int = 0
    pruned_roles: dict[str, int] = dataclasses.field(default_factory=dict)
    """Pruned nodes by the role of the original."""
    pruned_tasks: list[str] = dataclasses.field(default_factory=list)
    """Sessions whose first user message (the task) was pruned (given ``session``)."""

    def add(self, d: Dashr, since: int, session: str | None = None) -> None:
        events = d.session.events
        first_user = next(
            (e.seq for e in events if e.is_surface and e.message.role == "user"), None
        )
        for seq in range(since, len(events)):
            event = events[seq]
            if event.type == "compaction/start":
                if event.data.get("trigger") == "prune":
                    self.prune_passes += 1
                else:
                    self.summary_passes += 1
            elif event.type == "compaction/end":
                self.failed_passes += "error" in event.data
                for pruned in event.data.get("pruned") or ():
                    self.pruned_nodes += 1
                    role = d.session.event(pruned["seq"]).message.role
                    self.pruned_roles[role] = self.pruned_roles.get(role, 0) + 1
                    if session is not None and pruned["seq"] == first_user:
                        self.pruned_tasks.append(session)


# --------------------------------------------------------------------------- 1. concatenation


@dataclasses.dataclass
class Largest:
    tokens: int
    session: str
    role: str
    index: int
    """Index of the message in its session file."""


@dataclasses.dataclass
class ConcatResult:
    order: str
    """``"corpus order"``, or the session moved to the end (``"<session> last"``)."""
    prune: bool
    sessions: int
    """Session copies recorded (the corpus has ``corpus_sessions``)."""
    corpus_sessions: int
    messages: int
    tokens_before: int
    total_after: int
    newest_unit_after: int
    passes: PassCounts
    compact_seconds: float
    record_seconds: float
    largest: Largest | None


def concatenation_messages(
    files: Sequence[Path],
) -> Iterator[tuple[int, Path, int, dict[str, Any] | None]]:
    """(copy number, file, message index, message) in recording order, forever.

    A ``None`` message closes a session; the caller stops when its request is big enough.
    """
    copy = 0
    while True:
        for path in files:
            data = load(path)
            for i, message in enumerate(data["messages"]):
                yield copy, path, i, message
            yield copy, path, -1, None
        copy += 1


def concatenate(
    files: Sequence[Path], target_tokens: int, prune: bool, order: str = "corpus order"
) -> ConcatResult:
    """Record the corpus into one session up to ``target_tokens``; one ``compact()``."""
    started = time.perf_counter()
    tools = union_tools([load(p) for p in files])
    cfg = config(prune, context_window_tokens=CONTEXT_WINDOW)
    origin: dict[int, tuple[str, str, int]] = {}  # seq -> (session, role, index): first copy
    sessions = messages = 0
    system_kept = False
    d = Dashr.create(in_memory=True, config=cfg, tools=tools, durability="flush")
    with d:
        for copy, path, index, message in concatenation_messages(files):
            if message is None:
                sessions += 1
                if sessions >= len(files) and d.measure().total >= target_tokens:
                    break
                continue
            if message.get("role") == "system":
                if system_kept:
                    continue
                system_kept = True
            for event in d.record_openai(with_call_prefix(message, f"s{sessions}-")):
                if copy == 0 and event.is_surface:
                    origin[event.seq] = (session_name(path), str(message.get("role")), index)
            messages += 1
        record_seconds = time.perf_counter() - started
        before = d.measure()
        largest = None
        first = [(tokens, seq) for seq, tokens in before.nodes if seq in origin]
        if first:
            tokens, seq = max(first)
            name, role, index = origin[seq]
            largest = Largest(tokens, name, role, index)
        mark = len(d.session)
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d.compact()
        compact_seconds = time.perf_counter() - started
        passes = PassCounts()
        passes.add(d, mark)
        after = d.measure()
        return ConcatResult(
            order=order,
            prune=prune,
            sessions=sessions,
            corpus_sessions=len(files),
            messages=messages,
            tokens_before=before.total,
            total_after=after.total,
            newest_unit_after=unit_tokens(newest_unit(d), after),
            passes=passes,
            compact_seconds=compact_seconds,
            record_seconds=record_seconds,
            largest=largest,
        )


# --------------------------------------------------------------------------- 2. windows


@dataclasses.dataclass
class Over:
    """A request above the trigger."""

    session: str
    at: str
    """``"before message N"`` (N indexes the session file) or ``"closing"``."""
    total: int
    newest_unit_tokens: int
    allowed: bool
    """The newest unit alone is above the trigger."""
    largest_tokens: int
    largest_what: str
    """The largest node of the request: its kind, whether pruned, where it sits."""

    @property
    def closing(self) -> bool:
        return self.at == "closing"


@dataclasses.dataclass
class WindowResult:
    window: int
    retain: int
    prune: bool
    requests: int = 0
    closing_requests: int = 0
    max_total: int = 0
    passes: PassCounts = dataclasses.field(default_factory=PassCounts)
    over: list[Over] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def trigger(self) -> int:
        return self.window

    def above(self, closing: bool = False) -> list[Over]:
        return [o for o in self.over if o.closing == closing]

    def allowed(self, closing: bool = False) -> list[Over]:
        return [o for o in self.above(closing) if o.allowed]

    def unexcused(self) -> list[Over]:
        """Requests above the trigger the newest unit does not explain, closing ones too."""
        return [o for o in self.over if not o.allowed]


def _largest_node(d: Dashr, measured: Measurement, newest: Unit | None) -> tuple[int, str]:
    tokens, position = max((t, i) for i, (_, t) in enumerate(measured.nodes))
    message = d.session.event(measured.nodes[position][0]).message
    what = message.source_kind or message.role
    if message.source.get("pruned"):
        what += " (pruned)"
    if newest is not None and newest.start <= position < newest.end:
        where = "newest unit"
    else:
        where = "tail" if newest is None or position < newest.start else "after the newest unit"
    return tokens, f"{what}, {where}"


def _request(d: Dashr, result: WindowResult, name: str, at: str) -> None:
    """One pressure check and the measurement of the request it leaves."""
    d.request_messages()
    measured = d.measure()
    trigger = d.config.trigger_tokens
    result.max_total = max(result.max_total, measured.total)
    if at == "closing":
        result.closing_requests += 1
    else:
        result.requests += 1
    if measured.total <= trigger:
        return
    unit = newest_unit(d)
    newest = unit_tokens(unit, measured)
    largest, what = _largest_node(d, measured, unit)
    result.over.append(Over(name, at, measured.total, newest, newest > trigger, largest, what))


def replay(path: Path, result: WindowResult) -> None:
    """Replay one session as an agent would, adding its requests to ``result``."""
    data = load(path)
    name = session_name(path)
    cfg = config(
        result.prune,
        recency_window_tokens=result.window,
        retain_tokens=result.retain,
        context_window_tokens=CONTEXT_WINDOW,
    )
    with Dashr.create(in_memory=True, config=cfg, tools=data.get("tools")) as d:
        messages = data["messages"]
        for i, message in enumerate(messages):
            if message.get("role") == "assistant":
                _request(d, result, name, f"before message {i}")
            d.record_openai(message)
        if messages and messages[-1].get("role") != "assistant":
            _request(d, result, name, "closing")
        result.passes.add(d, 0, name)


def windows(files: Sequence[Path], window: int, retain: int, prune: bool) -> WindowResult:
    result = WindowResult(window, retain, prune)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # failed passes are counted from the log
        for path in files:
            replay(path, result)
    result.seconds = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------- a run


@dataclasses.dataclass
class Run:
    concat: list[ConcatResult]
    windows: list[WindowResult]


def warm_up() -> None:
    """Load the tokenizer and the summarizer, so the first side timed pays for neither."""
    with Dashr.create(in_memory=True) as d:
        for i in range(4):
            d.record_openai({"role": "user", "content": f"warm up {i}: run the tests"})
            d.record_openai({"role": "assistant", "content": f"done {i}: 3 passed"})
        d.compact()


def run_once(quick: bool = False, corpus: Path = CORPUS) -> Run | None:
    """Both parts, each side; None when the corpus is absent."""
    files = corpus_files(quick, corpus)
    if not files:
        return None
    target = QUICK_TARGET_TOKENS if quick else TARGET_TOKENS
    warm_up()
    concat = [concatenate(files, target, prune) for prune in sides()]
    largest = concat[0].largest
    if largest is not None and largest.session != session_name(files[-1]):
        # The same corpus ending on the largest message: the request's newest unit is then
        # the oversize message that only pruning can shrink.
        last = [p for p in files if session_name(p) == largest.session]
        order = [p for p in files if session_name(p) != largest.session] + last
        concat += [
            concatenate(order, target, prune, f"{largest.session} last") for prune in sides()
        ]
    results = [
        windows(files, window, retain, prune) for window, retain in WINDOWS for prune in sides()
    ]
    return Run(concat, results)


def run_to_json(run: Run) -> str:
    return json.dumps(dataclasses.asdict(run))


def run_from_json(text: str) -> Run:
    raw = json.loads(text)
    concat = []
    for c in raw["concat"]:
        largest = c.pop("largest")
        largest = Largest(**largest) if largest else None
        concat.append(ConcatResult(**{**c, "passes": PassCounts(**c["passes"])}, largest=largest))
    results = []
    for w in raw["windows"]:
        over = [Over(**o) for o in w.pop("over")]
        results.append(WindowResult(**{**w, "passes": PassCounts(**w["passes"])}, over=over))
    return Run(concat, results)


def token_figures(run: Run) -> str:
    """Everything but the times: the runs must agree on this."""
    raw = dataclasses.asdict(run)
    for c in raw["concat"]:
        c.pop("compact_seconds")
        c.pop("record_seconds")
    for w in raw["windows"]:
        w.pop("seconds")
    return json.dumps(raw, sort_keys=True)


# --------------------------------------------------------------------------- report


def _side(prune: bool) -> str:
    return "on" if prune else "off"


def _seconds(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def _passes(p: PassCounts) -> str:
    text = f"{p.prune_passes} prune + {p.summary_passes} summary"
    return text + (f" ({p.failed_passes} failed)" if p.failed_passes else "")


def _pruned(p: PassCounts) -> str:
    if not p.pruned_nodes:
        return "0"
    roles = ", ".join(f"{role} {n}" for role, n in sorted(p.pruned_roles.items()))
    return f"{p.pruned_nodes} ({roles})"


def concat_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| order | pruning | sessions recorded | messages | request before | after `compact()` "
        "| newest unit after | passes | nodes pruned | `compact()` s | recording s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, c in enumerate(runs[0].concat):
        same = [r.concat[i] for r in runs]
        copies = c.sessions / c.corpus_sessions
        lines.append(
            f"| {c.order} | {_side(c.prune)} | {c.sessions} ({copies:.2f} × "
            f"{c.corpus_sessions}) | {c.messages:,} | {c.tokens_before:,} | {c.total_after:,} | "
            f"{c.newest_unit_after:,} | {_passes(c.passes)} | {_pruned(c.passes)} | "
            f"{_seconds([s.compact_seconds for s in same])} | "
            f"{_seconds([s.record_seconds for s in same])} |"
        )
    return lines


def windows_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| window / retain | pruning | requests | above the trigger | of those, newest unit "
        "alone above (allowed) | not allowed | largest request | closing requests: above "
        "/ allowed | passes | nodes pruned | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, w in enumerate(runs[0].windows):
        same = [r.windows[i] for r in runs]
        above, allowed = len(w.above()), len(w.allowed())
        share = above / w.requests if w.requests else 0.0
        lines.append(
            f"| {w.window // 1000}k / {w.retain // 1000}k | {_side(w.prune)} | {w.requests:,} | "
            f"{above} ({share:.2%}) | {allowed} | {above - allowed} | "
            f"{w.max_total:,} ({w.max_total / w.trigger:.2f}×) | "
            f"{w.closing_requests}: {len(w.above(True))} / {len(w.allowed(True))} | "
            f"{_passes(w.passes)} | {_pruned(w.passes)} | "
            f"{_seconds([s.seconds for s in same])} |"
        )
    return lines


def over_lines(run: Run, allowed: bool, limit: int = 40) -> list[str]:
    """The requests above the trigger, allowed ones or the others, per window and side."""
    lines: list[str] = []
    for w in run.windows:
        over = [o for o in w.over if o.allowed == allowed]
        if not over:
            continue
        sessions = sorted({o.session for o in over})
        lines.append(
            f"* {w.window // 1000}k, pruning {_side(w.prune)}: {len(over)} in {', '.join(sessions)}"
        )
        for o in over[:limit]:
            lines.append(
                f"  * {o.session} {o.at}: request {o.total:,}, newest unit "
                f"{o.newest_unit_tokens:,}, largest node {o.largest_tokens:,} ({o.largest_what})"
            )
        if len(over) > limit:
            lines.append(f"  * … {len(over) - limit} more")
    return lines


def largest_line(run: Run) -> str:
    largest = run.concat[0].largest
    if largest is None:
        return "Largest single message: none recorded."
    return (
        f"Largest single message: {largest.tokens:,} tokens, {largest.session} message "
        f"{largest.index} ({largest.role})."
    )


def report(runs: Sequence[Run]) -> list[str]:
    first = runs[0]
    agree = len({token_figures(r) for r in runs}) == 1
    lines = [
        "Concatenation, one `compact()` (summary engine, extractive summarizer, "
        f"{CONTEXT_WINDOW // 1000}k context window):",
        "",
        *concat_table(runs),
        "",
        "Windows (before every assistant message: `request_messages()`, then `measure()`):",
        "",
        *windows_table(runs),
        "",
        largest_line(first),
    ]
    if not HAS_PRUNE:
        lines.append("This code has no `prune` setting: only the side without pruning ran.")
    for w in first.windows:
        if w.passes.pruned_tasks:
            lines.append(
                f"Pruned first user message (the task), {w.window // 1000}k: "
                f"{', '.join(w.passes.pruned_tasks)}."
            )
    lines += ["", "Requests above the trigger not explained by the newest unit:", ""]
    lines += over_lines(first, allowed=False) or ["* none"]
    lines += ["", "Requests above the trigger whose newest unit alone is above it (allowed):", ""]
    lines += over_lines(first, allowed=True) or ["* none"]
    if len(runs) > 1:
        lines += [
            "",
            f"{len(runs)} runs in fresh processes; token figures "
            + ("identical in every run." if agree else "DIFFER between runs (first run shown)."),
        ]
    return lines


def _fresh_run(quick: bool) -> Run:
    command = [sys.executable, str(Path(__file__).resolve()), "--json"]
    if quick:
        command.append("--quick")
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return run_from_json(out.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small sessions (probe)")
    parser.add_argument("--runs", type=int, default=1, help="whole runs, in fresh processes")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md")
    parser.add_argument("--json", action="store_true", help="print one run as JSON")
    args = parser.parse_args(argv)
    if not corpus_files(args.quick):
        print(f"corpus absent ({CORPUS}): skipped")
        return 0
    if args.json:
        run = run_once(args.quick)
        assert run is not None
        print(run_to_json(run))
        return 0
    if args.runs > 1:
        runs = [_fresh_run(args.quick) for _ in range(args.runs)]
    else:
        run = run_once(args.quick)
        assert run is not None
        runs = [run]
    lines = report(runs)
    print("\n".join(lines))
    if args.record:
        target = QUICK_TARGET_TOKENS if args.quick else TARGET_TOKENS
        body = [
            f"Machine: {join_notes(machine_note_list())}. Package at: `{package_commit()}`.",
            "",
            f"Corpus: {runs[0].concat[0].corpus_sessions} sessions. Concatenation: the "
            f"sessions recorded one after another into one in-memory session until the "
            f"request reaches {target:,} tokens (first system message kept, later ones "
            "dropped; tool call ids prefixed per copy; tools the union by name). Windows: "
            "every session replayed, `recency_window_tokens` = the trigger, retain as given; "
            "a request above the trigger is allowed when the newest unit alone is above it. "
            "Closing request: the one after a session's last message when that is not the "
            "assistant's (counted apart). Times: median (min–max) over the runs.",
            "",
            *lines,
        ]
        record_section(SECTION, "\n".join(body))
        print(f"recorded: {SECTION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
