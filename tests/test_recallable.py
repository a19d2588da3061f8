"""The recallable engine: stubs, state, concurrency, failures, resume, rollup (SPEC §6.3)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, orphan_results
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext import CompactionConfig, CompactionWarning, Dashr
from dashr_ext._compaction.chunking import chunk_region
from dashr_ext._formats.openai import to_openai
from dashr_ext._payloads import summary_payload
from dashr_ext.errors import ConfigError, SummarizerError
from dashr_ext.testing import ScriptedServer, chat_completion, slow

CONFIG = CompactionConfig(
    engine="recallable",
    recency_window_tokens=6000,
    retain_tokens=1500,
    chunk_tokens=1024,
    stub_tokens=96,
    state_max_tokens=512,
)


def turn(i: int, lines: int = 30) -> list[dict[str, Any]]:
    """One realistic turn: a request, a run_cell call, its output, a final answer."""
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {
            "name": "run_cell",
            "arguments": json.dumps(
                {"code": f"result_{i} = check_module_{i}()\nprint(result_{i})"}
            ),
        },
    }
    output = "\n".join(
        f"line {k}: module_{i} value={i * 100 + k} status=ok path=src/pkg_{i}/mod_{k}.py"
        for k in range(lines)
    )
    return [
        {"role": "user", "content": f"Please check module {i} and report its value (task {i})."},
        {"role": "assistant", "content": f"Checking module {i}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
        {
            "role": "assistant",
            "content": f"Module {i} is fine; the marker for this turn is PLANT{i:04d}QX.",
        },
    ]


def surface_classes(d: Dashr) -> list[str]:
    """The role of every surface node: a checkpoint class, or '-' for plain history."""
    by_node = {cp.node_seq: cp.role for cp in d.checkpoints() if cp.superseded_by is None}
    return [by_node.get(q, "-") for q in d.session.surface]


def assert_layout(d: Dashr) -> None:
    """``[stubs…][state][tail]``: index nodes first, one state, then plain history."""
    classes = surface_classes(d)
    k = 0
    while k < len(classes) and classes[k] in ("stub", "directory"):
        k += 1
    assert k < len(classes) and classes[k] == "state", classes
    assert all(c == "-" for c in classes[k + 1 :]), classes
    index = classes[:k]  # directories (oldest rollups) first, then the stubs
    assert index == sorted(index, key=lambda c: c != "directory"), classes


def run_session(
    d: Dashr, turns: int, on_pass: Any = None, start: int = 0
) -> list[list[dict[str, Any]]]:
    """Record ``turns`` turns, asking for the request before every model call."""
    requests = []
    for i in range(start, start + turns):
        for message in turn(i):
            d.record_openai(message)
            if message["role"] in ("user", "tool"):
                before = len(d.checkpoints())
                pre = to_openai(d.session)
                request = d.request_messages()
                requests.append(request)
                if len(d.checkpoints()) != before and on_pass is not None:
                    on_pass(pre, request)
    return requests


# ----------------------------------------------------------------------------- chunking


def test_chunking_prefers_turn_starts_and_leaves_a_small_trailing_slice() -> None:
    tokens = [100] * 40
    allowed = list(range(0, 41))
    turn_starts = set(range(0, 40, 4))
    result = chunk_region(allowed, tokens, 0, 40, 2000, turn_starts)
    assert result.trailing == (36, 39)  # the last turn: 400 tokens, under a quarter chunk
    assert result.chunks == ((0, 19), (20, 35))
    # a last turn above a quarter chunk: only its last unit is the trailing slice
    assert chunk_region(allowed, tokens, 0, 40, 1000, turn_starts).trailing == (39, 39)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 900), min_size=1, max_size=60),
    st.data(),
)
def test_chunks_tile_the_region_on_allowed_cuts(sizes: list[int], data: Any) -> None:
    n = len(sizes)
    inner = data.draw(st.sets(st.integers(1, max(1, n - 1))))
    allowed = sorted({0, n} | {k for k in inner if 0 < k < n})
    turn_starts = data.draw(st.sets(st.sampled_from(allowed)))
    chunk = data.draw(st.integers(256, 3000))
    result = chunk_region(allowed, sizes, 0, n, chunk, turn_starts)
    regions = [*result.chunks, result.trailing]
    assert regions[0][0] == 0 and regions[-1][1] == n - 1
    for (a, b), (c, _d) in itertools.pairwise(regions):
        assert b + 1 == c and a <= b
        assert c in allowed
    for a, b in result.chunks:  # a chunk overflows only when one unit alone is larger
        units = [k for k in allowed if a < k <= b]
        if sum(sizes[a : b + 1]) > chunk * 1.25:
            assert not units or sum(sizes[a : units[0]]) > chunk or len(result.chunks) >= 1


def test_recallable_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="chunk_tokens: expected at least 2 × state_max_tokens"):
        CompactionConfig(engine="recallable", chunk_tokens=1000, state_max_tokens=1024)
    with pytest.raises(ConfigError, match=r"stub_tokens: expected at most 0\.125 × chunk_tokens"):
        CompactionConfig(
            engine="recallable", chunk_tokens=1024, stub_tokens=200, state_max_tokens=256
        )
    with pytest.raises(ConfigError, match=r"stub_region_ratio: expected a number in \(0, 0.5\]"):
        CompactionConfig(stub_region_ratio=0.75)


# ----------------------------------------------------------------------------- the layout


def test_long_session_keeps_stubs_frozen_and_the_layout_after_every_pass(tmp_path: Path) -> None:
    target = tmp_path / "s.jsonl"
    passes: list[tuple[list[str], list[str]]] = []
    committed_text: dict[str, str] = {}

    with Dashr.create(target, CONFIG, durability="flush") as d:

        def on_pass(pre: list[dict[str, Any]], request: list[dict[str, Any]]) -> None:
            assert_layout(d)
            classes = surface_classes(d)
            ids = [cp.id for cp in d.checkpoints() if cp.superseded_by is None]
            stubs = [
                i for i, c in zip(ids, [r for r in classes if r != "-"], strict=True) if c == "stub"
            ]
            for cp in d.checkpoints():
                text = d.session.event(cp.node_seq).message.text
                assert committed_text.setdefault(cp.id, text) == text
            # the stubs before the pass are still the request's first messages, unchanged
            old = [
                m
                for m in pre[1:]
                if m["role"] == "user"
                and "<compacted-summary>" in str(m["content"])
                and "This is a condensed record" not in str(m["content"])
            ]
            if not any(cp.role == "directory" for cp in d.checkpoints()):
                assert request[1 : 1 + len(old)] == old
            passes.append((stubs, classes))
            assert not orphan_results(request)

        run_session(d, 40, on_pass)
        checkpoints = d.checkpoints()
        stub_nodes = {cp.node_seq for cp in checkpoints if cp.role == "stub"}
        for cp in checkpoints:
            if cp.role != "directory":  # only a rollup ever shadows a committed stub
                assert not stub_nodes & set(cp.shadowed_seqs), cp.id
        live = (list(d.session.surface), to_openai(d.session), dict(d.archive))
        states = [cp for cp in checkpoints if cp.role == "state"]
        assert len(passes) >= 4 and len(states) == len(passes)
        for cp in states:  # the state records the wider range it was written from
            data = d.session.event(cp.summary_seq).data
            assert data["inputRange"]["start"] < data["shadowedRange"]["start"]
            assert data["inputRange"]["end"] == data["shadowedRange"]["end"]
        assert sum(1 for cp in checkpoints if cp.role == "stub") >= 2 * len(passes)
        # every planted marker is still found, also those only a superseded state shadowed
        owners = {}
        for i in range(40):
            found = d.history_search(f"PLANT{i:04d}QX")
            assert "matched 0" not in found, i
            owners[i] = re.findall(r"\| (c\d+|\(visible\)) \|", found)
        # the two-hop pin: what only a superseded state checkpoint shadowed is still found
        superseded = [cp for cp in states if cp.superseded_by is not None]
        assert superseded
        for cp in superseded:
            text = d.session.event(cp.shadowed_seqs[0]).message.text
            found = d.history_search(text)
            assert f"| shadowed | {cp.id} |" in found, (cp.id, found)
            page = d.history_read(checkpoint=cp.superseded_by)
            assert f"Checkpoint {cp.id} (seq {cp.node_seq}): [prior state checkpoint]" in page
    with Dashr.open(target, CONFIG, read_only=True) as again:
        assert list(again.session.surface) == live[0]
        assert to_openai(again.session) == live[1]
        assert dict(again.archive) == live[2]


def test_state_request_merges_the_previous_state_and_stubs_read_the_index(tmp_path: Path) -> None:
    summarizer = ScriptedSummarizer(text="Did things.\nKeywords: values: 42")
    with Dashr.create(tmp_path / "s.jsonl", CONFIG, summarizer=summarizer) as d:
        run_session(d, 16)
        states = [r for r in summarizer.requests if r.mode == "state"]
        stubs = [r for r in summarizer.requests if r.mode == "stub"]
        assert len(states) >= 2 and stubs
        assert states[0].previous_summary is None
        assert states[1].previous_summary == "Did things.\nKeywords: values: 42"
        later = [r for r in stubs if r.index_keywords]
        assert later and later[-1].index_keywords[0] == "values: 42"
        assert all(r.max_summary_tokens == CONFIG.stub_tokens for r in stubs)
        # the state gets its cap minus the framing, footer, marker and pointer around it
        assert all(64 <= r.max_summary_tokens < CONFIG.state_budget for r in states)
        for r in stubs:  # the stub never summarizes a checkpoint (the old state is background)
            assert all(e.message.source_kind != "compact-checkpoint" for e in r.span)


# ----------------------------------------------------------------------------- rollup


def test_rollup_bounds_the_stub_region_and_keeps_every_id_a_recall_target(
    tmp_path: Path,
) -> None:
    config = CONFIG.with_changes(stub_region_ratio=0.4)
    cap = int(0.4 * config.trigger_tokens)
    target = tmp_path / "s.jsonl"
    with Dashr.create(target, config, durability="flush") as d:
        sizes = []
        appended = []

        def on_pass(pre: Any, request: Any) -> None:
            assert_layout(d)
            directories = [m for m in pre if "Index of earlier checkpoints" in str(m["content"])]
            at = pre.index(directories[0]) if directories else 0
            if directories and request[: at + len(directories)] == pre[: at + len(directories)]:
                now = [m for m in request if "Index of earlier checkpoints" in str(m["content"])]
                if len(now) > len(directories):
                    appended.append(len(now))  # a rollup that kept the prefix before it
            nodes = dict(d.measure().nodes)
            classes = surface_classes(d)
            index = [
                q
                for q, c in zip(d.session.surface, classes, strict=True)
                if c in ("stub", "directory")
            ]
            sizes.append(sum(nodes[q] for q in index))

        run_session(d, 60, on_pass)
        directories = [cp for cp in d.checkpoints() if cp.role == "directory"]
        assert directories, "the session was long enough to roll up"
        assert appended, "a later rollup appended a directory after the first"
        assert max(sizes) <= cap + 2 * 400  # at most one pass's new stubs above the cap
        assert sizes[-1] <= cap + 2 * 400
        rolled = [cp for cp in d.checkpoints() if cp.role == "stub" and cp.superseded_by]
        assert rolled
        directory_text = d.session.event(directories[-1].node_seq).message.text
        for cp in rolled:
            assert f'history_read("{cp.id}")' in directory_text or f"{cp.id} #" in directory_text
            page = d.history_read(checkpoint=cp.id)
            assert page.startswith(f"history_read checkpoint {cp.id}")
            first = d.session.event(cp.shadowed_seqs[0])
            word = (first.message.text or "value").split()[0]
            assert "matched 0" not in d.history_search(word, checkpoint=cp.id)
        live = (to_openai(d.session), dict(d.archive))
    with Dashr.open(target, config, read_only=True) as again:
        assert to_openai(again.session) == live[0]
        assert dict(again.archive) == live[1]


# ----------------------------------------------------------------------------- concurrency


def test_stub_calls_run_concurrently_and_commit_left_to_right(tmp_path: Path) -> None:
    latency = 1.0
    calls = {"n": 0}

    def responder(request: Any) -> Any:
        calls["n"] += 1
        # the first call is the slowest: calls finish in reverse order
        return slow(
            chat_completion(f"Part {calls['n']}.\nKeywords: ids: part{calls['n']}"),
            latency * (1.5 - 0.1 * calls["n"]),
        )

    config = CONFIG.with_changes(auto=False)
    with (
        ScriptedServer(summarizer=responder) as server,
        Dashr.create(tmp_path / "s.jsonl", config, summarizer=_llm(server)) as d,
    ):
        run_session(d, 10)
        started = time.monotonic()
        result = d.compact()
        elapsed = time.monotonic() - started
    assert result is not None
    k = len(result.checkpoints)
    assert k >= 4  # several stubs and the state
    assert elapsed < 2 * 1.5 * latency, (elapsed, k)  # not k × latency
    seqs = [int(c[1:]) for c in result.checkpoints]
    assert seqs == sorted(seqs)  # left to right, whatever order the calls finished in
    positions = [d.session.surface.index(d.session.event(s + 1).seq) for s in seqs]
    assert positions == sorted(positions)


def test_a_pass_of_k_stubs_takes_about_one_call_not_k(tmp_path: Path) -> None:
    latency = 1.5  # long against the pass's own work, so a loaded machine cannot tip it

    def responder(request: Any) -> Any:
        return slow(chat_completion("Checked modules.\nKeywords: ids: part"), latency)

    config = CONFIG.with_changes(auto=False)
    with (
        ScriptedServer(summarizer=responder) as server,
        Dashr.create(tmp_path / "s.jsonl", config, summarizer=_llm(server)) as d,
    ):
        run_session(d, 10)
        started = time.monotonic()
        result = d.compact()
        elapsed = time.monotonic() - started
        calls = len(server.compaction_requests)
    assert result is not None and calls == len(result.checkpoints) >= 4
    assert elapsed < 2 * latency, (elapsed, calls)  # k calls at once, not k × latency


def _llm(server: ScriptedServer) -> Any:
    from dashr_ext import LLMSummarizer

    return LLMSummarizer(base_url=server.base_url, model="m", api_key="k", max_retries=0)


# ----------------------------------------------------------------------------- failures


class FailingStubs(ScriptedSummarizer):
    def __init__(self, fail_modes: tuple[str, ...], which: int | None = None) -> None:
        super().__init__(text="Work.\nKeywords: values: 1")
        self.fail_modes = fail_modes
        self.which = which
        self.stub_calls = 0

    def summarize(self, request: Any) -> Any:
        if request.mode == "stub":
            self.stub_calls += 1
            if "stub" in self.fail_modes and (self.which is None or self.stub_calls == self.which):
                raise SummarizerError("stub endpoint down")
        if request.mode == "state" and "state" in self.fail_modes:
            raise SummarizerError("state endpoint down")
        return super().summarize(request)


def test_a_failed_stub_becomes_a_pointer_stub_and_the_pass_commits(tmp_path: Path) -> None:
    summarizer = FailingStubs(("stub",), which=1)
    with Dashr.create(
        tmp_path / "s.jsonl", CONFIG.with_changes(auto=False), summarizer=summarizer
    ) as d:
        run_session(d, 10)
        result = d.compact()
        assert result is not None
        first = summary_payload(d.session.event(int(result.checkpoints[0][1:])))
        assert first["summarizer"]["kind"] == "code"
        assert first["summary"].startswith("No summary was written for this part (")
        assert_layout(d)


def test_a_failed_state_commits_nothing_and_the_turn_continues(tmp_path: Path) -> None:
    summarizer = FailingStubs(("state",))
    with Dashr.create(tmp_path / "s.jsonl", CONFIG, summarizer=summarizer) as d:
        with pytest.warns(CompactionWarning, match="state endpoint down"):
            run_session(d, 10)
        assert d.checkpoints() == []
        ends = [e for e in d.session.events if e.type == "compaction/end"]
        assert ends and all("state endpoint down" in e.data["error"] for e in ends)


def test_guard_failure_commits_nothing_and_defers_until_more_history(tmp_path: Path) -> None:
    huge = ScriptedSummarizer(text="word " * 9000)  # larger than anything it condenses

    def starts() -> int:
        return sum(1 for e in d.session.events if e.type == "compaction/start")

    with Dashr.create(tmp_path / "s.jsonl", CONFIG, summarizer=huge) as d:
        for i in range(12):
            for message in turn(i):
                d.record_openai(message)
        with pytest.warns(CompactionWarning, match="inflation guard"):
            d.request_messages()
        assert d.checkpoints() == [] and starts() == 1
        end = [e for e in d.session.events if e.type == "compaction/end"][-1]
        deferred = end.data["deferredStaleTokens"]
        assert deferred > CONFIG.trigger_tokens - CONFIG.retain_budget - 1000
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no new attempt, so no new warning
            d.request_messages()
            d.record_openai({"role": "user", "content": "tiny"})
            d.request_messages()
        assert starts() == 1
        for i in range(12, 16):
            for message in turn(i):
                d.record_openai(message)
        with pytest.warns(CompactionWarning, match="inflation guard"):
            d.request_messages()
        assert starts() == 2 and d.checkpoints() == []


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, json
    sys.path.insert(0, {tests!r})
    from test_recallable import CONFIG, turn
    from dashr_ext import Dashr
    from dashr_ext._session import Session

    real = Session.append
    count = {{"n": 0}}

    def append(self, specs, **kwargs):
        if any(s.type == "compaction/summary" for s in specs):
            count["n"] += 1
            if count["n"] == 3:  # two regions committed, the third never lands
                os.kill(os.getpid(), signal.SIGKILL)
        return real(self, specs, **kwargs)

    Session.append = append
    d = Dashr.create({path!r}, CONFIG.with_changes(auto=False), durability="fsync")
    for i in range(10):
        for m in turn(i):
            d.record_openai(m)
    d.compact()
    """
)


def test_kill_between_region_commits_is_completed_by_the_next_request(tmp_path: Path) -> None:
    target = tmp_path / "s.jsonl"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), path=str(target))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = Dashr.open(target, CONFIG)
    with d:
        classes = surface_classes(d)
        assert classes[:2] == ["stub", "stub"] and "state" not in classes
        d.request_messages()
        assert_layout(d)
        resumed = [
            e for e in d.session.events if e.type == "compaction/summary" and e.data.get("resumes")
        ]
        assert resumed and resumed[-1].data["checkpointClass"] == "state"
        live = to_openai(d.session)
    with Dashr.open(target, CONFIG, read_only=True) as again:
        assert to_openai(again.session) == live
        assert_layout(again)


# ----------------------------------------------------------------------------- adoption


def test_a_summary_engine_session_switched_to_recallable_adopts_its_checkpoint(
    tmp_path: Path,
) -> None:
    target = tmp_path / "s.jsonl"
    summary_config = CONFIG.with_changes(engine="summary", max_summary_tokens=600)
    with Dashr.create(target, summary_config) as d:
        run_session(d, 8)
        (head,) = [cp for cp in d.checkpoints() if cp.superseded_by is None]
        head_summary = summary_payload(d.session.event(head.summary_seq))["summary"]
    summarizer = ScriptedSummarizer(text="Merged.\nKeywords: values: 3")
    with Dashr.open(target, CONFIG, summarizer=summarizer) as d:
        run_session(d, 8, start=8)
        states = [r for r in summarizer.requests if r.mode == "state"]
        assert states[0].previous_summary == head_summary
        assert_layout(d)
        adopted = next(cp for cp in d.checkpoints() if cp.id == head.id)
        assert adopted.superseded_by is not None
        assert next(c for c in d.checkpoints() if c.id == adopted.superseded_by).role == "stub"


def test_unset_recallable_sizes_follow_the_window() -> None:
    window = CompactionConfig(engine="recallable", recency_window_tokens=20000, retain_tokens=6000)
    assert (window.state_budget, window.chunk_budget, window.stub_budget) == (1250, 3500, 160)
    large = CompactionConfig(engine="recallable")  # 128k: threshold 102,400
    assert (large.state_budget, large.chunk_budget, large.stub_budget) == (4096, 8192, 160)
    small = CompactionConfig(engine="recallable", recency_window_tokens=6000, retain_tokens=1500)
    assert (small.state_budget, small.chunk_budget, small.stub_budget) == (512, 1125, 140)
    assert CONFIG.chunk_budget == 1024 and CONFIG.stub_budget == 96  # set values win
    with pytest.raises(ConfigError, match="chunk_tokens: expected at least 2 × state_max_tokens"):
        CompactionConfig(engine="recallable", chunk_tokens=3000)  # auto state 4096 → floor 8192


def recall_step(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"recall_{i}",
        "type": "function",
        "function": {"name": "history_search", "arguments": json.dumps({"query": f"q{i}"})},
    }
    found = "\n".join(f"{k}. seq {k} | shadowed | c9 | old text {i}-{k}" for k in range(60))
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"recall_{i}", "content": found},
    ]


def test_a_chunk_of_recalled_history_gets_a_code_only_stub(tmp_path: Path) -> None:
    summarizer = ScriptedSummarizer(text="Work.\nKeywords: values: 1")
    config = CONFIG.with_changes(auto=False)
    with Dashr.create(tmp_path / "s.jsonl", config, summarizer=summarizer) as d:
        for message in turn(0):
            d.record_openai(message)
        d.record_openai({"role": "user", "content": "What did the old runs say?"})
        for i in range(6):
            for message in recall_step(i):
                d.record_openai(message)
        d.record_openai({"role": "assistant", "content": "They said nothing new."})
        for i in range(1, 4):
            for message in turn(i):
                d.record_openai(message)
        result = d.compact()
        assert result is not None
        kinds = {}
        for cid in result.checkpoints[:-1]:
            data = d.session.event(int(cid[1:])).data
            kinds[cid] = (data["summarizer"]["kind"], data["summary"])
        recalled = [k for k, (kind, text) in kinds.items() if kind == "code"]
        assert recalled, kinds
        for cid in recalled:
            assert kinds[cid][1].startswith("Recalled earlier history")
        stub_spans = [r.span for r in summarizer.requests if r.mode == "stub"]
        assert all(  # no model call was spent on recalled content alone
            any(e.message.tool_name != "history_search" for e in span) for span in stub_spans
        )


def test_a_state_checkpoint_previews_its_current_state() -> None:
    from dashr_ext._checkpoints import summary_preview

    state = "## Goal\n- Fix the tests.\n\n## Current State\n- Suite green: 44 passed.\n"
    assert summary_preview(state) == "Suite green: 44 passed."


def test_a_rollup_appends_after_earlier_directories_and_merges_them_only_when_large() -> None:
    from dashr_ext._compaction.rollup import DirectoryEntry, plan_rollup

    def entries(k: int) -> list[DirectoryEntry]:
        return [DirectoryEntry(f"c{100 + k}", 10 * k, 10 * k + 9, 5, 900, f"ids: name{k}")]

    def count(text: str) -> int:
        return len(text) // 4

    stubs = ["stub"] * 8
    assert plan_rollup(stubs, [100] * 8, entries, 1000, count) is None  # under the cap
    first = plan_rollup(stubs, [200] * 8, entries, 1000, count)
    assert first is not None and first.start == 0 and first.end >= 2
    # with a directory at the head, the next rollup goes right after it
    roles = ["directory", *stubs]
    later = plan_rollup(roles, [150, *[200] * 8], entries, 1000, count)
    assert later is not None and later.start == 1
    assert [e.checkpoint for e in later.entries] == [f"c{100 + k}" for k in range(1, later.end)]
    # directories over half the share are merged into one, with the oldest stubs
    merged = plan_rollup(
        ["directory", "directory", *stubs], [300, 300, *[200] * 8], entries, 1000, count
    )
    assert merged is not None and merged.start == 0


def test_recallable_passes_are_one_round_of_calls_however_much_is_stale() -> None:
    config = CONFIG.with_changes(auto=False)
    summarizer = ScriptedSummarizer(text="Work.\nKeywords: values: 1")
    from dashr_ext._compaction.summarize import MAX_CONCURRENT_SUMMARIES

    with Dashr.create(in_memory=True, config=config, summarizer=summarizer) as d:
        for i in range(120):  # ~70k tokens stale: 70 chunks of chunk_tokens=1024
            for message in turn(i):
                d.record_openai(message)
        result = d.compact()
    assert result is not None
    assert len(result.checkpoints) <= MAX_CONCURRENT_SUMMARIES
    assert len(summarizer.requests) <= MAX_CONCURRENT_SUMMARIES
