"""A step costs the same on a 1k, 10k and 100k-event session: counted, never timed.

A step of the agent loop is ``record_openai`` (an assistant message with a tool call and its
result) then ``request_messages()``; a meter check is ``measure()``. What each does is
counted: messages rendered, surface nodes the meter folds, characters it tokenizes, bytes
the call allocates, checkpoints the pointer bookkeeping visits. Each count must be the same
at every size. Then a property test: after random appends, compactions, prunes and reopens,
the incremental messages and measurement equal a from-scratch rebuild.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._checkpoints import Checkpoint, CheckpointIndex
from dashr_ext._compaction import Pointers
from dashr_ext._events import Event
from dashr_ext._formats import openai as openai_format
from dashr_ext._formats.openai import to_openai
from dashr_ext._meter import TokenMeter
from dashr_ext._session import Session

SIZES = (1_000, 10_000, 100_000)
HUGE = 10**9
T0 = 1_764_460_000_000
BIG = " ".join(f"w{i}" for i in range(1500))


# --------------------------------------------------------------------------- sessions


def _event(seq: int, kind: str, role: str, text: str, **extra: Any) -> Event:
    source = {"user": {"kind": "user"}, "assistant": {"kind": "model", "model": None}}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    blocks += extra.pop("calls", [])
    message = {
        "id": f"m{seq}",
        "role": role,
        "source": source.get(role, {"kind": "tool"}),
        "content": blocks,
        **extra,
    }
    return Event(seq, kind, T0 + seq, {"message": message}, "append")


def _steps(count: int) -> list[Event]:
    """``count`` events of agent steps (a task every 20 steps); the first outputs are big."""
    header = {
        "sessionId": f"steps{count}",
        "createdAt": T0,
        "systemPrompt": "You are a careful coding agent.",
        "tools": None,
        "format": "dashr/1",
    }
    events = [Event(0, "session/header", T0, header)]
    step = 0
    while len(events) < count:
        seq = len(events)
        if step % 20 == 0:
            events.append(_event(seq, "user/message", "user", f"Task {step}: fix the retries"))
            seq += 1
        call = {"type": "tool-call", "id": f"t{step}", "name": "bash", "arguments": "{}"}
        events.append(_event(seq, "assistant/message", "assistant", f"step {step}", calls=[call]))
        output = f"output of step {step}\n" + (BIG if step in (3, 5, 8) else "ok")
        events.append(
            _event(
                seq + 1,
                "tool/result",
                "tool",
                output,
                toolCallId=f"t{step}",
                toolName="bash",
                isError=False,
            )
        )
        step += 1
    return events


def stepped_dashr(count: int, *, path: Path | None = None) -> Dashr:
    """About ``count`` events on the surface, with pruned outputs, two checkpoints and their
    pointer; the threshold is out of reach, so the steps measured never compact."""
    config = CompactionConfig(
        context_window_tokens=HUGE,
        recency_window_tokens=HUGE // 2,
        retain_tokens=400,
        prune_tool_output_tokens=500,
    )
    d = Dashr(Session(_steps(count)), config=config, summarizer="extractive")
    assert d.prune(start_seq=1, end_seq=31) is not None  # the three big outputs
    surface = d.session.surface
    d.compact("manual", start_seq=surface[0], end_seq=surface[20])  # task 0, steps 0-9
    surface = d.session.surface
    d.compact("manual", start_seq=surface[1], end_seq=surface[20])  # steps 10-19
    d.request_messages()  # the pointer; every cache warm
    assert len(d.checkpoints()) == 2 and len(d.session.surface) > count * 0.9
    return d


@pytest.fixture(scope="module")
def sessions() -> dict[int, Dashr]:
    return {n: stepped_dashr(n) for n in SIZES}


_ids = iter(range(10**6))


def step(d: Dashr) -> None:
    call = f"s{next(_ids)}"
    fn = {"name": "bash", "arguments": "{}"}
    d.record_openai(
        {"role": "assistant", "content": "go", "tool_calls": [{"id": call, "function": fn}]}
    )
    d.record_openai({"role": "tool", "tool_call_id": call, "content": "ok"})


def per_size(sessions: dict[int, Dashr], count: Callable[[Dashr], int]) -> dict[int, int]:
    """``count(d)`` for each size, after one step to settle."""
    out = {}
    for n, d in sessions.items():
        count(d)
        out[n] = count(d)
    return out


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of ``event_to_openai`` (one per message rendered)."""
    calls = [0]
    render = openai_format.event_to_openai

    def counting(event: Event) -> dict[str, Any]:
        calls[0] += 1
        return render(event)

    monkeypatch.setattr(openai_format, "event_to_openai", counting)
    return calls


def allocated(fn: Callable[[], object]) -> int:
    """Peak bytes allocated while ``fn`` runs (what it returns is kept alive through it)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- counted


def test_a_step_renders_only_its_own_messages(
    sessions: dict[int, Dashr], renders: list[int]
) -> None:
    def rendered(d: Dashr) -> int:
        step(d)
        before = renders[0]
        messages = d.request_messages()
        assert len(messages) == len(d.session.surface) + 1  # the system prompt, every node
        return renders[0] - before

    assert per_size(sessions, rendered) == dict.fromkeys(SIZES, 2)


def test_a_measure_folds_and_tokenizes_only_the_new_nodes(sessions: dict[int, Dashr]) -> None:
    def counted(d: Dashr) -> int:
        d.record_openai({"role": "user", "content": "and the next one"})
        stats = d.meter.stats
        stats.reset()
        d.measure()
        return stats.nodes_folded * 1000 + stats.chars_tokenized

    assert per_size(sessions, counted) == dict.fromkeys(SIZES, 1 * 1000 + len("and the next one"))


def test_a_measure_and_the_surface_allocate_the_same_at_every_size(
    sessions: dict[int, Dashr],
) -> None:
    """Counted in bytes: a copy of the surface (8 bytes a node) would show at 100k."""

    def measure_bytes(d: Dashr) -> int:
        sizes = []
        for _ in range(3):  # the least of three: a list's amortized growth may land in one
            d.record_openai({"role": "user", "content": "again"})
            sizes.append(allocated(d.measure))
        return min(sizes)

    def surface_bytes(d: Dashr) -> int:
        return allocated(lambda: d.session.surface)

    for count in (measure_bytes, surface_bytes):
        sizes = per_size(sessions, count)
        assert max(sizes.values()) < 65_536, sizes  # a copy of the 100k surface is 800 kB
        assert max(sizes.values()) - min(sizes.values()) < 4_096, sizes


def young_references(d: Dashr) -> int:
    """References a young collection walks right after a step, with its request still held:
    the containers allocated since everything older was collected, and what each holds."""
    step(d)
    # What is older than this request leaves the young generations (collecting them moves
    # what survives to the oldest, without a full collection's walk of all the process holds).
    gc.collect(1)
    kept = d.request_messages()
    refs = sum(len(gc.get_referents(o)) for g in (0, 1) for o in gc.get_objects(generation=g))
    assert len(kept) == len(d.session.surface) + 1
    return refs


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic GC")
def test_a_young_collection_during_a_step_walks_the_same_at_every_size(
    sessions: dict[int, Dashr],
) -> None:
    """The request list (one pointer a node) is left out of the cyclic GC: a young
    collection while the agent holds it would walk 100k pointers at 100k events."""
    sizes = per_size(sessions, young_references)
    assert max(sizes.values()) < 10_000, sizes
    assert max(sizes.values()) - min(sizes.values()) < 1_000, sizes


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's cyclic GC")
def test_the_request_list_is_freed_by_reference_counting_alone() -> None:
    d = stepped_dashr(1_000)
    messages = d.request_messages()
    assert not gc.is_tracked(messages)
    assert all(gc.is_tracked(m) for m in messages if "tool_calls" in m)  # the dicts stay in
    messages.append({"role": "user", "content": "mine"})  # still a plain list of its own
    assert type(messages) is list and messages[-1]["content"] == "mine"
    assert d.request_messages() == to_openai(d.session) == messages[:-1]


class CountingList(Sequence[Checkpoint]):
    """A list of checkpoints that counts the items read."""

    def __init__(self, items: list[Checkpoint]) -> None:
        self.items = items
        self.reads = 0

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return self.items[index]

    def __iter__(self) -> Iterator[Checkpoint]:
        for item in self.items:
            self.reads += 1
            yield item


@pytest.mark.parametrize("count", [2, 200])
def test_pointer_bookkeeping_reads_no_settled_checkpoint(count: int) -> None:
    """Once every checkpoint has its pointer, a request's pointer check reads none of them."""
    d = stepped_dashr(1_000)
    index = CheckpointIndex()
    index.update(d.session)
    pointers = Pointers(d.session)
    items = CountingList(index.items * (count // 2))  # as many as a long session holds
    pointers.inject(items)  # settles every one (all pointed already)
    items.reads = 0
    for _ in range(3):
        step(d)
        pointers.inject(items)
    assert items.reads == 0
    assert len(d.session) == len(d.session.events)


# --------------------------------------------------------------------------- equivalence


def _fresh_measure(session: Session) -> tuple[int, list[tuple[int, int]]]:
    m = TokenMeter().measure(session)
    return m.counted, list(m.nodes)


def _check(d: Dashr, held: list[tuple[Any, ...]]) -> None:
    s = d.session
    messages = d.session.messages()
    assert messages == to_openai(s)
    assert json.dumps(messages) == json.dumps(to_openai(s))
    m = d.meter.measure(s)
    assert (m.counted, list(m.nodes)) == _fresh_measure(s)
    assert [seq for seq, _ in m.nodes] == list(s.surface) == [e.seq for e in s.surface_events()]
    assert all(s.position(q) == k for k, q in enumerate(s.surface))
    for surface, as_tuple, nodes, as_list in held:  # snapshots never change
        assert tuple(surface) == as_tuple and surface == as_tuple
        assert list(nodes) == as_list and nodes == as_list
    held.append((s.surface, tuple(s.surface), m.nodes, list(m.nodes)))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_requests_equal_a_rebuild(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    path = tmp_path / "s.jsonl"
    config = CompactionConfig(
        context_window_tokens=HUGE,
        recency_window_tokens=rng.choice([3_000, 6_000, HUGE // 2]),
        retain_tokens=800,
        prune_tool_output_tokens=300,
    )
    d = Dashr.create(path, config=config, summarizer="extractive", durability="flush")
    d.record_openai({"role": "system", "content": "Be brief."})
    held: list[tuple[Any, ...]] = []
    calls = 0
    for _ in range(60):
        op = rng.random()
        if op < 0.5:
            calls += 1
            call = f"c{calls}"
            size = rng.choice([10, 200, 3000])
            fn = {"name": "bash", "arguments": json.dumps({"n": calls})}
            d.record_openai(
                [
                    {
                        "role": "assistant",
                        "content": f"step {calls}",
                        "tool_calls": [{"id": call, "function": fn}],
                    },
                    {"role": "tool", "tool_call_id": call, "content": "y" * size},
                ]
            )
        elif op < 0.65:
            d.record_openai({"role": "user", "content": f"next task {rng.random():.6f}"})
        elif op < 0.75:
            d.prune()
        elif op < 0.83:
            d.compact("manual")
        elif op < 0.9:
            d.close()
            d = Dashr.open(path, config=config, summarizer="extractive", durability="flush")
            d.meter.measure(d.session)
        else:
            d.request_messages()  # the pressure check: may prune, compact, add a pointer
        if rng.random() < 0.7:
            _check(d, held)
    d.request_messages()
    _check(d, held)
    assert any(e.type == "compaction/summary" for e in d.session.events) or seed % 3
    d.close()


def test_messages_is_a_new_list_each_call() -> None:
    d = stepped_dashr(1_000)
    first = d.request_messages()
    first.append({"role": "user", "content": "not recorded"})
    del first[1]
    assert d.request_messages() == to_openai(d.session)
