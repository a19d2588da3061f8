"""Stub and state modes of the extractive summarizer (SPEC §6.3), and the keyword line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from corpus_events import CORPUS, assistant, corpus_files, session_from_corpus, tool, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_summarizers_extractive import first_span, second_span

from dashr_ext._events import Event
from dashr_ext._meter import TokenMeter
from dashr_ext._summarizers import ExtractiveSummarizer, stub_keywords
from dashr_ext._summarizers.base import SummaryRequest, span_text
from dashr_ext._summarizers.keywords import trim_stub
from dashr_ext._templates import render, state_sections, summary_sections
from dashr_ext.errors import SummarizerError

METER = TokenMeter()
ROOT = Path(__file__).resolve().parents[1]
STATE_HEADINGS = (
    "Goal",
    "Constraints",
    "Decisions",
    "Current State",
    "Key Values",
    "Open Questions",
    "Next Steps",
)


def run(
    span: Sequence[Event],
    mode: str,
    budget: int,
    previous: str | None = None,
    summarizer: ExtractiveSummarizer | None = None,
    **fields: Any,
) -> str:
    request = SummaryRequest(
        span=span,
        previous_summary=previous,
        max_summary_tokens=budget,
        prefix_messages=[],
        count_tokens=METER.count_text,
        mode=mode,
        **fields,
    )
    result = (summarizer or ExtractiveSummarizer()).summarize(request)
    assert (result.kind, result.model) == ("extractive", None)
    return result.text


def stub(span: Sequence[Event], budget: int = 160, **fields: Any) -> str:
    return run(span, "stub", budget, **fields)


def state(span: Sequence[Event], previous: str | None = None, budget: int = 2048) -> str:
    return run(span, "state", budget, previous)


def sections_of(text: str) -> dict[str, list[str]]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {
        parts[i].strip(): [line for line in parts[i + 1].splitlines() if line.startswith("- ")]
        for i in range(1, len(parts), 2)
    }


def keyword_groups(text: str) -> dict[str, str]:
    line = stub_keywords(text) or ""
    return dict(group.split(": ", 1) for group in re.split(r"; (?=[a-z]+: )", line) if group)


def anchors_of(line: str) -> set[str]:
    """The anchors of a keyword line's content, without backticks."""
    out: set[str] = set()
    for group in re.split(r"; (?=[a-z]+: )", line):
        body = group.split(": ", 1)[1]
        out.update(
            a.strip().strip("`").strip() for a in re.findall(r"\s*(``.+?``|`[^`]+`|[^,]+)", body)
        )
    return out - {""}


# --------------------------------------------------------------------------- the keyword line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Did a thing.\nKeywords: paths: src/a.py; values: 0.25", "paths: src/a.py; values: 0.25"),
        ("Did it.\n- **Keywords:** ids: retryBudget  \n", "ids: retryBudget"),
        ("keywords: errors: `KeyError: 'x'`", "errors: `KeyError: 'x'`"),
        ("Did it.\n  * __Keywords__: commands: pytest -x", "commands: pytest -x"),
        ("Line one.\nKeywords:\nmore", None),
        ("No keyword line here. Keywords: inline is not a line start", None),
        ("## Critical Context\n- Keywords — paths: `a.py`", None),  # a summary's line
        ("", None),
    ],
)
def test_stub_keywords_returns_the_content_of_the_keyword_line(
    text: str, expected: str | None
) -> None:
    assert stub_keywords(text) == expected


def test_trim_stub_cuts_after_the_keyword_line_and_normalizes_it() -> None:
    reply = "Ran the tests.\nFixed `a.py`.\n**Keywords:** paths: a.py\n\nHope this helps!"
    assert trim_stub(reply) == "Ran the tests.\nFixed `a.py`.\nKeywords: paths: a.py"
    assert trim_stub("  Just two lines.\nNo keywords.  ") == "Just two lines.\nNo keywords."
    assert trim_stub("Did it.\nKeywords:   \nchatter") == "Did it."
    assert trim_stub("- keywords: ids: x_y") == "Keywords: ids: x_y"


# --------------------------------------------------------------------------- stub mode


def test_stub_is_request_done_outcome_lines_then_the_keyword_line() -> None:
    assert stub(first_span()) == (
        "Request (seq 1): Fix the failing retry tests in tests/test_retry.py. The budget must "
        "stay at 3 attempts; do not touch setup.cfg.\n"
        "Done: ran `pytest -q tests/test_retry.py`; edited src/retry.py\n"
        "Outcome: `pytest -q tests/test_retry.py` failed (exit 1): `ValueError: retry budget "
        "exhausted after 3 attempts`; assistant…\n"
        "Keywords: errors: `ValueError: retry budget exhausted after 3 attempts`, "
        "`FAILED tests/test_retry.py::test_budget - ValueError: retry budget exhausted`; "
        "paths: tests/test_retry.py, src/retry.py, setup.cfg; values: 3 attempts; ids: ValueError, "
        "test_budget, retry_budget; commands: pytest -q tests/test_retry.py"
    )


def test_a_roomier_stub_keeps_the_last_assistant_words_and_more_anchors() -> None:
    text = stub(first_span() + second_span(), budget=400)
    lines = text.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [
        "Requests",
        "Done:",
        "Outcome:",
        "Keywords:",
    ]
    assert lines[0].startswith("Requests (seqs 1, 8): Fix the failing retry tests")
    assert lines[0].endswith("| latest: Great. Please also add a changelog entry to CHANGELOG.md.")
    assert "`pytest -q tests/test_retry.py` ×2" in lines[1]
    assert lines[2] == (
        "Outcome: assistant (seq 11): Done: the tests pass and CHANGELOG.md has the entry."
    )
    commands = keyword_groups(text)["commands"]
    assert commands == "pytest -q tests/test_retry.py, echo '- fix retry budget' >> CHANGELOG.md"


def test_stub_leaves_out_anchors_the_index_already_lists() -> None:
    fresh = keyword_groups(stub(first_span()))
    assert "src/retry.py" in fresh["paths"] and "setup.cfg" in fresh["paths"]
    index = [
        "paths: src/retry.py, `setup.cfg`; ids: retry_budget",
        "errors: `ValueError: retry budget exhausted after 3 attempts`",
    ]
    deduped = keyword_groups(stub(first_span(), index_keywords=index))
    assert deduped["paths"] == "tests/test_retry.py"
    assert "retry_budget" not in deduped["ids"] and "test_budget" in deduped["ids"]
    assert "after 3 attempts" not in deduped["errors"]
    assert "FAILED tests/test_retry.py::test_budget" in deduped["errors"]


def test_an_anchor_is_indexed_only_as_a_whole_literal() -> None:
    # "src/retry.py" inside "old/src/retry.py" or "src/retry.pyc" is another literal.
    index = ["paths: old/src/retry.py, src/retry.pyc"]
    assert "src/retry.py" in keyword_groups(stub(first_span(), index_keywords=index))["paths"]


def test_stub_background_and_recent_stubs_never_become_material() -> None:
    plain = stub(first_span())
    background = "## Current State\n- `src/unrelated_module.py` — edited ×4\n- ZETA_FLAG=1"
    recent = ["Done: ran `make docs`\nKeywords: paths: docs/index.rst"]
    with_context = stub(first_span(), background=background, recent_stubs=recent)
    assert with_context == plain
    assert "unrelated_module" not in with_context and "docs/index.rst" not in with_context


def test_stub_skips_checkpoint_nodes_and_needs_something_else() -> None:
    node = user(0, "<compacted-summary>\n- `planted/secret_path.py`\n</compacted-summary>")
    node = user(0, node.message.text, kind="compact-checkpoint")
    assert stub([node, *first_span()]) == stub(first_span())
    with pytest.raises(SummarizerError, match="stub mode needs a span with at least one"):
        stub([node])


def test_stub_of_tool_calls_without_commands_names_the_tools() -> None:
    span = [
        assistant(1, "", [("c1", "list_tables", {})]),
        tool(2, "c1", "orders, customers", name="list_tables"),
    ]
    assert stub(span).splitlines()[0] == "Done: called list_tables ×1"


def test_stub_fails_with_a_failed_last_command_and_a_tally_otherwise() -> None:
    span = first_span()[:3]
    assert stub(span, budget=300).splitlines()[2] == (
        "Outcome: `pytest -q tests/test_retry.py` failed (exit 1): `ValueError: retry budget "
        "exhausted after 3 attempts`; assistant (seq 2): I will run the tests first."
    )
    passing = [*second_span()[:2]]
    assert stub(passing, budget=300).splitlines()[-2] == (
        "Outcome: `pytest -q tests/test_retry.py`: 5 passed in 0.22s; assistant (seq 6): Now I "
        "will rerun the tests."
    )


def chars_stub(span: Sequence[Event], budget: int) -> str:
    request = SummaryRequest(span, None, budget, [], len, mode="stub")
    return ExtractiveSummarizer().summarize(request).text


def test_stub_drops_keywords_before_clipping_lines() -> None:
    # Each line is first held to its share of the budget (here 400 characters, counted by
    # len); past that, anchors go before a line is clipped any further.
    full = chars_stub(first_span(), 4096)
    lines = full.splitlines()[:-1]
    assert all(len(line) < 400 for line in lines)
    tight = max(len("\n".join(lines)) + 60, 500)
    text = chars_stub(first_span(), tight)
    assert len(text) <= tight
    assert text.splitlines()[:3] == lines  # the lines are whole …
    assert 0 < len(stub_keywords(text) or "") < len(stub_keywords(full) or "")  # … anchors went
    tiny = stub(first_span(), budget=32)
    # Clipped to its most salient sentence: the user's rule, not the first words.
    assert METER.count_text(tiny) <= 32 and tiny.startswith("Request (seq 1): … The budget must")


def test_stub_budget_too_small_for_any_line_is_an_error() -> None:
    with pytest.raises(SummarizerError, match="max_summary_tokens=1 cannot hold an index stub"):
        stub(first_span(), budget=1)


_WORDS = st.sampled_from(
    ["fix", "the", "retry", "budget", "src/a.py", "tests/t_b.py", "0.25", "3.1.4", "--flag=1",
     "RETRY_MAX=5", "KeyError: 'x'", "retryBudget", "pkg.mod.func()", "x" * 120, "é", ",", ";"]
)  # fmt: skip
_TEXT = st.lists(_WORDS, min_size=0, max_size=40).map(" ".join)


@st.composite
def spans(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    for turn in range(draw(st.integers(1, 4))):
        seq = len(events)
        events.append(user(seq, draw(_TEXT) or "go"))
        for step in range(draw(st.integers(0, 3))):
            call = f"c{turn}_{step}"
            command = draw(_TEXT) or "ls"
            events.append(
                assistant(len(events), draw(_TEXT), [(call, "bash", {"command": command})])
            )
            status = draw(st.sampled_from([0, 1]))
            output = f"<returncode>{status}</returncode>\n{draw(_TEXT)}"
            if status:
                output += "\nTraceback (most recent call last):\n  x\nValueError: " + draw(_TEXT)
            events.append(tool(len(events), call, output))
        events.append(assistant(len(events), draw(_TEXT)))
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span=spans(), budget=st.integers(32, 2048), index=st.lists(_TEXT, max_size=3))
def test_stubs_fit_their_budget_and_are_deterministic(
    span: list[Event], budget: int, index: list[str]
) -> None:
    text = stub(span, budget=budget, index_keywords=index)
    assert METER.count_text(text) <= budget
    assert text == stub(span, budget=budget, index_keywords=index)
    lines = text.splitlines()
    assert 1 <= len(lines) <= 4
    assert sum(line.startswith("Keywords:") for line in lines) <= 1
    if any(line.startswith("Keywords:") for line in lines):
        assert lines[-1].startswith("Keywords: ")


@pytest.mark.corpus
@pytest.mark.skipif(not corpus_files(), reason=f"corpus not found at {CORPUS}")
def test_corpus_stubs_fit_and_index_what_is_new_to_them() -> None:
    for path in corpus_files()[:8]:
        session = session_from_corpus(path)
        events = [session.event(seq) for seq in session.surface]
        index: list[str] = []
        for start in range(0, len(events), 12):
            chunk = events[start : start + 12]
            text = stub(chunk, index_keywords=tuple(index))
            assert METER.count_text(text) <= 160, path.name
            assert METER.count_text(text) < METER.count_text(span_text(chunk)) or len(chunk) < 3
            keywords = stub_keywords(text)
            if keywords:
                new = anchors_of(keywords)
                assert new, (path.name, keywords)
                assert not new & {a for line in index for a in anchors_of(line)}, path.name
                index.append(keywords)


# --------------------------------------------------------------------------- state mode


def in_state_order(text: str) -> bool:
    """The headings of ``text`` are some of the state's, in their order."""
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    return bool(headings) and [h for h in STATE_HEADINGS if h in headings] == headings


def test_state_sections_are_the_state_templates_headings() -> None:
    assert state_sections() == STATE_HEADINGS
    text = state(first_span())
    assert tuple(re.findall(r"^## (.+)$", text, flags=re.M)) == STATE_HEADINGS  # all filled
    answered = state(first_span() + second_span())
    assert "## Open Questions" not in answered and "## Next Steps" not in answered
    assert in_state_order(answered) and "(none)" not in answered


def test_state_of_a_first_pass() -> None:
    parts = sections_of(state(first_span()))
    assert parts["Goal"] == ["- Original request (seq 1), verbatim:"]
    assert parts["Constraints"] == [
        "- User rule (seq 1): The budget must stay at 3 attempts; do not touch setup.cfg."
    ]
    assert parts["Decisions"] == [
        "- The root cause is that `retry_budget` counts the first call as a retry."
    ]
    assert parts["Key Values"][0] == "- Values — budget: `3 attempts`"
    assert parts["Current State"][0].startswith("- Last assistant message (seq 4):")
    edit = (
        "- `src/retry.py` — edited ×1; last edit: `attempts = 1  # the first call is not a retry`"
    )
    assert edit in parts["Current State"]
    assert parts["Open Questions"] == [
        "- Request of seq 1, not answered yet: Fix the failing retry tests in tests/test_retry.py."
        " The budget must stay at 3 attempts; do not touch setup.cfg."
    ]
    assert parts["Next Steps"] == ["- I'll edit `src/retry.py` next."]


def test_state_merge_keeps_carried_facts_and_replaces_outdated_state() -> None:
    first = state(first_span())
    merged = state(second_span(), previous=first)
    parts = sections_of(merged)
    assert [b for b, n in Counter(b for p in parts.values() for b in p).items() if n > 1] == []
    # Carried: the verbatim request, the constraint, the decision, the file edit.
    assert "  > The budget must stay at 3 attempts; do not touch setup.cfg." in merged
    assert parts["Constraints"] == [
        "- User rule (seq 1): The budget must stay at 3 attempts; do not touch setup.cfg."
    ]
    assert parts["Decisions"] == sections_of(first)["Decisions"]
    assert any(b.startswith("- `src/retry.py` — edited ×1") for b in parts["Current State"])
    # Accumulated: a file seen in both passes is one bullet with its operations added up.
    assert "- `tests/test_retry.py` — ran ×2" in parts["Current State"]
    # Updated: the error gets its newer status instead of a second bullet.
    errors = [b for b in parts["Current State"] if "retry budget exhausted after" in b]
    assert len(errors) == 1 and errors[0].endswith("a later run succeeded (seq 7)")
    # Replaced: the newer current state and next step, the answered question gone.
    assert parts["Current State"][0] == (
        "- Last assistant message (seq 11): Done: the tests pass and CHANGELOG.md has the entry."
    )
    assert "Last assistant message (seq 4)" not in merged
    assert "Next Steps" not in parts and "Open Questions" not in parts  # answered: left out
    assert (
        "- Later request (seq 8): Great. Please also add a changelog entry to CHANGELOG.md."
        in (parts["Goal"])
    )


def test_merging_a_state_with_nothing_new_gives_it_back() -> None:
    once = state(first_span() + second_span())
    assert state([], previous=once) == once


def test_state_adopts_an_eight_section_summary() -> None:
    summary = run(first_span(), "summary", 8192)
    assert "## Primary Request and Intent" in summary
    adopted = state(second_span(), previous=summary)
    parts = sections_of(adopted)
    assert in_state_order(adopted) and "Primary Request and Intent" not in adopted
    # Primary Request → Goal, Critical Context's user rules → Constraints.
    assert parts["Goal"][0] == "- Original request (seq 1), verbatim:"
    assert parts["Constraints"] == [
        "- User rule (seq 1): The budget must stay at 3 attempts; do not touch setup.cfg."
    ]
    # Critical Context decisions → Decisions; files and errors → Current State.
    assert parts["Decisions"] == [
        "- The root cause is that `retry_budget` counts the first call as a retry."
    ]
    assert any(b.startswith("- `src/retry.py` — edited ×1") for b in parts["Current State"])
    errors = [b for b in parts["Current State"] if "retry budget exhausted after" in b]
    assert len(errors) == 1 and errors[0].endswith("a later run succeeded (seq 7)")
    # The summary's outdated Current Work / Next Step / Pending Jobs are replaced.
    assert "Last assistant message (seq 4)" not in adopted
    assert "Open Questions" not in parts and "Next Steps" not in parts


def test_an_adopted_summarys_keyword_line_becomes_key_values() -> None:
    summary = (
        "## Primary Request and Intent\n- Original request (seq 1), verbatim:\n  > Tune it.\n"
        "## Critical Context\n- Decision: keep the cache because reads dominate\n"
        "- Keywords — paths: `conf/cache.toml`; numbers: `250 ms`"
    )
    parts = sections_of(state([user(5, "Go on.")], previous=summary))
    # (an older summary's "numbers" kind is today's "values")
    assert parts["Key Values"] == ["- paths: `conf/cache.toml`", "- values: `250 ms`"]
    assert parts["Decisions"] == ["- keep the cache because reads dominate"]
    # … and a state's Key Values merge again on the next pass.
    again = sections_of(state([user(6, "More.")], previous=state([], previous=summary)))
    assert again["Key Values"] == parts["Key Values"]


def test_unheaded_previous_text_is_kept_as_context() -> None:
    parts = sections_of(state([user(3, "Continue.")], previous="The deploy key lives in vault."))
    assert parts["Decisions"] == ["- The deploy key lives in vault."]


@pytest.mark.parametrize("budget", [128, 300, 900, 2048])
def test_state_respects_its_budget(budget: int) -> None:
    span = first_span() + second_span()
    text = state(span, previous=state(first_span()), budget=budget)
    assert METER.count_text(text) <= budget
    assert in_state_order(text) and text.startswith("## Goal\n")
    assert state(span, previous=state(first_span()), budget=budget) == text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(earlier=spans(), later=spans(), budget=st.integers(128, 2048))
def test_states_fit_their_budget_and_are_deterministic(
    earlier: list[Event], later: list[Event], budget: int
) -> None:
    previous = state(earlier, budget=budget)
    text = state(later, previous=previous, budget=budget)
    assert METER.count_text(previous) <= budget and METER.count_text(text) <= budget
    assert in_state_order(text)
    assert text == state(later, previous=previous, budget=budget)


@pytest.mark.corpus
@pytest.mark.skipif(not corpus_files(), reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("budget", [2048, 512])
def test_corpus_states_fit_their_budget_over_passes(budget: int) -> None:
    for path in corpus_files()[:6]:
        session = session_from_corpus(path)
        events = [session.event(seq) for seq in session.surface]
        previous: str | None = None
        for start in range(0, len(events), max(len(events) // 3, 1)):
            previous = state(events[start : start + len(events) // 3 + 1], previous, budget)
            assert METER.count_text(previous) <= budget, path.name
        assert previous is not None and previous.startswith("## Goal\n- Original request")


def test_state_headings_come_from_the_template(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "prompts", tmp_path, dirs_exist_ok=True)
    template = tmp_path / "state.md"
    template.write_text(
        template.read_text(encoding="utf-8").replace("**Next Steps**", "**What Comes Next**"),
        encoding="utf-8",
    )
    s = ExtractiveSummarizer(prompts_dir=tmp_path)
    assert "## What Comes Next\n" in run(first_span(), "state", 2048, summarizer=s)
    template.write_text("1. **Only**\n", encoding="utf-8")  # read fresh: the edit applies now
    with pytest.raises(SummarizerError, match=r"state\.md lists 1 sections \(Only\)"):
        run(first_span(), "state", 2048, summarizer=s)
    assert summary_sections(tmp_path)[0] == "Primary Request and Intent"


def test_an_unknown_mode_is_an_error() -> None:
    with pytest.raises(SummarizerError, match=r"unknown mode 'digest'; expected one of 'summary'"):
        run(first_span(), "digest", 512)


def test_stub_and_state_do_not_depend_on_hash_seeds() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, {tests!r})
        from test_summarizer_stub_state import first_span, second_span, state, stub
        sys.stdout.write(stub(first_span() + second_span(), budget=300))
        sys.stdout.write(state(second_span(), previous=state(first_span())))
        """
    ).format(tests=str(Path(__file__).parent))
    outputs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout)
    assert len(outputs) == 1


# --------------------------------------------------------------------------- the templates


def test_state_template_renders_its_sections_and_the_merge_block() -> None:
    plain = render("state", max_summary_tokens=2048, previous_summary=None)
    assert "Stay under 2048 tokens." in plain and "<previous-state>" not in plain
    assert "{{" not in plain and "}}" not in plain
    merged = render("state", max_summary_tokens=900, previous_summary="## Goal\n- ship")
    assert "Merge it with what happened since instead of restating it" in merged
    assert merged.rstrip().endswith("<previous-state>\n## Goal\n- ship\n</previous-state>")


def test_stub_template_renders_each_part_alone() -> None:
    off: dict[str, Any] = {
        "system": False,
        "background": None,
        "index": None,
        "recent": None,
        "instruction": False,
        "max_summary_tokens": 160,
    }
    assert render("stub", **off).strip() == ""
    system = render("stub", **{**off, "system": True}).strip()
    assert "about 160 tokens" in system and "starts exactly with `Keywords:`" in system
    assert "<background>" not in system and "Reply with the stub only" not in system
    background = render("stub", **{**off, "background": "STATE"}).strip()
    assert background.endswith("<background>\nSTATE\n</background>")
    both = render("stub", **{**off, "index": "paths: a.py", "recent": "S1"}).strip()
    assert "<index-keywords>\npaths: a.py\n</index-keywords>" in both
    assert both.endswith("<latest-stubs>\nS1\n</latest-stubs>")
    instruction = render("stub", **{**off, "instruction": True}).strip()
    assert instruction.startswith("Write the index stub of the conversation slice above")
