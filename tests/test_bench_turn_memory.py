"""The pure parts of the turn-memory bench (bench/bench_turn_memory.py, notebook_turns.py),
and one scripted session replayed through it.

The scripted sessions, the planted facts, the prefix probe and the reading of close reasons:
if these were wrong the recorded figures would be too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_turn_memory as bench  # noqa: E402
import notebook_turns  # noqa: E402


def test_a_notebook_session_is_the_same_for_the_same_seed_only() -> None:
    a, b = notebook_turns.notebook_session(3, 6), notebook_turns.notebook_session(3, 6)
    assert json.dumps(a.turns) == json.dumps(b.turns)
    assert a.facts == b.facts
    assert json.dumps(notebook_turns.notebook_session(4, 6).turns) != json.dumps(a.turns)


def test_every_planted_fact_is_in_the_turn_it_is_planted_in() -> None:
    session = notebook_turns.notebook_session(5, 12)
    kinds: set[str] = set()
    for turn, facts in zip(session.turns, session.facts, strict=True):
        assert turn[0]["role"] == "user" and turn[-1]["role"] == "assistant"
        assert "tool_calls" not in turn[-1]
        assert facts["final answer"] == [turn[-1]["content"]]
        said = "\n".join(m["content"] for m in turn if m["role"] == "assistant")
        outputs = "\n".join(m["content"] for m in turn if m["role"] == "tool")
        code = "\n".join(
            json.loads(c["function"]["arguments"])["code"]
            for m in turn
            for c in m.get("tool_calls") or []
        )
        cells = code.split("\n")
        kinds |= {kind for kind, values in facts.items() if values}
        for kind, values in facts.items():
            for value in values:
                where = {"decision": said, "error line": outputs, "path": code}.get(kind)
                if kind == "command":
                    assert value in cells
                elif where is not None:
                    assert value in where, (kind, value)
        for error in facts["error line"]:
            assert any(m["content"].endswith(error) for m in turn if m["role"] == "tool")
    assert kinds == {"decision", "error line", "final answer", "path", "command"}


def _snapshot(messages: list[dict[str, str]], turn_at: int, tools: str = "[]") -> bench.Snapshot:
    return bench.Snapshot(tuple(json.dumps(m) for m in messages), tools, turn_at, messages)


def _tokenize(messages: list[dict[str, str]]) -> list[list[int]]:
    return [[ord(ch) for ch in m["content"]] for m in messages]


def test_the_prefix_probe_holds_only_when_everything_before_the_turn_is_unchanged() -> None:
    before = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "earlier"},
        {"role": "user", "content": "ask"},
        {"role": "assistant", "content": "long work"},
    ]
    landed = [*before[:3], {"role": "assistant", "content": "short"}]
    ok = bench.probe(_snapshot(before, 2), _snapshot(landed, 2), _tokenize)
    assert ok.held and ok.prefix_tokens == len("sys") + len("earlier")
    assert ok.kept_tokens == len("sysearlierask")
    assert ok.request_tokens == len("sysearlierasklong work")
    changed = [before[0], {"role": "user", "content": "earlieR"}, *landed[2:]]
    bad = bench.probe(_snapshot(before, 2), _snapshot(changed, 2), _tokenize)
    assert not bad.held and bad.kept_tokens == len("sysearlie")
    other_tools = bench.probe(_snapshot(before, 2), _snapshot(landed, 2, '[{"x": 1}]'), _tokenize)
    assert not other_tools.held
    assert not bench.probe(_snapshot(before, 2), _snapshot(before[:1], 1), _tokenize).held


@pytest.mark.parametrize(
    ("reason", "key"),
    [
        ("below turn_min_tokens (1,522 < 2,000 tokens)", "below turn_min_tokens"),
        ("turn 13 is no longer a run of its own: surface node 9", "the turn is no longer a run"),
        ("the turn has no assistant text", "the turn has no assistant text"),
    ],
)
def test_close_reasons_are_grouped_without_their_figures(reason: str, key: str) -> None:
    assert bench.reason_key(reason).startswith(key)


def test_a_scripted_session_replays_with_its_landings_probed(tmp_path: Path) -> None:
    script = bench.notebook_scripts(seeds=(2,), turns=5)[0]
    on = bench.replay(script, True, tmp_path, _tokenize)
    off = bench.replay(script, False, tmp_path, _tokenize)
    assert on.statuses.get("landed", 0) == len(on.probes) > 0
    assert all(p.kept_tokens >= p.prefix_tokens for p in on.probes)
    # The first landing makes history recallable: the recall tools join the request then,
    # so its tools change once; every later landing keeps the whole request before the turn.
    assert [p.held for p in on.probes] == [False] + [True] * (len(on.probes) - 1)
    assert all(after < before for before, after in on.sizes if before >= 2_000)
    planted = sum(len(set(v)) for f in script.planted or [] for v in f.values())
    assert 0 < sum(n for _, n in on.facts.values()) <= planted
    assert all(k == n for k, n in on.facts.values())
    assert off.statuses == {} and not off.probes
    assert on.warnings == off.warnings == 0
