"""Turn memory through the bridge: ``KernelSession.history_read(turn=N)`` and the ``read``
op read a turn's original events as ``Dashr.history_read(turn=N)`` does, errors typed alike."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
from inprocess import kernel_session
from turn_memory_support import ON, simple_compressor, work_turn

from dashr_ext import Dashr
from dashr_ext._bridge import handle
from dashr_ext.errors import ProtocolError, RecallError


@pytest.fixture
def d() -> Iterator[Dashr]:
    """Two completed turns, each rewritten and landed."""
    with Dashr.create(in_memory=True, config=ON) as session:
        session.turn_compressor = simple_compressor
        for i in range(2):
            session.record_openai(work_turn(i))
        assert session.wait_for_turns(60)
        assert [r.status for r in session.turns()] == ["landed", "landed"]
        yield session


def test_a_landed_turn_reads_through_the_bridge_as_in_process(d: Dashr) -> None:
    ks = kernel_session(d)
    for turn in (1, 2):
        page = ks.history_read(turn=turn)
        assert str(page) == str(d.history_read(turn=turn))
        assert page.kind == "read"
    assert "turn 1" in str(ks.history_read(turn=1)).split("\n", 1)[0]


def test_a_turns_pages_follow_through_the_bridge(d: Dashr) -> None:
    d.recall_config = replace(d.recall_config, read_max_chars=400)
    ks = kernel_session(d)
    local, remote = [str(d.history_read(turn=1))], [str(ks.history_read(turn=1))]
    while (m := re.search(r"^cursor: (\S+)$", local[-1], re.M)) is not None:
        local.append(str(d.history_read(cursor=m.group(1))))
        remote.append(str(ks.history_read(cursor=m.group(1))))
        assert len(local) < 100
    assert len(local) > 1  # the turn pages at this size
    assert remote == local


@pytest.mark.parametrize("turn", [0, 3, -1])
def test_a_bad_turn_is_the_same_recall_error(d: Dashr, turn: int) -> None:
    with pytest.raises(RecallError) as local:
        d.history_read(turn=turn)
    with pytest.raises(RecallError) as remote:
        kernel_session(d).history_read(turn=turn)
    assert str(remote.value) == str(local.value)
    assert "turn" in str(local.value)


def test_turn_with_another_target_is_the_same_recall_error(d: Dashr) -> None:
    with pytest.raises(RecallError) as local:
        d.history_read(turn=1, seq=0)
    with pytest.raises(RecallError) as remote:
        kernel_session(d).history_read(turn=1, seq=0)
    assert str(remote.value) == str(local.value)


def test_the_read_op_checks_turns_type(d: Dashr) -> None:
    reply = handle(d, {"version": 1, "id": "r", "op": "read", "args": {"turn": "1"}})
    assert reply["ok"] is False and reply["error"]["type"] == ProtocolError.__name__
    assert "turn" in reply["error"]["message"]
    ok = handle(d, {"version": 1, "id": "r", "op": "read", "args": {"turn": 1}})
    assert ok["ok"] is True and ok["result"]["text"] == str(d.history_read(turn=1))
