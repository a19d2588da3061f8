"""``%%agent``: one cell as one agent turn, shown step by step (SPEC §10).

The display glue between :class:`~dashr_ext.agent.Agent` and a notebook cell; the loop
itself lives in :mod:`dashr_ext.agent`. What each step ran is read back from the session log.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, TextIO

from IPython.core.interactiveshell import InteractiveShell

from .._controller import Dashr as DashrController
from .._display import MarkdownReply, step_view
from .._progress import Progress
from ..agent import Agent, AgentReply, StepReport
from ..errors import ConfigError
from .progress import publish

__all__ = ["agent_cell"]


def agent_cell(
    shell: InteractiveShell | None,
    dashr: DashrController,
    cell: str,
    *,
    agent: Agent | None = None,
    out: TextIO | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> AgentReply:
    """Run one ``%%agent`` cell: a turn with ``cell`` as the user message.

    Shows each step as it finishes (:class:`~dashr_ext._display.StepView`): its line, e.g.
    ``step 3: run_cell · ~5231 tokens · compacted → c57``, the code each ``run_cell`` ran and
    an excerpt of its output — through the shell's display (a collapsible, highlighted block
    in a notebook) or, with ``out`` or without a shell, as plain text on ``out`` (default
    ``sys.stdout``); then a closing line when the turn hit ``max_steps``. Returns the
    :class:`~dashr_ext.agent.AgentReply` (a notebook renders its text as Markdown).
    ``progress`` also shows the agent's retried requests and slow passes. ``agent`` reuses a
    long-lived :class:`~dashr_ext.agent.Agent`; otherwise one is built from ``options`` (the
    ``Agent`` keywords) for this cell and closed after it.
    """
    stream = out if out is not None else sys.stdout
    live = shell is not None and out is None
    session = dashr.session
    start = len(session)

    def show(report: StepReport) -> None:
        nonlocal start
        if progress is not None:
            progress.end()  # the step's request and passes are over
        end = len(session)
        view = step_view(report.line(), session.events[start:end])
        start = end
        if live and shell is not None:
            publish(shell, shell.display_pub, view)
        else:
            print(view.text, file=stream, flush=True)

    owned = agent is None
    if agent is None:
        agent = Agent(dashr, shell=shell, **options)
    elif options:
        raise ConfigError("agent_cell options", "none when an agent is given", sorted(options))
    previous, agent.on_event = agent.on_event, show
    try:
        with contextlib.ExitStack() as stack:
            if progress is not None:
                stack.enter_context(progress.watch(dashr, agent.client))
            reply = agent.run_turn(cell)
    finally:
        agent.on_event = previous
        if owned:
            agent.close()
    if reply.reason == "max-steps":
        steps = len(reply.steps)
        print(
            f"turn {reply.turn} stopped after {steps} step{'s' if steps != 1 else ''} "
            "(max_steps); send another cell to continue",
            file=stream,
            flush=True,
        )
    return MarkdownReply.of(reply)
