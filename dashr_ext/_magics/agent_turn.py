"""``%%agent``: one cell as one agent turn, with a progress line per step (SPEC §10).

The printing glue between :class:`~dashr_ext.agent.Agent` and a notebook cell; the loop
itself lives in :mod:`dashr_ext.agent`.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from IPython.core.interactiveshell import InteractiveShell

from .._controller import Dashr as DashrController
from ..agent import Agent, AgentReply, StepReport
from ..errors import ConfigError

__all__ = ["agent_cell"]


def agent_cell(
    shell: InteractiveShell | None,
    dashr: DashrController,
    cell: str,
    *,
    agent: Agent | None = None,
    out: TextIO | None = None,
    **options: Any,
) -> AgentReply:
    """Run one ``%%agent`` cell: a turn with ``cell`` as the user message.

    Prints one progress line per step to ``out`` (default ``sys.stdout``) as the steps finish,
    e.g. ``step 3: run_cell · ~5231 tokens · compacted → c57``, then a closing line when the
    turn hit ``max_steps``, and returns the :class:`~dashr_ext.agent.AgentReply` (the notebook
    shows its text). ``agent`` reuses a long-lived :class:`~dashr_ext.agent.Agent`; otherwise
    one is built from ``options`` (the ``Agent`` keywords) for this cell and closed after it.
    """
    stream = out if out is not None else sys.stdout

    def show(report: StepReport) -> None:
        print(report.line(), file=stream, flush=True)

    owned = agent is None
    if agent is None:
        agent = Agent(dashr, shell=shell, **options)
    elif options:
        raise ConfigError("agent_cell options", "none when an agent is given", sorted(options))
    previous, agent.on_event = agent.on_event, show
    try:
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
    return reply
