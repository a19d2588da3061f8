"""Test helpers: events built by hand or from the real-session corpus.

* :func:`events_from_openai` turns OpenAI chat messages into surface events
  (appends only; the system message becomes the session's system prompt).
* :class:`FakeSession` is the smallest object with the session surface the token
  meter reads (``surface``, ``event``, ``events``, ``system_prompt``, ``tools``,
  ``messages``), so meter and summarizer tests do not depend on the store.
* ``CORPUS`` / ``corpus_files`` / ``load_corpus`` are re-exported from ``conftest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from conftest import CORPUS, corpus_files, load_corpus

from dashr_ext._events import Event, Replace

__all__ = ["CORPUS", "FakeSession", "corpus_files", "events_from_openai", "load_corpus"]

T0 = 1_764_460_000_000


def _message(role: str, kind: str, content: list[dict[str, Any]], mid: str, **extra: Any) -> dict:
    source: dict[str, Any] = {"kind": kind}
    if kind == "model":
        source["model"] = None
    return {"id": mid, "role": role, "source": source, "content": content, **extra}


def make_event(seq: int, type_: str, message: dict[str, Any], op: Any = "append") -> Event:
    obj: dict[str, Any] = {
        "seq": seq,
        "type": type_,
        "time": T0 + seq * 1000,
        "surfaceOp": op,
        "data": {"message": message},
    }
    if isinstance(op, dict):
        obj["sourceEventSeqs"] = list(range(op["startSeq"], op["endSeq"] + 1))
    return Event.from_json(obj)


def user(seq: int, text: str, kind: str = "user") -> Event:
    return make_event(
        seq, "user/message", _message("user", kind, [{"type": "text", "text": text}], f"m{seq}")
    )


def assistant(
    seq: int,
    text: str = "",
    calls: Sequence[tuple[str, str, Mapping[str, Any] | str]] = (),
    reasoning: str = "",
) -> Event:
    content: list[dict[str, Any]] = []
    if reasoning:
        content.append({"type": "reasoning", "text": reasoning})
    if text:
        content.append({"type": "text", "text": text})
    for call_id, name, args in calls:
        arguments = args if isinstance(args, str) else json.dumps(args)
        content.append({"type": "tool-call", "id": call_id, "name": name, "arguments": arguments})
    return make_event(seq, "assistant/message", _message("assistant", "model", content, f"m{seq}"))


def tool(seq: int, call_id: str, text: str, name: str = "bash", is_error: bool = False) -> Event:
    msg = _message(
        "tool",
        "tool",
        [{"type": "text", "text": text}],
        f"m{seq}",
        toolCallId=call_id,
        toolName=name,
        isError=is_error,
    )
    return make_event(seq, "tool/result", msg)


def events_from_openai(messages: Iterable[Mapping[str, Any]], start: int = 0) -> list[Event]:
    """Surface events for OpenAI chat messages (system messages are skipped)."""
    out: list[Event] = []
    names: dict[str, str] = {}
    seq = start
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        text = (
            content
            if isinstance(content, str)
            else "".join(p.get("text", "") for p in content or [] if isinstance(p, Mapping))
        )
        if role == "system":
            continue
        if role == "user":
            out.append(user(seq, text))
        elif role == "assistant":
            calls = []
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                names[call["id"]] = fn["name"]
                calls.append((call["id"], fn["name"], fn.get("arguments") or "{}"))
            reasoning = m.get("reasoning_content") or ""
            out.append(assistant(seq, text, calls, reasoning=reasoning))
        elif role == "tool":
            call_id = m["tool_call_id"]
            out.append(tool(seq, call_id, text, names.get(call_id, "tool")))
        else:
            continue
        seq += 1
    return out


class FakeSession:
    """An in-memory log with a surface fold: appends and replaces, nothing else."""

    def __init__(
        self, system_prompt: str | None = None, tools: list[dict[str, Any]] | None = None
    ) -> None:
        self._events: list[Event] = []
        self._surface: list[int] = []
        self.system_prompt = system_prompt
        self.tools = tools

    @property
    def events(self) -> Sequence[Event]:
        return self._events

    @property
    def surface(self) -> Sequence[int]:
        return self._surface

    def event(self, seq: int) -> Event:
        return self._events[seq]

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: Event) -> Event:
        assert event.seq == len(self._events), (event.seq, len(self._events))
        self._events.append(event)
        op = event.surface_op
        if op == "append":
            self._surface.append(event.seq)
        elif isinstance(op, Replace):
            a = self._surface.index(op.start_seq)
            b = self._surface.index(op.end_seq)
            self._surface[a : b + 1] = [event.seq]
        return event

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.add(event)

    def log(self, type_: str, data: dict[str, Any]) -> Event:
        seq = len(self._events)
        return self.add(
            Event.from_json({"seq": seq, "type": type_, "time": T0 + seq, "data": data})
        )

    def report_usage(self, prompt_tokens: int, at_seq: int | None = None) -> Event:
        at = self._surface[-1] if at_seq is None else at_seq
        return self.log(
            "usage/report", {"promptTokens": prompt_tokens, "completionTokens": None, "atSeq": at}
        )

    def replace(self, start_seq: int, end_seq: int, text: str) -> Event:
        seq = len(self._events)
        message = _message(
            "user", "compact-checkpoint", [{"type": "text", "text": text}], f"m{seq}"
        )
        return self.add(
            make_event(
                seq,
                "user/message",
                message,
                {"op": "replace", "startSeq": start_seq, "endSeq": end_seq},
            )
        )

    def messages(self, format: str = "openai") -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.system_prompt:
            out.append({"role": "system", "content": self.system_prompt})
        for seq in self._surface:
            msg = self._events[seq].message
            if msg.role == "assistant":
                entry: dict[str, Any] = {"role": "assistant", "content": msg.text}
                if msg.tool_calls:
                    entry["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in msg.tool_calls
                    ]
                out.append(entry)
            elif msg.role == "tool":
                out.append({"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.text})
            else:
                out.append({"role": "user", "content": msg.text})
        return out


def session_from_corpus(path: Path) -> FakeSession:
    data = load_corpus(path)
    system = next((m["content"] for m in data["messages"] if m.get("role") == "system"), None)
    session = FakeSession(system_prompt=system, tools=data.get("tools"))
    session.extend(events_from_openai(data["messages"]))
    return session
