"""Validated configuration objects.

Every field is checked at construction; a bad value raises
:class:`~dashr_ext.errors.ConfigError` naming the field, the accepted range and the value
received, e.g. ``threshold_ratio: expected a number in (0, 1), got 1.5``. ``check_field``
runs one field's own checks alone; the checks relating two fields need a whole config.

A session log records its settings as ``config/change`` events (:func:`settings_change`);
:func:`logged_settings` folds them back over the defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._payloads import CONFIG_CHANGE, ConfigChangePayload, config_change_payload
from .errors import ConfigError

if TYPE_CHECKING:
    from ._events import Event

__all__ = [
    "CHUNK_STATE_MIN_MULTIPLE",
    "ENGINES",
    "MAX_COUNT",
    "MIN_STATE_TOKENS",
    "MIN_SUMMARY_TOKENS",
    "PRUNE_CEILING",
    "PRUNE_FLOOR",
    "STUB_CHUNK_MAX_RATIO",
    "SUMMARY_CEILING",
    "SUMMARY_FLOOR",
    "SUMMARY_SHARE",
    "TURN_MIN_TOKENS",
    "CompactionConfig",
    "RecallConfig",
    "changed_fields",
    "logged_settings",
    "settings_change",
]

ENGINES = ("summary", "recallable")
MIN_SUMMARY_TOKENS = 48
"""The smallest ``max_summary_tokens``: the minimal footer line (25–29 tokens), its message
and a 16-token line of summary (a pass whose span, pins or footer leave less declines, with
the sizes; see ``_compaction.layout``)."""
MIN_STATE_TOKENS = 128
"""The smallest ``state_max_tokens`` (the state checkpoint keeps its sections)."""
SUMMARY_SHARE, SUMMARY_FLOOR, SUMMARY_CEILING = 0.15, 256, 8192
"""``max_summary_tokens`` left at None: 15% of the trigger, at least 256, at most 8192."""
PRUNE_FLOOR, PRUNE_CEILING = 1024, 8192
"""``prune_tool_output_tokens`` left at None: an eighth of the trigger within these bounds."""
STUB_CHUNK_MAX_RATIO = 0.125
"""``stub_tokens / chunk_tokens`` may not exceed this: an index stub condenses at least 8×."""
MAX_COUNT = 2**53
"""The largest value of a count or size without a range of its own (``context_window_tokens``,
``archive_max_bytes``, ...): the settings' float arithmetic (``threshold_ratio ×
context_window_tokens``) needs values in the float range, and every JSON reader holds an
integer up to 2**53 exactly."""
TURN_MIN_TOKENS = 2_000
"""The default ``turn_min_tokens``: a completed turn smaller than this is closed as a no-op.
A rewrite keeps the user's request and the final answer verbatim, so what it can save is the
working trace between them; below about two thousand tokens that trace is a tool call or two,
the gain a few hundred tokens at most, while every landing still costs a job, a batch of new
events and (with the ``llm`` compressor) a worker request."""
CHUNK_STATE_MIN_MULTIPLE = 2
"""``chunk_tokens`` must be at least this multiple of ``state_max_tokens``: every stub call
reads the state as background, so a smaller chunk would spend more input on the state than
on the chunk it indexes."""


def _int(name: str, value: object, low: int, high: int | None = None) -> int:
    top = MAX_COUNT if high is None else high
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= top:
        if high is None and not (isinstance(value, int) and value > top):
            accepted = f"an integer >= {low}"  # the range as documented: the cap is far off
        else:
            accepted = f"an integer in [{low}, {'2**53' if high is None else high}]"
        raise ConfigError(name, accepted, value)
    return value


def _ratio(name: str, value: object) -> float:
    # Compared before float(): an integer past the float range would raise OverflowError.
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1:
        raise ConfigError(name, "a number in (0, 1)", value)
    return float(value)


Check = Callable[[str, object], object]
"""One field's own check: raises ConfigError(name, accepted, value) when ``value`` is bad."""


def _ints(low: int, high: int | None = None, *, optional: bool = False) -> Check:
    def check(name: str, value: object) -> object:
        return value if optional and value is None else _int(name, value, low, high)

    return check


def _flag(name: str, value: object) -> object:
    if not isinstance(value, bool):
        raise ConfigError(name, "True or False", value)
    return value


def _engine(name: str, value: object) -> object:
    if value not in ENGINES:
        raise ConfigError(name, f"one of {', '.join(map(repr, ENGINES))}", value)
    return value


def _stub_region(name: str, value: object) -> object:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 0.5:
        raise ConfigError(name, "a number in (0, 0.5]", value)
    return value


def _pointer(name: str, value: object) -> object:
    if value not in ("inject", "off"):
        raise ConfigError(name, "'inject' or 'off'", value)
    return value


# Each field's own type and range, in the order a config checks them; the checks that relate
# one field to another run after these, when a whole config is built.
_COMPACTION_CHECKS: Mapping[str, Check] = {
    "engine": _engine,
    "context_window_tokens": _ints(256),
    "threshold_ratio": _ratio,
    "retain_ratio": _ratio,
    "retain_tokens": _ints(1, optional=True),
    "recency_window_tokens": _ints(1, optional=True),
    "max_summary_tokens": _ints(MIN_SUMMARY_TOKENS, optional=True),
    "compaction_retries": _ints(0, 10),
    "auto": _flag,
    "archive_reasoning": _flag,
    "archive_max_bytes": _ints(1, optional=True),
    "prune": _flag,
    "prune_tool_output_tokens": _ints(64, optional=True),
    "prune_keep_chars": _ints(200, 100_000),
    "oversize_ratio": _ratio,
    "show_superseded": _flag,
    "stub_tokens": _ints(32, 2048, optional=True),
    "state_max_tokens": _ints(MIN_STATE_TOKENS, optional=True),
    "chunk_tokens": _ints(256, optional=True),
    "stub_region_ratio": _stub_region,
    "turn_memory": _flag,
    "turn_min_tokens": _ints(0),
    "turn_worker_attempts": _ints(1, 10),
    "turn_read_max_chars": _ints(400, 1_000_000),
}
_RECALL_CHECKS: Mapping[str, Check] = {
    "read_max_chars": _ints(400, 1_000_000),
    "read_max_events": _ints(1, 1000),
    "search_max_hits": _ints(1, 200),
    "outline_max_chars": _ints(200, 1_000_000),
    "pointer": _pointer,
}


def _check_one(checks: Mapping[str, Check], name: str, value: object) -> None:
    check = checks.get(name)
    if check is None:
        raise ConfigError(name, f"one of the fields {', '.join(checks)}", name)
    check(name, value)


@dataclass(frozen=True)
class CompactionConfig:
    """When to compact and how much to keep.

    A pass triggers when the measured request (envelope + surface) exceeds
    ``threshold_ratio × context_window_tokens`` or, when set, ``recency_window_tokens``.
    It keeps the smallest tail of whole units reaching the retain budget
    (``retain_tokens``, else ``retain_ratio × context_window_tokens``) and summarizes
    everything before it.

    ``engine="recallable"`` (SPEC §6.3) splits that history into chunks of about
    ``chunk_tokens``, each condensed into a frozen index stub of about ``stub_tokens``,
    and rewrites one state checkpoint of at most ``state_max_tokens``; when the stubs
    pass ``stub_region_ratio × trigger`` the oldest roll up into one directory node.
    Left at None, the three sizes follow the window (:attr:`chunk_budget`,
    :attr:`stub_budget`, :attr:`state_budget`), so a 20k recency window gets a state of
    ~1.2k tokens and several stubs per pass, and a 128k window 4k and 8k-token chunks.

    Pruning (SPEC §6.5, ``prune=True``) runs first and needs no model: a tool output or
    assistant text above ``prune_tool_output_tokens`` (:attr:`prune_threshold`) keeps a
    head and tail of ``prune_keep_chars`` characters plus a marker naming where the
    original is. Any single message above ``oversize_ratio × trigger``
    (:attr:`oversize_tokens`) is pruned wherever it is, the newest included; older
    candidates only when that alone brings the request under the trigger (otherwise the
    summary condenses them from the originals).

    Turn memory (SPEC §6.4, ``turn_memory=True``) rewrites each completed turn of at least
    ``turn_min_tokens`` in place, N nodes to M ≤ N, off the caller's thread; a smaller turn
    is closed as a no-op. ``turn_worker_attempts`` bounds the consecutive workers of the
    ``llm`` compressor that make no accepted edit, ``turn_read_max_chars`` one editor read.
    """

    engine: str = "summary"
    context_window_tokens: int = 128_000
    threshold_ratio: float = 0.8
    retain_ratio: float = 0.16
    retain_tokens: int | None = None
    recency_window_tokens: int | None = None
    max_summary_tokens: int | None = None
    compaction_retries: int = 1
    auto: bool = True
    archive_max_bytes: int | None = None
    archive_reasoning: bool = True
    chunk_tokens: int | None = None
    stub_tokens: int | None = None
    state_max_tokens: int | None = None
    stub_region_ratio: float = 0.25
    prune: bool = True
    prune_tool_output_tokens: int | None = None
    prune_keep_chars: int = 2000
    oversize_ratio: float = 0.25
    show_superseded: bool = False
    turn_memory: bool = False
    turn_min_tokens: int = TURN_MIN_TOKENS
    turn_worker_attempts: int = 3
    turn_read_max_chars: int = 20_000

    def __post_init__(self) -> None:
        for name, check in _COMPACTION_CHECKS.items():
            check(name, getattr(self, name))
        self._check_recallable()
        threshold = self.threshold_tokens
        if self.retain_tokens is None and self.retain_ratio >= self.threshold_ratio:
            raise ConfigError(
                "retain_ratio",
                f"a ratio below threshold_ratio ({self.threshold_ratio})",
                self.retain_ratio,
            )
        if self.retain_tokens is not None and self.retain_tokens >= threshold:
            raise ConfigError(
                "retain_tokens",
                f"fewer tokens than the threshold (threshold_ratio × context_window_tokens = "
                f"{threshold})",
                self.retain_tokens,
            )
        if self.recency_window_tokens is not None:
            if self.retain_tokens is None:
                raise ConfigError(
                    "retain_tokens",
                    "an absolute token count when recency_window_tokens is set "
                    f"(recency_window_tokens = {self.recency_window_tokens})",
                    None,
                )
            if self.retain_tokens >= self.recency_window_tokens:
                raise ConfigError(
                    "retain_tokens",
                    f"fewer tokens than recency_window_tokens ({self.recency_window_tokens})",
                    self.retain_tokens,
                )
        self._check_fit()

    def _check_fit(self) -> None:
        """What a pass leaves (retained tail + checkpoints) must fit under the trigger."""
        retain, trigger = self.retain_budget, self.trigger_tokens
        if self.engine == "recallable":
            added = self.state_budget + int(self.stub_region_ratio * trigger)
            what = (
                f"the state checkpoint ({self.state_budget}) + the stub region "
                f"(stub_region_ratio × trigger = {int(self.stub_region_ratio * trigger)})"
            )
        else:
            added, what = self.summary_budget, f"max_summary_tokens ({self.summary_budget})"
        if retain + added >= trigger:
            name = "retain_tokens" if self.retain_tokens is not None else "retain_ratio"
            raise ConfigError(
                name,
                f"a retained tail that leaves room under the trigger ({trigger} tokens) for "
                f"{what}: retain ({retain}) + {added} = {retain + added} does not fit; lower "
                "the retain budget or the checkpoint budget",
                self.retain_tokens if self.retain_tokens is not None else self.retain_ratio,
            )

    @property
    def summary_budget(self) -> int:
        """``max_summary_tokens``, or when None 15% of the trigger within [256, 8192].

        It bounds everything a pass adds to the request: the checkpoint's framing, summary,
        footers and archive marker, and the pointer message.
        """
        if self.max_summary_tokens is not None:
            return self.max_summary_tokens
        return min(SUMMARY_CEILING, max(SUMMARY_FLOOR, int(SUMMARY_SHARE * self.trigger_tokens)))

    def _check_recallable(self) -> None:
        floor = CHUNK_STATE_MIN_MULTIPLE * self.state_budget
        if self.chunk_tokens is not None and self.chunk_tokens < floor:
            raise ConfigError(
                "chunk_tokens",
                f"at least {CHUNK_STATE_MIN_MULTIPLE} × state_max_tokens "
                f"({self.state_budget}) = {floor}; lower state_max_tokens or raise chunk_tokens",
                self.chunk_tokens,
            )
        if self.stub_tokens is not None and self.stub_tokens > STUB_CHUNK_MAX_RATIO * (
            self.chunk_budget
        ):
            raise ConfigError(
                "stub_tokens",
                f"at most {STUB_CHUNK_MAX_RATIO:g} × chunk_tokens ({self.chunk_budget}) = "
                f"{int(STUB_CHUNK_MAX_RATIO * self.chunk_budget)}",
                self.stub_tokens,
            )

    @property
    def state_budget(self) -> int:
        """``state_max_tokens``, or when None a sixteenth of the trigger within [512, 4096].

        The cap holds the whole state node (framing, footer, marker) and the pointer, which
        take ~250–450 tokens: below 512 little would be left for the state itself.
        """
        if self.state_max_tokens is not None:
            return self.state_max_tokens
        return min(4096, max(512, self.trigger_tokens // 16))

    @property
    def chunk_budget(self) -> int:
        """``chunk_tokens``, or when None a quarter of what a pass compacts, within
        [2 × state, 8192] (several stubs per pass, none smaller than the floor)."""
        if self.chunk_tokens is not None:
            return self.chunk_tokens
        per_pass = max(0, self.trigger_tokens - self.retain_budget)
        floor = CHUNK_STATE_MIN_MULTIPLE * self.state_budget
        return max(floor, min(8192, per_pass // 4))

    @property
    def stub_budget(self) -> int:
        """``stub_tokens``, or when None 160 (at most an eighth of the chunk)."""
        if self.stub_tokens is not None:
            return self.stub_tokens
        return max(32, min(160, int(STUB_CHUNK_MAX_RATIO * self.chunk_budget)))

    @property
    def prune_threshold(self) -> int:
        """``prune_tool_output_tokens``, or when None an eighth of the trigger in [1024, 8192].

        Tool outputs and assistant texts above it are pruning candidates (SPEC §6.5).
        """
        if self.prune_tool_output_tokens is not None:
            return self.prune_tool_output_tokens
        return min(PRUNE_CEILING, max(PRUNE_FLOOR, self.trigger_tokens // 8))

    @property
    def oversize_tokens(self) -> int:
        """``oversize_ratio × trigger``: no unit of the retained tail stays larger, and a
        single message above it (a user-role observation too) is pruned wherever it is."""
        return max(1, int(self.oversize_ratio * self.trigger_tokens))

    @property
    def threshold_tokens(self) -> int:
        """``threshold_ratio × context_window_tokens``, rounded down."""
        return int(self.threshold_ratio * self.context_window_tokens)

    @property
    def retain_budget(self) -> int:
        """Tokens of recent history a pass keeps verbatim."""
        if self.retain_tokens is not None:
            return self.retain_tokens
        return int(self.retain_ratio * self.context_window_tokens)

    @property
    def trigger_tokens(self) -> int:
        """The lowest measured total that triggers a pressure pass (exclusive bound)."""
        if self.recency_window_tokens is not None:
            return min(self.recency_window_tokens, self.threshold_tokens)
        return self.threshold_tokens

    def should_compact(self, total_tokens: int) -> bool:
        """``total > recency_window_tokens OR total > threshold_ratio × context_window_tokens``."""
        return total_tokens > self.trigger_tokens

    def with_changes(self, **changes: Any) -> CompactionConfig:
        """A validated copy with ``changes`` applied; unknown names raise ConfigError."""
        _check_names(self, changes)
        return replace(self, **changes)

    @staticmethod
    def check_field(name: str, value: object) -> None:
        """Raise ConfigError when ``value`` is wrong for ``name`` on its own (type, range).

        The checks relating a field to another (``retain_tokens`` below
        ``recency_window_tokens``, ...) run when a whole config is built.
        """
        _check_one(_COMPACTION_CHECKS, name, value)


@dataclass(frozen=True)
class RecallConfig:
    """Budgets of the history_* tools and the post-compaction pointer."""

    read_max_chars: int = 8000
    read_max_events: int = 80
    search_max_hits: int = 20
    outline_max_chars: int = 4000
    pointer: Literal["inject", "off"] = "inject"

    def __post_init__(self) -> None:
        for name, check in _RECALL_CHECKS.items():
            check(name, getattr(self, name))

    def with_changes(self, **changes: Any) -> RecallConfig:
        _check_names(self, changes)
        return replace(self, **changes)

    @staticmethod
    def check_field(name: str, value: object) -> None:
        """Raise ConfigError when ``value`` is wrong for ``name`` (every check is per field)."""
        _check_one(_RECALL_CHECKS, name, value)


def _check_names(obj: object, changes: dict[str, Any]) -> None:
    names = [f.name for f in fields(obj)]  # type: ignore[arg-type]
    for key in changes:
        if key not in names:
            raise ConfigError(key, f"one of the fields {', '.join(names)}", key)


# --------------------------------------------------------------------------- in the log

C = TypeVar("C", CompactionConfig, RecallConfig)


def changed_fields(before: C, after: C) -> dict[str, Any]:
    """The fields of ``after`` whose values differ from ``before``'s, with their new values."""
    return {
        f.name: getattr(after, f.name)
        for f in fields(after)
        if getattr(after, f.name) != getattr(before, f.name)
    }


def settings_change(
    before: tuple[CompactionConfig, RecallConfig], after: tuple[CompactionConfig, RecallConfig]
) -> ConfigChangePayload | None:
    """The ``config/change`` payload taking the settings from ``before`` to ``after``, or None
    when they are equal."""
    change: ConfigChangePayload = {
        "compaction": changed_fields(before[0], after[0]),
        "recall": changed_fields(before[1], after[1]),
    }
    return change if change["compaction"] or change["recall"] else None


def logged_settings(events: Iterable[Event]) -> tuple[CompactionConfig, RecallConfig]:
    """The settings a log records: its ``config/change`` events folded over the defaults.

    A recorded value that no longer validates raises ConfigError naming the event.
    """
    compaction, recall = CompactionConfig(), RecallConfig()
    for event in events:
        if event.type != CONFIG_CHANGE:
            continue
        data = config_change_payload(event)
        group = "compaction"
        try:
            if data["compaction"]:
                compaction = compaction.with_changes(**data["compaction"])
            group = "recall"
            if data["recall"]:
                recall = recall.with_changes(**data["recall"])
        except ConfigError as exc:
            where = f"event {event.seq} ({CONFIG_CHANGE}) {group}.{exc.field}"
            raise ConfigError(where, exc.accepted, exc.received) from None
    return compaction, recall
