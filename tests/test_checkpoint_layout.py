"""What a pass adds to the request, at every budget (SPEC §7.2): the code-composed text scales
with the checkpoint budget, one statement of how to recall, never larger than what it shadows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, record_steps

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._compaction.compose import checkpoint_body, checkpoint_text
from dashr_ext._footers import compact_footer, framing_cap, neutralize_summary
from dashr_ext._meter import TokenMeter
from dashr_ext._payloads import POINTER_SOURCE
from dashr_ext.errors import CompactionError

BUDGETS = (256, 512, 1024, 4096, 8192)


def big_session(tmp_path: Path, budget: int, **kw: Any) -> Dashr:
    """~40k tokens in under a hundred events, a window wide enough for any budget."""
    config = CompactionConfig(
        context_window_tokens=200_000,
        recency_window_tokens=120_000,
        retain_tokens=1_000,
        max_summary_tokens=budget,
        **kw,
    )
    d = Dashr.create(
        tmp_path / "s.jsonl", config=config, summarizer=ScriptedSummarizer(size_from_budget=True)
    )
    record_steps(d, 40, chars=4000, user="Fix the failing retry tests.")
    return d


def fixed_tokens(d: Dashr) -> tuple[int, str]:
    """Tokens of the code-composed text the latest pass put in the request (its checkpoint
    without the summary body, and the pointer message if any), and the checkpoint's text."""
    cp = d.checkpoints()[-1]
    data = d.session.event(cp.summary_seq).data
    text = d.session.event(cp.node_seq).message.text
    body = checkpoint_body(data)
    assert body and body in text
    fixed = text.replace(body, "", 1)
    pointers = [
        m for m in d.request_messages() if POINTER_SOURCE in json.dumps(m) or "condensed into" in
        str(m.get("content"))
    ]
    fixed += "".join(str(m["content"]) for m in pointers)
    return d.meter.count_text(fixed), text


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_fixed_text_takes_at_most_its_share_of_the_budget(tmp_path: Path, budget: int) -> None:
    d = big_session(tmp_path, budget)
    result = d.compact()
    assert result is not None
    fixed, text = fixed_tokens(d)
    assert fixed <= framing_cap(budget) <= 0.12 * budget, (budget, fixed, text[-400:])
    # Everything the pass added stays inside the budget, and the summary was offered the rest.
    assert d.meter.count_text(text) <= budget
    (request,) = d.summarizer.requests  # type: ignore[attr-defined]
    offered = request.max_summary_tokens + d.meter.count_text(request.carried)  # + names
    assert offered >= budget - fixed - 32  # sized for the widest marker


def test_below_256_the_fixed_text_takes_at_most_64_tokens(tmp_path: Path) -> None:
    d = big_session(tmp_path, 200)
    assert d.compact() is not None
    fixed, _text = fixed_tokens(d)
    assert fixed <= 64


def test_a_large_budget_keeps_the_full_form_with_its_marker_and_pointer(tmp_path: Path) -> None:
    d = big_session(tmp_path, 8192)
    result = d.compact()
    assert result is not None
    text = d.session.event(d.checkpoints()[-1].node_seq).message.text
    assert "[compaction archive]" in text and "shadows conversation span" in text
    assert any("condensed into checkpoint" in str(m["content"]) for m in d.request_messages())


@pytest.mark.parametrize("budget", [256, 512, 1024])
def test_a_small_budget_gets_one_footer_line_and_no_pointer(tmp_path: Path, budget: int) -> None:
    d = big_session(tmp_path, budget)
    result = d.compact()
    assert result is not None
    cp = result.checkpoint
    text = d.session.event(d.checkpoints()[-1].node_seq).message.text
    footer = text.rsplit("\n", 1)[-1]
    assert footer.startswith(f"[checkpoint {cp} ") and footer.endswith("]")
    assert f'history_read("{cp}")' in footer and f'dashr_compaction_archive["{cp}"]' in footer
    assert "[compaction archive]" not in text
    messages = d.request_messages()
    assert not any("condensed into checkpoint" in str(m["content"]) for m in messages)
    # One live statement of how to recall: the footer line is the only text naming the routes.
    assert sum(str(m["content"]).count(f'history_read("{cp}")') for m in messages) == 1
    # Both routes work.
    assert d.history_read(checkpoint=cp).startswith(f"history_read checkpoint {cp}")
    assert d.archive[cp]["tool_results"]


def test_compact_checkpoints_read_search_outline_and_replay_like_full_ones(
    tmp_path: Path,
) -> None:
    d = big_session(tmp_path, 512)
    result = d.compact()
    assert result is not None
    cp = result.checkpoint
    record_steps(d, 30, chars=4000, first=100)
    second = d.compact()
    assert second is not None
    outline = d.history_outline()
    assert cp in outline and second.checkpoint in outline
    assert "step 3" in d.history_search("step 3", checkpoint=cp)
    texts = {c.id: d.session.event(c.node_seq).message.text for c in d.checkpoints()}
    archive = json.dumps(d.archive, sort_keys=True)
    path = d.session.path
    d.close()
    with Dashr.open(path, summarizer=ScriptedSummarizer()) as again:
        for c in again.checkpoints():
            data = again.session.event(c.summary_seq).data
            assert checkpoint_text(data) == texts[c.id]  # composed again byte for byte
        assert json.dumps(again.archive, sort_keys=True) == archive
        assert again.history_read(checkpoint=second.checkpoint).startswith("history_read")


def test_a_summary_cannot_forge_the_compact_footer() -> None:
    forged = compact_footer("c7", (1, 5), 4, 900)
    minimal = compact_footer("c7", (1, 5), 4, 900, minimal=True)
    for line in (forged, minimal):
        out = neutralize_summary(f"Notes\n{line}")
        assert line not in out and "[quoted checkpoint c7" in out


@pytest.mark.parametrize("words", [8, 20, 40, 80])
def test_a_small_span_is_never_replaced_by_something_larger(tmp_path: Path, words: int) -> None:
    """A short conversation: the pass commits a smaller checkpoint or declines, never a
    guard refusal, and a decline leaves the log as it was."""
    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=10)
    d = Dashr.create(tmp_path / "s.jsonl", config=config, meter=TokenMeter())
    for i in range(4):
        d.record_openai({"role": "user", "content": f"Request {i}: " + "word " * words})
        d.record_openai({"role": "assistant", "content": f"Answer {i}: done."})
    before = d.session.path.read_bytes()
    try:
        result = d.compact()
    except CompactionError as exc:
        assert "declined" in str(exc) and "tokens" in str(exc)
        assert d.session.path.read_bytes() == before
        return
    assert result is not None
    data = d.session.event(result.summary_seq).data
    node = d.session.event(d.checkpoints()[-1].node_seq)
    assert d.meter.count_text(node.message.text) < data["shadowedTokenCount"]
    assert not [e for e in d.session.events if e.type == "compaction/end" and "error" in e.data]


def test_the_smallest_spans_decline_with_the_sizes(tmp_path: Path) -> None:
    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=5)
    d = Dashr.create(tmp_path / "s.jsonl", config=config)
    d.record_openai({"role": "user", "content": "Hi."})
    d.record_openai({"role": "assistant", "content": "Hello."})
    d.record_openai({"role": "user", "content": "Go."})
    before = len(d.session)
    with pytest.raises(CompactionError, match=r"declined: no checkpoint fits: the span holds ~\d+"):
        d.compact()
    assert len(d.session) == before
    # The pressure check declines quietly (no pass starts, nothing is recorded).
    assert d.engine.last_decline is not None


@pytest.mark.parametrize("fed_back", [False, True])
def test_a_span_of_one_checkpoint_alone_declines(tmp_path: Path, fed_back: bool) -> None:
    """Compacting nothing but a checkpoint could only lose what it keeps: the pass declines,
    whether the checkpoint is this session's or one recorded as another session's input."""
    config = CompactionConfig(recency_window_tokens=4_000, retain_tokens=10)
    d = Dashr.create(tmp_path / "a.jsonl", config=config)
    for i in range(6):
        d.record_openai({"role": "user", "content": f"RULE {i}: never deploy app {i} on Fridays."})
        d.record_openai({"role": "assistant", "content": f"Noted rule {i}."})
    d.compact()
    request = d.request_messages()
    if fed_back:  # the checkpoint's text becomes a fresh session's only input
        d = Dashr.create(tmp_path / "b.jsonl", config=config)
        text = next(str(m["content"]) for m in request if "[checkpoint c" in str(m["content"]))
        d.record_openai({"role": "user", "content": text})
    else:
        assert d.checkpoints()
    d.record_openai({"role": "user", "content": "Go on."})
    d.record_openai({"role": "assistant", "content": "Going on."})
    before = d.session.path.read_bytes()
    surface = d.request_messages()
    first = d.session.surface[0]
    with pytest.raises(CompactionError, match="one checkpoint and nothing else"):
        d.compact(start_seq=first, end_seq=first)
    assert d.session.path.read_bytes() == before
    assert d.request_messages() == surface


def test_status_names_the_budget_and_pins_and_a_dry_run_says_a_pass_would_decline(
    tmp_path: Path,
) -> None:
    from dashr_ext._display import dry_run_report, status_report

    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=5)
    d = Dashr.create(tmp_path / "s.jsonl", config=config)
    d.record_openai({"role": "user", "content": "Hi."})
    d.record_openai({"role": "assistant", "content": "Hello."})
    d.record_openai({"role": "user", "content": "Go."})
    pin = d.pin("Never push to main.")
    status = str(status_report(d))
    assert f"pins               1 ({pin.id})" in status
    assert f"checkpoint budget  {config.summary_budget} tokens" in status
    before = d.session.path.read_bytes()
    report = str(dry_run_report(d))
    assert report.startswith("dry run: %compact would decline")
    assert "no checkpoint fits" in report and "the pins ~" in report
    assert d.session.path.read_bytes() == before
