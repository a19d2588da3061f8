"""The ``Dashr`` option groups: which traits feed which core object (SPEC §9).

Each group of traits is validated as a whole by building the object it feeds —
:class:`~dashr_ext._config.CompactionConfig`, :class:`~dashr_ext._config.RecallConfig`, the
summarizer, the agent — so a rejected value names the field, the accepted range and the
value received, and leaves the old value in place. :data:`OPTION_GROUPS` orders them for
``%config Dashr`` (:func:`options_help`) and ``%dashr config``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields

from traitlets import TraitError
from traitlets.config import Configurable

from .._config import CompactionConfig, RecallConfig
from .._summarizers.base import Summarizer
from .._summarizers.factory import make_summarizer
from ..errors import ConfigError

__all__ = [
    "AGENT_TRAITS",
    "BRIDGE_TRAITS",
    "COMPACTION_DEFAULTS",
    "COMPACTION_TRAITS",
    "OPTION_GROUPS",
    "RECALL_DEFAULTS",
    "RECALL_TRAITS",
    "SESSION_TRAITS",
    "SUMMARIZER_TRAITS",
    "close_summarizer",
    "options_help",
    "summarizer_of",
    "trait_errors",
]

COMPACTION_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(CompactionConfig))
RECALL_TRAITS: tuple[str, ...] = tuple(f.name for f in fields(RecallConfig))
SUMMARIZER_TRAITS: tuple[str, ...] = ("summarizer", "llm_base_url", "llm_model")
AGENT_TRAITS: tuple[str, ...] = (
    "agent_base_url",
    "agent_model",
    "agent_max_steps",
    "agent_tool_output_max_chars",
)

BRIDGE_TRAITS: tuple[str, ...] = ("bridge_max_request_bytes",)
SESSION_TRAITS: tuple[str, ...] = ("session_dir", "session_path")

OPTION_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("compaction", "when a pass runs and what it keeps (CompactionConfig)", COMPACTION_TRAITS),
    ("recall", "what history_outline, history_read and history_search return", RECALL_TRAITS),
    ("summarizer", "who writes the checkpoints' summaries", SUMMARIZER_TRAITS),
    ("agent", "the model %%agent talks to", AGENT_TRAITS),
    ("bridge", "the dashr comm a harness outside the kernel drives", BRIDGE_TRAITS),
    ("session files", "where %load_ext starts or attaches its session", SESSION_TRAITS),
)
"""``(name, what its options set, trait names)``, in the order the options are shown."""

_HELP_TITLE = "Dashr options: the settings of dashr_ext (context compaction and recall)"
_HELP_INTRO = (
    "Compaction and recall for this kernel's session, then the summarizer, %%agent,",
    "the bridge and the session files, by group. Set one live (checked, then applied",
    "to the session at once) or in ipython_config.py:",
    "    %config Dashr.NAME = VALUE",
    "    c.Dashr.NAME = VALUE",
    "%dashr config shows the values in effect.",
)

COMPACTION_DEFAULTS = CompactionConfig()
RECALL_DEFAULTS = RecallConfig()


def options_help(cls: type[Configurable], inst: Configurable | None = None) -> str:
    """``%config Dashr``'s text: what the options are, then each group with its options.

    Each option's own text is traitlets' (``cls.class_get_trait_help``); an option in no
    group comes last, under "other".
    """
    traits = cls.class_traits(config=True)
    grouped = {name for _n, _s, names in OPTION_GROUPS for name in names}
    groups = [*OPTION_GROUPS, ("other", "", tuple(n for n in sorted(traits) if n not in grouped))]
    out = [_HELP_TITLE, "=" * len(_HELP_TITLE), *_HELP_INTRO]
    for name, summary, names in groups:
        present = [n for n in names if n in traits]
        if not present:
            continue
        heading = f"{name.capitalize()}: {summary}" if summary else name.capitalize()
        out += ["", heading, "=" * len(heading)]
        out += [cls.class_get_trait_help(traits[n], inst) for n in present]
    return "\n".join(out)


def summarizer_of(values: Mapping[str, object]) -> Summarizer:
    """A summarizer from the :data:`SUMMARIZER_TRAITS` values."""
    if values["summarizer"] == "llm":
        return make_summarizer("llm", base_url=values["llm_base_url"], model=values["llm_model"])
    return make_summarizer(str(values["summarizer"]))


def close_summarizer(summarizer: object) -> None:
    """Release a summarizer's client, if it holds one."""
    close = getattr(summarizer, "close", None)
    if callable(close):
        close()


@contextmanager
def trait_errors() -> Iterator[None]:
    """A rejected option (ConfigError) as the TraitError traitlets reports for a trait."""
    try:
        yield
    except ConfigError as exc:
        raise TraitError(str(exc)) from None
