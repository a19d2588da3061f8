"""Tab completion for the magics: subcommands, options, checkpoint and pin ids, session files.

One matcher (IPython's completer API v2, in ``shell.Completer.custom_matchers``) serves
every magic of the extension; loading adds it, unloading removes it. Where it has nothing
to offer (a path to export to, a search query) it steps aside, so IPython's own file and
name completion still work there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from IPython.core.completer import (
    CompletionContext,
    SimpleCompletion,
    SimpleMatcherResult,
    context_matcher,
)
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from .._catalog import session_files
from ..errors import DashrError
from .attachment import same_file, sessions_dir
from .subcommands import COMMANDS, SUBCOMMANDS, Host

__all__ = ["MAGIC_OPTIONS", "MATCHER_ID", "complete", "install", "uninstall"]

MATCHER_ID = "dashr_ext.magics"
"""The matcher's identifier (``IPCompleter.disable_matchers`` takes it)."""

MAGIC_OPTIONS: dict[str, tuple[str, ...]] = {
    "%compact": ("--dry-run", "--prune-only"),
    "%history_outline": (),
    "%history_read": ("--seq", "--turn", "--cursor"),
    "%history_search": ("--checkpoint", "--limit", "--cursor", "--all"),
    "%%agent": ("--max-steps",),
}
"""The options of every magic but ``%dashr`` (whose subcommands carry their own)."""

SESSION_CHOICES = 20
"""How many recent session files ``%dashr attach <Tab>`` offers."""

_TAKES_VALUE = frozenset({"--seq", "--turn", "--cursor", "--limit", "--max-steps"})


def complete(host: Host, line: str, token: str, *, first_line: bool = True) -> list[str] | None:
    """What completes ``token``, the last word of ``line`` (the text before the cursor).

    None when the line is not one of these magics, or when this position takes a value
    this matcher cannot list (a path, a query, a number).
    """
    words = line[: len(line) - len(token)].split()
    if not words:
        return None
    magic = words[0]
    if magic == "%%agent" and not first_line:
        return None
    before = words[1:]
    if magic == "%dashr":
        return _dashr(host, before, token)
    if magic not in MAGIC_OPTIONS:
        return None
    previous = before[-1] if before else None
    if previous == "--checkpoint":
        return _starting(token, _checkpoint_ids(host)) or None
    if previous in _TAKES_VALUE:
        return None
    options = _unused(MAGIC_OPTIONS[magic], before)
    if token.startswith("-"):
        return _starting(token, options) or None
    if magic == "%history_search":
        return None  # the query: free text
    if magic == "%history_read":  # exactly one of CHECKPOINT, --seq, --turn, --cursor
        return None if before else _starting(token, [*_checkpoint_ids(host), *options]) or None
    return _starting(token, options) or None


def _dashr(host: Host, before: Sequence[str], token: str) -> list[str] | None:
    if not before:
        return _starting(token, COMMANDS)
    key = before[0]
    rest = list(before[1:])
    if key == "snapshot":
        if not rest:
            return _starting(token, ("save", "load"))
        key = f"snapshot {rest.pop(0)}"
    sub = SUBCOMMANDS.get(key)
    if sub is None or sub.rest or (rest and rest[-1] in _TAKES_VALUE):
        return None  # `pin TEXT…`: free text
    if key == "unpin":
        return None if rest else _starting(token, _pin_ids(host)) or None
    options = _unused(sub.options, rest)
    if token.startswith("-"):
        return _starting(token, options) or None
    if key != "attach" or "--last" in rest or any(not w.startswith("-") for w in rest):
        return None  # a path of the user's choosing: IPython's file completion
    return _starting(token, [*_recent_sessions(host, token), *options]) or None


def _starting(token: str, choices: Iterable[str]) -> list[str]:
    return [c for c in choices if c.startswith(token)]


def _unused(options: Iterable[str], words: Sequence[str]) -> list[str]:
    return [o for o in options if o not in words]


def _checkpoint_ids(host: Host) -> list[str]:
    try:
        return [cp.id for cp in host.controller.checkpoints()]
    except (DashrError, UsageError):  # no session attached
        return []


def _pin_ids(host: Host) -> list[str]:
    try:
        return [pin.id for pin in host.controller.pins()]
    except (DashrError, UsageError):  # no session attached
        return []


def _recent_sessions(host: Host, token: str) -> list[str]:
    """The newest session files but the attached one, spelled as ``token`` begins (``~/…``
    or absolute)."""
    home = str(Path.home())
    found: list[str] = []
    try:
        attached = host.controller.session.path
        paths = session_files(sessions_dir(host.session_dir))
    except (OSError, UsageError):
        return []
    for path in paths:
        if same_file(attached, path):
            continue
        if len(found) == SESSION_CHOICES:
            break
        text = str(path)
        if token.startswith("~") and text.startswith(home + os.sep):
            text = "~" + text[len(home) :]
        found.append(text)
    return found


def install(shell: InteractiveShell, host: Host) -> None:
    """Add the matcher for ``host``'s magics to ``shell``'s completer (replacing an old one)."""

    @context_matcher(identifier=MATCHER_ID)  # type: ignore[untyped-decorator]
    def matcher(context: CompletionContext) -> SimpleMatcherResult:
        found = complete(
            host,
            context.text_until_cursor.lstrip(),
            context.token,
            first_line=context.cursor_line == 0,
        )
        return {
            "completions": [SimpleCompletion(text, type="dashr") for text in found or ()],
            "suppress": bool(found),
            "ordered": True,
        }

    uninstall(shell)
    shell.Completer.custom_matchers.append(matcher)


def uninstall(shell: InteractiveShell) -> None:
    """Remove the matcher :func:`install` added, if any."""
    matchers = shell.Completer.custom_matchers
    matchers[:] = [m for m in matchers if getattr(m, "matcher_identifier", None) != MATCHER_ID]
