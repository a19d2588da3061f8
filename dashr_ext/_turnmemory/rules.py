"""The rules a rewritten turn must keep to land (SPEC §6.4): the pure checks of the editor.

:class:`WorkingNode` is one current node of a working turn; :func:`final_problems` lists every
rule a working turn breaks, :func:`cut_points` where a landing slice may begin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._events import ContentBlock
from .nodes import TurnNode, marker_refs, render_content

__all__ = [
    "TurnProblem",
    "WorkingNode",
    "cut_points",
    "final_problems",
    "original_id",
    "tool_pairs",
]


@dataclass(frozen=True, slots=True)
class WorkingNode:
    """A current node of the working turn, as plain data."""

    id: str
    role: str
    kind: str
    """An original's kind with its flags (``tool-calls+reasoning``); ``text`` or
    ``tool-result`` for a produced node."""
    content: tuple[ContentBlock, ...]
    """An original's blocks as they are; a produced node's one text block."""
    text: str
    """An original's rendered blocks (reasoning included); a produced node's accepted text."""
    sources: tuple[int, ...]
    """Original positions the content was derived from (a contiguous run)."""
    landing: tuple[int, ...]
    """Original positions the node occupies (a contiguous run; all slices partition the turn)."""
    changed: bool
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool | None = None

    @property
    def view(self) -> str:
        """What :meth:`TurnEditor.read` shows: a produced tool result opens with its call."""
        if self.changed and self.role == "tool":
            return render_content(
                self.content,
                tool_call_id=self.tool_call_id,
                tool_name=self.tool_name,
                is_error=self.is_error,
            )
        return self.text


@dataclass(frozen=True, slots=True)
class TurnProblem:
    """One broken rule of the final turn: ``rule`` names it, ``message`` says what to fix."""

    rule: str
    message: str


def original_id(position: int) -> str:
    return f"n{position + 1}"


# --------------------------------------------------------------------------- rules


def cut_points(originals: Sequence[TurnNode]) -> tuple[bool, ...]:
    """``cuts[k]``: a landing slice may start at position ``k`` (``0…N``): cutting there
    parts no tool call in the turn from its result, and the session's own pairing agrees."""
    return tuple(
        depth == 0 and ok
        for depth, ok in zip(_depths(originals), _session_cuts(originals), strict=True)
    )


def _depths(originals: Sequence[TurnNode]) -> list[int]:
    """``depths[k]``: how many calls answered inside the turn a cut at ``k`` parts."""
    n = len(originals)
    crossing = [0] * (n + 2)
    for lo, hi, _call in tool_pairs(originals):
        crossing[lo + 1] += 1  # cuts lo+1 … hi are crossed
        crossing[hi + 1] -= 1
    depths = []
    depth = 0
    for k in range(n + 1):
        depth += crossing[k]
        depths.append(depth)
    return depths


def _session_cuts(originals: Sequence[TurnNode]) -> list[bool]:
    """The session's balanced cuts at positions ``0…N`` of the turn."""
    return [n.balanced_before for n in originals] + [originals[-1].balanced_after]


def tool_pairs(originals: Sequence[TurnNode]) -> list[tuple[int, int, str]]:
    """``(call position, result position, call id)`` of every call answered inside the turn."""
    calls: dict[str, int] = {}
    for node in originals:
        for cid in node.tool_call_ids:
            calls.setdefault(cid, node.position)
    return [
        (calls[node.tool_call_id], node.position, node.tool_call_id)
        for node in originals
        if node.role == "tool" and node.tool_call_id in calls
    ]


def final_problems(
    originals: Sequence[TurnNode], nodes: Sequence[WorkingNode]
) -> tuple[TurnProblem, ...]:
    """Every rule ``nodes`` (a working turn over ``originals``) breaks; empty when it may land.

    Shape (a user node first, an assistant node last); coverage (the landing slices partition
    the turn in order, ids unique); provenance (sources a contiguous run holding the slice; a
    produced node carries only its sources' image markers; a produced tool result sits on the
    one result it rewrites); tool pairs (a result stays a tool node exactly when its call stays
    unchanged, and a call absorbed shares its node with its results); images (each image of a
    rewritten original appears as its marker in a node rewritten from it); reasoning (no
    original that holds reasoning stays unchanged); no produced node is empty.
    """
    problems: list[TurnProblem] = []

    def add(rule: str, message: str) -> None:
        problems.append(TurnProblem(rule, message))

    count = len(originals)
    if not nodes:
        return (TurnProblem("coverage", "the working turn holds no node"),)
    if nodes[0].role != "user":
        add("shape", f"the turn must start with a user node; {nodes[0].id} is {nodes[0].role}")
    if nodes[-1].role != "assistant":
        add(
            "shape",
            f"the turn must end with an assistant node; {nodes[-1].id} is {nodes[-1].role}",
        )
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids):
        add(
            "coverage",
            f"node ids repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}",
        )
    laid = [p for n in nodes for p in n.landing]
    if laid != list(range(count)) or any(not n.landing for n in nodes):
        add(
            "coverage",
            f"the landing slices must cover positions 0-{count - 1} once each, in order; "
            f"they hold {laid}",
        )
        return tuple(problems)  # owners below need a partition
    owner = {p: n for n in nodes for p in n.landing}
    outside = [
        d == 0 and not ok
        for d, ok in zip(_depths(originals), _session_cuts(originals), strict=True)
    ]
    for n in nodes:
        _node_rules(n, originals, add)
        if n.changed and n.role != "tool" and (outside[n.landing[0]] or outside[n.landing[-1] + 1]):
            add(
                "tool-pair",
                f"{n.id} would land over part of a tool call and its result that reach outside "
                "this turn; leave those nodes unchanged",
            )
    for call, result, cid in tool_pairs(originals):
        held, answer = owner[call], owner[result]
        if not held.changed and answer.role != "tool":
            add(
                "tool-pair",
                f"the result of call {cid} ({original_id(result)}) is absorbed into "
                f"{answer.id} while its call stays unchanged in {held.id}: absorb the call "
                "with it, or rewrite the result one-to-one as a tool node",
            )
        elif held.changed and answer is not held:
            where = (
                f"stays a tool node in {answer.id}"
                if answer.role == "tool"
                else f"is in {answer.id}"
            )
            add(
                "tool-pair",
                f"call {cid} is absorbed into {held.id} but its result "
                f"({original_id(result)}) {where}: a call and its results go into the "
                "same node",
            )
    for original in originals:
        node = owner[original.position]
        if node.changed:
            continue
        if original.has_reasoning:
            add(
                "reasoning",
                f"{node.id} holds raw reasoning and is unchanged: rewrite it (raw reasoning "
                "never lands; keep what it established as plain text)",
            )
    for original in originals:
        if owner[original.position].changed:
            for marker in original.image_markers:
                if not any(
                    n.changed and original.position in n.sources and marker in n.text for n in nodes
                ):
                    add(
                        "image",
                        f"the image of {original_id(original.position)} appears in no node "
                        f"rewritten from it: keep its marker {marker} verbatim",
                    )
    return tuple(problems)


def _node_rules(
    n: WorkingNode, originals: Sequence[TurnNode], add: Callable[[str, str], None]
) -> None:
    """The rules of one node: provenance, tool rewrites, empty text."""
    a = n.landing[0]
    if not n.changed:
        if n.sources != n.landing or len(n.landing) != 1:
            add("provenance", f"{n.id} is unchanged but does not stand for its own position")
        return
    run = tuple(range(n.sources[0], n.sources[-1] + 1)) if n.sources else ()
    if n.sources != run or not set(n.landing) <= set(n.sources):
        add(
            "provenance",
            f"{n.id}'s sources {list(n.sources)} are not a contiguous run holding its landing "
            f"slice {list(n.landing)}: a node may only use what the range it replaced held",
        )
    allowed = {i.attachment_id for p in n.sources for i in originals[p].images}
    foreign = [ref for ref in marker_refs(n.text) if ref not in allowed]
    if foreign:
        add(
            "provenance",
            f"{n.id} carries the image reference {foreign[0]!r} from outside its range",
        )
    if not n.text.strip():
        add("empty", f"{n.id} has no text")
    if n.role == "tool":
        old = originals[a]
        if len(n.landing) != 1 or old.role != "tool" or old.tool_call_id != n.tool_call_id:
            add(
                "tool-rewrite",
                f"{n.id} is a tool result but does not sit on the one result of call "
                f"{n.tool_call_id} it rewrites",
            )
