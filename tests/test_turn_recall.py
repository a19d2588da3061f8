"""Recall of turn memory's turns: ``history_read(turn=N)``, the outline's compressed turns,
``%history_read --turn N`` and ``%dashr turns`` (SPEC §6.4, 8)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cell as run
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
from turn_memory_support import ON, call, simple_compressor, work_turn

from dashr_ext import CompactionConfig, RecallConfig
from dashr_ext._controller import Dashr
from dashr_ext._recall import Recall
from dashr_ext._recall.render import END_OF_RANGE, event_body
from dashr_ext._recall.turns import COMPRESSED_LINES
from dashr_ext._turnmemory.records import turn_records
from dashr_ext.errors import ReadOnlyError, RecallError, TurnMemoryError

LANDED = re.compile(r"turn (\d+): (\d+) → (\d+) nodes, ~([\d,]+) → ~([\d,]+) tokens")


def reasoning_turn(i: int) -> list[dict[str, Any]]:
    """A work turn whose tool-calling step carries reasoning."""
    messages = work_turn(i)
    messages[1]["reasoning_content"] = f"Thinking about case {i}: the empty input path."
    return messages


def landed_session(path: Path | None = None, turns: int = 2, **recall: Any) -> Dashr:
    """``turns`` completed turns, each rewritten by the simple compressor and landed."""
    if path is None:
        d = Dashr.create(in_memory=True, config=ON, recall=RecallConfig(**recall))
    else:
        d = Dashr.create(path, ON, RecallConfig(**recall))
    d.turn_compressor = simple_compressor
    for i in range(turns):
        d.record_openai(reasoning_turn(i))
    assert d.wait_for_turns(60)
    assert [r.status for r in d.turns()] == ["landed"] * turns
    return d


@pytest.fixture
def d() -> Iterator[Dashr]:
    with landed_session() as session:
        yield session


def originals(d: Dashr, turn: int) -> list[int]:
    """The seqs of the message events appended between turn N's markers."""
    events = d.session.events
    start = next(e.seq for e in events if e.type == "turn/start" and e.data["turn"] == turn)
    end = next(e.seq for e in events if e.type == "turn/end" and e.data["turn"] == turn)
    return [e.seq for e in events[start : end + 1] if e.is_surface and e.surface_op == "append"]


def pages(d: Dashr, **first: Any) -> list[str]:
    out = [str(d.history_read(**first))]
    while (m := re.search(r"^cursor: (\S+)$", out[-1], re.M)) is not None:
        out.append(str(d.history_read(cursor=m.group(1))))
        assert len(out) < 200
    return out


def bodies(page: str) -> str:
    """A page without its header and trailer, cut markers and continuation labels removed."""
    lines = page.split("\n")[1:]
    while lines and (lines[-1].startswith("cursor: ") or lines[-1] == END_OF_RANGE):
        lines.pop()
    return "\n".join(line for line in lines if not re.fullmatch(r"… \[\+\d+ chars\]", line))


# --------------------------------------------------------------------------- history_read(turn=N)


def test_a_landed_turn_reads_as_its_original_events_not_the_rewrite(d: Dashr) -> None:
    record = d.turns()[0]
    seqs = originals(d, 1)
    page = str(d.history_read(turn=1))
    header = page.split("\n", 1)[0]
    assert header == (
        f"history_read turn 1 — original events, seqs {seqs[0] - 1}-{record.end_seq}, "
        f"{len(seqs)} events, landed as {record.checkpoint}"
    )
    assert page.endswith(END_OF_RANGE)
    shown = [int(s) for s in re.findall(r"^\w[\w ]*\(seq (\d+)", page, re.M)]
    assert shown == seqs
    assert not any(d.session.is_current(s) for s in seqs[1:-1])  # the rewrite shadows them
    assert "[reasoning] Thinking about case 0: the empty input path." in page
    assert "FAILED: IndexError" in page and "[tool call] bash" in page
    rewritten = [
        e.seq for e in d.session.events if e.is_surface and e.message.source_kind == "turn-memory"
    ]
    assert rewritten and not set(rewritten) & set(shown)
    for seq in seqs:
        assert event_body(d.session.events[seq], decoded=True) in page


def test_turn_numbers_are_those_of_the_turn_markers_and_of_turns(d: Dashr) -> None:
    for record in d.turns():
        header = str(d.history_read(turn=record.turn)).split("\n", 1)[0]
        start = next(
            e.seq
            for e in d.session.events
            if e.type == "turn/start" and e.data["turn"] == record.turn
        )
        assert header.startswith(
            f"history_read turn {record.turn} — original events, seqs {start}-{record.end_seq},"
        )


def test_a_long_turn_pages_without_repeats_or_gaps() -> None:
    with landed_session(read_max_chars=600) as d:
        read = pages(d, turn=2)
        assert len(read) > 3
        assert all(len(p) <= 600 for p in read)
        headers = {p.split("\n", 1)[0] for p in read}
        assert len(headers) == 1 and "history_read turn 2 —" in headers.pop()
        assert all(re.search(r"^cursor: t2@\d+:\d+$", p, re.M) for p in read[:-1])
        joined = "\n".join(bodies(p) for p in read)
        joined = re.sub(r"\n?\w[\w ]*\(seq \d+, continued\): ", "", joined)
        whole = bodies(str(landed_page(d, 2)))
        assert joined == whole


def landed_page(d: Dashr, turn: int) -> str:
    """Turn ``turn`` read in one page (a budget wide enough for all of it)."""
    return str(Recall(d.session, RecallConfig(read_max_chars=1_000_000)).read(turn=turn))


def test_the_header_says_what_turn_memory_made_of_the_turn() -> None:
    with Dashr.create(in_memory=True) as d:  # turn memory off: no job, no status
        d.record_openai(work_turn(0, lines=3))
        assert str(d.history_read(turn=1)).split("\n", 1)[0].endswith("5 events")
    small = ON.with_changes(turn_min_tokens=100_000)
    with Dashr.create(in_memory=True, config=small) as d:
        d.record_openai(work_turn(0, lines=3))
        assert d.wait_for_turns(60)
        assert str(d.history_read(turn=1)).split("\n", 1)[0].endswith(", turn memory no-op")
        d.record_openai({"role": "user", "content": "One more thing."})
        header = str(d.history_read(turn=2)).split("\n", 1)[0]
        assert header.startswith("history_read turn 2 (open) — original events, seqs ")
        assert header.endswith(", 1 event")


def test_a_turn_read_leaves_out_the_step_running_now() -> None:
    with Dashr.create(in_memory=True) as d:
        d.record_openai({"role": "user", "content": "List the files."})
        d.record_openai({"role": "assistant", "content": "", "tool_calls": [call("a0", "ls")]})
        running = d.session.executing_seqs()
        assert running
        page = str(d.history_read(turn=1))
        assert "List the files." in page and "[tool call] bash" not in page
        assert "belongs to the step running now" in page


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"turn": 0},
            "turn: expected a turn number (an integer >= 1; this session has turns 1-2), got 0",
        ),
        ({"turn": -3}, "got -3"),
        ({"turn": "1"}, "turn: expected a turn number (an integer >= 1; this session has "),
        ({"turn": True}, "got True"),
        ({"turn": 1.0}, "got 1.0"),
        (
            {"turn": 3},
            "unknown turn 3: this session has turns 1-2 (history_outline() lists them)",
        ),
        ({"turn": 1, "seq": 0}, "give exactly one of checkpoint, seq, turn or cursor (got seq "),
        ({"cursor": "t9@3:0"}, "malformed cursor 't9@3:0': unknown turn 9"),
        ({"cursor": "t1@0:0"}, "malformed cursor 't1@0:0': seq 0 is not one of turn 1's"),
    ],
)
def test_bad_turn_reads_say_what_is_accepted(
    d: Dashr, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(RecallError, match=re.escape(message)):
        d.history_read(**kwargs)


def test_a_turn_read_cursor_past_the_event_text_is_refused(d: Dashr) -> None:
    first = originals(d, 1)[0]
    with pytest.raises(RecallError, match=rf"character 99999 is past the end of seq {first}"):
        d.history_read(cursor=f"t1@{first}:99999")


def test_a_session_without_turns_says_how_to_read_it() -> None:
    with (
        Dashr.create(in_memory=True) as d,
        pytest.raises(RecallError, match=r"no turns yet; read its history with "),
    ):
        d.history_read(turn=1)


def test_the_tool_reads_a_turn_as_the_helper_does(d: Dashr) -> None:
    assert d.call_tool("history_read", '{"turn": 2}') == str(d.history_read(turn=2))
    assert d.call_tool("history_read", {"turn": 1}) == str(d.history_read(turn=1))
    with pytest.raises(RecallError, match=r"turn: expected a turn number .* got '2'"):
        d.call_tool("history_read", '{"turn": "2"}')


# --------------------------------------------------------------------------- the outline


def test_the_outline_lists_compressed_turns_as_turns_records_them(d: Dashr) -> None:
    text = str(d.history_outline())
    lines = text.split("\n")
    head = lines.index("compressed turns: 2; read one's originals: history_read(turn=2)")
    assert lines.index("checkpoints: none yet (nothing has been compacted)") < head
    assert head < lines.index("turns:")
    found = [LANDED.fullmatch(line) for line in lines[head + 1 : head + 3]]
    assert all(found)
    expected = [
        (r.turn, r.nodes_before, r.nodes_after, r.tokens_before, r.tokens_after) for r in d.turns()
    ]
    got = [tuple(int(g.replace(",", "")) for g in m.groups()) for m in found if m is not None]
    assert got == expected
    html = d.history_outline()._repr_html_()
    assert "compressed turns: 2" in html and "turn 1: " in html


def test_no_compressed_turns_line_without_a_landing() -> None:
    with Dashr.create(in_memory=True) as d:
        d.record_openai(work_turn(0, lines=3))
        assert "compressed turns" not in str(d.history_outline())


def test_many_compressed_turns_show_the_newest_and_count_the_rest() -> None:
    total = COMPRESSED_LINES + 3
    with Dashr.create(in_memory=True, config=ON) as d:
        d.turn_compressor = simple_compressor
        for i in range(total):
            d.record_openai(work_turn(i, lines=8))
        assert d.wait_for_turns(60)
        lines = str(d.history_outline()).split("\n")
        assert f"compressed turns: {total}; read one's originals: history_read(turn={total})" in (
            lines
        )
        assert "… 3 earlier compressed turns not shown (turns 1-3)" in lines
        shown = [int(m.group(1)) for line in lines if (m := LANDED.fullmatch(line))]
        assert shown == list(range(4, total + 1))


def test_recalls_job_records_equal_a_fold_over_the_whole_log(d: Dashr) -> None:
    assert d.recall.turn_records() == turn_records(d.session.events) == d.turns()
    d.record_openai(work_turn(5, lines=2))
    assert d.wait_for_turns(60)
    assert d.recall.turn_records() == turn_records(d.session.events)
    assert len(d.recall.turn_records()) == 3


# --------------------------------------------------------------------------- queue_turns


def test_queue_turns_backfills_turns_completed_while_off_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Dashr.create(path) as d:
        for i in range(2):
            d.record_openai(work_turn(i))
    with Dashr.open(path, config=ON) as again:
        assert again.wait_for_turns(60) and again.turns() == ()  # the activation boundary
        again.turn_compressor = simple_compressor
        assert again.queue_turns() == (1, 2)
        assert again.wait_for_turns(60)
        assert [r.status for r in again.turns()] == ["landed", "landed"]
        assert again.queue_turns() == ()
    with (
        Dashr.open(path) as off,
        pytest.raises(TurnMemoryError, match="turn memory is off: set turn_memory=True"),
    ):
        off.queue_turns()
    with Dashr.open(path, config=ON, read_only=True) as ro:
        assert ro.queue_turns() == ()  # nothing left to give a job
    with Dashr.create(tmp_path / "t.jsonl") as d:
        d.record_openai(work_turn(0))
    with (
        Dashr.open(tmp_path / "t.jsonl", config=ON, read_only=True) as ro,
        pytest.raises(ReadOnlyError),
    ):
        ro.queue_turns()


# --------------------------------------------------------------------------- the magics


@pytest.fixture
def ip(shells: list[InteractiveShell], tmp_path: Path) -> InteractiveShell:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shells.append(InteractiveShell(config=config))
    shell = shells[-1]
    run(shell, "%load_ext dashr_ext")
    run(shell, "%config Dashr.turn_memory = True")
    run(shell, "%config Dashr.turn_min_tokens = 50")
    return shell


def usage_error(ip: InteractiveShell, code: str) -> str:
    result = ip.run_cell(code)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    return str(result.error_in_exec)


def test_history_read_magic_reads_a_turn(ip: InteractiveShell) -> None:
    d = ip.user_ns["dashr"]
    d.turn_compressor = simple_compressor
    d.record_openai(reasoning_turn(0))
    assert d.wait_for_turns(60)
    shown = run(ip, "%history_read --turn 1")
    assert str(shown) == str(d.history_read(turn=1))
    assert "[reasoning] Thinking about case 0" in str(shown)
    assert str(ip.user_ns["history_read"](turn=1)) == str(shown)
    assert usage_error(ip, "%history_read --turn x") == "--turn: expected an integer, got 'x'"
    assert usage_error(ip, "%history_read --turn 4") == (
        "unknown turn 4: this session has turn 1 (%history_outline lists them)"
    )
    assert usage_error(ip, "%history_read --turn 0").startswith(
        "--turn: expected a turn number (an integer >= 1; this session has turn 1), got 0"
    )
    assert usage_error(ip, "%history_read --turn 1 --seq 0").startswith(
        "%history_read: give exactly one of CHECKPOINT, --seq N, --turn N or --cursor TOKEN"
    )


def test_dashr_turns_lists_every_job_with_its_status(ip: InteractiveShell) -> None:
    d = ip.user_ns["dashr"]
    d.turn_compressor = simple_compressor
    d.record_openai(work_turn(0))
    d.record_openai({"role": "user", "content": "Thanks."})
    d.record_openai({"role": "assistant", "content": "You are welcome."})
    assert d.wait_for_turns(60)
    report = run(ip, "%dashr turns")
    landed, small = d.turns()
    assert report.title == f"turn memory — session {d.session.id}: 2 turns (1 landed, 1 no-op)"
    assert report.rows == (
        (
            "turn 1",
            f"landed: {landed.nodes_before} → {landed.nodes_after} nodes, "
            f"~{landed.tokens_before:,} → ~{landed.tokens_after:,} tokens, "
            f"archived as {landed.checkpoint}",
        ),
        ("turn 2", f"no-op: 2 nodes, ~{small.tokens_before:,} tokens; {small.reason}"),
    )
    assert small.reason is not None and small.reason.startswith("below turn_min_tokens")
    assert report.notes == ()
    assert "turn 1" in report._repr_html_()
    assert usage_error(ip, "%dashr turns now").startswith("%dashr turns: unrecognized arguments")


def test_dashr_turns_names_the_turns_turn_memory_never_covered(
    shells: list[InteractiveShell], tmp_path: Path
) -> None:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shells.append(InteractiveShell(config=config))
    ip = shells[-1]
    run(ip, "%load_ext dashr_ext")
    d = ip.user_ns["dashr"]
    d.record_openai(work_turn(0, lines=2))
    report = run(ip, "%dashr turns")
    assert report.rows == ()
    assert report.notes == (
        "no job: turn 1, completed while turn memory was off (an open never backfills them); "
        "dashr compact FILE --turns compresses them offline (from a shell, while no kernel has "
        "the session attached)",
    )
    fresh = Dashr.create(in_memory=True, config=CompactionConfig())
    try:
        from dashr_ext._recall.turns import turn_listing

        listing = turn_listing(fresh.turns(), fresh.session.events, fresh.session.id, "x")
        assert listing.notes == ("no completed turn yet (an interrupted turn gets no job)",)
    finally:
        fresh.close()


def test_tab_completes_the_turn_option(ip: InteractiveShell) -> None:
    from dashr_ext._magics.completion import complete

    host = ip.magics_manager.registry["Dashr"]
    assert complete(host, "%history_read --t", "--t") == ["--turn"]
    assert complete(host, "%dashr tu", "tu") == ["turns"]


def test_a_landings_archive_key_reads_the_turn_it_rewrote(d: Dashr) -> None:
    first, second = d.turns()
    assert first.checkpoint is not None and second.checkpoint is not None
    assert str(d.history_read(first.checkpoint)) == str(d.history_read(turn=1))
    assert str(d.history_read(second.checkpoint.upper())) == str(d.history_read(turn=2))
    by_tool = d.call_tool("history_read", {"checkpoint": first.checkpoint})
    assert by_tool == str(d.history_read(turn=1))
    with pytest.raises(RecallError, match="unknown checkpoint 't999999'"):
        d.history_read("t999999")
