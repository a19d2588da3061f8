"""Extension load benchmark: ``%load_ext dashr_ext`` in a fresh process (SPEC 13).

Run ``python bench/bench_load.py`` from the project root. Every repetition is a new Python
process (nothing warm in ``sys.modules`` or the OS page cache of this process), which:

1. imports IPython and starts an ``InteractiveShell``: the **baseline**, what any kernel pays
   before an extension loads;
2. runs ``%load_ext dashr_ext``: imports the package and its magics, creates a session file in
   a temporary ``$DASHR_HOME`` (durable: fsync) and binds the names. This is the figure the
   target applies to (< 300 ms), with ``import dashr_ext`` reported on its own as well.

The child also reports which heavy modules the load pulled in: the tokenizer (``tiktoken``)
and ``httpx`` must stay unimported until first use. ``--kernel-reps N`` additionally times
``%load_ext`` inside N fresh Jupyter kernels (over the protocol, timed inside the kernel).
Medians are reported, with the min-max range. ``--record`` rewrites the "Extension load"
section of ``bench/RESULTS.md`` with this run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import RESULTS, join_notes, machine_note_list, record_section, table_lines  # noqa: E402

SECTION = "## Extension load (bench/bench_load.py)"
TARGET_MS = 300.0
HEAVY = ("tiktoken", "httpx", "dill", "matplotlib")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from traitlets.config import Config
from IPython.core.interactiveshell import InteractiveShell
config = Config()
config.HistoryManager.hist_file = ":memory:"
ip = InteractiveShell(config=config)
t1 = time.perf_counter()
import dashr_ext
t2 = time.perf_counter()
ip.run_line_magic("load_ext", "dashr_ext")
t3 = time.perf_counter()
assert ip.user_ns["dashr_compaction_archive"] is ip.user_ns["dashr"].archive
print(json.dumps({
    "shell": t1 - t0,
    "import": t2 - t1,
    "load_ext": t3 - t1,
    "heavy": [m for m in HEAVY if m in sys.modules],
}))
""".replace("HEAVY", repr(HEAVY))

KERNEL_CELL = (
    "import time as _t\n"
    "_t0 = _t.perf_counter()\n"
    "get_ipython().run_line_magic('load_ext', 'dashr_ext')\n"
    "print((_t.perf_counter() - _t0) * 1000)"
)


def run_child(home: Path) -> dict[str, Any]:
    env = {**os.environ, "DASHR_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=env
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def kernel_load_ms(home: Path) -> float:
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name="bench",
                language="python",
            )

    km = KernelManager(kernel_name="bench", kernel_spec_manager=ThisInterpreter())
    km.start_kernel(env={**os.environ, "DASHR_HOME": str(home)})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        printed: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                printed.append(msg["content"]["text"])

        kc.execute_interactive(KERNEL_CELL, output_hook=hook, timeout=60)
        return float("".join(printed).strip())
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ms (min {min(values):.0f}, max {max(values):.0f})"


def record(rows: list[tuple[str, str]], checks: list[str], reps: int) -> None:
    body = [
        "Machine: " + join_notes(machine_note_list(load_label=None)) + ".",
        f"Each figure is the median of {reps} fresh processes (min-max in brackets).",
        "",
        *(f"* {check}" for check in checks),
        "",
        *table_lines(rows),
    ]
    record_section(SECTION, "\n".join(body))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="fresh processes per measurement")
    parser.add_argument("--kernel-reps", type=int, default=3, help="fresh Jupyter kernels")
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()

    runs: list[dict[str, Any]] = []
    kernel_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dashr-bench-") as tmp:
        run_child(Path(tmp) / "warmup")  # fill the OS file cache once, like any second start
        for i in range(args.reps):
            runs.append(run_child(Path(tmp) / f"run{i}"))
        for i in range(args.kernel_reps):
            kernel_ms.append(kernel_load_ms(Path(tmp) / f"kernel{i}"))

    shell = [1000 * r["shell"] for r in runs]
    imported = [1000 * r["import"] for r in runs]
    load = [1000 * r["load_ext"] for r in runs]
    heavy = sorted({m for r in runs for m in r["heavy"]})
    ratio = statistics.median(load) / statistics.median(shell)
    rows = [
        ("baseline: import IPython + start an InteractiveShell", spread(shell)),
        ("import dashr_ext (part of the load)", spread(imported)),
        ("%load_ext dashr_ext (import, new durable session, bind names)", spread(load)),
        ("ratio %load_ext / baseline shell start", f"{ratio:.2f}"),
        ("heavy modules imported by the load", ", ".join(heavy) or "none (tiktoken, httpx lazy)"),
    ]
    if kernel_ms:
        rows.append(
            (
                f"%load_ext dashr_ext inside a fresh Jupyter kernel ({len(kernel_ms)} kernels)",
                spread(kernel_ms),
            )
        )
    met = statistics.median(load) < TARGET_MS and not {"tiktoken", "httpx"} & set(heavy)
    checks = [
        f"%load_ext dashr_ext: {statistics.median(load):.0f} ms median "
        f"(target < {TARGET_MS:.0f} ms, tokenizer and httpx not imported): "
        + ("met" if met else "MISSED")
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    print(checks[0])
    if args.record:
        record(rows, checks, args.reps)
        print(f"\nrecorded in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
