"""The search form folds a text character by character when that is exact.

``_fold`` must give exactly what normalising the whole text gives (``_fold_whole``: NFKC of
the full case folding); these tests hold it to that over every code point, over the
characters around which composition and case folding are known to misbehave, and over
random texts mixing them.
"""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext._recall import search
from dashr_ext._recall.search import (
    _SPACE_BYTES,
    _SPACES_BEYOND_ASCII,
    _alone,
    _fold,
    _fold_whole,
    _starts_alone,
    holds,
    normalize,
)

TRICKY = (
    "aZ09 sSſüÜÉ\u0308ßẞİıKﬁﬀΣσςͅ\u0345Ω\u2126Å\u212b"  # Latin and Greek folds, marks, signs
    "한\u1100\u1161\u11a8가"  # a syllable, L V T jamo, LV syllable
    "\u0b47\u0b3e\u09c7\u09be"  # Indic pairs that compose two starters
    "\u13a0\uab70"  # Cherokee: case folding maps small letters to capitals
    "Ａｚ𝐀𝔷①¼"  # compatibility forms
    "\u00a0\u2028\u3000\u2009\x85\x1c\x1f\r\t\n  "  # whitespace str.split knows
    "é\u0301\u0327\u05b0"  # combining marks, reordered among themselves
    "\u0f73\u0f71\u0f72"  # a starter whose decomposition starts with a mark
    "😀\U0001f3fd\u200d"
    "\ud800\udc00"  # lone surrogates
)


def _points() -> list[int]:
    """Every code point of the BMP and every 7th one beyond it."""
    return [*range(0x10000), *range(0x10000, sys.maxunicode + 1, 7)]


def test_every_character_that_composes_with_the_one_before_is_a_mark_or_a_jamo() -> None:
    # the claim _starts_alone rests on, checked against this Python's Unicode data
    seconds = set()
    for point in range(sys.maxunicode + 1):
        decomposition = unicodedata.decomposition(chr(point))
        if decomposition and not decomposition.startswith("<"):
            parts = decomposition.split()
            if len(parts) == 2:
                seconds.add(chr(int(parts[1], 16)))
    assert seconds, "no canonical pairs: the check would hold vacuously"
    assert [c for c in seconds if _starts_alone(c)] == []
    assert not any(c.isascii() for c in seconds)  # a cut before ASCII is always a cut
    # Hangul composes algorithmically (no decomposition entry): vowels and trailing jamo
    assert not _starts_alone("\u1161") and not _starts_alone("\u11a8")


def test_each_character_alone_and_in_company_folds_as_the_whole_text() -> None:
    contexts = ("{}", "a{}b", "{}\u0301", "\u00fc{}", "{}{}", "Z{}ß")
    wrong = []
    for point in _points():
        char = chr(point)
        for context in contexts:
            text = context.format(char, char)
            if _fold(text) != _fold_whole(text):
                wrong.append((hex(point), context))
    assert wrong == []


def test_characters_that_depend_on_their_neighbours_are_folded_with_the_whole_text() -> None:
    for char in ("\u0301", "\u0345", "\u1161", "\u11a8", "\u0b3e", "\u0f73"):
        assert _alone(char) is None, hex(ord(char))
    alone = (("Ü", "ü"), ("ß", "ss"), ("ﬁ", "fi"), ("K", "k"), ("한", "한"), ("😀", "😀"))
    for char, form in (*alone, ("\uab70", "\u13a0")):  # Cherokee folds to capitals
        assert _alone(char) == form


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(TRICKY), max_size=40))
def test_fold_and_normalize_equal_the_whole_text_forms(text: str) -> None:
    assert _fold(text) == _fold_whole(text)
    assert normalize(text) == " ".join(_fold_whole(text).split())


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(TRICKY), max_size=40),
    st.integers(0, 40),
    st.integers(1, 12),
    st.text(alphabet=st.sampled_from(TRICKY), max_size=6),
)
def test_holds_is_phrase_in_normalize(text: str, start: int, size: int, other: str) -> None:
    for phrase in (normalize(text[start : start + size]), normalize(other)):
        if phrase:
            assert holds(text, phrase) == (phrase in normalize(text)), phrase


def test_a_text_of_characters_that_fold_alone_is_never_normalised_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "Die Überprüfung der STRASSE — straße, ﬁle; 😀 한국어 " * 2_000
    _fold(text)  # learns each character's form
    calls: list[int] = []
    real = search._fold_whole
    monkeypatch.setattr(search, "_fold_whole", lambda t: calls.append(len(t)) or real(t))
    assert _fold(text) == real(text)
    assert calls == []
    assert holds(text, normalize("überprüfung der strasse")) and calls == []
    assert not holds(text, "strasse—") and calls == []
    # one character that composes with its neighbour: the whole text is normalised
    assert _fold(text + "e\u0301") == real(text + "e\u0301")
    assert calls == [len(text) + 2]


def test_the_whitespace_collapsed_in_bytes_is_what_str_split_splits_on() -> None:
    spaces = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert {c for c in spaces if not c.isascii()} == _SPACES_BEYOND_ASCII
    assert {chr(b) for b in range(128) if _SPACE_BYTES[b] == 32} == {
        c for c in spaces if c.isascii()
    }
    assert _SPACE_BYTES[128:] == bytes(range(128, 256))
    text = "Straße\n\n  über\x1c\x1fALLES\t " * 3 + "\u2003ende\u00a0 "
    assert normalize(text) == " ".join(_fold_whole(text).split())
    assert normalize(text[:-12]) == " ".join(_fold_whole(text[:-12]).split())


def test_the_remembered_forms_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "_FORMS", {})
    monkeypatch.setattr(search, "_FORMS_KEPT", 4)
    text = "ÄÖÜß—éàçñø"
    assert _fold(text) == _fold_whole(text)
    assert 0 < len(search._FORMS) <= 4


def test_a_capitalised_word_is_confirmed_where_it_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    body = "Die Überprüfung läuft; Été, ÉTÉ " * 500
    holds(body, "überprüfung")  # learns the characters' forms
    folded: list[bytes] = []
    real = search._fold_utf8
    monkeypatch.setattr(search, "_fold_utf8", lambda *a: folded.append(a[0]) or real(*a))
    encoded: list[bytes] = []
    in_bytes = search._found_alone
    monkeypatch.setattr(search, "_found_alone", lambda *a: encoded.append(a[0]) or in_bytes(*a))
    assert holds(body, "überprüfung") and holds(body, "été") and holds(body, "die")
    assert folded == [] and encoded == []  # found in the text: no bytes made
    assert holds(body, "läuft; été, été") and len(folded) == 1  # a space: the whole form
    folded.clear()
    assert not holds(body, "überprüfungen") and len(folded) == 1  # no: the whole form says
    assert holds("xberprüfung", "überprüfung") is False
    assert holds("Ü\u0308berprüfung", "überprüfung") is False  # the mark joins the Ü
