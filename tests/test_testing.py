"""dashr_ext.testing: the scripted OpenAI-compatible server itself (real loopback HTTP)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from dashr_ext.testing import (
    RecordedRequest,
    ScriptedServer,
    answer,
    call_run_cell,
    chat_completion,
    latest_checkpoint,
    prompt_tokens,
    stream_chunks,
)


def post(
    server: ScriptedServer, body: dict[str, Any], purpose: str | None = None
) -> httpx.Response:
    headers = {"X-Dashr-Purpose": purpose} if purpose else {}
    return httpx.post(server.base_url + "/chat/completions", json=body, headers=headers)


def content(response: httpx.Response) -> Any:
    return response.json()["choices"][0]["message"]["content"]


BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def test_compaction_requests_and_injected_overflows_do_not_consume_the_script() -> None:
    with ScriptedServer(summarizer=chat_completion("## Summary")) as server:
        server.script(answer("first"), answer("second"))
        server.overflow_next(1)
        overflow = post(server, BODY, purpose="agent")
        assert overflow.status_code == 400
        assert overflow.json()["error"]["code"] == "context_length_exceeded"
        assert content(post(server, BODY, purpose="compaction")) == "## Summary"
        assert content(post(server, BODY, purpose="agent")) == "first"
        assert content(post(server, BODY)) == "second"
        assert post(server, BODY).status_code == 500  # the script ran out
    assert [r.purpose for r in server.requests] == ["agent", "compaction", "agent", None, None]
    assert [r.index for r in server.requests] == [0, 1, 2, 3, 4]
    assert len(server.compaction_requests) == 1 and len(server.model_requests) == 4


def test_requests_over_the_context_window_are_refused_with_their_size() -> None:
    long = {"messages": [{"role": "user", "content": "word " * 400}]}
    with ScriptedServer(context_window_tokens=100) as server:
        server.script(answer("short enough"))
        refused = post(server, long)
        assert refused.status_code == 400
        size = prompt_tokens(server.requests[0])
        assert f"However, you requested {size} tokens" in refused.json()["error"]["message"]
        assert content(post(server, BODY)) == "short enough"


def test_scripted_model_replies_report_usage_and_unique_call_ids() -> None:
    with ScriptedServer() as server:
        server.script(call_run_cell("print(1)"), call_run_cell("print(2)"))
        first = post(server, BODY).json()
        second = post(server, BODY).json()
    ids = [r["choices"][0]["message"]["tool_calls"][0]["id"] for r in (first, second)]
    assert ids == ["call_0_0", "call_1_0"]
    assert first["usage"]["prompt_tokens"] == prompt_tokens(server.requests[0]) > 4


def test_latest_checkpoint_reads_footers_and_skips_the_system_prompt() -> None:
    def request(*texts: tuple[str, str]) -> RecordedRequest:
        messages = [{"role": role, "content": text} for role, text in texts]
        return RecordedRequest(
            "POST", "/v1/chat/completions", {}, json.dumps({"messages": messages}).encode()
        )

    footer = 'originals retrievable via history_read("c{0}") or dashr_compaction_archive["c{0}"]'
    assert latest_checkpoint(request(("system", footer.format(42)))) is None
    seen = request(("user", footer.format(9)), ("user", footer.format(31)), ("tool", "x"))
    assert latest_checkpoint(seen) == "c31"


def test_the_server_is_bounded_and_stops_by_itself() -> None:
    server = ScriptedServer(default=answer("ok"), max_requests=1, idle_timeout_s=0.3).start()
    try:
        assert post(server, BODY).status_code == 200
        limited = post(server, BODY)
        assert limited.status_code == 503 and "request limit" in limited.text
        deadline = time.monotonic() + 5
        while server.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.running  # idle past idle_timeout_s: stopped on its own
    finally:
        server.stop()


def test_a_streamed_reply_is_served_as_server_sent_events_ending_in_done() -> None:
    chunks = [
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo"}}]},
    ]
    with ScriptedServer() as server:
        server.script(stream_chunks(chunks))
        response = post(server, BODY)
    assert response.headers["content-type"] == "text/event-stream"
    events = [line[len("data: ") :] for line in response.text.split("\n\n") if line]
    assert [json.loads(e) for e in events[:-1]] == chunks
    assert events[-1] == "[DONE]"


def test_a_completion_scripted_without_usage_reports_the_size_of_the_request() -> None:
    with ScriptedServer() as server:
        server.script(chat_completion("ok"))
        response = post(server, BODY)
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] == prompt_tokens(server.requests[0]) > 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_the_stations_task_runs_the_agent_through_a_compaction_and_an_archive_read(
    tmp_path: Path,
) -> None:
    from dashr_ext import CompactionConfig, Dashr
    from dashr_ext.agent import Agent
    from dashr_ext.testing import ScriptedServer, stations_task

    task = stations_task()
    assert [len(replies) for _prompt, replies in task] == [10, 2]
    server = ScriptedServer().script(*(r for _p, replies in task for r in replies)).start()
    config = CompactionConfig(recency_window_tokens=2500, retain_tokens=600)
    try:
        with Dashr.create(tmp_path / "s.jsonl", config=config) as d:
            agent = Agent(d, base_url=server.base_url, model="m", api_key=None, namespace={})
            replies = [agent.run_turn(prompt) for prompt, _replies in task]
            agent.close()
            assert replies[0].checkpoints and replies[0].startswith("Mean temperatures")
            assert replies[1] == (
                "The first station, north-1, printed calibration code d1d73e65c1."
            )
    finally:
        server.stop()
