"""Open, replay and memory benchmark: ``Dashr.open`` of a large compacted log (issue 17).

Run ``python bench/bench_open.py [--log PATH]`` from the project root. ``PATH`` is a large
compacted session log (``bench/scale_log.py`` builds one; without ``--log`` a 100 MB,
100k-event log is built into a temporary directory first, which takes about a minute).
Each of ``--runs`` (default 3) runs happens in two fresh processes:

* **timing**: in one process, best of ``--repeat`` of each of: a bare parse of the file
  (read, split into lines, ``json.loads`` each; the same with ``msgspec`` and ``orjson`` when
  importable), ``Store.load()`` with the store's parser (msgspec when importable) and with
  ``json`` only, ``Dashr.open(read_only=True)``, ``Dashr.open`` as a writer (of a copy), and
  ``Session.open(read_only=True)`` of a 100k-event log without compaction (the replay
  figure of ``bench/bench_store.py``, built the same way); appends: encoding the log's
  objects with ``json`` (what the store writes) vs ``msgspec``/``orjson``, and whether their
  bytes are identical;
* **memory**: peak RSS (``VmHWM`` on Linux, else ``ru_maxrss``) after
  ``Dashr.open(read_only=True)`` and two ``history_search`` calls (a read-only session's
  first may scan the file instead; the second builds the search cache), minus the same
  process's peak after its imports, against the logged text: the file's bytes, and the
  characters of its message texts.

Targets: open < 1.5 s and <= 1.3x the bare ``json`` parse; replay of 100k plain events
< 1 s; peak RSS <= 2.5x the logged text. A figure is reported as the min - max of the runs.
``--record`` writes the "Open, replay and memory" section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SECTION = "## Open, replay and memory (bench/bench_open.py)"
QUERY = "café pytest"
NEWLINE = b"\n"


def _peak_mb() -> float:
    """Peak RSS of this process so far, MiB: ``ru_maxrss``, or on Linux ``VmHWM``, which
    unlike ``ru_maxrss`` does not start from the forking parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        del result
        gc.collect()
    return min(times)


def _lines(path: Path) -> list[bytes]:
    raw = path.read_bytes().split(b"\n")
    raw.pop()
    return raw


def _paused(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with the cyclic GC paused, as the store parses (a fair bare baseline)."""

    def run() -> Any:
        gc.disable()
        try:
            return fn()
        finally:
            gc.enable()

    return run


# --------------------------------------------------------------------------- children


def child_timing(log: Path, plain: Path, repeat: int, tmp: Path) -> dict[str, Any]:
    import dashr_ext._jsontext as jsontext
    from dashr_ext import Dashr
    from dashr_ext._session import Session
    from dashr_ext._store import Store

    out: dict[str, Any] = {}
    decode = json.JSONDecoder().decode

    def bare_json() -> list[Any]:
        text = log.read_bytes().decode("utf-8").split("\n")
        text.pop()
        return [decode(line) for line in text]

    out["bare json"] = _best(_paused(bare_json), repeat)
    try:
        import msgspec

        fast = msgspec.json.Decoder().decode
        out["bare msgspec"] = _best(_paused(lambda: [fast(x) for x in _lines(log)]), repeat)
    except ImportError:
        pass
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]

        loads = orjson.loads
        out["bare orjson"] = _best(_paused(lambda: [loads(x) for x in _lines(log)]), repeat)
    except ImportError:
        pass
    store = Store.open(log, read_only=True)
    out["Store.load()"] = _best(store.load, repeat)
    saved = jsontext._FAST_DECODE
    jsontext._FAST_DECODE = None
    out["Store.load() json only"] = _best(store.load, repeat)
    jsontext._FAST_DECODE = saved
    out["parser"] = "msgspec" if saved is not None else "json"

    out["Dashr.open read-only"] = _best(lambda: Dashr.open(log, read_only=True), repeat)
    copy = tmp / "writer.jsonl"
    times = []
    for _ in range(repeat):
        shutil.copyfile(log, copy)
        start = time.perf_counter()
        d = Dashr.open(copy, durability="flush")
        times.append(time.perf_counter() - start)
        d.close()
        del d
        gc.collect()
    copy.unlink()
    out["Dashr.open writer"] = min(times)
    out["replay 100k plain"] = _best(lambda: Session.open(plain, read_only=True), repeat)
    out["plain events"] = plain.read_bytes().count(b"\n")

    objs = [line.obj for line in store.load()[0]]
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    reference = [encoder.encode(o).encode() for o in objs]
    out["encode json"] = _best(lambda: [encoder.encode(o).encode() for o in objs], repeat)
    try:
        import msgspec

        enc = msgspec.json.Encoder().encode
        out["encode msgspec"] = _best(lambda: [enc(o) for o in objs], repeat)
        out["msgspec bytes identical"] = [enc(o) for o in objs] == reference
    except ImportError:
        pass
    try:
        import orjson

        dumps = orjson.dumps
        out["encode orjson"] = _best(lambda: [dumps(o) for o in objs], repeat)
        out["orjson bytes identical"] = [dumps(o) for o in objs] == reference
    except ImportError:
        pass
    return out


def child_memory(log: Path) -> dict[str, Any]:
    from dashr_ext import Dashr
    from dashr_ext._events import texts

    gc.collect()
    base = _peak_mb()
    d = Dashr.open(log, read_only=True)
    after_open = _peak_mb()
    d.history_search(QUERY)  # a read-only session's first search may scan the file instead
    after_first = _peak_mb()
    d.history_search(QUERY + " x")  # this one builds the search cache
    after_search = _peak_mb()
    chars = sum(
        len(t) for e in d.session.events if "message" in e.data for t in texts(e.message.content)
    )
    return {
        "ru_maxrss MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "baseline MB": base,
        "peak after open MB": after_open - base,
        "peak after first search MB": after_first - base,
        "peak after search MB": after_search - base,
        "file MB": log.stat().st_size / 2**20,
        "text Mchars": chars / 1e6,
    }


# --------------------------------------------------------------------------- parent


def build_logs(log: Path | None, tmp: Path) -> tuple[Path, Path]:
    import bench_store
    import scale_log

    if log is None:
        log = tmp / "log100.jsonl"
        print(f"building {log} with bench/scale_log.py (about a minute) ...", flush=True)
        scale_log.build(log, 100_000, 100.0, 200_000, 7)
    plain, _how = bench_store.build_log(tmp, 100_000)
    return log, plain


def spawn(args: list[str]) -> dict[str, Any]:
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"child failed: {out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def spread(values: list[float], scale: float = 1000, unit: str = "ms") -> str:
    lo, hi = min(values), max(values)
    return f"{lo * scale:,.0f} – {hi * scale:,.0f} {unit}"


def ratio_spread(values: list[float]) -> str:
    return f"{min(values):.2f} – {max(values):.2f}"


def verdict(ok_all: bool, ok_any: bool) -> str:
    return "met" if ok_all else ("**missed in some runs**" if ok_any else "**missed**")


def report(timings: list[dict[str, Any]], memory: list[dict[str, Any]], log: Path) -> str:
    from bench_common import join_notes, machine_note_list, package_commit, table_lines

    def col(name: str) -> list[float]:
        return [float(t[name]) for t in timings if name in t]

    rows: list[tuple[str, str]] = []
    bare = col("bare json")
    rows.append(("bare parse: read, split, `json.loads` per line (GC paused)", spread(bare)))
    for lib in ("msgspec", "orjson"):
        if col(f"bare {lib}"):
            ratios = [t[f"bare {lib}"] / t["bare json"] for t in timings]
            rows.append(
                (
                    f"bare parse with `{lib}`",
                    f"{spread(col(f'bare {lib}'))}; ratio to json {ratio_spread(ratios)}",
                )
            )
    rows.append(
        (
            f"`Store.load()` ({timings[0]['parser']})",
            f"{spread(col('Store.load()'))}; `json` only {spread(col('Store.load() json only'))}",
        )
    )
    checks: list[str] = []
    for name, label in (
        ("Dashr.open read-only", "`Dashr.open(read_only=True)`"),
        ("Dashr.open writer", "`Dashr.open` (writer)"),
    ):
        values = col(name)
        ratios = [t[name] / t["bare json"] for t in timings]
        rows.append(
            (label, f"{spread(values)}; ratio to the bare json parse {ratio_spread(ratios)}")
        )
        checks.append(
            f"{label}: {spread(values)} (target < 1.5 s: "
            f"{verdict(max(values) < 1.5, min(values) < 1.5)}); ratio to the bare json parse "
            f"{ratio_spread(ratios)} (target <= 1.3: "
            f"{verdict(max(ratios) <= 1.3, min(ratios) <= 1.3)})"
        )
    replay = col("replay 100k plain")
    rows.append(
        (
            f"`Session.open(read_only=True)` replay, {timings[0]['plain events']:,} plain events",
            spread(replay),
        )
    )
    checks.append(
        f"replay of 100k plain events: {spread(replay)} (target < 1 s: "
        f"{verdict(max(replay) < 1, min(replay) < 1)})"
    )
    enc = f"`json` {spread(col('encode json'))}"
    for lib in ("msgspec", "orjson"):
        if col(f"encode {lib}"):
            same = all(t[f"{lib} bytes identical"] for t in timings)
            enc += f"; `{lib}` {spread(col(f'encode {lib}'))} (bytes identical: {same})"
    rows.append(("encoding every object of the log (appends)", enc))
    peak = [m["peak after search MB"] for m in memory]
    opened = [m["peak after open MB"] for m in memory]
    first = [m["peak after first search MB"] for m in memory]
    file_mb, chars = memory[0]["file MB"], memory[0]["text Mchars"]
    rows.append(
        (
            "peak RSS above the imports: after open / a first search / a second one (which "
            "builds the search cache)",
            f"{min(opened):,.0f} – {max(opened):,.0f} MB / {min(first):,.0f} – {max(first):,.0f}"
            f" MB / {min(peak):,.0f} – {max(peak):,.0f} MB (imports baseline "
            f"{memory[0]['baseline MB']:,.0f} MB)",
        )
    )
    by_file = [p / file_mb for p in peak]
    by_text = [p / (chars * 1e6 / 2**20) for p in peak]
    rows.append(
        (
            "peak RSS after both searches / logged text",
            f"{ratio_spread(by_file)}x the file ({file_mb:,.0f} MiB); {ratio_spread(by_text)}x "
            f"its message text ({chars:,.1f} M characters)",
        )
    )
    checks.append(
        f"peak RSS with the search cache: {ratio_spread(by_file)}x the file's bytes "
        f"(target <= 2.5: {verdict(max(by_file) <= 2.5, min(by_file) <= 2.5)}); "
        f"{ratio_spread(by_text)}x the characters of its message text"
    )
    notes = [*machine_note_list(), f"package: {package_commit()}"]
    lines = [
        f"Log: `{log.name}` ({file_mb:,.0f} MiB, {timings[0].get('events', '?')} events); "
        f"{len(timings)} fresh-process runs, best of each run's repeats, given as min – max "
        f"over the runs. {join_notes(notes)}.",
        "",
        *(f"* {c}" for c in checks),
        "",
        *table_lines(rows),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=None, help="large compacted session log")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--child", choices=("timing", "memory"), help=argparse.SUPPRESS)
    parser.add_argument("--plain", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tmp", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.child == "timing":
        result = child_timing(args.log, args.plain, args.repeat, args.tmp)
        result["events"] = f"{args.log.read_bytes().count(NEWLINE):,}"
        print(json.dumps(result))
        return
    if args.child == "memory":
        print(json.dumps(child_memory(args.log)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_open-") as name:
        tmp = Path(name)
        log, plain = build_logs(args.log, tmp)
        timings, memory = [], []
        for run in range(args.runs):
            common = ["--log", str(log), "--plain", str(plain), "--tmp", str(tmp)]
            memory.append(spawn([*common, "--child", "memory"]))
            timings.append(spawn([*common, "--child", "timing", "--repeat", str(args.repeat)]))
            print(f"run {run + 1}: {json.dumps(timings[-1])}\n       {json.dumps(memory[-1])}")
        text = report(timings, memory, log)
    print()
    print(text)
    if args.record:
        from bench_common import record_section

        record_section(SECTION, text)


if __name__ == "__main__":
    main()
