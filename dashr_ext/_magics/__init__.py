"""The IPython extension: ``%load_ext dashr_ext``, the ``Dashr`` options and the magics (SPEC §9).

Loading attaches a session (one printed line names its file), registers the ``dashr`` comm
target (the harness bridge, ``docs/bridge.md``) and binds ``dashr`` (the controller),
``dashr_compaction_archive`` and ``history_outline`` / ``history_read`` /
``history_search`` in the user namespace; ``%unload_ext dashr_ext`` removes exactly those,
the magics, the comm target and the configurable, and closes the session.

Every option is a trait of the ``Dashr`` configurable. In ``ipython_config.py``::

    c.Dashr.recency_window_tokens = 500000
    c.Dashr.retain_tokens = 50000

or live, in any order, applied to the live session (and recorded in its log) as soon as the
options agree::

    %config Dashr.recency_window_tokens = 500000
    %config Dashr.retain_tokens = 50000
    %config Dashr                  # the options by group, with help and current value

Attaching a session (``%dashr attach PATH``, or ``session_path`` at load) restores the
settings its log records, and the options show them.

Magics (``%name?`` shows each one's manual)::

    %dashr status | config | sessions [DIR] [--limit N] | attach PATH [--read-only]
    %dashr attach --last [--read-only] | export PATH | snapshot save PATH | snapshot load PATH
    %dashr pin TEXT… | pins | unpin ID | turns
    %compact [--dry-run | --prune-only]
    %history_outline
    %history_read c42 | --seq N | --turn N | --cursor TOKEN
    %history_search QUERY [--checkpoint c42] [--limit N]
    %history_search --all QUERY [--limit N]      (every session in Dashr.session_dir)
    %%agent [--max-steps N]        (cell magic: one agent turn, the cell body is the message)

Tab completes the subcommands, the options, checkpoint ids and recent session files.

Modules: :mod:`.configurable` (the ``Dashr`` class: traits and magic methods),
:mod:`.options` (trait groups, validation, ``%config Dashr``'s text), :mod:`.settings`
(options held back until they agree, the log's settings shown on attach), :mod:`.subcommands`
(``%dashr``), :mod:`.sessions` (``%dashr sessions``, ``attach --last``),
:mod:`.completion` (tab completion), :mod:`.search_all` (``%history_search --all``),
:mod:`.attachment` (the session file and the bound names), :mod:`.snapshot` (dill),
:mod:`.agent_turn` (``%%agent`` output), :mod:`.arguments` (parsing, one-line errors),
:mod:`.bridge` (the comm's ``configure``: the options, set all-or-nothing), :mod:`.progress`
(progress displays of slow passes and retries).
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets import TraitError

from . import completion
from .agent_turn import agent_cell
from .arguments import one_line_errors
from .attachment import NAMESPACE_NAMES
from .configurable import Dashr
from .snapshot import SNAPSHOT_WARNING, load_snapshot, save_snapshot

__all__ = [
    "NAMESPACE_NAMES",
    "SNAPSHOT_WARNING",
    "Dashr",
    "agent_cell",
    "load_ipython_extension",
    "load_snapshot",
    "save_snapshot",
    "unload_ipython_extension",
]


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Attach a session, bind the names and register the magics; a second call does nothing."""
    if isinstance(shell.magics_manager.registry.get("Dashr"), Dashr):
        return
    configurables = len(shell.configurables)
    try:
        magics = Dashr(shell=shell)
        with one_line_errors():
            magics.start()
    except TraitError as exc:  # a bad value in the configuration (c.Dashr.…)
        del shell.configurables[configurables:]
        raise UsageError(f"dashr_ext: {exc}") from None
    except BaseException:
        del shell.configurables[configurables:]
        raise
    shell.register_magics(magics)
    completion.install(shell, magics)
    magics.bridge.register()  # the dashr comm target (docs/bridge.md)
    magics.progress.register()  # progress of slow passes, per cell
    shell.events.register("post_run_cell", magics.staging.after_cell)  # held-back options
    print(magics.session_line())


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Undo :func:`load_ipython_extension`: names, magics, completion, configurable; close the
    session."""
    manager = shell.magics_manager
    magics = manager.registry.get("Dashr")
    if not isinstance(magics, Dashr):
        return
    magics.bridge.unregister()
    shell.events.unregister("post_run_cell", magics.staging.after_cell)
    completion.uninstall(shell)
    magics.progress.unregister()
    magics.stop()
    for kind, table in magics.magics.items():
        registered = manager.magics[kind]
        for name, func in table.items():
            if registered.get(name) is func:
                del registered[name]
    del manager.registry["Dashr"]
    shell.configurables[:] = [c for c in shell.configurables if id(c) != id(magics)]
