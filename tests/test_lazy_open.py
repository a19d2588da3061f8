"""Opening a log builds only what the caller needs; the folds kept per event equal a rebuild.

Counted, never timed: how often the archive is rebuilt and file operations are extracted,
how often the balanced cuts are recomputed from scratch, and which objects a loaded session
shares instead of copying.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus

import dashr_ext._archive as archive_mod
import dashr_ext._controller as controller_mod
from dashr_ext import CompactionConfig, Dashr
from dashr_ext._compaction.commit import rebuild_archive
from dashr_ext._events import Event
from dashr_ext._pairing import ToolPairing
from dashr_ext._session import Session

WINDOW, RETAIN = 3_000, 800


def _steps(n: int) -> Iterator[dict[str, Any]]:
    """Agent steps whose tool calls touch files (so the archive has file operations)."""
    for step in range(n):
        if step % 6 == 0:
            yield {"role": "user", "content": f"Task {step}: fix the retry budget in mod{step}"}
        call = f"call_{step}"
        command = f"sed -n 1,40p src/mod{step % 7}.py && echo ok > out/r{step}.txt"
        yield {
            "role": "assistant",
            "content": f"Reading mod{step % 7} for attempt {step}.",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
        body = "\n".join(f"line {i} of step {step}: the helper returns None" for i in range(30))
        yield {"role": "tool", "tool_call_id": call, "content": body}


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A file-backed log with several checkpoints, and the archive its writer held."""
    path = tmp_path_factory.mktemp("lazy") / "s.jsonl"
    config = CompactionConfig(recency_window_tokens=WINDOW, retain_tokens=RETAIN)
    with Dashr.create(path, config=config, durability="flush") as d:
        for message in _steps(60):
            d.record_openai(message)
            d.request_messages()
        live = dict(d.archive)
        assert len(d.checkpoints()) >= 3
    assert any(entry["file_ops"] for entry in live.values())
    return path, live


class _Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.calls = 0
        real = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def test_a_read_only_open_builds_no_archive_until_it_is_asked_for(
    compacted: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, live = compacted
    rebuilds = _Counter(monkeypatch, controller_mod, "rebuild_archive")
    extractions = _Counter(monkeypatch, archive_mod, "extract_file_ops")
    with Dashr.open(path, read_only=True) as d:
        cps = d.checkpoints()
        assert len(cps) >= 3
        assert "| shadowed |" in d.history_search("helper returns None", limit=5)
        assert cps[0].id in d.history_outline()
        assert "line 3 of step 0" in d.history_read(checkpoint=cps[0].id)
        assert (rebuilds.calls, extractions.calls) == (0, 0)
        archive = d.archive  # first access: built once, equal to the writer's
        assert rebuilds.calls == 1 and extractions.calls == len(cps)
        assert archive == live
        assert d.archive is archive and rebuilds.calls == 1
        eager: dict[str, Any] = {}
        rebuild_archive(d.session, d.config.archive_max_bytes, eager)
        assert archive == eager


def test_a_writer_builds_the_archive_before_its_first_pass_writes_it(
    compacted: tuple[Path, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    path, _live = compacted
    copy = tmp_path / "w.jsonl"
    copy.write_bytes(path.read_bytes())
    rebuilds = _Counter(monkeypatch, controller_mod, "rebuild_archive")
    config = CompactionConfig(recency_window_tokens=WINDOW, retain_tokens=RETAIN)
    with Dashr.open(copy, config=config) as d:
        assert rebuilds.calls == 0
        before = len(d.checkpoints())
        for message in _steps(12):
            message = dict(message)
            if "tool_calls" in message:
                message["tool_calls"] = [
                    {**c, "id": "again_" + c["id"]} for c in message["tool_calls"]
                ]
            if message["role"] == "tool":
                message["tool_call_id"] = "again_" + message["tool_call_id"]
            d.record_openai(message)
            d.request_messages()
        assert len(d.checkpoints()) > before
        assert rebuilds.calls == 1
        live = dict(d.archive)
    with Dashr.open(copy, read_only=True) as again:
        assert dict(again.archive) == live


def _scratch(s: Session) -> list[int]:
    return s._pairing.cut_depths(s._surface, s._current, s.position)


def _replay_checking(events: list[Event]) -> Session:
    """Replay ``events`` one by one, comparing the kept cut depths with a rebuild each time."""
    s = Session()
    for event in events:
        s._check(event)
        s._apply(event)
        assert s._cut_depths() == _scratch(s), event.seq
        assert s.balanced_cuts() == [d == 0 for d in _scratch(s)]
    return s


def test_replaying_a_compacted_log_never_recomputes_the_cuts_from_scratch(
    compacted: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _live = compacted
    recomputes = _Counter(monkeypatch, ToolPairing, "cut_depths")
    s = Session.open(path, read_only=True)
    replaces = sum(1 for e in s.events if e.surface_op not in (None, "append"))
    assert replaces >= 3
    assert recomputes.calls == 0
    s.balanced_cuts()
    assert recomputes.calls == 0
    monkeypatch.undo()
    _replay_checking(list(s.events))


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params())
def test_kept_cuts_equal_cuts_from_scratch_on_every_corpus_session(path: Path) -> None:
    data = load_corpus(path)
    config = CompactionConfig(recency_window_tokens=8_000, retain_tokens=2_000)
    with Dashr.create(config=config, tools=data["tools"], in_memory=True) as d:
        for message in data["messages"]:
            d.record_openai(message)
            d.request_messages()
            assert d.session._cut_depths() == _scratch(d.session)
        events = list(d.session.events)
    assert any(e.surface_op not in (None, "append") for e in events) or len(events) < 200
    _replay_checking(events)


def _event(
    seq: int, kind: str, message: dict[str, Any], op: Any = "append", sources: Any = None
) -> Event:
    obj: dict[str, Any] = {"seq": seq, "type": kind, "time": 1_000 + seq, "data": {}}
    if kind == "session/header":
        obj["data"] = {
            "sessionId": "s",
            "createdAt": 1,
            "systemPrompt": None,
            "tools": None,
            "format": "dashr/1",
        }
        return Event.from_json(obj)
    obj["data"] = {"message": {"id": f"m{seq}", **message}}
    obj["surfaceOp"] = op
    if sources is not None:
        obj["sourceEventSeqs"] = list(sources)
    return Event.from_json(obj)


def _random_log(rng: random.Random, n: int, seen: dict[str, int] | None = None) -> list[Event]:
    """A log another writer might have written: calls left waiting, abandoned by newer
    messages, answered late, several calls per message, replaces at balanced cuts and in
    place. Only events this session's checks accept are kept."""
    s = Session()
    events: list[Event] = []

    seen = {} if seen is None else seen

    def push(
        kind: str, message: dict[str, Any], op: Any = "append", sources: Any = None, case: str = ""
    ) -> None:
        try:
            event = _event(len(events), kind, message, op, sources)
            s._check(event)
        except Exception:
            return
        if kind in ("user/message", "assistant/message") and op == "append" and s._pairing.pending:
            seen["abandoning"] = seen.get("abandoning", 0) + 1
        s._apply(event)
        events.append(event)
        if case:
            seen[case] = seen.get(case, 0) + 1

    push("session/header", {})
    calls: list[str] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.2:
            push("user/message", {"role": "user", "source": {"kind": "user"}, "content": []})
        elif roll < 0.45:
            ids = [f"c{len(events)}_{k}" for k in range(rng.choice((0, 1, 1, 2, 3)))]
            calls.extend(ids)
            content = [{"type": "tool-call", "id": i, "name": "t", "arguments": "{}"} for i in ids]
            push(
                "assistant/message",
                {"role": "assistant", "source": {"kind": "m"}, "content": content},
            )
        elif roll < 0.75 and calls:
            cid = rng.choice(calls)
            result = {
                "role": "tool",
                "source": {"kind": rng.choice(("tool", "synthetic"))},
                "content": [],
                "toolCallId": cid,
                "toolName": "t",
                "isError": False,
            }
            at = s.tool_result_seq(cid)
            if at is not None and s.is_current(at) and rng.random() < 0.5:
                op = {"op": "replace", "startSeq": at, "endSeq": at}
                push("tool/result", result, op, [at], "in place")
            else:
                push("tool/result", result, case="late" if cid in s._pairing.abandoned else "")
        elif len(s.surface) > 1:
            surface = list(s.surface)
            cuts = _scratch(s)
            a = rng.randrange(len(surface))
            b = rng.randrange(a, min(len(surface), a + 4))
            if (cuts[a] == 0 and cuts[b + 1] == 0) or rng.random() < 0.3:
                message = {"role": "user", "source": {"kind": "compact-checkpoint"}, "content": []}
                op = {"op": "replace", "startSeq": surface[a], "endSeq": surface[b]}
                push("user/message", message, op, surface[a : b + 1], "replace")
    return events


@pytest.mark.parametrize("seed", range(40))
def test_kept_cuts_equal_cuts_from_scratch_on_random_logs(seed: int) -> None:
    events = _random_log(random.Random(seed), 300)
    s = _replay_checking(events)
    assert len(s.events) == len(events)


def test_random_logs_reach_the_cases_that_reach_back() -> None:
    """The generator does produce abandoned calls, late results and replaces."""
    seen: dict[str, int] = {}
    for seed in range(40):
        _random_log(random.Random(seed), 300, seen)
    assert set(seen) == {"abandoning", "late", "in place", "replace"}, seen
    assert min(seen.values()) >= 5, seen


def test_a_message_builds_its_tool_calls_once() -> None:
    event = _event(
        1,
        "assistant/message",
        {
            "role": "assistant",
            "source": {"kind": "model"},
            "content": [{"type": "tool-call", "id": "c", "name": "t", "arguments": "{}"}],
        },
    )
    message = event.message
    assert message.tool_calls is message.tool_calls
    assert [c.id for c in message.tool_calls] == ["c"]


# --------------------------------------------------------------------------- the store's parser

_VALID_LINES = [
    '{"seq":0,"type":"x-a","time":1,"data":{"t":"caf\\u00e9 \\"q\\" \\\\ \\n \\ud83d\\ude00 —"}}',
    '{"seq":1,"type":"x-a","time":2,"data":{"f":[1.5,-0.0,1e-7,1.1000000000000001,2E3]}}',
    '{"seq":2,"type":"x-a","time":3,"data":{"big":123456789012345678901234567890,"n":-9}}',
    '{"seq":3,"type":"x-a","time":4,"data":{"k":1,"k":2,"deep":[[[{"a":[null,true]}]]]}}',
    '  {"seq":4,"type":"x-a","time":5,"data":{"straße":"Überprüfung"}}\r',
    '{"seq":5,"type":"x-a","time":6,"data":{"nan":NaN,"inf":1e400,"lone":"\\ud800"}}',
]
_CORRUPT = [
    b"\n",
    b"   \n",
    b"[1]\n",
    b'{"seq":0}{"seq":1}\n',
    b'{"seq":0\n',
    b'{"seq":"\xff"}\n',
    b'\xef\xbb\xbf{"seq":0}\n',
    b"[" * 3000 + b"]" * 3000 + b"\n",
]


def _load(path: Path) -> list[Any]:
    from dashr_ext._store import Store

    with Store.open(path, read_only=True) as store:
        lines, _torn = store.load()
    return [line.obj for line in lines]


def test_the_store_parses_with_msgspec_and_gives_what_json_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dashr_ext._jsontext as jsontext

    path = tmp_path / "s.jsonl"
    path.write_bytes("\n".join(_VALID_LINES[:5]).encode() + b"\n")
    fast_calls = _Counter(monkeypatch, jsontext, "_FAST_DECODE")
    fast = _load(path)
    assert fast_calls.calls == 5  # one decode per line, no fallback
    monkeypatch.setattr(jsontext, "_FAST_DECODE", None)
    assert _load(path) == fast == [json.loads(line) for line in _VALID_LINES[:5]]
    # what msgspec refuses but json accepts falls back to json, line for line the same
    path.write_bytes("\n".join(_VALID_LINES).encode() + b"\n")
    reference = _load(path)
    monkeypatch.undo()
    again = _load(path)
    assert repr(again) == repr(reference)  # NaN != NaN: compare the text


@pytest.mark.parametrize("bad", _CORRUPT, ids=range(len(_CORRUPT)))
def test_a_corrupt_line_gives_the_same_error_with_either_parser(
    bad: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dashr_ext._jsontext as jsontext
    from dashr_ext.errors import CorruptLogError

    path = tmp_path / "s.jsonl"
    path.write_bytes(_VALID_LINES[0].encode() + b"\n" + bad + _VALID_LINES[1].encode() + b"\n")
    with pytest.raises(CorruptLogError) as fast:
        _load(path)
    monkeypatch.setattr(jsontext, "_FAST_DECODE", None)
    with pytest.raises(CorruptLogError) as reference:
        _load(path)
    assert str(fast.value) == str(reference.value)
    assert ":2: " in str(fast.value)


def test_loaded_lines_share_their_keys(compacted: tuple[Path, dict[str, Any]]) -> None:
    """Each key's string is held once for the whole log, not once per line."""
    path, _live = compacted
    objs = _load(path)
    keys = {id(k) for obj in objs for k in obj}
    assert len(keys) == len({k for obj in objs for k in obj})
    messages = [o["data"]["message"] for o in objs if "message" in o["data"]]
    assert len({id(k) for m in messages for k in m}) == len({k for m in messages for k in m})


# --------------------------------------------------------------------------- the search cache


def test_an_already_normalised_text_is_kept_not_copied() -> None:
    from dashr_ext._recall.search import normalize

    text = "".join(["already normalised text ", "with café"])  # built at run time
    assert normalize(text) is text
    changed = "Not Normalised"
    assert normalize(changed) == "not normalised"


def test_wide_texts_do_not_widen_the_narrow_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import dashr_ext._recall.search as search_mod

    monkeypatch.setattr(search_mod, "CHUNK_CHARS", 200)
    rng = random.Random(7)
    words = ["retry", "café", "budget", "naïve", "—", "straße", "Ω", "x"]
    texts = [
        search_mod.normalize(" ".join(rng.choices(words, k=rng.randint(1, 12)))) for _ in range(400)
    ]
    index = search_mod.SearchIndex()
    for text in texts:
        index.add(text)
    narrow, wide = index._parts
    assert narrow.sealed and wide.sealed and narrow.tail and wide.tail
    narrow._joined_tail()[0].encode("latin-1")  # one byte per character
    for query in ("retry", "café budget", "—", "ω x", "straße", "x"):
        expected = [i for i, text in enumerate(texts) if query in text]
        assert index.find(query) == expected, query
        some = rng.sample(range(len(texts)), 150)
        assert index.find_in(query, some) == [i for i in some if query in texts[i]], query
    assert [index.text_of(i) for i in range(len(texts))] == texts


def test_the_search_index_keeps_full_chunks_compressed(monkeypatch: pytest.MonkeyPatch) -> None:
    import dashr_ext._recall.search as search_mod

    monkeypatch.setattr(search_mod, "CHUNK_CHARS", 20_000)
    rng = random.Random(11)
    words = ["retry", "café", "budget", "pytest", "the", "def", "—", "ValueError", "42"]
    texts = [
        search_mod.normalize(" ".join(rng.choices(words, k=rng.randint(5, 400))))
        for _ in range(2000)
    ]
    tracemalloc.start()
    try:
        index = search_mod.SearchIndex()
        for text in texts:
            index.add(text)
        traced, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sealed = index.sealed
    held = sum(len(c.data) for c in sealed)
    logged = sum(len(search_mod._decompress(c.data)) for c in sealed)
    assert len(sealed) > 20 and held * 3 < logged  # not a second copy of the text
    assert traced < logged / 2  # nor its worst-case compressed size
    tails = sum(len(part.tail) for part in index._parts)
    assert sum(len(c) for c in sealed) + tails == len(texts)

    decompressed: list[int] = []
    real = search_mod._decompress

    def counted(data: bytes) -> bytes:
        decompressed.append(len(data))
        return real(data)

    monkeypatch.setattr(search_mod, "_decompress", counted)
    scope = list(range(0, len(texts), 3))
    for query in ("retry café", "valueerror 42", "— the", "nowhere at all"):
        decompressed.clear()
        assert index.find_in(query, scope) == [i for i in scope if query in texts[i]], query
        assert len(decompressed) <= len(sealed)  # each sealed chunk at most once
        decompressed.clear()
        assert index.find(query) == [i for i, t in enumerate(texts) if query in t], query
        assert len(decompressed) == len(sealed)


def test_events_without_extra_keys_share_one_read_only_extra() -> None:
    first = _event(1, "user/message", {"role": "user", "source": {"kind": "user"}, "content": []})
    second = _event(2, "user/message", {"role": "user", "source": {"kind": "user"}, "content": []})
    assert first.extra is second.extra and first.message.extra is second.message.extra
    assert dict(first.extra) == {} and dict(first.message.extra) == {}
    with pytest.raises(TypeError):
        first.extra["x"] = 1  # type: ignore[index]
    odd = Event.from_json({**first.to_json(), "x-note": 1})
    assert odd.extra == {"x-note": 1} and odd.to_json()["x-note"] == 1


def test_replayed_events_share_their_type_strings(
    compacted: tuple[Path, dict[str, Any]],
) -> None:
    path, _live = compacted
    s = Session.open(path, read_only=True)
    assert len({id(e.type) for e in s.events}) == len({e.type for e in s.events})
