"""Start-up cost of a fresh ``dashr`` process: what its imports add to a bare interpreter.

``python bench/bench_startup.py [--log FILE] [--baseline DIR] [--n 11] [--runs 3]``

A ``dashr search FILE QUERY`` is a new process per search, so its imports are part of every
search (``rg -F -i`` over a 100 MB file takes ~25 ms). Each case runs ``--n`` times in fresh
processes per run (median per run; the figure is the min - max over ``--runs``), in CPU
time (user + system of the child: steadier than wall time on a shared machine) and wall
time. Cases: a bare ``python -c pass`` (the baseline, measured in the same run); ``import
dashr_ext._cli``; importing exactly the modules a cold search of the log loads;
``dashr --help``; ``dashr search LOG xyzzy`` (a phrase the log does not hold), ``dashr
outline LOG`` and ``dashr read LOG --seq 0``. ``--baseline DIR`` measures a second copy of
the package (DIR holds its ``dashr_ext``, e.g. an export of an older commit) interleaved
with this one. Without ``--log`` the demo session (``dashr demo --out``) is the log.
Nothing is recorded: the figures go to the "Cold search" section of RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import join_notes, machine_note_list, package_commit  # noqa: E402

LOADED = """
import contextlib, io, sys
before = set(sys.modules)
from dashr_ext._cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["search", sys.argv[1], "xyzzy"])
print("\\n".join(m for m in sys.modules if m not in before))
"""
IMPORT = "import importlib\nfor m in {!r}:\n    importlib.import_module(m)\n"


NEUTRAL = tempfile.gettempdir()
"""The children's working directory: ``python -c`` and ``-m`` put it first on the path, so
it must hold no ``dashr_ext`` (PYTHONPATH chooses the tree measured)."""


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: the bytecode is cached
    return env


def _cases(tree: Path, log: Path) -> tuple[int, dict[str, list[str]]]:
    """How many modules a cold search loads, and each case's interpreter arguments."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, str(log)],
        env=_env(tree),
        cwd=NEUTRAL,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = [m for m in done.stdout.split() if m != "__main__"]
    return len(loaded), {
        "bare `python -c pass`": ["-c", "pass"],
        "`import dashr_ext._cli`": ["-c", "import dashr_ext._cli"],
        "the imports of a cold search": ["-c", IMPORT.format(loaded)],
        "`dashr --help`": ["-m", "dashr_ext", "--help"],
        "`dashr search LOG xyzzy`": ["-m", "dashr_ext", "search", str(log), "xyzzy"],
        "`dashr outline LOG`": ["-m", "dashr_ext", "outline", str(log)],
        "`dashr read LOG --seq 0`": ["-m", "dashr_ext", "read", str(log), "--seq", "0"],
    }


def _once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=NEUTRAL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return cpu, wall


def _span(values: list[float]) -> str:
    return f"{min(values):.0f}–{max(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="session file (default: the demo session)")
    parser.add_argument("--baseline", type=Path, help="a directory holding another dashr_ext")
    parser.add_argument("--n", type=int, default=11, help="processes per case per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log
        if log is None:
            log = Path(tmp) / "demo.jsonl"
            subprocess.run(
                [sys.executable, "-m", "dashr_ext", "demo", "--out", str(log)],
                env=_env(ROOT),
                stdout=subprocess.DEVNULL,
                check=True,
            )
        counted = {name: _cases(tree, log) for name, tree in trees.items()}
        cases = {name: argvs for name, (_n, argvs) in counted.items()}
        notes = machine_note_list("load average at start")
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.runs):
            for index in range(len(cases["this tree"])):
                samples: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
                for _ in range(args.n):  # the trees interleaved
                    for name, tree in trees.items():
                        argv = list(cases[name].values())[index]
                        samples[name].append(_once(argv, _env(tree)))
                label = list(cases["this tree"])[index]
                for name, got in samples.items():
                    medians = (
                        statistics.median(c for c, _ in got),
                        statistics.median(w for _, w in got),
                    )
                    figures.setdefault((label, name), []).append(medians)
    loads = ", ".join(f"{name} {n}" for name, (n, _a) in counted.items())
    print(join_notes([*notes, f"package: {package_commit()}", f"log: {log}"]))
    print(f"modules a cold search loads beyond a bare interpreter: {loads}")
    print(f"median of {args.n} fresh processes per run, min–max over {args.runs} runs (ms)")
    for label in cases["this tree"]:
        cells = []
        for name in trees:
            got = figures[label, name]
            cpu, wall = [c for c, _ in got], [w for _, w in got]
            cells.append(f"{name}: CPU {_span(cpu)}, wall {_span(wall)}")
        print(f"| {label} | {' / '.join(cells)} |")


if __name__ == "__main__":
    main()
