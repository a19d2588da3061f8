"""The extractive turn compressor on the corpus: tokens after/before, facts kept, job time.

    python bench/bench_turn_extractive.py [--quick] [--min-tokens 2000] [--repeat 3]

Corpus: every session of ``shared/corpus`` beside the repository (read by path; skipped when
absent); ``--quick`` takes the two smallest sessions. Each session is replayed into one
in-memory session as consecutive turns, a turn being a user message up to the next user
message (the system message is left out; explicit turn markers, so every turn is completed).
Every turn holding an assistant message is read (``turn_nodes`` with the session's
``TokenMeter``) and compressed (``compress_turn`` with the meter's count); a turn with
nothing to gain counts its tokens unchanged.

Reported, for all completed turns and for those of at least ``--min-tokens`` tokens (the
eligibility floor of ``turn_min_tokens``): turns, nodes and tokens before and after, and
tokens after / before (target <= 0.35); the share of facts of the original turn found
verbatim in the compressed one: the final answer (the turn's last assistant text), each
error line of a failed tool result (the summarizer's ``error_lines``), each path a tool
call names (the file-operation extractor) and each command run (its one-line label), over
the compressed turns (a turn left as it is keeps them all);
and the job time of one turn (read + compress, the best of ``--repeat`` runs), p50/p95/max,
for all turns and for turns of 10k tokens or more (target p95 <= 100 ms). Prints a
Markdown table; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import machine_notes, package_commit, table_lines  # noqa: E402

from dashr_ext._fileops import file_ops_for_call  # noqa: E402
from dashr_ext._jsontext import arguments_object  # noqa: E402
from dashr_ext._meter import TokenMeter  # noqa: E402
from dashr_ext._session import Session  # noqa: E402
from dashr_ext._summarizers.extractive.text import (  # noqa: E402
    command_label,
    error_lines,
    exit_status,
)
from dashr_ext._turnmemory import TurnNode, turn_nodes  # noqa: E402
from dashr_ext._turnmemory.extractive import compress_turn  # noqa: E402
from dashr_ext._turnmemory.extractive_work import COMMAND_CHARS, final_text  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
QUICK_SESSIONS = 2
LARGE_TURN_TOKENS = 10_000


@dataclass
class Totals:
    turns: int = 0
    compressed: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    facts: dict[str, list[int]] = field(default_factory=dict)
    """kind -> [kept, total]."""
    times: list[float] = field(default_factory=list)
    large_times: list[float] = field(default_factory=list)

    def fact(self, kind: str, kept: bool) -> None:
        pair = self.facts.setdefault(kind, [0, 0])
        pair[0] += int(kept)
        pair[1] += 1


def corpus_files(quick: bool) -> list[Path]:
    files = sorted(CORPUS.glob("*/*.json"))
    if quick:
        files = sorted(sorted(files, key=lambda p: p.stat().st_size)[:QUICK_SESSIONS])
    return files


def turns_of(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The messages as turns: each user message up to the next one."""
    out: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "system":
            continue
        if message.get("role") == "user" or not out:
            out.append([])
        out[-1].append(message)
    return out


def facts_of(nodes: Sequence[TurnNode]) -> dict[str, set[str]]:
    """The planted-style facts of a turn: final answer, error lines, paths, commands."""
    found: dict[str, set[str]] = {"final answer": set(), "error line": set(), "path": set()}
    found["command"] = set()
    answer = next((final_text(n) for n in reversed(nodes) if final_text(n)), "")
    if answer and any(n.role == "assistant" and final_text(n) == answer for n in nodes):
        found["final answer"].add(answer)
    for n in nodes:
        for call in (b for b in n.content if hasattr(b, "arguments")):
            name, arguments = call.name, call.arguments  # type: ignore[attr-defined]
            for op in file_ops_for_call(name, arguments):
                found["path"].add(op["path"])
            args = arguments_object(arguments) or {}
            command = next(
                (v for k in ("command", "cmd", "code") if isinstance(v := args.get(k), str)), None
            )
            if command and command.strip() and "path" not in args:
                found["command"].add(command_label(command, COMMAND_CHARS))
        if n.role == "tool":
            text = "\n".join(getattr(b, "text", "") for b in n.content)
            status = exit_status(text, n.is_error)
            if status not in (0, None) or n.is_error or "Traceback" in text or "FAILED" in text:
                found["error line"].update(error_lines(text))
    return found


def run_once(files: Sequence[Path], min_tokens: int, repeat: int) -> dict[str, Totals]:
    buckets = {"all completed turns": Totals(), f"turns >= {min_tokens:,} tokens": Totals()}
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        session = Session.create(in_memory=True)
        turns = turns_of(data["messages"])
        for turn in turns:
            session.begin_turn()
            session.record_openai(turn)
            session.end_turn()
        for index, turn in enumerate(turns, start=1):
            if not any(m.get("role") == "assistant" for m in turn):
                continue
            best = float("inf")
            for _ in range(repeat):
                meter = TokenMeter()
                start = time.perf_counter()
                nodes = turn_nodes(session, index, meter=meter)
                result = compress_turn(nodes, count_tokens=meter.count_text)
                best = min(best, time.perf_counter() - start)
            before = sum(n.tokens or 0 for n in nodes)
            after = result.tokens_after if result is not None else before
            # A turn left as it is keeps every fact: only compressed turns are checked.
            facts = facts_of(nodes) if result is not None else {}
            texts = "\n".join(n.text for n in result.editor.nodes) if result else ""
            for name, totals in buckets.items():
                if name != "all completed turns" and before < min_tokens:
                    continue
                totals.turns += 1
                totals.compressed += result is not None
                totals.nodes_before += len(nodes)
                totals.nodes_after += len(result.editor.nodes) if result else len(nodes)
                totals.tokens_before += before
                totals.tokens_after += after
                for kind, values in facts.items():
                    for value in sorted(values):
                        totals.fact(kind, value in texts)
                totals.times.append(best)
                if before >= LARGE_TURN_TOKENS:
                    totals.large_times.append(best)
    return buckets


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


def _times(values: Sequence[float]) -> str:
    if not values:
        return "–"
    return (
        f"p50 {statistics.median(values) * 1e3:.1f} ms, p95 {_p(values, 0.95) * 1e3:.1f} ms, "
        f"max {max(values) * 1e3:.1f} ms ({len(values)} turns)"
    )


def report(buckets: dict[str, Totals]) -> list[str]:
    lines = []
    for name, t in buckets.items():
        ratio = t.tokens_after / t.tokens_before if t.tokens_before else 1.0
        rows = [
            ("turns (compressed / nothing to gain)", f"{t.compressed} / {t.turns - t.compressed}"),
            ("nodes before → after", f"{t.nodes_before:,} → {t.nodes_after:,}"),
            ("tokens before → after", f"{t.tokens_before:,} → {t.tokens_after:,}"),
            (
                "tokens after / before (target ≤ 0.35)",
                f"{ratio:.3f} ({'met' if ratio <= 0.35 else 'MISSED'})",
            ),
        ]
        kept = total = 0
        for kind, (k, n) in t.facts.items():
            rows.append((f"{kind}s kept verbatim", f"{k}/{n} ({k / n:.1%})" if n else "–"))
            kept, total = kept + k, total + n
        if total:
            rows.append(("all facts kept (target ≥ 95%)", f"{kept}/{total} ({kept / total:.1%})"))
        rows.append(("job time, read + compress", _times(t.times)))
        large = _times(t.large_times)
        rows.append((f"job time, turns ≥ {LARGE_TURN_TOKENS:,} tokens (p95 ≤ 100 ms)", large))
        lines += [f"### {name}", "", *table_lines(rows), ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the two smallest sessions")
    parser.add_argument("--min-tokens", type=int, default=2_000, help="eligibility floor")
    parser.add_argument("--repeat", type=int, default=3, help="runs per turn (best is kept)")
    args = parser.parse_args(argv)
    files = corpus_files(args.quick)
    if not files:
        print(f"corpus absent ({CORPUS}): skipped")
        return 0
    buckets = run_once(files, args.min_tokens, max(1, args.repeat))
    print(f"Machine: {machine_notes()}. Package at: `{package_commit()}`.")
    print(f"Corpus: {len(files)} sessions, replayed as consecutive turns.\n")
    print("\n".join(report(buckets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
