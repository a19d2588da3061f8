"""One scripted agent session in this process, and the log it writes.

Used by ``tests/test_agent_kernel.py``: ``Agent(Dashr(...))`` must keep writing these bytes
whatever carries the loop (the agent reaches its session only through an ``AgentHost``).
Two turns: eight cells that compact, an error cell, the answer; then a provider
context-length error (compacted, retried once), a recall search, a bad recall call, an
unknown tool, the archive read back through ``run_cell``, the answer. Run
``python tests/golden/build_agent_golden.py`` to regenerate ``agent.jsonl`` after a deliberate
behaviour change (and say so in the commit).
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def batch_cell(i: int, rows: int = 30) -> str:
    return (
        "import random\n"
        f"rng = random.Random({i})\n"
        f'print("batch {i} | token %08x" % rng.getrandbits(32))\n'
        f"for k in range({rows}):\n"
        f'    print(f"  batch {i} row {{k:02d}} value={{rng.randint(1000, 9999)}}")'
    )


def run(directory: Path) -> tuple[bytes, list[str]]:
    """The session log's bytes, and every step's progress line."""
    from dashr_ext import CompactionConfig, Dashr, _cells
    from dashr_ext.agent import Agent
    from dashr_ext.testing import ScriptedServer, answer, call_run_cell, call_tool, read_archive

    ticks = itertools.count()
    # Tracebacks name the cell "<agent-cell-N>", numbered per process: start at 1 here.
    numbers, _cells._cell_numbers = _cells._cell_numbers, itertools.count(1)
    path = directory / "agent.jsonl"
    config = CompactionConfig(recency_window_tokens=2500, retain_tokens=600)
    try:
        with ScriptedServer() as server:
            server.script(
                *(call_run_cell(batch_cell(i)) for i in range(8)),
                call_run_cell("1/0"),
                answer("Loaded."),
                call_tool("history_search", {"query": "batch 0 | token"}),
                call_tool("history_read", {"bogus": 1}),
                call_tool("nope", {}),
                read_archive(),
                answer("Done."),
            )
            with (
                Dashr.create(
                    path,
                    config=config,
                    session_id="agent-golden",
                    clock=lambda: 1_783_339_200_000 + 1000 * next(ticks),
                ) as d,
                Agent(d, base_url=server.base_url, model="m", api_key=None) as agent,
            ):
                first = agent.run_turn("Load eight batches.")
                server.overflow_next(1)
                second = agent.run_turn("Read the first back.")
    finally:
        _cells._cell_numbers = numbers
    lines = [step.line() for step in (*first.steps, *second.steps)]
    return path.read_bytes(), lines


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        log, lines = run(Path(tmp))
    (HERE / "agent.jsonl").write_bytes(log)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
