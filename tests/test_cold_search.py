"""The cold search (a byte scan of the file) gives exactly what a replay's search gives.

Every comparison is the text and the HTML of ``history_search`` on a replayed read-only
``Dashr`` against :func:`dashr_ext._recall.cold.search_bytes` on the file's bytes: the same
hits, owners, snippets, order, counts and notes. Costs are counted (lines decoded), never
timed.
"""

from __future__ import annotations

import gc
import io
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_params, load_corpus

from dashr_ext import CompactionConfig, Dashr, RecallConfig
from dashr_ext._checkpoints import is_checkpoint
from dashr_ext._cli import main
from dashr_ext._recall import cold
from dashr_ext._recall.prefilter import LOWER_TO_ASCII, line_may_match, plan
from dashr_ext._recall.render import event_body
from dashr_ext._recall.search import normalize

Query = tuple[str, str | None, int | None]
"""``(query, checkpoint, limit)``."""


def warm_search(d: Dashr, query: str, checkpoint: str | None, limit: int | None) -> Any:
    """``history_search`` through the search index (the cold first search switched off)."""
    saved, cold.ENABLED = cold.ENABLED, False
    try:
        return d.history_search(query, checkpoint=checkpoint, limit=limit)
    finally:
        cold.ENABLED = saved


def assert_same(path: Path, queries: Sequence[Query], replayed: Dashr | None = None) -> None:
    """Cold and warm search agree on every query (the cold path never declines here); the
    warm side is ``replayed`` (the file opened read-only) when given, else a fresh open."""
    data = path.read_bytes()
    if replayed is not None:
        _assert_same_as(replayed, data, queries)
        return
    with Dashr.open(path, read_only=True) as d:
        _assert_same_as(d, data, queries)


def _assert_same_as(d: Dashr, data: bytes, queries: Sequence[Query]) -> None:
    for query, checkpoint, limit in queries:
        warm = warm_search(d, query, checkpoint, limit)
        got = cold.search_bytes(data, query, checkpoint, limit)
        assert got is not None, f"the cold path declined {query!r}"
        assert str(got) == str(warm), f"{query!r} checkpoint={checkpoint} limit={limit}"
        assert got.html == warm.html


def as_ascii(path: Path, out: Path) -> Path:
    """The same log written with ``ensure_ascii`` (every non-ASCII character escaped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out.write_text(
        "".join(json.dumps(json.loads(x), separators=(",", ":")) + "\n" for x in lines),
        encoding="utf-8",
    )
    return out


# --------------------------------------------------------------------------- queries


def _piece(text: str, at: int, before: int = 6, after: int = 10) -> str:
    return text[max(0, at - before) : at + after]


def drawn_queries(d: Dashr) -> list[Query]:
    """Queries drawn from a session's own text, one or more per kind of text."""
    s = d.session
    bodies = {e.seq: event_body(e, decoded=True) for e in s.events if e.is_surface}
    out: list[Query] = [("zzqq nothing matches this", None, None)]

    def first(pred: Any) -> Iterator[tuple[int, str]]:
        return ((q, b) for q, b in bodies.items() if pred(q, b))

    for _, body in first(lambda q, b: s.event(q).type == "tool/result"):
        words = [w for w in re.findall(r"[A-Za-z_]{5,}", body)]
        if words:
            out += [(words[len(words) // 2], None, None), (words[0].upper(), None, 3)]
            out.append((words[-1], None, 1))
            break
    kinds = [
        lambda b: re.search(r"[^\x00-\x7f]", b),  # non-ASCII
        lambda b: re.search(r'"', b),  # quotes
        lambda b: re.search(r"\\", b),  # backslashes
        lambda b: re.search(r"\w\n\w", b),  # a line break inside a phrase
        lambda b: re.search(r'\{"\w+":', b),  # JSON-looking text (tool-call arguments)
        lambda b: re.search(r"\n\[[\w.\[\]]+\] ", b),  # a decoded argument line
    ]
    for find in kinds:
        for _, body in bodies.items():
            m = find(body)
            if m is not None:
                out.append((_piece(body, m.start()), None, None))
                break
    cps = d.checkpoints()
    if cps:
        node = s.event(cps[-1].node_seq)
        text = event_body(node, decoded=True)
        out.append((_piece(text, len(text) // 2, 0, 24), None, None))  # in a summary
        shadowed = [q for q in cps[0].shadowed_seqs if not s.is_current(q)]
        if shadowed:
            text = bodies[shadowed[len(shadowed) // 2]]
            phrase = _piece(text, len(text) // 2, 0, 16)
            out += [(phrase, None, None), (phrase, cps[0].id, None), (phrase, cps[-1].id, 2)]
    for key, entry in d.archive.items():
        if "pruned" in entry["meta"]:
            text = bodies[entry["meta"]["pruned"]]  # the original, cut from the pruned node
            phrase = _piece(text, len(text) // 2, 0, 20)
            out += [(phrase, None, None), (phrase, key, None)]
            break
    return [q for q in out if q[0].strip()]


# --------------------------------------------------------------------------- corpus


def corpus_log(path: Path, out: Path, window: int = 8_000) -> Path:
    """A corpus session recorded under a small window: compacted and pruned."""
    data = load_corpus(path)
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=window // 5)
    with Dashr.create(out, config=config, tools=data["tools"], durability="flush") as d:
        for message in data["messages"]:
            if message["role"] == "assistant":
                d.request_messages()
            d.record_openai(message)
        d.request_messages()
        if d.session.open_step is not None:  # a finished session: no step runs on
            d.record_openai({"role": "assistant", "content": "Done."})
        if not d.checkpoints():  # a short session: one manual pass
            d.compact()
    return out


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params())
def test_cold_equals_warm_on_every_corpus_session(path: Path, tmp_path: Path) -> None:
    log = corpus_log(path, tmp_path / "s.jsonl")
    with Dashr.open(log, read_only=True) as d:
        queries = drawn_queries(d)
        assert d.checkpoints(), "the window is small enough to compact"
    assert len(queries) >= 8
    assert_same(log, queries)
    assert_same(as_ascii(log, tmp_path / "ascii.jsonl"), queries)


# --------------------------------------------------------------------------- tricky text

TRICKY = [
    "We patch claß loaders and the ﬁle cache; ＡＢＣ fullwidth; 5 \u212a (Kelvin) hot.",
    "café composed and cafe\u0301 decomposed; İstanbul; STRASSE and straße.",
    'He said "quoted words" and a back\\slash path C:\\temp\\new; tabs\tand\nlines.',
    'JSON-looking {"key": [1, 2]} text and \u001b[31mred\u001b[0m escapes; ½ cup.',
    "",
]


def tricky_log(out: Path) -> Path:
    """A session whose texts exercise every way the raw bytes differ from the search text."""
    config = CompactionConfig(recency_window_tokens=2_000, retain_tokens=300)
    with Dashr.create(out, config=config, durability="flush") as d:
        for i in range(12):
            d.record_openai({"role": "user", "content": f"Task {i}: {TRICKY[i % len(TRICKY)]}"})
            args = {
                "command": f'grep -n "def parse_{i}" src/a\\b.py',
                "edits": [{"old": "x = 1e5", "new": f"y = {1e5 + i}\n"}],
                "n": 1e5,
                "big": 10**20,
                "float": 1e20,
            }
            # Numbers a re-serialisation writes differently: 100000.0, 1.5e-05, Infinity.
            arguments = json.dumps(args)[:-1] + ', "e": 1E5, "small": 0.0000150, "inf": 1e400}'
            d.request_messages()
            d.record_openai(
                {
                    "role": "assistant",
                    "content": TRICKY[(i + 1) % len(TRICKY)],
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": arguments},
                        }
                    ],
                }
            )
            output = "\n".join(f"{TRICKY[(i + k) % 4]} line {k}" for k in range(60))
            d.record_openai({"role": "tool", "tool_call_id": f"c{i}", "content": output})
        png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42"
        png += "mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
        image = {"type": "image_url", "image_url": {"url": png}}
        d.record_openai({"role": "user", "content": [{"type": "text", "text": "see 1x1"}, image]})
        d.request_messages()
        d.record_openai({"role": "assistant", "content": "Done. ＤＯＮＥ ﬁnally."})
    return out


TRICKY_QUERIES = [
    "class loaders",  # claß
    "file cache",  # ﬁle
    "abc fullwidth",
    "5 k (kelvin)",
    "café",
    "cafe",
    "istanbul",
    "strasse",
    "straße and",
    '"quoted words"',
    "back\\slash",
    "c:\\temp\\new",
    "tabs and lines",
    '{"key": [1, 2]}',
    "[command] grep",
    'grep -n "def parse_3"',
    '"command":"grep',
    "100000.0",
    "100003.0",
    "1e+20",
    "100000000000000000000",
    "1.5e-05",
    '"inf":infinity}',
    "infinity",
    "[edits[0].new] y",
    "[tool call] bash",
    "tool call",
    "(empty)",
    "red",
    "½ cup",
    "1⁄2 cup",
    "done finally",
    "[image image/png",
    "attachment",
    "see 1x1 [image",
    "task 7",
    "line 59",
]


def test_cold_equals_warm_on_escapes_folding_and_arguments(tmp_path: Path) -> None:
    log = tricky_log(tmp_path / "t.jsonl")
    with Dashr.open(log, read_only=True) as d:
        cps = d.checkpoints()
        assert cps and any("pruned" in e["meta"] for e in d.archive.values())
        queries: list[Query] = [(q, None, None) for q in TRICKY_QUERIES]
        queries += [(q, cps[0].id, None) for q in TRICKY_QUERIES[:8]]
        queries += drawn_queries(d)
    assert_same(log, queries)
    assert_same(as_ascii(log, tmp_path / "ascii.jsonl"), queries)


LABEL_QUERIES = [
    "empty",
    "(empty)",
    "mpt",
    "prior",
    "prior state",
    "[prior state checkpoint]",
    "x",
    "1x1",
    "infinity",
    "inf",
    "prior empty",
]


def test_words_a_body_shows_as_labels_are_found_where_the_line_does_not_spell_them(
    tmp_path: Path,
) -> None:
    """``(empty)``, ``[prior state checkpoint]``, an image's ``800x600`` and a re-serialised
    ``Infinity``: a phrase made of their words looks at the lines holding the word and at
    those that may show it as a label; the result is the replay's."""
    config = CompactionConfig(
        engine="recallable",
        recency_window_tokens=3000,
        retain_tokens=800,
        chunk_tokens=1024,
        stub_tokens=96,
        state_max_tokens=512,
    )
    log = tmp_path / "labels.jsonl"
    with Dashr.create(log, config=config, durability="flush") as d:
        for i in range(14):
            d.record_openai({"role": "user", "content": f"Check module {i}, it is mpty-free."})
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "run", "arguments": f'{{"n": 1e400, "i": {i}}}'},
            }
            d.request_messages()
            d.record_openai({"role": "assistant", "content": "", "tool_calls": [call]})
            lines = "\n".join(f"line {k} of module {i}: value {i * k}" for k in range(40))
            d.record_openai({"role": "tool", "tool_call_id": f"c{i}", "content": lines})
            d.request_messages()
            d.record_openai({"role": "assistant", "content": "" if i % 3 else f"Done {i}."})
    with Dashr.open(log, read_only=True) as d:
        warm = {q: str(warm_search(d, q, None, None)) for q in ("[prior state checkpoint]",)}
    assert "matched 0" not in warm["[prior state checkpoint]"]  # a state checkpoint shows it
    tricky = tricky_log(tmp_path / "t.jsonl")
    for path in (log, tricky):
        assert_same(path, [(q, None, None) for q in LABEL_QUERIES])
    data = log.read_bytes()
    lines = data.count(b"\n")
    cold.decodes = 0
    assert cold.search_bytes(data, "empty") is not None
    assert cold.decodes < lines // 2  # not every message line


def test_a_line_spelling_ascii_letters_as_escapes_is_decoded(tmp_path: Path) -> None:
    """A writer may escape any character (``\\u0063`` for ``c``): the bytes then do not
    hold the word, and the line is decoded anyway."""
    log = tricky_log(tmp_path / "t.jsonl")
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    seq = next(i for i, x in enumerate(lines) if "Task 3:" in x)
    lines[seq] = lines[seq].replace("Task 3: ", "T\\u0061sk 3: \\u0063l\\u0061ss ")
    log.write_text("".join(lines), encoding="utf-8")
    assert_same(log, [("task 3", None, None), ("class", None, None), ("cla", None, None)])


# --------------------------------------------------------------------------- 100k events


def letters(n: int) -> str:
    """``n`` spelled in letters (``1234`` -> ``bcde``): a word only one output holds."""
    return "".join(chr(ord("a") + int(c)) for c in str(n))


def synthetic_log(out: Path, events: int = 100_000) -> Path:
    """A 100k-event log in the shape a long compacted session has, written directly: turns
    of tool steps, compaction passes whose checkpoints supersede the previous ones, and
    pruned tool outputs replaced in place."""
    t = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    lines: list[str] = []
    surface: list[int] = []

    def put(kind: str, data: dict[str, Any], op: Any = None, sources: Any = None) -> int:
        event: dict[str, Any] = {"seq": len(lines), "type": kind, "time": next(t)}
        if op is not None:
            event["surfaceOp"] = op
        if sources is not None:
            event["sourceEventSeqs"] = sources
        event["data"] = data
        lines.append(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
        return event["seq"]

    def message(role: str, kind: str, content: list[dict[str, Any]], **extra: Any) -> int:
        msg = {"id": f"m{len(lines)}", "role": role, "source": {"kind": kind}, "content": content}
        kind = f"{role}/message" if role != "tool" else "tool/result"
        seq = put(kind, {"message": {**msg, **extra}}, "append")
        surface.append(seq)
        return seq

    put("session/header", {"sessionId": "s", "createdAt": 1, "systemPrompt": None, "tools": None,
                           "format": "dashr/1"})  # fmt: skip
    turn = step = passes = 0
    while len(lines) < events:
        turn += 1
        put("turn/start", {"turn": turn})
        message("user", "user", [{"type": "text", "text": f"Task {turn}: fix résumé straße"}])
        for step in range(1, 9):
            put("step/start", {"turn": turn, "step": step})
            cid = f"call_{turn}_{step}"
            args = json.dumps({"command": f"grep -rn 'attempt {turn}.{step}' src/"})
            call = {"type": "tool-call", "id": cid, "name": "bash", "arguments": args}
            message("assistant", "model", [{"type": "text", "text": f"Step {step}"}, call])
            text = f"trace {turn:06d}/{step} ok {letters(turn * 10 + step)}\n"
            text += "scheduler backoff café line\n" * 12
            result = message("tool", "tool", [{"type": "text", "text": text}], toolCallId=cid,
                             toolName="bash", isError=False)  # fmt: skip
            put("step/end", {"turn": turn, "step": step})
            if step == 4 and turn % 3 == 0:  # prune this output in place
                info = {"seq": result, "chars": len(text), "lines": 13, "tokens": 90}
                info |= {"archive": f"p{result}", "compactionId": f"x{turn}"}
                msg = {"id": f"m{len(lines)}", "role": "tool"}
                msg |= {"source": {"kind": "tool", "pruned": info}, "toolCallId": cid}
                msg |= {"toolName": "bash", "isError": False}
                msg["content"] = [{"type": "text", "text": "trace [pruned]"}]
                op = {"op": "replace", "startSeq": result, "endSeq": result}
                seq = put("tool/result", {"message": msg}, op, [result])
                surface[surface.index(result)] = seq
        put("turn/end", {"turn": turn, "reason": "completed"})
        if turn % 10 == 0:  # a pass condenses all but the last turn
            passes += 1
            keep = 1 + 2 * 8
            shadowed = surface[:-keep]
            start = put("compaction/start", {"compactionId": f"k{passes}", "trigger": "pressure",
                                             "engine": "summary"})  # fmt: skip
            cid_ = f"c{start + 1}"
            put("compaction/summary", {
                "compactionId": f"k{passes}", "checkpoint": cid_, "trigger": "pressure",
                "engine": "summary", "summary": f"## Current Work\nPass {passes} summary of turns "
                f"up to {turn}: scheduler backoff fixed", "shadowedRange": {"start": shadowed[0],
                "end": shadowed[-1]}, "shadowedSeqs": shadowed, "shadowedTokenCount": 1000,
                "summarizer": {"kind": "extractive", "model": None}, "archive": {}})  # fmt: skip
            text = f"Summary {passes}: scheduler backoff fixed up to turn {turn}"
            node = {"id": f"m{len(lines)}", "role": "user"}
            node["content"] = [{"type": "text", "text": text}]
            node["source"] = {"kind": "compact-checkpoint", "checkpoint": cid_}
            op = {"op": "replace", "startSeq": shadowed[0], "endSeq": shadowed[-1]}
            seq = put("user/message", {"message": node}, op, [*shadowed, start + 1])
            surface[: len(shadowed)] = [seq]
            put("compaction/end", {"compactionId": f"k{passes}"})
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_log(tmp_path_factory.mktemp("cold") / "big.jsonl")


@pytest.fixture(scope="module")
def big_replayed(big_log: Path) -> Iterator[Dashr]:
    """The 100k-event log replayed once (read-only) for the tests that only read it and its
    search index; a test of what a first search or an open does opens the file itself."""
    with Dashr.open(big_log, read_only=True) as d:
        yield d


def test_cold_equals_warm_on_a_100k_event_log(big_log: Path, big_replayed: Dashr) -> None:
    d = big_replayed
    assert len(d.session) >= 100_000
    cps = d.checkpoints()
    assert len(cps) > 50 and cps[0].superseded_by is not None
    mid = cps[len(cps) // 2].id
    pruned = next(k for k in d.archive if k.startswith("p"))
    assert_same(
        big_log,
        [
            ("trace 000123/4", None, None),
            ("TRACE 000123/4 OK", None, 2),
            ("attempt 77.3", None, None),
            (f"ok {letters(4321)} scheduler", None, None),
            ("Task 1234: fix", None, None),
            ("résumé straße", None, 1),
            ("RESUME", None, None),
            ("scheduler backoff fixed", None, None),
            ("summary 17:", None, None),
            ("trace [pruned]", None, 3),
            ("café line scheduler", mid, None),
            ("trace", pruned, None),
            ("zzqq", None, None),
        ],
        replayed=d,
    )


def test_a_rare_phrase_decodes_only_the_lines_holding_it(big_log: Path) -> None:
    """Counted: the structural lines (compaction events, replacements) and the message lines
    whose bytes hold the needle are decoded, nothing else."""
    data = big_log.read_bytes()
    objs = [json.loads(x) for x in data.splitlines()]
    structural = sum(
        1
        for o in objs
        if o["type"].startswith(("compaction/start", "compaction/summary", "compaction/end"))
        or isinstance(o.get("surfaceOp"), dict)
    )
    needle = letters(7713).encode()
    holding = sum(1 for x in data.splitlines() if needle in x.lower())
    assert 1 <= holding <= 3  # ``bhhbd`` (17713) holds ``hhbd`` (7713) too
    cold.decodes = 0
    result = cold.search_bytes(data, f"OK {letters(7713).upper()}")
    assert result is not None and "1 matched" in str(result)
    assert cold.decodes == structural + holding
    messages = sum(1 for o in objs if "surfaceOp" in o)
    assert cold.decodes < messages / 20


def test_a_query_without_a_usable_needle_decodes_every_message_line(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...unless the phrase is seen in a text block of the line's bytes (the same result)."""
    assert plan("ß") is None and plan("é") is None and plan("(-)") is None
    assert plan("scheduler") is not None
    data = big_log.read_bytes()
    messages = sum(1 for x in data.splitlines() if b'"surfaceOp"' in x)
    cold.decodes = 0
    found = str(cold.search_bytes(data, "ß", limit=1))
    assert "matched" in found and cold.decodes < messages
    monkeypatch.setattr(cold.InText, "usable", staticmethod(lambda phrase: False))
    cold.decodes = 0
    assert str(cold.search_bytes(data, "ß", limit=1)) == found
    assert cold.decodes >= messages


def test_a_one_word_query_decodes_the_lines_holding_it_without_testing_them_again(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: a line found holding the only needle holds all a line must; a line holding
    no escape and no special character is tested where it stands in the lower-cased piece,
    with the answer the line test gives on a copy of it."""
    data = big_log.read_bytes()
    tested: list[bytes] = []
    real = cold.line_may_match
    monkeypatch.setattr(
        cold, "line_may_match", lambda line, *a, **k: tested.append(line) or real(line, *a, **k)
    )
    holding = sum(1 for x in data.splitlines() if b"backoff" in x.lower() and b'"surfaceOp"' in x)
    result = cold.search_bytes(data, "BACKOFF")
    assert result is not None and f"{holding} matched" in str(result)
    assert tested == []
    in_place: list[bool] = []
    plain = cold._Lowered.may_match
    query_plan = plan(normalize("backoff café 17"))  # planned once, not once per line

    def compared(self: Any, start: int) -> bool:
        got = plain(self, start)
        line = bytes(self.buf[start : self.buf.index(b"\n", start)])
        assert got == real(line, query_plan, escapes=False, special=False)
        in_place.append(got)
        return got

    monkeypatch.setattr(cold._Lowered, "may_match", compared)
    result = cold.search_bytes(data, "backoff café 17")
    assert result is not None and tested == []
    assert in_place.count(True) > 0 and in_place.count(False) > 0


def test_structural_lines_are_found_by_their_headers_not_by_walking_every_line(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: the lines a scan decodes for the surface and the checkpoints are found by
    their headers; no piece has all its line starts listed (a loop over every line)."""
    walks: list[int] = []
    real = cold._line_starts
    monkeypatch.setattr(cold, "_line_starts", lambda buf, cut: walks.append(cut) or real(buf, cut))
    data = big_log.read_bytes()
    found = cold.search_bytes(data, "summary 17:")
    assert found is not None and "1 matched" in str(found) and walks == []
    assert cold.search_bytes(data, "日本", limit=1) is not None and walks == []  # its characters
    assert cold.search_bytes(data, "é", limit=1) is not None and walks == []  # its accent's
    assert cold.search_bytes(data, "[]", limit=1) is not None and walks  # no needle: every line


# --------------------------------------------------------------------------- the CLI


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def tricky(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tricky_log(tmp_path_factory.mktemp("cold") / "t.jsonl")


@pytest.mark.parametrize(
    "argv",
    [
        ["class loaders"],
        ["grep -n", "--limit", "3"],
        ["café", "--checkpoint", "FIRST"],
        ["line 5", "--checkpoint", "PRUNED"],
        ["nothing here zzqq"],
        ["x", "--checkpoint", "c1"],  # unknown: the replay's error, status 1
        ["   "],  # empty: the replay's error
        ["x", "--limit", "0"],  # argparse's error
    ],
)
def test_dashr_search_prints_the_same_cold_or_replayed(
    argv: list[str],
    tricky: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Dashr.open(tricky, read_only=True) as d:
        first = d.checkpoints()[0].id
        pruned = next(k for k in d.archive if k.startswith("p"))
    argv = [{"FIRST": first, "PRUNED": pruned}.get(a, a) for a in argv]
    cold_run = _run_exit(capsys, "search", str(tricky), *argv)
    monkeypatch.setattr(cold, "ENABLED", False)
    warm_run = _run_exit(capsys, "search", str(tricky), *argv)
    assert cold_run == warm_run


def test_dashr_search_of_the_100k_log_prints_the_same_cold_or_replayed(
    big_log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["search", str(big_log), "scheduler backoff", "--limit", "4"]
    cold_run = run(capsys, *argv)
    assert cold_run[0] == 0 and "4." in cold_run[1]
    monkeypatch.setattr(cold, "ENABLED", False)
    assert cold_run == run(capsys, *argv)


def _run_exit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        return run(capsys, *argv)
    except SystemExit as exit:  # argparse
        out, err = capsys.readouterr()
        return int(exit.code or 0), out, err


def test_the_first_search_of_a_read_only_session_scans_the_file(tricky: Path) -> None:
    """A one-off search of a read-only session does not fold every message into the index;
    the next search builds it. Both give what the index gives, with the caller's settings."""
    recall = RecallConfig(read_max_chars=1_500, search_max_hits=4)
    with Dashr.open(tricky, read_only=True, recall=recall) as d:
        expected = [str(warm_search(d, q, None, None)) for q in ("line 5", "café")]
    with Dashr.open(tricky, read_only=True, recall=recall) as d:
        first = d.history_search("line 5")
        assert d.recall._search.count == 0  # no index built
        assert [str(first), str(d.history_search("café"))] == expected
        assert d.recall._search.count > 0  # the second search built it
    with Dashr.open(tricky, recall=recall) as writer:  # a writer keeps its index
        assert str(writer.history_search("line 5")) == expected[0]
        assert writer.recall._search.count > 0


def test_the_first_search_ignores_events_appended_after_the_open(
    tricky: Path, tmp_path: Path
) -> None:
    log = tmp_path / "grows.jsonl"
    log.write_bytes(tricky.read_bytes())
    with Dashr.open(log, read_only=True) as reader:
        with Dashr.open(log) as writer:
            writer.record_openai({"role": "user", "content": "class loaders again"})
            writer.record_openai({"role": "assistant", "content": "class loaders done"})
        first = str(reader.history_search("class loaders"))
        assert first == str(warm_search(reader, "class loaders", None, None))


def open_step_log(out: Path) -> Path:
    with Dashr.create(out, durability="flush") as d:
        d.record_openai({"role": "user", "content": "find the scheduler"})
        call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        d.record_openai({"role": "assistant", "content": "looking", "tool_calls": [call]})
        d.record_openai({"role": "tool", "tool_call_id": "c1", "content": "scheduler found"})
    return out


def test_a_log_ending_inside_a_step_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running step is left out of a search; the cold pass does not track it and
    declines, so ``dashr search`` replays and prints what it printed before."""
    log = open_step_log(tmp_path / "open.jsonl")
    assert cold.search_bytes(log.read_bytes(), "scheduler") is None
    cold_run = run(capsys, "search", str(log), "scheduler")
    monkeypatch.setattr(cold, "ENABLED", False)
    assert cold_run == run(capsys, "search", str(log), "scheduler")
    assert "1 matched" in cold_run[1]  # the user message; the running step's two are left out


def test_lines_in_another_key_order_or_torn_are_replayed(tmp_path: Path) -> None:
    log = tricky_log(tmp_path / "t.jsonl")
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    obj = json.loads(lines[5])
    reordered = {"data": obj.pop("data"), **obj}
    shuffled = [*lines[:5], json.dumps(reordered) + "\n", *lines[6:]]
    (tmp_path / "order.jsonl").write_text("".join(shuffled), encoding="utf-8")
    assert cold.search_bytes((tmp_path / "order.jsonl").read_bytes(), "task") is None
    assert cold.search_bytes(log.read_bytes()[:-5], "task") is None  # a torn last line
    assert cold.search_bytes(log.read_bytes(), "task") is not None
    seqs = json.loads(lines[7])
    seqs["seq"] = 99
    gap = [*lines[:7], json.dumps(seqs, separators=(",", ":")) + "\n", *lines[8:]]
    assert cold.search_bytes("".join(gap).encode(), "task") is None


def test_summaries_come_after_originals_as_in_the_replay(
    big_log: Path, big_replayed: Dashr
) -> None:
    data = big_log.read_bytes()
    result = cold.search_bytes(data, "scheduler backoff fixed", limit=5)
    assert result is not None
    seqs = [int(m) for m in re.findall(r"^\d+\. seq (\d+)", str(result), re.M)]
    assert seqs and all(is_checkpoint(big_replayed.session.event(q)) for q in seqs)


# --------------------------------------------------------------------------- bounded memory

PIECE = 256


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """``(bytes read, size of the buffer read into)`` of every read of a session file, with
    :data:`cold.CHUNK_BYTES` set to a 256-byte piece; a whole-file read counts as one."""
    sizes: list[tuple[int, int]] = []
    monkeypatch.setattr(cold, "CHUNK_BYTES", PIECE)
    real_open = open

    class Counted(io.FileIO):
        def readinto(self, b: Any) -> int:
            got = super().readinto(b) or 0
            sizes.append((got, len(b.obj) if isinstance(b, memoryview) else len(b)))
            return got

        def read(self, size: int = -1) -> bytes:
            out = super().read(size)
            sizes.append((len(out), len(out)))
            return out

    def counted_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode == "rb":
            return Counted(path, "rb")
        return real_open(path, mode, *args, **kwargs)

    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        out = real_read_bytes(self)
        sizes.append((len(out), len(out)))
        return out

    monkeypatch.setattr(cold, "open", counted_open, raising=False)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    return sizes


def long_line_log(out: Path) -> tuple[Path, int]:
    """A compacted session with one tool output longer than several pieces, holding the
    phrase ``needle phrase`` at its start, across piece boundaries and at its end; and the
    length of its longest line."""
    config = CompactionConfig(recency_window_tokens=1_000, retain_tokens=200)
    filler = "abcdefghij " * (PIECE // 11)
    text = "needle phrase " + " ".join(f"{filler} needle phrase {k}" for k in range(7))
    with Dashr.create(out, config=config, durability="flush") as d:
        for i in range(16):
            d.record_openai({"role": "user", "content": f"Task {i}: needle phrase {i}"})
            call = {"id": f"c{i}", "type": "function", "function": {"name": "b", "arguments": "{}"}}
            d.request_messages()
            d.record_openai({"role": "assistant", "content": "looking", "tool_calls": [call]})
            output = text + " the end" if i == 4 else f"output {i} of the tool " * 30
            d.record_openai({"role": "tool", "tool_call_id": f"c{i}", "content": output})
        d.request_messages()
        d.record_openai({"role": "assistant", "content": "Done."})
        if not d.checkpoints():
            d.compact()
    longest = max(len(x) + 1 for x in out.read_bytes().splitlines())
    return out, longest


def test_the_cold_search_reads_a_piece_at_a_time(
    tmp_path: Path, reads: list[tuple[int, int]]
) -> None:
    """Counted: no read is larger than a piece, the buffer never larger than a piece plus the
    longest line, every byte is read once, and the result is the replay's."""
    log, longest = long_line_log(tmp_path / "long.jsonl")
    size = log.stat().st_size
    assert longest > 4 * PIECE and size > 20 * PIECE
    lines = log.read_bytes().splitlines()
    long_seq = next(i for i, x in enumerate(lines) if len(x) > 4 * PIECE and b"tool/re" in x)
    with Dashr.open(log, read_only=True) as d:
        assert d.checkpoints()
        expected = {q: str(warm_search(d, q, None, None)) for q in ("needle phrase", "the end")}
    assert f"seq {long_seq} |" in expected["needle phrase"]  # the long output matched
    reads.clear()
    for query, text in expected.items():
        got = cold.cold_search(log, query)
        assert got is not None and str(got) == text
    assert reads and max(got for got, _ in reads) <= PIECE
    assert max(buffer for _, buffer in reads) <= PIECE + longest + 1
    assert sum(got for got, _ in reads) == 2 * size


def test_the_first_search_of_a_read_only_session_reads_a_piece_at_a_time(
    tmp_path: Path, reads: list[tuple[int, int]]
) -> None:
    log, longest = long_line_log(tmp_path / "long.jsonl")
    with Dashr.open(log, read_only=True) as d:
        expected = str(warm_search(d, "needle phrase", None, None))
    with Dashr.open(log, read_only=True) as d:
        reads.clear()
        assert str(d.history_search("needle phrase")) == expected
        assert d.recall._search.count == 0  # the scan answered
    assert reads and max(got for got, _ in reads) <= PIECE
    assert max(buffer for _, buffer in reads) <= PIECE + longest + 1


def test_a_long_line_across_pieces_is_found_and_matched_as_the_replay_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = long_line_log(tmp_path / "long.jsonl")
    monkeypatch.setattr(cold, "CHUNK_BYTES", PIECE)
    assert_same(log, [("needle phrase", None, None), ("phrase 3", None, None),
                      ("abcdefghij needle", None, 2), ("the end", None, None),
                      ("needle phrase 6 the end", None, None)])  # fmt: skip


def test_matched_events_not_kept_are_read_again_for_their_snippets(
    big_log: Path, big_replayed: Dashr, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no room to keep matched events, each shown hit is decoded again from its place
    in the file; the result is the same, and a file changed meanwhile is replayed."""
    monkeypatch.setattr(cold, "KEPT_BYTES", 0)
    mid = big_replayed.checkpoints()[40].id
    queries: list[Query] = [("scheduler backoff", None, 5), ("café line", mid, 3)]
    assert_same(big_log, queries, replayed=big_replayed)
    data = big_log.read_bytes()
    phrase = "scheduler backoff"
    fetched: list[int] = []

    def search() -> str:
        log = cold.ColdLog.scan(io.BytesIO(data), phrase, plan(phrase))
        log.fetch = lambda at, length: fetched.append(at) or data[at : at + length]
        return str(log.search(phrase, None, 5))

    result = search()
    assert "showing 5" in result and len(fetched) == 5  # the five shown, read again
    monkeypatch.setattr(cold, "KEPT_BYTES", 1 << 30)
    fetched.clear()
    assert search() == result and not fetched
    monkeypatch.setattr(cold, "KEPT_BYTES", 0)
    log = cold.ColdLog.scan(io.BytesIO(data), phrase, plan(phrase))
    log.fetch = lambda at, length: data[at + 1 : at + 1 + length]  # not the line it was
    with pytest.raises(cold._Refused):
        log.search(phrase, None, 5)


def test_only_two_characters_beyond_ascii_lower_case_to_ascii() -> None:
    """The prefilter tests ASCII needles against a line's lower-cased bytes unless the line
    holds a folding character or one of these (whose ``str.lower`` holds ASCII)."""
    found = [
        chr(c) for c in range(0x80, sys.maxunicode + 1) if any(x.isascii() for x in chr(c).lower())
    ]
    assert tuple(found) == LOWER_TO_ASCII


def test_lines_without_special_characters_are_tested_on_their_bytes(tmp_path: Path) -> None:
    """A line is projected as bytes (no str.lower): its ASCII letters lower-cased, the İ and
    K signs and the folding characters replaced by their forms; what the prefilter keeps is
    the same with or without the caller's hints."""
    p = plan(normalize("résumé café scheduler"))
    assert p is not None
    assert p.project("Résumé Café SCHEDULER".encode()) == "résumé café scheduler".encode()
    assert p.project("İstanbul scheduler".encode()) == "i\u0307stanbul scheduler".encode()
    assert p.project("KELVIN \u212a ﬁ sSCHEDULER".encode()) == b"kelvin k fi sscheduler"
    assert p.project("\u212a".encode(), special=False) == "\u212a".encode()  # the caller's hint
    log = tricky_log(tmp_path / "t.jsonl")
    lines = [
        *log.read_bytes().splitlines(),
        *as_ascii(log, tmp_path / "a.jsonl").read_bytes().splitlines(),
    ]
    kept = 0
    for query in TRICKY_QUERIES:
        q = plan(normalize(query))
        if q is None:
            continue
        for line in lines:
            hints = {
                "escapes": b"\\u" in line.lower(),
                "special": bool(q.special_pattern.search(line)),
            }
            expected = line_may_match(line, q)
            assert line_may_match(line, q, **hints) == expected, (query, line[:80])
            kept += expected
    assert 0 < kept < len(lines) * len(TRICKY_QUERIES)


def test_the_first_search_of_a_large_session_runs_no_older_collection(big_log: Path) -> None:
    """Counted: the scan's short-lived header tuples would set off collections that walk the
    replayed session's objects (about 250 young and 20 older ones here, freeing nothing);
    the scan pauses them."""
    runs = [0, 0, 0]  # collections started, by generation

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs[info["generation"]] += 1

    with Dashr.open(big_log, read_only=True) as d:
        gc.collect()
        gc.callbacks.append(count)
        try:
            result = d.history_search(f"OK {letters(7713).upper()}")
        finally:
            gc.callbacks.remove(count)
        assert d.recall._search.count == 0 and "1 matched" in str(result)
    assert runs[1] == runs[2] == 0 and runs[0] < 20


def test_the_plans_special_characters_are_what_its_pattern_finds() -> None:
    for query in ("scheduler", "xyzzy plugh", "trace id 42", "Überprüfung", "kelvin fi"):
        p = plan(normalize(query))
        assert p is not None and p.special_chars
        every = b"".join(c.encode() for c in sorted(p.special_chars))
        assert {m.decode() for m in p.special_pattern.findall(every)} == p.special_chars
        assert LOWER_TO_ASCII[0] in p.special_chars and LOWER_TO_ASCII[1] in p.special_chars
