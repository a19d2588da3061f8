"""The working-turn editor: a pure, in-memory rewrite of one completed turn (SPEC §6.4).

The turn's N current nodes (:class:`~dashr_ext._turnmemory.nodes.TurnNode`) get opaque ids
``n1…nN`` in turn order; every node an edit produces gets the next ``r<k>`` (never reused).
Each current node keeps two relations to the original positions ``0…N-1``:

* its **semantic sources**: the positions its content was derived from. A replace gives
  every node it produces the union of the replaced nodes' sources, so a node can use only
  what the range it replaced held (provenance); sources of different nodes may overlap;
* its **landing slice**: the positions it will occupy on the surface. The slices of the
  current nodes always partition ``0…N-1`` exactly, in order.

A replace over a contiguous run of current ids may produce up to that run's **capacity**
nodes: the number of pieces its positions split into at the cuts that part no tool call from
its result (a piece is what one replace event can land on). The first ``M-1`` produced nodes
take one piece each and the last takes the rest, so a user node produced first lands where the
run began. A tool result may also be rewritten one-to-one: content only, the same call.

Nothing here writes anything. The state is immutable and swapped whole after an edit is
accepted, so a refused edit (:class:`~dashr_ext.errors.TurnEditError`) leaves it exactly as it
was. :meth:`TurnEditor.validate_final` checks the rules a landing relies on; how the result
lands in the log is the landing plan's concern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .._events import TextBlock, block_to_json
from ..errors import StaleNodeError, TurnEditError, TurnMemoryError, TurnValidationError
from .nodes import TurnNode, marker_refs
from .rules import TurnProblem, WorkingNode, cut_points, final_problems, original_id

__all__ = [
    "DEFAULT_READ_MAX_CHARS",
    "CatalogRow",
    "EditorState",
    "NewNode",
    "ReadResult",
    "TurnEditor",
    "TurnProblem",
    "WorkingNode",
    "catalog_text",
    "final_problems",
]

DEFAULT_READ_MAX_CHARS = 20_000
"""Characters one :meth:`TurnEditor.read` returns at most, unless the editor is given less."""

ROLES = ("user", "assistant", "tool")
"""The roles a produced node may have."""

_ID = re.compile(r"[nr][1-9][0-9]*")
_PREVIEW_CHARS = 80


@dataclass(frozen=True, slots=True)
class NewNode:
    """One node a replace produces: a user or assistant text, or a tool result's new content."""

    role: str
    text: str
    tool_call_id: str | None = None
    """For a ``tool`` node: the call it answers (the rewritten result's; ``None`` keeps it)."""

    @classmethod
    def from_json(cls, obj: object, where: str = "node") -> NewNode:
        """Parse ``{"role", "content"}`` (``content`` a string; ``toolCallId`` for a tool node)."""
        if isinstance(obj, NewNode):
            return obj
        if not isinstance(obj, Mapping):
            raise TurnEditError(
                f"{where}: expected an object with role and content, got {type(obj).__name__}"
            )
        role, text = obj.get("role"), obj.get("content", obj.get("text"))
        call = obj.get("toolCallId", obj.get("tool_call_id"))
        if not isinstance(role, str):
            raise TurnEditError(f"{where}.role: expected one of {', '.join(ROLES)}")
        if not isinstance(text, str):
            raise TurnEditError(f"{where}.content: expected a string (the node's text)")
        if call is not None and not isinstance(call, str):
            raise TurnEditError(f"{where}.toolCallId: expected a string or nothing")
        return cls(role, text, call)


@dataclass(frozen=True, slots=True)
class EditorState:
    """The accepted state: current nodes in order, which ids replaced which, ids issued."""

    nodes: tuple[WorkingNode, ...]
    replaced: Mapping[str, tuple[str, ...]]
    """Every id an edit replaced -> the ids that edit produced."""
    issued: int
    """How many ``r`` ids were given out (the next is ``r<issued + 1>``)."""
    revision: int
    """Accepted edits so far."""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One line of :meth:`TurnEditor.list`."""

    id: str
    role: str
    kind: str
    chars: int
    changed: bool
    capacity: int
    """The most nodes a replace of this node alone may produce."""
    positions: int
    """Original positions its landing slice holds."""
    sources: tuple[str, ...]
    """The original ids its content came from."""
    rewrite_required: str | None
    """Why an unchanged node must be rewritten before the turn is valid (raw reasoning)."""
    preview: str


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One page of the text of the nodes read; ``str()`` adds where the next page starts."""

    ids: tuple[str, ...]
    text: str
    offset: int
    next_offset: int | None
    """Where the next page starts, or ``None`` when this page reaches the end."""
    total_chars: int

    def __str__(self) -> str:
        if self.next_offset is None:
            return self.text
        rest = self.total_chars - self.next_offset
        return (
            f"{self.text}\n[… {rest:,} more characters: read the same nodes again with "
            f"offset={self.next_offset}]"
        )


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW_CHARS else flat[: _PREVIEW_CHARS - 1] + "…"


class TurnEditor:
    """A working copy of one turn's nodes, edited by :meth:`replace`, checked by
    :meth:`validate_final`. Pure: it holds data and never touches a session."""

    def __init__(
        self, originals: Sequence[TurnNode], *, read_max_chars: int = DEFAULT_READ_MAX_CHARS
    ) -> None:
        nodes = tuple(originals)
        if not nodes:
            raise TurnMemoryError("a working turn needs at least one node; got none")
        if [n.position for n in nodes] != list(range(len(nodes))):
            raise TurnMemoryError("turn nodes must come in turn order with positions 0, 1, 2, …")
        if type(read_max_chars) is not int or read_max_chars < 1:
            raise TurnMemoryError(f"read_max_chars: expected an int >= 1, got {read_max_chars!r}")
        self._originals = nodes
        self._read_max = read_max_chars
        self._cuts = cut_points(nodes)
        self._state = EditorState(
            nodes=tuple(
                WorkingNode(
                    id=original_id(n.position),
                    role=n.role,
                    kind=n.label,
                    content=n.content,
                    text=n.text,
                    sources=(n.position,),
                    landing=(n.position,),
                    changed=False,
                    tool_call_id=n.tool_call_id,
                    tool_name=n.tool_name,
                    is_error=n.is_error,
                )
                for n in nodes
            ),
            replaced=MappingProxyType({}),
            issued=0,
            revision=0,
        )

    # ------------------------------------------------------------------ state

    @property
    def originals(self) -> tuple[TurnNode, ...]:
        return self._originals

    @property
    def state(self) -> EditorState:
        """The accepted state (immutable)."""
        return self._state

    @property
    def nodes(self) -> tuple[WorkingNode, ...]:
        """The current nodes, in turn order."""
        return self._state.nodes

    @property
    def revision(self) -> int:
        """Accepted edits so far (a worker made progress when it grew)."""
        return self._state.revision

    def as_data(self) -> tuple[dict[str, Any], ...]:
        """The current nodes as plain data, with the seqs a landing needs: ``sourceSeqs``
        (what the sources stand for in the log) and ``landingSeqs`` (the surface nodes the
        landing slice shadows)."""
        originals = self._originals
        return tuple(
            {
                "id": n.id,
                "role": n.role,
                "kind": n.kind,
                "changed": n.changed,
                "content": [block_to_json(b) for b in n.content],
                "toolCallId": n.tool_call_id,
                "toolName": n.tool_name,
                "isError": n.is_error,
                "sources": list(n.sources),
                "landing": list(n.landing),
                "sourceSeqs": sorted({s for p in n.sources for s in originals[p].provenance}),
                "landingSeqs": [originals[p].seq for p in n.landing],
            }
            for n in self._state.nodes
        )

    # ------------------------------------------------------------------ list and read

    def list(self) -> tuple[CatalogRow, ...]:
        """The catalog: every current node with its role, kind, size and capacity."""
        originals = self._originals
        rows = []
        for n in self._state.nodes:
            required = None
            if not n.changed and originals[n.landing[0]].has_reasoning:
                required = "it holds raw reasoning, which never lands"
            rows.append(
                CatalogRow(
                    id=n.id,
                    role=n.role,
                    kind=n.kind,
                    chars=len(n.view),
                    changed=n.changed,
                    capacity=self._capacity(n.landing[0], n.landing[-1]),
                    positions=len(n.landing),
                    sources=tuple(original_id(p) for p in n.sources),
                    rewrite_required=required,
                    preview=_preview(n.view),
                )
            )
        return tuple(rows)

    def read(
        self, ids: str | Sequence[str], *, offset: int = 0, max_chars: int | None = None
    ) -> ReadResult:
        """The text of the nodes ``ids`` names (ids, ``"first..last"`` ranges, or a list of
        them), from character ``offset`` on, at most ``max_chars`` (and the editor's cap).

        An unchanged original shows its blocks in order, reasoning included; a produced node
        its accepted text. The same nodes read the same, so an offset stays valid.
        """
        limit = self._read_max
        if max_chars is not None:
            if type(max_chars) is not int or max_chars < 1:
                raise TurnEditError(f"max_chars: expected an int >= 1, got {max_chars!r}")
            limit = min(limit, max_chars)
        if type(offset) is not int or offset < 0:
            raise TurnEditError(f"offset: expected an int >= 0, got {offset!r}")
        picks = (ids,) if isinstance(ids, str) else tuple(ids)
        if not picks:
            raise TurnEditError("ids: name one or more nodes (an id, or a range like n2..n5)")
        nodes = self._state.nodes
        chosen: dict[int, None] = {}
        for pick in picks:
            if not isinstance(pick, str):
                raise TurnEditError(f"ids: expected id strings, got {type(pick).__name__}")
            first, last = self._range(pick)
            chosen.update(dict.fromkeys(range(first, last + 1)))
        document = "\n\n".join(
            f"[{nodes[i].id} · {nodes[i].role} · {nodes[i].kind}]\n{nodes[i].view}" for i in chosen
        )
        total = len(document)
        if offset > total or (offset == total and total > 0):
            raise TurnEditError(
                f"offset {offset} is past the end: these nodes hold {total} characters "
                f"(offsets 0-{max(total - 1, 0)})"
            )
        page = document[offset : offset + limit]
        end = offset + len(page)
        return ReadResult(
            ids=tuple(nodes[i].id for i in chosen),
            text=page,
            offset=offset,
            next_offset=end if end < total else None,
            total_chars=total,
        )

    # ------------------------------------------------------------------ replace

    def capacity(self, target: str | Sequence[str]) -> int:
        """The most nodes a replace of ``target`` (an id, ``"a..b"`` or ``(a, b)``) may produce."""
        first, last = self._range(target)
        nodes = self._state.nodes
        return self._capacity(nodes[first].landing[0], nodes[last].landing[-1])

    def replace(
        self, target: str | Sequence[str], nodes: Sequence[NewNode | Mapping[str, Any]]
    ) -> tuple[str, ...]:
        """Replace the contiguous run ``target`` (an id, ``"first..last"`` or ``(first, last)``)
        with ``nodes`` (1 to its capacity); returns the new ids. Refused edits change nothing."""
        first, last = self._range(target)
        state = self._state
        run = state.nodes[first : last + 1]
        if isinstance(nodes, str | bytes | Mapping) or not isinstance(nodes, Sequence):
            raise TurnEditError("nodes: expected a list of nodes ({role, content}), 1 or more")
        new = tuple(NewNode.from_json(n, f"nodes[{k}]") for k, n in enumerate(nodes))
        span = f"{run[0].id}..{run[-1].id}" if len(run) > 1 else run[0].id
        a, b = run[0].landing[0], run[-1].landing[-1]
        capacity = self._capacity(a, b)
        if not new:
            count = "1 node" if capacity == 1 else f"1 to {capacity} nodes"
            raise TurnEditError(f"nodes: give {count} to put in place of {span}")
        if len(new) > capacity:
            raise TurnEditError(
                f"{span} can be replaced by at most {capacity} node"
                f"{'s' if capacity != 1 else ''} ({b - a + 1} original position"
                f"{'s' if b != a else ''}, in {capacity} piece{'s' if capacity != 1 else ''} "
                f"that part no tool call from its result); got {len(new)}: merge some, or "
                "replace a wider range"
            )
        sources = tuple(sorted({p for n in run for p in n.sources}))
        allowed = {b.attachment_id for p in sources for b in self._originals[p].images}
        for k, node in enumerate(new):
            self._check_new(k, node, run, span, allowed)
        slices = self._slices(a, b, len(new))
        ids = tuple(f"r{state.issued + k + 1}" for k in range(len(new)))
        produced = tuple(
            self._produced(ident, node, run[0], sources, landing)
            for ident, node, landing in zip(ids, new, slices, strict=True)
        )
        replaced = dict(state.replaced)
        replaced.update((n.id, ids) for n in run)
        self._state = EditorState(
            nodes=(*state.nodes[:first], *produced, *state.nodes[last + 1 :]),
            replaced=MappingProxyType(replaced),
            issued=state.issued + len(new),
            revision=state.revision + 1,
        )
        return ids

    def _check_new(
        self,
        k: int,
        node: NewNode,
        run: tuple[WorkingNode, ...],
        span: str,
        allowed: set[str],
    ) -> None:
        where = f"nodes[{k}]"
        if node.role not in ROLES:
            raise TurnEditError(
                f"{where}.role: expected one of {', '.join(ROLES)}, got {node.role!r}"
            )
        if not node.text.strip():
            raise TurnEditError(f"{where}.content: empty; every node needs some text")
        if node.role == "tool":
            old = run[0]
            if len(run) != 1 or old.role != "tool":
                raise TurnEditError(
                    f"{where}: a tool node only rewrites one tool result in place; {span} is "
                    f"not a single tool result (absorb a call and its results into an "
                    "assistant node instead)"
                )
            if node.tool_call_id not in (None, old.tool_call_id):
                raise TurnEditError(
                    f"{where}.toolCallId: a rewritten result keeps its call "
                    f"{old.tool_call_id!r}; got {node.tool_call_id!r}"
                )
        elif node.tool_call_id is not None:
            raise TurnEditError(f"{where}.toolCallId: only a tool node answers a call")
        foreign = [ref for ref in marker_refs(node.text) if ref not in allowed]
        if foreign:
            raise TurnEditError(
                f"{where}: the image reference {foreign[0]!r} is not in {span}; a node may "
                "only carry the <memory-image/> markers of the nodes it replaces"
            )

    def _produced(
        self,
        ident: str,
        node: NewNode,
        old: WorkingNode,
        sources: tuple[int, ...],
        landing: tuple[int, ...],
    ) -> WorkingNode:
        tool = node.role == "tool"
        return WorkingNode(
            id=ident,
            role=node.role,
            kind="tool-result" if tool else "text",
            content=(TextBlock(node.text),),
            text=node.text,
            sources=sources,
            landing=landing,
            changed=True,
            tool_call_id=old.tool_call_id if tool else None,
            tool_name=old.tool_name if tool else None,
            is_error=old.is_error if tool else None,
        )

    # ------------------------------------------------------------------ validation

    def final_problems(self) -> tuple[TurnProblem, ...]:
        """Every rule the current state breaks (empty when it may land)."""
        return final_problems(self._originals, self._state.nodes)

    def validate_final(self) -> None:
        """Raise :class:`~dashr_ext.errors.TurnValidationError` listing every broken rule."""
        problems = self.final_problems()
        if problems:
            raise TurnValidationError(tuple((p.rule, p.message) for p in problems))

    # ------------------------------------------------------------------ internals

    def _capacity(self, a: int, b: int) -> int:
        cuts = self._cuts
        return 1 + sum(1 for k in range(a + 1, b + 1) if cuts[k])

    def _slices(self, a: int, b: int, m: int) -> tuple[tuple[int, ...], ...]:
        """Positions ``a..b`` in ``m`` slices: one piece each, the last the rest."""
        bounds = [k for k in range(a + 1, b + 1) if self._cuts[k]][: m - 1]
        starts = [a, *bounds]
        ends = [*bounds, b + 1]
        return tuple(tuple(range(s, e)) for s, e in zip(starts, ends, strict=True))

    def _range(self, target: str | Sequence[str]) -> tuple[int, int]:
        """Indices (into the current nodes) of the first and last node ``target`` names."""
        if isinstance(target, str):
            first, sep, last = target.partition("..")
            ends = (first.strip(), last.strip()) if sep else (target.strip(),) * 2
        elif isinstance(target, Sequence) and len(target) in (1, 2):
            ends = (target[0], target[-1])
        else:
            raise TurnEditError(
                f"range: expected an id, 'first..last' or (first, last), got {target!r}"
            )
        i, j = (self._index(e) for e in ends)
        if i > j:
            nodes = self._state.nodes
            raise TurnEditError(
                f"range {nodes[i].id}..{nodes[j].id} runs backwards: {nodes[j].id} comes "
                f"before {nodes[i].id} in the turn"
            )
        return i, j

    def _index(self, ident: object) -> int:
        state = self._state
        if not isinstance(ident, str):
            raise TurnEditError(f"node id: expected a string such as 'n1', got {ident!r}")
        for k, node in enumerate(state.nodes):
            if node.id == ident:
                return k
        if ident in state.replaced:
            raise StaleNodeError(ident, state.replaced[ident], self._descendants(ident))
        current = ", ".join(n.id for n in state.nodes)
        shape = "" if _ID.fullmatch(ident) else " (ids look like n1 or r1)"
        raise TurnEditError(f"unknown node id {ident!r}{shape}; the current ids are {current}")

    def _descendants(self, ident: str) -> tuple[str, ...]:
        replaced = self._state.replaced
        current = {n.id for n in self._state.nodes}
        out: dict[str, None] = {}
        stack = [ident]
        while stack:
            for child in replaced.get(stack.pop(), ()):
                if child in current:
                    out[child] = None
                elif child in replaced:
                    stack.append(child)
        order = {n.id: k for k, n in enumerate(self._state.nodes)}
        return tuple(sorted(out, key=order.__getitem__))


def catalog_text(rows: Sequence[CatalogRow]) -> str:
    """The catalog as text, one node a line (what a worker's prompt and tools show)."""
    lines = []
    for r in rows:
        state = "changed" if r.changed else "unchanged"
        extra = f" · must be rewritten: {r.rewrite_required}" if r.rewrite_required else ""
        lines.append(
            f"{r.id} · {r.role} · {r.kind} · {r.chars:,} chars · {state} · capacity "
            f"{r.capacity}{extra} · {r.preview}"
        )
    return "\n".join(lines)
