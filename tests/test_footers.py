"""Checkpoint footers and the archive marker (SPEC §7.2): exact text, composed from the log."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest
from corpus_events import _message, assistant, make_event, tool, user

from dashr_ext._archive import BUCKETS, bucket_counts, build_entry
from dashr_ext._events import Event
from dashr_ext._footers import archive_marker, checkpoint_footer, compose_footer, frame_checkpoint
from dashr_ext._templates import render
from dashr_ext.errors import EventError

SPEC_MARKER = "\n".join(
    [
        "[compaction archive]",
        "The original context condensed here is stored verbatim in kernel variable "
        'dashr_compaction_archive["c42"]:',
        "  user_requests ×3 / assistant_responses ×9 / tool_results ×8 / file_ops ×4",
        "When you need original details, read them with run_cell, e.g.:",
        '  print(dashr_compaction_archive["c42"]["tool_results"][0]["text"])',
    ]
)


def test_checkpoint_footer_has_the_exact_spec_wording() -> None:
    assert checkpoint_footer("c42", (5, 31), 27, 18422) == (
        "[checkpoint c42: shadows conversation span #5\u2013#31 (27 events, ~18422 tokens); "
        'originals retrievable via history_read("c42") or dashr_compaction_archive["c42"]]'
    )
    assert "(1 event, ~9 tokens)" in checkpoint_footer("c3", (2, 2), 1, 9)


def test_archive_marker_matches_the_spec_text_and_lists_only_nonempty_buckets() -> None:
    counts = {
        "user_requests": 3,
        "assistant_responses": 9,
        "tool_results": 8,
        "file_ops": 4,
        "prior_checkpoints": 0,
        "context": 0,
    }
    assert archive_marker("c42", counts) == SPEC_MARKER


def test_archive_marker_without_messages_has_no_example() -> None:
    assert archive_marker("c7", dict.fromkeys(BUCKETS, 0)) == (
        "[compaction archive]\n"
        "The original context condensed here is stored verbatim in kernel variable "
        'dashr_compaction_archive["c7"]:\n'
        "  (nothing archived)"
    )


def context(seq: int, text: str) -> Event:
    content = [{"type": "text", "text": text}]
    return make_event(seq, "context/message", _message("context", "plugin", content, f"m{seq}"))


EXAMPLE_SPANS = {
    "tool_results": [user(1, "u"), assistant(2, "a"), tool(3, "x", "the output")],
    "assistant_responses": [user(1, "u"), assistant(2, "the answer")],
    "user_requests": [context(1, "ctx"), user(2, "the request")],
    "prior_checkpoints": [context(1, "ctx"), user(2, "old summary", kind="compact-checkpoint")],
    "context": [context(1, "the context")],
}


@pytest.mark.parametrize("bucket", list(EXAMPLE_SPANS))
def test_the_markers_print_example_runs_and_prints_the_first_original(bucket: str) -> None:
    entry = build_entry(
        EXAMPLE_SPANS[bucket],
        checkpoint="c42",
        at_ms=0,
        reason="manual",
        engine="summary",
        tokens=10,
        session_id="s-1",
    )
    marker = archive_marker("c42", bucket_counts(entry))
    example = marker.splitlines()[-1].strip()
    assert example == f'print(dashr_compaction_archive["c42"]["{bucket}"][0]["text"])'
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(example, {"dashr_compaction_archive": {"c42": entry}})
    assert out.getvalue() == entry[bucket][0]["text"] + "\n"


def summary_data(archive: object) -> dict[str, Any]:
    return {
        "compactionId": "k1",
        "checkpoint": "c42",
        "trigger": "pressure",
        "engine": "summary",
        "summary": "raw summary",
        "shadowedRange": {"start": 5, "end": 31},
        "shadowedSeqs": list(range(5, 32)),
        "shadowedTokenCount": 18422,
        "summarizer": {"kind": "extractive", "model": None},
        "archive": archive,
    }


def test_compose_footer_is_the_footer_a_blank_line_and_the_marker() -> None:
    counts = {"user_requests": 3, "assistant_responses": 9, "tool_results": 8, "file_ops": 4}
    text = compose_footer(summary_data(counts))
    assert text == checkpoint_footer("c42", (5, 31), 27, 18422) + "\n\n" + SPEC_MARKER


def test_compose_footer_is_byte_identical_after_a_log_round_trip() -> None:
    data = summary_data({"tool_results": 2, "context": 1})
    assert compose_footer(json.loads(json.dumps(data))) == compose_footer(data)


@pytest.mark.parametrize("archive", [{"error": "kernel unavailable"}, None])
def test_compose_footer_omits_the_marker_when_the_archive_failed(archive: object) -> None:
    assert compose_footer(summary_data(archive)) == checkpoint_footer("c42", (5, 31), 27, 18422)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("checkpoint", 42, "data.checkpoint"),
        ("shadowedRange", [5, 31], "data.shadowedRange"),
        ("shadowedSeqs", "5-31", "data.shadowedSeqs"),
        ("shadowedTokenCount", "many", "data.shadowedTokenCount"),
        ("archive", {"tool_results": "8"}, "data.archive.tool_results"),
    ],
)
def test_compose_footer_names_a_malformed_field(key: str, value: object, message: str) -> None:
    data = summary_data({"tool_results": 8})
    data[key] = value
    with pytest.raises(EventError, match=message):
        compose_footer(data)


def test_unknown_counts_follow_the_known_buckets_and_an_error_key_is_not_listed() -> None:
    marker = archive_marker("c5", {"extra": 2, "error": 1, "tool_results": 1, "context": 0})
    assert marker.splitlines()[2] == "  tool_results ×1 / extra ×2"


@pytest.mark.parametrize(
    ("counts", "bucket"),
    [
        ({"user_requests": 1, "assistant_responses": 1}, "assistant_responses"),
        ({"context": 4, "prior_checkpoints": 1}, "prior_checkpoints"),
        ({"file_ops": 3, "context": 1}, "context"),
    ],
)
def test_the_example_names_the_most_useful_nonempty_bucket(
    counts: dict[str, int], bucket: str
) -> None:
    example = archive_marker("c5", counts).splitlines()[-1]
    assert example == f'  print(dashr_compaction_archive["c5"]["{bucket}"][0]["text"])'


def test_compose_footer_with_empty_counts_says_nothing_was_archived() -> None:
    text = compose_footer(summary_data({}))
    assert text.endswith("\n\n" + archive_marker("c42", {}))
    assert text.endswith("  (nothing archived)")


def test_compose_footer_counts_events_in_the_singular() -> None:
    data = summary_data(None) | {"shadowedRange": {"start": 7, "end": 7}, "shadowedSeqs": [7]}
    assert "span #7\u2013#7 (1 event, ~18422 tokens)" in compose_footer(data)


def test_compose_footer_rejects_a_boolean_count() -> None:
    with pytest.raises(
        EventError, match=r"data\.shadowedTokenCount: expected an integer, got bool"
    ):
        compose_footer(summary_data(None) | {"shadowedTokenCount": True})


def test_frame_checkpoint_wraps_the_summary_in_tags_between_preamble_and_footer() -> None:
    footer = checkpoint_footer("c42", (5, 31), 27, 18422)
    text = frame_checkpoint("## Current Work\n- fixing", footer)
    preamble = render("checkpoint").strip()
    assert text == (
        f"{preamble}\n\n<compacted-summary>\n## Current Work\n- fixing\n"
        f"</compacted-summary>\n\n{footer}"
    )
