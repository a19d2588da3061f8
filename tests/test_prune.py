"""Pruning (SPEC §6.5): oversize outputs shrink in place, recallable, replayed byte for byte."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, orphan_results, record_steps, tool_output

from dashr_ext import CompactionConfig, Dashr, RecallConfig, TokenMeter
from dashr_ext._compaction.prune import select_prunes
from dashr_ext._footers import neutralize_summary
from dashr_ext._pruned import excerpt, prune_marker
from dashr_ext.errors import CompactionError, SurfaceError

WINDOW = dict(context_window_tokens=100_000, recency_window_tokens=20_000, retain_tokens=3_000)


def make(tmp_path: Path, clock: Any, summarizer: Any = None, **cfg: Any) -> Dashr:
    return Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(**{**WINDOW, **cfg}),
        summarizer=summarizer or ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    )


def call(i: int, name: str = "bash") -> dict[str, Any]:
    args = json.dumps({"command": f"cat big_{i}.log"})
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def numbered(lines: int, width: int = 60) -> str:
    return "\n".join(f"{n:06d} " + "x" * width for n in range(1, lines + 1))


def pruned_nodes(d: Dashr) -> list[Any]:
    return [e for e in d.session.surface_events() if "pruned" in e.message.source]


def read_whole(d: Dashr, seq: int) -> str:
    d.recall_config = RecallConfig(read_max_chars=1_000_000, read_max_events=1)
    return str(d.history_read(seq=seq))


def assert_valid_request(d: Dashr) -> None:
    messages = d.session.messages()
    assert orphan_results(messages) == []
    for i, m in enumerate(messages):  # every call answered right after its assistant message
        ids = [c["id"] for c in m.get("tool_calls") or []]
        answered = [x["tool_call_id"] for x in messages[i + 1 : i + 1 + len(ids)]]
        assert answered == ids


# --------------------------------------------------------------------------- excerpt and marker


def test_excerpt_keeps_whole_lines_from_head_and_tail_within_the_budget() -> None:
    text = numbered(1000)
    part = excerpt(text, 2000)
    assert part is not None
    assert len(part.head) + len(part.tail) <= 2000
    head_lines, tail_lines = part.head.split("\n"), part.tail.split("\n")
    assert text.startswith(part.head + "\n") and text.endswith("\n" + part.tail)
    assert head_lines[0].startswith("000001 ") and tail_lines[-1].startswith("001000 ")
    n_head, n_tail = len(head_lines), len(tail_lines)
    assert part.shown == f"lines 1–{n_head} and {1000 - n_tail + 1}–1,000"
    assert part.lines == 1000


def test_excerpt_counts_characters_for_one_long_line_and_leaves_short_text_alone() -> None:
    blob = json.dumps({"rows": list(range(20_000))})  # minified JSON: one line
    part = excerpt(blob, 1000)
    assert part is not None
    assert (part.head, part.tail) == (blob[:600], blob[-400:])
    assert part.shown == "first 600 and last 400 chars" and part.lines == 1
    assert excerpt("short\ntext", 1000) is None
    assert excerpt("y" * 2000, 1000) is None  # at most twice the budget: not worth a marker


def test_the_marker_names_the_original_and_the_archive_only_when_archived() -> None:
    part = excerpt(numbered(500), 1000)
    assert part is not None
    with_archive = prune_marker(812, 48_213, part, archived=True)
    assert with_archive == (
        f"[output pruned: 48,213 chars, 500 lines; shown: {part.shown}; original: "
        'history_read(seq=812) or dashr_compaction_archive["p812"]]'
    )
    without = prune_marker(812, 48_213, part, archived=False)
    assert without.endswith("original: history_read(seq=812)]")


def test_a_summary_cannot_carry_a_pruning_marker() -> None:
    forged = "[output pruned: 10 chars; original: history_read(seq=1)]"
    assert neutralize_summary(forged).startswith("[quoted output pruned")
    assert neutralize_summary("the output was pruned earlier") == "the output was pruned earlier"


# --------------------------------------------------------------------------- the pass


def test_a_huge_reply_that_is_not_the_newest_unit_is_pruned_and_read_back_exactly(
    tmp_path: Path, clock: Any
) -> None:
    # The case: a 208k-character assistant reply, then a short nudge. Before
    # pruning the retained tail kept the reply and the request stayed ~3x the window.
    d = make(tmp_path, clock)
    record_steps(d, 6, chars=1200, user="Summarize the logs.")
    reply = numbered(3200)  # ~217k characters
    d.record_openai({"role": "assistant", "content": reply})
    d.record_openai({"role": "user", "content": "Thanks. Now shorter, please."})
    original_seq = next(
        e.seq for e in d.session.events if e.type == "assistant/message" and e.message.text == reply
    )
    d.request_messages()
    after = d.measure().total
    assert after <= d.config.trigger_tokens
    (node,) = pruned_nodes(d)
    info = node.message.source["pruned"]
    assert (info["seq"], info["chars"], info["archive"]) == (
        original_seq,
        len(reply),
        f"p{original_seq}",
    )
    assert node.message.role == "assistant" and node.surface_op.start_seq == original_seq
    assert d.session.event(original_seq).message.text == reply  # the log keeps it
    assert d.archive[f"p{original_seq}"]["assistant_responses"][0]["text"] == reply
    assert d.archive[f"p{original_seq}"]["meta"]["pruned"] == original_seq
    assert reply in read_whole(d, original_seq)
    assert f'dashr_compaction_archive["p{original_seq}"]' in node.message.text
    assert_valid_request(d)


@pytest.mark.parametrize("role", ["tool", "user", "assistant-with-calls"])
def test_a_single_oversize_newest_output_is_pruned_before_the_request(
    tmp_path: Path, clock: Any, role: str
) -> None:
    d = make(tmp_path, clock)
    record_steps(d, 3, chars=800, user="Inspect the data.")
    huge = numbered(2000)  # ~136k chars: alone several times the 20k window
    if role == "tool":
        d.record_openai({"role": "assistant", "content": "Reading it.", "tool_calls": [call(99)]})
        d.record_openai({"role": "tool", "tool_call_id": "call_99", "content": huge})
    elif role == "user":  # mini-swe-agent delivers observations as user messages
        d.record_openai({"role": "user", "content": huge})
    else:
        d.record_openai({"role": "assistant", "content": huge, "tool_calls": [call(99)]})
    seq = next(e.seq for e in reversed(d.session.events) if e.is_surface and e.message.text == huge)
    before = d.measure().total
    assert before > d.config.trigger_tokens
    d.request_messages()
    assert d.measure().total <= d.config.trigger_tokens
    assert d.checkpoints() == []  # pruning alone was enough: no summary pass
    (node,) = pruned_nodes(d)
    assert node.message.source["pruned"]["seq"] == seq
    if role == "assistant-with-calls":  # its text goes, its tool call stays
        assert [c.id for c in node.message.tool_calls] == ["call_99"]
        assert d.session.pending_tool_calls() == ["call_99"]
        d.record_openai({"role": "tool", "tool_call_id": "call_99", "content": "ok"})
    assert d.session.event(seq).message.text == huge
    assert huge in read_whole(d, seq)
    assert_valid_request(d)


def test_old_outputs_are_pruned_only_when_that_alone_brings_the_request_under(
    tmp_path: Path, clock: Any
) -> None:
    summarizer = ScriptedSummarizer()
    d = make(tmp_path, clock, summarizer, prune_tool_output_tokens=1_000)
    record_steps(d, 10, chars=8_000, user="Read the modules.")  # ten old ~2k-token outputs
    record_steps(d, 10, chars=1_200, first=20)
    assert d.config.should_compact(d.measure().total)
    d.request_messages()
    assert summarizer.requests == []  # under the trigger without a model call
    assert len(pruned_nodes(d)) == 10
    assert d.measure().total <= d.config.trigger_tokens
    # Far over the trigger: pruning the old outputs alone would not do, so the summary pass
    # condenses them from the originals (only oversize outputs are pruned first).
    (tmp_path / "b").mkdir()
    e = make(tmp_path / "b", clock, summarizer, prune_tool_output_tokens=1_000)
    record_steps(e, 4, chars=8_000, user="Read everything.")
    record_steps(e, 40, chars=2_400, first=10)
    e.request_messages()
    assert len(summarizer.requests) == 1
    span = summarizer.requests[0].span
    assert all("pruned" not in ev.message.source for ev in span)
    assert sum(len(ev.message.text) == 8_000 for ev in span) == 4
    assert pruned_nodes(e) == []


def test_pruning_can_be_turned_off(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, prune=False)
    record_steps(d, 2, chars=800, user="go")
    d.record_openai({"role": "user", "content": numbered(2000)})
    d.request_messages()
    assert pruned_nodes(d) == [] and d.last_prune is None


def test_prune_reports_what_it_did_and_the_log_records_one_batch(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 3, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)  # the retained tail: ~3k tokens of these
    start = len(d.session)
    result = d.prune()
    assert result is not None and d.last_prune == result
    assert [n.seq for n in result.pruned] == [
        e.seq
        for e in d.session.events[:start]
        if e.type == "tool/result" and len(e.message.text) == 5_000
    ]
    assert result.tokens_after < result.tokens_before
    assert all(
        n.tokens_after < n.tokens_before and n.archive_key == f"p{n.seq}" for n in result.pruned
    )
    types = [e.type for e in d.session.events[start:]]
    assert types == ["compaction/start", *["tool/result"] * 3, "compaction/end"]
    start_event = d.session.event(start)
    assert start_event.data["trigger"] == "prune" and result.compaction_id == f"p{start}"
    end = d.session.events[-1].data
    assert [p["seq"] for p in end["pruned"]] == [n.seq for n in result.pruned]
    assert [p["replacedBy"] for p in end["pruned"]] == [n.replaced_by for n in result.pruned]
    assert d.prune() is None  # nothing left: a pruned node is never pruned again
    assert_valid_request(d)


def test_a_pruned_session_replays_to_identical_requests_and_archive(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 3, chars=5_000, user="go")
    d.record_openai({"role": "assistant", "content": numbered(900)})
    record_steps(d, 30, chars=800, first=20, user="more")
    assert d.prune() is not None
    assert d.compact() is not None
    (cp,) = d.checkpoints()  # it condensed pruned nodes: their originals keep p<seq> entries
    assert any("pruned" in d.session.event(q).message.source for q in cp.shadowed_seqs)
    assert sum(k.startswith("p") for k in d.archive) == 4
    messages, archive = d.request_messages(), dict(d.archive)
    d.close()
    with Dashr.open(tmp_path / "s.jsonl", config=d.config, meter=TokenMeter("chars")) as again:
        assert again.session.messages() == messages
        assert json.dumps(dict(again.archive), sort_keys=True) == json.dumps(
            archive, sort_keys=True
        )


def test_search_finds_a_pruned_original_and_names_where_it_went(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 1, chars=200, user="go")
    body = numbered(400) + "\nneedle-in-the-middle\n" + numbered(400)
    d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call(7)]})
    d.record_openai({"role": "tool", "tool_call_id": "call_7", "content": body})
    record_steps(d, 3, chars=200, first=20, user="next")
    seq = next(e.seq for e in d.session.events if e.is_surface and e.message.text == body)
    assert d.prune() is not None
    found = str(d.history_search("needle-in-the-middle"))
    assert f"1. seq {seq} | shadowed | p{seq} |" in found
    d.recall_config = RecallConfig(read_max_chars=1_000_000)
    assert body in str(d.history_read(checkpoint=f"p{seq}"))


# --------------------------------------------------------------------------- bad input and failure


def test_a_prune_range_that_splits_a_pair_or_touches_the_executing_step_is_refused(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=200)
    record_steps(d, 3, chars=5_000, user="go")
    d.record_openai({"role": "assistant", "content": "again", "tool_calls": [call(50)]})
    d.record_openai({"role": "tool", "tool_call_id": "call_50", "content": tool_output(50, 3_000)})
    path = tmp_path / "s.jsonl"
    before = path.read_bytes()
    calls = [e.seq for e in d.session.events if e.type == "assistant/message"]
    with pytest.raises(SurfaceError, match="would split a tool call from its result"):
        d.prune(start_seq=calls[0], end_seq=calls[0])
    executing = sorted(d.session.executing_seqs())
    with pytest.raises(SurfaceError, match="executing"):
        d.prune(start_seq=calls[0], end_seq=executing[-1])
    with pytest.raises(CompactionError, match="both start_seq and end_seq"):
        d.prune(start_seq=calls[0])
    with pytest.raises(CompactionError, match="prune with prune"):
        d.compact("prune")
    assert path.read_bytes() == before
    result = d.prune(start_seq=calls[0], end_seq=calls[0] + 1)  # one closed step: fine
    assert result is not None and [n.seq for n in result.pruned] == [calls[0] + 1]


def test_an_archive_that_fails_leaves_the_marker_without_it_and_the_pass_commits(
    tmp_path: Path, clock: Any
) -> None:
    class Broken(dict[str, Any]):
        def __setitem__(self, key: str, value: Any) -> None:
            raise MemoryError("archive full")

    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    d.engine.archive = Broken()
    record_steps(d, 2, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    result = d.prune()
    assert result is not None and all(n.archive_key is None for n in result.pruned)
    for node in pruned_nodes(d):
        assert "dashr_compaction_archive" not in node.message.text
        assert node.message.text.count("original: history_read(seq=") == 1
        assert node.message.source["pruned"]["archive"] is None


def test_a_failed_append_leaves_log_and_archive_as_they_were(
    tmp_path: Path, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 2, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    path = tmp_path / "s.jsonl"
    before, archive = path.read_bytes(), dict(d.archive)

    def boom(*_a: Any, **_k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(d.session._store, "append", boom)
    with pytest.raises(OSError, match="disk full"):
        d.prune()
    assert path.read_bytes() == before and dict(d.archive) == archive
    assert pruned_nodes(d) == []


# --------------------------------------------------------------------------- overflow


def test_handle_overflow_prunes_first_and_needs_no_summary_when_that_fits(
    tmp_path: Path, clock: Any
) -> None:
    summarizer = ScriptedSummarizer()
    d = make(tmp_path, clock, summarizer, auto=False)
    record_steps(d, 3, chars=800, user="go")
    d.record_openai({"role": "assistant", "content": "cat", "tool_calls": [call(9)]})
    d.record_openai({"role": "tool", "tool_call_id": "call_9", "content": numbered(3000)})
    assert d.handle_overflow() is True
    assert summarizer.requests == [] and d.checkpoints() == []
    assert d.measure().total <= d.config.trigger_tokens
    assert d.last_prune is not None and len(d.last_prune.pruned) == 1
    assert_valid_request(d)


# --------------------------------------------------------------------------- selection (pure)


def test_selection_keeps_the_retained_tail_units_under_the_oversize_share() -> None:
    from corpus_events import assistant, tool, user

    from dashr_ext._turns import Unit

    events = [user(1, "go"), assistant(2, "a", calls=[("c1", "bash", "{}")]), tool(3, "c1", "x")]
    events += [assistant(4, "b", calls=[("c2", "bash", "{}"), ("c3", "bash", "{}")])]
    events += [tool(5, "c2", "y"), tool(6, "c3", "z")]
    tokens = [10, 20, 5_000, 20, 3_000, 2_500]
    units = [Unit(0, 1, False), Unit(1, 3, False), Unit(3, 6, True)]
    common = dict(threshold=1_000, oversize=4_000, keep_tokens=500)
    # Old outputs wanted: position 2 (outside the tail, above the threshold) and 4 (the tail
    # unit is 5,520 > 4,000: its largest output goes first, then it fits).
    assert select_prunes(events, tokens, units, 3, old=True, **common) == [2, 4]
    # Old outputs not wanted (a summary pass follows): even the oversize one outside the
    # tail is left whole for the summarizer; the tail unit still gets under the share.
    assert select_prunes(events, tokens, units, 3, old=False, **common) == [4]
    # Everything in the tail: the oversize output is pruned wherever it stands there.
    assert select_prunes(events, tokens, units, 0, old=False, **common) == [2, 4]
    # The task statement (the first user message) is pruned only above its own limit.
    tokens[0] = 4_500
    assert select_prunes(events, tokens, units, 0, old=False, **common) == [0, 2, 4]
    task = dict(task=0, task_limit=10_000)
    assert select_prunes(events, tokens, units, 0, old=False, **common, **task) == [2, 4]
    assert select_prunes(events, tokens, units, 3, old=True, span=(1, 2), **common) == [2]


def test_a_summary_cites_a_pruned_node_by_its_original_seq(tmp_path: Path, clock: Any) -> None:
    # A pruned node's own seq comes after everything around it: a summary reading seqs as
    # conversation order would call an answered request "not answered yet".
    d = Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(**WINDOW, prune_tool_output_tokens=500),
        meter=TokenMeter("chars"),
        clock=clock,
    )
    d.record_openai({"role": "user", "content": "Fix the flaky test."})
    observation = "Observation of the build:\n" + numbered(1500)
    d.record_openai({"role": "user", "content": observation})  # mini-swe-agent style
    d.record_openai({"role": "assistant", "content": "The build is green; done."})
    record_steps(d, 30, chars=800, first=10, user="Next task.")
    original = next(
        e.seq for e in d.session.events if e.is_surface and e.message.text == observation
    )
    result = d.prune()
    assert result is not None and original in [n.seq for n in result.pruned]
    replaced_by = next(n.replaced_by for n in result.pruned if n.seq == original)
    assert d.compact() is not None
    summary = d.session.event(d.checkpoints()[-1].summary_seq).data["summary"]
    assert f"seq {replaced_by}" not in summary
    assert f"Request of seq {original}, not answered yet" not in summary


def test_search_narrows_to_one_pruned_original_by_its_key(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 3, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    result = d.prune()
    assert result is not None and len(result.pruned) == 3
    key = result.pruned[1].archive_key
    found = str(d.history_search("step 1", checkpoint=key))
    assert found.startswith(f'history_search "step 1" in checkpoint {key} — 1 event scanned')
    assert f"1. seq {result.pruned[1].seq} | shadowed | {key} |" in found


def test_a_prune_batch_cut_short_by_a_crash_keeps_what_reached_the_disk(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 3, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    result = d.prune()
    assert result is not None and len(result.pruned) == 3
    d.close()
    path = tmp_path / "s.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]) + lines[-2][:25])  # torn inside the last replace
    with pytest.warns(UserWarning) as caught:
        again = Dashr.open(path, config=d.config, meter=TokenMeter("chars"))
    with again:
        assert any("committed but was not closed" in str(w.message) for w in caught)
        end = again.session.events[-1]
        assert end.type == "compaction/end" and "error" not in end.data
        kept = [e for e in again.session.surface_events() if "pruned" in e.message.source]
        assert [e.message.source["pruned"]["seq"] for e in kept] == [
            n.seq for n in result.pruned[:2]
        ]
        assert sorted(k for k in again.archive if k.startswith("p")) == sorted(
            f"p{n.seq}" for n in result.pruned[:2]
        )
        assert_valid_request(again)


def test_progress_reports_each_phase_of_a_prune_and_a_summary_pass(
    tmp_path: Path, clock: Any
) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    seen: list[tuple[str, str]] = []
    d.engine.progress = lambda phase, detail: seen.append((phase, detail))
    record_steps(d, 3, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    d.prune()
    result = d.compact()
    assert result is not None
    assert [p for p, _ in seen] == ["pruning", "summarizing", "committing", "done"]
    assert seen[0][1] == "3 oversize output(s)" and seen[1][1] == "1 region"
    assert seen[-1][1].startswith(f"{result.checkpoint}: ~")

    def broken(phase: str, detail: str) -> None:
        raise RuntimeError("display gone")

    d.engine.progress = broken  # a failing display never breaks the pass
    record_steps(d, 20, chars=1_600, first=40)
    assert d.compact() is not None


def test_the_outline_names_the_pruned_originals(tmp_path: Path, clock: Any) -> None:
    d = make(tmp_path, clock, prune_tool_output_tokens=500)
    record_steps(d, 3, chars=5_000, user="go")
    record_steps(d, 10, chars=1_600, first=10)
    assert "pruned output" not in str(d.history_outline())
    result = d.prune()
    assert result is not None
    keys = ", ".join(n.archive_key or "" for n in result.pruned)
    outline = d.history_outline()
    first = result.pruned[0].seq
    line = f"pruned outputs: 3 ({keys}); read one whole: history_read(seq={first})"
    assert line in str(outline).splitlines()
    assert html.escape(line) in (outline._repr_html_() or "")
