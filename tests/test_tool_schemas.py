"""The recall tools' schemas: their token cost in every request, and what they tell the model.

Once something is recallable the three schemas are sent with every request, so their size is
paid on every model call. They are counted the way the engine counts them for the request
envelope (:meth:`Dashr.extra_envelope`: the meter's count of their compact JSON).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dashr_ext import Dashr, RecallConfig
from dashr_ext._meter import TokenMeter
from dashr_ext._recall.tools import ACCEPTED_ARGUMENTS, TOOL_NAMES, tool_arguments, tool_schemas
from dashr_ext.errors import RecallError

BUDGET = 250
"""Most tokens the three schemas may cost together (cl100k, the meter's default)."""

LARGEST = RecallConfig(
    read_max_chars=1_000_000,
    read_max_events=1000,
    search_max_hits=200,
    outline_max_chars=1_000_000,
)


def envelope_tokens(tools: list[dict[str, Any]]) -> int:
    """The engine's count of ``tools`` in the request envelope."""
    text = json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
    return TokenMeter().count_text(text)


def by_name(config: RecallConfig | None = None) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in tool_schemas(config or RecallConfig())}


def test_the_engine_counts_the_recall_schemas_within_the_budget(tmp_path: Path) -> None:
    with Dashr.create(tmp_path / "s.jsonl", meter=TokenMeter()) as d:
        _extra, recall = d.extra_envelope()
    assert recall == envelope_tokens(tool_schemas(RecallConfig()))
    assert 0 < recall <= BUDGET


@pytest.mark.parametrize("config", [RecallConfig(), LARGEST], ids=["default", "largest"])
def test_the_schemas_fit_the_budget_whatever_the_configured_budgets(
    config: RecallConfig,
) -> None:
    assert envelope_tokens(tool_schemas(config)) <= BUDGET


def test_the_schemas_are_ascii_so_escaping_does_not_change_their_count() -> None:
    text = json.dumps(tool_schemas(RecallConfig()), ensure_ascii=False)
    assert text.isascii()


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("history_outline", ["what compaction condensed", "checkpoints exist", "session file"]),
        (
            "history_read",
            ["exact originals", "exactly one of", "checkpoint", "seq", "turn", "cursor"],
        ),
        ("history_search", ["literal phrase", "all history", "condensed included"]),
    ],
)
def test_each_description_says_when_to_use_the_tool(name: str, words: list[str]) -> None:
    description = by_name()[name]["description"]
    missing = [w for w in words if w not in description]
    assert not missing, f"{name}'s description lost {missing}: {description!r}"


def test_the_arguments_and_their_constraints_are_declared() -> None:
    tools = by_name()
    assert list(tools) == list(TOOL_NAMES)
    for name, function in tools.items():
        params = function["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert tuple(params["properties"]) == ACCEPTED_ARGUMENTS[name]
    read = tools["history_read"]["parameters"]["properties"]
    assert {k: v["type"] for k, v in read.items()} == {
        "checkpoint": "string",
        "seq": "integer",
        "turn": "integer",
        "cursor": "string",
    }
    assert read["seq"]["minimum"] == 0
    assert "required" not in tools["history_read"]["parameters"]
    search = tools["history_search"]["parameters"]
    assert search["required"] == ["query"]
    assert {k: v["type"] for k, v in search["properties"].items()} == {
        "query": "string",
        "checkpoint": "string",
        "limit": "integer",
        "cursor": "string",
    }
    limit = search["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"]) == (1, RecallConfig().search_max_hits)


def test_the_largest_limit_follows_search_max_hits() -> None:
    params = by_name(RecallConfig(search_max_hits=7))["history_search"]["parameters"]
    assert params["properties"]["limit"]["maximum"] == 7


def test_the_schemas_are_the_same_bytes_for_the_same_config() -> None:
    assert json.dumps(tool_schemas(RecallConfig())) == json.dumps(tool_schemas(RecallConfig()))
    assert tool_schemas(RecallConfig()) != tool_schemas(RecallConfig(search_max_hits=7))


def test_argument_checking_still_names_what_is_accepted() -> None:
    with pytest.raises(RecallError, match=r"history_read: unknown argument 'page'; accepted: "):
        tool_arguments("history_read", {"page": 3})
    assert tool_arguments("history_read", {"turn": 3}) == {"turn": 3}
    with pytest.raises(RecallError, match="missing the required argument 'query'"):
        tool_arguments("history_search", "{}")
    assert tool_arguments("history_search", '{"query": "retry", "limit": null}') == {
        "query": "retry"
    }
