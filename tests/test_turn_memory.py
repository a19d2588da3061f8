"""Turn memory (SPEC §6.4): its settings, the landing plan, the jobs and the Python API."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from traitlets.config import Config
from turn_memory_support import (
    ON,
    Gate,
    call,
    landed,
    orphan_calls,
    simple_compressor,
    turn_passes,
    work_turn,
)

from dashr_ext import CompactionConfig
from dashr_ext._archive import BUCKETS
from dashr_ext._config import TURN_MIN_TOKENS
from dashr_ext._controller import Dashr
from dashr_ext._events import Replace
from dashr_ext._formats.openai import to_openai
from dashr_ext._meter import MESSAGE_OVERHEAD_TOKENS, TokenMeter
from dashr_ext._session import Session
from dashr_ext._turnmemory import TurnEditor, TurnNode, turn_nodes
from dashr_ext._turnmemory import jobs as turn_jobs
from dashr_ext._turnmemory.landing import plan_landing
from dashr_ext.errors import ConfigError


@pytest.fixture(autouse=True)
def simple_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs use the simple compressor unless a test gives another (the extractive one is
    tested on its own)."""
    monkeypatch.setattr(turn_jobs, "default_compressor", lambda *_: simple_compressor)


def replayed(d: Dashr) -> list[dict[str, Any]]:
    return to_openai(Session(list(d.session.events)))


# --------------------------------------------------------------------------- settings


def test_the_turn_settings_default_and_are_checked_one_by_one() -> None:
    cfg = CompactionConfig()
    assert (cfg.turn_memory, cfg.turn_min_tokens) == (False, TURN_MIN_TOKENS)
    assert (cfg.turn_worker_attempts, cfg.turn_read_max_chars) == (3, 20_000)
    bad = {
        "turn_memory": ("yes", "True or False"),
        "turn_min_tokens": (-1, "an integer >= 0"),
        "turn_worker_attempts": (0, "an integer in [1, 10]"),
        "turn_read_max_chars": (100, "an integer in [400, 1000000]"),
    }
    for name, (value, accepted) in bad.items():
        with pytest.raises(ConfigError, match=re.escape(f"{name}: expected {accepted}, got")):
            CompactionConfig(**{name: value})
        with pytest.raises(ConfigError, match=name):
            CompactionConfig.check_field(name, value)
    assert CompactionConfig(turn_worker_attempts=10, turn_min_tokens=0).turn_worker_attempts == 10


def test_turn_settings_are_recorded_and_restored_on_open(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.config = d.config.with_changes(turn_memory=True, turn_min_tokens=777)
        change = [e for e in d.session.events if e.type == "config/change"][-1]
        assert change.data["compaction"] == {"turn_memory": True, "turn_min_tokens": 777}
    with Dashr.open(path) as again:
        assert again.config.turn_memory is True
        assert again.config.turn_min_tokens == 777
        assert again.config.turn_worker_attempts == 3


def test_config_magic_sets_turn_memory(shells: list[Any]) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from dashr_ext._magics.configurable import Dashr as Configurable

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shells.append(InteractiveShell(config=config))
    ip = shells[-1]
    ip.run_cell("%load_ext dashr_ext")
    ip.run_cell("%config Dashr.turn_memory = True")
    ip.run_cell("%config Dashr.turn_min_tokens = 123")
    d = ip.user_ns["dashr"]
    assert d.config.turn_memory is True and d.config.turn_min_tokens == 123
    ip.run_cell("%config Dashr.turn_worker_attempts = 0")  # refused: it stays 3
    assert d.config.turn_worker_attempts == 3
    traits = Configurable.class_traits(config=True)
    assert {"turn_memory", "turn_min_tokens", "turn_worker_attempts", "turn_read_max_chars"} <= set(
        traits
    )


# --------------------------------------------------------------------------- the landing plan


def small_turn() -> tuple[Session, tuple[TurnNode, ...]]:
    session = Session.create(in_memory=True)
    session.record_openai(work_turn(0, lines=5))
    return session, turn_nodes(session, 1, meter=TokenMeter("chars"))


def test_the_landing_plan_is_the_exact_batch() -> None:
    session, nodes = small_turn()
    seqs = [n.seq for n in nodes]
    editor = TurnEditor(nodes)
    editor.replace("n2..n4", [{"role": "assistant", "content": "Ran pytest: IndexError."}])
    landing = plan_landing(
        nodes,
        editor.as_data(),
        turn=1,
        job="j9",
        start_seq=40,
        at_ms=1234,
        session_id=session.id,
        event_of=session.event,
        count_tokens=len,
    )
    assert landing is not None
    before = sum(n.tokens or 0 for n in nodes)
    after = nodes[0].tokens + MESSAGE_OVERHEAD_TOKENS + len("Ran pytest: IndexError.")
    after += nodes[4].tokens or 0
    start, replace, end = landing.specs()
    assert start.type == "compaction/start" and start.time == 1234
    assert start.data == {
        "compactionId": "p40",
        "trigger": "turn",
        "engine": "turn-memory",
        "turn": 1,
        "job": "j9",
        "checkpoint": "t40",
        "replaces": 1,
        "shadowedSeqs": seqs[1:4],
        "shadowedTokenCount": sum(n.tokens or 0 for n in nodes[1:4]),
        "nodesBefore": 5,
        "nodesAfter": 3,
        "tokensBefore": before,
        "tokensAfter": after,
    }
    assert replace.type == "assistant/message"
    assert replace.surface_op == Replace(seqs[1], seqs[3])
    assert replace.source_event_seqs == tuple(seqs[1:4])
    assert replace.data == {
        "message": {
            "role": "assistant",
            "source": {
                "kind": "turn-memory",
                "turn": 1,
                "job": "j9",
                "compactionId": "p40",
                "checkpoint": "t40",
            },
            "content": [{"type": "text", "text": "Ran pytest: IndexError."}],
        }
    }
    counts = {b: 0 for b in BUCKETS} | {"assistant_responses": 1, "tool_results": 2}
    counts["file_ops"] = len(landing.entry["file_ops"])
    assert end.data == {"compactionId": "p40", "turn": 1, "job": "j9", "archive": counts}
    assert landing.specs("disk full")[-1].data["archive"] == {"error": "disk full"}
    assert landing.entry["meta"]["seqs"] == seqs[1:4] and landing.entry["meta"]["reason"] == "turn"


def test_sources_are_semantic_sources_and_landing_seqs_and_unchanged_nodes_stay() -> None:
    session, nodes = small_turn()
    pruned = nodes[2]
    session.replace(
        pruned.seq,
        pruned.seq,
        {
            "role": "tool",
            "source": {"kind": "tool"},
            "content": [{"type": "text", "text": "[pruned]"}],
            "toolCallId": pruned.tool_call_id,
            "toolName": "bash",
            "isError": False,
        },
        source_event_seqs=[pruned.seq],
        type="tool/result",
    )
    nodes = turn_nodes(session, 1, meter=TokenMeter("chars"))
    assert nodes[2].provenance == (pruned.seq,) and nodes[2].seq != pruned.seq
    editor = TurnEditor(nodes)
    editor.replace(
        "n1..n4",
        [{"role": "user", "content": "Fix it."}, {"role": "assistant", "content": "Ran it."}],
    )
    landing = plan_landing(
        nodes,
        editor.as_data(),
        turn=1,
        job="j1",
        start_seq=len(session),
        at_ms=1,
        session_id=session.id,
        event_of=session.event,
        count_tokens=len,
    )
    assert landing is not None
    user, work = landing.replaces
    semantic = {s for n in nodes[:4] for s in n.provenance}  # the pruned node's original
    assert pruned.seq in semantic and nodes[2].seq not in semantic
    assert user.surface_op == Replace(nodes[0].seq, nodes[0].seq)
    assert set(user.source_event_seqs or ()) == semantic | {nodes[0].seq}
    assert work.surface_op == Replace(nodes[1].seq, nodes[3].seq)
    assert set(work.source_event_seqs or ()) == semantic | {n.seq for n in nodes[1:4]}
    assert nodes[4].seq not in {s for r in landing.replaces for s in r.source_event_seqs or ()}
    session.append(landing.specs())
    assert session.surface[-1] == nodes[4].seq  # the final answer keeps its event


def test_no_plan_when_nothing_changed_or_nothing_is_gained() -> None:
    session, nodes = small_turn()
    common: dict[str, Any] = dict(
        turn=1, job="j1", start_seq=99, at_ms=1, session_id=session.id, event_of=session.event
    )
    editor = TurnEditor(nodes)
    assert plan_landing(nodes, editor.as_data(), count_tokens=len, **common) is None
    editor.replace("n2..n4", [{"role": "assistant", "content": "x" * 100_000}])
    assert plan_landing(nodes, editor.as_data(), count_tokens=len, **common) is None


# --------------------------------------------------------------------------- landing live


def test_a_completed_turn_lands_and_equals_a_replay_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path, ON) as d:
        d.record_openai(work_turn(0))
        d.record_openai(work_turn(1))
        assert d.wait_for_turns(60)
        first, second = d.turns()
        assert (first.turn, first.status, second.status) == (1, "landed", "landed")
        assert (first.nodes_before, first.nodes_after) == (5, 3)
        assert first.tokens_after is not None and first.tokens_before is not None
        assert first.tokens_after < first.tokens_before
        assert first.checkpoint is not None and first.checkpoint.startswith("t")
        entry = d.archive[first.checkpoint]
        assert set(BUCKETS) <= set(entry) and len(entry["tool_results"]) == 2
        live = to_openai(d.session)
        assert live == replayed(d) and orphan_calls(live) == []
        assert [m["role"] for m in live[:3]] == ["user", "assistant", "assistant"]
        archive = dict(d.archive)
    with Dashr.open(path, ON) as again:
        assert to_openai(again.session) == live
        assert dict(again.archive) == archive
        assert again.wait_for_turns(60)
        assert landed(again) == [1, 2]  # nothing runs twice


TURN_SHAPES = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 40), st.booleans()), min_size=1, max_size=4
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TURN_SHAPES, st.integers(1, 3))
def test_any_landing_keeps_the_request_valid_and_replayable(
    steps: list[tuple[int, int, bool]], turns: int
) -> None:
    with Dashr.create(in_memory=True, config=ON) as d:
        for t in range(turns):
            d.session.begin_turn()
            d.record_openai({"role": "user", "content": f"Request {t}."})
            for k, (calls, lines, talk) in enumerate(steps):
                d.session.begin_step()
                ids = [f"t{t}s{k}c{c}" for c in range(calls)]
                d.record_openai(
                    {
                        "role": "assistant",
                        "content": f"Step {k}." if talk else "",
                        "tool_calls": [
                            {
                                "id": i,
                                "type": "function",
                                "function": {"name": "bash", "arguments": "{}"},
                            }
                            for i in ids
                        ],
                    }
                    if ids
                    else {"role": "assistant", "content": f"Note {k}: " + "z" * lines}
                )
                for i in ids:
                    d.record_openai({"role": "tool", "tool_call_id": i, "content": "y\n" * lines})
                d.session.end_step()
            d.session.begin_step()
            d.record_openai({"role": "assistant", "content": f"Done {t}."})
            d.session.end_step()
            d.end_turn()
        assert d.wait_for_turns(60)
        records = d.turns()
        assert [r.turn for r in records] == list(range(1, turns + 1))
        assert all(r.status in ("landed", "no-op") for r in records)
        live = to_openai(d.session)
        assert live == replayed(d)
        assert orphan_calls(live) == []
        assert live[0] == {"role": "user", "content": "Request 0."}


# --------------------------------------------------------------------------- the jobs


def test_a_turn_without_assistant_text_or_too_small_is_a_noop(tmp_path: Path) -> None:
    def refuse(nodes: Sequence[TurnNode]) -> None:
        raise AssertionError("no compressor runs for a no-op")

    with Dashr.create(tmp_path / "s.jsonl", ON.with_changes(turn_min_tokens=10_000)) as d:
        d.turn_compressor = refuse
        d.session.begin_turn()
        d.record_openai({"role": "user", "content": "List the files."})
        d.session.begin_step()
        d.record_openai({"role": "assistant", "content": "", "tool_calls": [call("a0", "ls")]})
        d.record_openai({"role": "tool", "tool_call_id": "a0", "content": "a.py\nb.py"})
        d.session.end_step()
        d.end_turn()
        d.session.begin_turn()
        d.record_openai(
            [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
        )
        d.end_turn()
        assert d.wait_for_turns(60)
        silent, small = d.turns()
        assert (silent.status, silent.reason) == ("no-op", "the turn has no assistant text")
        assert small.status == "no-op" and small.reason is not None
        assert small.reason.startswith("below turn_min_tokens (") and "10,000" in small.reason
        assert small.nodes_before == small.nodes_after == 2
        assert turn_passes(d) == []


def test_a_failing_compressor_closes_the_job_as_failed_and_leaves_the_surface(
    tmp_path: Path,
) -> None:
    def broken(nodes: Sequence[TurnNode]) -> TurnEditor:
        raise RuntimeError("model unreachable")

    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.turn_compressor = broken
        d.record_openai(work_turn(0))
        before = list(d.session.surface)
        assert d.wait_for_turns(60)
        (record,) = d.turns()
        assert (record.status, record.reason) == ("failed", "RuntimeError: model unreachable")
        assert list(d.session.surface) == before


def test_activation_boundary_turns_completed_while_off_are_never_backfilled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        d.record_openai(work_turn(0))
        d.record_openai(work_turn(1))
        assert d.turns() == ()
        d.config = d.config.with_changes(turn_memory=True, turn_min_tokens=50)
        d.record_openai(work_turn(2))
        assert d.wait_for_turns(60)
        assert [(r.turn, r.status) for r in d.turns()] == [(3, "landed")]
    with Dashr.open(path) as again:
        assert again.wait_for_turns(60)
        assert landed(again) == [3]
    old = tmp_path / "old.jsonl"
    with Dashr.create(old) as d:
        d.record_openai(work_turn(0))
    with Dashr.open(old, ON) as d:
        assert d.wait_for_turns(60) and d.turns() == () and turn_passes(d) == []


def test_a_turn_completing_while_a_job_runs_is_queued_and_runs_next(tmp_path: Path) -> None:
    gate = Gate()
    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.turn_compressor = gate
        d.record_openai(work_turn(0))
        assert gate.entered.wait(60)
        d.record_openai(work_turn(1))
        second = tuple(n.seq for n in turn_nodes(d.session, 2))
        assert [r.status for r in d.turns()] == ["pending", "pending"]
        assert not d.wait_for_turns(timeout=0.05)  # the first job is held: not done
        assert len(gate.calls) == 1  # one job at a time
        gate.release.set()
        assert d.wait_for_turns(60)
        assert [r.status for r in d.turns()] == ["landed", "landed"]
        assert landed(d) == [1, 2]
        assert gate.calls[1] == second  # the second job read turn 2 when it started
        assert to_openai(d.session) == replayed(d)


def test_a_pressure_pass_waits_for_the_landing_in_flight(tmp_path: Path) -> None:
    gate = Gate()
    config = ON.with_changes(recency_window_tokens=1_500, retain_tokens=300, max_summary_tokens=256)
    with Dashr.create(
        tmp_path / "s.jsonl", config.with_changes(auto=False, turn_memory=False)
    ) as d:
        for i in range(2):
            d.record_openai(work_turn(i))  # turn memory off: these stay large
        d.config = config
        d.turn_compressor = gate
        d.record_openai(work_turn(2))
        assert gate.entered.wait(60)
        seen: dict[str, Any] = {}
        real = d.engine.before_request

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen["landed"] = 3 in landed(d)
            return real(*args, **kwargs)

        d.engine.before_request = spy  # type: ignore[method-assign]
        request = threading.Thread(target=d.request_messages)
        request.start()
        request.join(0.5)
        gate.release.set()
        request.join(60)
        assert seen == {"landed": True}  # the pass began only once turn 3 had landed
        assert d.checkpoints()
        assert orphan_calls(to_openai(d.session)) == []
        assert to_openai(d.session) == replayed(d)


def test_a_job_never_lands_while_a_session_pass_is_in_flight(tmp_path: Path) -> None:
    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d._pass_slot.compaction_id = "p-elsewhere"  # a pass summarizing on another thread
        d.record_openai(work_turn(0))
        assert not d.wait_for_turns(timeout=0.2)
        assert turn_passes(d) == [] and d.turns()[0].status == "pending"
        d._pass_slot.compaction_id = None
        assert d.wait_for_turns(60)
        assert landed(d) == [1]


def test_a_job_whose_turn_changed_meanwhile_is_skipped(tmp_path: Path) -> None:
    gate = Gate()
    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.turn_compressor = gate
        d.record_openai(work_turn(0))
        assert gate.entered.wait(60)
        first = d.session.surface[0]
        d.session.replace(
            first,
            first,
            {
                "role": "user",
                "source": {"kind": "user"},
                "content": [{"type": "text", "text": "Fix."}],
            },
            source_event_seqs=[first],
        )
        gate.release.set()
        assert d.wait_for_turns(60)
        (record,) = d.turns()
        assert record.status == "failed" and record.reason is not None
        assert record.reason.startswith("skipped: the turn's nodes changed")
        assert turn_passes(d) == []


def test_turns_and_wait_for_turns_and_close_leaves_the_rest_pending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    gate = Gate()
    d = Dashr.create(path, ON)
    d.turn_compressor = gate
    d.record_openai(work_turn(0))
    assert gate.entered.wait(60)
    d.record_openai(work_turn(1))
    assert not d.wait_for_turns(timeout=0.05)
    closing = threading.Thread(target=d.close)
    closing.start()
    gate.release.set()
    closing.join(60)
    assert not closing.is_alive()
    with Dashr.open(path, ON, read_only=True) as seen:
        assert [r.status for r in seen.turns()] == ["landed", "pending"]
    with Dashr.open(path, ON) as again:
        assert again.wait_for_turns(60)
        assert [r.status for r in again.turns()] == ["landed", "landed"]
        assert landed(again) == [1, 2]


@pytest.fixture
def no_threads_left() -> Iterator[None]:
    yield
    names = [t.name for t in threading.enumerate() if t.name.startswith("dashr-turn-memory")]
    assert names == []


def test_the_worker_thread_ends_when_the_queue_is_empty(
    tmp_path: Path, no_threads_left: None
) -> None:
    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.record_openai(work_turn(0))
        assert d.wait_for_turns(60)
        assert not d._turn_jobs.busy()
    for thread in threading.enumerate():
        if thread.name.startswith("dashr-turn-memory"):
            thread.join(60)


def test_a_capped_archive_rebuilt_from_the_log_evicts_what_the_live_one_did(
    tmp_path: Path,
) -> None:
    """Turn landings and session passes interleave; the cap evicts oldest first in both."""
    path = tmp_path / "s.jsonl"
    config = ON.with_changes(archive_max_bytes=9_000, retain_tokens=200, auto=False)
    with Dashr.create(path, config) as d:
        for i in range(6):
            d.record_openai(work_turn(i))
            assert d.wait_for_turns(60)
            if i in (2, 4):
                d.compact()
        live = list(d.archive.items())
        kinds = {key[0] for key, _ in live}
        assert {"t", "c"} <= kinds  # both writers wrote entries
        evicted = [k for k, v in live if v.get("evicted")]
        assert evicted and len(evicted) < len(live)
    with Dashr.open(path, config, read_only=True) as again:
        assert list(again.archive.items()) == live


def test_a_turn_landing_does_not_lift_a_session_pass_deferral(tmp_path: Path) -> None:
    """A guard refusal defers the next session pass; a turn landing's compaction/end is
    no session pass, so the deferral stays (and the refused pass is not retried)."""
    from helpers import ScriptedSummarizer, record_steps

    from dashr_ext import CompactionWarning

    config = ON.with_changes(context_window_tokens=10_000, retain_tokens=3_000)
    summarizer = ScriptedSummarizer(text="word " * 20_000)  # never smaller than its span
    with Dashr.create(tmp_path / "s.jsonl", config, summarizer=summarizer) as d:
        record_steps(d, 24, chars=1600, user="go")
        with pytest.warns(CompactionWarning, match="inflation guard"):
            d.request_messages()
        deferred = d.engine._deferred_until()
        assert deferred is not None
        d.end_turn()  # the harness marks turns from here on
        d.session.begin_turn()
        d.record_openai(work_turn(7))
        d.end_turn()
        assert d.wait_for_turns(60)
        assert [t.status for t in d.turns()][1] == "landed"  # (turn 1 ends on a tool node)
        assert d.engine._deferred_until() == deferred
        assert len(summarizer.requests) == 1


def test_a_turn_ending_on_a_tool_result_lands_with_its_last_pair_absorbed(
    tmp_path: Path,
) -> None:
    from dashr_ext import make_turn_compressor

    with Dashr.create(tmp_path / "s.jsonl", ON) as d:
        d.turn_compressor = make_turn_compressor("extractive")
        d.session.begin_turn()
        d.record_openai(work_turn(3)[:4])  # the request, two calls, their results; no answer
        d.end_turn()
        assert d.wait_for_turns(60)
        (record,) = d.turns()
        assert record.status == "landed", record.reason
        live = to_openai(d.session)
        assert live[-1]["role"] == "assistant" and orphan_calls(live) == []
        assert live == replayed(d)
