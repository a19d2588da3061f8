"""Where an :class:`~dashr_ext.agent.Agent` works: the :class:`AgentHost` protocol.

The agent loop never touches a session directly: it records, asks for the next request,
marks turns and steps and runs cells through an ``AgentHost``, so the same loop serves a
session in this process (:class:`DashrHost`, wrapping a :class:`~dashr_ext.Dashr` and the
shell or namespace its cells run in) and one in a Jupyter kernel
(:class:`~dashr_ext.bridge.KernelSession`, whose ``run_cell`` executes in that kernel).

This module never imports IPython; cells run in a shell only through :mod:`dashr_ext._cells`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._cells import CellOutput, run_cell
from ._checkpoints import checkpoint_of

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ._controller import Dashr

__all__ = [
    "ARCHIVE_NAMES",
    "HOST_MEMBERS",
    "AgentHost",
    "CellResult",
    "DashrHost",
    "host_problem",
    "tool_name",
]

ARCHIVE_NAMES = ("dashr_compaction_archive", "history_outline", "history_read", "history_search")
"""The names bound in the namespace cells run in."""


def tool_name(tool: object) -> object:
    """The ``function.name`` of an OpenAI tool schema (None when it has none)."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    return function.get("name") if isinstance(function, Mapping) else None


class CellResult(Protocol):
    """What one ``run_cell`` produced, as the agent reads it (e.g. a ``CellOutput``)."""

    @property
    def text(self) -> str:
        """Everything the cell produced, in the order a notebook shows it."""
        ...

    @property
    def is_error(self) -> bool: ...

    @property
    def interrupted(self) -> bool:
        """A ``KeyboardInterrupt`` stopped the cell: the agent's turn ends ``interrupted``."""
        ...


class _Measured(Protocol):
    @property
    def total(self) -> int: ...


class AgentHost(Protocol):
    """What :class:`~dashr_ext.agent.Agent` needs from the session it works in.

    The names are :class:`~dashr_ext.Dashr`'s and its session's, and
    :class:`~dashr_ext.bridge.KernelSession` has them all. Recording happens in the order
    the agent calls: ``begin_turn``, ``record_openai`` (the user message), per step
    ``begin_step``, ``request_messages`` (the pressure check: it may compact), the request,
    ``report_usage``, ``record_openai`` (the assistant message), one ``append_tool_result``
    per call, ``end_step``; then ``end_turn``. ``len(host)`` and ``compactions`` tell the
    agent what compaction did between two points of that sequence.
    """

    # ------------------------------------------------------------------ the log's state

    @property
    def open_turn(self) -> int | None: ...

    @property
    def open_step(self) -> tuple[int, int] | None:
        """(turn, step) of the open step."""
        ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def read_only(self) -> bool: ...

    def pending_tool_calls(self) -> list[str]:
        """Ids of the tool calls still waiting for a result, oldest first."""
        ...

    def tool_call_seq(self, tool_call_id: str) -> int | None:
        """The seq of the call with this id anywhere in the log (None: the id is free)."""
        ...

    def __len__(self) -> int:
        """Events in the session log."""
        ...

    def compactions(self, since: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Checkpoints committed, and errors of passes that failed, from seq ``since`` on."""
        ...

    # ------------------------------------------------------------------ recording

    def begin_turn(self) -> object: ...

    def end_turn(self, reason: str = "completed") -> object: ...

    def begin_step(self) -> object: ...

    def end_step(self) -> object: ...

    def record_openai(self, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> object:
        """Append OpenAI chat message(s)."""
        ...

    def append_tool_result(
        self, tool_call_id: str, content: str, *, tool_name: str | None = None, is_error: bool
    ) -> object: ...

    def report_usage(self, prompt_tokens: int, completion_tokens: int | None = None) -> object:
        """The provider's usage of the last request."""
        ...

    # ------------------------------------------------------------------ requests

    def request_messages(self) -> list[dict[str, Any]]:
        """The pressure check (may compact), then the next request's messages."""
        ...

    def measure(self) -> _Measured:
        """The size of the next request (``.total`` tokens)."""
        ...

    def handle_overflow(self) -> bool:
        """After a context-length error: reduce; True means retry the request once."""
        ...

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The recall tools' schemas ([] until there is a checkpoint)."""
        ...

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run a recall tool call; a bad call raises :class:`~dashr_ext.errors.RecallError`."""
        ...

    # ------------------------------------------------------------------ the harness's tools

    @property
    def extra_tools(self) -> list[dict[str, Any]]:
        """Tool schemas the harness sends beyond the session's (``run_cell``), counted in
        every measurement; assigning replaces them all."""
        ...

    @extra_tools.setter
    def extra_tools(self, tools: Sequence[Mapping[str, Any]]) -> None: ...

    def run_cell(self, code: str) -> CellResult:
        """Run one cell of Python where the session lives."""
        ...


class DashrHost:
    """An :class:`AgentHost` over a :class:`~dashr_ext.Dashr` in this process.

    Cells run in ``shell`` (an IPython shell) or else in ``namespace`` (default: a new
    dict); either gets ``dashr_compaction_archive`` and the ``history_*`` helpers of this
    session. :attr:`extra_tools` is ``dashr.extra_tools`` itself (not a copy).
    """

    def __init__(
        self,
        dashr: Dashr,
        *,
        shell: InteractiveShell | None = None,
        namespace: dict[str, Any] | None = None,
    ) -> None:
        self.dashr = dashr
        self.shell = shell
        self.namespace: dict[str, Any] = (
            shell.user_ns if shell is not None else namespace if namespace is not None else {}
        )
        self._bind_names()

    def __repr__(self) -> str:
        where = "IPython shell" if self.shell is not None else "plain namespace"
        return f"<DashrHost session={self.dashr.session.id} ({where})>"

    def _bind_names(self) -> None:
        """Bind the archive and recall helpers where cells run, unless already this session's."""
        if self.namespace.get("dashr_compaction_archive") is self.dashr.archive:
            return
        values = (
            self.dashr.archive,
            self.dashr.history_outline,
            self.dashr.history_read,
            self.dashr.history_search,
        )
        self.namespace.update(zip(ARCHIVE_NAMES, values, strict=True))

    # ------------------------------------------------------------------ the log's state

    @property
    def open_turn(self) -> int | None:
        return self.dashr.session.open_turn

    @property
    def open_step(self) -> tuple[int, int] | None:
        return self.dashr.session.open_step

    @property
    def system_prompt(self) -> str | None:
        return self.dashr.session.system_prompt

    @property
    def read_only(self) -> bool:
        return self.dashr.session.read_only

    def pending_tool_calls(self) -> list[str]:
        return self.dashr.session.pending_tool_calls()

    def tool_call_seq(self, tool_call_id: str) -> int | None:
        return self.dashr.session.tool_call_seq(tool_call_id)

    def __len__(self) -> int:
        return len(self.dashr.session)

    def compactions(self, since: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        committed: list[str] = []
        errors: list[str] = []
        for event in self.dashr.session.events[since:]:
            checkpoint = checkpoint_of(event)
            if checkpoint is not None:
                committed.append(checkpoint)
            elif event.type == "compaction/end" and "error" in event.data:
                errors.append(str(event.data["error"]))
        return tuple(committed), tuple(errors)

    # ------------------------------------------------------------------ recording

    def begin_turn(self) -> object:
        return self.dashr.session.begin_turn()

    def end_turn(self, reason: str = "completed") -> object:
        return self.dashr.end_turn(reason)  # the controller queues the turn-memory job

    def begin_step(self) -> object:
        return self.dashr.session.begin_step()

    def end_step(self) -> object:
        return self.dashr.session.end_step()

    def record_openai(self, message: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> object:
        return self.dashr.record_openai(message)

    def append_tool_result(
        self, tool_call_id: str, content: str, *, tool_name: str | None = None, is_error: bool
    ) -> object:
        return self.dashr.session.append_tool_result(
            tool_call_id, content, tool_name=tool_name, is_error=is_error
        )

    def report_usage(self, prompt_tokens: int, completion_tokens: int | None = None) -> object:
        return self.dashr.report_usage(prompt_tokens, completion_tokens)

    # ------------------------------------------------------------------ requests

    def request_messages(self) -> list[dict[str, Any]]:
        return self.dashr.request_messages()

    def measure(self) -> _Measured:
        return self.dashr.measure()

    def handle_overflow(self) -> bool:
        return self.dashr.handle_overflow()

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.dashr.tool_schemas()

    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        return self.dashr.call_tool(name, arguments)

    # ------------------------------------------------------------------ the harness's tools

    @property
    def extra_tools(self) -> list[dict[str, Any]]:
        return self.dashr.extra_tools

    @extra_tools.setter
    def extra_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.dashr.extra_tools[:] = [t if isinstance(t, dict) else dict(t) for t in tools]

    def run_cell(self, code: str) -> CellOutput:
        return run_cell(code, shell=self.shell, namespace=self.namespace)


HOST_MEMBERS: tuple[str, ...] = (
    "__len__",
    *sorted(n for n in vars(AgentHost) if not n.startswith("_")),
)
"""The names an :class:`AgentHost` has."""


def host_problem(host: object) -> str | None:
    """None when ``host`` has every :data:`HOST_MEMBERS` name, else what it lacks.

    Looked up without running anything: on a remote host a property is a round trip.
    """
    missing = [name for name in HOST_MEMBERS if not _has(host, name)]
    if not missing:
        return None
    return f"{type(host).__name__} object without {', '.join(missing)}"


def _has(obj: object, name: str) -> bool:
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return False
    return True


# Both hosts are AgentHosts; mypy checks it here rather than at every use.
_: type[AgentHost] = DashrHost
if TYPE_CHECKING:
    from .bridge import KernelSession

    _remote: type[AgentHost] = KernelSession
