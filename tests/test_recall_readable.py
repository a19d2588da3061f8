"""Recall finds what was typed and reads well: decoded tool-call arguments, Unicode-aware
matching, the executing step named at the end of a page, and notebook HTML (SPEC 8)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer
from hypothesis import given, settings
from hypothesis import strategies as st

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._meter import TokenMeter
from dashr_ext._recall.hits import Hit
from dashr_ext._recall.render import decoded_arguments
from dashr_ext._recall.search import normalize, snippet

FILLER = "\n".join(f"line {i}: scheduler bookkeeping for attempt {i}" for i in range(40))
GREP = 'grep -n "def parse_unit" src/units.py'
SCRIPT = "cd src && \\\n  python -c 'import units; print(units.parse_unit(\"3 km\"))'\nls -la"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "src/units.py", line 12, in parse_unit\n'
    "    raise ValueError(text)\n"
    "ValueError: 3 km"
)


def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


@pytest.fixture
def d(tmp_path: Path, clock: Callable[[], int]) -> Iterator[Dashr]:
    """One compacted turn of shell commands (quotes, backslashes, line breaks), then a
    visible turn whose user message has Unicode in composed and decomposed forms."""
    with Dashr.create(
        tmp_path / "s.jsonl",
        config=CompactionConfig(context_window_tokens=100_000, auto=False),
        summarizer=ScriptedSummarizer(text="## Progress\n- parse_unit fails on '3 km'."),
        meter=TokenMeter("chars"),
        clock=clock,
    ) as dashr:
        dashr.record_openai({"role": "user", "content": "Why does parse_unit fail?"})
        dashr.record_openai(
            {
                "role": "assistant",
                "content": "Looking for it.",
                "tool_calls": [call("call_1", "bash", {"command": GREP})],
            }
        )
        dashr.record_openai({"role": "tool", "tool_call_id": "call_1", "content": "12:def"})
        dashr.record_openai(
            {
                "role": "assistant",
                "content": "Running it.",
                "tool_calls": [call("call_2", "bash", {"command": SCRIPT, "timeout": 30})],
            }
        )
        dashr.record_openai({"role": "tool", "tool_call_id": "call_2", "content": TRACEBACK})
        dashr.record_openai({"role": "assistant", "content": "It rejects spaces.\n" + FILLER})
        surface = dashr.session.surface
        assert dashr.compact(start_seq=surface[0], end_seq=surface[-1]) is not None
        dashr.record_openai({"role": "user", "content": "Also the Straße test and the cafe\u0301."})
        dashr.record_openai({"role": "assistant", "content": "Both pass."})
        yield dashr


# --------------------------------------------------------------------------- typed search


def test_a_command_with_quotes_is_found_as_it_was_typed(d: Dashr) -> None:
    text = str(d.history_search(GREP))
    lines = text.splitlines()
    assert lines[-1] == "scanned 9, matched 1, truncated false"
    assert lines[1].startswith("1. seq 4 | shadowed | c16 | ")
    assert f"[command] {GREP}" in lines[2]  # the snippet shows the command, not its JSON


def test_a_command_spanning_lines_is_found_by_its_lines(d: Dashr) -> None:
    assert "matched 1" in d.history_search("cd src && \\\n python -c 'import units;")
    assert "matched 1" in d.history_search('print(units.parse_unit("3 km"))\'\nls -la')


def test_the_json_form_is_still_found_and_read_back_with_the_command_as_typed(d: Dashr) -> None:
    escaped = json.dumps(GREP)[1:-1]  # grep -n \"def parse_unit\" …
    assert "matched 1" in d.history_search(escaped)
    page = str(d.history_read(seq=0))
    lines = page.splitlines()
    call = lines.index(f'[tool call] bash {{"command":"{escaped}"}}')  # the SPEC §8 line stays
    assert lines[call + 1] == f"[command] {GREP}"  # and the command reads as it was typed


def test_decoded_arguments_name_each_escaped_string_by_its_path() -> None:
    args = {
        "path": "src/a.py",
        "edits": [{"old": "x = 1", "new": 'x = "1"\n'}, {"old": "a\\b", "new": "plain"}],
        "n": 3,
    }
    assert decoded_arguments(json.dumps(args)) == [
        '[edits[0].new] x = "1"\n',
        "[edits[1].old] a\\b",
    ]
    assert decoded_arguments(json.dumps({"path": "src/a.py"})) == []
    assert decoded_arguments('["not", "an object"]') == []
    assert decoded_arguments("{not json") == []


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\\n\x01é/ '),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=3), _JSON_VALUES, max_size=3), ascii_only=st.booleans()
)
def test_arguments_without_a_backslash_have_no_string_escaping_changes(
    value: dict[str, object], ascii_only: bool
) -> None:
    """The shortcut ``decoded_arguments`` takes is exact: arguments with no backslash hold no
    string that escaping changes, and otherwise the strings it names are those."""
    arguments = json.dumps(value, ensure_ascii=ascii_only)
    strings: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    changed = [x for x in strings if any(c in x for c in '"\\') or any(ord(c) < 32 for c in x)]
    if "\\" not in arguments:
        assert not changed and decoded_arguments(arguments) == []
    else:
        assert len(decoded_arguments(arguments)) == len(changed)


def test_arguments_without_a_backslash_are_not_parsed_for_their_escaped_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted: the search form parses a tool call's arguments once (to re-serialise them),
    not twice, when nothing in them is escaped."""
    from dashr_ext._recall import render

    parsed: list[str] = []
    real = render.arguments_object
    monkeypatch.setattr(render, "arguments_object", lambda a: parsed.append(a) or real(a))
    assert decoded_arguments('{"path": "src/a.py", "n": [1, 2]}') == [] and parsed == []
    assert decoded_arguments('{"new": "x = \\"1\\""}') == ['[new] x = "1"'] and len(parsed) == 1


# --------------------------------------------------------------------------- Unicode


@pytest.mark.parametrize(
    ("query", "original"),
    [
        ("STRASSE", "Straße"),
        ("strasse test", "Straße test"),
        ("CAFÉ", "cafe\u0301"),  # composed query, decomposed text
        ("cafe\u0301", "cafe\u0301"),
    ],
)
def test_case_folding_and_normalisation_find_the_original_characters(
    d: Dashr, query: str, original: str
) -> None:
    text = str(d.history_search(query))
    assert text.splitlines()[-1] == "scanned 9, matched 1, truncated false"
    hit = d.recall._hit(int(text.splitlines()[1].split()[2]), normalize(query))
    assert hit.match == original
    assert f"<mark>{original}</mark>" in d.history_search(query)._repr_html_()


def test_the_search_form_folds_case_and_unicode_forms() -> None:
    assert normalize("STRASSE") == normalize("Straße") == "strasse"
    assert normalize("Caf\u00e9") == normalize("CAFE\u0301") == "caf\u00e9"
    assert normalize("ﬁle\u00a0 NAME") == "file name"
    # A regex hit that is not a match once normalised is not used: "e" is not in "é".
    assert snippet("cafe\u0301 et le the", "e") == ("cafe\u0301 ", "e", "t le the")


# --------------------------------------------------------------------------- executing step


def test_a_page_before_the_executing_step_says_later_seqs_belong_to_it(d: Dashr) -> None:
    d.record_openai({"role": "user", "content": "Check once more."})
    d.record_openai(
        {
            "role": "assistant",
            "content": "Reading history.",
            "tool_calls": [call("call_9", "history_read", {"seq": 0})],
        }
    )
    running = sorted(d.session.executing_seqs())
    assert running == [len(d.session) - 1]
    page = str(d.history_read(seq=0)).splitlines()
    assert page[-2:] == [
        f"… not the end of this session's history: seq {running[0]} belongs to the step "
        f"running now (left out until it finishes; then read on with "
        f"history_read(seq={running[0]}))",
        "… [end of this range]",
    ]
    d.record_openai({"role": "tool", "tool_call_id": "call_9", "content": "(read)"})
    d.record_openai({"role": "assistant", "content": "Done."})
    assert str(d.history_read(seq=0)).splitlines()[-2].startswith("Assistant (seq ")


# --------------------------------------------------------------------------- notebook HTML


def test_a_read_page_is_monospace_with_each_role_set_off(d: Dashr) -> None:
    page = d.history_read(seq=0)
    shown = page._repr_html_()
    assert shown.startswith('<div class="dashr-recall dashr-read" style="font-family:var(')
    assert "monospace" in shown.split(">", 1)[0]
    roles = re.findall(r'<div class="dashr-event dashr-([a-z-]+)" style="[^"]*border-left', shown)
    assert roles == [
        "user", "assistant", "tool", "assistant", "tool", "assistant",
        "checkpoint", "user", "assistant",
    ]  # fmt: skip (a compact checkpoint: no pointer message after it)
    assert "<b>User (seq 20):</b> Also the Straße" in shown
    # The HTML holds the page's text, escaped, and nothing else.
    plain = html.unescape(re.sub(r"<[^>]+>", "", shown.replace("</div><div", "</div>\n<div")))
    assert plain == page.text


def test_outline_cells_are_left_aligned_preview_included(d: Dashr) -> None:
    shown = d.history_outline()._repr_html_()
    cells = re.findall(r"<t[dh]( [^>]*)?>", shown)
    assert cells and all('style="text-align:left' in (attrs or "") for attrs in cells)
    preview = "parse_unit fails on &#x27;3 km&#x27;."
    assert f'<td style="text-align:left;vertical-align:top">{preview}</td>' in shown


def test_search_snippets_keep_line_breaks_in_html_and_one_line_in_text(d: Dashr) -> None:
    result = d.history_search("raise ValueError")
    assert 'File "src/units.py", line 12, in parse_unit raise ValueError(text) Val' in result.text
    shown = result._repr_html_()
    assert "in parse_unit\n<mark>raise ValueError</mark>(text)\nValueError: 3 km…" in shown
    assert 'class="dashr-snippet" style="white-space:pre-wrap' in shown


def test_a_snippet_keeps_at_most_twelve_line_breaks_nearest_the_match() -> None:
    body = "\n".join(f"l{i}" for i in range(60)) + " HIT " + "\n".join(f"r{i}" for i in range(60))
    before, match, after = snippet(body, "hit", 240, lines=True)
    hit = Hit(1, True, "(visible)", "t", before, match, after)
    b, m, a = hit.html_pieces()
    assert (b + m + a).count("\n") == 12
    assert b.replace("\n", " ") == before.replace("\n", " ")  # same characters
    assert b.endswith("l58\nl59 ") and a.startswith(" r0\nr1\n")
    assert b.count("\n") == 5 and a.count("\n") == 7  # the breaks nearest the match
    assert hit.lines(1)[1] == "…" + (before + match + after).replace("\n", " ") + "…"
