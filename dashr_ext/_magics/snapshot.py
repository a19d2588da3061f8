"""``%dashr snapshot``: the user namespace saved and loaded with dill (SPEC §9).

Which names a snapshot leaves out (IPython's own, the extension's, the unpicklable) is
decided here; loading runs code from the file, hence :data:`SNAPSHOT_WARNING`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

__all__ = [
    "SNAPSHOT_WARNING",
    "is_machinery",
    "load_snapshot",
    "refuse_symlink",
    "save_snapshot",
]

SNAPSHOT_WARNING = (
    "warning: loading a snapshot runs code stored in the file (it is a pickle); "
    "only load files you saved yourself"
)

_IPYTHON_HISTORY = re.compile(r"_+|_i+|_i?\d+")
"""IPython's output/input history names (``_``, ``__``, ``_i``, ``_ii``, ``_7``, ``_i7``)."""


def is_machinery(name: str, hidden: Mapping[str, object]) -> bool:
    """IPython's own names: the hidden namespace and the input/output history caches."""
    return name in hidden or _IPYTHON_HISTORY.fullmatch(name) is not None


def refuse_symlink(path: Path) -> None:
    """Raise a one-line :class:`UsageError` when ``path`` is a symbolic link (even dangling):
    writing through it would put the file wherever the link points."""
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link; give the path of a regular file")


def save_snapshot(
    shell: InteractiveShell, path: Path, *, exclude: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Save the user namespace with ``dill.dump_module``; returns (saved, skipped) names.

    IPython's own names, ``exclude`` and values dill cannot pickle (checked one by one with
    ``dill.pickles``) are left out: they are taken out of the namespace for the duration of
    the dump and put back. The dump is of the user module itself, so functions defined in
    the session keep the namespace as their globals when loaded. The file is private (mode
    0600, like the session's) and replaced whole: a failed dump leaves ``path`` as it was.
    """
    refuse_symlink(path)
    ns = shell.user_ns
    if shell.user_module.__dict__ is not ns:
        raise UsageError("snapshots need the user namespace to be the user module's namespace")
    import dill  # imported on use: loading the extension stays light

    hidden = shell.user_ns_hidden
    left_out: list[str] = []
    skipped: list[str] = []
    saved: list[str] = []
    for name, value in list(ns.items()):
        if name.startswith("__") and name.endswith("__"):
            continue  # module attributes (__name__, __builtins__, …) travel with the module
        if name in exclude or is_machinery(name, hidden):
            left_out.append(name)
        elif dill.pickles(value, safe=True):
            saved.append(name)
        else:
            skipped.append(name)
    taken = {name: ns.pop(name) for name in left_out + skipped}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _dump_private(path, shell.user_module)
    finally:
        ns.update(taken)
    return sorted(saved), sorted(skipped)


def _dump_private(path: Path, module: ModuleType) -> None:
    """Dump ``module`` into a new 0600 file beside ``path``, then move it onto ``path``.

    Moving replaces a directory entry and never follows a link that appeared meanwhile.
    """
    import dill  # imported on use: loading the extension stays light

    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            dill.dump_module(file, module=module)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def load_snapshot(shell: InteractiveShell, path: Path) -> list[str]:
    """Load a :func:`save_snapshot` file into the user namespace; returns the names it set.

    This unpickles the file, which runs code it contains: only load files you saved.
    """
    import dill  # imported on use: loading the extension stays light

    ns = shell.user_ns
    before = dict(ns)
    dill.load_module(str(path), module=shell.user_module)
    return sorted(
        name
        for name, value in ns.items()
        if not (name.startswith("__") and name.endswith("__"))
        and (name not in before or before[name] is not value)
    )
