"""The working-turn editor of turn memory (SPEC §6.4) and the turn nodes it edits."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
from helpers import orphan_results
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dashr_ext._controller import Dashr
from dashr_ext._events import TextBlock
from dashr_ext._meter import TokenMeter
from dashr_ext._session import Session
from dashr_ext._turnmemory import (
    NewNode,
    TurnEditor,
    catalog_text,
    final_problems,
    image_marker,
    turn_nodes,
)
from dashr_ext.errors import StaleNodeError, TurnEditError, TurnMemoryError, TurnValidationError

# --------------------------------------------------------------------------- builders


def image(tag: str) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(tag.encode()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def user(text: str, *images: str) -> dict[str, Any]:
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *map(image, images)]}


def assistant(
    text: str, *calls: str, reasoning: str | None = None, images: Sequence[str] = ()
) -> dict[str, Any]:
    content: Any = text
    if images:
        content = [{"type": "text", "text": text}, *map(image, images)]
    m: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = [
            {
                "id": c,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"run {c}"})},
            }
            for c in calls
        ]
    return m


def tool(call: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call, "content": text}


def node_message(role: str, kind: str, text: str, **extra: Any) -> dict[str, Any]:
    """A message dict for ``Session.replace``."""
    return {
        "role": role,
        "source": {"kind": kind},
        "content": [{"type": "text", "text": text}],
    } | extra


def one_turn(messages: Sequence[dict[str, Any]]) -> Session:
    """A session whose turn 1 holds ``messages`` (explicit markers, so steers stay inside)."""
    session = Session.create(in_memory=True)
    session.begin_turn()
    session.record_openai(list(messages))
    session.end_turn()
    return session


WORK = [
    user("Fix the parser.", "plot"),
    assistant("Looking.", "c1", "c2", reasoning="The parser fails on empty input."),
    tool("c1", "def parse(): ..."),
    tool("c2", "Traceback: IndexError"),
    assistant("Fixed parse() for empty input."),
]


def editor_for(messages: Sequence[dict[str, Any]] = WORK, **kw: Any) -> TurnEditor:
    return TurnEditor(turn_nodes(one_turn(messages), 1), **kw)


def marker_of(ed: TurnEditor, position: int) -> str:
    return ed.originals[position].image_markers[0]


def rules(ed: TurnEditor) -> list[str]:
    return [p.rule for p in ed.final_problems()]


def land(session: Session, ed: TurnEditor) -> None:
    """Land every changed node over its slice, as a landing would (one replace each)."""
    for node in ed.as_data():
        if not node["changed"]:
            continue
        seqs = node["landingSeqs"]
        message: dict[str, Any] = {
            "role": node["role"],
            "source": {"kind": "tool" if node["role"] == "tool" else "turn-memory"},
            "content": node["content"],
        }
        if node["role"] == "tool":
            message |= {k: node[k] for k in ("toolCallId", "toolName", "isError")}
        session.replace(
            seqs[0],
            seqs[-1],
            message,
            source_event_seqs=sorted({*node["sourceSeqs"], *seqs}),
            type={"user": "user/message", "assistant": "assistant/message"}.get(
                node["role"], "tool/result"
            ),
        )


# --------------------------------------------------------------------------- turn nodes


def test_turn_nodes_of_a_recorded_dashr_session() -> None:
    with Dashr.create(in_memory=True) as d:
        d.record_openai(WORK)
        d.record_openai([user("And the tests?"), assistant("They pass.")])
        meter = TokenMeter("chars")
        nodes = turn_nodes(d.session, 1, meter=meter)
        first, second = d.session.turns[:2]
        assert first.end_seq is not None
        surface = list(d.session.surface)
        assert [n.seq for n in nodes] == [
            s for s in surface if first.start_seq <= s <= first.end_seq
        ]
        assert [n.position for n in nodes] == list(range(5))
        assert [n.role for n in nodes] == ["user", "assistant", "tool", "tool", "assistant"]
        assert [n.label for n in nodes] == [
            "text+image",
            "tool-calls+reasoning",
            "tool-result",
            "tool-result",
            "text",
        ]
        assert nodes[1].tool_call_ids == ("c1", "c2") and nodes[3].tool_call_id == "c2"
        assert "<reasoning>\nThe parser fails on empty input.\n</reasoning>" in nodes[1].text
        assert "[tool call c1: bash(" in nodes[1].text
        assert nodes[3].text.startswith("[tool result for c2 (bash)]\nTraceback")
        assert image_marker(nodes[0].images[0]) in nodes[0].text
        assert [n.tokens for n in nodes] == [
            meter.node_tokens(d.session.event(n.seq)) for n in nodes
        ]
        assert all(n.chars == len(n.text) for n in nodes)
        assert [n.balanced_before for n in nodes] == [True, True, False, False, True]
        assert [n.provenance for n in nodes] == [(n.seq,) for n in nodes]
        later = turn_nodes(d.session, 2)
        assert [n.seq for n in later] == [s for s in surface if second.start_seq <= s]


def test_an_open_or_unknown_turn_is_refused() -> None:
    with Dashr.create(in_memory=True) as d:
        with pytest.raises(TurnMemoryError, match=r"no such turn .*no turns yet"):
            turn_nodes(d.session, 1)
        d.record_openai([user("Hi."), assistant("Hello.")])
        d.record_openai(user("Next?"))
        with pytest.raises(TurnMemoryError, match="turn 2 is still open"):
            turn_nodes(d.session, 2)
        with pytest.raises(
            TurnMemoryError, match=r"turn 7: no such turn \(this session has turns 1-2\)"
        ):
            turn_nodes(d.session, 7)


def test_replacements_of_the_turns_own_nodes_belong_to_it() -> None:
    session = one_turn(WORK)
    before = turn_nodes(session, 1)
    result, first = before[3], before[0]
    pruned = session.replace(
        result.seq,
        result.seq,
        node_message("tool", "tool", "[pruned]", toolCallId="c2", toolName="bash", isError=False),
        source_event_seqs=[result.seq],
        type="tool/result",
    )
    copy = session.replace(
        first.seq,
        first.seq,
        node_message("user", "user", "Fix."),
        source_event_seqs=[first.seq],
    )
    after = turn_nodes(session, 1)
    assert [n.seq for n in after] == [
        copy.seq,
        *(n.seq for n in before[1:3]),
        pruned.seq,
        before[4].seq,
    ]
    assert after[3].provenance == (result.seq,) and after[3].text.endswith("[pruned]")
    assert after[0].provenance == (first.seq,)


def test_a_node_covering_the_turn_with_events_outside_it_is_refused() -> None:
    with Dashr.create(in_memory=True) as d:
        d.record_openai([user("One."), assistant("Done one.")])
        d.record_openai([user("Two."), assistant("Done two.")])
        s = d.session
        last_of_one, first_of_two = s.surface[1], s.surface[2]
        s.replace(
            last_of_one,
            first_of_two,
            node_message("user", "compact-checkpoint", "both"),
            source_event_seqs=[last_of_one, first_of_two],
        )
        for turn in (1, 2):
            with pytest.raises(TurnMemoryError, match="no longer a run of its own"):
                turn_nodes(s, turn)


def test_a_checkpoint_of_earlier_turns_made_during_the_turn_is_not_part_of_it() -> None:
    with Dashr.create(in_memory=True) as d:
        d.record_openai([user("One."), assistant("Done one.")])
        d.record_openai(user("Two."))
        s = d.session
        a, b = s.surface[0], s.surface[1]
        s.replace(
            a,
            b,
            node_message("user", "compact-checkpoint", "one"),
            source_event_seqs=[a, b],
        )  # its seq falls inside turn 2
        d.record_openai(assistant("Done two."))
        nodes = turn_nodes(s, 2)
        assert [n.text for n in nodes] == ["Two.", "Done two."]
        assert turn_nodes(s, 1)[0].kind == "checkpoint"


# --------------------------------------------------------------------------- list and read


def test_the_catalog_lists_ids_roles_kinds_sizes_and_capacities() -> None:
    ed = editor_for()
    rows = ed.list()
    assert [r.id for r in rows] == ["n1", "n2", "n3", "n4", "n5"]
    assert [r.chars for r in rows] == [n.chars for n in ed.originals]
    assert [r.capacity for r in rows] == [1] * 5 and not any(r.changed for r in rows)
    assert [r.rewrite_required is not None for r in rows] == [False, True, False, False, False]
    assert ed.capacity("n1..n5") == 3  # user | call + its two results | answer
    assert ed.capacity("n2..n4") == 1 and ed.capacity(("n3", "n4")) == 1
    assert ed.capacity(("n4", "n5")) == 2
    text = catalog_text(rows)
    assert text.splitlines()[1].startswith("n2 · assistant · tool-calls+reasoning · ")
    assert "must be rewritten" in text.splitlines()[1]


def test_read_shows_originals_with_reasoning_and_produced_nodes_as_accepted() -> None:
    ed = editor_for()
    page = ed.read("n2")
    assert "<reasoning>\nThe parser fails on empty input.\n</reasoning>" in page.text
    assert page.next_offset is None and str(page) == page.text
    ed.replace("n2..n4", [NewNode("assistant", "Ran c1 and c2: parse() fails on [].")])
    assert ed.read("r1").text == "[r1 · assistant · text]\nRan c1 and c2: parse() fails on []."
    both = ed.read(["n5", "n1"])
    assert both.ids == ("n5", "n1") and both.text.index("[n5") < both.text.index("[n1")


def test_long_reads_page_by_stable_offsets() -> None:
    ed = editor_for([user("u " * 300), assistant("a " * 400)], read_max_chars=150)
    whole = ed.read("n1..n2", max_chars=10_000)  # capped at the editor's 150
    assert len(whole.text) == 150 and whole.next_offset == 150
    assert "offset=150" in str(whole)
    pages, offset = [], 0
    while True:
        page = ed.read(["n1", "n2"], offset=offset, max_chars=97)
        pages.append(page.text)
        if page.next_offset is None:
            break
        offset = page.next_offset
    document = "".join(pages)
    assert len(document) == whole.total_chars
    assert document.startswith("[n1 · user · text]\nu u") and document.endswith("a ")
    assert ed.read("n1..n2", offset=97, max_chars=97).text == pages[1]
    with pytest.raises(TurnEditError, match="past the end"):
        ed.read("n1", offset=10_000)
    for bad in (0, -1, True):
        with pytest.raises(TurnEditError, match="max_chars"):
            ed.read("n1", max_chars=bad)


# --------------------------------------------------------------------------- replace


def test_replace_gives_new_ids_sources_and_slices() -> None:
    ed = editor_for()
    assert ed.replace("n1..n5", [NewNode("user", "Fix."), NewNode("assistant", "Fixed.")]) == (
        "r1",
        "r2",
    )
    r1, r2 = ed.nodes
    assert r1.sources == r2.sources == (0, 1, 2, 3, 4)
    assert (r1.landing, r2.landing) == ((0,), (1, 2, 3, 4))
    assert ed.revision == 1 and r1.changed and r2.content == (TextBlock("Fixed."),)
    assert ed.replace("r2", [NewNode("assistant", "Ran it."), NewNode("assistant", "Fixed.")]) == (
        "r3",
        "r4",
    )
    assert [n.landing for n in ed.nodes] == [(0,), (1, 2, 3), (4,)]
    assert ed.replace("r1..r4", [NewNode("user", "Fix."), NewNode("assistant", "Done.")]) == (
        "r5",
        "r6",
    )  # ids are never reused
    data = ed.as_data()
    seqs = [n.seq for n in ed.originals]
    assert data[1]["landingSeqs"] == seqs[1:] and data[1]["sourceSeqs"] == sorted(seqs)


def test_replaced_ids_are_refused_and_name_what_replaced_them() -> None:
    ed = editor_for()
    ed.replace("n2..n4", [NewNode("assistant", "Ran both.")])
    ed.replace("r1..n5", [NewNode("assistant", "Ran both; fixed.")])
    with pytest.raises(StaleNodeError) as caught:
        ed.replace("n3", [NewNode("assistant", "x")])
    assert caught.value.replaced_by == ("r1",) and caught.value.current == ("r2",)
    assert "node n3 was replaced by r1; its content is now in r2" in str(caught.value)
    with pytest.raises(StaleNodeError, match="node r1 was replaced by r2: use the current ids"):
        ed.read("r1")
    with pytest.raises(TurnEditError, match=r"unknown node id 'r9'; the current ids are n1, r2"):
        ed.read("r9")
    with pytest.raises(TurnEditError, match=r"ids look like n1 or r1"):
        ed.read("node-1")
    with pytest.raises(TurnEditError, match="runs backwards"):
        ed.replace("r2..n1", [NewNode("user", "x")])


@pytest.mark.parametrize(
    ("target", "nodes", "message"),
    [
        ("n2..n4", [NewNode("assistant", "a"), NewNode("assistant", "b")], "at most 1 node"),
        ("n1..r1", [NewNode("user", "u")] + [NewNode("assistant", "a")] * 3, "at most 3 nodes"),
        ("n1", [], "give 1 node to put in place of n1"),
        ("n1", [NewNode("user", "  \n")], "empty"),
        ("n1", [NewNode("system", "x")], "role: expected one of user, assistant, tool"),
        ("n3..n4", [NewNode("tool", "ok", "c1")], "only rewrites one tool result in place"),
        ("r1", [NewNode("tool", "ok")], "only rewrites one tool result in place"),
        ("n3", [NewNode("tool", "ok", "c2")], "keeps its call 'c1'"),
        ("n1", [NewNode("user", "x", "c1")], "only a tool node answers a call"),
        ("r1", [NewNode("assistant", '<memory-image ref="zz"/>')], "image reference 'zz'"),
        ("n1", [{"role": "user"}], "content: expected a string"),
    ],
)
def test_refused_replaces_leave_the_state_as_it_was(
    target: str, nodes: list[Any], message: str
) -> None:
    ed = editor_for()
    ed.replace("n5", [NewNode("assistant", "Fixed.")])
    before = ed.state
    with pytest.raises(TurnEditError, match=message):
        ed.replace(target, nodes)
    assert ed.state is before and ed.replace("r1", [NewNode("assistant", "Fine.")]) == ("r2",)


def test_a_tool_result_is_rewritten_one_to_one_and_accepts_its_json_shape() -> None:
    ed = editor_for()
    (rid,) = ed.replace("n4", [{"role": "tool", "content": "IndexError on []", "toolCallId": "c2"}])
    node = ed.nodes[3]
    assert (node.id, node.role, node.tool_call_id, node.tool_name, node.landing) == (
        rid,
        "tool",
        "c2",
        "bash",
        (3,),
    )
    assert ed.read(rid).text.endswith("[tool result for c2 (bash)]\nIndexError on []")
    assert ed.replace(rid, [NewNode("tool", "IndexError")]) == ("r2",)  # again, the call kept


# --------------------------------------------------------------------------- final rules


def valid(ed: TurnEditor) -> TurnEditor:
    ed.replace("n2..n4", [NewNode("assistant", "Ran c1, c2: IndexError on empty input.")])
    ed.replace("n1", [NewNode("user", "Fix the parser. " + marker_of(ed, 0))])
    return ed


def test_a_valid_rewrite_passes_and_lands_without_orphans() -> None:
    session = one_turn(WORK)
    ed = valid(TurnEditor(turn_nodes(session, 1)))
    ed.validate_final()
    land(session, ed)
    messages = session.messages()
    assert orphan_results(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert "reasoning_content" not in json.dumps(messages)
    again = turn_nodes(session, 1)  # a rewritten turn is still found, by its provenance
    assert [n.seq for n in again] == list(session.surface)
    assert again[1].provenance == tuple(n.seq for n in ed.originals[1:4])
    assert TurnEditor(again).final_problems() == ()


def test_a_turn_whose_every_node_was_rewritten_is_found_by_its_replacements() -> None:
    session = one_turn(WORK)
    session.record_openai([user("Later."), assistant("Later answer.")])
    ed = TurnEditor(turn_nodes(session, 1))
    ed.replace(
        "n1..n5", [NewNode("user", "Fix. " + marker_of(ed, 0)), NewNode("assistant", "Done.")]
    )
    land(session, ed)
    again = turn_nodes(session, 1)
    assert [n.text for n in again] == ["Fix. " + marker_of(ed, 0), "Done."]
    assert [n.seq for n in again] == list(session.surface)[:2]


def test_the_turn_must_start_with_a_user_node_and_end_with_an_assistant_node() -> None:
    ed = valid(editor_for())
    ed.replace("r2", [NewNode("assistant", "Start: fix. " + marker_of(ed, 0))])
    assert rules(ed) == ["shape"]
    ed = valid(editor_for())
    ed.replace("n5", [NewNode("user", "Fixed?")])
    assert rules(ed) == ["shape"]


def test_raw_reasoning_never_lands_unchanged() -> None:
    ed = editor_for()
    ed.replace("n1", [NewNode("user", "Fix the parser. " + marker_of(ed, 0))])
    ed.replace("n3", [NewNode("tool", "short")])
    ed.replace("n4", [NewNode("tool", "IndexError")])
    assert rules(ed) == ["reasoning"]
    ed = editor_for([user("Hi."), assistant("Hello.", reasoning="greet back")])
    assert rules(ed) == ["reasoning"]
    ed.replace("n2", [NewNode("assistant", "Hello.")])
    assert rules(ed) == []


def test_every_image_of_a_rewritten_node_keeps_its_marker() -> None:
    ed = editor_for()
    ed.replace("n2..n4", [NewNode("assistant", "Ran both.")])
    ed.replace("n1", [NewNode("user", "Fix the parser (see the plot).")])
    assert rules(ed) == ["image"]
    ed = editor_for([user("Look.", "a", "b"), assistant("Seen.", images=["c"])])
    ed.replace(
        "n1..n2", [NewNode("user", "Look. " + marker_of(ed, 0)), NewNode("assistant", "Seen.")]
    )
    problems = ed.final_problems()
    assert [p.rule for p in problems] == ["image", "image"]  # the second user image, the reply's
    assert image_marker(ed.originals[1].images[0]) in problems[1].message


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ([("n3", "assistant")], "absorbed into r2 while its call stays unchanged in n2"),
        ([("n2", "assistant")], "its result (n3) stays a tool node in n3"),
        ([("n2", "assistant"), ("n3..n4", "assistant")], "its result (n3) is in r3"),
    ],
)
def test_a_tool_pair_is_never_split(edits: list[tuple[str, str]], message: str) -> None:
    ed = editor_for()
    ed.replace("n1", [NewNode("user", "Fix. " + marker_of(ed, 0))])
    for target, role in edits:
        ed.replace(target, [NewNode(role, f"rewrite of {target}")])
    problems = ed.final_problems()
    assert "tool-pair" in [p.rule for p in problems]
    assert any(message in p.message for p in problems), problems
    with pytest.raises(TurnValidationError) as caught:
        ed.validate_final()
    assert "tool-pair" in [rule for rule, _ in caught.value.problems]


def test_a_pair_reaching_outside_the_turn_blocks_its_landing() -> None:
    nodes = list(turn_nodes(one_turn([user("Go."), assistant("Waiting."), assistant("Done.")]), 1))
    nodes[1] = dataclasses.replace(nodes[1], balanced_before=False)  # a call left open before it
    ed = TurnEditor(nodes)
    ed.replace("n2", [NewNode("assistant", "Waited.")])
    assert rules(ed) == ["tool-pair"] and "outside this turn" in ed.final_problems()[0].message


SMALL = [user("Fix."), assistant("Run.", "c1"), tool("c1", "out"), assistant("Done.")]


@pytest.mark.parametrize(
    ("position", "changes", "rule"),
    [
        (3, {"landing": ()}, "coverage"),
        (3, {"landing": (3, 3)}, "coverage"),
        (3, {"id": "n1"}, "coverage"),
        (3, {"changed": True, "text": " ", "content": (TextBlock(" "),)}, "empty"),
        (3, {"changed": True, "text": "x", "sources": (1, 3)}, "provenance"),
        (3, {"changed": True, "text": "x", "sources": (2,)}, "provenance"),
        (3, {"sources": (2, 3)}, "provenance"),
        (3, {"changed": True, "role": "tool", "tool_call_id": "c1"}, "tool-rewrite"),
        (2, {"changed": True, "text": "x", "tool_call_id": "c9"}, "tool-rewrite"),
    ],
)
def test_structural_rules_hold_for_any_state(
    position: int, changes: dict[str, Any], rule: str
) -> None:
    ed = editor_for(SMALL)
    nodes = list(ed.nodes)
    assert final_problems(ed.originals, nodes) == ()
    nodes[position] = dataclasses.replace(nodes[position], **changes)
    assert rule in [p.rule for p in final_problems(ed.originals, nodes)]


def test_foreign_image_references_break_provenance() -> None:
    ed = editor_for([user("Look.", "a"), assistant("Seen.")])
    ed.replace("n2", [NewNode("assistant", "Seen.")])
    stolen = dataclasses.replace(ed.nodes[1], text="Seen " + marker_of(ed, 0))
    assert [p.rule for p in final_problems(ed.originals, [ed.nodes[0], stolen])] == ["provenance"]


# --------------------------------------------------------------------------- properties


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A random completed turn: steers, reasoning, images and parallel tool calls."""
    count = iter(range(1000))

    def tag() -> str:
        return f"t{next(count)}"

    def maybe_image() -> list[str]:
        return [tag()] if draw(st.booleans()) else []

    def maybe_reasoning() -> str | None:
        return f"think {tag()}" if draw(st.booleans()) else None

    out = [user(f"request {tag()}", *maybe_image())]
    for kind in draw(st.lists(st.sampled_from(["steer", "say", "act"]), max_size=6)):
        if kind == "steer":
            out.append(user(f"steer {tag()}", *maybe_image()))
        elif kind == "say":
            out.append(assistant(f"say {tag()}", reasoning=maybe_reasoning(), images=maybe_image()))
        else:
            calls = [f"c{tag()}" for _ in range(draw(st.integers(1, 3)))]
            out.append(assistant(f"act {tag()}", *calls, reasoning=maybe_reasoning()))
            out.extend(tool(c, f"output of {c}") for c in draw(st.permutations(calls)))
    out.append(assistant(f"answer {tag()}", reasoning=maybe_reasoning()))
    return out


def check_invariants(ed: TurnEditor, seen: set[str]) -> None:
    nodes = ed.nodes
    ids = [n.id for n in nodes]
    assert len(set(ids)) == len(ids)
    assert [p for n in nodes for p in n.landing] == list(range(len(ed.originals)))
    for n in nodes:
        assert n.sources == tuple(range(n.sources[0], n.sources[-1] + 1))
        assert set(n.landing) <= set(n.sources)
        assert n.changed == n.id.startswith("r")
    assert [(r.id, r.changed) for r in ed.list()] == [(n.id, n.changed) for n in nodes]
    assert sum(r.positions for r in ed.list()) == len(ed.originals)
    seen.update(ids)


def text_for(ed: TurnEditor, first: int, last: int) -> str:
    markers = {
        image_marker(i)
        for n in ed.nodes[first : last + 1]
        for p in n.sources
        for i in ed.originals[p].images
    }
    return " ".join(["rewritten", *sorted(markers)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=turns(), data=st.data())
def test_editor_invariants_hold_after_any_sequence_of_operations(
    turn: list[dict[str, Any]], data: st.DataObject
) -> None:
    session = one_turn(turn)
    ed = TurnEditor(turn_nodes(session, 1))
    assert len(ed.originals) == len(turn)
    seen: set[str] = set()
    check_invariants(ed, seen)
    for _ in range(data.draw(st.integers(0, 8))):
        nodes = ed.nodes
        first = data.draw(st.integers(0, len(nodes) - 1))
        last = data.draw(st.integers(first, len(nodes) - 1))
        target = f"{nodes[first].id}..{nodes[last].id}"
        capacity = ed.capacity(target)
        m = data.draw(st.integers(1, capacity + 1))
        lone_result = first == last and nodes[first].role == "tool"
        choices = ["user", "assistant", *(["tool"] if lone_result else [])]
        roles = data.draw(st.lists(st.sampled_from(choices), min_size=m, max_size=m))
        new = [NewNode(role, text_for(ed, first, last)) for role in roles]
        before = ed.state
        if m > capacity:
            with pytest.raises(TurnEditError, match="at most"):
                ed.replace(target, new)
            assert ed.state is before
            continue
        made = ed.replace(target, new)
        assert made == tuple(f"r{before.issued + k + 1}" for k in range(m))
        assert not set(made) & seen
        for old in before.nodes[first : last + 1]:
            with pytest.raises(StaleNodeError, match=f"node {old.id} was replaced by {made[0]}"):
                ed.read(old.id)
        check_invariants(ed, seen)
        page = ed.read(list(made), max_chars=data.draw(st.integers(1, 60)))
        assert page.text == ed.read(list(made), max_chars=10_000).text[: len(page.text)]
    problems = ed.final_problems()
    event("valid" if not problems else f"breaks {sorted({p.rule for p in problems})}")
    if not problems:  # what validates always lands, and every call keeps its result
        land(session, ed)
        assert orphan_results(session.messages()) == []
        assert len(session.messages()) == len(ed.nodes)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=turns(), data=st.data())
def test_a_rewrite_that_keeps_every_rule_validates_and_lands(
    turn: list[dict[str, Any]], data: st.DataObject
) -> None:
    session = one_turn(turn)
    ed = TurnEditor(turn_nodes(session, 1))
    originals = ed.originals
    position = 0
    while position < len(originals):  # a node, or a call with its results, at a time
        node = originals[position]
        results = sum(1 for o in originals if o.tool_call_id in node.tool_call_ids)
        ident, end = f"n{position + 1}", f"n{position + 1 + results}"
        index = [n.id for n in ed.nodes].index(ident)
        if node.has_reasoning or data.draw(st.booleans()):  # rewrite it (with its results)
            role = "user" if node.role == "user" else "assistant"
            ed.replace(f"{ident}..{end}", [NewNode(role, text_for(ed, index, index + results))])
        else:  # keep the call; rewrite some of its results one-to-one
            for k in range(position + 1, position + 1 + results):
                if data.draw(st.booleans()):
                    ed.replace(f"n{k + 1}", [NewNode("tool", f"shorter output {k}")])
        position += 1 + results
    assert ed.final_problems() == ()
    land(session, ed)
    assert orphan_results(session.messages()) == []
    assert [m["role"] for m in session.messages()] == [n.role for n in ed.nodes]
    assert not any("reasoning_content" in m for m in session.messages())
