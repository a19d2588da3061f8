"""The pure parts of the benchmarks (bench/bench_recallable.py, bench_fidelity.py,
bench_prune.py), and the pruning bench run tiny on the corpus.

The token-prefix measure, the message rendering it relies on, the fact planting of the
handoff-fidelity probe, and the pruning bench's concatenation and newest-unit rule: if these
were wrong the recorded figures would be too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._payloads import POINTER_SOURCE

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_fidelity as fidelity  # noqa: E402
import bench_prune as prune_bench  # noqa: E402
import bench_recallable as recallable  # noqa: E402


def test_common_prefix_adds_the_shared_head_of_the_first_differing_message() -> None:
    a = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    b = [[1, 2, 3], [4, 5], [6, 7, 0], [10]]
    assert recallable.common_prefix(a, b) == (7, 5)


def test_common_prefix_of_identical_requests_is_their_length() -> None:
    a = [[1, 2], [3]]
    assert recallable.common_prefix(a, a) == (3, 3)
    assert recallable.common_prefix(a, [*a, [4, 5]]) == (3, 3)
    assert recallable.common_prefix([[9]], a) == (0, 0)


def test_render_message_differs_exactly_when_the_model_would_see_different_bytes() -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]
    base = {"role": "assistant", "content": "hi", "tool_calls": call}
    assert recallable.render_message(base) == recallable.render_message(dict(base))
    assert recallable.render_message(base).startswith("<|im_start|>assistant\nhi\n")
    assert '"arguments": "{}"' in recallable.render_message(base)
    other = {**base, "tool_calls": [{**call[0], "id": "c2"}]}
    assert recallable.render_message(base) != recallable.render_message(other)
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert recallable.render_message(parts) == "<|im_start|>user\nab<|im_end|>\n"
    tool = {"role": "tool", "content": "out", "tool_call_id": "c1"}
    assert recallable.render_message(tool).endswith("\ntool_call_id=c1<|im_end|>\n")


def test_request_tokens_caches_by_rendered_text() -> None:
    calls: list[str] = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return [len(text)]

    tokenize = recallable.RequestTokens(encode)
    messages = [{"role": "user", "content": "x"}, {"role": "user", "content": "x"}]
    assert tokenize(messages) == [[len("<|im_start|>user\nx<|im_end|>\n")]] * 2
    assert len(calls) == 1


def _session() -> list[dict[str, Any]]:
    call = {"id": "", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for i in range(6):
        out.append({"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"c{i}"}]})
        out.append({"role": "tool", "content": f"out {i}", "tool_call_id": f"c{i}"})
    out.append({"role": "assistant", "content": "done"})
    return out


def test_insertion_points_never_split_a_call_from_its_result() -> None:
    messages = _session()
    points = fidelity.insertion_points(messages)
    assert points == [2, 4, 6, 8, 10, 12, 14, 15]
    assert all(i == len(messages) or messages[i]["role"] != "tool" for i in points)


def test_plant_inserts_every_fact_and_update_in_order_and_keeps_tool_pairing() -> None:
    messages = _session()
    sizes = [10] * len(messages)
    planted = fidelity.plant(messages, sizes)
    texts = [m["content"] for m in planted if isinstance(m["content"], str)]
    for fact in fidelity.FACTS:
        at = texts.index(fact.text)
        if fact.update_text is not None:
            assert texts.index(fact.update_text) > at
    added = len(planted) - len(messages)
    users = sum(1 for f in fidelity.FACTS if f.role == "user")
    users += sum(1 for f in fidelity.FACTS if f.update_role == "user")
    updates = sum(1 for f in fidelity.FACTS if f.update_text is not None)
    assert added == len(fidelity.FACTS) + updates + users  # a user fact gets an ack
    for i, m in enumerate(planted):  # every tool result directly follows its call's message
        if m["role"] == "tool":
            j = i - 1
            while planted[j]["role"] == "tool":
                j -= 1
            ids = [c["id"] for c in planted[j].get("tool_calls") or []]
            assert m["tool_call_id"] in ids
    assert [m for m in planted if m not in messages or m["role"] == "tool"] != []
    originals = [m for m in planted if any(m is o for o in messages)]
    assert originals == messages


def test_spread_points_follow_the_token_shares() -> None:
    messages = _session()
    sizes = [0, 0] + [100] * 12 + [0]
    # 1200 tokens of steps: 10% is reached before message 4, 50% before message 8
    assert fidelity.spread_points(messages, sizes, 2, (0.1, 0.5)) == [4, 8]
    assert fidelity.spread_points(messages, sizes, 0, (0.1, 0.5)) == []


def test_literals_and_values_of_the_facts_are_distinct() -> None:
    values = fidelity.literals()
    assert (
        len(values)
        == len(set(values))
        == len(fidelity.FACTS) + sum(1 for f in fidelity.FACTS if f.new_value)
    )
    for fact in fidelity.FACTS:  # an update never repeats the value it supersedes
        if fact.update_text is not None:
            assert fact.value not in fact.update_text
            assert fact.new_value is not None and fact.new_value in fact.update_text
        assert fact.value in fact.text


def test_clashes_name_literals_already_in_the_session() -> None:
    messages = _session()
    assert fidelity.clashes(messages) == []
    messages.append({"role": "user", "content": "set RETRY_CAP=40 please"})
    assert fidelity.clashes(messages) == ["RETRY_CAP=40"]


def test_search_matches_reads_the_count_of_the_first_line() -> None:
    text = 'history_search "x" — 37 events scanned, 2 matched, showing 2\n1. seq 7 | 9 matched'
    assert fidelity.search_matches(text) == 2
    assert fidelity.search_matches('history_search "x" — no events\n3 matched') == 0


def test_presence_tells_checkpoints_from_the_tail() -> None:
    p = fidelity.presence("v7.3.19", "tag v7.3.19", "")
    assert (p.checkpoints, p.tail, p.anywhere) == (True, False, True)
    assert not fidelity.presence("v7.3.19", "", "v7.3.1").anywhere


def test_verdict_compares_each_count_in_its_own_direction() -> None:
    assert fidelity._compare(5, 4, higher_is_better=True) == "better"
    assert fidelity._compare(5, 4, higher_is_better=False) == "worse"
    assert fidelity._compare(4, 4, higher_is_better=False) == "equal"


def test_thirds_and_stub_share_of_pass_records() -> None:
    def record(i: int, stub: int) -> recallable.PassRecord:
        return recallable.PassRecord(
            index=i, passes=1, checkpoints=2, recorded_tokens=1000 * i, system_tokens=10,
            prefix_tokens=100, common_tokens=50 + i, common_whole_tokens=50,
            request_tokens=500, role_tokens={"stub": stub, "state": 40},
            role_counts={"stub": 1, "state": 1},
        )  # fmt: skip

    records = [record(i, 100 * i) for i in range(1, 8)]
    assert [len(g) for g in recallable.thirds(records)] == [2, 2, 3]
    assert records[0].kept == 0.51
    assert recallable.stub_share_text(records, 1000).endswith("; max 70.0%")
    assert recallable.stub_share_text([record(1, 0)], 1000) == "– (no stubs)"


def test_prune_bench_prefixes_tool_call_ids_of_calls_and_results_only() -> None:
    call = {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": "x", "tool_calls": [call]}
    result = {"role": "tool", "content": "ok", "tool_call_id": "call_2"}
    user = {"role": "user", "content": "call_2"}
    assert prune_bench.with_call_prefix(assistant, "s3-")["tool_calls"][0]["id"] == "s3-call_2"
    assert prune_bench.with_call_prefix(result, "s3-")["tool_call_id"] == "s3-call_2"
    assert prune_bench.with_call_prefix(user, "s3-") == user
    assert call["id"] == "call_2" and result["tool_call_id"] == "call_2"  # copies


def test_prune_bench_tools_are_the_union_by_name_first_wins() -> None:
    def tool(name: str, doc: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "description": doc}}

    sessions = [{"tools": [tool("bash", "a")]}, {"tools": [tool("bash", "b"), tool("fin", "c")]}]
    assert prune_bench.union_tools(sessions) == [tool("bash", "a"), tool("fin", "c")]
    assert prune_bench.union_tools([{}]) == []


def test_prune_bench_newest_unit_is_the_last_one_before_the_recall_pointer() -> None:
    # Large enough for the full form: a pointer message follows the checkpoint.
    config = CompactionConfig(recency_window_tokens=20_000, retain_tokens=1_000)
    with Dashr.create(in_memory=True, config=config) as d:
        for i in range(16):
            d.record_openai({"role": "user", "content": f"request {i} " + "word " * 1500})
            d.record_openai({"role": "assistant", "content": f"answer {i}"})
        d.record_openai({"role": "user", "content": "last " * 40})
        d.request_messages()
        s = d.session
        last = s.units()[-1]
        assert s.event(s.surface[last.start]).message.source_kind == POINTER_SOURCE
        unit = prune_bench.newest_unit(d)
        assert unit is not None and unit.end == last.start
        assert s.event(s.surface[unit.start]).message.text == "last " * 40
        measured = d.measure()
        assert prune_bench.unit_tokens(unit, measured) == measured.nodes[unit.start][1]
        assert prune_bench.unit_tokens(None, measured) == 0


def test_prune_bench_skips_an_absent_corpus(tmp_path: Path) -> None:
    assert prune_bench.corpus_files(corpus=tmp_path) == []
    assert prune_bench.run_once(quick=True, corpus=tmp_path) is None


@pytest.mark.corpus
def test_prune_bench_quick_run_measures_every_request_and_reports_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = prune_bench.corpus_files(quick=True)
    if not files:
        pytest.skip("../shared/corpus is absent")
    sessions = [json.loads(p.read_text(encoding="utf-8"))["messages"] for p in files]
    assistants = sum(m["role"] == "assistant" for ms in sessions for m in ms)
    closing = sum(ms[-1]["role"] != "assistant" for ms in sessions)
    run = prune_bench.run_once(quick=True)
    assert run is not None
    largest = run.concat[0].largest
    assert largest is not None and largest.tokens > 0
    assert largest.session in {prune_bench.session_name(p) for p in files}
    orders = ["corpus order"]
    if largest.session != prune_bench.session_name(files[-1]):
        orders.append(f"{largest.session} last")
    sides = prune_bench.sides()
    assert [(c.order, c.prune) for c in run.concat] == [(o, p) for o in orders for p in sides]
    for c in run.concat:
        assert c.sessions >= len(files) and c.corpus_sessions == len(files)
        assert c.messages >= sum(len(ms) for ms in sessions) - len(files) + 1  # one system kept
        assert c.tokens_before >= prune_bench.QUICK_TARGET_TOKENS > c.total_after > 0
        assert c.passes.summary_passes == 1 and c.passes.failed_passes == 0
        assert c.newest_unit_after <= c.total_after
    assert run.concat[0].passes.prune_passes == 0  # pruning off
    keys = [(w.window, w.prune) for w in run.windows]
    assert keys == [(w, p) for w, _ in prune_bench.WINDOWS for p in sides]
    for w in run.windows:
        assert (w.requests, w.closing_requests) == (assistants, closing)
        assert all(o.total > w.trigger for o in w.over)
        assert all(o.allowed == (o.newest_unit_tokens > w.trigger) for o in w.over)
    assert all(w.passes.pruned_nodes == 0 for w in run.windows if not w.prune)
    for p in [*(c.passes for c in run.concat), *(w.passes for w in run.windows)]:
        assert sum(p.pruned_roles.values()) == p.pruned_nodes
        assert set(p.pruned_roles) <= {"tool", "assistant", "user"}
    assert prune_bench.run_from_json(prune_bench.run_to_json(run)) == run

    assert prune_bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    off = run.concat[0]
    copies = f"{off.sessions} ({off.sessions / len(files):.2f} × {len(files)})"
    assert f"| corpus order | off | {copies} |" in out
    assert f"| {off.tokens_before:,} | {off.total_after:,} | {off.newest_unit_after:,} |" in out
    for w in run.windows:
        head = f"| {w.window // 1000}k / {w.retain // 1000}k | {prune_bench._side(w.prune)} |"
        assert f"{head} {w.requests:,} | {len(w.above())} (" in out
    assert f"Largest single message: {largest.tokens:,} tokens, {largest.session}" in out
