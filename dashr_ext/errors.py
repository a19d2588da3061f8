"""Exceptions raised by dashr_ext.

Every public entry point fails with one of these, and the message says what was
wrong and what is accepted. A failed operation leaves the session log exactly as
it was. Catch :class:`DashrError` to handle them all::

    DashrError
    ├── ConfigError (ValueError)            a configuration value is out of range
    ├── EventError (ValueError)             an event or message does not fit the vocabulary
    │   └── FormatError                     an adapter input (e.g. an OpenAI message) is malformed
    ├── SurfaceError (ValueError)           a surface operation is not allowed (e.g. a split pair)
    ├── StoreError                          the session file cannot be used
    │   ├── CorruptLogError                 a line in the middle of the file is not a valid event
    │   ├── SessionLockedError              another process holds the writer lock
    │   ├── ReadOnlyError                   a write on a session opened read-only
    │   └── SearchIndexError                the cross-session search index cannot be used
    ├── CompactionError                     a compaction pass cannot start or commit
    │   ├── CompactionInProgressError       a pass is already running for this session
    │   └── SummarizerError                 the summarizer failed (timeout, HTTP error, bad output)
    │       └── SummarizerEndpointError     ... because its endpoint failed (also an EndpointError)
    ├── EndpointError                       an OpenAI-compatible endpoint failed or said no
    ├── PromptError (ValueError)            a prompt template is missing or malformed
    ├── RecallError (ValueError)            a history_* call has bad arguments
    ├── PinError (ValueError)               a pin is empty, does not fit the checkpoint budget, or
    │                                       an unpin names no current pin
    ├── TurnMemoryError (ValueError)        a turn cannot be rewritten (open, unknown, not a run)
    │   ├── TurnEditError                   a working-turn edit was refused; nothing changed
    │   │   └── StaleNodeError              ... because it names a node an earlier edit replaced
    │   └── TurnValidationError             the rewritten turn breaks a rule (all are listed)
    ├── AgentError                          the agent loop was misused (a turn already runs)
    └── BridgeError                         talking to a kernel over the dashr comm failed
        ├── ProtocolError                   the kernel refused a malformed request (op, size, …)
        ├── InternalError                   the kernel side failed unexpectedly (type and text only)
        ├── BridgeTimeoutError              no reply within the timeout (also a TimeoutError)
        └── KernelDiedError                 the kernel process died or stopped answering

Warnings (the operation went on; see the ``warnings`` module to filter them)::

    UserWarning
    ├── CompactionWarning                   an automatic pass failed; the request went uncompacted
    ├── UsageWarning                        a provider's usage report was implausibly low; not used
    └── TornTailWarning                     the session file ended with a partial line (a cut write)

An agent that wants to react to its model's endpoint catches :class:`EndpointError` and looks
at ``context_length`` (the provider said the request is too long) and ``status_code``.
"""

from __future__ import annotations

import sys

__all__ = [
    "AgentError",
    "BridgeError",
    "BridgeTimeoutError",
    "CompactionError",
    "CompactionInProgressError",
    "CompactionWarning",
    "ConfigError",
    "CorruptLogError",
    "DashrError",
    "EndpointError",
    "EventError",
    "FormatError",
    "InternalError",
    "KernelDiedError",
    "PinError",
    "PromptError",
    "ProtocolError",
    "ReadOnlyError",
    "RecallError",
    "SearchIndexError",
    "SessionLockedError",
    "StaleNodeError",
    "StoreError",
    "SummarizerEndpointError",
    "SummarizerError",
    "SurfaceError",
    "TornTailWarning",
    "TurnEditError",
    "TurnMemoryError",
    "TurnValidationError",
    "UsageWarning",
]


class DashrError(Exception):
    """Base class of every error raised by dashr_ext."""


class ConfigError(DashrError, ValueError):
    """A configuration value is missing, of the wrong type, or out of range.

    The message names the field, the accepted range and the value received.
    """

    def __init__(self, field: str, accepted: str, received: object) -> None:
        self.field = field
        self.accepted = accepted
        self.received = received
        super().__init__(f"{field}: expected {accepted}, got {_shown(received)}")


def _shown(value: object) -> str:
    """``repr(value)``; an integer from 2**130 on (40 digits) by its first digits and its
    length (past ``sys.get_int_max_str_digits()`` Python refuses to write it out at all)."""
    if type(value) is not int or abs(value).bit_length() <= 130:
        return repr(value)
    try:
        text = repr(value)
    except ValueError:
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return f"{text[:20]}… (an integer of {len(text.lstrip('-'))} digits)"


class EventError(DashrError, ValueError):
    """An event, message or content block does not fit the on-disk vocabulary."""


class FormatError(EventError):
    """An adapter input (for example an OpenAI chat message) is malformed.

    ``field`` is the path of the offending field, e.g. ``tool_calls[0].function.arguments``.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class SurfaceError(DashrError, ValueError):
    """A surface operation is not allowed (unknown seq, split tool pair, bad replace)."""


class StoreError(DashrError):
    """The session file cannot be opened, read or written."""


class CorruptLogError(StoreError):
    """A complete line of the session file is not a valid event.

    Raised with the file, the 1-based line number and the reason; the file is left untouched.
    """

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason} (the file was not modified)")


class SessionLockedError(StoreError):
    """Another writer holds the session's lock; open it with ``read_only=True`` to inspect it."""


class ReadOnlyError(StoreError):
    """A write was attempted on a session opened read-only."""


class SearchIndexError(StoreError):
    """The cross-session search index cannot be used: this Python's SQLite lacks FTS5 (or its
    tokenizer), or another process holds the index too long. The session files are untouched."""


class CompactionError(DashrError):
    """A compaction pass cannot start or cannot commit."""


class CompactionInProgressError(CompactionError):
    """A compaction pass is already running for this session."""


class SummarizerError(CompactionError):
    """The summarizer failed: timeout, HTTP error, malformed or empty output."""


class EndpointError(DashrError):
    """An OpenAI-compatible ``/chat/completions`` endpoint failed or refused a request.

    Raised after the retries are spent (connect errors, timeouts, 408/409/429, 5xx) or at once
    (other 4xx, a body that is not a JSON object). The message never contains the API key.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        attempts: int = 1,
        context_length: bool = False,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        """The last HTTP status, or None when no response arrived (timeout, connect error)."""
        self.attempts = attempts
        """How many times the request was sent."""
        self.context_length = context_length
        """True when the provider said the request exceeds the model's context window."""


class SummarizerEndpointError(SummarizerError, EndpointError):
    """The ``llm`` summarizer's endpoint failed: catchable as either parent."""


class PromptError(DashrError, ValueError):
    """A prompt template is missing, or rendering it met unknown or leftover syntax."""


class RecallError(DashrError, ValueError):
    """A history_outline / history_read / history_search call has bad arguments."""


class PinError(DashrError, ValueError):
    """``pin`` / ``unpin`` refused: an empty text, a pin set that would not fit the checkpoint
    budget (the message names both sizes), or an id that names no current pin (the message
    lists the current ones). The log is left as it was."""


class TurnMemoryError(DashrError, ValueError):
    """A completed turn cannot be rewritten: it is unknown or still open, has no current node,
    or is no longer a contiguous run of its own nodes on the surface."""


class TurnEditError(TurnMemoryError):
    """A working-turn edit was refused (an unknown id, a range that is not contiguous, more
    nodes than the range can land, a malformed node); the editor's state is unchanged."""


class StaleNodeError(TurnEditError):
    """An edit named a node id that an earlier accepted edit replaced.

    ``node_id`` is the stale id, ``replaced_by`` the ids that replaced it and ``current`` the
    ids now on the working turn that descend from it.
    """

    def __init__(
        self, node_id: str, replaced_by: tuple[str, ...], current: tuple[str, ...]
    ) -> None:
        self.node_id = node_id
        self.replaced_by = replaced_by
        self.current = current
        later = "" if current == replaced_by else f"; its content is now in {', '.join(current)}"
        super().__init__(
            f"node {node_id} was replaced by {', '.join(replaced_by)}{later}: "
            "use the current ids (list the turn's nodes to see them)"
        )


class TurnValidationError(TurnMemoryError):
    """The rewritten turn breaks one or more rules; ``problems`` lists every one of them
    (``(rule, message)`` pairs) and the message joins them."""

    def __init__(self, problems: tuple[tuple[str, str], ...]) -> None:
        self.problems = problems
        lines = "\n".join(f"- [{rule}] {message}" for rule, message in problems)
        count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
        super().__init__(f"the rewritten turn is not valid ({count}):\n{lines}")


class AgentError(DashrError):
    """The agent loop was misused: a turn is already running, or the user message is empty."""


class BridgeError(DashrError):
    """Talking to a kernel over the ``dashr`` comm failed (``dashr_ext.bridge``).

    An error the kernel's own operation raised comes back as its own class instead (a
    ``ConfigError`` from ``configure``, a ``FormatError`` from ``record``, …).
    """


class ProtocolError(BridgeError):
    """The kernel refused a malformed request: not an object, unknown ``op``, wrong types,
    an unsupported ``version``, lone surrogates, or more than the size cap."""


class InternalError(BridgeError):
    """The kernel side failed with an unexpected exception; the message is its type and text."""


class BridgeTimeoutError(BridgeError, TimeoutError):
    """No reply arrived within the timeout; the kernel may still be working on the request."""


class KernelDiedError(BridgeError):
    """The kernel process died or stopped answering its heartbeat."""


class CompactionWarning(UserWarning):
    """An automatic pass failed; the request goes out uncompacted."""


class UsageWarning(UserWarning):
    """A provider's ``prompt_tokens`` was far below the local count of the same request.

    The meter measures with its own count instead (see ``TokenMeter.measure``); proxies that
    report only the uncached part of a prompt do this.
    """


class TornTailWarning(UserWarning):
    """The session file ended with a partial line (a write cut short by a crash)."""
