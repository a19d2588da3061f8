"""Turn memory in a real Jupyter kernel: ``%%agent`` twice, the second turn sees the first
compressed (SPEC §6.4).

The model is the scripted OpenAI-compatible server on loopback in this process; the session,
its turn-memory job and the ``run_cell`` cells live in the kernel.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_kernel import Kernel, running_kernel

from dashr_ext import Dashr
from dashr_ext._turnmemory.records import TurnRecord
from dashr_ext.testing import ScriptedServer, answer, call_run_cell

pytestmark = pytest.mark.slow

FIRST = "Profile the three sensor files and tell me which one has gaps."
ANSWER = "sensor_b.csv has gaps: 14 missing readings between rows 200 and 260."


def sensor_cell(name: str, rows: int = 40) -> str:
    """A cell printing ``rows`` deterministic readings (~400 tokens of output)."""
    return (
        f"for k in range({rows}):\n"
        f'    print(f"{name} row {{k:03d}} reading={{(k * 37) % 101}} status=ok")'
    )


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with running_kernel(tmp_path / "home") as k:
        yield k


def test_agent_twice_with_turn_memory_sends_the_first_turn_compressed(kernel: Kernel) -> None:
    with ScriptedServer() as server:
        server.script(
            *(call_run_cell(sensor_cell(f"sensor_{c}.csv")) for c in "abc"),
            answer(ANSWER),
            answer("Yes: interpolate the gap linearly."),
        )
        setup = kernel.execute(
            "%load_ext dashr_ext\n"
            "%config Dashr.turn_memory = True\n"
            "%config Dashr.turn_min_tokens = 200\n"
            f"%config Dashr.agent_base_url = {server.base_url!r}\n"
            "%config Dashr.agent_model = 'scripted'\n"
            "print(dashr.session.path)"
        )
        path = Path(setup.stdout.splitlines()[-1])
        first = kernel.execute(f"%%agent\n{FIRST}")
        assert ANSWER in first.stdout + "".join(r.get("text/plain", "") for r in first.results)
        with Dashr.open(path, read_only=True) as d:  # queued as the turn ended, not later
            assert "turn-memory/pending" in {e.type for e in d.session.events}
        waited = kernel.execute(
            "import json\n"
            "print(dashr.wait_for_turns(60))\n"
            "print(json.dumps([t.status for t in dashr.turns()]))"
        )
        done, statuses = waited.stdout.splitlines()
        assert (done, json.loads(statuses)) == ("True", ["landed"])
        kernel.execute("%%agent\nShould I interpolate the gap?")
        requests = server.model_requests
    assert len(requests) == 5
    before, after = requests[3].messages, requests[4].messages
    # The last request of turn 1 carried its working trace verbatim: 1 user + 3 calls + 3 results.
    turn1_before = before[before.index({"role": "user", "content": FIRST}) :]
    assert [m["role"] for m in turn1_before] == ["user", *["assistant", "tool"] * 3]
    # Turn 2's request: everything before turn 1 unchanged, turn 1 rewritten in fewer nodes.
    start = after.index({"role": "user", "content": FIRST})
    assert after[:start] == before[: before.index(turn1_before[0])]
    turn1_after = after[start:-1]
    assert after[-1] == {"role": "user", "content": "Should I interpolate the gap?"}
    assert len(turn1_after) < len(turn1_before) + 1  # + 1: turn 1's final answer
    assert turn1_after[-1]["role"] == "assistant" and ANSWER in turn1_after[-1]["content"]
    assert not any(m["role"] == "tool" for m in turn1_after)  # pairs absorbed whole
    rewritten = json.dumps(turn1_after)
    assert all(f"sensor_{c}.csv" in rewritten for c in "abc")  # what was run survives
    size = len(json.dumps(turn1_before))
    assert len(rewritten) < size  # denser than the trace it replaced
    with Dashr.open(path, read_only=True) as d:
        record: TurnRecord = d.turns()[0]
        assert record.status == "landed" and record.checkpoint is not None
        assert (record.nodes_after or 0) < (record.nodes_before or 0)
        archived = json.dumps(d.archive[record.checkpoint])
        assert "sensor_c.csv row 039" in archived  # the originals stay recallable


def test_a_harness_ending_a_turn_through_the_bridge_queues_its_job_at_once(
    tmp_path: Path,
) -> None:
    from inprocess import kernel_session
    from turn_memory_support import ON, work_turn

    with Dashr.create(tmp_path / "bridge.jsonl", config=ON) as d:
        ks = kernel_session(d)
        ks.begin_turn()
        ks.record_openai(work_turn(1))
        ks.end_turn()
        assert d.session.events[-1].type == "turn-memory/pending"  # before anything else
        assert d.wait_for_turns(30)
        assert [t.status for t in d.turns()] == ["landed"]
