"""``%config Dashr.NAME = VALUE`` refused: one ``UsageError`` line, as the magics show theirs.

IPython's ``%config`` logs whatever a configurable raises (``ERROR:root:…``, or traitlets'
own sentence about "the 'engine' trait of a Dashr instance"). The ``Dashr`` configurable
catches a refused value itself and shows this line instead: the option, what it accepts,
the value received, and the value it keeps::

    UsageError: Dashr.engine: expected one of 'summary', 'recallable', got 'turn';
    it stays 'summary'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets import HasTraits, Integer, TraitError, TraitType

from .._config import CompactionConfig, RecallConfig
from ..errors import ConfigError
from .options import COMPACTION_TRAITS, RECALL_TRAITS

__all__ = ["refusal", "show_refusal"]


def show_refusal(
    options: HasTraits,
    shell: InteractiveShell | None,
    section: Mapping[str, Any],
    exc: TraitError,
) -> None:
    """Show :func:`refusal` as a UsageError line (raise ``exc`` again without a shell)."""
    if shell is None:
        raise exc
    shell.show_usage_error(UsageError(refusal(options, section, exc)))  # type: ignore[no-untyped-call]


def refusal(options: HasTraits, section: Mapping[str, Any], exc: TraitError) -> str:
    """The line for the value of ``section`` (``%config``'s ``Dashr`` settings) that
    ``options`` refused with ``exc``."""
    text = str(exc)
    names = [name for name in section if options.has_trait(name)]
    if not names:
        return " ".join(text.split())
    name = next((n for n in names if f"'{n}'" in text or text.startswith(f"{n}:")), names[0])
    value = section[name]
    detail = _own_words(name, value)
    if detail is None:
        _field, sep, rest = text.partition(": expected ")
        detail = f"expected {rest}" if sep else _trait_words(options.traits()[name], name, value)
    return f"Dashr.{name}: {' '.join(detail.split())}; it stays {getattr(options, name)!r}"


def _own_words(name: str, value: object) -> str | None:
    """``expected …, got …`` from the settings' own check, for a compaction or recall option."""
    try:
        if name in COMPACTION_TRAITS:
            CompactionConfig.check_field(name, value)
        elif name in RECALL_TRAITS:
            RecallConfig.check_field(name, value)
    except ConfigError as err:
        return str(err).partition(": ")[2]
    return None


def _trait_words(trait: TraitType[Any, Any], name: str, value: object) -> str:
    """``expected …, got …`` for a trait's own refusal (a type, or an integer's minimum)."""
    accepted = trait.info()
    if isinstance(trait, Integer) and trait.min is not None:
        accepted = f"an integer >= {trait.min}"
    return str(ConfigError(name, accepted, value)).partition(": ")[2]
