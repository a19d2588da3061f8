"""Builders for realistic sessions and scripted summarizers used across the tests."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

from dashr_ext._config import CompactionConfig
from dashr_ext._controller import Dashr
from dashr_ext._events import ContentBlock, Event, EventSpec, block_to_json, text_blocks
from dashr_ext._session import Session
from dashr_ext._summarizers.base import SummaryRequest, SummaryResult

if TYPE_CHECKING:
    from pathlib import Path

    from IPython.core.interactiveshell import InteractiveShell

LOREM = (
    "def compute_backoff(attempt: int, base_ms: int = 250) -> int:\n"
    "    return min(base_ms * 2 ** attempt, 30_000)\n"
)


def _append_message(
    session: Session,
    role: str,
    content: str | Sequence[ContentBlock],
    source: dict[str, Any],
) -> Event:
    """Append one surface message directly (no inferred markers), like a harness would."""
    types = {"user": "user/message", "assistant": "assistant/message", "context": "context/message"}
    msg = {
        "role": role,
        "source": source,
        "content": [block_to_json(b) for b in text_blocks(content)],
    }
    return session.append([EventSpec(types[role], {"message": msg}, "append")])[0]


def append_user(
    session: Session, content: str | Sequence[ContentBlock], *, source_kind: str = "user"
) -> Event:
    return _append_message(session, "user", content, {"kind": source_kind})


def append_assistant(
    session: Session, content: str | Sequence[ContentBlock], *, model: str | None = None
) -> Event:
    return _append_message(session, "assistant", content, {"kind": "model", "model": model})


def append_context(
    session: Session, content: str | Sequence[ContentBlock], *, source_kind: str = "plugin"
) -> Event:
    return _append_message(session, "context", content, {"kind": source_kind})


def tool_output(step: int, chars: int) -> str:
    """Deterministic tool output of about ``chars`` characters, unique per step."""
    body = (f"# step {step}\n" + LOREM) * (chars // (len(LOREM) + 10) + 1)
    return body[:chars]


def record_steps(
    d: Dashr, steps: int, chars: int = 400, *, first: int = 0, user: str | None = None
) -> None:
    """One user request then ``steps`` tool-using steps (assistant call + result)."""
    if user is not None:
        d.record_openai({"role": "user", "content": user})
    for i in range(first, first + steps):
        d.record_openai(
            [
                {
                    "role": "assistant",
                    "content": f"Step {i}: reading file {i}.",
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {
                                "name": "bash",
                                "arguments": json.dumps({"command": f"cat src/mod_{i}.py"}),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_output(i, chars)},
            ]
        )


@dataclass
class ScriptedSummarizer:
    """A summarizer whose output, failure or delay the test chooses."""

    text: str = "## Primary Request and Intent\n- Fix the failing retry tests."
    fail: BaseException | None = None
    delay_s: float = 0.0
    kind: str = "scripted"
    model: str | None = None
    requests: list[SummaryRequest] = field(default_factory=list)
    size_from_budget: bool = False

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        text = self.text
        if self.size_from_budget:
            text = "summary " * (request.max_summary_tokens * 3 // 8)
        return SummaryResult(text, self.kind, self.model)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def orphan_results(messages: list[dict[str, Any]]) -> list[str]:
    """Tool results whose call is not in an earlier assistant message (and calls never answered)."""
    calls: set[str] = set()
    problems = []
    for m in messages:
        for c in m.get("tool_calls") or []:
            calls.add(c["id"])
        if m["role"] == "tool":
            if m["tool_call_id"] not in calls:
                problems.append(m["tool_call_id"])
            calls.discard(m["tool_call_id"])
    return problems


class ThisInterpreter(KernelSpecManager):
    """Kernels of the interpreter running the tests, whatever kernelspecs are installed."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python (tests)",
            language="python",
        )


def run_cell(ip: InteractiveShell, code: str) -> Any:
    """Run a cell like a notebook would; raise its error; return its value."""
    result = ip.run_cell(code)
    result.raise_error()
    return result.result


def needle_session(path: Path, config: CompactionConfig | None = None) -> Dashr:
    """5 turns of 13 steps; every tool result (65 in all) holds "needle", nothing else does.
    With ``config`` the requests between steps compact as an agent loop's would, and every
    checkpoint summary says "needle" too."""
    summarizer = ScriptedSummarizer(text="## Current Work\n- Counting each needle.")
    d = Dashr.create(path, config=config, durability="flush", summarizer=summarizer)
    for turn in range(5):
        d.record_openai({"role": "user", "content": f"Task {turn}: sort the haystack."})
        for i in range(turn * 13, turn * 13 + 13):
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "bash", "arguments": "{}"},
            }
            if config is not None:
                d.request_messages()
            d.record_openai(
                [
                    {"role": "assistant", "content": f"Step {i}.", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": f"needle {i}\n" * 60},
                ]
            )
        d.record_openai({"role": "assistant", "content": f"Turn {turn} done."})
    return d
