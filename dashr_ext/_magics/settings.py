"""The options as the session's settings: held back until they agree, shown on attach.

``%config`` sets one option per line, so a value that needs another one
(``recency_window_tokens`` needs ``retain_tokens`` below it; ``summarizer = 'llm'`` needs
``llm_base_url`` and ``llm_model``) may come first. Each value is checked on its own when it
is set (a bad one is refused, as before); the options feeding one object (the compaction
settings, the recall settings, the summarizer) are checked together when they are applied to
the session. While they disagree, the session keeps what it had, and at the end of the cell
the problem is shown once, as a one-line ``UsageError`` naming both options.

The other way round, attaching a session shows the settings its log records as the options
(:func:`show_settings`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from traitlets import Float, HasTraits

from .._config import CompactionConfig
from .._controller import Dashr as DashrController
from ..errors import ConfigError
from .options import COMPACTION_TRAITS, RECALL_TRAITS, trait_errors

__all__ = ["Ratio", "Staging", "own_summarizer_field", "show_settings"]


class Ratio(Float[float, float]):
    """The trait of a ratio setting (a ``CompactionConfig`` field of that name).

    traitlets' ``Float`` converts an integer with ``float()``, which raises OverflowError past
    the float range (``%config Dashr.threshold_ratio = 10**400``): that value is refused with
    the setting's own error instead, like any other bad value."""

    def validate(self, obj: Any, value: Any) -> float:
        try:
            return float(super().validate(obj, value))
        except OverflowError:
            with trait_errors():
                CompactionConfig.check_field(str(self.name), value)  # no ratio is an integer
            raise

    def info(self) -> str:
        """What the setting accepts, in its own words (``a number in (0, 1)``)."""
        try:
            CompactionConfig.check_field(str(self.name), None)  # every ratio refuses None
        except ConfigError as exc:
            if exc.field == self.name:
                return exc.accepted
        return super().info()


_SUMMARIZER_FIELDS = {"LLMSummarizer.base_url": "llm_base_url", "LLMSummarizer.model": "llm_model"}
"""The summarizer's fields by the option that sets them."""


def own_summarizer_field(option: str, exc: ConfigError) -> bool:
    """Whether ``exc`` (from building the summarizer) is about ``option`` itself."""
    return _SUMMARIZER_FIELDS.get(exc.field) == option


def _problem(group: str, exc: ConfigError) -> str:
    if group == "summarizer" and exc.field in _SUMMARIZER_FIELDS:
        option = _SUMMARIZER_FIELDS[exc.field]
        text = f"summarizer = 'llm' needs {option}: expected {exc.accepted}, got {exc.received!r}"
    else:
        text = str(exc)
    return f"Dashr options not applied yet: {text}"


class Staging:
    """Which option groups are held back, why, and which of those reasons were shown."""

    def __init__(self, shell: InteractiveShell | None) -> None:
        self.shell = shell
        self._held: dict[str, str] = {}
        self._shown: set[str] = set()

    @contextmanager
    def apply(self, group: str) -> Iterator[None]:
        """Apply ``group`` in the block; a ConfigError holds it back instead of raising."""
        try:
            yield
        except ConfigError as exc:
            self._held[group] = _problem(group, exc)
        else:
            self._held.pop(group, None)

    def release(self, *groups: str) -> None:
        """Forget what held ``groups`` back (their options were set to agreeing values)."""
        for group in groups:
            self._held.pop(group, None)

    def unreported(self) -> list[str]:
        """The problems holding options back that were not shown yet; each is shown once."""
        held = list(self._held.values())
        new = [problem for problem in held if problem not in self._shown]
        self._shown = set(held)
        return new

    def after_cell(self, result: ExecutionResult) -> None:
        """After each cell (``post_run_cell``): show each new problem as a UsageError line."""
        if self.shell is not None:
            for problem in self.unreported():
                self.shell.show_usage_error(UsageError(problem))  # type: ignore[no-untyped-call]


def show_settings(options: HasTraits, controller: DashrController) -> None:
    """Set the compaction and recall ``options`` to ``controller``'s settings.

    The caller makes sure no controller listens while they change: they come from it.
    """
    with options.hold_trait_notifications():
        for name in COMPACTION_TRAITS:
            setattr(options, name, getattr(controller.config, name))
        for name in RECALL_TRAITS:
            setattr(options, name, getattr(controller.recall_config, name))
