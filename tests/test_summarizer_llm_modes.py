"""Stub and state modes of the llm summarizer (SPEC §6.3) against a scripted server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from corpus_events import assistant, tool, user
from test_summarizer_llm import PREFIX, SPAN, SUMMARY, count_words

from dashr_ext._summarizers.base import SummaryRequest, span_text
from dashr_ext._summarizers.llm import LLMSummarizer
from dashr_ext._templates import render
from dashr_ext.errors import SummarizerError
from dashr_ext.testing import ScriptedServer, chat_completion, context_length_error

ROOT = Path(__file__).resolve().parents[1]
BACKGROUND = "## Goal\n- Fix the retry budget\n\n## Next Steps\n- rerun the tests"
INDEX = ("paths: src/retry.py; ids: retry_budget", "errors: `ValueError: budget`")
RECENT = ("Done: ran `pytest -q`\nKeywords: errors: `ValueError: budget`",)
STUB = "Ran the gateway tests; both pass.\nKeywords: paths: src/gateway.py; commands: pytest -q"
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def slice_one() -> list[Any]:
    return [
        user(10, "Now check the gateway in src/gateway.py as well. " * 10),
        assistant(11, "Running them.", [("c7", "bash", {"command": "pytest -q tests/test_gw.py"})]),
        tool(12, "c7", "<returncode>0</returncode>\n3 passed in 0.10s\n" * 10),
    ]


def slice_two() -> list[Any]:
    return [
        assistant(
            20, "Editing the timeout.", [("c9", "bash", {"command": "sed -i s/30/60/ a.toml"})]
        ),
        tool(21, "c9", "<returncode>0</returncode>\n" + "edited a.toml\n" * 30),
    ]


def stub_request(span: list[Any], **overrides: Any) -> SummaryRequest:
    fields: dict[str, Any] = {
        "span": span,
        "previous_summary": None,
        "max_summary_tokens": 160,
        "prefix_messages": [],
        "count_tokens": count_words,
        "mode": "stub",
        "background": BACKGROUND,
        "index_keywords": INDEX,
        "recent_stubs": RECENT,
        "tools": TOOLS,
    }
    fields.update(overrides)
    return SummaryRequest(**fields)


def state_request(**overrides: Any) -> SummaryRequest:
    fields: dict[str, Any] = {
        "span": SPAN,
        "previous_summary": BACKGROUND,
        "max_summary_tokens": 512,
        "prefix_messages": PREFIX,
        "count_tokens": count_words,
        "mode": "state",
        "tools": TOOLS,
    }
    fields.update(overrides)
    return SummaryRequest(**fields)


def summarizer_for(server: ScriptedServer, **options: Any) -> LLMSummarizer:
    return LLMSummarizer(
        base_url=server.base_url, model="m", api_key=None, sleep=lambda _s: None, **options
    )


def stub_part(**flags: Any) -> str:
    values: dict[str, Any] = {
        "system": False,
        "background": None,
        "index": None,
        "recent": None,
        "instruction": False,
        "max_summary_tokens": 160,
    }
    values.update(flags)
    return render("stub", **values).strip()


# --------------------------------------------------------------------------- stub mode


def test_stub_body_is_layered_and_everything_before_the_slice_is_shared(
    server: ScriptedServer,
) -> None:
    server.script(chat_completion(STUB), chat_completion(STUB))
    with summarizer_for(server) as s:
        first = s.summarize(stub_request(slice_one()))
        s.summarize(stub_request(slice_two()))
    assert first.text == STUB
    one, two = server.requests
    messages = one.json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user", "user"]
    assert messages[0]["content"] == stub_part(system=True)
    assert "about 160 tokens" in messages[0]["content"]
    assert messages[1]["content"] == stub_part(background=BACKGROUND)
    assert f"<background>\n{BACKGROUND}\n</background>" in messages[1]["content"]
    assert messages[1]["content"].startswith("Background only, not material for the stub")
    index = messages[2]["content"]
    assert "<index-keywords>\n" + "\n".join(INDEX) + "\n</index-keywords>" in index
    assert f"<latest-stubs>\n{RECENT[0]}\n</latest-stubs>" in index
    final = messages[3]["content"]
    assert final.startswith("<conversation>\nUser (seq 10): Now check the gateway")
    assert final.endswith(stub_part(instruction=True))
    # The sibling call differs only from the slice on: its body bytes share the whole prefix.
    assert two.json["messages"][:3] == messages[:3]
    assert two.json["messages"][3]["content"].startswith("<conversation>\nAssistant (seq 20)")
    assert two.body.startswith(one.body[: one.body.index(b"<conversation>")])
    # A stub call is no replay: no tools, and the stub budget caps the completion.
    assert "tools" not in one.json and "tool_choice" not in one.json
    assert one.json["max_tokens"] == 160


def test_a_first_pass_stub_has_only_the_preamble_and_the_slice(server: ScriptedServer) -> None:
    server.script(chat_completion(STUB))
    request = stub_request(slice_one(), background=None, index_keywords=(), recent_stubs=())
    summarizer_for(server).summarize(request)
    messages = server.requests[0].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == stub_part(system=True)


def test_only_latest_stubs_still_get_their_message(server: ScriptedServer) -> None:
    server.script(chat_completion(STUB))
    summarizer_for(server).summarize(stub_request(slice_one(), index_keywords=("  ",)))
    index = server.requests[0].json["messages"][2]["content"]
    assert "<index-keywords>" not in index and "<latest-stubs>" in index


def test_stub_reply_is_cut_after_its_keyword_line(server: ScriptedServer) -> None:
    reply = (
        "<think>plan</think>Ran the gateway tests.\n- **Keywords:** paths: src/gateway.py\n\n"
        "Let me know if you need more."
    )
    server.script(chat_completion(reply), chat_completion("Ran the gateway tests; all pass."))
    s = summarizer_for(server)
    assert s.summarize(stub_request(slice_one())).text == (
        "Ran the gateway tests.\nKeywords: paths: src/gateway.py"
    )
    # Without a keyword line the stub is still accepted: the engine copes.
    assert s.summarize(stub_request(slice_one())).text == "Ran the gateway tests; all pass."


def test_a_stub_reply_that_is_only_chatter_after_an_empty_keyword_line_fails(
    server: ScriptedServer,
) -> None:
    server.script(chat_completion("Keywords:\nHope this helps"))
    with pytest.raises(SummarizerError, match="returned an empty summary"):
        summarizer_for(server).summarize(stub_request(slice_one()))


def test_a_stub_not_smaller_than_its_slice_fails(server: ScriptedServer) -> None:
    server.script(chat_completion("word " * 400))
    with pytest.raises(SummarizerError, match="is not smaller than the span"):
        summarizer_for(server).summarize(stub_request(slice_one()))


def test_checkpoint_nodes_are_left_out_of_a_stub_slice(server: ScriptedServer) -> None:
    node = user(9, "<compacted-summary>\n- planted_state_fact\n</compacted-summary>")
    node = user(9, node.message.text, kind="compact-checkpoint")
    server.script(chat_completion(STUB))
    summarizer_for(server).summarize(stub_request([node, *slice_one()]))
    final = server.requests[0].json["messages"][-1]["content"]
    assert "planted_state_fact" not in final and "Earlier summary" not in final
    with pytest.raises(SummarizerError, match="stub mode needs a span"):
        summarizer_for(server).summarize(stub_request([node]))
    assert len(server.requests) == 1  # refused before any request


def test_a_context_length_error_on_a_stub_is_not_retried_with_a_transcript(
    server: ScriptedServer,
) -> None:
    server.script(context_length_error())
    with pytest.raises(SummarizerError, match="context window"):
        summarizer_for(server).summarize(stub_request(slice_one()))
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- state mode


def test_state_mode_replays_the_prefix_with_the_state_instruction(server: ScriptedServer) -> None:
    server.script(chat_completion(SUMMARY))
    summarizer_for(server).summarize(state_request())
    body = server.requests[0].json
    instruction = render("state", max_summary_tokens=512, previous_summary=BACKGROUND).strip()
    assert body["messages"] == [*PREFIX, {"role": "user", "content": instruction}]
    assert f"<previous-state>\n{BACKGROUND}\n</previous-state>" in instruction
    assert "1. **Goal**" in instruction and "Stay under 512 tokens." in instruction
    assert body["tools"] == TOOLS and body["tool_choice"] == "none"


def test_state_mode_falls_back_to_a_transcript_with_the_state_instruction(
    server: ScriptedServer,
) -> None:
    server.script(context_length_error(), chat_completion(SUMMARY))
    summarizer_for(server).summarize(state_request(previous_summary=None))
    messages = server.requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    instruction = render("state", max_summary_tokens=512, previous_summary=None).strip()
    assert messages[1]["content"].startswith("<conversation>\nUser (seq 1)")
    assert messages[1]["content"].endswith(instruction)


def test_template_edits_apply_on_the_next_call(server: ScriptedServer, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "prompts", tmp_path, dirs_exist_ok=True)
    server.script(*(chat_completion(STUB) for _ in range(4)))
    s = summarizer_for(server, prompts_dir=tmp_path)
    s.summarize(stub_request(slice_one()))
    s.summarize(state_request())
    stub_md, state_md = tmp_path / "stub.md", tmp_path / "state.md"
    stub_md.write_text(
        stub_md.read_text(encoding="utf-8").replace(
            "You write the entries", "EDITED: you write the entries"
        ),
        encoding="utf-8",
    )
    state_md.write_text("State please, under {{max_summary_tokens}} tokens.\n", encoding="utf-8")
    s.summarize(stub_request(slice_one()))
    s.summarize(state_request())
    stub_before, state_before, stub_after, state_after = server.requests
    assert stub_before.messages[0]["content"].startswith("You write the entries")
    assert stub_after.messages[0]["content"].startswith("EDITED: you write the entries")
    assert stub_after.messages[1:] == stub_before.messages[1:]
    assert state_before.messages[-1]["content"].startswith("Your task now is to write the state")
    assert state_after.messages[-1]["content"] == "State please, under 512 tokens."


def test_a_broken_template_is_a_summarizer_error(server: ScriptedServer, tmp_path: Path) -> None:
    (tmp_path / "stub.md").write_text("{{#if system}}preamble {{oops{{/if}}\n", encoding="utf-8")
    with pytest.raises(SummarizerError, match=r"llm summarizer: template 'stub\.md'"):
        summarizer_for(server, prompts_dir=tmp_path).summarize(stub_request(slice_one()))
    assert server.requests == []


def test_an_unknown_mode_fails_before_any_request(server: ScriptedServer) -> None:
    with pytest.raises(SummarizerError, match=r"unknown mode 'digest'; expected one of"):
        summarizer_for(server).summarize(state_request(mode="digest"))
    assert server.requests == []


def test_a_state_must_be_smaller_than_the_previous_state_and_the_span(
    server: ScriptedServer,
) -> None:
    span_words = count_words(span_text(SPAN))
    previous = "- carried fact\n" * 200  # 600 words
    longer_than_the_span = "- kept\n" * span_words  # 2 words a line
    server.script(chat_completion(longer_than_the_span), chat_completion(longer_than_the_span))
    s = summarizer_for(server)
    result = s.summarize(state_request(previous_summary=previous))
    assert result.text == longer_than_the_span.strip()
    with pytest.raises(SummarizerError, match=r"not smaller than the span it condenses"):
        s.summarize(state_request(previous_summary=None))
