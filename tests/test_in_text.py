"""The cold search confirms a match in the line's bytes when the phrase stands in a text block
(:class:`dashr_ext._recall.scanbytes.InText`): never where the body does not hold it."""

from __future__ import annotations

import json
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dashr_ext import Dashr
from dashr_ext._recall import cold, scanbytes, unifold
from dashr_ext._recall.prefilter import (
    char_needle,
    plan,
    run_needle,
    shown_by,
    unplanned_needles,
)
from dashr_ext._recall.render import event_body
from dashr_ext._recall.scanbytes import LOWER, InText, spellings
from dashr_ext._recall.search import holds, normalize

TRICKY = 'aAsSeEtüÜßẞﬁ\u0301\u0308\u0327İ\u212aｓ\u1100\u1161\u11a8가 \n\t\xa0"\\/é'
"""Letters, their capitals and folding look-alikes, combining marks, jamo, whitespace and the
characters JSON escapes."""


SPECIAL = "".join(c for c in TRICKY if not c.isascii())
"""Every character beyond ASCII of :data:`TRICKY`, offered as spellings' parts."""


def line_of(blocks: list[dict[str, Any]], *, ascii_only: bool = False, seq: int = 7) -> bytes:
    """A message line as the store writes it (key order, separators)."""
    message = {"id": "m1", "role": "user", "source": {"kind": "user"}, "content": blocks}
    event = {
        "seq": seq,
        "type": "user/message",
        "time": 1764460000000,
        "surfaceOp": "append",
        "data": {"message": message},
    }
    return json.dumps(event, ensure_ascii=ascii_only, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def decided(line: bytes, phrase: str, chars: str = "") -> bool:
    """What :class:`InText` says of ``line`` standing in a piece, as the cold scan has it
    (``chars``: the plan's special characters present in the piece)."""
    buf = bytearray(b"\n" + line + b"\n")
    low = bytearray(buf.translate(LOWER))
    return InText(buf, low, phrase, chars).holds(1)


def body_holds(line: bytes, phrase: str) -> bool:
    return holds(event_body(cold._decode(line), decoded=True), phrase)


texts = st.text(alphabet=TRICKY, max_size=24)
blocks = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, texts),
        st.builds(lambda t: {"type": "reasoning", "text": t}, texts),
        st.builds(
            lambda t: {"type": "tool-call", "id": "c1", "name": "run", "arguments": t},
            texts.map(lambda t: json.dumps({"cmd": t})),
        ),
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, bool]:
    """Blocks, a phrase (half the time cut from their text, so that it is often there) and
    whether the line escapes every character beyond ASCII."""
    drawn = draw(blocks)
    text = "".join(b.get("text", b.get("arguments", "")) for b in drawn)
    if text and draw(st.booleans()):
        start = draw(st.integers(0, len(text) - 1))
        phrase = text[start : draw(st.integers(start + 1, len(text)))]
    else:
        phrase = draw(texts)
    return drawn, phrase, draw(st.booleans())


@settings(max_examples=1500, deadline=None)
@given(case=cases())
@example(case=([{"type": "text", "text": "Straße"}], "straße", False))
@example(case=([{"type": "text", "text": "cafe\u0301 s"}], "cafe", False))
@example(case=([{"type": "text", "text": "a\\nb"}], "nb", False))
@example(case=([{"type": "text", "text": "x\nsy"}], "nsy", False))
@example(case=([{"type": "text", "text": "Über"}], "über", False))
@example(case=([{"type": "text", "text": "\xa0"}], "a", True))
@example(case=([{"type": "tool-call", "id": "c", "name": "s", "arguments": "{}"}], "s", False))
def test_a_match_decided_in_the_bytes_is_one_in_the_body(
    case: tuple[list[dict[str, Any]], str, bool],
) -> None:
    blocks, phrase, ascii_only = case
    phrase = normalize(phrase)
    if not phrase or not InText.usable(phrase):
        return
    line = line_of(blocks, ascii_only=ascii_only)
    if decided(line, phrase, SPECIAL):
        assert body_holds(line, phrase), (line, phrase)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("the Scheduler ran", "scheduler"),
        ("two  words\there", "words"),
        ("Überprüfung läuft", "überprüfung"),
        ('a "quoted" word', "word"),
        ("the end", "the end"),
        ("first\\second", "second"),
    ],
)
def test_a_phrase_standing_in_a_text_block_is_decided_there(text: str, phrase: str) -> None:
    for blocks in (
        [{"type": "text", "text": text}],
        [{"type": "text", "text": "before"}, {"type": "reasoning", "text": text}],
    ):
        line = line_of(blocks)
        assert decided(line, phrase) and body_holds(line, phrase)


@pytest.mark.parametrize(
    ("blocks", "phrase"),
    [
        ([{"type": "text", "text": "cafe\u0301"}], "cafe"),  # a mark composes with its e
        ([{"type": "text", "text": "x\nsy"}], "nsy"),  # the n of an escape
        ([{"type": "text", "text": "user"}], "message"),  # only in the line's keys
        ([{"type": "text", "text": "Straße"}], "strasse"),  # folds to it: decoded
        ([{"type": "text", "text": "Äber"}], "über"),  # a first letter folding to another
        ([{"type": "tool-call", "id": "c", "name": "sched", "arguments": "{}"}], "sched"),
    ],
)
def test_what_the_bytes_cannot_decide_is_left_to_the_decode(
    blocks: list[dict[str, Any]], phrase: str
) -> None:
    assert not decided(line_of(blocks), phrase)
    assert not decided(line_of(blocks, ascii_only=True), phrase) or phrase == "sched"


def test_a_common_word_is_confirmed_without_decoding_its_lines(tmp_path: Path) -> None:
    """Counted: matches in plain text are confirmed in the bytes; only the shown hits (and the
    log's structural lines) are decoded, and the result is the replay's."""
    log = tmp_path / "s.jsonl"
    with Dashr.create(log, durability="flush") as d:
        for i in range(300):
            d.record_openai({"role": "user", "content": f"Task {i}: the Scheduler is late"})
            d.record_openai({"role": "assistant", "content": f"Looked at scheduler {i}."})
    data = log.read_bytes()
    with Dashr.open(log, read_only=True) as d:
        saved, cold.ENABLED = cold.ENABLED, False
        try:
            warm = {q: str(d.history_search(q, limit=5)) for q in ("scheduler", "the SCHEDULER is")}
        finally:
            cold.ENABLED = saved
    for query, count in (("scheduler", 600), ("the SCHEDULER is", 300)):
        cold.decodes = 0
        got = str(cold.search_bytes(data, query, limit=5))
        assert got == warm[query] and f"matched {count}," in got
        assert cold.decodes == 5  # the five shown; every match confirmed in its bytes


@pytest.mark.parametrize(
    ("text", "phrase", "chars"),
    [
        ("die Straße", "strasse", "ß"),
        ("STRAẞE", "strasse", "ẞß"),
        ("ﬁle and ﬁle", "file", "ﬁ"),
        ("a ſtring", "string", "ſß"),
    ],
)
def test_a_spelling_with_a_character_folding_to_a_part_is_decided_there(
    text: str, phrase: str, chars: str
) -> None:
    line = line_of([{"type": "text", "text": text}])
    assert not decided(line, phrase)  # without the piece's characters: left to the decode
    assert decided(line, phrase, chars) and body_holds(line, phrase)


def test_spellings_replace_one_part_and_never_whitespace() -> None:
    assert spellings("strasse", "ß") == ["straße".encode()]
    assert spellings("ss ss", "ß") == [b"\xc3\x9f ss", b"ss \xc3\x9f"]
    assert spellings("a b", "\xa0\u2000") == []  # they fold to a space
    assert spellings("abc", "é") == []  # folds to nothing of it


def test_the_table_of_changing_characters_is_this_python_s() -> None:
    """:data:`unifold.RANGES` holds exactly the characters beyond ASCII whose expansion is
    not themselves (every code point checked)."""
    table = {c for a, b in unifold.RANGES for c in range(a, b + 1)}
    if unicodedata.unidata_version != unifold.UNICODE_VERSION:
        pytest.skip("another Unicode version: the table is recomputed")
    changing = {
        c
        for c in range(0x80, 0x110000)
        if not 0xD800 <= c < 0xE000 and unifold.expansion(chr(c)) != chr(c)
    }
    assert table == changing


CYRILLIC = (
    "привет ПРИВЕТ Прив\u0438\u0306 й и日本⽇㊐ Ｐ ßЁё\u0415\u0308éÉE\u0301\u0341가\u1100\u1161"
)
"""Letters and their capitals, a decomposed й, ё and é, CJK with its compatibility forms,
a Hangul syllable and its jamo."""


@settings(max_examples=800, deadline=None)
@given(
    text=st.text(alphabet=CYRILLIC, max_size=20),
    phrase=st.text(alphabet=CYRILLIC, min_size=1, max_size=6),
    ascii_only=st.booleans(),
)
@example(text="Прив\u0438\u0306", phrase="привй", ascii_only=False)
@example(text="ПРИВЕТ", phrase="привет", ascii_only=False)
@example(text="⽇本", phrase="日本", ascii_only=True)
@example(text="E\u0301", phrase="é", ascii_only=False)
@example(text="\u1100\u1161", phrase="가", ascii_only=False)
def test_a_line_holding_a_phrase_without_a_plan_holds_one_of_its_characters(
    text: str, phrase: str, ascii_only: bool
) -> None:
    """What the cold scan looks at for a phrase without ASCII needles: a line whose body
    holds the phrase holds one of :func:`char_needle`'s characters, or an escape."""
    phrase = normalize(phrase)
    chars = char_needle(phrase) if phrase and plan(phrase) is None else None
    if chars is None:
        return
    line = line_of([{"type": "text", "text": text}], ascii_only=ascii_only)
    if body_holds(line, phrase):
        assert b"\\u" in line or any(c.encode() in line for c in chars), (text, phrase)


CALL = {"id": "c", "name": "r"}


def call(arguments: str) -> list[dict[str, Any]]:
    """One tool-call block with these arguments."""
    return [{"type": "tool-call", **CALL, "arguments": arguments}]


PUNCTUATION = "=!>-+.()[]{}:,\"'#/_; ＝‼≠\u0338e1…"
"""ASCII punctuation (some of it in every line, some in labels and numbers), characters
folding to it, a decomposed ``≠``, a letter and a digit."""
IMAGE_BLOCK = {
    "type": "image",
    "attachmentId": "a.1",
    "mediaType": "image/png",
    "width": 8,
    "height": 6,
    "bytes": 10,
}
NUMBERS = st.sampled_from(
    [
        *("1e-5", "0.00001", "1E+16", "1e16", "1e2", "1e400", "-1e400", "2", "[1.5]", "{}"),
        *('{"c": {}}', "[{}, {}]", "-1", '{"d": -2}', '[{"e": {}}, -3]'),
    ]
)
"""Arguments' numbers that re-serialise with characters they did not hold (``1e-05``,
``1e+16``, ``Infinity``, ``1.5``)."""


@settings(max_examples=800, deadline=None)
@given(
    blocks=st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, st.text(PUNCTUATION, max_size=12)),
            st.builds(
                lambda t, n: {
                    "type": "tool-call",
                    "id": "c1",
                    "name": "run",
                    "arguments": f'{{"a":{n},"b":{json.dumps(t)}}}',
                },
                st.text(PUNCTUATION, max_size=8),
                NUMBERS,
            ),
            st.just(IMAGE_BLOCK),
        ),
        max_size=3,
    ),
    phrase=st.text(PUNCTUATION, min_size=1, max_size=4),
    ascii_only=st.booleans(),
)
@example(blocks=[{"type": "text", "text": "a \u2260 b"}], phrase="=", ascii_only=False)
@example(blocks=[{"type": "text", "text": "a =\u0338 b"}], phrase="≠", ascii_only=False)
@example(blocks=[{"type": "text", "text": "wow‼"}], phrase="!!", ascii_only=True)
@example(blocks=call('{"a":0.00001}'), phrase="-", ascii_only=False)
@example(blocks=call('{"a":1e2}'), phrase=".", ascii_only=False)
@example(blocks=call('{"a":10000000000000000.0}'), phrase="+", ascii_only=False)
@example(blocks=call('{"a": {}}'), phrase=":{", ascii_only=False)
@example(blocks=call('{"x.": {"y": "a\\nb"}}'), phrase="..", ascii_only=False)  # [x..y] a\nb
@example(blocks=[{"type": "text", "text": "wait…"}], phrase="...", ascii_only=False)
@example(blocks=call('{"d": -2}'), phrase=":-", ascii_only=False)
@example(blocks=call("[1, -3]"), phrase=",-", ascii_only=False)
@example(blocks=call("[{}, {}]"), phrase="},{", ascii_only=False)
@example(blocks=call("[{ }]"), phrase="{}", ascii_only=False)
@example(blocks=call('{"e": {"f": 1} }'), phrase="}}", ascii_only=False)
@example(blocks=[{"type": "text", "text": "a::b"}], phrase="::", ascii_only=True)
def test_a_line_holding_a_punctuation_phrase_holds_one_of_its_characters(
    blocks: list[dict[str, Any]], phrase: str, ascii_only: bool
) -> None:
    """The same for a phrase of punctuation, looked for by a character or by a run of them:
    labels (``(empty)``, ``[tool call]``) and re-serialised arguments (``1e-05``,
    ``{"a":{}}``) show characters the line need not hold, or not together."""
    phrase = normalize(phrase)
    if not phrase or plan(phrase) is not None:
        return
    line = line_of(blocks, ascii_only=ascii_only)
    if not body_holds(line, phrase):
        return
    chars = char_needle(phrase)
    if chars is not None:
        assert holds_one(line, [chars, *shown_by(chars)]), (blocks, phrase)
    run = run_needle(phrase)
    if run is not None:
        assert holds_one(line, run.needles), (blocks, phrase)
    assert holds_one(line, unplanned_needles(phrase) or [b""]), (blocks, phrase)


def holds_one(line: bytes, needles: list[bytes | frozenset[str]]) -> bool:
    """Whether ``line`` holds an escape or one of ``needles`` (bytes, or any character)."""
    return b"\\u" in line or any(
        n in line if isinstance(n, bytes) else any(c.encode() in line for c in n) for n in needles
    )


def test_a_run_with_a_slash_is_looked_for_escaped_too() -> None:
    """A writer may escape ``/`` (``\\/``): the line then holds no ``//``, and is looked at."""
    line = line_of([{"type": "text", "text": "see https://x"}]).replace(b"/", b"\\/")
    assert body_holds(line, "//") and b"//" not in line
    run = run_needle("//")
    assert run is not None and run.run == b"//" and holds_one(line, run.needles)


def test_punctuation_needles() -> None:
    """Which character a punctuation phrase is looked for by: one a label or a number may
    show (then with the lines that may show it so) only when there is no other; ``[`` and
    the characters every line holds never."""
    assert char_needle("==") == unifold.sources("=") and "≠" in unifold.sources("=")
    assert char_needle("->") == unifold.sources(">")
    assert char_needle(':"!') == unifold.sources("!")
    assert char_needle("-") == unifold.sources("-")  # a line showing ``1e-05`` holds one
    assert char_needle("(=)") == unifold.sources("=")  # labels cannot show it
    assert char_needle("()") in (unifold.sources("("), unifold.sources(")"))
    assert shown_by(char_needle("()") or frozenset()) == (b'""', b"[]", b"[ ]")
    assert char_needle("...") == unifold.sources(".") and "…" in unifold.sources(".")
    assert shown_by(unifold.sources(".")) == shown_by(unifold.sources("+")) == (b'"tool-call"',)
    assert shown_by(unifold.sources("=")) == ()
    assert unplanned_needles("::") == [b"::", unifold.sources(":") - {":"}]  # not compact JSON
    for run in ("},{", "}},", ":-", "{}"):
        assert (run_needle(run) or Any).shown_by == (b'"tool-call"',), run
    assert unplanned_needles("=>") == [
        b"=>",
        (unifold.sources("=") | unifold.sources(">")) - {"=", ">"},
    ]
    assert unplanned_needles("->")[0] == b"->"  # type: ignore[index]
    assert unplanned_needles("{} ≠") == [unifold.sources("=")]  # not a run tool calls show
    assert unplanned_needles("...") == [b"...", unifold.sources(".") - {"."}, b"\\\\"]
    assert run_needle(". .") is None and unplanned_needles("[]") is None
    for phrase in ("[]", "[ ]", "x", '":"', "::", "{}"):  # none, or in every line
        assert char_needle(phrase) is None, phrase


def test_a_phrase_without_ascii_is_searched_in_the_lines_holding_its_characters(
    tmp_path: Path,
) -> None:
    """Counted: a Cyrillic, CJK, accented or punctuation phrase decodes only lines holding
    one of its characters' sources (or an escape); the result is the replay's, capitals,
    decomposed letters and compatibility forms included."""
    log = tmp_path / "u.jsonl"
    texts = [
        "Привет, мир",
        "ПРИВЕТ всем",
        "при\u0432ет",
        "Прив\u0438\u0306",
        "приві",
        "日本語のテキスト",
        "⽇本 and ㊐",
        "nothing here at all",
        "plain ascii line",
        "Café Éclair",
        "CAFE\u0301 au lait",
        "가나다",
        "if x == y: return",
        "a -> b",
        "wow‼ a ≠ b",
        "wait… f() ...",
        "a::b => c",
    ]
    with Dashr.create(log, durability="flush") as d:
        for i in range(40):
            for text in texts:
                d.record_openai({"role": "user", "content": f"{text} #{i}"})
    data = log.read_bytes()
    messages = data.count(b'"surfaceOp"')
    queries = [
        "привет",
        "ПРИВЕТ",
        "привй",
        "日本",
        "本",
        "мир",
        "всем привет",
        "é",
        "É",
        "가",
        "==",
        "->",
        "!!",
        "≠",
        "...",
        "()",
        "::",
        "=>",
    ]
    with Dashr.open(log, read_only=True) as d:
        saved, cold.ENABLED = cold.ENABLED, False
        try:
            warm = {q: str(d.history_search(q, limit=3)) for q in queries}
        finally:
            cold.ENABLED = saved
    for query in queries:
        cold.decodes = 0
        got = cold.search_bytes(data, query, limit=3)
        assert got is not None and str(got) == warm[query], query
        needles = unplanned_needles(normalize(query))
        assert needles is not None and plan(normalize(query)) is None
        holding = sum(1 for x in data.splitlines() if holds_one(x, needles))
        assert cold.decodes <= holding < messages, query  # not every message line
    for query in ("привй", "日本", "é", "가", "==", "->", "!!", "≠", "...", "()", "::", "=>"):
        assert "matched 0" not in warm[query], query


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab\nßé–—𝐬ｓⓢ\u2081ſK\u212aİ日", max_size=60),
    stale=st.text(alphabet="ｓ𝐬ⓢ", max_size=3),
    listed=st.sampled_from([0, 1, 2, 256]),
    counts=st.sampled_from([0, 1, 3, 96]),
)
def test_the_characters_present_in_a_piece_are_found_exactly(
    text: str, stale: str, listed: int, counts: int
) -> None:
    """Characters looked for, shorter prefixes counted, each place of a rare one looked at,
    a frequent one's longer prefixes counted, or (past the budget) the piece's bytes beyond
    ASCII decoded: the same set, and nothing from the stale bytes past the cut."""
    p = plan("scheduler")
    assert p is not None
    chars = p.special_chars | {"日", "–", "a"}
    data = b"\n" + text.encode() + b"\n"
    low = bytearray(data.translate(LOWER) + stale.encode())
    saved = scanbytes.LISTED, scanbytes.COUNTS
    scanbytes.LISTED, scanbytes.COUNTS = listed, counts
    try:
        assert scanbytes.present_chars(low, len(data), chars) == chars & set(text)
    finally:
        scanbytes.LISTED, scanbytes.COUNTS = saved


def test_a_frequent_prefix_is_not_listed_place_by_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: in a piece full of dashes (``\\xe2\\x80``), the Kelvin sign
    (``\\xe2\\x84\\xaa``) sharing their first byte is not looked for dash by dash."""
    low = bytearray(b"\n" + ("a — b – c\n" * 2000).encode() + b"\n")
    finds: list[int] = []
    real = scanbytes.sz.find

    def counted(*args: object) -> int:
        finds.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(scanbytes.sz, "find", counted)
    chars = frozenset({"\u212a", "ſ", "–"})
    assert scanbytes.present_chars(low, len(low) - 1, chars) == {"–"}
    assert len(finds) < 10


WORDS = [
    "Straße",
    "STRASSE",
    "ﬁle",
    "Привет",
    "ПРИВЕТ",
    "при\u0432ет",
    "Прив\u0438\u0306",
    "日本",
    "⽇本",
    "café",
    "cafe\u0301",
    "Überprüfung",
    "empty",
    "prior",
    'say "hi"',
    "a\\b",
    "tab\there",
    "x",
    "a::b",
    "x == y",
    "wait…",
    "f()",
    "->",
    "é",
    "",
]


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join), min_size=1, max_size=6
    ),
    picks=st.lists(
        st.sampled_from(
            [*WORDS[:-1], "strasse", "привет", "и\u0306", "file", "::", "==", "...", "()", "},{"]
        ),
        min_size=1,
        max_size=4,
    ),
)
@example(texts=["Straße Привет", "empty", "", "日本 ﬁle"], picks=["strasse", "привет", "file"])
@example(texts=["a::b", "x == y", "f() wait…"], picks=["},{", "::", "==", "...", "()", "é"])
def test_the_cold_search_gives_the_replay_s_answer_on_drawn_logs(
    texts: list[str], picks: list[str]
) -> None:
    """End to end, on small logs drawn from words that take every path of the scan (in the
    bytes, spelt with a folding character, without ASCII, label words, escapes, accents and
    punctuation, tool calls whose arguments re-serialise): the cold result is the index's,
    hit for hit."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "d.jsonl"
        with Dashr.create(log, durability="flush") as d:
            for i, text in enumerate(texts):
                d.record_openai({"role": "user", "content": text})
                if i % 3 == 2:  # a tool call whose arguments re-serialise otherwise
                    arguments = '{"a": [{}, {}], "n": 1e-5, "cmd": ' + json.dumps(text) + "}"
                    fn = {"name": "run", "arguments": arguments}
                    d.record_openai(
                        [
                            {"role": "assistant", "tool_calls": [{"id": f"t{i}", "function": fn}]},
                            {"role": "tool", "tool_call_id": f"t{i}", "content": text},
                        ]
                    )
                d.record_openai({"role": "assistant", "content": f"{text} {i}" if i % 2 else ""})
        data = log.read_bytes()
        with Dashr.open(log, read_only=True) as d:
            saved, cold.ENABLED = cold.ENABLED, False
            try:
                for query in picks:
                    if not normalize(query):
                        continue
                    warm = d.history_search(query)
                    assert str(cold.search_bytes(data, query)) == str(warm), query
            finally:
                cold.ENABLED = saved
