"""The bridge's host in a kernel: the extension's controller and its ``Dashr`` options.

``configure`` over the comm takes the same names and values as ``%config Dashr.NAME =
VALUE`` and validates them the same way, but all at once: every value is checked on its own
and together with the others (the config, recall and summarizer groups) before any is set,
so a rejected request changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.interactiveshell import InteractiveShell
from traitlets import TraitError

from .._controller import Dashr as DashrController
from ..errors import ConfigError
from .options import COMPACTION_TRAITS, RECALL_TRAITS, SUMMARIZER_TRAITS, close_summarizer

if TYPE_CHECKING:
    from .configurable import Dashr

__all__ = ["TraitsHost", "attach_session"]


class TraitsHost:
    """A bridge host (:class:`dashr_ext._bridge.Host`) over the ``Dashr`` configurable."""

    def __init__(self, magics: Dashr) -> None:
        self.magics = magics

    @property
    def controller(self) -> DashrController:
        return self.magics.controller

    def settings(self) -> dict[str, Any]:
        """Every option, by trait name, with its current value."""
        m = self.magics
        return {name: getattr(m, name) for name in sorted(m.trait_names(config=True))}

    def configure(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        m = self.magics
        traits = m.traits(config=True)
        for name, value in settings.items():
            trait = traits.get(name)
            if trait is None:
                accepted = f"a Dashr option: {', '.join(sorted(traits))}"
                raise ConfigError(f"settings.{name}", accepted, name)
            if value is None and trait.allow_none:
                continue
            try:
                trait.validate(m, value)  # type: ignore[attr-defined]
            except TraitError:
                raise ConfigError(name, trait.info(), value) from None
        # The groups, as %config checks one change, but with every change at once.
        group = {k: v for k, v in settings.items() if k in COMPACTION_TRAITS}
        m.compaction_config(**group)
        m.recall_config(**{k: v for k, v in settings.items() if k in RECALL_TRAITS})
        summarizer = {k: v for k, v in settings.items() if k in SUMMARIZER_TRAITS}
        if summarizer:
            close_summarizer(m.make_summarizer(**summarizer))
        try:
            with m.hold_trait_notifications():  # rolls every value back if one is refused
                for name, value in settings.items():
                    setattr(m, name, value)
        except TraitError as exc:
            raise ConfigError(
                "settings", "values %config Dashr accepts together", str(exc)
            ) from None
        return self.settings()


def attach_session(shell: InteractiveShell, path: str) -> str:
    """Attach ``shell``'s extension to the session file ``path``, loading it when needed.

    What a bridge client runs as a cell after a kernel restart (and to start on a chosen
    file): the file is created when missing, as ``Dashr.session_path`` creates it at load;
    a loaded extension switches to it as ``%dashr attach PATH`` does. Returns the path.
    """
    magics = shell.magics_manager.registry.get("Dashr")
    if magics is None:
        shell.config.Dashr.session_path = path  # read by the extension when it loads
        assert shell.extension_manager is not None
        shell.extension_manager.load_extension("dashr_ext")
        magics = shell.magics_manager.registry["Dashr"]
    target = Path(path).expanduser()
    if not target.exists():
        DashrController.create(target).close()  # the header only; attach opens it
    controller: DashrController = magics.attach(target)
    return str(controller.session.path)
