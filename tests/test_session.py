"""The session: append API, surface fold, replace rules, tool pairing, turns and replay."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import ScriptedSummarizer, append_assistant, append_user, record_steps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._events import EventSpec, TextBlock, ToolCallBlock, block_to_json
from dashr_ext._formats.openai import to_openai
from dashr_ext._meter import TokenMeter
from dashr_ext._session import Session
from dashr_ext._turns import TurnFold
from dashr_ext.errors import CorruptLogError, EventError, ReadOnlyError, SurfaceError


def checkpoint_message(text: str = "summary") -> dict[str, Any]:
    return {
        "role": "user",
        "source": {"kind": "compact-checkpoint"},
        "content": [{"type": "text", "text": text}],
    }


def call(cid: str, name: str = "bash", args: str = '{"command": "ls"}') -> ToolCallBlock:
    return ToolCallBlock(cid, name, args)


def file_bytes(session: Session) -> bytes:
    assert session.path is not None
    return session.path.read_bytes()


@pytest.fixture
def session(tmp_path: Path, clock: Any) -> Session:
    s = Session.create(tmp_path / "s.jsonl", system_prompt="You are terse.", clock=clock)
    yield s
    s.close()


def test_create_writes_a_header_and_appends_get_dense_seqs(session: Session) -> None:
    u = append_user(session, "Fix the failing retry tests.")
    a = append_assistant(session, [TextBlock("Looking."), call("c1")], model="m")
    r = session.append_tool_result("c1", "retry.py")
    assert [e.seq for e in session.events] == list(range(len(session.events)))
    assert session.events[0].type == "session/header"
    assert session.events[0].data["systemPrompt"] == "You are terse."
    assert session.surface == (u.seq, a.seq, r.seq)
    assert r.message.tool_name == "bash"
    assert session.event(a.seq).message.text == "Looking."
    lines = file_bytes(session).decode().splitlines()
    assert [json.loads(line) for line in lines] == [e.to_json() for e in session.events]


def test_event_by_seq_outside_the_log_says_the_range(session: Session) -> None:
    with pytest.raises(IndexError, match=r"seq 99 is outside this session's log \(seqs 0-0\)"):
        session.event(99)


def test_reopening_replays_to_exactly_the_live_state(tmp_path: Path, clock: Any) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path, clock=clock) as s:
        s.record_openai(
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "bash", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "assistant", "content": "done"},
            ],
        )
        s.replace(s.surface[0], s.surface[2], checkpoint_message(), source_event_seqs=s.surface[:3])
        live = (s.surface, s.turns, [e.to_json() for e in s.events], s.pending_tool_calls())
    with Session.open(path, read_only=True) as r:
        assert (r.surface, r.turns, [e.to_json() for e in r.events], r.pending_tool_calls()) == live


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((99, 3), "seq 99 is not a current surface node"),
        ((3, 1), "comes after endSeq"),
    ],
)
def test_replace_rejects_bad_ends_and_leaves_the_log_untouched(
    session: Session, args: tuple[int, int], error: str
) -> None:
    append_user(session, "a")
    append_user(session, "b")
    append_user(session, "c")
    before = file_bytes(session), session.surface, len(session.events)
    with pytest.raises(SurfaceError, match=error):
        session.replace(*args, checkpoint_message(), source_event_seqs=[1, 2, 3, 4, 5, 99])
    assert (file_bytes(session), session.surface, len(session.events)) == before


def test_replace_must_cover_every_shadowed_node(session: Session) -> None:
    for t in "abc":
        append_user(session, t)
    before = file_bytes(session)
    with pytest.raises(SurfaceError, match=r"missing \[2\]"):
        session.replace(1, 3, checkpoint_message(), source_event_seqs=[1, 3])
    assert file_bytes(session) == before


def test_replace_never_splits_a_tool_call_from_its_result(session: Session) -> None:
    append_user(session, "go")
    append_assistant(session, [call("c1")])
    session.append_tool_result("c1", "out")
    append_user(session, "next")
    cuts = session.balanced_cuts()
    assert cuts == [True, True, False, True, True]
    assert cuts[session.position(2) + 1] is False and cuts[session.position(3)] is False
    before = file_bytes(session)
    with pytest.raises(SurfaceError, match="would split a tool call from its result"):
        session.replace(1, 2, checkpoint_message(), source_event_seqs=[1, 2])
    assert file_bytes(session) == before
    event = session.replace(1, 3, checkpoint_message(), source_event_seqs=[1, 2, 3])
    assert session.surface == (event.seq, 4)
    assert session.event(2).message.tool_calls[0].id == "c1"  # shadowed, still readable


def test_a_pending_tool_call_makes_every_later_cut_unbalanced(session: Session) -> None:
    append_user(session, "go")
    append_assistant(session, [call("c1"), call("c2")])
    session.append_tool_result("c1", "one")
    assert session.pending_tool_calls() == ["c2"]
    assert session.balanced_cuts() == [True, True, False, False]


def test_replacement_cannot_be_a_tool_result_or_carry_calls(session: Session) -> None:
    append_user(session, "a")
    msg = {
        "role": "user",
        "source": {"kind": "user"},
        "content": [{"type": "tool-call", "id": "zz", "name": "x", "arguments": "{}"}],
    }
    with pytest.raises(SurfaceError, match="only in place of one node with the same pairing"):
        session.replace(1, 1, msg, source_event_seqs=[1])


def test_tool_results_must_answer_a_known_waiting_call(session: Session) -> None:
    append_assistant(session, [call("c1")])
    session.append_tool_result("c1", "x")
    before = file_bytes(session)
    with pytest.raises(SurfaceError, match="unknown tool call id 'nope'"):
        session.append_tool_result("nope", "x")
    with pytest.raises(SurfaceError, match="already has a result"):
        session.append_tool_result("c1", "again")
    with pytest.raises(SurfaceError, match="already used"):
        append_assistant(session, [call("c1")])
    assert file_bytes(session) == before


def test_a_batch_is_atomic_when_a_later_event_is_invalid(session: Session) -> None:
    before = (file_bytes(session), len(session.events), session.surface)
    user = {"role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": "x"}]}
    with pytest.raises(EventError):
        session.append(
            [
                EventSpec("user/message", {"message": user}, "append"),
                EventSpec("turn/start", {"turn": "one"}),
            ]
        )
    assert (file_bytes(session), len(session.events), session.surface) == before


def test_explicit_turn_and_step_markers(session: Session) -> None:
    session.begin_turn()
    append_user(session, "task")
    session.begin_step()
    a = append_assistant(session, [call("c1")])
    r = session.append_tool_result("c1", "x")
    assert session.open_step == (1, 1)
    assert session.executing_seqs() == {a.seq, r.seq}
    units = session.units()
    assert [(u.start, u.end, u.is_open) for u in units] == [(0, 1, False), (1, 3, True)]
    session.end_step()
    session.end_turn()
    (turn,) = session.turns
    assert (turn.index, turn.reason, turn.is_open) == (1, "completed", False)
    assert [(s.index, s.is_open) for s in turn.steps] == [(1, False)]
    assert session.executing_seqs() == set()
    with pytest.raises(SurfaceError, match="no turn is open"):
        session.begin_step()


def test_turns_are_inferred_for_logs_without_markers(tmp_path: Path, clock: Any) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path, clock=clock) as s:
        append_user(s, "one")
        append_assistant(s, [call("c1")])
        s.append_tool_result("c1", "x")
        append_assistant(s, "done")
        append_user(s, "two")
        append_assistant(s, [call("c2")])
        live = s.turns
        assert [(t.index, t.reason, len(t.steps)) for t in live] == [
            (1, "completed", 2),
            (2, None, 1),
        ]
        assert s.open_step == (2, 1)
    with Session.open(path, read_only=True) as r:
        assert r.turns == live


def test_read_only_sessions_refuse_writes(tmp_path: Path, clock: Any) -> None:
    path = tmp_path / "s.jsonl"
    Session.create(path, clock=clock).close()
    with Session.open(path, read_only=True) as r, pytest.raises(ReadOnlyError, match="read-only"):
        append_user(r, "x")


def test_a_log_violating_the_surface_rules_is_a_precise_corrupt_error(
    tmp_path: Path, clock: Any
) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path, clock=clock) as s:
        append_user(s, "a")
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["seq"] = 5
    path.write_text("\n".join([lines[0], json.dumps(bad), ""]))
    before = path.read_bytes()
    with pytest.raises(CorruptLogError) as info:
        Session.open(path)
    assert info.value.line == 2 and "seqs are dense" in info.value.reason
    assert path.read_bytes() == before


def compacted_log(path: Path, clock: Any) -> tuple[list[dict[str, Any]], int]:
    """A session file with one committed pass; its events and the summary's line number."""
    config = CompactionConfig(
        context_window_tokens=100_000, recency_window_tokens=2000, retain_tokens=300
    )
    with Dashr.create(
        path, config=config, summarizer=ScriptedSummarizer(), meter=TokenMeter("chars"), clock=clock
    ) as d:
        record_steps(d, 12, chars=600, user="go")
        result = d.compact()
        assert result is not None
        d.request_messages()  # adds the pointer after the checkpoint
    return [json.loads(line) for line in path.read_text().splitlines()], result.summary_seq + 1


@pytest.mark.parametrize(
    ("shadowed", "got"),
    [
        (lambda seqs, _at: [*seqs[:-1], 9999], "9999"),  # past the end of the log
        (lambda seqs, _at: [-1, *seqs[1:]], "-1"),
        (lambda _seqs, at: [at], "{at}"),  # the summary itself
        (lambda _seqs, at: [at + 1], "{next}"),  # the checkpoint node, written after it
        (lambda _seqs, _at: [0], "0"),  # the session header: not a surface event
        (lambda _seqs, _at: [], "none"),
    ],
    ids=["past-the-end", "negative", "itself", "later", "log-only", "empty"],
)
def test_a_summary_naming_seqs_that_are_not_earlier_surface_events_is_a_corrupt_line(
    tmp_path: Path, clock: Any, shadowed: Any, got: str
) -> None:
    path = tmp_path / "s.jsonl"
    objs, summary_line = compacted_log(path, clock)
    summary = objs[summary_line - 1]
    at = summary["seq"]
    summary["data"]["shadowedSeqs"] = shadowed(summary["data"]["shadowedSeqs"], at)
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    before = path.read_bytes()

    for reopen in (
        lambda: Session.open(path, read_only=True),
        lambda: Dashr.open(path, read_only=True),  # rebuilds the archive, then recall reads it
        lambda: Dashr.open(path),
    ):
        with pytest.raises(CorruptLogError) as info:
            reopen()
        assert info.value.line == summary_line
        assert info.value.reason == (
            f"event {at} (compaction/summary) data.shadowedSeqs: expected one or more seqs of "
            f"surface events below {at}, got {got.format(at=at, next=at + 1)}"
        )
        assert path.read_bytes() == before


def test_appending_a_summary_that_names_a_seq_outside_the_log_changes_nothing(
    session: Session,
) -> None:
    u = append_user(session, "a")
    data = {
        "compactionId": "p9",
        "checkpoint": f"c{len(session)}",
        "trigger": "manual",
        "engine": "summary",
        "summary": "s",
        "shadowedRange": {"start": u.seq, "end": 99},
        "shadowedSeqs": [u.seq, 99],
        "shadowedTokenCount": 1,
        "summarizer": {"kind": "scripted", "model": None},
        "archive": {},
    }
    before, surface = file_bytes(session), session.surface
    with pytest.raises(EventError, match=r"data\.shadowedSeqs: expected .* got 99"):
        session.append_log("compaction/summary", data)
    assert file_bytes(session) == before and session.surface == surface
    assert session.append_log("compaction/summary", {**data, "shadowedSeqs": [u.seq]}).seq == 2


# --------------------------------------------------------------------------- properties

OPS = st.lists(
    st.one_of(
        st.just(("user",)),
        st.tuples(st.just("assistant"), st.integers(0, 3)),
        st.just(("result",)),
        st.tuples(st.just("replace"), st.integers(0, 10_000), st.integers(0, 10_000)),
    ),
    min_size=1,
    max_size=60,
)


def _apply_op(s: Session, op: tuple[Any, ...], counter: list[int]) -> None:
    if op[0] == "user":
        append_user(s, f"user text {counter[0]}")
    elif op[0] == "assistant":
        calls = []
        for _ in range(op[1]):
            counter[0] += 1
            calls.append(call(f"call{counter[0]}"))
        append_assistant(s, [TextBlock(f"assistant {counter[0]}"), *calls])
    elif op[0] == "result":
        pending = s.pending_tool_calls()
        if pending:
            s.append_tool_result(pending[0], f"result for {pending[0]}")
    else:
        cuts = s.balanced_cuts()
        balanced = [k for k, ok in enumerate(cuts) if ok]
        pairs = [(a, b) for a in balanced for b in balanced if a < b]
        if not pairs:
            return
        a, b = pairs[op[1] % len(pairs)]
        shadowed = s.surface[a:b]
        s.replace(shadowed[0], shadowed[-1], checkpoint_message(), source_event_seqs=shadowed)
    counter[0] += 1


def _assert_pairing_intact(s: Session) -> None:
    current = set(s.surface)
    for event in s.events:
        if event.type == "tool/result":
            call_seq = s.tool_call_seq(event.message.tool_call_id or "")
            assert call_seq is not None
            # A visible result always has its call visible, and the reverse.
            assert (event.seq in current) == (call_seq in current)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_replay_from_disk_always_equals_the_live_surface(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        counter = [0]
        with Session.create(path, durability="flush") as s:
            for op in ops:
                _apply_op(s, op, counter)
                _assert_pairing_intact(s)
            assert [e.seq for e in s.events] == list(range(len(s.events)))
            for seq in range(len(s.events)):
                assert s.event(seq).seq == seq  # shadowed events stay addressable
            live_surface, live_turns = s.surface, s.turns
            live_messages = to_openai(s)
        with Session.open(path, read_only=True) as replayed:
            assert replayed.surface == live_surface
            assert replayed.turns == live_turns
            assert to_openai(replayed) == live_messages
            _assert_pairing_intact(replayed)


def test_explicit_marker_mode_survives_a_reopen(tmp_path: Path, clock: Any) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path, clock=clock) as s:
        s.begin_turn()
        s.record_openai({"role": "user", "content": "go"})
        s.begin_step()
        append_assistant(s, [call("c1")])
        assert not s.infers_markers
    with Session.open(path, clock=clock) as s:
        assert not s.infers_markers
        before = len(s.events)
        s.record_openai({"role": "tool", "tool_call_id": "c1", "content": "done"})
        assert [e.type for e in s.events[before:]] == ["tool/result"]  # no markers inferred
        s.end_step()
        s.end_turn()
        assert [(t.index, t.reason) for t in s.turns] == [(1, "completed")]


def test_a_refused_marker_call_changes_nothing(session: Session) -> None:
    with pytest.raises(SurfaceError, match="no turn is open"):
        session.end_turn()
    with pytest.raises(SurfaceError, match="no step is open"):
        session.end_step()
    assert session.infers_markers
    session.record_openai({"role": "user", "content": "hi"})
    assert [e.type for e in session.events[1:]] == ["turn/start", "user/message"]
    assert session.events[1].data == {"turn": 1, "inferred": True}


def test_turns_inferred_before_the_first_marker_are_kept_and_numbering_goes_on(
    tmp_path: Path, clock: Any
) -> None:
    path = tmp_path / "s.jsonl"
    with Session.create(path, clock=clock) as s:
        append_user(s, "one")
        append_assistant(s, "first answer")
        append_user(s, "two")
        append_assistant(s, "second answer")
        s.record_openai(
            [{"role": "user", "content": "three"}, {"role": "assistant", "content": "3"}]
        )
        live = s.turns
        assert [(t.index, t.reason) for t in live] == [
            (1, "completed"),
            (2, "completed"),
            (3, "completed"),
        ]
    with Session.open(path, read_only=True) as r:
        assert r.turns == live


def test_closed_turns_are_built_once_and_the_open_turn_follows_the_log(session: Session) -> None:
    session.record_openai([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    session.record_openai({"role": "user", "content": "c"})
    first = session.turns
    assert [t.is_open for t in first] == [False, True]
    session.record_openai({"role": "assistant", "content": "d"})
    second = session.turns
    assert second[0] is first[0]  # closed: reused, not rebuilt
    assert second[1] != first[1] and not second[1].is_open


def message_spec(role: str, *blocks: ToolCallBlock | TextBlock) -> EventSpec:
    types = {"user": "user/message", "assistant": "assistant/message"}
    source = {"kind": "user"} if role == "user" else {"kind": "model", "model": None}
    content = [block_to_json(b) for b in blocks]
    return EventSpec(
        types[role], {"message": {"role": role, "source": source, "content": content}}, "append"
    )


def test_appending_with_inferred_markers_surrounds_each_message_with_its_markers(
    session: Session,
) -> None:
    events = session.append(
        [message_spec("user", TextBlock("go")), message_spec("assistant", call("c1"))],
        infer_markers=True,
    )
    events += session.append([message_spec("user", TextBlock("stop"))], infer_markers=True)
    assert [e.type for e in events if e.is_surface] == [
        "user/message",
        "assistant/message",
        "tool/result",  # the unanswered call is closed before the newer message (SPEC §6.5)
        "user/message",
    ]
    synthetic = next(e for e in events if e.type == "tool/result")
    assert synthetic.message.source_kind == "synthetic" and synthetic.message.is_error
    assert session.balanced_cuts()[-1]
    markers = [(e.type, e.data) for e in events if not e.is_surface]
    assert markers == [
        ("turn/start", {"turn": 1, "inferred": True}),
        ("step/start", {"turn": 1, "step": 1, "inferred": True}),
        ("step/end", {"turn": 1, "step": 1, "inferred": True}),
        ("turn/end", {"turn": 1, "reason": "interrupted", "inferred": True}),
        ("turn/start", {"turn": 2, "inferred": True}),
    ]
    assert [(t.index, t.reason) for t in session.turns] == [(1, "interrupted"), (2, None)]


def test_markers_are_not_inferred_once_the_harness_marks_turns(session: Session) -> None:
    session.begin_turn()
    events = session.append([message_spec("user", TextBlock("go"))], infer_markers=True)
    assert [e.type for e in events] == ["user/message"]


def test_the_fold_implies_markers_from_where_it_stands() -> None:
    fold = TurnFold()
    assert fold.implied_markers("tool", "tool", False) == ([], [])
    before, after = fold.implied_markers("assistant", "model", False)
    assert before == [("turn/start", {"turn": 1}), ("step/start", {"turn": 1, "step": 1})]
    assert after == [
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": "completed"}),
    ]
    for kind, data in before:
        fold.apply_marker(3, kind, data)
    assert (fold.open_turn, fold.open_step, fold.next_step()) == (1, (1, 1), 2)
    assert fold.implied_markers("user", "compact-checkpoint", False) == ([], [])


def test_surface_events_yields_the_surface_it_was_called_on_even_across_a_failed_append(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_user(session, "one")
    append_user(session, "two")
    expected = [e.to_json() for e in session.surface_events()]
    it = session.surface_events()
    first = next(it)
    store = session._store
    assert store is not None

    def failing_append(objs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store, "append", failing_append)
    with pytest.raises(OSError, match="disk full"):
        append_user(session, "doomed")
    monkeypatch.undo()
    append_user(session, "three")  # reuses the doomed seq
    assert [first.to_json(), *(e.to_json() for e in it)] == expected
