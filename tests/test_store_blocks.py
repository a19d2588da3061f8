"""Loading a log a block at a time: the whole file is never held as bytes, and every outcome
(objects, torn tail, corrupt-line errors) is the one a whole-file read gives."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest
from test_store import event, line_bytes  # tests/ is on sys.path under pytest

from dashr_ext import _store
from dashr_ext._events import Event
from dashr_ext._store import Store, TornTail
from dashr_ext.errors import CorruptLogError

BLOCK = 256


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every read the store makes while loading, with a 256-byte block."""
    sizes: list[int] = []
    monkeypatch.setattr(_store, "_LOAD_BLOCK", BLOCK)
    real_open = open

    class Counted(io.BufferedReader):
        def read(self, size: int | None = -1) -> bytes:
            out = super().read(size)
            sizes.append(len(out))
            return out

    def counted_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(path, mode, *args, **kwargs)
        if mode == "rb":
            return Counted(f.detach())
        return f

    monkeypatch.setattr(_store, "open", counted_open, raising=False)
    return sizes


def write_log(path: Path, lines: list[bytes]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(lines)
    path.write_bytes(data)
    return data


def test_a_log_is_read_a_block_at_a_time_with_the_same_objects(
    tmp_path: Path, reads: list[int]
) -> None:
    path = tmp_path / "s.jsonl"
    long_text = "x" * (5 * BLOCK)  # one line longer than several blocks
    objs = [event(seq, long_text if seq == 7 else f"message {seq}") for seq in range(40)]
    data = write_log(path, [line_bytes(o) for o in objs])
    assert len(data) > 10 * BLOCK

    with Store.open(path, read_only=True) as store:
        loaded, torn = store.load()
        events, _ = store.load(Event.from_json)

    assert torn is None
    assert [line.obj for line in loaded] == objs
    assert [line.lineno for line in loaded] == list(range(1, 41))
    assert [e.to_json() for e in events] == objs
    assert reads and max(reads) <= BLOCK  # never the whole file at once
    assert sum(reads) == 2 * len(data)


def test_a_torn_tail_after_blocks_is_the_same_torn_tail(tmp_path: Path, reads: list[int]) -> None:
    path = tmp_path / "s.jsonl"
    complete = [line_bytes(event(seq, f"message {seq}")) for seq in range(20)]
    data = write_log(path, [*complete, b'{"seq":20,"type":"user/mes'])

    with Store.open(path, read_only=True) as store, warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        loaded, torn = store.load()

    assert [line.lineno for line in loaded] == list(range(1, 21))
    assert isinstance(torn, TornTail) and torn.side_file is None
    assert torn.nbytes == len(data) - len(b"".join(complete))
    assert "line 21 is incomplete" in str(w[0].message)
    assert max(reads) <= BLOCK


def test_a_writer_moves_a_torn_tail_found_by_blocks_aside(tmp_path: Path, reads: list[int]) -> None:
    path = tmp_path / "s.jsonl"
    complete = b"".join(line_bytes(event(seq, f"message {seq}")) for seq in range(20))
    write_log(path, [complete, b'{"seq":20'])

    with Store.open(path) as store, pytest.warns(_store.TornTailWarning, match="line 21"):
        loaded, torn = store.load()
        assert torn is not None and torn.side_file is not None
        assert torn.side_file.read_bytes() == b'{"seq":20'
        store.append([event(20, "after")])

    assert path.read_bytes() == complete + line_bytes(event(20, "after"))
    assert len(loaded) == 20


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'{"seq": NaN}\n', None),  # json takes NaN: the whole-file path decides
        (b"not json\n", "not valid JSON"),
        (b"[1, 2]\n", "expected a JSON object, got array"),
        (b"\n", "blank line"),
    ],
)
def test_a_line_found_bad_in_a_later_block_gives_the_whole_file_answer(
    tmp_path: Path, reads: list[int], bad: bytes, reason: str | None
) -> None:
    path = tmp_path / "s.jsonl"
    lines = [line_bytes(event(seq, f"message {seq}")) for seq in range(30)]
    lines.insert(25, bad)
    write_log(path, lines)

    with Store.open(path, read_only=True) as store:
        if reason is None:
            loaded, _ = store.load()
            assert loaded[25].obj["seq"] != loaded[25].obj["seq"]  # NaN, as json reads it
            return
        with pytest.raises(CorruptLogError) as info:
            store.load()

    assert info.value.line == 26
    assert info.value.reason.startswith(reason)


def test_a_parse_error_in_a_later_block_names_its_line(tmp_path: Path, reads: list[int]) -> None:
    path = tmp_path / "s.jsonl"
    lines = [line_bytes(event(seq, f"message {seq}")) for seq in range(30)]
    broken = event(25)
    broken["surfaceOp"] = "sideways"
    lines[25] = line_bytes(broken)
    write_log(path, lines)

    with Store.open(path, read_only=True) as store, pytest.raises(CorruptLogError) as info:
        store.load(Event.from_json)

    assert info.value.line == 26
    assert "surfaceOp" in info.value.reason
