"""Replay: the fast parse of the common lines builds exactly what ``Event.from_json`` builds,
a bad line gets exactly its error, and replay does no per-line work it does not need.

Counted, never timed: line objects built, field checks run, waiting calls listed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dashr_ext._compaction.commit as commit_mod
import dashr_ext._events as events_mod
import dashr_ext._store as store_mod
from dashr_ext import CompactionConfig, Dashr
from dashr_ext._events import Event, Message
from dashr_ext._pairing import ToolPairing
from dashr_ext._replay import _common_event, parse_event
from dashr_ext._session import Session
from dashr_ext.errors import CorruptLogError, EventError

SAMPLES: tuple[Any, ...] = (None, True, -1, 0, 2**70, 1.5, "", "x", "text", [], {}, [1], {"a": 1})


def _messages(n: int) -> Iterator[dict[str, Any]]:
    for step in range(n):
        if step % 4 == 0:
            yield {"role": "user", "content": f"task {step}: make the retry budget configurable"}
        call = f"call_{step}"
        yield {
            "role": "assistant",
            "content": f"looking at step {step}",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{step}"})},
                }
            ],
        }
        body = "\n".join(f"line {i} of step {step}: the helper returns None" for i in range(20))
        yield {"role": "tool", "tool_call_id": call, "content": body}


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log of every kind of line a session writes: markers, messages, tool calls and
    results, synthetic results, replaces, compaction events, usage reports, extensions."""
    path = tmp_path_factory.mktemp("replay") / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=500)
    with Dashr.create(path, config=config, durability="flush") as d:
        d.record_openai({"role": "system", "content": "Be brief."})
        for message in _messages(40):
            d.record_openai(message)
            d.request_messages()
        d.record_openai({"role": "assistant", "content": "", "tool_calls": [_call("late")]})
        d.record_openai({"role": "user", "content": "never mind"})  # a synthetic result
        d.session.append_log("x-test/note", {"n": 1})
        d.session.append_log("usage/report", {"promptTokens": 9, "completionTokens": 2, "atSeq": 3})
        assert len(d.checkpoints()) >= 2
    return path


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def _objects(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _outcome(parse: Any, obj: Any) -> tuple[Any, ...]:
    try:
        event = parse(copy.deepcopy(obj))
    except EventError as exc:
        return ("error", str(exc))
    message = event._message
    return (
        "event",
        event,
        type(event.extra),
        message,
        None if message is None else (message.tool_calls, type(message.extra)),
    )


def _variants(obj: Any) -> Iterator[Any]:
    """``obj`` with one thing changed: each key dropped, each value (at any depth) swapped
    for each of :data:`SAMPLES`, an extra key added to each object."""
    if isinstance(obj, dict):
        yield {**obj, "extraKey": 1}
        for key, value in obj.items():
            yield {k: v for k, v in obj.items() if k != key}
            for sample in SAMPLES:
                yield {**obj, key: sample}
            for changed in _variants(value):
                yield {**obj, key: changed}
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            for sample in SAMPLES:
                yield [*obj[:i], sample, *obj[i + 1 :]]
            for changed in _variants(value):
                yield [*obj[:i], changed, *obj[i + 1 :]]


def test_every_line_of_a_log_parses_as_event_from_json_parses_it(log: Path) -> None:
    objs = _objects(log)
    fast = 0
    for obj in objs:
        assert _outcome(parse_event, obj) == _outcome(Event.from_json, obj), obj
        fast += _common_event(obj) is not None
    kinds = {obj["type"] for obj in objs}
    assert {"compaction/summary", "usage/report", "x-test/note", "system/message"} <= kinds
    assert any(isinstance(obj.get("surfaceOp"), dict) for obj in objs)  # replaces
    plain = [o for o in objs if len(o) == 4 and o["type"].startswith(("turn/", "step/"))]
    appended = [o for o in objs if o.get("surfaceOp") == "append" and len(o) == 5]
    assert fast == len(plain) + len(appended) > len(objs) // 2  # the common lines go fast


def test_a_changed_line_parses_or_fails_exactly_as_event_from_json_says(log: Path) -> None:
    objs = _objects(log)
    shapes: dict[tuple[str, bool, int], dict[str, Any]] = {}
    for obj in objs:  # one line of each kind: markers, and each role with and without calls
        message = obj["data"].get("message", {})
        calls = any(b.get("type") == "tool-call" for b in message.get("content", []))
        shapes.setdefault((obj["type"], calls, len(obj)), obj)
    assert len(shapes) >= 8
    tried = differing = 0
    for obj in shapes.values():
        for variant in _variants(obj):
            tried += 1
            expected = _outcome(Event.from_json, variant)
            assert _outcome(parse_event, variant) == expected, variant
            differing += expected[0] == "error"
    assert tried > 1_000 and differing > 300


def test_replay_builds_no_line_objects_and_runs_no_check_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plain.jsonl"
    with Session.create(path, durability="flush") as session:
        session.record_openai(list(_messages(30)))
    lines = len(path.read_bytes().splitlines())
    counts = {"lines": 0, "waiting": 0, "field checks": 0, "full message parses": 0}

    def counting(name: str, real: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return counted

    monkeypatch.setattr(store_mod, "LoadedLine", counting("lines", store_mod.LoadedLine))
    monkeypatch.setattr(ToolPairing, "waiting", counting("waiting", ToolPairing.waiting))
    monkeypatch.setattr(events_mod, "_need", counting("field checks", events_mod._need))
    monkeypatch.setattr(Message, "from_json", counting("full message parses", Message.from_json))
    replayed = Session.open(path, read_only=True)
    results = sum(1 for e in replayed.events if e.type == "tool/result")
    assert len(replayed) == lines and results == 30
    assert counts == {"lines": 0, "waiting": 0, "field checks": 0, "full message parses": 0}
    assert [e.message for e in replayed.events if e.surface_op] == [
        e.message for e in session.events if e.surface_op
    ]


def test_replay_names_the_first_bad_line_whether_it_is_no_event_or_cannot_follow(
    log: Path, tmp_path: Path
) -> None:
    objs = _objects(log)
    result = next(i for i, o in enumerate(objs) if o["type"] == "tool/result")
    orphan = copy.deepcopy(objs[result])
    orphan["data"]["message"]["toolCallId"] = "nobody"  # a valid event that cannot follow
    broken = {**objs[result + 1], "time": "soon"}  # not an event at all
    for first, second in ((orphan, broken), (broken, orphan)):
        lines = [*objs[:result], first, second, *objs[result + 2 :]]
        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
        with pytest.raises(CorruptLogError) as err:
            Session.open(path, read_only=True)
        assert f".jsonl:{result + 1}: " in str(err.value)
        expected = "unknown tool call id 'nobody'" if first is orphan else "event.time"
        assert expected in str(err.value)


def test_a_writer_open_looks_at_no_node_when_every_compaction_pass_was_closed(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_path = tmp_path / "w.jsonl"
    copy_path.write_bytes(log.read_bytes())
    looked = {"checkpoint": 0, "pruned": 0}

    def counting(name: str, real: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            looked[name] += 1
            return real(*args, **kwargs)

        return counted

    monkeypatch.setattr(
        commit_mod, "checkpoint_of", counting("checkpoint", commit_mod.checkpoint_of)
    )
    monkeypatch.setattr(commit_mod, "pruned_info", counting("pruned", commit_mod.pruned_info))
    with Dashr.open(copy_path, durability="flush") as d:
        assert len(d.checkpoints()) >= 2
    assert looked == {"checkpoint": 0, "pruned": 0}
    assert copy_path.read_bytes() == log.read_bytes()  # nothing needed closing
    lines = copy_path.read_bytes().splitlines(keepends=True)
    end = max(i for i, line in enumerate(lines) if b'"compaction/end"' in line)
    unclosed = tmp_path / "u.jsonl"  # cut before its last pass's end: that pass is looked into
    unclosed.write_bytes(b"".join(lines[:end]))
    with pytest.warns(UserWarning, match="committed but was not closed"), Dashr.open(unclosed) as d:
        assert d.session.events[end].type == "compaction/end"  # the first line it appended
    assert looked["checkpoint"] > 0


def test_replay_builds_each_message_without_the_dataclass_init(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: a message parsed on the fast path is built from its checked fields (no
    ``Message.__init__`` per line), and is the same frozen message the init builds."""
    lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    inits: list[str] = []
    real = Message.__init__

    def counted(self: Message, *args: Any, **kwargs: Any) -> None:
        inits.append(args[0] if args else kwargs.get("id", ""))
        real(self, *args, **kwargs)

    monkeypatch.setattr(Message, "__init__", counted)
    fast = [e for e in (_common_event(obj) for obj in lines) if e is not None and e.is_surface]
    assert len(fast) > 10 and inits == []
    for event in fast:
        built = event.message
        again = Message(
            built.id, built.role, built.source, built.content, built.tool_call_id,
            built.tool_name, built.is_error, built.extra,
        )  # fmt: skip
        assert built == again and built.tool_calls == again.tool_calls
        assert repr(built) == repr(again)
    with pytest.raises(AttributeError):
        fast[0].message.role = "user"  # type: ignore[misc]
