"""A loaded session holds its log once: message events keep their parsed message, not the
line's ``data`` object beside it, and replay never holds every line's objects at once."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus

import dashr_ext._store as store_mod
from dashr_ext import Dashr
from dashr_ext._events import Event
from dashr_ext._session import Session


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _recorded(path: Path, messages: list[dict[str, Any]]) -> Path:
    with Dashr.create(path, durability="flush") as d:
        for message in messages:
            d.record_openai(message)
    return path


def _assert_lean_and_exact(path: Path) -> int:
    """Every event gives back its line byte for byte; returns how many keep no data object."""
    lines = _lines(path)
    session = Session.open(path, read_only=True)
    assert len(session.events) == len(lines)
    lean = 0
    for event, line in zip(session.events, lines, strict=True):
        assert _line(event.to_json()) == line  # same keys, same order, same values
        if event._data is None:
            lean += 1
            assert event.is_surface or event.type == "system/message"
            assert event.data == json.loads(line)["data"]
            assert event.data is not event.data  # rebuilt on demand, not kept
    return lean


@pytest.mark.parametrize("path", corpus_params())
def test_every_corpus_message_event_is_kept_once_and_rebuilt_exactly(
    path: Path, tmp_path: Path
) -> None:
    log = _recorded(tmp_path / "s.jsonl", load_corpus(path)["messages"])
    session = Session.open(log, read_only=True)
    messages = sum(1 for e in session.events if e.is_surface or e.type == "system/message")
    assert _assert_lean_and_exact(log) == messages > 0


def _header() -> dict[str, Any]:
    return {
        "seq": 0,
        "type": "session/header",
        "time": 1,
        "data": {
            "sessionId": "s",
            "createdAt": 1,
            "systemPrompt": None,
            "tools": None,
            "format": "dashr/1",
        },
    }


def _user(seq: int, message: dict[str, Any], **data: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "user/message",
        "time": 1 + seq,
        "surfaceOp": "append",
        "data": {"message": message, **data},
    }


_PLAIN = {"role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": "hi"}]}

KEPT = {
    # What parsing would not give back exactly keeps its line's data object.
    "a block with an extra key": {
        **_PLAIN,
        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        "id": "m1",
    },
    "an image block": {
        **_PLAIN,
        "content": [{"type": "image", "attachmentId": "a1", "mediaType": "image/png"}],
        "id": "m1",
    },
    "a tool key on a user message": {**_PLAIN, "isError": False, "id": "m1"},
}
LEAN = {
    "this package's order": {**_PLAIN, "id": "m1"},
    "another key order": {"id": "m1", **_PLAIN},
    "an extra message key": {**_PLAIN, "id": "m1", "name": "alice", "meta": {"n": [1, 2.5]}},
    "reasoning and text": {
        **_PLAIN,
        "content": [{"type": "reasoning", "text": "why"}, {"type": "text", "text": "so"}],
        "id": "m1",
    },
}


@pytest.mark.parametrize(
    ("message", "lean"),
    [pytest.param(m, False, id=k) for k, m in KEPT.items()]
    + [pytest.param(m, True, id=k) for k, m in LEAN.items()],
)
def test_a_message_event_drops_its_data_only_when_it_is_rebuilt_exactly(
    message: dict[str, Any], lean: bool, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(_line(_header()) + "\n" + _line(_user(1, message)) + "\n", encoding="utf-8")
    assert _assert_lean_and_exact(path) == int(lean)


def test_data_beside_the_message_keeps_the_data_object(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    event = _user(1, {**_PLAIN, "id": "m1"}, note="kept")
    path.write_text(_line(_header()) + "\n" + _line(event) + "\n", encoding="utf-8")
    assert _assert_lean_and_exact(path) == 0


def test_lean_and_kept_events_compare_by_their_json(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(_line(_header()) + "\n" + _line(_user(1, LEAN["this package's order"])) + "\n")
    loaded = Session.open(path, read_only=True).events[1]
    built = Event(1, "user/message", 2, {"message": LEAN["this package's order"]}, "append")
    assert loaded._data is None and built._data is not None
    assert loaded == built and repr(loaded) == repr(built)
    other = Event(1, "user/message", 2, {"message": {**_PLAIN, "id": "m2"}}, "append")
    assert loaded != other


def test_replay_never_holds_every_lines_objects_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted in traced bytes: a replay's peak above what it keeps stays near one block."""
    body = "\n".join(f"line {i}: the helper returns None after a retry" for i in range(40))
    messages: list[dict[str, Any]] = []
    for step in range(300):
        call = f"call_{step}"
        messages.append(
            {
                "role": "assistant",
                "content": f"step {step}",
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": f"{step}\n{body}"})
    path = _recorded(tmp_path / "s.jsonl", messages)
    size = path.stat().st_size
    monkeypatch.setattr(store_mod, "_LOAD_BLOCK", 1 << 16)
    tracemalloc.start()
    try:
        session = Session.open(path, read_only=True)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(session.events) > 1200 and size > 700_000
    # All the lines' dicts at once would be about the file's size again.
    assert peak - kept < size // 4


def test_messages_share_their_role_strings(tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = []
    for step in range(3):
        call = f"call_{step}"
        function = {"name": "bash", "arguments": "{}"}
        tool_call = {"id": call, "type": "function", "function": function}
        messages.append({"role": "user", "content": f"task {step}"})
        messages.append({"role": "assistant", "content": "ok", "tool_calls": [tool_call]})
        messages.append({"role": "tool", "tool_call_id": call, "content": "done"})
    log = _recorded(tmp_path / "s.jsonl", messages)
    events = Session.open(log, read_only=True).events
    by_role: dict[str, list[Any]] = {}
    for event in events:
        if event.is_surface:
            by_role.setdefault(event.message.role, []).append(event.message)
    for role, group in by_role.items():
        assert len(group) == 3 and len({id(m.role) for m in group}) == 1, role
    assert _assert_lean_and_exact(log) == 9  # and every line is still given back exactly


def test_loaded_events_pickle_copy_and_dill_back_to_equal_events(tmp_path: Path) -> None:
    import copy
    import pickle

    import dill

    from dashr_ext._events import _NO_EXTRA

    path = tmp_path / "s.jsonl"
    lines = [_header(), _user(1, LEAN["this package's order"]), _user(2, KEPT["an image block"])]
    path.write_text("".join(_line(obj) + "\n" for obj in lines), encoding="utf-8")
    events = Session.open(path, read_only=True).events
    assert events[1]._data is None and events[2]._data is not None
    for event in events:
        for again in (
            pickle.loads(pickle.dumps(event)),
            dill.loads(dill.dumps(event)),
            copy.deepcopy(event),
        ):
            assert again == event and again.to_json() == event.to_json()
            assert again.extra is _NO_EXTRA  # the shared read-only empty extra comes back


def test_an_event_built_without_data_is_refused() -> None:
    from dashr_ext.errors import EventError

    with pytest.raises(EventError, match=r"event 3 \(user/message\) data: expected a JSON object"):
        Event(3, "user/message", 1, None, "append")
