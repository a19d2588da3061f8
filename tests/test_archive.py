"""The compaction archive (SPEC §7.1): the entry, its buckets, plain data, the size cap."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dill  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext._archive import (
    BUCKETS,
    MESSAGE_BUCKETS,
    apply_cap,
    bucket_counts,
    build_entry,
    entry_for_summary,
    entry_size_bytes,
    evicted_stub,
    is_evicted,
    iso_utc,
)
from dashr_ext._events import Event
from dashr_ext._fileops import FILE_OP_KINDS
from dashr_ext.errors import ConfigError, EventError

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
T0 = 1_783_339_385_123  # 2026-07-06T12:03:05.123Z

# --------------------------------------------------------------------------- event builders


def _event(seq: int, kind: str, message: dict[str, Any], time: int | None = None) -> Event:
    return Event.from_json(
        {
            "seq": seq,
            "type": kind,
            "time": T0 + seq * 1000 if time is None else time,
            "surfaceOp": "append",
            "data": {"message": message},
        }
    )


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if text else []


def user(seq: int, text: str, *, blocks: list[dict[str, Any]] | None = None) -> Event:
    content = _text(text) if blocks is None else blocks
    msg = {"id": f"m{seq}", "role": "user", "source": {"kind": "user"}, "content": content}
    return _event(seq, "user/message", msg)


def assistant(
    seq: int,
    text: str = "",
    *,
    calls: Sequence[tuple[str, str, str | Mapping[str, Any]]] = (),
    reasoning: str | None = None,
) -> Event:
    content: list[dict[str, Any]] = []
    if reasoning is not None:
        content.append({"type": "reasoning", "text": reasoning})
    content += _text(text)
    for call_id, name, args in calls:
        arguments = args if isinstance(args, str) else json.dumps(args)
        content.append({"type": "tool-call", "id": call_id, "name": name, "arguments": arguments})
    msg = {"id": f"m{seq}", "role": "assistant", "source": {"kind": "model", "model": "m"}}
    return _event(seq, "assistant/message", {**msg, "content": content})


def tool(seq: int, call_id: str, name: str, text: str, *, is_error: bool = False) -> Event:
    msg = {
        "id": f"m{seq}",
        "role": "tool",
        "source": {"kind": "tool"},
        "content": _text(text),
        "toolCallId": call_id,
        "toolName": name,
        "isError": is_error,
    }
    return _event(seq, "tool/result", msg)


def checkpoint_node(seq: int, checkpoint: str, text: str) -> Event:
    source = {"kind": "compact-checkpoint", "checkpoint": checkpoint}
    msg = {"id": f"m{seq}", "role": "user", "source": source, "content": _text(text)}
    return _event(seq, "user/message", msg)


def context(seq: int, text: str) -> Event:
    msg = {"id": f"m{seq}", "role": "context", "source": {"kind": "plugin"}, "content": _text(text)}
    return _event(seq, "context/message", msg)


def entry_of(span: Sequence[Event], checkpoint: str = "c42", **kwargs: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "checkpoint": checkpoint,
        "at_ms": T0,
        "reason": "pressure",
        "engine": "summary",
        "tokens": 1234,
        "session_id": "s-1",
    }
    options.update(kwargs)
    return build_entry(span, **options)


def is_plain(value: object) -> bool:
    """Only str/int/bool/None/list/dict (with str keys) all the way down."""
    if value is None or isinstance(value, str | int | bool):
        return True
    if isinstance(value, list):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def ts(seq: int) -> str:
    return iso_utc(T0 + seq * 1000)


# --------------------------------------------------------------------------- the entry


def test_iso_utc_is_millisecond_precision_utc_with_z() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"
    assert iso_utc(T0) == "2026-07-06T12:03:05.123Z"
    assert iso_utc(T0 + 877) == "2026-07-06T12:03:06.000Z"


def test_entry_is_exactly_the_spec_dict_with_every_bucket_in_order() -> None:
    span = [
        checkpoint_node(40, "c12", "earlier summary"),
        user(5, "Fix the retry tests."),
        assistant(
            6,
            "Reading the helper.",
            calls=[("call-1", "read_file", {"path": "src/retry.py"})],
            reasoning="Start with the helper.",
        ),
        tool(7, "call-1", "read_file", "def retry_budget(): return 3"),
        tool(8, "call-2", "bash", "No such file", is_error=True),
        context(9, "pointer: c12"),
    ]
    entry = entry_of(span)
    assert list(entry) == ["meta", *BUCKETS]
    assert entry == {
        "meta": {
            "checkpoint": "c42",
            "at": "2026-07-06T12:03:05.123Z",
            "reason": "pressure",
            "engine": "summary",
            "seqs": [40, 5, 6, 7, 8, 9],
            "tokens": 1234,
            "session": "s-1",
        },
        "user_requests": [{"seq": 5, "ts": ts(5), "text": "Fix the retry tests."}],
        "assistant_responses": [
            {
                "seq": 6,
                "ts": ts(6),
                "text": "Reading the helper.",
                "tool_calls": [
                    {"id": "call-1", "name": "read_file", "arguments": '{"path": "src/retry.py"}'}
                ],
                "reasoning": "Start with the helper.",
            }
        ],
        "tool_results": [
            {
                "seq": 7,
                "ts": ts(7),
                "tool": "read_file",
                "text": "def retry_budget(): return 3",
                "is_error": False,
                "tool_call_id": "call-1",
            },
            {
                "seq": 8,
                "ts": ts(8),
                "tool": "bash",
                "text": "No such file",
                "is_error": True,
                "tool_call_id": "call-2",
            },
        ],
        "file_ops": [{"seq": 6, "op": "read", "path": "src/retry.py"}],
        "prior_checkpoints": [{"seq": 40, "checkpoint": "c12", "text": "earlier summary"}],
        "context": [{"seq": 9, "ts": ts(9), "text": "pointer: c12"}],
    }
    assert bucket_counts(entry) == {
        "user_requests": 1,
        "assistant_responses": 1,
        "tool_results": 2,
        "file_ops": 1,
        "prior_checkpoints": 1,
        "context": 1,
    }
    assert list(bucket_counts(entry)) == list(BUCKETS)


def test_every_bucket_is_present_even_when_empty() -> None:
    entry = entry_of([user(1, "hi")])
    assert list(entry) == ["meta", *BUCKETS]
    assert bucket_counts(entry) == dict.fromkeys(BUCKETS, 0) | {"user_requests": 1}


def test_reasoning_is_none_when_not_archived_and_empty_string_when_absent() -> None:
    span = [assistant(1, "a", reasoning="private chain"), assistant(2, "b")]
    kept = entry_of(span)["assistant_responses"]
    assert [r["reasoning"] for r in kept] == ["private chain", ""]
    dropped = entry_of(span, archive_reasoning=False)["assistant_responses"]
    assert [r["reasoning"] for r in dropped] == [None, None]
    assert [r["text"] for r in dropped] == ["a", "b"]


def test_text_joins_text_blocks_verbatim_and_renders_images_in_place() -> None:
    image = {
        "type": "image",
        "attachmentId": "att-1",
        "mediaType": "image/png",
        "width": 800,
        "height": 600,
        "bytes": 1000,
    }
    sizeless = {**image, "attachmentId": "att-2", "width": None, "height": None}
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "  first\n"},
        image,
        {"type": "text", "text": "second"},
        sizeless,
    ]
    entry = entry_of([user(1, "", blocks=blocks)])
    assert entry["user_requests"][0]["text"] == (
        "  first\n\n[image image/png 800x600 attachment att-1]\nsecond\n"
        "[image image/png attachment att-2]"
    )


def test_checkpoint_node_without_an_id_is_still_a_prior_checkpoint() -> None:
    msg = {
        "id": "m3",
        "role": "user",
        "source": {"kind": "compact-checkpoint"},
        "content": _text("old summary"),
    }
    entry = entry_of([_event(3, "user/message", msg)])
    assert entry["prior_checkpoints"] == [{"seq": 3, "checkpoint": None, "text": "old summary"}]
    assert entry["user_requests"] == []


def test_a_log_only_event_in_the_span_is_a_typed_error() -> None:
    turn = Event.from_json({"seq": 4, "type": "turn/start", "time": T0, "data": {"turn": 1}})
    with pytest.raises(EventError, match=r"event 4 \(turn/start\) is not a surface message"):
        entry_of([user(3, "hi"), turn])


def test_entry_for_summary_takes_meta_from_the_summary_event() -> None:
    span = [user(5, "go"), assistant(6, "done")]
    summary = Event.from_json(
        {
            "seq": 42,
            "type": "compaction/summary",
            "time": T0 + 99,
            "data": {
                "compactionId": "k1",
                "checkpoint": "c42",
                "trigger": "manual",
                "engine": "recallable",
                "summary": "s",
                "shadowedRange": {"start": 5, "end": 6},
                "shadowedSeqs": [5, 6],
                "shadowedTokenCount": 77,
                "summarizer": {"kind": "extractive", "model": None},
                "archive": {},
            },
        }
    )
    rebuilt = entry_for_summary(summary, span, session_id="s-9")
    assert rebuilt == build_entry(
        span,
        checkpoint="c42",
        at_ms=T0 + 99,
        reason="manual",
        engine="recallable",
        tokens=77,
        session_id="s-9",
    )
    with pytest.raises(EventError, match="not compaction/summary"):
        entry_for_summary(span[0], span, session_id="s-9")


# --------------------------------------------------------------------------- property: partition

_ARGUMENTS = st.one_of(
    st.sampled_from(
        [
            json.dumps({"command": "cat a.py && sed -i 's/x/y/' b.py > out.txt 2>&1"}),
            json.dumps({"command": "view", "path": "/w/c.py"}),
            json.dumps({"code": "open('d.csv', 'w').write('x')"}),
            json.dumps({"path": "e.txt"}),
            "not json {",
        ]
    ),
    st.text(max_size=30),
)
_TOOL_NAMES = st.sampled_from(["bash", "str_replace_editor", "run_cell", "read_file", "weird"])
_TEXT = st.text(max_size=30)


@st.composite
def surface_event(draw: st.DrawFn, seq: int) -> Event:
    kind = draw(st.sampled_from(["user", "assistant", "tool", "checkpoint", "context", "image"]))
    time = draw(st.integers(0, 4_102_444_800_000))
    text = draw(_TEXT)
    if kind == "assistant":
        calls = draw(
            st.lists(
                st.tuples(st.text(min_size=1, max_size=5), _TOOL_NAMES, _ARGUMENTS), max_size=3
            )
        )
        reasoning = draw(st.one_of(st.none(), _TEXT))
        event = assistant(seq, text, calls=calls, reasoning=reasoning)
    elif kind == "tool":
        event = tool(seq, draw(_TEXT), draw(_TOOL_NAMES), text, is_error=draw(st.booleans()))
    elif kind == "checkpoint":
        event = checkpoint_node(seq, f"c{draw(st.integers(0, 999))}", text)
    elif kind == "context":
        event = context(seq, text)
    elif kind == "image":
        image = {
            "type": "image",
            "attachmentId": draw(st.text(min_size=1, max_size=8)),
            "mediaType": "image/png",
            "width": draw(st.one_of(st.none(), st.integers(1, 4000))),
            "height": draw(st.one_of(st.none(), st.integers(1, 4000))),
            "bytes": None,
        }
        event = user(seq, "", blocks=[*_text(text), image])
    else:
        event = user(seq, text)
    event.time = time
    return event


@st.composite
def spans(draw: st.DrawFn) -> list[Event]:
    seqs = draw(st.lists(st.integers(0, 100_000), max_size=20, unique=True))
    return [draw(surface_event(seq)) for seq in seqs]


@settings(max_examples=150, deadline=None)
@given(span=spans(), archive_reasoning=st.booleans())
def test_every_shadowed_message_lands_in_exactly_one_bucket(
    span: list[Event], archive_reasoning: bool
) -> None:
    entry = entry_of(span, archive_reasoning=archive_reasoning)
    placed = [item["seq"] for bucket in MESSAGE_BUCKETS for item in entry[bucket]]
    assert sorted(placed) == sorted(event.seq for event in span)
    counts = bucket_counts(entry)
    assert sum(counts[b] for b in MESSAGE_BUCKETS) == len(span)
    assert entry["meta"]["seqs"] == [event.seq for event in span]
    assistant_seqs = {e.seq for e in span if e.type == "assistant/message"}
    for op in entry["file_ops"]:
        assert op["seq"] in assistant_seqs
        assert op["op"] in FILE_OP_KINDS
        assert op["path"]


@settings(max_examples=100, deadline=None)
@given(span=spans())
def test_entries_are_plain_data_and_round_trip_through_json_pickle_and_dill(
    span: list[Event],
) -> None:
    entry = entry_of(span)
    assert is_plain(entry)
    assert json.loads(json.dumps(entry)) == entry
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert dill.loads(dill.dumps(entry)) == entry


# --------------------------------------------------------------------------- real sessions


def openai_to_events(messages: Sequence[Mapping[str, Any]]) -> list[Event]:
    """A small local converter: OpenAI chat messages (system skipped) -> surface events."""
    events: list[Event] = []
    names: dict[str, str] = {}
    for index, m in enumerate(messages):
        role = m["role"]
        if role == "system":
            continue
        raw = m.get("content")
        if isinstance(raw, list):
            text = "\n".join(p["text"] for p in raw if p.get("type") == "text")
        else:
            text = raw or ""
        seq = len(events)
        msg: dict[str, Any] = {"id": f"m{index}", "role": role, "content": _text(text)}
        if role == "user":
            msg["source"] = {"kind": "user"}
        elif role == "assistant":
            msg["source"] = {"kind": "model", "model": None}
            if m.get("reasoning_content"):
                msg["content"].insert(0, {"type": "reasoning", "text": m["reasoning_content"]})
            for call in m.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
                msg["content"].append(
                    {
                        "type": "tool-call",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif role == "tool":
            msg["source"] = {"kind": "tool"}
            msg["toolCallId"] = m["tool_call_id"]
            msg["toolName"] = m.get("name") or names.get(m["tool_call_id"], "unknown")
            msg["isError"] = False
        kind = {"user": "user/message", "assistant": "assistant/message", "tool": "tool/result"}
        events.append(_event(seq, kind[role], msg))
    return events


def corpus_sessions() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.glob("*/*.json"))


@pytest.mark.corpus
def test_real_sessions_bucket_completely_and_keep_tool_output_verbatim() -> None:
    files = corpus_sessions()
    if not files:
        pytest.skip(f"corpus not found at {CORPUS}")
    seen_ops: set[str] = set()
    for path in files:
        session = json.loads(path.read_text(encoding="utf-8"))
        messages = [m for m in session["messages"] if m["role"] != "system"]
        span = openai_to_events(session["messages"])
        entry = entry_of(span, session_id=session["id"])

        placed = [item["seq"] for bucket in MESSAGE_BUCKETS for item in entry[bucket]]
        assert sorted(placed) == list(range(len(span))), path.name

        originals = {i: m for i, m in enumerate(messages)}
        for result in entry["tool_results"]:
            assert result["text"] == (originals[result["seq"]]["content"] or ""), path.name
            assert result["tool_call_id"] == originals[result["seq"]]["tool_call_id"]
        for request in entry["user_requests"]:
            assert request["text"] == originals[request["seq"]]["content"]
        for response in entry["assistant_responses"]:
            calls = originals[response["seq"]].get("tool_calls") or []
            assert [c["arguments"] for c in response["tool_calls"]] == [
                c["function"]["arguments"] for c in calls
            ]

        with_calls = {r["seq"] for r in entry["assistant_responses"] if r["tool_calls"]}
        for op in entry["file_ops"]:
            assert op["seq"] in with_calls
            assert op["path"] and "\n" not in op["path"], op
            assert op["path"] != "/dev/null"
            seen_ops.add(op["op"])
        assert json.loads(json.dumps(entry)) == entry
    assert {"read", "write", "edit", "delete"} <= seen_ops


# --------------------------------------------------------------------------- size cap


def big_entry(checkpoint: str, size: int) -> dict[str, Any]:
    return entry_of([tool(1, "x", "bash", "x" * size)], checkpoint=checkpoint)


def test_entry_size_is_compact_utf8_json_bytes() -> None:
    entry = entry_of([user(1, "héllo ×")])
    expected = len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    assert entry_size_bytes(entry) == expected


def test_evicted_stub_says_how_to_recover_and_keeps_meta() -> None:
    entry = big_entry("c12", 10)
    stub = evicted_stub(entry)
    assert stub == {"evicted": True, "recover": 'history_read("c12")', "meta": entry["meta"]}
    assert stub["meta"] is not entry["meta"]
    assert is_evicted(stub) and not is_evicted(entry)


def test_apply_cap_evicts_oldest_first_until_the_archive_fits() -> None:
    archive = {c: big_entry(c, 1000) for c in ("c13", "c29", "c40", "c51")}  # equal sizes
    one = entry_size_bytes(archive["c13"])
    stub = entry_size_bytes(evicted_stub(archive["c13"]))
    assert apply_cap(archive, None) == []
    assert apply_cap(archive, 4 * one) == []
    assert apply_cap(archive, 4 * one - 1) == ["c13"]
    assert apply_cap(archive, 3 * one + stub) == ["c13"]
    assert apply_cap(archive, 2 * one + 2 * stub) == ["c13", "c29"]
    assert apply_cap(archive, 2 * one + 2 * stub - 1) == ["c13", "c29", "c40"]


def test_apply_cap_never_evicts_the_newest_entry_and_skips_stubs() -> None:
    archive = {c: big_entry(c, 1000) for c in ("c3", "c9", "c20")}
    assert apply_cap(archive, 1) == ["c3", "c9"]
    archive["c3"] = evicted_stub(archive["c3"])
    assert apply_cap(archive, 1) == ["c9"]


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "10"])
def test_apply_cap_rejects_a_bad_cap_naming_the_setting(bad: object) -> None:
    with pytest.raises(ConfigError, match="archive_max_bytes"):
        apply_cap({}, bad)  # type: ignore[arg-type]
