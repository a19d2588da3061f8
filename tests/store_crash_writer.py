"""Writer process for the crash test in ``test_store.py``: appends until it is killed.

``python store_crash_writer.py PATH SEED DURABILITY [SELF_KILL_AFTER]`` opens (or
creates) the store at PATH, continues after its last complete line, and appends
batches of 1-4 large lines forever. Line ``i`` is ``crash_event(SEED, i)``, so the
test can regenerate every byte the writer meant to write. After each append returns
it prints the number of lines now in the file, so the test knows which lines were
acknowledged.

With SELF_KILL_AFTER=n, a second thread sends the process SIGKILL the moment the
append after the first n starts its ``os.write``: a crash aimed at the write itself,
which an outside kill at a random time hits only now and then.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dashr_ext._store import Durability, Store


@functools.cache
def _random_text(seed: int) -> str:
    return random.Random(seed).randbytes(200_000).hex()


def crash_event(seed: int, i: int) -> dict[str, Any]:
    """Line ``i`` of the crash log: 20-200 KB, a pure function of ``(seed, i)``.

    Slices of one cached random text keep generation cheap, so that most of the
    writer's time goes to writing and a kill often lands inside a write.
    """
    rng = random.Random(seed * 1_000_003 + i)
    size_chars = rng.randint(20_000, 200_000)
    start = rng.randrange(400_000 - size_chars)
    return {
        "seq": i,
        "type": "x-crash/line",
        "time": i,
        "data": {
            "seed": seed,
            "note": "ß→∞",
            "text": _random_text(seed)[start : start + size_chars],
        },
    }


def batch_size(seed: int, i: int) -> int:
    """How many lines the batch starting at line ``i`` holds (1-4)."""
    return random.Random(seed * 7_000_001 + i).randint(1, 4)


def arm_self_kill(after_writes: int) -> None:
    """SIGKILL this process as soon as write number ``after_writes + 1`` begins."""
    started = threading.Event()
    real_write = os.write
    writes = 0

    def write(fd: int, data: Any) -> int:
        nonlocal writes
        writes += 1
        if writes > after_writes:
            started.set()  # the killer wakes while this thread is inside the syscall
        return real_write(fd, data)

    def killer() -> None:
        started.wait()
        os.kill(os.getpid(), signal.SIGKILL)

    os.write = write
    threading.Thread(target=killer, daemon=True).start()


def main(path: Path, seed: int, durability: str, self_kill_after: int | None) -> None:
    mode: Durability = "flush" if durability == "flush" else "fsync"
    if path.exists():
        store = Store.open(path, durability=mode)
    else:
        store = Store.create(path, durability=mode)
    lines, _torn = store.load()
    if self_kill_after is not None:
        arm_self_kill(self_kill_after)
    i = len(lines)
    while True:
        n = batch_size(seed, i)
        store.append([crash_event(seed, j) for j in range(i, i + n)])
        i += n
        print(i, flush=True)


if __name__ == "__main__":
    self_kill_after = int(sys.argv[4]) if len(sys.argv) > 4 else None
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], self_kill_after)
