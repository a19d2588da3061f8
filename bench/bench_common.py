"""Shared helpers for the benchmarks: machine notes and writing a section of RESULTS.md."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
ROOT = Path(__file__).resolve().parents[1]


def package_commit() -> str:
    """The last commit that changed the package: the code measured."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", "--", "dashr_ext"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def machine_note_list(load_label: str | None = "load average") -> list[str]:
    """``"key: value"`` notes: date, cores, CPU model, Python and the load average.

    The load average is listed under ``load_label``, or left out when it is None.
    """
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    notes = [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"nproc: {os.cpu_count()}",
        f"cpu: {cpu}",
        f"python: {platform.python_version()} ({platform.system()} {platform.release()})",
    ]
    if load_label is not None:
        notes.append(f"{load_label}: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return notes


def join_notes(notes: Iterable[str]) -> str:
    """The notes on one line, separated by semicolons."""
    return "; ".join(notes)


def machine_notes() -> str:
    """One line: date, cores, CPU model, Python, load average."""
    return join_notes(machine_note_list())


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


def table_lines(rows: list[tuple[str, str]]) -> list[str]:
    """A two-column Markdown table of (measurement, result) rows."""
    return [
        "| measurement | result |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
