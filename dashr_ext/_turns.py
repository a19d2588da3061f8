"""Turns and steps: the fold of ``turn/*`` / ``step/*`` markers over a session log (SPEC §3.3).

A :class:`TurnFold` is fed every marker and every appended surface message by the session.
Markers come from the harness (explicit), from the session around recorded messages
(``"inferred": true``), or, in logs that carry none, are implied by message order while
folding; :meth:`TurnFold.implied_markers` is the one rule for the last two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._events import MARKER_TYPES, EventSpec, Message
from .errors import SurfaceError

__all__ = ["MARKER_TYPES", "Marker", "Step", "Turn", "TurnFold", "Unit", "message_shape"]

Marker = tuple[str, dict[str, Any]]
"""A marker event before it is appended: ``(type, data)``."""


@dataclass(frozen=True, slots=True)
class Step:
    turn: int
    index: int
    start_seq: int
    end_seq: int | None
    """``None`` while the step is executing."""

    @property
    def is_open(self) -> bool:
        return self.end_seq is None


@dataclass(frozen=True, slots=True)
class Turn:
    index: int
    start_seq: int
    end_seq: int | None
    reason: str | None
    steps: tuple[Step, ...]

    @property
    def is_open(self) -> bool:
        return self.end_seq is None


@dataclass(frozen=True, slots=True)
class Unit:
    """An indivisible run of surface nodes for range selection: a whole step or one message.

    ``start``/``end`` are surface positions (``end`` exclusive).
    """

    start: int
    end: int
    is_open: bool


class TurnFold:
    """Mutable fold of turn/step markers (explicit, inferred, or implied by message order)."""

    def __init__(self) -> None:
        # Plain dicts while folding: replaying a long log builds no Turn objects.
        self._turns: list[dict[str, Any]] = []
        self._closed: list[Turn] = []
        """``Turn`` objects of the leading closed turns, built on demand."""
        self._step_of: dict[int, tuple[int, int]] = {}
        """Surface seq -> (turn, step) for nodes appended while that step was open."""
        self._open_step_seqs: list[int] = []
        self.open_turn: int | None = None
        self.open_step: tuple[int, int] | None = None
        """``(turn, step)`` of the step executing right now, if any."""
        self.has_markers = False
        """Whether the log carries markers; turns then follow them, not message order."""
        self.has_explicit_markers = False
        """Whether the log carries a marker the harness wrote (one without ``inferred``)."""

    # ------------------------------------------------------------------ feeding

    def apply_marker(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        # Turns inferred before the first marker are kept, so numbering goes on from there.
        self.has_markers = True
        if not data.get("inferred"):
            self.has_explicit_markers = True
        self._fold(seq, kind, data)

    def apply_message(self, seq: int, message: Message) -> None:
        """Fold one appended surface message (not a replacement node)."""
        if self.has_markers:
            if self.open_step is not None:  # _add_to_open_step, inline: once per message
                self._step_of[seq] = self.open_step
                self._open_step_seqs.append(seq)
            return
        before, after = self.implied_markers(
            message.role, message.source_kind, bool(message.tool_calls)
        )
        for kind, data in before:
            self._fold(seq, kind, data)
        self._add_to_open_step(seq)
        for kind, data in after:
            self._fold(seq, kind, data)

    def apply_closing_result(self, seq: int, call_seq: int, message: Message) -> None:
        """Fold a synthetic result appended to close the call at ``call_seq``.

        It joins the call's step even when that step has ended (the harness marked a new
        step or turn before the newer message that closed the call), so the call and its
        result stay one unit and the executing step holds neither.
        """
        step = self._step_of.get(call_seq)
        if step is None or step == self.open_step:
            self.apply_message(seq, message)
        else:
            self._step_of[seq] = step

    def implied_markers(
        self, role: str, source_kind: str, has_tool_calls: bool
    ) -> tuple[list[Marker], list[Marker]]:
        """Markers implied by one message's arrival now, as (before, after) lists.

        A human user message opens a turn (ending an open one as ``interrupted``); an
        assistant message opens a step (closing the previous one); an assistant message
        without tool calls closes its step and turn.
        """
        before: list[Marker] = []
        after: list[Marker] = []
        turn = self.open_turn
        step = self.open_step
        if role == "user" and source_kind == "user":
            if turn is not None:
                if step is not None:
                    before.append(("step/end", {"turn": step[0], "step": step[1]}))
                before.append(("turn/end", {"turn": turn, "reason": "interrupted"}))
            before.append(("turn/start", {"turn": self.next_turn()}))
        elif role == "assistant":
            next_step = 1
            if turn is None:
                turn = self.next_turn()
                before.append(("turn/start", {"turn": turn}))
            else:
                next_step = self.next_step()
                if step is not None:
                    before.append(("step/end", {"turn": step[0], "step": step[1]}))
            before.append(("step/start", {"turn": turn, "step": next_step}))
            if not has_tool_calls:
                after.append(("step/end", {"turn": turn, "step": next_step}))
                after.append(("turn/end", {"turn": turn, "reason": "completed"}))
        return before, after

    # ------------------------------------------------------------------ explicit markers

    def begin_turn_markers(self) -> list[EventSpec]:
        """The marker that opens a turn now; refused while one is open."""
        if self.open_turn is not None:
            raise SurfaceError(f"turn {self.open_turn} is still open; end it first")
        return [EventSpec("turn/start", {"turn": self.next_turn()})]

    def end_turn_markers(self, reason: str) -> list[EventSpec]:
        """The markers that end the open turn now (its open step first)."""
        turn = self.open_turn
        if turn is None:
            raise SurfaceError("no turn is open")
        specs = []
        if self.open_step is not None:
            specs.append(EventSpec("step/end", {"turn": turn, "step": self.open_step[1]}))
        specs.append(EventSpec("turn/end", {"turn": turn, "reason": reason}))
        return specs

    def begin_step_markers(self) -> list[EventSpec]:
        """The marker that opens the next step of the open turn."""
        if self.open_turn is None:
            raise SurfaceError("no turn is open; call begin_turn() first")
        if self.open_step is not None:
            raise SurfaceError(f"step {self.open_step[1]} is still open; end it first")
        return [EventSpec("step/start", {"turn": self.open_turn, "step": self.next_step()})]

    def end_step_markers(self) -> list[EventSpec]:
        """The marker that ends the open step."""
        if self.open_step is None:
            raise SurfaceError("no step is open")
        turn, step = self.open_step
        return [EventSpec("step/end", {"turn": turn, "step": step})]

    # ------------------------------------------------------------------ queries

    def next_turn(self) -> int:
        return len(self._turns) + 1

    def next_step(self) -> int:
        """Number of the next step in the open turn (1 when no turn is open)."""
        return len(self._turns[-1]["steps"]) + 1 if self._turns and self.open_turn else 1

    def turns(self) -> list[Turn]:
        """Every turn, oldest first (closed turns are built once and reused)."""
        done = self._closed
        while len(done) < len(self._turns) and self._turns[len(done)]["end"] is not None:
            done.append(_turn(self._turns[len(done)]))  # a closed turn never changes again
        return [*done, *(_turn(t) for t in self._turns[len(done) :])]

    def executing_seqs(self) -> set[int]:
        """Seqs of the surface nodes belonging to the step executing right now."""
        return set(self._open_step_seqs)

    def units(self, surface: Sequence[int]) -> list[Unit]:
        """``surface`` split into indivisible units (whole steps, standalone messages)."""
        out: list[Unit] = []
        step_of = self._step_of
        i, n = 0, len(surface)
        while i < n:
            step = step_of.get(surface[i])
            j = i + 1
            if step is not None:
                while j < n and step_of.get(surface[j]) == step:
                    j += 1
            out.append(Unit(i, j, step is not None and step == self.open_step))
            i = j
        return out

    # ------------------------------------------------------------------ the fold

    def _fold(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "turn/start":
            self._begin_turn(seq, int(data["turn"]))
        elif kind == "turn/end":
            self._end_turn(seq, str(data["reason"]))
        elif kind == "step/start":
            self._begin_step(seq, int(data["turn"]), int(data["step"]))
        elif kind == "step/end":
            self._end_step(seq)

    def replace_node(self, old: int, new: int) -> None:
        """``new`` takes ``old``'s place in place (same pairing): it joins ``old``'s step."""
        step = self._step_of.get(old)
        if step is not None:
            self._step_of[new] = step
        if old in self._open_step_seqs:
            self._open_step_seqs[self._open_step_seqs.index(old)] = new

    def _add_to_open_step(self, seq: int) -> None:
        if self.open_step is not None:
            self._step_of[seq] = self.open_step
            self._open_step_seqs.append(seq)

    def _begin_turn(self, seq: int, turn: int) -> None:
        self._turns.append({"index": turn, "start": seq, "end": None, "reason": None, "steps": []})
        self.open_turn = turn
        self.open_step = None

    def _end_turn(self, seq: int, reason: str) -> None:
        if self.open_step is not None:
            self._end_step(seq)
        if self._turns and self._turns[-1]["end"] is None:
            self._turns[-1]["end"] = seq
            self._turns[-1]["reason"] = reason
        self.open_turn = None

    def _begin_step(self, seq: int, turn: int, step: int) -> None:
        if self.open_step is not None:
            self._end_step(seq)
        if self.open_turn is None:
            self._begin_turn(seq, turn)
        self._turns[-1]["steps"].append({"index": step, "start": seq, "end": None})
        self.open_step = (turn, step)
        self._open_step_seqs = []

    def _end_step(self, seq: int) -> None:
        if self.open_step is not None and self._turns and self._turns[-1]["steps"]:
            last = self._turns[-1]["steps"][-1]
            if last["end"] is None:
                last["end"] = seq
        self.open_step = None
        self._open_step_seqs = []


def _turn(t: Mapping[str, Any]) -> Turn:
    steps = tuple(Step(t["index"], s["index"], s["start"], s["end"]) for s in t["steps"])
    return Turn(t["index"], t["start"], t["end"], t["reason"], steps)


def message_shape(spec: EventSpec) -> tuple[str, str, bool]:
    """(role, source kind, has tool calls) of a message spec, before it is validated."""
    msg = spec.data.get("message")
    if not isinstance(msg, Mapping):
        return "", "", False
    source = msg.get("source")
    content = msg.get("content")
    has_calls = isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool-call" for b in content
    )
    return (
        str(msg.get("role")),
        str(source.get("kind") if isinstance(source, Mapping) else ""),
        has_calls,
    )
