"""Harness bridge benchmark: ``request_messages`` over the comm against the same call in-kernel.

Run ``python bench/bench_bridge.py`` from the project root. Each run starts a fresh Jupyter
kernel of this interpreter, loads the extension, builds a session of 1,000 and then 10,000
events in it (user / assistant-with-call / tool triples of a few hundred characters;
``auto`` off so no pass runs) and, for each size, times:

* **in-kernel**: ``dashr.request_messages()`` inside the kernel (a cell times it);
* **over the comm**: ``KernelSession.request_messages()`` from this process, end to end (the
  request, the kernel's work, the reply's JSON both ways through the Jupyter session);
* **JSON once**: ``json.dumps`` + ``json.loads`` of the reply here, the least that moving
  that many bytes as JSON costs;
* **transport**: an ``extra_tools`` read whose reply holds the very same messages (set as
  the extra tools first; no work in the kernel): what the Jupyter session costs for that
  JSON (the kernel's encoding and HMAC signing, IOPub's thread hop, ZeroMQ, the client's
  check and decoding);
* **fixed overhead**: a ``state`` request (a few hundred bytes each way) over the comm.

``overhead = comm - in-kernel handler - transport`` is what the bridge adds beyond moving
the bytes (target: < 5 ms); the in-kernel handler is ``handle()`` of the same request, timed
in the kernel (``request_messages`` plus building the reply). Medians of ``--reps`` calls
per run; ``--runs`` runs (default 3) give the spread. ``--record`` rewrites the "Harness
bridge" section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import join_notes, machine_note_list, record_section  # noqa: E402

from dashr_ext.bridge import KernelSession  # noqa: E402

SECTION = "## Harness bridge: request_messages over the comm (bench/bench_bridge.py)"
SIZES = (1_000, 10_000)

BUILD = r"""
dashr.config = dashr.config.with_changes(auto=False)
def _bench_fill(target):
    i = len(dashr.session)
    batch = []
    while len(dashr.session) + len(batch) < target:
        n = len(dashr.session) + len(batch)
        call = f"call_{n}"
        batch += [
            {"role": "user", "content": f"step {n}: look at file_{n}.py and report value_{n}"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": call, "type": "function",
             "function": {"name": "bash", "arguments": '{"cmd": "cat file_%d.py"}' % n}}]},
            {"role": "tool", "tool_call_id": call, "content": ("x = %d  # naïve ✓\n" % n) * 12},
        ]
        if len(batch) >= 30:
            dashr.record_openai(batch)
            batch = []
    if batch:
        dashr.record_openai(batch)
_bench_fill(TARGET)
print(len(dashr.session))
"""

TIME_IN_KERNEL = r"""
import json, time, statistics
from dashr_ext._bridge import handle as _handle
_t, _h = [], []
for _ in range(REPS):
    _a = time.perf_counter(); _m = dashr.request_messages(); _t.append(time.perf_counter() - _a)
    _a = time.perf_counter()
    _handle(dashr, {"version": 1, "id": "b", "op": "request_messages"})
    _h.append(time.perf_counter() - _a)
print(json.dumps({"median": statistics.median(_t), "handler": statistics.median(_h)}))
del _handle
"""


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def one_run(reps: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "DASHR_HOME": home}
        with KernelSession.start(env=env, session_path=Path(home) / "bench.jsonl") as ks:
            for size in SIZES:
                events = int(ks.run_cell(BUILD.replace("TARGET", str(size))).stdout)
                ks.request_messages()  # warm: the meter's fold, the derivation caches
                cell = ks.run_cell(TIME_IN_KERNEL.replace("REPS", str(reps)))
                assert cell.error is None, cell.error
                timed = json.loads(cell.stdout)
                in_kernel, handler = timed["median"] * 1000, timed["handler"] * 1000
                comm, fixed, transfer, transport = [], [], [], []
                payload = 0
                for _ in range(reps):
                    start = time.perf_counter()
                    result = ks.request("request_messages")
                    comm.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    ks.request("state")
                    fixed.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    text = json.dumps(result, ensure_ascii=False)
                    json.loads(text)
                    transfer.append(time.perf_counter() - start)
                    payload = len(text.encode("utf-8"))
                ks.extra_tools = result["messages"]  # the same JSON shape and size, back
                for _ in range(reps):
                    start = time.perf_counter()
                    echoed = ks.request("extra_tools")
                    transport.append(time.perf_counter() - start)
                echo_bytes = len(json.dumps(echoed, ensure_ascii=False).encode("utf-8"))
                ks.extra_tools = []
                request_bytes = len(
                    json.dumps({"version": 1, "id": "x" * 10, "op": "request_messages", "args": {}})
                )
                over = _median_ms(comm) - handler - _median_ms(transport)
                out[size] = {
                    "events": events,
                    "messages": len(result["messages"]),
                    "in_kernel_ms": in_kernel,
                    "handler_ms": handler,
                    "transport_ms": _median_ms(transport),
                    "echo_bytes": echo_bytes,
                    "comm_ms": _median_ms(comm),
                    "transfer_ms": _median_ms(transfer),
                    "fixed_ms": _median_ms(fixed),
                    "overhead_ms": over,
                    "ratio": _median_ms(comm) / in_kernel,
                    "reply_bytes": payload,
                    "request_bytes": request_bytes,
                }
    return out


def _spread(values: list[float], fmt: str = "{:.1f}") -> str:
    mid = statistics.median(values)
    return f"{fmt.format(mid)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.reps))
        print(f"run {i + 1}: {json.dumps(runs[-1])}", flush=True)
    lines = [
        f"Machine: {join_notes(machine_note_list())}. {args.runs} runs, each a fresh kernel; "
        f"each figure the median of {args.reps} calls in that run, shown as the median of "
        "the runs (min–max over runs). Ratios are taken within one run.",
        "",
        "| events | messages | in-kernel ms | handler ms | over the comm ms | comm / in-kernel "
        "| JSON once ms | transport ms | overhead ms (comm − handler − transport) "
        "| state round trip ms | reply bytes | request bytes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for size in SIZES:
        rows = [run[size] for run in runs]

        def col(key: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [r[key] for r in rows]

        lines.append(
            f"| {rows[0]['events']:,} | {rows[0]['messages']:,} | {_spread(col('in_kernel_ms'))} "
            f"| {_spread(col('handler_ms'))} | {_spread(col('comm_ms'))} "
            f"| {_spread(col('ratio'), '{:.2f}')}× | {_spread(col('transfer_ms'))} "
            f"| {_spread(col('transport_ms'))} | {_spread(col('overhead_ms'))} "
            f"| {_spread(col('fixed_ms'))} | {rows[0]['reply_bytes']:,} "
            f"| {rows[0]['request_bytes']} |"
        )
    body = "\n".join(lines)
    print(body)
    if args.record:
        record_section(SECTION, body)


if __name__ == "__main__":
    main()
