"""Deterministic, realistic coding-agent sessions for demos, notebooks and tests.

The story is data (``scenario.json`` and ``texts/``), played by ``builder.py``;
:func:`demo_messages` documents its shape and where each planted fact appears.
"""

from __future__ import annotations

from typing import Any

from .builder import Session, scenario

__all__ = [
    "DEMO_SYSTEM_PROMPT",
    "DEMO_TOOLS",
    "MIN_OUTPUT_CHARS",
    "MIN_STEPS_PER_TURN",
    "SCRIPTED_NOTE",
    "demo_facts",
    "demo_messages",
]

MIN_STEPS_PER_TURN = 7
MIN_OUTPUT_CHARS = 200
SCRIPTED_NOTE = (
    "scripted demo output: a made-up payments-service repository, nothing ran on this machine"
)
"""What a front end says next to a tool output of the demo it shows (a failing test run
there looks like one of the reader's own)."""

DEMO_SYSTEM_PROMPT: str = scenario()["system_prompt"]
DEMO_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": tool["description"],
            "parameters": {
                "type": "object",
                "properties": {
                    k: {"type": "string", "description": v} for k, v in tool["parameters"].items()
                },
                "required": list(tool["parameters"]),
                "additionalProperties": False,
            },
        },
    }
    for name, tool in scenario()["tools"].items()
]


def demo_facts() -> dict[str, str]:
    """The distinctive literal values planted in :func:`demo_messages` (see the module doc)."""
    return dict(scenario()["facts"])


def demo_messages(
    *, turns: int = 3, steps_per_turn: int = 12, seed: int = 7, output_chars: int = 1500
) -> list[dict[str, Any]]:
    """A realistic coding-agent session as OpenAI chat-completions messages.

    The system message comes first, then ``turns`` turns of one user message,
    ``steps_per_turn`` (assistant tool call, tool result) pairs with ids
    ``call_<turn>_<step>``, and a closing text-only assistant message. The same arguments
    always give an identical list. See the module docstring for the planted facts.

    :func:`demo_messages` returns a list of OpenAI chat-completions messages: a system prompt,
    then ``turns`` user requests, each worked through in ``steps_per_turn`` tool-using steps
    (one assistant message with exactly one tool call, then its ``tool`` result) and closed by
    a text-only assistant message. The story is a coding agent fixing the retry helper of a
    small payments service (``RetryPolicy``, ``compute_backoff``, ``retry_call``): it explores
    with ``bash``, reads and writes files, runs pytest (a real-looking failing run with a
    traceback, then passing runs), is corrected by the user at the start of turn 2, and later
    adds tests, documents settings and writes a report with ``run_cell``. The story is data
    (``scenario.json`` and the project files in ``texts/``); ``builder.py`` plays it (SPEC §11).

    The same arguments always give the same messages: no clock, no I/O, and all variation
    comes from ``random.Random(seed)`` (log lines, test names, durations, padding). A different
    seed changes the content, never the structure (roles, tool-call ids, message count).
    ``output_chars`` sets the typical size of a tool result; outputs are padded with more of
    what they naturally contain (file lines, test results, log lines, commits), so text grows
    with ``output_chars`` and ``turns``. With the defaults the session holds about 70k
    characters of text (about 21k tokens), so a recency window of 6000 tokens with 1500
    retained compacts it several times. Turns 4 and later are follow-up requests (structured
    logging, the policy description, a changelog entry, a jitter test) taken in rotation.
    ``steps_per_turn`` must be at least 7 and ``output_chars`` at least 200.

    Planted facts (:func:`demo_facts`), where they appear verbatim (step numbers are the
    ``call_<turn>_<step>`` ids with the default ``steps_per_turn=12``; with other values the
    same steps keep their order, optional steps are dropped from the end of a turn's plan or
    extra exploration or verification steps are inserted at a fixed point after the steps
    named below, so with more steps their ids stay the same):

    * ``error`` — turn 1 only: the pytest output of step 2 (``call_1_2``: the failing
      ``test_gives_up_after_budget``, whose short traceback runs through
      ``src/payments/retry.py`` with line numbers).
    * ``secret_value`` — turn 1 only: the ``cat config/settings.toml`` output of step 6
      (``call_1_6``).
    * ``commit`` — turn 1 only: the ``git log`` output of step 7 (``call_1_7``), the config
      refactor that introduced the bug.
    * ``magic_number`` — turn 1 only: the ``tail logs/gateway.log`` output of step 8
      (``call_1_8``).
    * ``correction`` — the whole text of the user message that opens turn 2, and nowhere else.
    * ``config_key`` — first in the turn-2 user correction, then in later edits, tests and docs
      (never in turn 1).
    * ``report_path`` — turn 3: the ``run_cell`` code of step 7 (``call_3_7``) that writes the
      report with ``open(..., "w")``, and later steps that read it back.
    * ``file`` — the file at the heart of the story; it appears throughout the session.

    The first four are the *early* facts: with compaction they end up only in shadowed
    originals, so they can be found again only through recall.
    """
    for name, value, least in (
        ("turns", turns, 1),
        ("steps_per_turn", steps_per_turn, MIN_STEPS_PER_TURN),
        ("output_chars", output_chars, MIN_OUTPUT_CHARS),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    return Session(seed, output_chars).messages(turns, steps_per_turn)
