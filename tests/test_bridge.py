"""The harness bridge in real kernels: a raw comm client written against docs/bridge.md,
the same flow through KernelSession, bad input, a restart, and two clients on one kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import ThisInterpreter
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.jsonutil import json_default
from jupyter_client.manager import KernelManager

from dashr_ext import Dashr
from dashr_ext._bridge.protocol import schema
from dashr_ext.bridge import KernelSession
from dashr_ext.errors import (
    BridgeTimeoutError,
    ConfigError,
    FormatError,
    KernelDiedError,
    PinError,
    ProtocolError,
)

pytestmark = pytest.mark.slow

TIMEOUT = 60.0


@dataclass
class Kernel:
    manager: KernelManager
    client: BlockingKernelClient
    home: Path

    def run(self, code: str) -> str:
        """Run ``code`` as a cell through execute_request; its stdout (it must not fail)."""
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=TIMEOUT)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=TIMEOUT)

    def second_client(self) -> BlockingKernelClient:
        # Its own jupyter Session: manager.client() would share the first one's, and with it
        # the socket identity the kernel routes shell replies by.
        client = BlockingKernelClient()
        client.load_connection_info(self.manager.get_connection_info())
        client.start_channels()
        client.wait_for_ready(timeout=TIMEOUT)
        return client


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    home = tmp_path_factory.mktemp("bridge_home")
    manager = KernelManager(kernel_name="tests", kernel_spec_manager=ThisInterpreter())
    manager.start_kernel(env={**os.environ, "DASHR_HOME": str(home)})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=TIMEOUT)
        yield Kernel(manager, client, home)
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


@pytest.fixture
def fresh(kernel: Kernel) -> Kernel:
    if kernel.manager.is_alive():
        kernel.restart()
    else:
        kernel.manager.start_kernel(env={**os.environ, "DASHR_HOME": str(kernel.home)})
        kernel.client.wait_for_ready(timeout=TIMEOUT)
    return kernel


# --------------------------------------------------------------------------- a conversation


def conversation(turns: int = 12) -> list[dict[str, Any]]:
    """A scripted agent session: each turn a request, a tool call, its output, an answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a test agent."}]
    for t in range(turns):
        call = f"call_{t}"
        output = "\n".join(
            f'line {i} of module_{t}.py: value_{t}_{i} = {i * t}  # naïve δ 日本 ✓ \t"q"\\'
            for i in range(24)
        )
        messages += [
            {"role": "user", "content": f"Turn {t}: what does module_{t}.py set value_{t}_7 to?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"cmd": f"cat module_{t}.py"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": output},
            {"role": "assistant", "content": f"module_{t}.py sets value_{t}_7 = {7 * t}."},
        ]
    return messages


SETTINGS = {"recency_window_tokens": 3000, "retain_tokens": 1000}


# --------------------------------------------------------------------------- a raw client


@dataclass
class RawComm:
    """A comm client written against docs/bridge.md only: comm_open, comm_msg, IOPub."""

    client: BlockingKernelClient
    comm_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    hello: dict[str, Any] = field(default_factory=dict)
    progress: list[dict[str, Any]] = field(default_factory=list)

    def _iopub(self) -> dict[str, Any]:
        msg: dict[str, Any] = self.client.get_iopub_msg(timeout=TIMEOUT)
        return msg

    def open(self) -> RawComm:
        content = {"comm_id": self.comm_id, "target_name": "dashr", "data": {}}
        self.client.shell_channel.send(self.client.session.msg("comm_open", content))
        while True:
            msg = self._iopub()
            if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == self.comm_id:
                self.hello = msg["content"]["data"]
                return self

    def send(self, data: object, *, ascii_json: bool = False) -> None:
        msg = self.client.session.msg("comm_msg", {"comm_id": self.comm_id, "data": data})
        if ascii_json:  # lone surrogates travel as \ud800 escapes in ASCII JSON
            session = self.client.session
            packer = session.pack
            session.pack = lambda obj: json.dumps(obj, default=json_default).encode("ascii")
            try:
                self.client.shell_channel.send(msg)
            finally:
                session.pack = packer
        else:
            self.client.shell_channel.send(msg)

    def reply(self, rid: str | None) -> dict[str, Any]:
        """The reply to request ``rid`` (progress messages before it are kept)."""
        while True:
            msg = self._iopub()
            if msg["msg_type"] != "comm_msg" or msg["content"]["comm_id"] != self.comm_id:
                continue
            data: dict[str, Any] = msg["content"]["data"]
            if data.get("id") != rid:
                continue
            if "progress" in data:
                self.progress.append(data)
                continue
            return data

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        rid = uuid.uuid4().hex
        self.send({"version": 1, "id": rid, "op": op, "args": args})
        reply = self.reply(rid)
        check(reply, op)
        return reply


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator for ``$defs/<name>`` of the shipped schema."""
    return jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": f"#/$defs/{name}"})


def check(reply: dict[str, Any], op: str | None = None) -> None:
    """``reply`` is a reply of the shipped schema (and its result that of ``op``)."""
    validator("reply").validate(reply)
    if op is not None and reply["ok"]:
        validator(f"results/{op}").validate(reply["result"])


def record_conversation(
    call: Any, messages: list[dict[str, Any]]
) -> tuple[dict[int, str], list[str]]:
    """Record like an agent (request before each assistant message); the recorded tool
    outputs by seq, and every checkpoint the pressure checks committed."""
    tool_texts: dict[int, str] = {}
    compacted: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            compacted += call("request_messages")["compacted"]
        seqs = call("record", messages=message)["seqs"]
        if message["role"] == "tool":
            (seq,) = seqs
            tool_texts[seq] = message["content"]
    return tool_texts, compacted


def test_a_raw_comm_client_records_compacts_and_reads_the_archive_byte_for_byte(
    fresh: Kernel,
) -> None:
    fresh.run("%load_ext dashr_ext")
    comm = RawComm(fresh.client).open()
    validator("hello").validate(comm.hello)
    assert comm.hello["hello"]["protocol"] == 1 and "record" in comm.hello["hello"]["ops"]

    def call(op: str, **args: Any) -> dict[str, Any]:
        reply = comm.call(op, **args)
        assert reply["ok"], reply
        return dict(reply["result"])

    settings = call("configure", settings=SETTINGS)["settings"]
    assert settings["recency_window_tokens"] == 3000 and settings["retain_tokens"] == 1000
    tool_texts, compacted = record_conversation(call, conversation())
    assert len(compacted) >= 2, compacted
    phases = [p["progress"]["phase"] for p in comm.progress]
    assert phases.count("done") == len(compacted) and "summarizing" in phases

    request = call("request_messages")
    assert request["measurement"]["total"] <= 3000
    compacted += request["compacted"]  # the last answer may take this check over the trigger
    status = call("status")
    assert status["checkpoints"] == compacted and status["events"] == request["events"]
    for checkpoint in compacted[:2]:
        first = fresh.run(
            f'print(dashr_compaction_archive["{checkpoint}"]["tool_results"][0]["seq"])'
        )
        seq = int(first)
        printed = fresh.run(
            f'print(dashr_compaction_archive["{checkpoint}"]["tool_results"][0]["text"])'
        )
        assert printed.encode("utf-8") == (tool_texts[seq] + "\n").encode("utf-8")
    read = call("read", checkpoint=compacted[0])["text"]
    assert read.startswith(f"history_read checkpoint {compacted[0]} — shadowed seqs")


def test_the_same_flow_through_a_kernel_session(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager)
    assert ks.configure(**SETTINGS)["retain_tokens"] == 1000
    tool_texts: dict[int, str] = {}
    compacted: list[str] = []
    for message in conversation():
        if message["role"] == "assistant":
            ks.request_messages()
            compacted += ks.last_request["compacted"]
        events = ks.record_openai(message)
        if message["role"] == "tool":
            (event,) = [e for e in events if e.is_surface]
            tool_texts[event.seq] = event.message.text
            assert event.message.text == message["content"]
    ks.request_messages()  # the last answer may take this check over the trigger
    compacted += ks.last_request["compacted"]
    assert len(compacted) >= 2
    assert ks.status()["checkpoints"] == compacted
    for checkpoint in compacted[:2]:
        cell = ks.run_cell(
            f'entry = dashr_compaction_archive["{checkpoint}"]["tool_results"][0]\n'
            'print(entry["seq"])\nprint(entry["text"])'
        )
        seq, _, text = cell.stdout.partition("\n")
        assert cell.error is None and text == tool_texts[int(seq)] + "\n"
    assert ks.history_read(compacted[0]).startswith(f"history_read checkpoint {compacted[0]} ")
    hit = ks.history_search("value_0_7 = 0")
    assert "seq " in hit and hit.kind == "search"
    with Dashr.open(str(ks.session_path), read_only=True) as local:
        assert [cp.id for cp in local.checkpoints()] == compacted
        assert ks.request_messages() == local.session.messages()
    ks.close()


# --------------------------------------------------------------------------- bad input


def test_bad_input_over_the_comm_gets_typed_errors_and_leaves_the_log_alone(
    fresh: Kernel,
) -> None:
    fresh.run("%load_ext dashr_ext")
    comm = RawComm(fresh.client).open()
    assert comm.call("record", messages=conversation(2)[:4])["ok"]
    path = Path(comm.call("status")["result"]["path"])
    before = path.read_bytes()
    assert comm.call("configure", settings={"bridge_max_request_bytes": 1_000_000})["ok"]
    settings = comm.call("configure", settings={})["result"]["settings"]

    def refused(data: object, rid: str | None, kind: str, needle: str, **kw: Any) -> None:
        comm.send(data, **kw)
        reply = comm.reply(rid)
        check(reply)
        assert reply["ok"] is False and reply["id"] == rid
        assert reply["error"]["type"] == kind, reply
        assert needle in reply["error"]["message"], reply
        assert path.read_bytes() == before

    refused({"version": 1, "id": "a", "op": "explode"}, "a", "ProtocolError", "unknown operation")
    refused({"version": 1, "op": "status"}, None, "ProtocolError", "'id' is a required property")
    refused({"version": 1, "id": "b"}, "b", "ProtocolError", "'op' is a required property")
    refused({"version": 2, "id": "c", "op": "status"}, "c", "ProtocolError", "version")
    refused(
        {"version": 1, "id": "d", "op": "report_usage", "args": {"promptTokens": "many"}},
        "d",
        "ProtocolError",
        "args.promptTokens: 'many' is not of type 'integer'",
    )
    refused(
        {"version": 1, "id": "e", "op": "record", "args": {}},
        "e",
        "ProtocolError",
        "'messages' is a required property",
    )
    refused(
        {"version": 1, "id": "f", "op": "search", "args": {"query": "x", "limit": 0}},
        "f",
        "ProtocolError",
        "args.limit",
    )
    huge = {"role": "user", "content": "x" * 2_000_000}
    refused(
        {"version": 1, "id": "g", "op": "record", "args": {"messages": huge}},
        "g",
        "ProtocolError",
        "at most 1000000 are accepted",
    )
    refused(
        {
            "version": 1,
            "id": "h",
            "op": "record",
            "args": {"messages": {"role": "user", "content": "a\ud800b"}},
        },
        "h",
        "ProtocolError",
        "args.messages.content: a lone surrogate (\\ud800)",
        ascii_json=True,
    )
    refused(
        {"version": 1, "id": "i\udc80", "op": "status"},
        None,
        "ProtocolError",
        "id",
        ascii_json=True,
    )
    orphan = {"role": "tool", "tool_call_id": "call_nobody_made", "content": "out"}
    refused(
        {"version": 1, "id": "j", "op": "record", "args": {"messages": orphan}},
        "j",
        "FormatError",
        "no tool call 'call_nobody_made' is awaiting a result",
    )
    # A batch whose second message is bad records nothing, not even the first.
    batch = [{"role": "user", "content": "fine"}, orphan]
    refused(
        {"version": 1, "id": "k", "op": "record", "args": {"messages": batch}},
        "k",
        "FormatError",
        "messages[1].tool_call_id",
    )
    refused(
        {
            "version": 1,
            "id": "l",
            "op": "configure",
            "args": {"settings": {"retain_tokens": 2000, "recency_window_tokens": "big"}},
        },
        "l",
        "ConfigError",
        "recency_window_tokens",
    )
    refused(
        {
            "version": 1,
            "id": "m",
            "op": "configure",
            "args": {"settings": {"retain_tokens": 10**6}},
        },
        "m",
        "ConfigError",
        "retain_tokens",
    )
    refused([1, 2, 3], None, "ProtocolError", "must be a JSON object")
    # all-or-nothing: the refused configure requests changed no setting
    assert comm.call("configure", settings={})["result"]["settings"] == settings
    status = comm.call("status")
    assert status["ok"] and status["result"]["events"] == len(before.splitlines())


# --------------------------------------------------------------------------- restart


def test_a_restart_mid_session_reattaches_the_same_file_and_work_goes_on(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager)
    ks.configure(**SETTINGS)
    messages = conversation(14)
    for message in messages[:33]:
        if message["role"] == "assistant":
            ks.request_messages()
        ks.record_openai(message)
    path = ks.session_path
    before = ks.request_messages()
    status = ks.status()
    keys = ks.run_cell("print(sorted(dashr_compaction_archive))").stdout
    assert len(status["checkpoints"]) >= 2
    fresh.restart()
    after = ks.request_messages()  # the comm is gone: re-attached, then sent again
    assert after == before
    again = ks.status()
    assert again["path"] == path and again["events"] == status["events"]
    assert again["trigger"] == 3000  # the settings came back with the session
    assert ks.run_cell("print(sorted(dashr_compaction_archive))").stdout == keys
    for message in messages[33:]:
        if message["role"] == "assistant":
            ks.request_messages()
        ks.record_openai(message)
    assert len(ks.status()["checkpoints"]) > len(status["checkpoints"])
    sent = ks.request_messages()  # (its pressure check may run a pass: read the file after)
    with Dashr.open(str(path), read_only=True) as local:
        assert sent == local.session.messages()


def test_a_cell_after_a_restart_sees_the_archive_again(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager)
    ks.configure(**SETTINGS)
    for message in conversation(6):
        if message["role"] == "assistant":
            ks.request_messages()
        ks.record_openai(message)
    keys = ks.run_cell("print(sorted(dashr_compaction_archive))").stdout
    assert keys.startswith("['c")
    fresh.restart()
    assert ks.run_cell("print(sorted(dashr_compaction_archive))").stdout == keys


def test_a_dead_kernel_and_a_slow_reply_are_typed_errors(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager, timeout=1.0)
    other = fresh.second_client()
    try:
        other.execute("import time; time.sleep(4)")
        while other.get_iopub_msg(timeout=TIMEOUT)["msg_type"] != "execute_input":
            pass  # the cell is running: the kernel answers nothing else until it ends
        with pytest.raises(BridgeTimeoutError, match="no reply to 'status'"):
            ks.status()
        ks.timeout = TIMEOUT
        assert ks.status()["protocol"] == 1  # the late reply of the first is skipped
    finally:
        other.stop_channels()
    fresh.manager.signal_kernel(signal.SIGKILL)
    fresh.manager.provisioner.process.wait(TIMEOUT)  # type: ignore[union-attr]
    with pytest.raises(KernelDiedError, match="the kernel is not running"):
        ks.status()


# --------------------------------------------------------------------------- two clients


def test_two_clients_on_one_kernel_are_serialized_and_a_second_process_is_locked_out(
    fresh: Kernel,
) -> None:
    a = KernelSession(fresh.client, manager=fresh.manager)
    second = fresh.second_client()
    try:
        b = KernelSession(second, manager=fresh.manager)
        assert a.session_path == b.session_path
        seqs: dict[str, list[tuple[int, str]]] = {"A": [], "B": []}
        failures: list[BaseException] = []

        def work(name: str, ks: KernelSession) -> None:
            try:
                for i in range(25):
                    text = f"{name}-{i}"
                    events = ks.record_openai({"role": "user", "content": text})
                    (event,) = [e for e in events if e.is_surface]
                    assert event.message.text == text  # the reply to this very request
                    seqs[name].append((event.seq, text))
                    ks.request_messages()
                    ks.status()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=work, args=p) for p in (("A", a), ("B", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        path = str(a.session_path)
        with Dashr.open(path, read_only=True) as local:
            texts = {
                e.seq: e.message.text for e in local.session.events if e.type == "user/message"
            }
            assert len(local.session) == a.status()["events"]
        for name in "AB":
            assert [texts[q] for q, _ in seqs[name]] == [t for _, t in seqs[name]]
            assert [q for q, _ in seqs[name]] == sorted(q for q, _ in seqs[name])
        assert sorted(texts.values()) == sorted(t for s in seqs.values() for _, t in s)
        locked = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\nfrom dashr_ext import Dashr\nfrom dashr_ext.errors import "
                "SessionLockedError\ntry:\n    Dashr.open(sys.argv[1])\n"
                "except SessionLockedError as e:\n    print('SessionLockedError', e)\n",
                path,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=os.environ,
        )
        assert locked.stdout.startswith("SessionLockedError"), locked
        assert a.status()["events"] == len(local.session)
    finally:
        second.stop_channels()


def test_configure_errors_come_back_as_their_own_class(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager)
    with pytest.raises(ConfigError, match="retain_tokens") as info:
        ks.configure(recency_window_tokens=3000, retain_tokens=9000)
    assert info.value.field == "retain_tokens"
    with pytest.raises(FormatError, match="no tool call 'x' is awaiting"):
        ks.record_openai({"role": "tool", "tool_call_id": "x", "content": "y"})
    with pytest.raises(ProtocolError, match="unknown operation 'nope'"):
        ks.request("nope")
    assert ks.configure()["recency_window_tokens"] is None


def test_pins_through_a_kernel_session_come_back_after_a_restart(fresh: Kernel) -> None:
    ks = KernelSession(fresh.client, manager=fresh.manager)
    first = ks.pin("Never push to main.")
    second = ks.pin("Run the tests with -x.")
    assert ks.pins() == (first, second) and first.id == f"pin{first.seq}"
    fresh.restart()
    assert ks.pins() == (first, second)  # re-attached: the pins come from the log
    assert ks.unpin(first.id) == first and ks.pins() == (second,)
    with pytest.raises(PinError, match=f"no current pin '{first.id}' to unpin"):
        ks.unpin(first.id)
    with Dashr.open(str(ks.session_path), read_only=True) as local:
        assert local.pins() == (second,)
    ks.close()
