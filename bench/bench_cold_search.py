"""Cold ``dashr search`` over a large log: the byte scan vs the replay vs ``rg -F -i``.

``python bench/bench_cold_search.py [--log FILE] [--runs 3] [--record]``

Each measurement is a fresh process, as a user running ``dashr search FILE QUERY`` gets:

* **cold**: ``dashr search`` as shipped (the byte scan of :mod:`dashr_ext._recall.cold`);
* **replay**: the same command with the cold path switched off (``Dashr.open`` read-only,
  then ``history_search``: the previous path), in the same run;
* **rg**: ``rg -F -i -c QUERY FILE`` on the same file, the floor a byte scan can reach
  (skipped when ``rg`` is absent);
* **first search**: ``Dashr.open(read_only=True)`` and its first ``history_search`` (the
  same scan, with the events taken from the replay): its time, and its peak RSS above the
  peak after the open (the scan's own memory; the whole file would be ~100 MiB).

Wall time includes interpreter start and imports; peak RSS is the child's ``VmHWM`` (on
Linux; else ``ru_maxrss``). The two ``dashr`` outputs must be identical, and the first
search's text must be theirs (checked every run). Queries: a rare word, a common one, a
phrase with digits, a non-ASCII word, a word spelt with a folding character (``ß`` reads
``ss``) and one without ASCII letters (absent from the synthetic log). Without ``--log`` a
log is built with ``bench/scale_log.py`` into a temp dir. ``--record`` rewrites the "Cold
search" section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_common import (  # noqa: E402
    RESULTS,
    join_notes,
    machine_note_list,
    package_commit,
    record_section,
    table_lines,
)

SECTION = "## Cold search (bench/bench_cold_search.py)"
QUERIES = (
    ("rare", "xyzzy plugh"),
    ("common", "scheduler"),
    ("digits", "trace id 00000042"),
    ("non-ASCII", "Überprüfung"),
    ("folding", "straße"),
    ("no ASCII", "Привет"),
    ("accent only", "é"),
    ("operator", "=="),
)
PEAK = """
def peak_kib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""
CHILD = (
    PEAK
    + """
import sys
from dashr_ext._recall import cold
cold.ENABLED = sys.argv[1] == "cold"
from dashr_ext._cli import main
code = main(["search", sys.argv[2], sys.argv[3]])
sys.stdout.flush()
print(peak_kib(), file=sys.stderr)
sys.exit(code)
"""
)
FIRST = (
    PEAK
    + """
import sys, time
from pathlib import Path
from dashr_ext import Dashr
with Dashr.open(Path(sys.argv[1]), read_only=True) as d:
    opened = peak_kib()
    start = time.perf_counter()
    result = d.history_search(sys.argv[2])
    seconds = time.perf_counter() - start
    assert d.recall._search.count == 0, "the first search built the index"
print(result)
print(seconds, opened, peak_kib(), file=sys.stderr)
"""
)


def dashr_search(mode: str, log: Path, query: str) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one ``dashr search`` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(log), query],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    wall = time.perf_counter() - start
    rss_kb = int(done.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024, done.stdout


def first_search(log: Path, query: str) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB above the peak after the open, stdout) of a read-only
    session's first ``history_search``, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", FIRST, str(log), query],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    seconds, opened, peak = done.stderr.strip().splitlines()[-1].split()
    return float(seconds), (int(peak) - int(opened)) / 1024, done.stdout


def rg(log: Path, query: str) -> float | None:
    exe = shutil.which("rg")
    if exe is None:
        return None
    start = time.perf_counter()
    subprocess.run([exe, "-F", "-i", "-c", query, str(log)], capture_output=True, check=False)
    return time.perf_counter() - start


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(values), max(values)
    return (
        fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"
    )


def build_log(tmp: Path) -> Path:
    out = tmp / "log100.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale_log.py"), "--out", str(out)], check=True
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="session log (default: build a 100 MB one)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log if args.log is not None else build_log(Path(tmp))
        size_mb = log.stat().st_size / 1e6
        notes = machine_note_list("load average at start")
        per: dict[str, dict[str, list[float]]] = {
            name: {
                k: []
                for k in ("cold", "replay", "rg", "cold_rss", "replay_rss", "first", "first_rss")
            }
            for name, _ in QUERIES
        }
        for run in range(args.runs):
            for name, query in QUERIES:
                c_wall, c_rss, c_out = dashr_search("cold", log, query)
                r_wall, r_rss, r_out = dashr_search("replay", log, query)
                if c_out != r_out:
                    raise SystemExit(f"run {run + 1}, {name}: cold and replay outputs differ")
                f_time, f_rss, f_out = first_search(log, query)
                if f_out != r_out:
                    raise SystemExit(f"run {run + 1}, {name}: the first search's text differs")
                g = rg(log, query)
                row = per[name]
                row["cold"].append(c_wall)
                row["replay"].append(r_wall)
                row["cold_rss"].append(c_rss)
                row["replay_rss"].append(r_rss)
                row["first"].append(f_time)
                row["first_rss"].append(f_rss)
                if g is not None:
                    row["rg"].append(g)
                rg_text = f", rg {g * 1000:.0f} ms" if g is not None else ""
                print(
                    f"run {run + 1} {name:9} cold {c_wall:.2f} s ({c_rss:.0f} MiB), "
                    f"replay {r_wall:.2f} s ({r_rss:.0f} MiB){rg_text}; first search "
                    f"{f_time:.2f} s (+{f_rss:.0f} MiB)",
                    flush=True,
                )
        notes.append(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: list[tuple[str, str]] = []
    for name, query in QUERIES:
        r = per[name]
        rows.append((f'{name} "{query}": cold wall', f"{spread(r['cold'])} s"))
        rows.append((f"{name}: replay wall (previous path)", f"{spread(r['replay'])} s"))
        rows.append(
            (
                f"{name}: replay / cold",
                spread([a / b for a, b in zip(r["replay"], r["cold"], strict=True)], "{:.1f}×"),
            )
        )
        if r["rg"]:
            rows.append(
                (f"{name}: rg -F -i wall", f"{spread([x * 1000 for x in r['rg']], '{:.0f}')} ms")
            )
            rows.append(
                (
                    f"{name}: cold / rg",
                    spread([a / b for a, b in zip(r["cold"], r["rg"], strict=True)], "{:.0f}×"),
                )
            )
        rows.append(
            (
                f"{name}: peak RSS cold / replay",
                f"{spread(r['cold_rss'], '{:.0f}')} / {spread(r['replay_rss'], '{:.0f}')} MiB",
            )
        )
        rows.append((f"{name}: first search of a read-only session", f"{spread(r['first'])} s"))
        rows.append(
            (
                f"{name}: first search, peak RSS above the opened session",
                f"+{spread(r['first_rss'], '{:.0f}')} MiB",
            )
        )
    print()
    print("\n".join(table_lines(rows)))
    if args.record:
        body = [
            f"`python bench/bench_cold_search.py --log LOG --runs {args.runs} --record` on a "
            f"{size_mb:.0f} MB log ({log.name}); min–max of {args.runs} runs, every figure a "
            "fresh process (interpreter start and imports included); the cold and replayed "
            "outputs, and the first search's text, were identical in every run. Peak RSS is "
            "VmHWM.",
            "",
            f"Machine: {join_notes(notes)}. Package: {package_commit()}.",
            "",
            *table_lines(rows),
        ]
        record_section(SECTION, "\n".join(body))
        print(f"\nrecorded in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
