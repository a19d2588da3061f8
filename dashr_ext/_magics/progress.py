"""Progress of slow passes and retried requests in a shell (:mod:`dashr_ext._progress`).

In a kernel each piece of work longer than a second gets a live display (``display_data``
with a ``display_id``, then ``update_display_data``); in a terminal, one line per change on
stderr. A cell is one scope, from ``pre_run_cell`` to ``post_run_cell``, so
``dashr.request_messages()`` in a user's own loop shows its passes; ``%compact`` and
``%%agent`` open a scope for their call too (the cell's, when there is one).
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from IPython.core.interactiveshell import InteractiveShell

from .. import _progress
from .._controller import Dashr as DashrController
from .._progress import LineSink, Progress, ProgressView, Sink

if TYPE_CHECKING:
    from .._client import ChatClient

__all__ = ["CellProgress", "DisplaySink", "publish"]


def publish(
    shell: InteractiveShell,
    publisher: Any,
    obj: object,
    display_id: str | None = None,
    *,
    update: bool = False,
) -> None:
    """Show ``obj`` through ``publisher`` (a shell's display publisher) with every format."""
    formatter = shell.display_formatter
    if formatter is None:
        return
    data, metadata = formatter.format(obj)  # type: ignore[no-untyped-call]
    transient = {"display_id": display_id} if display_id is not None else None
    publisher.publish(data, metadata, transient=transient, update=update)


class DisplaySink:
    """A live notebook display: shown once, then updated in place."""

    def __init__(self, shell: InteractiveShell, publisher: Any) -> None:
        self.shell = shell
        self.publisher = publisher
        self.display_id = uuid.uuid4().hex
        self._shown = False

    def show(self, view: ProgressView) -> None:
        publish(self.shell, self.publisher, view, self.display_id, update=self._shown)
        self._shown = True


class CellProgress:
    """The progress scopes of one shell (one per loaded extension)."""

    def __init__(
        self, shell: InteractiveShell | None, controller: Callable[[], DashrController | None]
    ) -> None:
        self.shell = shell
        self._controller = controller
        self.delay_s = _progress.DEFAULT_DELAY_S
        """Work shorter than this shows nothing (0: show all work)."""
        self.live = shell is not None and getattr(shell, "kernel", None) is not None
        """Live displays (a kernel's frontend); otherwise lines on stderr."""
        self._depth = 0
        self._cell: contextlib.ExitStack | None = None
        self._progress: Progress | None = None

    def _sinks(self) -> Callable[[], Sink]:
        shell = self.shell
        if not self.live or shell is None:
            return lambda: LineSink(sys.stderr)
        # The publisher of the scope's start: an agent's run_cell swaps in a capturing one,
        # and a display updated meanwhile must not end up in the tool's output.
        publisher = shell.display_pub
        return lambda: DisplaySink(shell, publisher)

    @contextlib.contextmanager
    def scope(self, *clients: ChatClient) -> Iterator[Progress | None]:
        """Watch the controller's passes and ``clients``' retries for the block."""
        controller = self._controller()
        if controller is None:
            yield None
            return
        progress = self._progress or Progress(self._sinks(), delay_s=self.delay_s)
        with progress.watch(controller, *clients):
            yield progress

    # ------------------------------------------------------------------ cells

    def register(self) -> None:
        if self.shell is not None:
            self.shell.events.register("pre_run_cell", self._pre_run_cell)
            self.shell.events.register("post_run_cell", self._post_run_cell)

    def unregister(self) -> None:
        self._close_cell(None)
        if self.shell is None:
            return
        for name, hook in (
            ("pre_run_cell", self._pre_run_cell),
            ("post_run_cell", self._post_run_cell),
        ):
            with contextlib.suppress(ValueError):
                self.shell.events.unregister(name, hook)

    def _pre_run_cell(self, info: object) -> None:
        # An agent's run_cell runs a cell inside the cell: it joins the outer scope.
        self._depth += 1
        if self._depth > 1:
            return
        stack = contextlib.ExitStack()
        self._progress = stack.enter_context(self.scope())
        self._cell = stack

    def _post_run_cell(self, result: Any) -> None:
        if self._depth == 0:  # the cell that loaded the extension
            return
        self._depth -= 1
        if self._depth == 0:
            error = getattr(result, "error_in_exec", None)
            self._close_cell(error)

    def _close_cell(self, error: BaseException | None) -> None:
        stack, self._cell, self._progress = self._cell, None, None
        self._depth = 0
        if stack is None:
            return
        if error is not None:
            with contextlib.suppress(type(error)):
                stack.__exit__(type(error), error, error.__traceback__)
        else:
            stack.close()
