"""The durable JSONL store: round trip, durability, locks, corruption, torn tails (SPEC 3.4)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from store_crash_writer import crash_event  # tests/ is on sys.path under pytest

from dashr_ext._events import Event
from dashr_ext._paths import dashr_home, default_session_path, new_session_id, utc_stamp
from dashr_ext._store import LoadedLine, Store, TornTail
from dashr_ext.errors import (
    ConfigError,
    CorruptLogError,
    EventError,
    ReadOnlyError,
    SessionLockedError,
    StoreError,
    TornTailWarning,
)

CRASH_WRITER = Path(__file__).with_name("store_crash_writer.py")


def event(seq: int, text: str = "hello") -> dict[str, Any]:
    """A realistic user/message event as it appears on disk."""
    return {
        "seq": seq,
        "type": "user/message",
        "time": 1764460000123 + seq,
        "surfaceOp": "append",
        "data": {
            "message": {
                "id": f"m{seq}",
                "role": "user",
                "source": {"kind": "user"},
                "content": [{"type": "text", "text": text}],
            }
        },
    }


def line_bytes(obj: dict[str, Any]) -> bytes:
    """The exact bytes the store promises to write for one object."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_lines(path: Path, objs: list[dict[str, Any]], tail: bytes = b"") -> None:
    """Build a session file by hand, optionally ending with unterminated bytes."""
    path.write_bytes(b"".join(line_bytes(o) for o in objs) + tail)


def side_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.torn-*"))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / "s1.jsonl"


@pytest.fixture
def fsync_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every os.fsync call (descriptor), still syncing for real."""
    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    return calls


@pytest.fixture
def record_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


# --------------------------------------------------------------------------- round trip


def test_appended_objects_load_back_in_order_with_1_based_line_numbers(path: Path) -> None:
    objs = [event(0, "first"), event(1, "second"), event(2, "third")]
    with Store.create(path) as store:
        store.append(objs[:1])
        store.append(objs[1:])
        lines, torn = store.load()

    assert torn is None
    assert lines == [LoadedLine(1, objs[0]), LoadedLine(2, objs[1]), LoadedLine(3, objs[2])]


def test_each_object_is_written_as_one_compact_utf8_line(path: Path) -> None:
    objs = [event(0, "naïve café ☕ — line\nbreak\u2028sep"), {"seq": 1, "x": [1, 2.5, None, True]}]
    with Store.create(path) as store:
        store.append(objs)

    assert path.read_bytes() == line_bytes(objs[0]) + line_bytes(objs[1])
    assert path.read_bytes().count(b"\n") == 2
    assert "naïve café ☕".encode() in path.read_bytes()  # not \u-escaped


def test_appends_continue_at_the_end_after_reopening(path: Path) -> None:
    with Store.create(path) as store:
        store.append([event(0), event(1)])
    with Store.open(path) as store:
        assert [line.obj["seq"] for line in store.load()[0]] == [0, 1]
        store.append([event(2)])
    with Store.open(path, read_only=True) as reader:
        lines, torn = reader.load()

    assert [line.obj["seq"] for line in lines] == [0, 1, 2]
    assert [line.lineno for line in lines] == [1, 2, 3]
    assert torn is None


def test_a_new_file_is_empty_private_and_loads_as_no_lines(path: Path) -> None:
    with Store.create(path) as store:
        assert store.load() == ([], None)
        assert store.path == path
        assert store.read_only is False
        assert store.durability == "fsync"

    assert path.read_bytes() == b""
    assert path.stat().st_mode & 0o777 == 0o600


def test_load_with_parse_returns_the_parsed_values(path: Path) -> None:
    objs = [event(0, "a"), event(1, "b")]
    with Store.create(path) as store:
        store.append(objs)
        events, torn = store.load(Event.from_json)

    assert torn is None
    assert [e.seq for e in events] == [0, 1]
    assert [e.message.text for e in events] == ["a", "b"]
    assert [e.to_json() for e in events] == objs


def test_an_empty_batch_writes_and_syncs_nothing(path: Path, fsync_calls: list[int]) -> None:
    with Store.create(path) as store:
        fsync_calls.clear()
        store.append([])

    assert fsync_calls == []
    assert path.read_bytes() == b""


# --------------------------------------------------------------------------- durability


def test_fsync_mode_syncs_exactly_once_per_batch(path: Path, fsync_calls: list[int]) -> None:
    with Store.create(path, durability="fsync") as store:
        fsync_calls.clear()
        store.append([event(0)])
        store.append([event(1), event(2), event(3)])
        store.append([event(4), event(5)])

        assert len(fsync_calls) == 3
        assert len(set(fsync_calls)) == 1  # always the session file's descriptor
    assert path.read_bytes().count(b"\n") == 6


def test_flush_mode_never_syncs_but_readers_see_every_batch(
    path: Path, fsync_calls: list[int]
) -> None:
    with Store.create(path, durability="flush") as store:
        fsync_calls.clear()
        for seq in range(5):
            store.append([event(seq)])
            seen, _ = Store.open(path, read_only=True).load()
            assert len(seen) == seq + 1  # handed to the OS when append returns

    assert fsync_calls == []


def test_durability_must_be_fsync_or_flush(path: Path) -> None:
    with pytest.raises(ConfigError, match=r"durability: expected 'fsync' or 'flush', got 'sync'"):
        Store.create(path, durability="sync")  # type: ignore[arg-type]
    assert not path.exists()


def test_a_failed_write_truncates_the_file_back_and_keeps_the_store_usable(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.create(path) as store:
        store.append([event(0)])
        before = path.read_bytes()
        real_write = os.write

        def disk_full_midway(fd: int, data: Any) -> int:
            if b"doomed" in bytes(data):
                real_write(fd, bytes(data)[:25])  # part of the batch reaches the file
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", disk_full_midway)
        with pytest.raises(StoreError, match="No space left on device") as info:
            store.append([event(1, "ok"), event(2, "doomed")])

        assert "truncated back to its previous length" in str(info.value)
        assert path.read_bytes() == before
        store.append([event(1, "after")])
        lines, torn = store.load()

    assert [line.obj["data"]["message"]["content"][0]["text"] for line in lines] == [
        "hello",
        "after",
    ]
    assert torn is None


def test_a_failed_fsync_truncates_the_batch_away(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.create(path) as store:
        store.append([event(0)])
        before = path.read_bytes()
        real_fsync = os.fsync
        failures = [OSError(errno.EIO, "Input/output error")]

        def fsync_fails_once(fd: int) -> None:
            if failures:
                raise failures.pop()
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync_fails_once)
        with pytest.raises(StoreError, match="Input/output error"):
            store.append([event(1)])

        assert path.read_bytes() == before


def test_an_interrupt_during_append_truncates_back_and_propagates(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.create(path) as store:
        store.append([event(0)])
        before = path.read_bytes()

        def interrupted(fd: int) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "fsync", interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.append([event(1)])

        assert path.read_bytes() == before


def test_when_truncating_back_also_fails_further_appends_are_refused(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.create(path, durability="flush") as store:
        store.append([event(0)])

        def broken_write(fd: int, data: Any) -> int:
            raise OSError(errno.EIO, "Input/output error")

        def broken_truncate(fd: int, length: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "write", broken_write)
        monkeypatch.setattr(os, "ftruncate", broken_truncate)
        with pytest.raises(StoreError, match=r"truncating the file back to \d+ bytes also failed"):
            store.append([event(1)])
        monkeypatch.undo()

        with pytest.raises(StoreError, match="open the session again to recover"):
            store.append([event(1)])


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"seq": 1, "data": {1, 2}}, "not JSON serializable"),
        ({"seq": 1, "time": float("nan")}, "Out of range float values are not JSON compliant"),
        ({"seq": 1, "text": "lone \ud800 surrogate"}, "surrogates not allowed"),
        (["not", "a", "dict"], "expected a dict .* got list"),
    ],
)
def test_an_unstorable_object_raises_event_error_and_writes_nothing(
    path: Path, bad: Any, problem: str
) -> None:
    with Store.create(path) as store:
        store.append([event(0)])
        before = path.read_bytes()
        with pytest.raises(EventError, match=rf"batch\[1\]: .*{problem}"):
            store.append([event(1), bad])

    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ([event(3)], r"batch\[0\]\.seq: expected 2 \(line 3 of the file; .*got 3"),
        ([event(1)], r"batch\[0\]\.seq: expected 2 .*got 1"),
        ([event(2), event(2)], r"batch\[1\]\.seq: expected 3 .*got 2"),
        ([event(3), event(2)], r"batch\[0\]\.seq: expected 2 .*got 3"),
        ([event(2), {"type": "x-note/line", "time": 0, "data": {}}], r"expected 3 .*got None"),
        ([{**event(2), "seq": "2"}], r"expected 2 .*got '2'"),
        ([{**event(2), "seq": True}], r"expected 2 .*got True"),
    ],
)
def test_an_append_whose_seq_is_not_the_next_one_is_refused_and_the_file_is_unchanged(
    path: Path, batch: list[dict[str, Any]], problem: str
) -> None:
    with Store.create(path) as store:
        store.append([event(0), event(1)])
        before = path.read_bytes()
        with pytest.raises(EventError, match=problem) as info:
            store.append(batch)
        assert "nothing from this batch was written" in str(info.value)
        assert path.read_bytes() == before
        store.append([event(2)])  # the store stays usable, still expecting seq 2
        lines, _torn = store.load()

    assert [line.obj["seq"] for line in lines] == [0, 1, 2]


def test_the_next_seq_of_a_file_opened_without_loading_it_is_its_line_count(path: Path) -> None:
    with Store.create(path) as store:
        store.append([event(0), event(1), event(2)])
    before = path.read_bytes()
    with Store.open(path) as store:
        with pytest.raises(EventError, match=r"expected 3 .*got 0"):
            store.append([event(0)])
        assert path.read_bytes() == before
        store.append([event(3)])

    assert path.read_bytes() == before + line_bytes(event(3))


# --------------------------------------------------------------------------- corruption


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (b'{"seq": 1 "type": "x"}', "not valid JSON: Expecting ',' delimiter at column 11"),
        (b"[1, 2, 3]", "expected a JSON object, got array"),
        (b'"just a string"', "expected a JSON object, got string"),
        (b"42", "expected a JSON object, got number"),
        (b"null", "expected a JSON object, got null"),
        (b"", "blank line (every line must be one JSON object)"),
        (b"   ", "blank line (every line must be one JSON object)"),
        (b'{"a": 1}{"b": 2}', "not valid JSON: Extra data at column 9"),
        (b'{"text": "caf\xe9"}', "not valid UTF-8: invalid continuation byte at column 14"),
    ],
)
def test_a_corrupt_middle_line_is_a_precise_error_and_the_file_is_untouched(
    path: Path, bad_line: bytes, reason: str
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(line_bytes(event(0)) + bad_line + b"\n" + line_bytes(event(2)))
    digest = sha256(path)

    for read_only in (False, True):
        with Store.open(path, read_only=read_only) as store, pytest.raises(CorruptLogError) as info:
            store.load()

        assert info.value.path == str(path)
        assert info.value.line == 2
        assert info.value.reason == reason
        assert str(info.value) == f"{path}:2: {reason} (the file was not modified)"
        assert sha256(path) == digest


def test_a_line_nested_too_deeply_to_parse_is_a_corrupt_line(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(line_bytes(event(0)) + b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")

    with Store.open(path) as store, pytest.raises(CorruptLogError) as info:
        store.load()

    assert (info.value.line, info.value.reason) == (2, "not parseable: JSON nested too deeply")


def test_an_integer_past_pythons_digit_limit_is_a_corrupt_line(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(line_bytes(event(0)) + b'{"a":' + b"7" * 5_000 + b"}\n")

    with Store.open(path) as store, pytest.raises(CorruptLogError) as info:
        store.load()

    assert info.value.line == 2
    assert info.value.reason.startswith("not parseable: Exceeds the limit (4300 digits)")


def test_a_corrupt_last_complete_line_is_an_error_not_a_torn_tail(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(line_bytes(event(0)) + b'{"seq": 1, "type\n')
    digest = sha256(path)

    with Store.open(path) as store, pytest.raises(CorruptLogError) as info:
        store.load()

    assert (info.value.line, info.value.reason) == (
        2,
        "not valid JSON: Unterminated string starting at column 12",
    )
    assert sha256(path) == digest
    assert side_files(path) == []


def test_corruption_is_reported_before_a_torn_tail_is_touched(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(line_bytes(event(0)) + b"oops\n" + line_bytes(event(2)) + b'{"seq": 3, "ty')
    digest = sha256(path)

    with Store.open(path) as store, pytest.raises(CorruptLogError, match=":2: not valid JSON"):
        store.load()

    assert sha256(path) == digest
    assert side_files(path) == []


def test_an_event_error_from_parse_becomes_a_corrupt_log_error_on_that_line(path: Path) -> None:
    bad = event(1)
    bad["data"]["message"]["role"] = "assistant"  # wrong role for a user/message
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0), bad, event(2)])
    digest = sha256(path)

    with Store.open(path) as store, pytest.raises(CorruptLogError) as info:
        store.load(Event.from_json)

    assert info.value.line == 2
    assert info.value.reason == (
        "event 1 data.message.role: a user/message event needs role 'user', got 'assistant'"
    )
    assert isinstance(info.value.__cause__, EventError)
    assert sha256(path) == digest


def test_other_exceptions_from_parse_propagate_unchanged(path: Path) -> None:
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0)])

    def buggy(obj: dict[str, Any]) -> int:
        return int(obj["no such key"])

    with Store.open(path) as store, pytest.raises(KeyError, match="no such key"):
        store.load(buggy)


# --------------------------------------------------------------------------- torn tails


def test_a_writer_moves_a_torn_tail_to_a_side_file_and_warns_naming_both(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    objs = [event(0), event(1), event(2)]
    torn_bytes = line_bytes(event(3, "cut off mid-write"))[:57]
    path.parent.mkdir(parents=True)
    write_lines(path, objs, tail=torn_bytes)

    with Store.open(path) as store:
        lines, torn = store.load()

        assert [line.obj for line in lines] == objs
        assert torn is not None
        (side,) = side_files(path)
        assert torn == TornTail(path=path, side_file=side, nbytes=57)
        assert side.read_bytes() == torn_bytes
        assert path.read_bytes() == b"".join(line_bytes(o) for o in objs)
        assert re.fullmatch(r"s1\.jsonl\.torn-\d{8}T\d{9}Z", side.name)

        (warning,) = record_warnings
        assert warning.category is TornTailWarning
        message = str(warning.message)
        assert str(path) in message
        assert str(side) in message
        assert "57 bytes" in message
        assert "line 4" in message

        # the recovered file takes new appends as well-formed lines
        store.append([event(3, "rewritten")])
        lines, torn = store.load()
    assert [line.obj["seq"] for line in lines] == [0, 1, 2, 3]
    assert torn is None
    assert len(record_warnings) == 1


def test_an_unterminated_tail_that_parses_as_json_is_still_treated_as_torn(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    complete_but_unterminated = line_bytes(event(1)).rstrip(b"\n")
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0)], tail=complete_but_unterminated)

    with Store.open(path) as store:
        lines, torn = store.load()

    assert [line.obj["seq"] for line in lines] == [0]
    assert torn is not None and torn.nbytes == len(complete_but_unterminated)
    assert torn.side_file is not None
    assert torn.side_file.read_bytes() == complete_but_unterminated
    assert path.read_bytes() == line_bytes(event(0))
    assert [w.category for w in record_warnings] == [TornTailWarning]


def test_a_file_holding_only_a_torn_line_is_truncated_to_empty(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"seq": 0, "type": "session/hea')

    with Store.open(path) as store:
        assert store.load() == ([], TornTail(path, side_files(path)[0], 31))

    assert path.read_bytes() == b""
    assert side_files(path)[0].read_bytes() == b'{"seq": 0, "type": "session/hea'


def test_a_tail_cut_inside_a_multibyte_character_is_recovered(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    full = line_bytes(event(1, "ééééé"))
    cut = full.index("é".encode()) + 1  # half of a two-byte character
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0)], tail=full[:cut])

    with Store.open(path) as store:
        lines, torn = store.load()

    assert [line.obj["seq"] for line in lines] == [0]
    assert torn is not None and torn.side_file is not None
    assert torn.side_file.read_bytes() == full[:cut]


def test_each_recovery_gets_its_own_side_file(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0)], tail=b'{"first')
    with Store.open(path) as store:
        store.load()
        with open(path, "ab") as f:  # a second crash, simulated
            f.write(b'{"second')
        store.load()

    assert sorted(f.read_bytes() for f in side_files(path)) == [b'{"first', b'{"second']


def test_a_reader_ignores_a_torn_tail_and_leaves_the_file_untouched(
    path: Path, record_warnings: list[warnings.WarningMessage]
) -> None:
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0), event(1)], tail=b'{"seq": 2, "ty')
    digest = sha256(path)

    with Store.open(path, read_only=True) as reader:
        lines, torn = reader.load()

    assert [line.obj["seq"] for line in lines] == [0, 1]
    assert torn == TornTail(path=path, side_file=None, nbytes=14)
    assert sha256(path) == digest
    assert side_files(path) == []
    (warning,) = record_warnings
    assert warning.category is TornTailWarning
    assert str(path) in str(warning.message)
    assert "14 bytes" in str(warning.message)
    assert "left the file unchanged (read-only)" in str(warning.message)


def test_a_writer_must_load_before_appending_after_a_torn_tail(path: Path) -> None:
    path.parent.mkdir(parents=True)
    write_lines(path, [event(0)], tail=b'{"seq": 1')
    digest = sha256(path)

    with Store.open(path) as store:
        with pytest.raises(StoreError, match=r"incomplete line; call load\(\) first"):
            store.append([event(1)])
        assert sha256(path) == digest


# --------------------------------------------------------------------------- locking


def test_a_second_writer_in_the_same_process_is_refused(path: Path) -> None:
    with Store.create(path):
        with pytest.raises(SessionLockedError) as info:
            Store.open(path)

        assert str(path) in str(info.value)
        assert "read_only=True" in str(info.value)
        with pytest.raises(StoreError, match="already exists"):
            Store.create(path)


def test_a_second_writer_in_another_process_is_refused(path: Path) -> None:
    code = (
        "import sys\n"
        "from dashr_ext.errors import SessionLockedError\n"
        "from dashr_ext._store import Store\n"
        "try:\n"
        "    Store.open(sys.argv[1])\n"
        "except SessionLockedError as err:\n"
        "    print(err)\n"
        "    sys.exit(3)\n"
    )
    with Store.create(path) as store:
        store.append([event(0)])
        result = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
        )

    assert result.returncode == 3, result.stderr
    assert str(path) in result.stdout
    assert "open it with read_only=True to inspect it" in result.stdout


def test_a_writer_in_another_process_blocks_writers_here_but_not_readers(path: Path) -> None:
    code = (
        "import sys\n"
        "from dashr_ext._store import Store\n"
        "s = Store.create(sys.argv[1])\n"
        "s.append([{'seq': 0}])\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "s.append([{'seq': 1}])\n"
        "print('appended', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "locked\n"
        with pytest.raises(SessionLockedError):
            Store.open(path)
        reader = Store.open(path, read_only=True)
        assert [line.obj for line in reader.load()[0]] == [{"seq": 0}]

        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "appended\n"
        assert [line.obj for line in reader.load()[0]] == [{"seq": 0}, {"seq": 1}]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)

    with Store.open(path) as store:  # the writer exited: its lock went with it
        assert len(store.load()[0]) == 2


def test_close_releases_the_lock_and_is_idempotent(path: Path) -> None:
    first = Store.create(path)
    first.close()
    first.close()
    assert first.closed

    with Store.open(path) as second:
        second.append([event(0)])
    assert second.closed
    with Store.open(path) as third:
        assert len(third.load()[0]) == 1


def test_a_closed_store_refuses_to_append_or_load(path: Path) -> None:
    writer = Store.create(path)
    writer.close()
    reader = Store.open(path, read_only=True)
    reader.close()

    with pytest.raises(StoreError, match="the store is closed"):
        writer.append([event(0)])
    for store in (writer, reader):
        assert store.closed
        with pytest.raises(StoreError, match="the store is closed"):
            store.load()


def test_readers_never_need_the_lock(path: Path) -> None:
    with Store.create(path) as writer:
        writer.append([event(0)])
        readers = [Store.open(path, read_only=True) for _ in range(3)]

        assert all(len(r.load()[0]) == 1 for r in readers)
        writer.append([event(1)])  # readers do not block the writer either
        assert all(len(r.load()[0]) == 2 for r in readers)


# --------------------------------------------------------------------------- open and create


def test_a_read_only_store_refuses_to_append(path: Path) -> None:
    with Store.create(path) as writer:
        writer.append([event(0)])
    digest = sha256(path)

    with Store.open(path, read_only=True) as reader:
        assert reader.read_only
        with pytest.raises(ReadOnlyError, match=r"opened read-only; open it with read_only=False"):
            reader.append([event(1)])

    assert sha256(path) == digest


def test_opening_a_missing_file_says_how_to_start_one(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    for read_only in (False, True):
        with pytest.raises(StoreError) as info:
            Store.open(missing, read_only=read_only)
        assert str(info.value) == (
            f"{missing}: no such session file; Dashr.create({str(missing)!r}) starts a new "
            "session there"
        )
    assert not missing.exists()


def test_create_explains_a_parent_that_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    target = tmp_path / "file" / "s.jsonl"

    with pytest.raises(StoreError, match=r"s\.jsonl: cannot create its directory"):
        Store.create(target)


def test_create_makes_parent_directories_and_refuses_an_existing_file(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c.jsonl"
    with Store.create(deep) as store:
        store.append([event(0)])
    digest = sha256(deep)

    with pytest.raises(StoreError) as info:
        Store.create(deep)
    assert str(info.value) == (
        f"{deep}: already exists; Dashr.open({str(deep)!r}) continues it, or choose a new path "
        "(Dashr.create() without one makes a new file in $DASHR_HOME/sessions)"
    )
    assert sha256(deep) == digest


# --------------------------------------------------------------------------- locations


def test_dashr_home_is_the_environment_variable_when_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DASHR_HOME", str(tmp_path / "dh"))

    assert dashr_home() == tmp_path / "dh"
    assert default_session_path("20261130T012227123Z-3f9a1c") == (
        tmp_path / "dh" / "sessions" / "20261130T012227123Z-3f9a1c.jsonl"
    )


def test_dashr_home_defaults_to_dot_dashr_in_the_home_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DASHR_HOME", raising=False)
    assert dashr_home() == tmp_path / ".dashr"

    monkeypatch.setenv("DASHR_HOME", "")
    assert dashr_home() == tmp_path / ".dashr"

    monkeypatch.setenv("DASHR_HOME", "~/elsewhere")
    assert dashr_home() == tmp_path / "elsewhere"


def test_the_default_session_path_can_be_created(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DASHR_HOME", str(tmp_path))
    sid = new_session_id()
    with Store.create(default_session_path(sid)) as store:
        store.append([event(0)])

    assert (tmp_path / "sessions" / f"{sid}.jsonl").read_bytes() == line_bytes(event(0))


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x\\y", "sp ace", "a..b"])
def test_a_session_id_that_is_not_a_safe_file_name_is_rejected(bad: str) -> None:
    with pytest.raises(ConfigError, match="session_id: expected letters, digits"):
        default_session_path(bad)


def test_a_utc_stamp_spells_epoch_milliseconds_in_utc() -> None:
    assert utc_stamp(0) == "19700101T000000000Z"
    assert utc_stamp(1764465747123) == "20251130T012227123Z"
    assert utc_stamp(1764465747009) < utc_stamp(1764465747010) < utc_stamp(1764465748000)


def id_time(session_id: str) -> float:
    """The epoch seconds encoded in a session id's leading UTC timestamp."""
    stamp = datetime.strptime(session_id[:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    return stamp.timestamp() + int(session_id[15:18]) / 1000


def test_new_session_ids_sort_in_creation_order_and_are_file_name_safe() -> None:
    before = time.time()
    ids = [new_session_id() for _ in range(3000)]  # many share a millisecond
    after = time.time()

    assert sorted(ids) == ids
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"\d{8}T\d{9}Z-[0-9a-f]{6}", sid) for sid in ids)
    assert before - 0.001 <= id_time(ids[0]) <= id_time(ids[-1]) <= after + 0.001


def test_a_new_session_id_starts_with_the_current_utc_time_in_milliseconds() -> None:
    before = time.time()
    sid = new_session_id()
    after = time.time()

    assert before - 0.001 <= id_time(sid) <= after + 0.001


def test_session_ids_made_apart_in_time_keep_their_order() -> None:
    first = new_session_id()
    time.sleep(0.01)
    second = new_session_id()

    assert first < second
    assert id_time(second) - id_time(first) >= 0.0099  # float seconds, whole milliseconds


# --------------------------------------------------------------------------- crashes


def intended_bytes(seed: int, start: int, count: int) -> bytes:
    return b"".join(line_bytes(crash_event(seed, i)) for i in range(start, start + count))


def run_writer_until_killed(
    path: Path, seed: int, rng: random.Random, *, aim_at_write: bool
) -> int:
    """Run the crash writer until SIGKILL; return the highest line count it acknowledged.

    The kill comes from outside at a random moment after a few acknowledged appends,
    or (``aim_at_write``) from the writer itself as one of its writes begins.
    """
    command = [sys.executable, str(CRASH_WRITER), str(path), str(seed), "fsync"]
    if aim_at_write:
        command.append(str(rng.randint(1, 4)))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        acked = 0
        if not aim_at_write:
            for _ in range(rng.randint(2, 6)):
                ack = proc.stdout.readline()
                assert ack, f"the writer died early: {proc.stderr.read()}"
                acked = int(ack)
            time.sleep(rng.uniform(0, 0.004))
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        acked = max([acked, *map(int, proc.stdout.read().split())])
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    finally:
        watchdog.cancel()
        proc.stdout.close()
        proc.stderr.close()
    return acked


@pytest.mark.slow
def test_sigkill_mid_append_loses_at_most_the_torn_last_line(tmp_path: Path) -> None:
    """A writer process is killed again and again while appending 20-200 KB lines.

    After each kill, reopening as a writer keeps every acknowledged line byte for
    byte, drops at most the batch in flight, and moves a torn last line (when the kill
    landed inside a write) to a side file holding exactly the torn bytes.
    """
    seed = 20261130
    path = tmp_path / "crash.jsonl"
    rng = random.Random(seed)
    complete = 0
    torn_tails = 0
    for kill in range(6):
        acked = run_writer_until_killed(path, seed, rng, aim_at_write=kill % 2 == 1)

        data = path.read_bytes()
        tail = data[data.rfind(b"\n") + 1 :]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Store.open(path) as store:  # the dead writer's lock died with it
                lines, torn = store.load()

        assert acked > complete  # the round made progress
        complete = len(lines)
        assert acked <= complete <= acked + 4  # at most the unacknowledged batch is lost
        assert path.read_bytes() == intended_bytes(seed, 0, complete)
        if tail:
            torn_tails += 1
            assert torn is not None and torn.side_file is not None
            assert torn.nbytes == len(tail)
            assert torn.side_file.read_bytes() == tail
            assert intended_bytes(seed, complete, 4).startswith(tail)
            (warning,) = caught
            assert warning.category is TornTailWarning
            assert str(torn.side_file) in str(warning.message)
        else:
            assert torn is None
            assert caught == []

    assert len(side_files(path)) == torn_tails


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_keep_the_writer_lock(tmp_path: Path) -> None:
    import time

    path = tmp_path / "s.jsonl"
    store = Store.create(path)
    store.append([{"seq": 0}])
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: alive while the parent moves on
        os.write(ready_w, b"1")  # the fork handlers have run by now
        time.sleep(3)
        os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        store.close()
        again = Store.open(path)  # would raise SessionLockedError if the child kept the lock
        again.close()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(ready_w)


def test_a_writer_refuses_a_path_that_is_not_a_regular_file() -> None:
    from dashr_ext import Dashr

    # Read as a session, /dev/zero never ends: the writer would read until MemoryError.
    with pytest.raises(StoreError, match=r"^/dev/zero: no such session file"):
        Store.open(Path("/dev/zero"))
    with pytest.raises(StoreError, match=r"^/dev/zero: no such session file"):
        Dashr.open("/dev/zero")
