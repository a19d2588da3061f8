"""Typed shapes of event payloads and the log's fixed vocabulary (SPEC §3.1.1, §4.1).

``Event.data`` is a plain JSON object; the ``TypedDict``s here let code that reads a
payload have its keys type-checked (``summary_payload(event)["shadowedSeqs"]``). Extra
keys are allowed on disk, so these describe the required keys (and the optional ones this
package writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

if TYPE_CHECKING:
    from ._events import Event

__all__ = [
    "ARCHIVE_VARIABLE",
    "CHECKPOINT_CLASSES",
    "CHECKPOINT_SOURCE",
    "CONFIG_CHANGE",
    "PASS_EVENT_TYPES",
    "PASS_TRIGGERS",
    "PIN_ADD",
    "PIN_REMOVE",
    "PIN_TYPES",
    "POINTER_SOURCE",
    "RECALL_TOOL_NAMES",
    "TRIGGERS",
    "TURN_ENGINE",
    "TURN_FAILED",
    "TURN_MEMORY_DATA_TYPES",
    "TURN_MEMORY_REQUIRED",
    "TURN_MEMORY_TYPES",
    "TURN_NOOP",
    "TURN_PENDING",
    "TURN_SOURCE",
    "TURN_TRIGGER",
    "ConfigChangePayload",
    "EndPayload",
    "PinAddPayload",
    "PinRemovePayload",
    "ShadowedRange",
    "StartPayload",
    "SummarizerInfo",
    "SummaryPayload",
    "Trigger",
    "TurnClosedPayload",
    "TurnLandings",
    "TurnPendingPayload",
    "UsagePayload",
    "checkpoint_class",
    "config_change_payload",
    "end_payload",
    "pin_add_payload",
    "pin_id_problem",
    "pin_remove_payload",
    "start_payload",
    "summary_payload",
    "turn_owners",
]

CHECKPOINT_SOURCE = "compact-checkpoint"
"""``message.source["kind"]`` of a checkpoint node (the ``user/message`` a pass commits)."""

POINTER_SOURCE = "history-access"
"""``message.source["kind"]`` of the post-compaction pointer (a ``context/message``)."""

CHECKPOINT_CLASSES = ("summary", "stub", "state", "directory")
"""``compaction/summary`` ``checkpointClass`` values (SPEC §6.3). ``summary``: the summary
engine's head checkpoint (written without the key); ``stub``: a frozen index stub;
``state``: the recallable engine's working-memory checkpoint; ``directory``: a code-only
rollup of the oldest stubs."""

RECALL_TOOL_NAMES: tuple[str, ...] = ("history_outline", "history_read", "history_search")
"""The recall tools' names (their results are recalled history, not new work)."""

ARCHIVE_VARIABLE = "dashr_compaction_archive"
"""Name of the kernel variable holding the archive (a plain ``dict``); pointers, footers and
pruned markers name it."""

Trigger = Literal["pressure", "context-overflow", "manual"]
TRIGGERS: tuple[Trigger, ...] = ("pressure", "context-overflow", "manual")
"""What may start a compaction pass (SPEC §4.4)."""
TURN_TRIGGER = "turn"
"""The trigger of a turn-memory landing (SPEC §6.4): a pass over one completed turn."""
PASS_EVENT_TYPES = ("compaction/start", "compaction/summary", "compaction/end")
"""The log-only events of the compaction protocol, in the order a pass writes them."""
PASS_TRIGGERS: tuple[str, ...] = (*TRIGGERS, "prune", TURN_TRIGGER)
"""Every trigger a ``compaction/start`` may carry: :data:`TRIGGERS` (what ``compact()``
accepts), the prune pass's and the turn-memory landing's."""


class StartPayload(TypedDict):
    """``compaction/start``: takes the session's compaction lock."""

    compactionId: str
    trigger: str
    engine: str


class ShadowedRange(TypedDict):
    start: int
    end: int


class SummarizerInfo(TypedDict):
    kind: str
    model: str | None


class SummaryPayload(TypedDict):
    """``compaction/summary``: provenance of one checkpoint; footers are composed from it."""

    compactionId: str
    checkpoint: str
    """``c<seq of this event>``."""
    trigger: str
    engine: str
    summary: str
    """The raw summary text, before framing and footers."""
    shadowedRange: ShadowedRange
    shadowedSeqs: list[int]
    """The surface nodes the checkpoint replaces, in surface order."""
    shadowedTokenCount: int
    summarizer: SummarizerInfo
    archive: dict[str, int] | dict[str, str]
    """Bucket counts of the archive entry, or ``{"error": ...}`` when archiving failed."""
    checkpointClass: NotRequired[str]
    """One of :data:`CHECKPOINT_CLASSES`; absent means ``"summary"``."""
    archiveReasoning: NotRequired[bool]
    """Written (as False) only when assistant reasoning was left out of the archive."""
    footer: NotRequired[str]
    """The form of the code-composed text, ``compact`` or ``minimal``; absent means ``full``."""
    pins: NotRequired[list[dict[str, str]]]
    """The pinned statements the checkpoint carries first (``{"pin", "text"}``)."""
    names: NotRequired[list[dict[str, Any]]]
    """The names the work touched up to this pass, carried to the next one."""
    namesBlock: NotRequired[str]
    """The names block as the checkpoint shows it."""


class EndPayload(TypedDict):
    """``compaction/end``: releases the lock; ``error`` on a recoverable failure."""

    compactionId: str
    error: NotRequired[str]


class UsagePayload(TypedDict):
    """``usage/report``: the provider's count of the request that ended at ``atSeq``."""

    promptTokens: int
    completionTokens: int | None
    atSeq: int


CONFIG_CHANGE = "config/change"
"""The event that records a change of the effective settings (SPEC §3.1.1)."""


class ConfigChangePayload(TypedDict):
    """``config/change``: the settings fields whose values changed, with their new values.

    Folding every ``config/change`` of a log over the defaults gives the settings in effect
    when its writer last changed them. Settings only: no summarizer endpoint, no API key.
    """

    compaction: dict[str, Any]
    """Changed ``CompactionConfig`` fields."""
    recall: dict[str, Any]
    """Changed ``RecallConfig`` fields."""


PIN_ADD = "pin/add"
"""The event that pins a statement every checkpoint carries verbatim (SPEC §15)."""
PIN_REMOVE = "pin/remove"
"""The event that unpins one."""
PIN_TYPES = frozenset({PIN_ADD, PIN_REMOVE})

_PIN_ID = re.compile(r"pin(0|[1-9][0-9]*)")


def pin_id_problem(kind: str, seq: int, pin: str) -> str | None:
    """What is wrong with the ``pin`` id of a ``kind`` event at ``seq``, or None.

    A pin is named ``pin<seq>`` after its ``pin/add``: the add names itself, a remove an
    earlier add.
    """
    if kind == PIN_ADD:
        if pin != f"pin{seq}":
            return f"expected 'pin{seq}' (pin<seq of this event>), got {pin!r}"
        return None
    match = _PIN_ID.fullmatch(pin)
    if match is None or int(match[1]) >= seq:
        return f"expected the id of an earlier pin/add ('pin<seq>', seq below {seq}), got {pin!r}"
    return None


class PinAddPayload(TypedDict):
    """``pin/add``: a pinned statement, as recorded (cleaned, keys redacted)."""

    pin: str
    """``pin<seq of this event>``: the pin's id."""
    text: str


class PinRemovePayload(TypedDict):
    """``pin/remove``: the pin it names is no longer carried."""

    pin: str
    """The id of an earlier ``pin/add``."""


TURN_ENGINE = "turn-memory"
"""``engine`` of a turn-memory landing's ``compaction/start``."""
TURN_SOURCE = "turn-memory"
"""``message.source["kind"]`` of a node a turn-memory landing put in place of others."""
TURN_PENDING = "turn-memory/pending"
"""Log-only: a completed turn's turn-memory job is recorded and waits to run."""
TURN_NOOP = "turn-memory/noop"
"""Log-only: a turn-memory job closed without changing the surface (nothing to gain)."""
TURN_FAILED = "turn-memory/failed"
"""Log-only: a turn-memory job closed on an error (the surface unchanged)."""
TURN_MEMORY_TYPES = frozenset({TURN_PENDING, TURN_NOOP, TURN_FAILED})
TURN_MEMORY_REQUIRED: dict[str, tuple[str, ...]] = {
    TURN_PENDING: ("turn", "job"),
    TURN_NOOP: ("turn", "job", "reason"),
    TURN_FAILED: ("turn", "job", "reason"),
}
"""The required payload keys of :data:`TURN_MEMORY_TYPES` (the event vocabulary's)."""
TURN_MEMORY_DATA_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    kind: {"turn": (int,), "job": (str,), "reason": (str,)} for kind in TURN_MEMORY_TYPES
}


class TurnPendingPayload(TypedDict):
    """``turn-memory/pending``: the job of completed turn ``turn`` waits to run."""

    turn: int
    job: str
    """``j<seq of the turn's turn/end>``: one job per completed turn."""


class TurnClosedPayload(TypedDict):
    """``turn-memory/noop`` / ``turn-memory/failed``: the job closed without a landing."""

    turn: int
    job: str
    reason: str
    nodes: NotRequired[int]
    """The turn's current nodes when the job looked (absent when it never read them)."""
    tokens: NotRequired[int]
    """Their tokens."""


def _payload(event: Event, kind: str) -> object:
    if event.type != kind:
        raise TypeError(f"expected a {kind} event, got {event.type} (seq {event.seq})")
    return event.data


def start_payload(event: Event) -> StartPayload:
    return cast(StartPayload, _payload(event, "compaction/start"))


def summary_payload(event: Event) -> SummaryPayload:
    return cast(SummaryPayload, _payload(event, "compaction/summary"))


def checkpoint_class(data: SummaryPayload) -> str:
    """The class of the checkpoint a ``compaction/summary`` payload describes."""
    value = data.get("checkpointClass", "summary")
    return value if value in CHECKPOINT_CLASSES else "summary"


def end_payload(event: Event) -> EndPayload:
    return cast(EndPayload, _payload(event, "compaction/end"))


def config_change_payload(event: Event) -> ConfigChangePayload:
    return cast(ConfigChangePayload, _payload(event, CONFIG_CHANGE))


def pin_add_payload(event: Event) -> PinAddPayload:
    return cast(PinAddPayload, _payload(event, PIN_ADD))


def pin_remove_payload(event: Event) -> PinRemovePayload:
    return cast(PinRemovePayload, _payload(event, PIN_REMOVE))


class TurnLandings:
    """The committed turn-memory landings of a log, folded one event at a time (SPEC §6.4).

    A landing commits with a ``compaction/end`` that has no ``error``; one cut short (closed
    with an error on reopen) never counts. Recall offers its tools from the first committed
    landing on and names the landing's archive key (``t<seq>``) as the owner of the
    originals it shadowed, as a checkpoint's id is named for its span.
    """

    def __init__(self) -> None:
        self._open: dict[str, Event] = {}
        self.committed = 0
        """Committed landings folded so far."""

    def fold(self, event: Event) -> dict[int, str]:
        """The originals the landing ``event`` commits shadowed, each mapped to the landing's
        archive key; ``{}`` for any other event."""
        data = event.data
        if event.type == "compaction/start" and data.get("trigger") == TURN_TRIGGER:
            self._open[str(data.get("compactionId"))] = event
            return {}
        if event.type != "compaction/end":
            return {}
        start = self._open.pop(str(data.get("compactionId")), None)
        if start is None or "error" in data:
            return {}
        self.committed += 1
        seqs = start.data.get("shadowedSeqs")
        key = str(start.data.get("checkpoint"))
        return {s: key for s in seqs if type(s) is int} if isinstance(seqs, list) else {}


def turn_owners(events: Iterable[Event]) -> dict[int, str]:
    """Seq → archive key of every original a committed turn landing among ``events`` (in
    log order) shadowed."""
    landings = TurnLandings()
    owners: dict[int, str] = {}
    for event in events:
        for seq, key in landings.fold(event).items():
            owners.setdefault(seq, key)
    return owners
