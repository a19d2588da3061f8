"""The nodes of one completed turn as the working-turn editor receives them (SPEC §6.4).

:func:`turn_nodes` reads a session (no I/O, no writes) and returns the current surface nodes
of one closed turn, in surface order, as :class:`TurnNode` records: what each node is (role,
kind, reasoning, images, tool calls or the call it answers), the blocks it holds, the text the
editor shows for it, and where it sits in the log (the surface seq it occupies, the seqs its
content stands for, whether the surface may be cut on either side of it without splitting a
tool call from its result).

A node belongs to a turn when everything it stands for was appended inside that turn: an
appended node by its own seq, a replacement (a pruned output, an earlier rewrite of the
turn) by the appended events its ``sourceEventSeqs`` lead back to. A node that mixes the turn
with events outside it (a session checkpoint over this and earlier turns) means the turn is
no longer a run of its own, and is refused.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

from .._events import (
    ContentBlock,
    Event,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from ..errors import TurnMemoryError

if TYPE_CHECKING:
    from .._meter import TokenMeter
    from .._session import Session

__all__ = [
    "NodeKind",
    "TurnNode",
    "image_marker",
    "marker_refs",
    "render_content",
    "turn_nodes",
]

NodeKind: TypeAlias = Literal["text", "tool-calls", "tool-result", "checkpoint", "context"]
"""What a node mainly is; reasoning and images are flags beside it (:attr:`TurnNode.label`)."""

CHECKPOINT_SOURCE = "compact-checkpoint"

_MARKER_REF = re.compile(r"<memory-image\b[^>]*?\bref=\"([^\"]*)\"")


def image_marker(block: ImageBlock) -> str:
    """The code-composed text reference of an image: ``<memory-image ref="…" …/>``.

    A rewritten node carries its images as these markers (the bytes no longer ride along with
    every request); the reference names the attachment exactly, so it can be read back.
    """
    attrs = [f'ref="{html.escape(block.attachment_id)}"']
    attrs.append(f'media-type="{html.escape(block.media_type)}"')
    for name, value in (("width", block.width), ("height", block.height), ("bytes", block.bytes)):
        if value is not None:
            attrs.append(f'{name}="{value}"')
    return f"<memory-image {' '.join(attrs)}/>"


def marker_refs(text: str) -> tuple[str, ...]:
    """The attachment ids of the ``<memory-image …/>`` markers in ``text``, in order."""
    return tuple(html.unescape(ref) for ref in _MARKER_REF.findall(text))


def render_content(
    content: Sequence[ContentBlock],
    *,
    tool_call_id: str | None = None,
    tool_name: str | None = None,
    is_error: bool | None = None,
) -> str:
    """The text the editor shows for ``content``: every block in order, reasoning included.

    Text as it is; reasoning between ``<reasoning>`` tags; a tool call as
    ``[tool call <id>: <name>(<arguments>)]``; an image as its :func:`image_marker`. A tool
    result (``tool_call_id`` given) opens with a line naming the call it answers.
    """
    parts: list[str] = []
    if tool_call_id is not None:
        error = ", error" if is_error else ""
        parts.append(f"[tool result for {tool_call_id} ({tool_name or 'tool'}){error}]")
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ReasoningBlock):
            parts.append(f"<reasoning>\n{block.text}\n</reasoning>")
        elif isinstance(block, ToolCallBlock):
            parts.append(f"[tool call {block.id}: {block.name}({block.arguments})]")
        else:
            parts.append(image_marker(block))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class TurnNode:
    """One current surface node of a completed turn, as the editor's input."""

    position: int
    """0-based place in the turn (the editor's ``n<position + 1>``)."""
    seq: int
    """Seq of the surface event the node is: the seq a rewrite over it shadows."""
    provenance: tuple[int, ...]
    """The seqs the node's content stands for: its own seq when it was appended, else its
    ``sourceEventSeqs`` (a landing's ``sourceEventSeqs`` include these)."""
    event_type: str
    role: str
    """``user``, ``assistant``, ``tool`` or ``context``."""
    kind: NodeKind
    source_kind: str
    content: tuple[ContentBlock, ...]
    """The node's blocks, as the request is rendered from them."""
    text: str
    """What the editor shows for it (:func:`render_content`)."""
    tool_call_ids: tuple[str, ...] = ()
    """Ids of the tool calls an assistant node makes."""
    tool_call_id: str | None = None
    """The call a tool result answers."""
    tool_name: str | None = None
    is_error: bool | None = None
    balanced_before: bool = True
    """Cutting the surface right before this node splits no tool call from its result."""
    balanced_after: bool = True
    """Cutting the surface right after this node splits no tool call from its result."""
    tokens: int | None = None
    """The node's tokens as sent, when a meter was given."""
    turn: int | None = None
    """The 1-based turn the node was read from (:func:`turn_nodes`): a rewrite names where
    the originals are, ``history_read(turn=N)``."""

    @property
    def chars(self) -> int:
        return len(self.text)

    @property
    def has_reasoning(self) -> bool:
        return any(isinstance(b, ReasoningBlock) for b in self.content)

    @property
    def images(self) -> tuple[ImageBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ImageBlock))

    @property
    def image_markers(self) -> tuple[str, ...]:
        """The :func:`image_marker` of each image, in order (what a rewrite must keep)."""
        return tuple(image_marker(b) for b in self.images)

    @property
    def label(self) -> str:
        """The kind with its flags, e.g. ``tool-calls+reasoning`` or ``text+2 images``."""
        flags: list[str] = [self.kind]
        if self.has_reasoning:
            flags.append("reasoning")
        if n := len(self.images):
            flags.append("image" if n == 1 else f"{n} images")
        return "+".join(flags)


def node_from_event(
    position: int,
    event: Event,
    *,
    balanced_before: bool = True,
    balanced_after: bool = True,
    meter: TokenMeter | None = None,
    turn: int | None = None,
) -> TurnNode:
    """The :class:`TurnNode` of one surface event at ``position`` in its turn ``turn``."""
    message = event.message
    calls = tuple(c.id for c in message.tool_calls)
    kind: NodeKind
    if message.role == "tool":
        kind = "tool-result"
    elif message.source_kind == CHECKPOINT_SOURCE:
        kind = "checkpoint"
    elif message.role == "context":
        kind = "context"
    elif calls:
        kind = "tool-calls"
    else:
        kind = "text"
    provenance = (
        (event.seq,)
        if event.surface_op == "append" or not event.source_event_seqs
        else tuple(sorted(set(event.source_event_seqs)))
    )
    return TurnNode(
        position=position,
        seq=event.seq,
        provenance=provenance,
        event_type=event.type,
        role=message.role,
        kind=kind,
        source_kind=message.source_kind,
        content=message.content,
        text=render_content(
            message.content,
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            is_error=message.is_error,
        ),
        tool_call_ids=calls,
        tool_call_id=message.tool_call_id,
        tool_name=message.tool_name,
        is_error=message.is_error,
        balanced_before=balanced_before,
        balanced_after=balanced_after,
        tokens=meter.node_tokens(event) if meter is not None else None,
        turn=turn,
    )


def turn_nodes(
    session: Session, turn: int, *, meter: TokenMeter | None = None
) -> tuple[TurnNode, ...]:
    """The current surface nodes of closed turn ``turn`` (its 1-based number), in order.

    Raises :class:`~dashr_ext.errors.TurnMemoryError` when the turn is unknown or still open,
    has no node on the surface, or is no longer a contiguous run of its own nodes (a node
    covers it together with events outside it, or a foreign node sits between its nodes).
    Reads the session under its lock; writes nothing.
    """
    with session.lock:
        matches = [t for t in session.turns if t.index == turn]
        if not matches:
            known = [t.index for t in session.turns]
            shown = f"turns {known[0]}-{known[-1]}" if known else "no turns yet"
            raise TurnMemoryError(f"turn {turn}: no such turn (this session has {shown})")
        found = matches[-1]
        if found.end_seq is None:
            raise TurnMemoryError(
                f"turn {turn} is still open; only a turn that has ended (turn/end) can be rewritten"
            )
        start, end = found.start_seq, found.end_seq
        membership = _Membership(session, start, end)
        surface = session.surface
        inside = [
            session.position(s)
            for s in range(start, end + 1)
            if session.is_current(s) and membership.of(s) != "out"
        ]
        if inside:
            lo, hi = min(inside), max(inside)
            while lo > 0 and membership.of(surface[lo - 1]) == "in":
                lo -= 1
            while hi + 1 < len(surface) and membership.of(surface[hi + 1]) == "in":
                hi += 1
            around = [surface[k] for k in (lo - 1, hi + 1) if 0 <= k < len(surface)]
        else:  # every node of the turn was replaced: look for the replacements
            found_at = [k for k, s in enumerate(surface) if s > end and membership.of(s) != "out"]
            if not found_at:
                raise TurnMemoryError(
                    f"turn {turn} has no node on the current surface (its events {start}-{end} "
                    "are all shadowed by nodes that cover other events too)"
                )
            lo, hi = found_at[0], found_at[-1]
            around = []
        for seq in (*surface[lo : hi + 1], *around):
            if membership.of(seq) == "mixed":
                raise TurnMemoryError(
                    f"turn {turn} is no longer a run of its own: surface node {seq} covers "
                    f"events of this turn ({start}-{end}) together with events outside it"
                )
        foreign = [s for s in surface[lo : hi + 1] if membership.of(s) != "in"]
        if foreign:
            raise TurnMemoryError(
                f"turn {turn} is not contiguous on the surface: node {foreign[0]} from outside "
                f"the turn sits between its nodes"
            )
        cuts = session.balanced_cuts()
        return tuple(
            node_from_event(
                k - lo,
                session.event(surface[k]),
                balanced_before=cuts[k],
                balanced_after=cuts[k + 1],
                meter=meter,
                turn=turn,
            )
            for k in range(lo, hi + 1)
        )


class _Membership:
    """Whether a surface node stands for events of the window ``start..end`` only."""

    __slots__ = ("_end", "_memo", "_session", "_start")

    def __init__(self, session: Session, start: int, end: int) -> None:
        self._session = session
        self._start = start
        self._end = end
        self._memo: dict[int, Literal["in", "out", "mixed"]] = {}

    def of(self, seq: int) -> Literal["in", "out", "mixed"]:
        found = self._memo.get(seq)
        if found is None:
            origins = self._origins(seq)
            inside = sum(1 for s in origins if self._start <= s <= self._end)
            found = "out" if not inside else "in" if inside == len(origins) else "mixed"
            self._memo[seq] = found
        return found

    def _origins(self, seq: int) -> set[int]:
        """The appended surface events ``seq`` leads back to through ``sourceEventSeqs``."""
        session = self._session
        out: set[int] = set()
        seen: set[int] = set()
        stack = [seq]
        while stack:
            s = stack.pop()
            if s in seen or not 0 <= s < len(session):
                continue
            seen.add(s)
            event = session.event(s)
            if event.surface_op is None:
                continue  # a log-only event (a checkpoint names its compaction/summary)
            if event.surface_op == "append" or not event.source_event_seqs:
                out.add(s)
            else:
                stack.extend(event.source_event_seqs)
        return out
