"""Shared helpers for the benchmarks: machine notes and writing a section of RESULTS.md."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def machine_notes() -> str:
    """One line: date, cores, CPU model, Python, load average."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; nproc: {os.cpu_count()}; cpu: {cpu}; "
        f"python: {platform.python_version()} ({platform.system()} {platform.release()}); "
        f"load average: {load}"
    )


def record_section(heading: str, body: str) -> None:
    """Replace (or append) the section starting at ``heading`` in RESULTS.md."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    block = f"{heading}\n\n{body.strip()}\n"
    start = text.find(heading)
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + block
    else:
        end = text.find("\n## ", start + len(heading))
        tail = "" if end == -1 else text[end + 1 :]
        text = text[:start] + block + ("\n" + tail if tail else "")
    RESULTS.write_text(text, encoding="utf-8")
