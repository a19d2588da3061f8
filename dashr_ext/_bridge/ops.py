"""The bridge's operations: one small function each, from checked ``args`` to a JSON result.

Each takes the :class:`Host` (the controller, and how settings change) and the request's
``args`` (already validated against the shipped schema) and returns the ``result`` object
of ``docs/bridge.md``; an error it raises becomes the reply's typed error. They call the
controller exactly as an in-kernel caller would, so the log they write is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Protocol

from .._checkpoints import checkpoint_of
from .._compaction.plan import check_explicit_range
from .._config import CompactionConfig, RecallConfig
from .._controller import Dashr
from .._events import Event
from .._pins import Pin
from .._version import __version__
from ..errors import ConfigError, ProtocolError
from .wire import compaction_json, event_json, measurement_json, plan_json, prune_json

__all__ = ["OPS", "PROGRESS_OPS", "ControllerHost", "Host"]

PROTOCOL_VERSION = 1


class Host(Protocol):
    """What the operations need of the kernel side: the live controller and its settings."""

    @property
    def controller(self) -> Dashr: ...

    def configure(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Apply ``settings`` all-or-nothing (a ConfigError changes none); return all of them."""
        ...


class ControllerHost:
    """A :class:`Host` over a bare controller: the settings are its config fields.

    In a kernel the extension's host is used instead (every ``Dashr`` trait, validated as
    ``%config`` validates it); this one serves tests and processes without IPython.
    """

    def __init__(self, controller: Dashr) -> None:
        self._controller = controller

    @property
    def controller(self) -> Dashr:
        return self._controller

    def configure(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        c = self._controller
        compaction = {f.name for f in fields(CompactionConfig)}
        recall = {f.name for f in fields(RecallConfig)}
        for name in settings:
            if name not in compaction | recall:
                accepted = f"one of {', '.join(sorted(compaction | recall))}"
                raise ConfigError(f"settings.{name}", accepted, name)
        config = c.config.with_changes(**{k: v for k, v in settings.items() if k in compaction})
        recall_config = c.recall_config.with_changes(
            **{k: v for k, v in settings.items() if k in recall}
        )
        if config != c.config:
            c.config = config
        if recall_config != c.recall_config:
            c.recall_config = recall_config
        return {
            **{name: getattr(c.config, name) for name in sorted(compaction)},
            **{name: getattr(c.recall_config, name) for name in sorted(recall)},
        }


Op = Callable[[Host, dict[str, Any]], dict[str, Any]]


def _marker(event: Event) -> dict[str, Any]:
    return {"seq": event.seq, "event": event_json(event)}


def _compactions(d: Dashr, since: int) -> tuple[list[str], list[str]]:
    """Checkpoints committed, and pass errors logged, from seq ``since`` on."""
    committed: list[str] = []
    errors: list[str] = []
    for event in d.session.events[since:]:
        checkpoint = checkpoint_of(event)
        if checkpoint is not None:
            committed.append(checkpoint)
        elif event.type == "compaction/end" and "error" in event.data:
            errors.append(str(event.data["error"]))
    return committed, errors


def status(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    s = d.session
    with s.lock:
        cfg = d.config
        return {
            "session": s.id,
            "path": None if s.path is None else str(s.path),
            "events": len(s),
            "surfaceNodes": len(s.surface),
            "tokens": d.measure().total,
            "trigger": cfg.trigger_tokens,
            "window": cfg.context_window_tokens,
            "recencyWindow": cfg.recency_window_tokens,
            "checkpoints": [cp.id for cp in d.checkpoints()],
            "archiveEntries": len(d.archive),
            "engine": cfg.engine,
            "summarizer": d.summarizer.kind,
            "readOnly": s.read_only,
            "protocol": PROTOCOL_VERSION,
            "package": __version__,
        }


def state(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    s = d.session
    with s.lock:
        step = s.open_step
        return {
            "openTurn": s.open_turn,
            "openStep": None if step is None else list(step),
            "pendingToolCalls": s.pending_tool_calls(),
            "systemPrompt": s.system_prompt,
            "readOnly": s.read_only,
            "events": len(s),
            "extraTools": list(d.extra_tools),
        }


def record(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    events = d.record_openai(args["messages"])
    out: dict[str, Any] = {
        "seqs": [e.seq for e in events if e.is_surface],
        "events": len(d.session),
    }
    if args.get("echo"):
        out["recorded"] = [event_json(e) for e in events]
    return out


def request_messages(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    since = len(d.session)
    messages = d.request_messages()
    with d.session.lock:
        compacted, errors = _compactions(d, since)
        return {
            "messages": messages,
            "tools": d.request_tools(),
            "measurement": measurement_json(d.measure()),
            "events": len(d.session),
            "compacted": compacted,
            "compactionErrors": errors,
        }


def request_tools(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"tools": host.controller.request_tools()}


def tool_schemas(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"tools": host.controller.tool_schemas()}


def measure(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return measurement_json(host.controller.measure())


def report_usage(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    event = host.controller.report_usage(args["promptTokens"], args.get("completionTokens"))
    return _marker(event)


def _range(args: Mapping[str, Any]) -> tuple[int | None, int | None]:
    return args.get("startSeq"), args.get("endSeq")


def compact(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    start, end = _range(args)
    if args.get("pruneOnly"):
        if args.get("dryRun"):
            raise ProtocolError("compact: dryRun and pruneOnly cannot be combined")
        pruned = d.prune(start_seq=start, end_seq=end)
        return {"pruned": None if pruned is None else prune_json(pruned)}
    if args.get("dryRun"):
        return {"plan": _dry_run(d, start, end)}
    result = d.compact("manual", start_seq=start, end_seq=end)
    return {"result": None if result is None else compaction_json(result)}


def _dry_run(d: Dashr, start: int | None, end: int | None) -> dict[str, Any] | None:
    """The plan a manual pass would follow now (without the prune that would run first)."""
    if (start is None) != (end is None):
        raise ProtocolError("compact: give both startSeq and endSeq, or neither")
    with d.session.lock:  # measure and plan on one state
        span = None
        if start is not None and end is not None:
            span = check_explicit_range(d.session, start, end)
        measured = d.measure()
        plan = d.engine.plan("manual", measured, span)
        return None if plan is None else plan_json(plan, measured.total)


def prune(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    start, end = _range(args)
    result = host.controller.prune(start_seq=start, end_seq=end)
    return {"result": None if result is None else prune_json(result)}


def handle_overflow(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"changed": host.controller.handle_overflow()}


def outline(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"text": str(host.controller.history_outline())}


def read(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    text = host.controller.history_read(
        checkpoint=args.get("checkpoint"),
        seq=args.get("seq"),
        cursor=args.get("cursor"),
        turn=args.get("turn"),
    )
    return {"text": str(text)}


def search(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    text = host.controller.history_search(
        args["query"],
        checkpoint=args.get("checkpoint"),
        limit=args.get("limit"),
        cursor=args.get("cursor"),
    )
    return {"text": str(text)}


def call_tool(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"text": str(host.controller.call_tool(args["name"], args["arguments"]))}


def configure(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"settings": host.configure(args["settings"])}


def turn(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    s = host.controller.session
    action, reason = args["action"], args.get("reason")
    if reason is not None and action != "end":
        raise ProtocolError(f"turn: reason is only for action 'end', not {action!r}")
    if action == "begin":
        event = s.begin_turn()
    elif action == "end":
        event = host.controller.end_turn(reason or "completed")  # queues turn memory
    elif action == "begin_step":
        event = s.begin_step()
    else:
        event = s.end_step()
    return _marker(event)


def extra_tools(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    tools = args.get("tools")
    if tools is not None:
        d.extra_tools[:] = tools
    return {"tools": list(d.extra_tools)}


def tool_result(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    event = host.controller.session.append_tool_result(
        args["toolCallId"],
        args["text"],
        tool_name=args.get("toolName"),
        is_error=bool(args.get("isError", False)),
    )
    return _marker(event)


def tool_call(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    s = host.controller.session
    with s.lock:
        return {"callSeq": s.tool_call_seq(args["id"]), "resultSeq": s.tool_result_seq(args["id"])}


def _pin_json(pin: Pin) -> dict[str, Any]:
    return {"id": pin.id, "text": pin.text, "seq": pin.seq}


def pin(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    with d.session.lock:  # the pin and the pins after it, as one state
        pinned = d.pin(args["text"])
        return {"pin": _pin_json(pinned), "pins": [_pin_json(p) for p in d.pins()]}


def unpin(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    with d.session.lock:
        removed = d.unpin(args["id"])
        return {"pin": _pin_json(removed), "pins": [_pin_json(p) for p in d.pins()]}


def pins(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    return {"pins": [_pin_json(p) for p in host.controller.pins()]}


def compactions(host: Host, args: dict[str, Any]) -> dict[str, Any]:
    d = host.controller
    with d.session.lock:
        committed, errors = _compactions(d, args.get("since", 0))
        return {"checkpoints": committed, "errors": errors, "events": len(d.session)}


OPS: Mapping[str, Op] = {
    "status": status,
    "state": state,
    "record": record,
    "request_messages": request_messages,
    "request_tools": request_tools,
    "tool_schemas": tool_schemas,
    "measure": measure,
    "report_usage": report_usage,
    "compact": compact,
    "prune": prune,
    "handle_overflow": handle_overflow,
    "outline": outline,
    "read": read,
    "search": search,
    "call_tool": call_tool,
    "configure": configure,
    "turn": turn,
    "extra_tools": extra_tools,
    "tool_result": tool_result,
    "tool_call": tool_call,
    "compactions": compactions,
    "pin": pin,
    "unpin": unpin,
    "pins": pins,
}
"""Operation name -> its function (the schema's ``op`` enum lists the same names)."""

PROGRESS_OPS = frozenset({"request_messages", "compact", "prune", "handle_overflow"})
"""The operations that may run a pass, and so stream progress before their reply."""
