"""Names kept across a compaction pass on the real sessions (bench/bench_names.py).

The measurement is an outside instrument: it finds names by itself, never through the
package's own name collection. Its pure parts are checked first; the corpus figures (every
session, both windows, about ten seconds) follow and are skipped without the corpus.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_names as names_bench  # noqa: E402

SMALL, LARGE = names_bench.CONFIGS  # (8k, 2k) and (20k, 4k)
TARGETS = {SMALL: 0.80, LARGE: 0.90}


# --------------------------------------------------------------------------- the instrument


def test_the_instrument_finds_paths_errors_and_code_identifiers() -> None:
    text = (
        "Ran `python reproduce_issue.py` and /testbed/django/db/models/query.py:120 raised\n"
        "django.core.exceptions.FieldError, then TypeError in QuerySet._filter_or_exclude();\n"
        "see https://example.com/a/b/c.py and and/or e.g. the order_by or assertEqual calls,\n"
        "tests/test_x.py::TestUnion::test_union_ordering, 1.2.3, --fix-all, /a"
    )
    found = names_bench.find_names(text)
    assert found == {
        "reproduce_issue.py": "file",
        "/testbed/django/db/models/query.py": "file",
        "django.core.exceptions.FieldError": "error",
        "TypeError": "error",
        "QuerySet._filter_or_exclude": "symbol",
        "order_by": "symbol",
        "assertEqual": "symbol",
        "tests/test_x.py": "file",
        "TestUnion": "symbol",
        "test_union_ordering": "symbol",
    }


def test_a_name_occurs_only_as_a_whole() -> None:
    assert names_bench.occurs("reproduce.py", "python /testbed/reproduce.py")
    assert not names_bench.occurs("reproduce.py", "my_reproduce.py reproduce.pyc")
    assert names_bench.occurs("order_by", "qs.order_by('x')")


def test_tool_call_arguments_are_read_as_the_strings_they_hold() -> None:
    message = {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "a\\nfoo_bar"}'}}],
    }
    text = names_bench.request_message_text(message)
    assert names_bench.occurs("foo_bar", text)  # not hidden behind an escaped "\n"
    assert names_bench.agent_text({"role": "tool", "content": "foo_bar"}) == ""


def test_one_pass_counts_left_needed_kept_and_the_truncation_baselines() -> None:
    shadowed = "edited query.py and reproduce_bug.py; TypeError; kept_name; never_again"
    tally = names_bench.measure_pass(
        shadowed=shadowed,
        kept_part="system prompt; kept_name",
        after="checkpoint: query.py\nsystem prompt; kept_name",
        later="python reproduce_bug.py; open query.py; TypeError",
        checkpoint_chars=len("edited query.py"),
    )
    assert tally.passes == 1
    assert tally.left == 4  # query.py, reproduce_bug.py, TypeError, never_again
    assert dict(tally.needed) == {"file": 2, "error": 1}
    assert dict(tally.kept) == {"file": 1}
    assert dict(tally.head) == {"file": 1}  # "edited query.py"
    assert dict(tally.tail) == {}
    assert tally.share() == pytest.approx(1 / 3)
    assert set(tally.missing) == {"file:reproduce_bug.py", "error:TypeError"}


# --------------------------------------------------------------------------- the corpus


@cache
def _measured(config: tuple[int, int]) -> names_bench.Tally:
    paths = names_bench.corpus_sessions()
    if not paths:
        pytest.skip("../shared/corpus is absent")
    total = names_bench.Tally()
    for path in paths:
        total.add(names_bench.replay_session(path, *config))
    return total


@pytest.mark.corpus
@pytest.mark.parametrize("config", [SMALL, LARGE], ids=["8k-2k", "20k-4k"])
def test_the_corpus_replay_runs_passes_that_move_needed_names(config: tuple[int, int]) -> None:
    tally = _measured(config)
    assert tally.passes >= (100 if config == SMALL else 30)
    assert sum(tally.needed.values()) >= 500
    assert tally.left > sum(tally.needed.values())


@pytest.mark.corpus
@pytest.mark.parametrize("config", [SMALL, LARGE], ids=["8k-2k", "20k-4k"])
def test_the_names_the_agent_uses_again_stay_in_the_request(config: tuple[int, int]) -> None:
    tally = _measured(config)
    assert tally.share() >= TARGETS[config], tally.missing.most_common(10)


@pytest.mark.corpus
@pytest.mark.parametrize("config", [SMALL, LARGE], ids=["8k-2k", "20k-4k"])
def test_a_pass_keeps_more_needed_names_than_a_plain_truncation(config: tuple[int, int]) -> None:
    tally = _measured(config)
    assert tally.share() > max(tally.share("head"), tally.share("tail"))
