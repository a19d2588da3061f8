"""History recall: outline, paged reads, literal search, the model tools (SPEC 8)."""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_files, corpus_params, load_corpus, no_pass_ran
from helpers import ScriptedSummarizer, append_context, record_steps

import dashr_ext._recall.queries as queries_mod
import dashr_ext._recall.render as render_mod
import dashr_ext._recall.search as search_mod
from dashr_ext import CompactionConfig, Dashr, RecallConfig
from dashr_ext._events import (
    ContentBlock,
    Event,
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from dashr_ext._meter import TokenMeter
from dashr_ext._payloads import POINTER_SOURCE
from dashr_ext._pointer import pointer_text
from dashr_ext._recall import Recall, RecallResult
from dashr_ext._recall.cursor import Cursor, parse_cursor
from dashr_ext._recall.hits import narrow_note, zero_note
from dashr_ext._recall.outline import turn_row
from dashr_ext._recall.render import (
    END_OF_RANGE,
    compact_arguments,
    event_body,
    event_label,
    minute_utc,
    read_page,
)
from dashr_ext._recall.search import SearchIndex, normalize, snippet
from dashr_ext._recall.tools import tool_arguments
from dashr_ext._turns import Turn
from dashr_ext.errors import ConfigError, RecallError

FILLER = "\n".join(f"line {i}: scheduler bookkeeping for attempt {i}" for i in range(40))
MINUTE = "2026-07-06 12:00Z"  # the test clock starts at 12:00:00 and ticks one second per call
CURSOR_LINE = re.compile(r"cursor: ([cs]\d+@\d+:\d+)")
LABEL = re.compile(
    r"^(User|Assistant|Tool result|Context|Checkpoint c\d+)"
    r" \(seq (\d+)(, error)?(, continued)?\): ",
    re.MULTILINE,
)
CUT = re.compile(r"\n… \[\+(\d+) chars\]$")


def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def build(path: Path, clock: Callable[[], int], recall: RecallConfig | None = None) -> Dashr:
    """Four turns, a tool call and its result, an error result, two checkpoints.

    c18 shadows turn 1 (seqs 2, 4, 5, 8); c33 then shadows c18's node (seq 19), turn 2, the
    pointer to c18 (seq 21) and turn 3, so its span (19, 12, 14, 21, …) is not ascending and
    c18 is superseded. Turn 4 stays visible. (Both checkpoints are compact: the pointer at
    seq 21 is recorded by hand.)
    """
    summarizer = ScriptedSummarizer(text="## Progress\n- Retry helper inspected; the budget is 3.")
    d = Dashr.create(
        path,
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        recall=recall,
        summarizer=summarizer,
        meter=TokenMeter("chars"),
        clock=clock,
    )
    d.record_openai({"role": "user", "content": "Fix the failing retry tests in retry.test.ts."})
    d.record_openai(
        {
            "role": "assistant",
            "content": "I will inspect the retry helper first.",
            "tool_calls": [call("call_1", "read", {"path": "src/retry.ts"})],
        }
    )
    d.record_openai(
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "export function retryBudget() { return 3 }\n" + FILLER,
        }
    )
    d.record_openai({"role": "assistant", "content": "The retry budget is 3 attempts."})
    d.record_openai({"role": "user", "content": "Why does the\nbackoff test time out?"})
    d.record_openai(
        {
            "role": "assistant",
            "reasoning_content": "The backoff probably sleeps for real.",
            "content": "Because the backoff sleeps for real; I will fake the clock.\n" + FILLER,
        }
    )
    assert d.compact(start_seq=2, end_seq=8) is not None
    # A span this small gets the compact form, whose footer is its only pointer; a context
    # message stands where a full checkpoint's pointer would be, inside c33's span.
    append_context(d.session, pointer_text(d.checkpoints()[0]), source_kind=POINTER_SOURCE)
    summarizer.text = "## Progress\n- Budget moved to config.retry.maxAttempts."
    d.record_openai({"role": "user", "content": "Now make the retry budget configurable."})
    d.record_openai(
        {
            "role": "assistant",
            "content": "Editing the config loader.",
            "tool_calls": [call("call_2", "edit", {"path": "src/config.ts", "new": "cfg.x"})],
        }
    )
    d.session.append_tool_result(
        "call_2", "edit failed: old text not found in src/config.ts", is_error=True
    )
    d.record_openai({"role": "assistant", "content": "Added config.retry.maxAttempts instead."})
    assert d.compact(start_seq=19, end_seq=29) is not None
    append_context(d.session, pointer_text(d.checkpoints()[1]), source_kind=POINTER_SOURCE)
    d.record_openai({"role": "user", "content": "Now run the whole suite."})
    d.record_openai(
        {"role": "assistant", "content": "All 42 tests pass; the retry budget is configurable."}
    )
    return d


@pytest.fixture
def d(tmp_path: Path, clock: Callable[[], int]) -> Iterator[Dashr]:
    with build(tmp_path / "s.jsonl", clock) as dashr:
        yield dashr


def recall_of(d: Dashr, **config: Any) -> Recall:
    return Recall(d.session, RecallConfig(**config))


def all_pages(r: Recall, **first: Any) -> list[str]:
    """Follow the cursors from a first read to the end of the range."""
    pages = [str(r.read(**first))]
    while not pages[-1].endswith(END_OF_RANGE):
        match = CURSOR_LINE.fullmatch(pages[-1].rsplit("\n", 1)[1])
        assert match is not None, pages[-1]
        pages.append(str(r.read(cursor=match.group(1))))
        assert len(pages) < 10_000
    return pages


def middle(page: str) -> str:
    """A page without its header and trailer lines."""
    return page.split("\n", 1)[1].rsplit("\n", 1)[0]


def reassemble(pages: list[str]) -> str:
    """The transcript of a range from its pages: cut markers and continuation labels removed."""
    out = ""
    for page in pages:
        body = middle(page)
        cut = CUT.search(body)
        if cut is not None:
            body = body[: cut.start()]
        label = LABEL.match(body)
        if label is not None and label.group(4):
            out += body[label.end() :]
        else:
            out += ("\n" if out else "") + body
    return out


def labels(text: str) -> list[str]:
    return [m.group(0)[:-2] for m in LABEL.finditer(text)]


# --------------------------------------------------------------------------- the log


def test_the_fixture_log_has_two_checkpoints_the_second_superseding_the_first(d: Dashr) -> None:
    s = d.session
    assert [(e.seq, e.type) for e in s.events if e.is_surface] == [
        (2, "user/message"),
        (4, "assistant/message"),
        (5, "tool/result"),
        (8, "assistant/message"),
        (12, "user/message"),
        (14, "assistant/message"),
        (19, "user/message"),  # c18's node
        (21, "context/message"),  # the pointer to c18
        (23, "user/message"),
        (25, "assistant/message"),
        (26, "tool/result"),
        (29, "assistant/message"),
        (34, "user/message"),  # c33's node
        (36, "context/message"),  # the pointer to c33
        (38, "user/message"),
        (40, "assistant/message"),
    ]
    c18, c33 = d.checkpoints()
    assert (c18.id, c18.shadowed_seqs, c18.superseded_by) == ("c18", (2, 4, 5, 8), "c33")
    assert (c33.id, c33.shadowed_seqs, c33.superseded_by) == (
        "c33",
        (19, 12, 14, 21, 23, 25, 26, 29),
        None,
    )
    assert s.surface == (34, 36, 38, 40)
    assert len(s.events) == 43


# --------------------------------------------------------------------------- outline


def test_outline_lists_every_checkpoint_then_the_turns(d: Dashr) -> None:
    c18, c33 = d.checkpoints()
    assert d.recall.outline() == "\n".join(
        [
            "history_outline — 43 events (seqs 0-42), 2 checkpoints, 4 turns",
            "checkpoints (oldest first):",
            f"c18 | summary seq 18 | 4 events, seqs 2-8 | ~{c18.shadowed_tokens} tokens | "
            f"{MINUTE} | superseded by c33 | {c18.preview}",
            f"c33 | summary seq 33 | 8 events, seqs 12-29 | ~{c33.shadowed_tokens} tokens | "
            f"{MINUTE} | current | {c33.preview}",
            "turns:",
            "turn 1 | seqs 1-10 | 4 events | shadowed | "
            "Fix the failing retry tests in retry.test.ts.",
            "turn 2 | seqs 11-16 | 2 events | shadowed | Why does the backoff test time out?",
            "turn 3 | seqs 22-31 | 4 events | shadowed | Now make the retry budget configurable.",
            "turn 4 | seqs 37-42 | 2 events | visible | Now run the whole suite.",
            'recall: history_read(checkpoint="c33"), history_read(seq=N), history_search("phrase")',
        ]
    )


def test_outline_before_any_compaction(tmp_path: Path, clock: Callable[[], int]) -> None:
    with Dashr.create(tmp_path / "s.jsonl", summarizer=ScriptedSummarizer(), clock=clock) as d:
        d.record_openai({"role": "user", "content": "Hello there"})
        assert d.recall.outline() == "\n".join(
            [
                "history_outline — 3 events (seqs 0-2), 0 checkpoints, 1 turn",
                "checkpoints: none yet (nothing has been compacted)",
                "turns:",
                "turn 1 (open) | seqs 1-2 | 1 event | visible | Hello there",
                'recall: history_read(seq=N), history_search("phrase")',
            ]
        )


def test_a_turn_compacted_in_part_is_partly_shadowed(
    tmp_path: Path, clock: Callable[[], int]
) -> None:
    with Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    ) as d:
        record_steps(d, 6, chars=800, user="Refactor the scheduler.")
        d.compact(start_seq=2, end_seq=d.session.surface[6])  # the user message and 3 steps
        turn_line = d.recall.outline().split("\n")[4]
        assert turn_line.startswith("turn 1 (open) | seqs 1-")
        # 13 messages of the turn (a span this small gets the compact form: no pointer)
        assert turn_line.endswith(" | 13 events | partly shadowed | Refactor the scheduler.")


def test_outline_elides_middle_turns_with_a_marker_within_budget(
    tmp_path: Path, clock: Callable[[], int]
) -> None:
    with Dashr.create(tmp_path / "s.jsonl", summarizer=ScriptedSummarizer(), clock=clock) as d:
        for i in range(1, 41):
            d.record_openai({"role": "user", "content": f"Question number {i}?"})
            d.record_openai({"role": "assistant", "content": f"Answer {i}."})
        r = recall_of(d, outline_max_chars=600)
        text = str(r.outline())
        assert len(text) <= 600
        lines = text.split("\n")
        assert lines[:4] == [
            "history_outline — 241 events (seqs 0-240), 0 checkpoints, 40 turns",
            "checkpoints: none yet (nothing has been compacted)",
            "turns:",
            "turn 1 | seqs 1-6 | 2 events | visible | Question number 1?",
        ]
        marker = re.fullmatch(
            r"… (\d+) turns not shown \(turns 2-(\d+), seqs 7-(\d+)\); "
            r"read them with history_read\(seq=7\)",
            lines[4],
        )
        assert marker is not None, lines[4]
        hidden, last_hidden = int(marker.group(1)), int(marker.group(2))
        assert hidden == last_hidden - 1
        shown = [int(line.split()[1]) for line in lines[5:-1]]
        assert shown == list(range(last_hidden + 1, 41))
        assert lines[-1] == 'recall: history_read(seq=N), history_search("phrase")'
        # the marker's seqs end where the first shown tail turn starts
        assert int(marker.group(3)) + 1 == int(lines[5].split()[4].split("-")[0])


def thirty_turns(tmp_path: Path, clock: Callable[[], int]) -> Dashr:
    d = Dashr.create(tmp_path / "s.jsonl", summarizer=ScriptedSummarizer(), clock=clock)
    for t in range(30):
        d.record_openai({"role": "user", "content": f"request number {t} " + "y" * (t * 7)})
        d.record_openai({"role": "assistant", "content": "answer"})
    return d


@pytest.mark.parametrize(
    ("budget", "tail"),
    [
        (
            260,
            [
                "… 30 turns not shown (turns 1-30, seqs 1-180); read them with history_read(seq=1)",
                'recall: history_read(seq=N), history_search("phrase")',
            ],
        ),
        (
            230,
            [
                "… 30 turns not shown; history_read(seq=1)",
                'recall: history_read(seq=N), history_search("phrase")',
            ],
        ),
        (
            200,
            ["… 30 turns not shown", 'recall: history_read(seq=N), history_search("phrase")'],
        ),
    ],
)
def test_an_outline_without_room_for_a_turn_shortens_the_marker_to_fit(
    budget: int, tail: list[str], tmp_path: Path, clock: Callable[[], int]
) -> None:
    with thirty_turns(tmp_path, clock) as d:
        text = str(recall_of(d, outline_max_chars=budget).outline())
    assert len(text) <= budget
    assert text.split("\n") == [
        "history_outline — 181 events (seqs 0-180), 0 checkpoints, 30 turns",
        "checkpoints: none yet (nothing has been compacted)",
        "turns:",
        *tail,
    ]


@pytest.mark.parametrize("budget", range(200, 1200, 13))
def test_an_outline_without_checkpoints_always_fits_its_budget(
    budget: int, tmp_path: Path, clock: Callable[[], int]
) -> None:
    with thirty_turns(tmp_path, clock) as d:
        outline = recall_of(d, outline_max_chars=budget).outline()
    assert len(str(outline)) <= budget
    assert "turns not shown" in str(outline)


def test_checkpoints_are_never_elided_even_beyond_the_budget(d: Dashr) -> None:
    r = recall_of(d, outline_max_chars=200)
    lines = str(r.outline()).split("\n")
    assert len("\n".join(lines)) > 200
    assert [line.split(" | ")[0] for line in lines[2:4]] == ["c18", "c33"]
    assert lines[4:] == [
        "turns:",
        "… 4 turns not shown (turns 1-4, seqs 1-42); read them with history_read(seq=1)",
        'recall: history_read(checkpoint="c33"), history_read(seq=N), history_search("phrase")',
    ]


# --------------------------------------------------------------------------- read


def test_reading_a_checkpoint_renders_its_exact_span(d: Dashr) -> None:
    c18 = d.checkpoints()[0]
    assert d.recall.read(checkpoint="c18") == "\n".join(
        [
            f"history_read checkpoint c18 — shadowed seqs 2-8, 4 events, "
            f"~{c18.shadowed_tokens} tokens, superseded by c33",
            "User (seq 2): Fix the failing retry tests in retry.test.ts.",
            "Assistant (seq 4): I will inspect the retry helper first.",
            '[tool call] read {"path":"src/retry.ts"}',
            "Tool result (seq 5): export function retryBudget() { return 3 }",
            FILLER,
            "Assistant (seq 8): The retry budget is 3 attempts.",
            END_OF_RANGE,
        ]
    )


def test_a_superseding_span_renders_the_prior_checkpoint_in_surface_order(d: Dashr) -> None:
    page = str(d.recall.read(checkpoint="c33"))
    c33 = d.checkpoints()[1]
    assert page.split("\n")[0] == (
        f"history_read checkpoint c33 — shadowed seqs 12-29, 8 events, "
        f"~{c33.shadowed_tokens} tokens, current"
    )
    assert labels(page) == [
        "Checkpoint c18 (seq 19)",
        "User (seq 12)",
        "Assistant (seq 14)",
        "Context (seq 21)",
        "User (seq 23)",
        "Assistant (seq 25)",
        "Tool result (seq 26, error)",
        "Assistant (seq 29)",
    ]
    node_text = d.session.event(19).message.text
    assert f"Checkpoint c18 (seq 19): {node_text}\nUser (seq 12): " in page
    assert 'originals: history_read("c18")' in page  # the two-hop chain (c18's footer line)
    assert (
        "Assistant (seq 14): [reasoning] The backoff probably sleeps for real.\n"
        "Because the backoff sleeps for real; I will fake the clock.\n"
    ) in page
    assert '[tool call] edit {"path":"src/config.ts","new":"cfg.x"}' in page
    assert "Tool result (seq 26, error): edit failed: old text not found" in page
    assert page.endswith(
        "\nAssistant (seq 29): Added config.retry.maxAttempts instead.\n" + END_OF_RANGE
    )
    for raw in ('"seq":', '"type":', "surfaceOp", "compaction/", "turn/start", "step/end"):
        assert raw not in page


def test_reading_from_a_seq_covers_the_whole_log_forward(d: Dashr) -> None:
    page = str(d.recall.read(seq=7))
    assert page.split("\n")[0] == "history_read from seq 7 — this session's history, seqs 0-42"
    assert [int(m) for m in re.findall(r"\(seq (\d+)", page)] == [
        8, 12, 14, 19, 21, 23, 25, 26, 29, 34, 36, 38, 40
    ]  # fmt: skip
    assert page.endswith(
        "Assistant (seq 40): All 42 tests pass; the retry budget is configurable.\n" + END_OF_RANGE
    )
    # a log-only seq starts at the next message event
    assert labels(str(d.recall.read(seq=9)))[0] == "User (seq 12)"
    assert labels(str(d.recall.read(seq=0)))[0] == "User (seq 2)"
    assert str(d.recall.read(seq=42)).split("\n")[1:] == [END_OF_RANGE]


@pytest.mark.parametrize("max_chars", [400, 450, 613, 1000, 2500])
@pytest.mark.parametrize("max_events", [1, 2, 3, 80])
@pytest.mark.parametrize(
    "first", [{"checkpoint": "c18"}, {"checkpoint": "c33"}, {"seq": 0}, {"seq": 13}]
)
def test_paging_never_duplicates_or_skips_a_character(
    d: Dashr, max_chars: int, max_events: int, first: dict[str, Any]
) -> None:
    whole = str(recall_of(d, read_max_chars=1_000_000, read_max_events=1000).read(**first))
    assert whole.endswith(END_OF_RANGE)
    pages = all_pages(recall_of(d, read_max_chars=max_chars, read_max_events=max_events), **first)
    for page in pages:
        assert len(page) <= max_chars
        assert page.split("\n")[0] == whole.split("\n")[0]
        assert len(labels(middle(page))) <= max_events
        cut = CUT.search(middle(page))
        if cut is not None:  # the count of characters left is exact
            token = parse_cursor(page.rsplit("\n", 1)[1].removeprefix("cursor: "))
            seq = int(LABEL.findall(middle(page))[-1][1])
            body = event_body(d.session.event(seq))
            assert int(cut.group(1)) == len(body) - token.offset
    assert reassemble(pages) == middle(whole)
    if max_chars < 1000:
        assert len(pages) > 1


def test_a_cut_event_continues_on_the_next_page(d: Dashr) -> None:
    r = recall_of(d, read_max_chars=700)
    first = str(r.read(checkpoint="c18"))
    assert first.split("\n")[1:4] == [
        "User (seq 2): Fix the failing retry tests in retry.test.ts.",
        "Assistant (seq 4): I will inspect the retry helper first.",
        '[tool call] read {"path":"src/retry.ts"}',
    ]
    assert "Tool result (seq 5): export function retryBudget() { return 3 }" in first
    token = first.rsplit("\n", 1)[1]
    assert re.fullmatch(r"cursor: c18@2:\d+", token)
    assert CUT.search(middle(first))
    second = str(r.read(cursor=token))  # the whole "cursor: …" line is accepted too
    assert second.split("\n")[1].startswith("Tool result (seq 5, continued): ")


def test_a_checkpoint_of_the_prior_node_pages_in_surface_order(d: Dashr) -> None:
    pages = all_pages(recall_of(d, read_max_chars=400, read_max_events=2), checkpoint="c33")
    seqs = [int(m.group(2)) for p in pages for m in LABEL.finditer(middle(p)) if not m.group(4)]
    assert seqs == [19, 12, 14, 21, 23, 25, 26, 29]
    tokens = [p.rsplit("\n", 1)[1] for p in pages[:-1]]
    assert all(re.fullmatch(r"cursor: c33@[0-7]:\d+", t) for t in tokens)


# --------------------------------------------------------------------------- search


SCANNED = (
    "16 events scanned (every message; the log's 27 other events are settings, markers and "
    "compaction records)"
)
"""What a whole-log search of the fixture session says it read."""


def test_search_finds_text_that_only_a_superseded_checkpoint_shadows(d: Dashr) -> None:
    """The regression pin for two-hop reachability (c18 is superseded by c33)."""
    result = d.recall.search("retryBudget() { return 3 }")
    lines = str(result).split("\n")
    assert lines[0] == (
        f'history_search "retryBudget() {{ return 3 }}" — {SCANNED}, 1 matched, showing 1'
    )
    assert lines[1] == f"1. seq 5 | shadowed | c18 | {MINUTE}"
    assert lines[2].startswith("…export function retryBudget() { return 3 } line 0: scheduler")
    assert lines[2].endswith("…") and len(lines[2]) <= 242
    assert lines[3] == "scanned 16, matched 1, truncated false"
    assert d.checkpoints()[0].superseded_by == "c33"
    assert "export function retryBudget() { return 3 }" in str(d.recall.read(checkpoint="c18"))


def test_search_reports_shadowed_and_visible_hits_in_seq_order(d: Dashr) -> None:
    assert d.recall.search("retry budget") == "\n".join(
        [
            f'history_search "retry budget" — {SCANNED}, 3 matched, showing 3',
            f"1. seq 8 | shadowed | c18 | {MINUTE}",
            "…The retry budget is 3 attempts.…",
            f"2. seq 23 | shadowed | c33 | {MINUTE}",
            "…Now make the retry budget configurable.…",
            f"3. seq 40 | visible | (visible) | {MINUTE}",
            "…All 42 tests pass; the retry budget is configurable.…",
            "scanned 16, matched 3, truncated false",
        ]
    )


def test_search_is_case_insensitive_and_words_span_any_whitespace(d: Dashr) -> None:
    lines = str(d.recall.search("  WHY does  THE backoff ")).split("\n")
    assert lines[0] == f'history_search "WHY does THE backoff" — {SCANNED}, 1 matched, showing 1'
    assert lines[1:3] == [
        f"1. seq 12 | shadowed | c33 | {MINUTE}",
        "…Why does the backoff test time out?…",
    ]
    assert "0 matched" in d.recall.search("whydoes the backoff")  # literal: no fuzzy joining


def test_tool_calls_and_reasoning_are_searchable(d: Dashr) -> None:
    assert "1. seq 4 | shadowed | c18" in d.recall.search('read {"path":"src/retry.ts"}')
    hits = str(d.recall.search("sleeps for real"))  # in the reasoning and the text: one event
    assert "1 matched" in hits and "1. seq 14 | shadowed | c33" in hits
    assert "…[reasoning] The backoff probably sleeps for real. Because" in hits


def test_a_prior_checkpoint_node_is_owned_by_the_checkpoint_that_shadowed_it(d: Dashr) -> None:
    hits = str(d.recall.search("Retry helper inspected"))
    assert hits.split("\n")[1] == f"1. seq 19 | shadowed | c33 | {MINUTE}"


def test_search_narrowed_to_one_checkpoint(d: Dashr) -> None:
    assert d.recall.search("retry budget", checkpoint="c33") == "\n".join(
        [
            'history_search "retry budget" in checkpoint c33 — 8 events scanned, 1 matched, '
            "showing 1",
            f"1. seq 23 | shadowed | c33 | {MINUTE}",
            "…Now make the retry budget configurable.…",
            "scanned 8, matched 1, truncated false",
        ]
    )
    assert "1. seq 8 | shadowed | c18" in d.recall.search("retry budget", checkpoint="C18 ")


def test_truncated_search_says_how_to_narrow(d: Dashr) -> None:
    assert d.recall.search("retry", limit=2) == "\n".join(
        [
            f'history_search "retry" — {SCANNED}, 9 matched, showing 2',
            f"1. seq 2 | shadowed | c18 | {MINUTE}",
            "…Fix the failing retry tests in retry.test.ts.…",
            f"2. seq 4 | shadowed | c18 | {MINUTE}",
            '…I will inspect the retry helper first. [tool call] read {"path":"src/retry.ts"}…',
            'more matches than shown: page on with cursor="h4", or narrow with checkpoint="c18", '
            "a longer phrase, or limit up to 20 (matches per checkpoint: c18 ×4, c33 ×3, "
            "(visible) ×2)",
            "scanned 16, matched 9, truncated true",
        ]
    )


def test_search_results_respect_the_character_budget(d: Dashr) -> None:
    r = recall_of(d, read_max_chars=400)
    text = str(r.search("retry"))
    assert len(text) <= 400
    lines = text.split("\n")
    shown = int(lines[0].rsplit(" ", 1)[1])
    assert 1 <= shown < 9 and lines[0].endswith(f"9 matched, showing {shown}")
    assert lines[1] == f"1. seq 2 | shadowed | c18 | {MINUTE}"
    assert lines[2] == "…Fix the failing retry tests in retry.test.ts.…"
    assert len(lines) == 1 + 2 * shown + 2
    assert lines[-2].startswith("more matches than shown: page on with cursor=")
    assert 'narrow with checkpoint="c18"' in lines[-2]
    assert lines[-1] == "scanned 16, matched 9, truncated true"


def test_zero_matches_explain_the_literal_scan(d: Dashr) -> None:
    assert d.recall.search("exponential jitter") == "\n".join(
        [
            f'history_search "exponential jitter" — {SCANNED}, 0 matched, showing 0',
            "no matches: the search is a literal, case-insensitive phrase match (words may span "
            "whitespace; no fuzzy or semantic matching). Try a shorter or different phrase, "
            'history_outline(), or read a likely range with history_read(checkpoint="c33").',
            "scanned 16, matched 0, truncated false",
        ]
    )


# --------------------------------------------------------------------------- executing step


def test_the_executing_step_is_excluded_from_read_and_search(d: Dashr) -> None:
    d.record_openai({"role": "user", "content": "Check the retry budget once more."})
    d.record_openai(
        {
            "role": "assistant",
            "content": "Searching history for the retry budget.",
            "tool_calls": [call("call_3", "history_search", {"query": "retry budget"})],
        }
    )
    running = d.session.executing_seqs()
    assert running == {46}
    assert "4 matched" in d.recall.search("retry budget")  # seq 44 (the user) counts, 46 not
    assert "17 events scanned (every message but the 1 of the step running now;" in (
        d.recall.search("retry budget")
    )
    assert "Searching history" not in d.recall.read(seq=0)
    with pytest.raises(RecallError) as info:
        d.recall.read(seq=46)
    assert str(info.value) == (
        "seq 46 belongs to the step running now (seq 46); "
        "its events can be read once that step has finished"
    )
    result = d.call_tool("history_search", '{"query": "retry budget"}')
    d.record_openai({"role": "tool", "tool_call_id": "call_3", "content": result})
    d.record_openai({"role": "assistant", "content": "Done."})
    assert d.session.executing_seqs() == set()
    assert "Searching history" in d.recall.read(seq=46)


# --------------------------------------------------------------------------- errors


def test_unknown_checkpoints_list_the_known_ids(d: Dashr) -> None:
    with pytest.raises(RecallError) as info:
        d.recall.read(checkpoint="c99")
    assert str(info.value) == (
        "unknown checkpoint 'c99'; known checkpoints: c18, c33 (history_outline() lists them)"
    )
    with pytest.raises(RecallError, match="unknown checkpoint 'c7'; known checkpoints: c18, c33"):
        d.recall.search("x", checkpoint="c7")
    with pytest.raises(RecallError, match="unknown checkpoint 'c5'; known"):
        d.recall.read(cursor="c5@0:0")


def test_unknown_checkpoint_before_any_compaction(tmp_path: Path, clock: Callable[[], int]) -> None:
    with Dashr.create(tmp_path / "s.jsonl", summarizer=ScriptedSummarizer(), clock=clock) as d:
        d.record_openai({"role": "user", "content": "Hello"})
        with pytest.raises(RecallError) as info:
            d.recall.read(checkpoint="c3")
        assert str(info.value) == (
            "unknown checkpoint 'c3': this session has no checkpoints yet (nothing has been "
            "compacted); read its history with history_read(seq=0)"
        )
        assert d.recall.tool_schemas() == []
        assert "1 matched" in d.recall.search("hello")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {},
            "history_read: give exactly one of checkpoint, seq, turn or cursor (got none); e.g. "
            'history_read(checkpoint="c20"), history_read(seq=0), history_read(turn=1), or '
            "history_read(cursor=<the token after 'cursor:' on a previous page>)",
        ),
        ({"checkpoint": "c18", "seq": 3}, "(got checkpoint and seq)"),
        (
            {"checkpoint": "c18", "seq": 3, "cursor": "s0@2:0"},
            "(got checkpoint and seq and cursor)",
        ),
        (
            {"seq": 43},
            "seq 43 is past the end of this session's log (the last seq is 42)",
        ),
        (
            {"seq": -1},
            "seq: expected an integer >= 0 (an event seq; this session has seqs 0-42), got -1",
        ),
        (
            {"seq": "7"},
            "seq: expected an integer >= 0 (an event seq; this session has seqs 0-42), got '7'",
        ),
        ({"seq": True}, "got True"),
        (
            {"checkpoint": 18},
            "checkpoint: expected a checkpoint id string such as 'c20', got int 18",
        ),
        (
            {"cursor": "page 2"},
            "malformed cursor 'page 2': expected the token after 'cursor:' on the last line of a "
            "history_read page, like 'c20@4:1200' (checkpoint c20, position 4, character 1200) "
            "or 's7@12:0' (the log from seq 7, next seq 12)",
        ),
        ({"cursor": 3}, "cursor: expected the token string a page ended with"),
        (
            {"cursor": "c18@4:0"},
            "malformed cursor 'c18@4:0': position 4 is past the end of c18's span (4 events)",
        ),
        (
            {"cursor": "c18@0:999"},
            "malformed cursor 'c18@0:999': character 999 is past the end of seq 2 (45 characters)",
        ),
        (
            {"cursor": "s7@3:0"},
            "malformed cursor 's7@3:0': seqs 7 and 3 must lie within this session's log "
            "(seqs 0-42) in that order",
        ),
        ({"cursor": "s0@50:0"}, "must lie within this session's log (seqs 0-42)"),
        ({"cursor": "s0@9:0"}, "malformed cursor 's0@9:0': seq 9 is not a message event"),
    ],
)
def test_bad_read_arguments_are_actionable(d: Dashr, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RecallError) as info:
        d.recall.read(**kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            ("",),
            {},
            "query: expected a non-empty phrase to search for (a case-insensitive "
            "literal match), got ''",
        ),
        ((" \n\t ",), {}, "query: expected a non-empty phrase"),
        ((None,), {}, "query: expected a phrase string, got NoneType None"),
        (("retry",), {"limit": 0}, "limit: expected an integer in [1, 20], got 0"),
        (("retry",), {"limit": 21}, "limit: expected an integer in [1, 20], got 21"),
        (("retry",), {"limit": "5"}, "limit: expected an integer in [1, 20], got '5'"),
        (("retry",), {"limit": 2.0}, "limit: expected an integer in [1, 20], got 2.0"),
        (("retry",), {"checkpoint": "c1"}, "unknown checkpoint 'c1'; known checkpoints: c18, c33"),
    ],
)
def test_bad_search_arguments_are_actionable(
    d: Dashr, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(RecallError) as info:
        d.recall.search(*args, **kwargs)
    assert message in str(info.value)


def test_limit_range_follows_the_configuration(d: Dashr) -> None:
    r = recall_of(d, search_max_hits=3)
    with pytest.raises(RecallError, match=r"limit: expected an integer in \[1, 3\], got 4"):
        r.search("retry", limit=4)
    assert "showing 3" in r.search("retry")


def test_config_must_be_a_recall_config(d: Dashr) -> None:
    with pytest.raises(ConfigError, match="recall: expected a RecallConfig, got"):
        Recall(d.session, {"read_max_chars": 10})  # type: ignore[arg-type]
    r = recall_of(d)
    r.config = RecallConfig(read_max_chars=500)
    assert len(r.read(checkpoint="c33")) <= 500


# --------------------------------------------------------------------------- model tools


def test_tool_schemas_appear_once_there_is_a_checkpoint(
    tmp_path: Path, clock: Callable[[], int]
) -> None:
    with Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(context_window_tokens=100_000, retain_tokens=300, auto=False),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    ) as d:
        record_steps(d, 4, chars=800, user="Go.")
        assert d.recall.tool_schemas() == []
        d.compact()
        first = d.recall.tool_schemas()
        record_steps(d, 4, chars=800, first=10)
        d.compact()
        assert json.dumps(d.recall.tool_schemas()) == json.dumps(first)  # byte-identical
    assert [t["function"]["name"] for t in first] == [
        "history_outline",
        "history_read",
        "history_search",
    ]
    for tool in first:
        assert tool["type"] == "function"
        params = tool["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
    assert "not the session file" in first[0]["function"]["description"]
    read = first[1]["function"]
    assert set(read["parameters"]["properties"]) == {"checkpoint", "seq", "turn", "cursor"}
    assert "exactly one of checkpoint" in read["description"]
    search = first[2]["function"]
    assert search["parameters"]["required"] == ["query"]
    assert search["parameters"]["properties"]["limit"]["maximum"] == 20
    assert "literal" in search["description"]


def test_call_tool_dispatches_json_or_mapping_arguments(d: Dashr) -> None:
    r = d.recall
    assert r.call_tool("history_outline", "") == r.outline()
    assert r.call_tool("history_outline", "{}") == r.outline()
    assert r.call_tool("history_read", '{"checkpoint": "c18"}') == r.read(checkpoint="c18")
    assert r.call_tool("history_read", {"seq": 12, "checkpoint": None}) == r.read(seq=12)
    text = r.call_tool("history_search", '{"query": "retry budget", "limit": 1}')
    assert type(text) is str and text == r.search("retry budget", limit=1)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        (
            "history_grep",
            "{}",
            "unknown tool 'history_grep'; the recall tools are history_outline, history_read, "
            "history_search",
        ),
        (
            "history_read",
            '{"checkpoint": "c18", "page": 2}',
            "history_read: unknown argument 'page'; accepted: checkpoint, seq, turn, cursor",
        ),
        (
            "history_search",
            {"q": "x", "max": 1},
            "history_search: unknown arguments 'q', 'max'; accepted: query, checkpoint, limit",
        ),
        (
            "history_outline",
            '{"verbose": true}',
            "history_outline: unknown argument 'verbose'; accepted: none (call it with {})",
        ),
        ("history_search", "{}", "history_search: missing the required argument 'query'"),
        (
            "history_read",
            "{checkpoint: c18}",
            "history_read: arguments must be a JSON object, got invalid JSON",
        ),
        ("history_read", '["c18"]', "history_read: arguments must be a JSON object, got list"),
        ("history_read", 42, "arguments must be a JSON object string or a mapping, got int"),
        ("history_read", '{"seq": "12"}', "seq: expected an integer >= 0"),
    ],
)
def test_call_tool_rejects_bad_calls(d: Dashr, name: str, arguments: Any, message: str) -> None:
    with pytest.raises(RecallError) as info:
        d.recall.call_tool(name, arguments)
    assert message in str(info.value)


def test_pointer_names_the_checkpoint_and_the_recall_tools(d: Dashr) -> None:
    c18 = d.checkpoints()[0]
    assert pointer_text(c18) == (
        f"Context was condensed into checkpoint c18: 4 earlier events (~{c18.shadowed_tokens} "
        "tokens) were replaced by its summary. The originals are still recorded in this "
        'session: call history_read(checkpoint="c18") or history_search(query) to get them '
        "back; do not read or decompress the session file."
    )


# --------------------------------------------------------------------------- display


def test_results_are_plain_text_with_rich_display(d: Dashr) -> None:
    from IPython.lib.pretty import pretty

    search = d.recall.search("retry budget")
    assert isinstance(search, RecallResult) and isinstance(search, str)
    assert type(search.text) is str
    assert pretty(search) == search.text  # IPython shows the plain text, not a quoted repr
    html = search._repr_html_()
    assert "<mark>retry budget</mark>" in html
    assert "<ol>" in html and html.count("<li>") == 3
    outline = d.recall.outline()._repr_html_()
    nowrap = '<td style="text-align:left;vertical-align:top;white-space:nowrap">'
    assert outline.count("<table>") == 2 and f"{nowrap}superseded by c33</td>" in outline
    read = d.recall.read(checkpoint="c33")._repr_html_()
    assert read.startswith('<div class="dashr-recall dashr-read" style="font-family:')
    assert "<compacted-summary>" not in read and "&lt;compacted-summary&gt;" in read
    assert d.recall.read(checkpoint="c33")._repr_html_() == read  # deterministic
    again = pickle.loads(pickle.dumps(search))
    assert again == search and again._repr_html_() == html


def test_a_reopened_session_recalls_identically(tmp_path: Path, clock: Callable[[], int]) -> None:
    path = tmp_path / "s.jsonl"
    with build(path, clock) as d:
        live = [
            d.recall.outline(),
            d.recall.read(checkpoint="c33"),
            d.recall.read(seq=0),
            d.recall.search("retry"),
        ]
    with Dashr.open(path, read_only=True) as again:
        r = again.recall
        assert [r.outline(), r.read(checkpoint="c33"), r.read(seq=0), r.search("retry")] == live


# --------------------------------------------------------------------------- cost


def long_session(tmp_path: Path, clock: Callable[[], int], steps: int) -> Dashr:
    d = Dashr.create(
        None,
        in_memory=True,
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        summarizer=ScriptedSummarizer(),
        meter=TokenMeter("chars"),
        clock=clock,
    )
    record_steps(d, steps, chars=300, user="Walk the whole tree.")
    return d


def test_a_page_renders_only_its_own_events(
    tmp_path: Path, clock: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = long_session(tmp_path, clock, 1500)
    r = recall_of(d, read_max_events=5)
    r.read(seq=0)  # builds the seq index once
    rendered: list[int] = []
    real = render_mod.event_body

    def counting(event: Any, decoded: bool = False) -> str:
        rendered.append(event.seq)
        return real(event, decoded)

    monkeypatch.setattr(render_mod, "event_body", counting)  # pages
    monkeypatch.setattr(queries_mod, "event_body", counting)  # cursor checks
    page = str(r.read(seq=3000))
    assert len(labels(page)) == 5
    assert len(rendered) == 5  # O(page), not O(log)
    rendered.clear()
    r.read(cursor=page.rsplit("\n", 1)[1])
    assert len(rendered) <= 6  # the cursor's event is checked once more


def test_search_processes_only_new_events(
    tmp_path: Path, clock: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = long_session(tmp_path, clock, 200)
    r = recall_of(d)
    # 401 message events; the last step (an assistant call and its result) is still running
    assert "scanned 399, matched 1," in r.search("# step 117\n")
    seen: list[int] = []
    real = search_mod.normalize
    monkeypatch.setattr(queries_mod, "normalize", lambda text: seen.append(1) or real(text))
    assert "1 matched" in r.search("# step 42 def")
    assert len(seen) == 1  # only the query
    record_steps(d, 2, chars=300, first=500)
    assert "scanned 403, matched 1," in r.search("# step 500")
    assert len(seen) == 2 + 4  # the query and the four new events


def test_the_search_index_spans_several_chunks(
    tmp_path: Path, clock: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_mod, "CHUNK_CHARS", 2000)
    d = long_session(tmp_path, clock, 100)
    r = recall_of(d, search_max_hits=200, read_max_chars=1_000_000)
    running = d.session.executing_seqs()
    assert len(running) == 2
    bodies = {
        e.seq: norm(event_body(e))
        for e in d.session.events
        if e.is_surface and e.seq not in running
    }
    for query in ("def compute_backoff", "# step 37 def", "step 99", "walk the whole", "src/mod_5"):
        text = str(r.search(query, limit=200))
        expected = sorted(seq for seq, body in bodies.items() if norm(query) in body)
        assert f"scanned 199, matched {len(expected)}," in text
        assert [int(x) for x in re.findall(r"^\d+\. seq (\d+) ", text, re.MULTILINE)] == expected
    assert len(r._search.sealed) > 5


# --------------------------------------------------------------------------- real sessions


def corpus_dashr(path: Path, **kwargs: Any) -> Dashr:
    data = load_corpus(path)
    d = Dashr.create(
        None,
        in_memory=True,
        config=CompactionConfig(recency_window_tokens=20_000, retain_tokens=4_000),
        summarizer="extractive",
        tools=data["tools"],
        **kwargs,
    )
    for message in data["messages"]:
        d.record_openai(message)
        d.request_messages()
    return d


def norm(text: str) -> str:
    return " ".join(text.lower().split())


@pytest.mark.corpus
def test_a_real_session_recalls_every_checkpoint(tmp_path: Path) -> None:
    files = [p for p in corpus_files() if p.stem == "django__django-11138"]
    if not files:
        pytest.skip("../shared/corpus is absent")
    path = files[0]
    d = corpus_dashr(path)
    cps = d.checkpoints()
    assert len(cps) >= 3
    assert [c.superseded_by for c in cps[:-1]] == [c.id for c in cps[1:]]
    r = recall_of(d, read_max_chars=3000, read_max_events=10)
    outline = str(d.recall.outline())
    assert len(outline.split("\n")) > 3
    for c in cps:
        assert f"\n{c.id} | summary seq {c.summary_seq} | {len(c.shadowed_seqs)} events" in outline
        pages = all_pages(r, checkpoint=c.id)
        assert all(len(p) <= 3000 for p in pages)
        text = reassemble(pages)
        assert text == middle(
            str(recall_of(d, read_max_chars=10**6, read_max_events=1000).read(checkpoint=c.id))
        )
        firsts = [int(m.group(2)) for m in LABEL.finditer(text)]
        assert firsts == list(c.shadowed_seqs)
    # the whole log from seq 0: every message event once, in seq order
    pages = all_pages(r, seq=0)
    seqs = [int(m.group(2)) for p in pages for m in LABEL.finditer(middle(p)) if not m.group(4)]
    assert seqs == [e.seq for e in d.session.events if e.is_surface]
    assert "0 matched" in d.recall.search("this phrase is not in the session 8c1f")
    # a step that is running now is invisible to recall until it finishes
    d.record_openai(
        {
            "role": "assistant",
            "content": "Looking up the unmistakable marker 5e2d.",
            "tool_calls": [call("call_recall", "history_search", {"query": "marker 5e2d"})],
        }
    )
    running = max(d.session.executing_seqs())
    assert "0 matched" in d.recall.search("unmistakable marker 5e2d")
    with pytest.raises(RecallError, match=f"seq {running} belongs to the step running now"):
        d.recall.read(seq=running)


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(compacting_under=20_000))
def test_distinctive_lines_of_shadowed_tool_results_are_found_and_read(path: Path) -> None:
    d = corpus_dashr(path)
    cps = d.checkpoints()
    assert cps, no_pass_ran(path, 20_000)
    owner = {seq: c.id for c in cps for seq in c.shadowed_seqs}
    # What search reads: the bodies with their tool calls' arguments decoded.
    bodies = {e.seq: norm(event_body(e, decoded=True)) for e in d.session.events if e.is_surface}
    candidates: list[tuple[int, str]] = []
    for seq in sorted(owner):
        event = d.session.event(seq)
        if event.type == "tool/result":
            candidates.extend((seq, line.strip()) for line in event.message.text.splitlines())
    candidates = [(s, x) for s, x in candidates if 24 <= len(x) <= 200]
    step = max(1, len(candidates) // 50)  # spread the sample over every shadowed span
    ordered = sorted(range(len(candidates)), key=lambda i: (i % step, i))
    found: list[tuple[int, str]] = []
    seen: set[str] = set()
    for seq, line in (candidates[i] for i in ordered):
        key = norm(line)
        if key in seen:
            continue
        seen.add(key)
        if sum(key in body for body in bodies.values()) == 1:
            found.append((seq, line))
        if len(found) == 50:
            break
    assert len(found) >= 10, path.stem
    superseded = {c.id for c in cps if c.superseded_by is not None}
    if superseded:  # two-hop reachability on real data: spans of superseded checkpoints
        assert any(owner[seq] in superseded for seq, _ in found), path.stem
    r = d.recall
    reads = {c.id: reassemble(all_pages(r, checkpoint=c.id)) for c in cps}
    for seq, line in found:
        text = str(r.search(line))
        lines = text.split("\n")
        assert lines[-1].endswith(", matched 1, truncated false"), (line, text)
        assert (
            lines[1] == f"1. seq {seq} | shadowed | {owner[seq]} | " + lines[1].rsplit(" | ", 1)[1]
        )
        assert line in reads[owner[seq]]


def test_search_lists_originals_before_checkpoint_summaries_that_echo_them(
    tmp_path: Path, clock: Any
) -> None:
    echo = ScriptedSummarizer(text="## Errors and Fixes\n- `ValueError: bad budget 7` in retry.py")
    d = Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(recency_window_tokens=3000, retain_tokens=600),
        summarizer=echo,
        meter=TokenMeter("chars"),
        clock=clock,
    )
    d.record_openai({"role": "user", "content": "why does it fail? ValueError: bad budget 7"})
    record_steps(d, 20, chars=500)
    d.compact()
    record_steps(d, 20, chars=500, first=100, user="still failing: ValueError: bad budget 7")
    d.compact()
    text = d.history_search("bad budget 7")
    hits = re.findall(r"^\d+\. seq (\d+) \| (\w+) \| (\S+) \|", text, flags=re.M)
    nodes = {c.node_seq for c in d.checkpoints()}
    kinds = ["summary" if int(seq) in nodes else "original" for seq, _, _ in hits]
    assert kinds[0] == "original" and "summary" in kinds
    assert kinds == sorted(kinds)  # every original before every summary echo
    assert hits[0][0] == "2"  # the user's own message


# --------------------------------------------------------------------------- pure pieces


def message_event(
    seq: int, kind: str, blocks: list[ContentBlock], *, is_error: bool | None = None
) -> Event:
    """A message event as the log holds it (tool results answer ``call_1`` of ``read``)."""
    is_tool = kind == "tool/result"
    message = Message(
        f"m{seq}",
        "tool" if is_tool else kind.split("/")[0],
        {"kind": "user"},
        tuple(blocks),
        tool_call_id="call_1" if is_tool else None,
        tool_name="read" if is_tool else None,
        is_error=is_error,
    )
    return Event(seq, kind, 0, {"message": message.to_json()}, surface_op="append")


def test_a_cursor_token_round_trips_and_may_keep_its_prefix() -> None:
    assert parse_cursor("cursor: c020@4:1200") == Cursor("c20", 4, 1200)
    assert str(parse_cursor(" s7@12:0 ")) == "s7@12:0"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("c20@4", "malformed cursor 'c20@4': expected the token after 'cursor:'"),
        ("x1@2:3", "malformed cursor 'x1@2:3'"),
        (42, "cursor: expected the token string a page ended with .* got int 42"),
    ],
)
def test_a_malformed_cursor_token_is_rejected_with_an_example(token: object, message: str) -> None:
    with pytest.raises(RecallError, match=message):
        parse_cursor(token)


def test_the_search_form_is_lowercased_with_whitespace_runs_collapsed() -> None:
    assert normalize("  Retry\n\tBUDGET  is 3 ") == "retry budget is 3"


def test_a_snippet_keeps_a_third_of_its_width_before_a_match_spanning_whitespace() -> None:
    body = "a" * 300 + " Retry\n\n  Budget " + "b" * 300
    before, match, after = snippet(body, "retry budget", 60)
    assert (before, match) == ("a" * 19 + " ", "Retry Budget")
    assert after == " " + "b" * 27
    assert len(before + match + after) == 60


def test_a_snippet_maps_a_match_back_when_lowercasing_changes_the_length() -> None:
    # "İ".lower() is two characters, so the regex misses and the offsets are mapped back.
    assert snippet("go to İSTANBUL now", normalize("İSTANBUL")) == ("go to ", "İSTANBUL", " now")


def test_the_search_index_lists_each_matching_event_once_across_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search_mod, "CHUNK_CHARS", 20)
    index = SearchIndex()
    texts = ["retry retry retry", "nothing here", "the retry budget", "budget", "retry"]
    for text in texts:
        index.add(text)
    assert len(index.sealed) == 2  # and a tail of one
    assert index.find("retry") == [0, 2, 4]
    assert index.find("budget") == [2, 3]
    assert index.find("y b") == [2]  # never across two events
    assert [index.text_of(i) for i in range(len(texts))] == texts


def test_tool_call_arguments_are_shown_compactly_when_they_parse() -> None:
    assert compact_arguments('{"path": "src/retry.ts", "n": [1, 2]}') == (
        '{"path":"src/retry.ts","n":[1,2]}'
    )
    assert compact_arguments("{not json") == "{not json"
    assert minute_utc(1_783_339_380_999) == "2026-07-06 12:03Z"


def test_an_event_body_lists_its_blocks_in_order_one_per_line() -> None:
    image = ImageBlock("a1", "image/png", 800, 600, None)
    assistant = message_event(
        5,
        "assistant/message",
        [
            ReasoningBlock("The helper caps attempts."),
            TextBlock("I will inspect it."),
            ToolCallBlock("call_1", "read", '{"path": "src/retry.ts"}'),
            image,
        ],
    )
    assert event_label(assistant) == "Assistant (seq 5"
    assert event_body(assistant) == (
        "[reasoning] The helper caps attempts.\nI will inspect it.\n"
        '[tool call] read {"path":"src/retry.ts"}\n[image image/png 800x600 attachment a1]'
    )
    failed = message_event(8, "tool/result", [TextBlock("ENOENT")], is_error=True)
    assert event_label(failed) == "Tool result (seq 8, error"
    empty = message_event(9, "user/message", [TextBlock("")])
    assert (event_label(empty), event_body(empty)) == ("User (seq 9", "(empty)")


def test_a_page_cuts_an_event_that_cannot_fit_and_the_next_resumes_at_the_next_character() -> None:
    body = " ".join(f"word{i}" for i in range(200))
    event = message_event(4, "user/message", [TextBlock(body)])

    def page(offset: int) -> tuple[str, Cursor | None]:
        result = read_page(
            "header",
            iter([(0, event)]),
            range_id="c20",
            start_offset=offset,
            max_position=1,
            max_chars=300,
            max_events=10,
        )
        return result.text, result.cursor

    first, cursor = page(0)
    assert cursor is not None and (cursor.range, cursor.position) == ("c20", 0)
    assert len(first) <= 300
    kept = body[: cursor.offset]
    assert kept.endswith(" ")  # cut after a space near the limit
    left = len(body) - len(kept)
    assert first == f"header\nUser (seq 4): {kept}\n… [+{left} chars]\ncursor: {cursor}"
    second, _ = page(cursor.offset)
    assert second.startswith(f"header\nUser (seq 4, continued): {body[cursor.offset :][:50]}")


@pytest.mark.parametrize(
    ("total", "current", "state"),
    [(3, 3, "visible"), (3, 0, "shadowed"), (3, 1, "partly shadowed"), (0, 0, "shadowed")],
)
def test_a_turn_row_says_how_much_of_the_turn_is_visible(
    total: int, current: int, state: str
) -> None:
    turn = Turn(2, 10, None, None, ())
    first = "Why does the\nbackoff test " + "x" * 80
    row = turn_row(turn, 36, total, current, first)
    assert row[:4] == ("turn 2 (open)", "seqs 10-36", f"{total} events", state)
    assert len(row[4]) == 80 and row[4].startswith("Why does the backoff test x")
    assert row[4].endswith("…")
    assert turn_row(Turn(1, 1, 7, None, ()), 36, 1, 1, None)[1:] == (
        "seqs 1-7",
        "1 event",
        "visible",
        "(no user message)",
    )


def test_the_narrowing_note_suggests_a_checkpoint_a_longer_phrase_and_a_larger_limit() -> None:
    owners = ["(visible)", "c8", "c8", "c14"]
    assert narrow_note(owners, 5, 20) == (
        'more matches than shown: narrow with checkpoint="c8", a longer phrase, or limit up to '
        "20 (matches per checkpoint: (visible) ×1, c8 ×2, c14 ×1)"
    )
    assert narrow_note(None, 20, 20) == "more matches than shown: narrow with a longer phrase"
    assert zero_note(None).endswith("read a likely range with history_read(seq=0).")


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("history_read", '{"seq": 3, "cursor": null}', {"seq": 3}),
        ("history_outline", "  ", {}),
        ("history_search", {"query": "retry", "limit": 2}, {"query": "retry", "limit": 2}),
    ],
)
def test_tool_arguments_drop_nulls_and_accept_json_or_a_mapping(
    name: str, arguments: Any, expected: dict[str, Any]
) -> None:
    assert tool_arguments(name, arguments) == expected


def test_tool_arguments_reject_a_search_without_its_query() -> None:
    with pytest.raises(RecallError, match="missing the required argument 'query'"):
        tool_arguments("history_search", '{"limit": 3, "query": null}')
