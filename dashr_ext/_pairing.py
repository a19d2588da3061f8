"""Tool pairing: which surface node holds each tool call and which holds its result (SPEC §3.2).

The fold the session keeps beside its surface, and the rules a surface change must follow
so that no request ever holds a tool call without its result or a result without its call:

* a tool result answers a call already on the surface that has no result yet;
* a replace never splits a call from its result, unless it is **in place**: one node
  replaced by a node of the same type that keeps the same pairing (a tool result for the
  same call, an assistant message with the same calls, a user message from the same
  source). Pruning shrinks outputs this way (SPEC §6.5), and a late result takes the place
  of the synthetic one that closed its call;
* a call left without a result when a newer user or assistant message arrives is closed by
  a **synthetic result** (source kind :data:`SYNTHETIC_SOURCE`), so balanced cuts exist
  again. Logs written by other tools may still hold such a call with newer messages after
  it: the call is **abandoned**. It blocks no cut and nothing closes it (a result at the
  end of the surface would sit apart from its call and block every cut in between); a
  result recorded for it now is refused (one the other writer logged replays as written).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._events import Event, EventSpec, Message, Replace
from .errors import SurfaceError

__all__ = [
    "SYNTHETIC_SOURCE",
    "CutDepths",
    "ToolPairing",
    "in_place",
    "synthetic_result",
]

SYNTHETIC_SOURCE = "synthetic"
"""``message.source["kind"]`` of a tool result the session wrote for a call that got none."""

_WHY = {
    "superseded": "a newer message arrived before this tool call returned",
    "reopened": "the session was reopened while this tool call was still waiting",
}


def synthetic_result(call_id: str, tool_name: str, reason: str) -> dict[str, Any]:
    """The message of the synthetic result closing ``call_id`` (``reason``: a key of _WHY).

    The text says what happened in words a model reads once: nothing ran to completion
    that it can rely on.
    """
    text = (
        f"[no result recorded: {_WHY[reason]}; the call was interrupted and may not have run, "
        "or run only in part]"
    )
    return {
        "role": "tool",
        "source": {"kind": SYNTHETIC_SOURCE, "reason": reason},
        "content": [{"type": "text", "text": text}],
        "toolCallId": call_id,
        "toolName": tool_name,
        "isError": True,
    }


_IN_PLACE_TYPES = frozenset({"tool/result", "assistant/message", "user/message"})
_MESSAGE_TYPES = frozenset({"user/message", "assistant/message"})


def in_place(old: Event, new_type: str, new: Message) -> bool:
    """Whether ``new`` may take ``old``'s place without changing any pairing.

    Same event type, and: a tool result for the same call; an assistant message with
    exactly the same tool calls; a user message with the same source kind (a checkpoint,
    whose source differs, is never in place).
    """
    if new_type != old.type or new_type not in _IN_PLACE_TYPES:
        return False
    was = old.message
    if new_type == "tool/result":
        return new.tool_call_id == was.tool_call_id
    if new_type == "assistant/message":
        return new.tool_calls == was.tool_calls
    return new.source_kind == was.source_kind and not new.tool_calls


class ToolPairing:
    """The pairing fold: call and result seqs, calls still waiting, synthetic results."""

    def __init__(self) -> None:
        self.call_seq: dict[str, int] = {}
        self.call_name: dict[str, str] = {}
        self.result_seq: dict[str, int] = {}
        self.pending: dict[str, None] = {}
        self.synthetic: dict[str, None] = {}
        """Calls whose latest result is synthetic (a real one may still take its place)."""
        self.abandoned: dict[str, None] = {}
        """Calls without a result that a newer message followed (a log of another writer)."""

    # ------------------------------------------------------------------ checks

    def check_new_calls(self, message: Message) -> None:
        seen: set[str] = set()
        for call in message.tool_calls:
            if call.id in self.call_seq or call.id in seen:
                raise SurfaceError(f"tool call id {call.id!r} is already used in this session")
            seen.add(call.id)

    def check_result(
        self, message: Message, current: set[int], waiting: Callable[[], Sequence[str]]
    ) -> None:
        """Raise unless an appended result answers a current call that has none yet
        (``waiting()``: the calls awaiting a result, named when one is refused)."""
        cid = message.tool_call_id or ""
        call_seq = self.call_seq.get(cid)
        if call_seq is None:
            known = ", ".join(waiting()) or "none"
            raise SurfaceError(
                f"tool result for unknown tool call id {cid!r}; calls awaiting a result: {known}"
            )
        if cid in self.result_seq:
            raise SurfaceError(
                f"tool call {cid!r} already has a result (seq {self.result_seq[cid]})"
            )
        if call_seq not in current:
            raise SurfaceError(f"tool call {cid!r} (seq {call_seq}) is no longer on the surface")

    def replaceable_result(self, tool_call_id: str, current: set[int]) -> int | None:
        """Seq of the current synthetic result a late real result for the call replaces."""
        if tool_call_id not in self.synthetic:
            return None
        seq = self.result_seq.get(tool_call_id)
        return seq if seq is not None and seq in current else None

    # ------------------------------------------------------------------ repairs

    def before_append(self, spec: EventSpec, current: set[int]) -> tuple[list[str], EventSpec]:
        """The calls to close before ``spec`` is appended, and the spec to append.

        A newer user or assistant message first closes the calls still waiting (each gets
        :meth:`synthetic_spec`); a real result for a call closed that way takes the
        synthetic result's place.
        """
        if spec.surface_op != "append":
            return [], spec
        if spec.type in _MESSAGE_TYPES:
            return self.waiting(current), spec
        message = spec.data.get("message")
        if spec.type == "tool/result" and isinstance(message, Mapping):
            cid = message.get("toolCallId")
            if not isinstance(cid, str):
                return [], spec
            at = self.replaceable_result(cid, current)
            if at is not None:
                return [], replace(spec, surface_op=Replace(at, at), source_event_seqs=(at,))
            if cid in self.abandoned and self.call_seq.get(cid) in current:
                known = ", ".join(self.waiting(current)) or "none"
                raise SurfaceError(
                    f"tool call {cid!r} (seq {self.call_seq[cid]}) was abandoned: newer messages "
                    "followed it without a result, and a result now would sit apart from its "
                    f"call; calls awaiting a result: {known}"
                )
        return [], spec

    def synthetic_spec(self, call_id: str, reason: str) -> EventSpec:
        """The ``tool/result`` that closes ``call_id`` (``reason``: ``superseded``/``reopened``)."""
        message = synthetic_result(call_id, self.call_name.get(call_id, ""), reason)
        return EventSpec("tool/result", {"message": message}, "append")

    # ------------------------------------------------------------------ the fold

    def apply(self, seq: int, event_type: str, message: Message, *, appended: bool) -> None:
        """Fold a new surface node (``appended``, or in place of others).

        A user or assistant message appended while calls wait abandons them: this session
        closes such calls before it appends a newer message, so only a log another writer
        wrote gets here (replayed, it folds the same way).
        """
        if self.pending and appended and event_type in _MESSAGE_TYPES:
            self.abandoned.update(self.pending)
            self.pending.clear()
        for call in message.tool_calls:
            self.call_seq[call.id] = seq
            self.call_name[call.id] = call.name
            if call.id not in self.result_seq and call.id not in self.abandoned:
                self.pending[call.id] = None
        cid = message.tool_call_id
        if cid is not None and event_type == "tool/result":
            self.result_seq[cid] = seq
            self.pending.pop(cid, None)
            self.abandoned.pop(cid, None)  # another writer's late result: the log says so
            if message.source_kind == SYNTHETIC_SOURCE:
                self.synthetic[cid] = None
            else:
                self.synthetic.pop(cid, None)

    def waiting(self, current: set[int]) -> list[str]:
        """Current calls without a result, in call order."""
        return [cid for cid in self.pending if self.call_seq[cid] in current]

    # ------------------------------------------------------------------ cuts

    def balanced_cuts(
        self, surface: Sequence[int], current: set[int], position: Callable[[int], int]
    ) -> list[bool]:
        """``cuts[k]``: cutting the surface before position ``k`` splits no pair.

        A call still waiting blocks every cut after it; an abandoned call blocks none.
        Computed from scratch (:class:`CutDepths` keeps the same answer as the surface changes).
        """
        return [depth == 0 for depth in self.cut_depths(surface, current, position)]

    def cut_depths(
        self, surface: Sequence[int], current: set[int], position: Callable[[int], int]
    ) -> list[int]:
        """``depths[k]``: how many call/result pairs a cut before position ``k`` splits."""
        n = len(surface)
        diff = [0] * (n + 2)
        for cid, call_seq in self.call_seq.items():
            if call_seq not in current:
                continue
            a = position(call_seq)
            result_seq = self.result_seq.get(cid)
            if result_seq is None:
                if cid in self.abandoned:
                    continue  # newer messages followed it: no result ever will
                b = n  # waiting: no cut after the call is balanced
            elif result_seq in current:
                b = position(result_seq)
            else:
                continue
            if b > a:
                diff[a + 1] += 1
                diff[b + 1] -= 1
        depths: list[int] = []
        running = 0
        for k in range(n + 1):
            running += diff[k]
            depths.append(running)
        return depths


class CutDepths:
    """:meth:`ToolPairing.cut_depths` of the current surface, kept up to date per change.

    An appended node adds one cut (the previous depth, plus the calls it opens, minus the
    call its result closes); a replace, whose ends are balanced, merges its span's cuts into
    one; a node replaced in place keeps every pair. Only a change that reaches back (a
    message abandoning waiting calls, a late result for an abandoned call: logs of other
    writers) marks the depths stale, to be recomputed from scratch when next asked for.
    """

    __slots__ = ("_depths", "_stale")

    def __init__(self) -> None:
        self._depths = [0]
        self._stale = False

    def fold(
        self,
        pairing: ToolPairing,
        event: Event,
        events: Sequence[Event],
        current: set[int],
        position: Callable[[int], int],
    ) -> None:
        """Fold the surface change of a checked ``event``, before the surface and the
        pairing fold it (``events``: the log up to it)."""
        if self._stale:
            return
        depths = self._depths
        op, event_type, message = event.surface_op, event.type, event.message
        if isinstance(op, Replace):
            a, b = position(op.start_seq), position(op.end_seq)
            if a == b and in_place(events[op.start_seq], event_type, message):
                return  # one node for one: every pair is kept
            if depths[a] or depths[b + 1]:  # not a balanced replace: never on a checked log
                self._stale = True
            else:
                depths[a + 1 : b + 2] = [0]  # the new node opens and closes nothing
            return
        if event_type in _MESSAGE_TYPES and pairing.pending:  # abandons calls: reaches back
            self._stale = True
            return
        delta = 0
        for call in message.tool_calls:
            if call.id not in pairing.result_seq:
                delta += 1
        cid = message.tool_call_id if event_type == "tool/result" else None
        if cid is not None:
            if cid in pairing.abandoned:  # a late result makes the pair block cuts again
                self._stale = True
                return
            if pairing.call_seq.get(cid) in current:
                delta -= 1
        depths.append(depths[-1] + delta)

    def depths(
        self,
        pairing: ToolPairing,
        surface: Sequence[int],
        current: set[int],
        position: Callable[[int], int],
    ) -> list[int]:
        """The depth of every cut (``len(surface) + 1`` of them); do not mutate."""
        if self._stale:
            self._depths = pairing.cut_depths(surface, current, position)
            self._stale = False
        return self._depths
