"""What a pass leaves: why a request is still above the trigger, what a prune pass did.

One line each, pure functions of the session, a measurement and the config, so the
``dashr compact`` command and the ``%compact`` magic say the same thing. A line reads::

    the request is still above the trigger: ~31,199 tokens, 1.6× the trigger (20,000) and
    31% of the context window (100,000); the newest unit alone, the assistant message at
    seq 84, is ~30,022 tokens and cannot shrink: pruning keeps its tool calls (120,034 chars
    of arguments) and its text is only 11 chars

The reason is the first that holds: the system prompt and tools alone; the newest unit
alone (the last step or message, which no summary pass condenses); one message
without which the request would fit; else what the request is made of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._checkpoints import is_checkpoint
from .._config import CompactionConfig
from .._events import Event
from .._meter import Measurement
from .._pairing import SYNTHETIC_SOURCE
from .._pruned import is_pruned
from .._session import Session
from .prune import PruneResult, plan_prunes, prunable_kind

__all__ = ["pruned_names", "still_above"]


def still_above(
    session: Session,
    measurement: Measurement,
    config: CompactionConfig,
    *,
    count_tokens: Callable[[str], int],
) -> str | None:
    """How far the measured request is above the trigger and why; None at or under it.

    ``measurement`` must describe ``session``'s current surface; ``count_tokens`` is the
    meter's text counter (it sizes what pruning a message would leave).
    """
    total, trigger = measurement.total, config.trigger_tokens
    if total <= trigger:
        return None
    window = config.context_window_tokens
    head = (
        f"the request is still above the trigger: ~{total:,} tokens, "
        f"{_against(total, trigger)} the trigger ({trigger:,}) and "
        f"{_against(total, window)} the context window ({window:,})"
    )
    events = [session.event(seq) for seq, _tokens in measurement.nodes]
    tokens = [t for _seq, t in measurement.nodes]
    why = _Why(config, count_tokens)
    return f"{head}; {_reason(session, measurement, events, tokens, why)}"


def pruned_names(result: PruneResult) -> str:
    """``2 messages: p812, p815`` (a node whose archive write failed is named by its seq)."""
    names = [n.archive_key or f"seq {n.seq} (not archived)" for n in result.pruned]
    return f"{_count(len(names), 'message')}: {', '.join(names)}"


# --------------------------------------------------------------------------- the reason


def _reason(
    session: Session,
    measurement: Measurement,
    events: Sequence[Event],
    tokens: Sequence[int],
    why: _Why,
) -> str:
    trigger = why.config.trigger_tokens
    if measurement.envelope > trigger:
        return f"the system prompt and tool schemas alone are ~{measurement.envelope:,} tokens"
    units = session.units()
    if units:
        last = units[-1]
        size = sum(tokens[last.start : last.end])
        if size > trigger:
            largest = _largest(range(last.start, last.end), tokens)
            event, t = events[largest], tokens[largest]
            if last.end - last.start == 1:
                return (
                    f"the newest unit alone, {_name(event)}, is ~{size:,} tokens and "
                    f"{why(event, t)}"
                )
            seqs = [event.seq for event in events[last.start : last.end]]
            return (
                f"the newest unit alone (seqs {min(seqs)}-{max(seqs)}, {len(seqs)} messages) "
                f"is ~{size:,} tokens; its largest, {_name(event)}, is ~{t:,} tokens and "
                f"{why(event, t)}"
            )
    over = measurement.total - trigger
    history = [p for p, event in enumerate(events) if not is_checkpoint(event)]
    if history:
        largest = _largest(history, tokens)
        event, t = events[largest], tokens[largest]
        if t >= over:
            return (
                f"without {_name(event)} (~{t:,} tokens) it would fit, and that message "
                f"{why(event, t)}"
            )
    return _made_of(measurement, events, tokens, history, why)


def _made_of(
    measurement: Measurement,
    events: Sequence[Event],
    tokens: Sequence[int],
    history: Sequence[int],
    why: _Why,
) -> str:
    """What the request is made of, and its largest message."""
    checkpoints = [p for p, event in enumerate(events) if is_checkpoint(event)]
    parts = [f"the system prompt and tools (~{measurement.envelope:,} tokens)"]
    if checkpoints:
        size = sum(tokens[p] for p in checkpoints)
        parts.append(f"{_count(len(checkpoints), 'checkpoint')} (~{size:,})")
    if history:
        seqs = [events[p].seq for p in history]
        size = sum(tokens[p] for p in history)
        parts.append(f"{_count(len(history), 'message')} (seqs {min(seqs)}-{max(seqs)}, ~{size:,})")
    text = f"{', '.join(parts[:-1])} and {parts[-1]}" if len(parts) > 1 else parts[0]
    text += " together exceed it"
    if measurement.anchored:
        text += (
            " (the total is the provider's usage report plus what followed it; the local "
            f"count is ~{measurement.counted:,})"
        )
    if history:
        largest = _largest(history, tokens)
        event, t = events[largest], tokens[largest]
        text += f"; the largest message, {_name(event)}, is ~{t:,} tokens and {why(event, t)}"
    return text


class _Why:
    """Why a message is still this large after a pass: a phrase starting with a verb."""

    def __init__(self, config: CompactionConfig, count_tokens: Callable[[str], int]) -> None:
        self.config = config
        self.count_tokens = count_tokens

    def __call__(self, event: Event, tokens: int) -> str:
        config, message = self.config, event.message
        arguments = sum(len(call.arguments) for call in message.tool_calls)
        if is_pruned(message):
            kept = f" (it keeps its tool calls: {arguments:,} chars of arguments)"
            return "is already pruned" + (kept if arguments else "")
        kind = prunable_kind(event)
        if kind is None:
            return f"is a {_label(event)}, which pruning never touches"
        if kind == "user" and tokens <= config.oversize_tokens:
            return (
                f"is under the oversize share ({config.oversize_tokens:,} tokens), below which "
                "pruning leaves user messages alone"
            )
        if kind != "user" and tokens <= config.prune_threshold:
            return f"is under the pruning threshold ({config.prune_threshold:,} tokens)"
        items = plan_prunes(
            [event],
            [tokens],
            [0],
            keep_chars=config.prune_keep_chars,
            count_tokens=self.count_tokens,
        )
        chars = len(message.text)
        if not items and arguments:
            return (
                f"cannot shrink: pruning keeps its tool calls ({arguments:,} chars of arguments) "
                f"and its text is only {chars:,} chars"
            )
        if not items:
            return f"cannot shrink: pruning would keep its text ({chars:,} chars) whole"
        if not config.prune:
            return "is not pruned: pruning is off (prune=False)"
        return f"can still be pruned (to ~{items[0].tokens_after:,} tokens)"


# --------------------------------------------------------------------------- wording


def _against(tokens: int, limit: int) -> str:
    """``1.6×`` above ``limit``, ``31% of`` at or under it."""
    if tokens > limit:
        return f"{tokens / limit:.1f}×"
    return f"{100 * tokens // limit}% of"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _largest(positions: Sequence[int] | range, tokens: Sequence[int]) -> int:
    """The position of the most tokens; the earliest among equals."""
    return max(positions, key=lambda p: (tokens[p], -p))


def _label(event: Event) -> str:
    message = event.message
    if is_checkpoint(event):
        return "checkpoint"
    if event.type == "tool/result":
        return "synthetic tool result" if message.source_kind == SYNTHETIC_SOURCE else "tool output"
    if event.type == "assistant/message":
        return "assistant message"
    if event.type == "context/message":
        return "context message"
    if event.type == "user/message" and message.source_kind != "user":
        return f"user message ({message.source_kind})"
    return "user message" if event.type == "user/message" else event.type


def _name(event: Event) -> str:
    return f"the {_label(event)} at seq {event.seq}"
