"""Why a request is still above the trigger after a pass: one exact line per cause."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import append_context, record_steps

from dashr_ext import CompactionConfig, Dashr, TokenMeter
from dashr_ext._compaction.prune import PrunedNode, PruneResult
from dashr_ext._compaction.report import pruned_names, still_above

WINDOW = dict(context_window_tokens=100_000, recency_window_tokens=20_000, retain_tokens=3_000)
HEAD = "the request is still above the trigger: "


def make(tmp_path: Path, clock: Any, system_prompt: str | None = None, **cfg: Any) -> Dashr:
    return Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(**{**WINDOW, **cfg}),
        system_prompt=system_prompt,
        meter=TokenMeter("chars"),
        clock=clock,
    )


def line(d: Dashr) -> str | None:
    return still_above(d.session, d.measure(), d.config, count_tokens=d.meter.count_text)


def call(i: int, arguments: str = "{}", name: str = "bash") -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def numbered(lines: int, width: int = 60) -> str:
    return "\n".join(f"{n:06d} " + "x" * width for n in range(1, lines + 1))


def surface_seq(d: Dashr, text: str) -> int:
    return next(e.seq for e in d.session.surface_events() if e.message.text == text)


def tokens_of(d: Dashr, seq: int) -> int:
    return dict(d.measure().nodes)[seq]


def test_nothing_is_said_at_or_under_the_trigger(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, auto=False)
    record_steps(d, 3, chars=800, user="go")
    measured = d.measure()
    at = replace(measured, total=d.config.trigger_tokens)
    over = replace(measured, total=d.config.trigger_tokens + 1)
    count = d.meter.count_text
    assert still_above(d.session, at, d.config, count_tokens=count) is None
    text = still_above(d.session, over, d.config, count_tokens=count)
    assert text is not None and text.startswith(
        HEAD + "~20,001 tokens, 1.0× the trigger (20,000) and 20% of the context window (100,000); "
    )


def test_a_newest_call_with_huge_arguments_is_named_with_why_pruning_cannot_shrink_it(
    tmp_path: Path, clock: Any
) -> None:
    # The unprunable newest unit: an assistant message whose text is short and whose tool
    # call carries the bulk (a file write). Pruning keeps calls, so nothing can shrink it.
    d = make(tmp_path, clock, context_window_tokens=25_000, recency_window_tokens=None)
    record_steps(d, 20, chars=1200, user="Write the fixture.")
    arguments = json.dumps({"path": "fixture.txt", "content": "y" * 120_000})
    d.record_openai(
        {"role": "assistant", "content": "Writing it.", "tool_calls": [call(99, arguments)]}
    )
    result = d.compact()
    assert result is not None and d.last_prune is None  # a summary pass ran, pruning could not
    seq = surface_seq(d, "Writing it.")
    total, unit = d.measure().total, tokens_of(d, seq)
    assert unit > d.config.trigger_tokens
    assert line(d) == (
        f"{HEAD}~{total:,} tokens, {total / 20_000:.1f}× the trigger (20,000) and "
        f"{total / 25_000:.1f}× the context window (25,000); the newest unit alone, the "
        f"assistant message at seq {seq}, is ~{unit:,} tokens and cannot shrink: pruning keeps "
        f"its tool calls ({len(arguments):,} chars of arguments) and its text is only 11 chars"
    )
    assert total > 25_000  # the case of the issue: still above the window itself


def test_a_newest_step_of_many_outputs_under_the_threshold_names_its_seqs_and_largest(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, auto=False)
    d.record_openai({"role": "user", "content": "Read every module."})
    calls = [call(i) for i in range(12)]
    d.record_openai({"role": "assistant", "content": "Reading all of them.", "tool_calls": calls})
    outputs = [numbered(118 + i) for i in range(12)]  # ~2,000 tokens each, threshold 2,500
    for i, text in enumerate(outputs):
        d.record_openai({"role": "tool", "tool_call_id": f"call_{i}", "content": text})
    first = surface_seq(d, "Reading all of them.")
    largest = surface_seq(d, outputs[-1])
    seqs = [s for s, _t in d.measure().nodes if s >= first]
    unit = sum(t for s, t in d.measure().nodes if s >= first)
    text = line(d)
    assert text is not None and text.split("; ", 1)[1] == (
        f"the newest unit alone (seqs {first}-{largest}, 13 messages) is ~{unit:,} tokens; its "
        f"largest, the tool output at seq {largest}, is ~{tokens_of(d, largest):,} tokens and "
        "is under the pruning threshold (2,500 tokens)"
    )
    assert len(seqs) == 13


def test_a_user_message_under_the_oversize_share_is_named_when_the_request_fits_without_it(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, auto=False)
    record_steps(d, 40, chars=1600, user="go")
    observation = numbered(280)  # ~4,760 tokens: a user-role observation under 5,000
    d.record_openai({"role": "user", "content": observation})
    assert d.prune() is None  # nothing qualifies
    seq = surface_seq(d, observation)
    text = line(d)
    assert text is not None and text.split("; ", 1)[1] == (
        f"without the user message at seq {seq} (~{tokens_of(d, seq):,} tokens) it would fit, "
        "and that message is under the oversize share (5,000 tokens), below which pruning "
        "leaves user messages alone"
    )


@pytest.mark.parametrize("prune", [True, False])
def test_an_old_output_between_threshold_and_oversize_says_whether_pruning_would_help(
    tmp_path: Path, clock: Any, prune: bool
) -> None:
    d = make(tmp_path, clock, auto=False, prune=prune)
    record_steps(d, 1, chars=200, user="go")
    big = numbered(240)  # ~4,000 tokens: above the threshold, under the oversize share
    d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call(5)]})
    d.record_openai({"role": "tool", "tool_call_id": "call_5", "content": big})
    record_steps(d, 40, chars=1600, first=10, user="more")
    seq = surface_seq(d, big)
    head = f"without the tool output at seq {seq} (~{tokens_of(d, seq):,} tokens) it would fit"
    text = line(d)
    assert text is not None
    if prune:
        after = d.engine.plan_prune(d.measure(), old=True)[0].tokens_after
        assert (
            text.split("; ", 1)[1]
            == f"{head}, and that message can still be pruned (to ~{after:,} tokens)"
        )
    else:
        assert (
            text.split("; ", 1)[1]
            == f"{head}, and that message is not pruned: pruning is off (prune=False)"
        )


def test_a_pruned_reply_that_keeps_huge_call_arguments_says_it_is_already_pruned(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, auto=False)
    record_steps(d, 40, chars=1600, user="go")
    arguments = json.dumps({"content": "z" * 60_000})
    d.record_openai(
        {"role": "assistant", "content": numbered(2000), "tool_calls": [call(97, arguments)]}
    )
    d.record_openai({"role": "tool", "tool_call_id": "call_97", "content": "written"})
    d.record_openai({"role": "user", "content": "Thanks."})
    result = d.prune()
    assert result is not None
    (node,) = result.pruned
    text = line(d)
    assert text is not None and text.split("; ", 1)[1] == (
        f"without the assistant message at seq {node.replaced_by} (~{node.tokens_after:,} tokens) "
        f"it would fit, and that message is already pruned (it keeps its tool calls: "
        f"{len(arguments):,} chars of arguments)"
    )


def test_a_request_of_many_small_messages_lists_what_it_is_made_of(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, auto=False)
    record_steps(d, 60, chars=1600, user="go")
    append_context(d.session, "a plugin note")
    measured = d.measure()
    seqs = [s for s, _t in measured.nodes]
    body = (
        f"the system prompt and tools (~{measured.envelope:,} tokens) and {len(seqs)} messages "
        f"(seqs {min(seqs)}-{max(seqs)}, ~{measured.node_tokens:,}) together exceed it"
    )
    largest = max(measured.nodes, key=lambda n: (n[1], -n[0]))
    tail = (
        f"; the largest message, the tool output at seq {largest[0]}, is ~{largest[1]:,} tokens "
        "and is under the pruning threshold (2,500 tokens)"
    )
    assert line(d) == (
        f"{HEAD}~{measured.total:,} tokens, 1.3× the trigger (20,000) and 25% of the context "
        f"window (100,000); {body}{tail}"
    )
    d.report_usage(30_000)  # the provider counts more than the local meter
    anchored = line(d)
    assert anchored == (
        f"{HEAD}~30,000 tokens, 1.5× the trigger (20,000) and 30% of the context window "
        f"(100,000); {body} (the total is the provider's usage report plus what followed it; "
        f"the local count is ~{measured.total:,}){tail}"
    )


def test_a_compacted_request_counts_its_checkpoints_apart(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, auto=False)
    record_steps(d, 30, chars=1600, user="go")
    assert d.compact() is not None
    record_steps(d, 50, chars=1600, first=100, user="more")
    measured = d.measure()
    (cp,) = d.checkpoints()
    cp_tokens = dict(measured.nodes)[cp.node_seq]
    rest = [(s, t) for s, t in measured.nodes if s != cp.node_seq]  # the pointer, the new steps
    seqs = [s for s, _t in rest]
    text = line(d)
    assert text is not None and text.split("; ")[1] == (
        f"the system prompt and tools (~{measured.envelope:,} tokens), 1 checkpoint "
        f"(~{cp_tokens:,}) and {len(rest)} messages (seqs {min(seqs)}-{max(seqs)}, "
        f"~{sum(t for _s, t in rest):,}) together exceed it"
    )


def test_a_system_prompt_above_the_trigger_is_the_reason(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, system_prompt="rule " * 20_000, auto=False)
    d.record_openai({"role": "user", "content": "hi"})
    envelope = d.measure().envelope
    text = line(d)
    assert text is not None and text.split("; ", 1)[1] == (
        f"the system prompt and tool schemas alone are ~{envelope:,} tokens"
    )


def test_pruned_names_lists_archive_keys_and_a_failed_archive_by_seq() -> None:
    def node(seq: int, key: str | None) -> PrunedNode:
        return PrunedNode(seq, seq + 100, "tool", 50_000, 12_000, 600, key)

    result = PruneResult("p900", "prune", (node(812, "p812"), node(815, None)), 30_000, 6_000)
    assert pruned_names(result) == "2 messages: p812, seq 815 (not archived)"
    one = replace(result, pruned=(node(812, "p812"),))
    assert pruned_names(one) == "1 message: p812"
