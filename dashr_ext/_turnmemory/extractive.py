"""The ``extractive`` turn compressor: offline, deterministic, pure (SPEC §6.4).

:func:`compress_turn` plans a rewrite of one completed turn and carries it out through the
working-turn editor (:class:`~dashr_ext._turnmemory.editor.TurnEditor`, one ``replace`` per
rewritten range, never around it), so the result is exactly what the editor accepts and
:meth:`~dashr_ext._turnmemory.editor.TurnEditor.validate_final` passes. The turn keeps its
shape:

* **the user's intent**: the opening request stays verbatim. A later user message of the
  same turn (a steer) that completes the same intent is merged into it, verbatim after it;
  one that changes the goal (an override such as "scratch that, instead …", or a new ask
  about something else) stays a user node of its own, where it stood (see
  :func:`completes_intent`);
* **the work**: each run of assistant, tool and context nodes between two user messages (a
  phase) becomes one assistant node (:func:`~.extractive_work.work_text`): commands run
  (repeats said once, counted), files touched, failures with their exact error line, other
  tool calls, decisions with their reasons and findings, image references. A tool call and
  its results are always absorbed together;
* **the final answer**: the turn's last assistant text stays whole. When the turn ends with
  an assistant message that calls no tool, that message stays as it is (unchanged, or
  rewritten to its text alone when it holds reasoning); otherwise the text ends the last
  condensed phase verbatim.

Raw reasoning is never read and never copied: a range holding reasoning is always rewritten.
A range that holds no reasoning and would not get smaller is left as it is. A range's edges
are moved outward to cuts that part no tool call from its result; a range that cannot get
such edges (a call of the turn answered outside it) makes the whole turn unsuitable.

Same input, same output: nothing here depends on time, order of a set or anything but the
nodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._events import ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock
from .._meter import (
    MESSAGE_OVERHEAD_TOKENS,
    TOOL_CALL_OVERHEAD_TOKENS,
    estimate_chars_tokens,
    image_tokens,
)
from .._summarizers.extractive.anchors import typed_literals
from .._summarizers.extractive.salience import (
    is_trivial,
    overrides,
    reads_as_request,
    scored_sentences,
)
from .._summarizers.extractive.text import words
from .editor import DEFAULT_READ_MAX_CHARS, NewNode, TurnEditor
from .extractive_work import final_text, work_text
from .nodes import TurnNode
from .rules import cut_points

__all__ = ["TurnCompression", "completes_intent", "compress_turn", "plan_ranges"]


@dataclass(frozen=True, slots=True)
class TurnCompression:
    """A turn rewritten by :func:`compress_turn`: the editor holding the accepted edits
    (what a landing plan turns into events) and what the rewrite gains."""

    editor: TurnEditor
    nodes_before: int
    nodes_after: int
    tokens_before: int
    tokens_after: int
    """Tokens of the turn's nodes before and after, by the same count (see
    :func:`compress_turn`)."""

    @property
    def ratio(self) -> float:
        """``tokens_after / tokens_before``."""
        return self.tokens_after / self.tokens_before if self.tokens_before else 1.0


@dataclass(frozen=True, slots=True)
class _Item:
    """One node of the planned turn, before it is written."""

    kind: str
    """``request`` (the opening request with the steers merged into it), ``steer`` (a
    goal-changing steer), ``work`` (a phase) or ``final`` (the closing assistant message)."""
    positions: tuple[int, ...]
    """The original positions it stands for (a work item's are a contiguous run)."""
    keep: bool
    """It may stay the unchanged original node (one node, nothing to drop from it)."""

    @property
    def role(self) -> str:
        return "user" if self.kind in ("request", "steer") else "assistant"


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """One contiguous range of the turn and the nodes that will replace it."""

    first: int
    last: int
    nodes: tuple[NewNode, ...]
    required: bool
    """It holds raw reasoning, so it is rewritten even when that does not save tokens."""
    tokens_before: int
    tokens_after: int


def compress_turn(
    originals: Sequence[TurnNode],
    *,
    count_tokens: Callable[[str], int] | None = None,
    read_max_chars: int = DEFAULT_READ_MAX_CHARS,
) -> TurnCompression | None:
    """Rewrite one completed turn's nodes N→M by the extractive rules (module docstring).

    Returns the :class:`TurnCompression` whose editor holds the accepted replaces and passes
    :meth:`~.editor.TurnEditor.validate_final`, or ``None`` when there is nothing to gain: the
    turn does not start with a user node, holds no assistant node or ends with a user
    message; no range would get smaller (an already compact turn); the rewrite would not be
    smaller as a whole; or a range cannot be cut out without splitting a tool call from its
    result (a call answered outside the turn). ``None`` changes nothing; the caller records
    a no-op.

    Tokens: with ``count_tokens`` (the session meter's ``count_text``), an original counts
    its :attr:`~.nodes.TurnNode.tokens` when the nodes were read with that meter, else its
    blocks as the meter counts them; a produced node counts its text plus the per-message
    overhead. Without it, both sides are estimated by characters.
    """
    nodes = tuple(originals)
    count = count_tokens if count_tokens is not None else estimate_chars_tokens
    plan = plan_ranges(nodes, count_tokens=count, use_node_tokens=count_tokens is not None)
    if plan is None:
        return None
    applied = [r for r in plan if r.required or r.tokens_after < r.tokens_before]
    if not applied:
        return None
    before = sum(_original_tokens(n, count, count_tokens is not None) for n in nodes)
    after = before - sum(r.tokens_before - r.tokens_after for r in applied)
    if after >= before:
        return None
    editor = TurnEditor(nodes, read_max_chars=read_max_chars)
    for r in reversed(applied):  # later ranges first: the earlier ids stay as they were
        editor.replace(f"n{r.first + 1}..n{r.last + 1}", r.nodes)
    editor.validate_final()
    return TurnCompression(
        editor=editor,
        nodes_before=len(nodes),
        nodes_after=len(editor.nodes),
        tokens_before=before,
        tokens_after=after,
    )


# --------------------------------------------------------------------------- planning


def plan_ranges(
    originals: Sequence[TurnNode],
    *,
    count_tokens: Callable[[str], int] = estimate_chars_tokens,
    use_node_tokens: bool = False,
) -> tuple[PlannedRange, ...] | None:
    """Every range the turn could be rewritten in, with its nodes and token figures; ``None``
    when the turn cannot be rewritten at all (see :func:`compress_turn`)."""
    nodes = tuple(originals)
    if not nodes or nodes[0].role != "user" or not any(n.role == "assistant" for n in nodes):
        return None
    items = _items(nodes)
    if items[-1].role != "assistant":
        return None  # the turn ends with a user message: nothing may land after it
    spans = _ranges(nodes, items)
    if spans is None:
        return None
    out = []
    for first, last in spans:
        inside = [it for it in items if first <= it.positions[0] <= last]
        new = _fit(_written(nodes, inside), _capacity(nodes, first, last))
        if new is None:
            return None
        run = nodes[first : last + 1]
        out.append(
            PlannedRange(
                first=first,
                last=last,
                nodes=new,
                required=any(n.has_reasoning for n in run),
                tokens_before=sum(_original_tokens(n, count_tokens, use_node_tokens) for n in run),
                tokens_after=sum(MESSAGE_OVERHEAD_TOKENS + count_tokens(n.text) for n in new),
            )
        )
    return tuple(out)


def _is_steer(node: TurnNode) -> bool:
    return node.role == "user" and node.kind == "text"


def _items(nodes: tuple[TurnNode, ...]) -> list[_Item]:
    """The planned nodes in turn order: requests and steers, phases, the final answer."""
    count = len(nodes)
    last = nodes[-1]
    closing = (
        count - 1
        if count > 1 and last.role == "assistant" and not last.tool_call_ids and final_text(last)
        else None
    )
    episodes: list[tuple[list[int], list[list[int]]]] = []
    request: list[int] = [0]
    runs: list[list[int]] = [[]]
    intent = [final_text(nodes[0]) or nodes[0].text]
    for position in range(1, closing if closing is not None else count):
        node = nodes[position]
        if not _is_steer(node):
            runs[-1].append(position)
            continue
        text = final_text(node) or node.text
        if completes_intent(text, intent):
            request.append(position)
            intent.append(text)
            runs.append([])
        else:
            episodes.append((request, runs))
            request, runs, intent = [position], [[]], [text]
    episodes.append((request, runs))
    items: list[_Item] = []
    for k, (asks, phases) in enumerate(episodes):
        items.append(_Item("request" if k == 0 else "steer", tuple(asks), keep=len(asks) == 1))
        items.extend(_Item("work", tuple(run), keep=False) for run in phases if run)
    if closing is not None:
        items.append(_Item("final", (closing,), keep=not last.has_reasoning))
    return items


def _ranges(nodes: tuple[TurnNode, ...], items: list[_Item]) -> list[tuple[int, int]] | None:
    """The ranges to rewrite: the hull of every item that is not kept, widened to cuts that
    part no tool call from its result, widened again over every item they touch."""
    cuts = cut_points(nodes)
    count = len(nodes)
    rewritten = {k for k, it in enumerate(items) if not it.keep}
    while True:
        hulls = sorted((min(items[k].positions), max(items[k].positions)) for k in rewritten)
        spans: list[list[int]] = []
        for a, b in hulls:
            while a > 0 and not cuts[a]:
                a -= 1
            while b + 1 < count and not cuts[b + 1]:
                b += 1
            if not cuts[a] or not cuts[b + 1]:
                return None  # a call of the turn is answered outside it
            if spans and a <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], b)
            else:
                spans.append([a, b])
        touched = {
            k
            for k, it in enumerate(items)
            if any(a <= p <= b for p in it.positions for a, b in spans)
        }
        if touched <= rewritten:
            return [(a, b) for a, b in spans]
        rewritten |= touched


def _written(nodes: tuple[TurnNode, ...], items: Sequence[_Item]) -> list[NewNode]:
    """The nodes of a range, one per item (a kept item inside a range is written too)."""
    out = []
    closing = next((it.positions[0] for it in items if it.kind == "final"), None)
    answer = _answer_position(nodes) if closing is None else None
    for it in items:
        if it.kind in ("request", "steer"):
            out.append(NewNode("user", "\n\n".join(nodes[p].text for p in it.positions)))
        elif it.kind == "final":
            node = nodes[it.positions[0]]
            markers = " ".join(node.image_markers)
            out.append(NewNode("assistant", "\n".join(t for t in (final_text(node), markers) if t)))
        else:
            run = [nodes[p] for p in it.positions]
            final = nodes[answer] if answer is not None and answer in it.positions else None
            out.append(NewNode("assistant", work_text(run, final=final)))
    return out


def _answer_position(nodes: tuple[TurnNode, ...]) -> int | None:
    """The position of the turn's last assistant text."""
    for node in reversed(nodes):
        if node.role == "assistant" and final_text(node):
            return node.position
    return None


def _capacity(nodes: tuple[TurnNode, ...], first: int, last: int) -> int:
    cuts = cut_points(nodes)
    return 1 + sum(1 for k in range(first + 1, last + 1) if cuts[k])


def _fit(new: list[NewNode], capacity: int) -> tuple[NewNode, ...] | None:
    """``new`` within ``capacity`` nodes: adjacent assistant nodes merged, the latest first;
    ``None`` when user nodes alone would not fit."""
    out = list(new)
    while len(out) > capacity:
        pair = next(
            (
                k
                for k in range(len(out) - 2, -1, -1)
                if out[k].role == out[k + 1].role == "assistant"
            ),
            None,
        )
        if pair is None:
            return None
        out[pair : pair + 2] = [NewNode("assistant", f"{out[pair].text}\n\n{out[pair + 1].text}")]
    return tuple(out)


def _original_tokens(node: TurnNode, count: Callable[[str], int], use_node_tokens: bool) -> int:
    """An original node's tokens as the meter counts them (see :func:`compress_turn`)."""
    if use_node_tokens and node.tokens is not None:
        return node.tokens
    tokens = MESSAGE_OVERHEAD_TOKENS
    for block in node.content:
        if isinstance(block, TextBlock | ReasoningBlock):
            tokens += count(block.text) if block.text else 0
        elif isinstance(block, ToolCallBlock):
            tokens += TOOL_CALL_OVERHEAD_TOKENS + count(block.name) + count(block.arguments)
        elif isinstance(block, ImageBlock):
            tokens += image_tokens(block.width, block.height)
    return tokens


# --------------------------------------------------------------------------- steers

_CORRECTION = re.compile(
    r"\b(?:i meant|i mean\b|what i meant|meant to (?:say|write|type|ask)|to clarify|"
    r"clarif(?:y|ication)|typo|sorry,? (?:i|that|my)|i should have said|i misspoke)",
    re.I,
)
_COMPLETES = re.compile(
    r"^\W*(?:also|and|plus|oh,? and|btw|by the way|p\.?s\.?|one more thing|additionally|"
    r"in addition|as well|note|remember|don't forget|do not forget|make sure|keep in mind|"
    r"while you(?:'re| are) at it)\b|\b(?:also|as well|too)\b",
    re.I,
)
_LEAD = re.compile(
    r"^(?:\W*(?:ok(?:ay)?|now|next|then|great|thanks|good|alright|right|so|and now)\b[\s,.!:;-]*)+",
    re.I,
)
"""Words a new ask may open with ("OK, now deploy it"): left out before the ask is read."""
_WORD = re.compile(r"[A-Za-z_][\w./-]{3,}")
_STOPWORDS = words(
    "this that these those with from have will would could should please there their about "
    "into just like make sure need want what when where which while your they them then than "
    "some more most only other such very each does done doing here also want wants using "
    "used instead actually thing things something anything everything work working"
)


def completes_intent(steer: str, intent: Sequence[str]) -> bool:
    """Whether a steer completes the intent of the requests before it (merged into the
    request) rather than changing the goal (kept as its own user node).

    In order: a correction of what was meant ("I meant …", "to clarify") completes it; an
    override ("scratch that", "instead", "never mind", "from now on") changes it; a bare
    nudge ("continue", "go on"), an addition ("also …", "make sure …", "… too") or a rule
    for the work ("keep it under 50 ms", "never touch the schema") completes it; a message
    sharing a content word or literal with the intent is about the same thing
    and completes it; a new ask about something else changes it; anything else (a plain
    statement) completes it.
    """
    if _CORRECTION.search(steer):
        return True
    if overrides(steer):
        return False
    if is_trivial(steer) or _COMPLETES.search(steer):
        return True
    if any(salience.is_rule for _, salience in scored_sentences(steer)):
        return True  # a constraint on the work under way
    if _content_words(steer) & _content_words("\n".join(intent)):
        return True
    return not reads_as_request(_LEAD.sub("", steer))


def _content_words(text: str) -> frozenset[str]:
    words = {w.lower().strip("./-") for w in _WORD.findall(text)}
    words |= {lit.value.lower() for lit in typed_literals(text) if lit.type != "number"}
    return frozenset(w for w in words if len(w) >= 4 and w not in _STOPWORDS)
