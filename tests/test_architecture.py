"""The package's shape: no import cycles, the layering holds, IPython stays at the edge.

Every import statement in ``dashr_ext`` counts, including function-level ones (a lazy import
still makes a cycle, it only hides it); imports under ``if TYPE_CHECKING:`` never run and are
left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dashr_ext"

# The log layer: events, their durable store, the session fold, its exchange format and
# what is derived from the log alone. It imports nothing above it.
LOG_LAYER = {
    "dashr_ext.errors",
    "dashr_ext._version",
    "dashr_ext._events",
    "dashr_ext._blocks",
    "dashr_ext._jsontext",
    "dashr_ext._store",
    "dashr_ext._paths",
    "dashr_ext._catalog",
    "dashr_ext._filelock",
    "dashr_ext._session",
    "dashr_ext._replay",
    "dashr_ext._surface",
    "dashr_ext._formats",
    "dashr_ext._formats.openai",
    "dashr_ext._turns",
    "dashr_ext._pairing",
    "dashr_ext._payloads",
    "dashr_ext._checkpoints",
    "dashr_ext._redaction",
}
# What the compaction engine may never reach: the read side, the shells and the controller.
ABOVE_COMPACTION = (
    "dashr_ext._recall",
    "dashr_ext.agent",
    "dashr_ext._agent_host",
    "dashr_ext.bridge",
    "dashr_ext._bridge",
    "dashr_ext._magics",
    "dashr_ext._cli",
    "dashr_ext._controller",
    "dashr_ext._display",
    "dashr_ext._plot",
    "dashr_ext._cells",
    "dashr_ext._demo",
    "dashr_ext.testing",
)
# The IPython shell adapter and the agent's cell runner are the only modules touching IPython.
IPYTHON_SHELL = ("dashr_ext._magics", "dashr_ext._cells")
PUBLIC_MODULES = {
    "dashr_ext",
    "dashr_ext.errors",
    "dashr_ext.testing",
    "dashr_ext.agent",
    "dashr_ext.bridge",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)  # only the else branch runs
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            stack.append(child)


def imports_of(module: str) -> set[str]:
    """Every module ``module`` imports at run time (absolute names)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            found.add(sub if sub in MODULES else target)
    return found


GRAPH = {m: {i for i in imports_of(m) if i in MODULES and i != m} for m in MODULES}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(GRAPH):
        if start not in state and (found := visit(start)):
            return found
    return None


# Every module's layer, bottom up, as README.md's architecture section lists them. A module
# imports only from its own layer or the ones below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("log", (*sorted(LOG_LAYER),)),
    (
        "text and measure",
        (
            "dashr_ext._meter",
            "dashr_ext._config",
            "dashr_ext._templates",
            "dashr_ext._archive",
            "dashr_ext._fileops",
            "dashr_ext._fileops_shell",
            "dashr_ext._fileops_code",
            "dashr_ext._footers",
            "dashr_ext._names",
            "dashr_ext._pins",
            "dashr_ext._pruned",
            "dashr_ext._pointer",
            "dashr_ext._plaintext",
        ),
    ),
    ("model", ("dashr_ext._client", "dashr_ext._summarizers")),
    ("compaction", ("dashr_ext._compaction",)),
    ("turn memory", ("dashr_ext._turnmemory",)),
    ("recall", ("dashr_ext._recall",)),
    ("controller", ("dashr_ext._controller",)),
    (
        "shells",
        (
            "dashr_ext",
            "dashr_ext.agent",
            "dashr_ext._agent_host",
            "dashr_ext.bridge",
            "dashr_ext.testing",
            "dashr_ext._bridge",
            "dashr_ext._cells",
            "dashr_ext._magics",
            "dashr_ext._display",
            "dashr_ext._plot",
            "dashr_ext._cli",
            "dashr_ext.__main__",
            "dashr_ext._demo",
        ),
    ),
)
# The one upward import: Dashr.plot_pressure() is a convenience over the optional plot extra
# (imported when called); the plot module reads the controller only for typing.
UPWARD_ALLOWED = {("dashr_ext._controller", "dashr_ext._plot")}


def layer_of(module: str) -> int:
    """Index in LAYERS of the most specific prefix naming ``module``."""
    best: tuple[int, int] | None = None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[1]
            ):
                best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and to README.md)"
    return best[0]


def test_the_graph_sees_every_module_and_its_imports() -> None:
    assert {"dashr_ext._session", "dashr_ext._compaction.engine", "dashr_ext._magics"} <= set(
        MODULES
    )
    assert "dashr_ext._events" in GRAPH["dashr_ext._session"]
    # A function-level import is an edge too (the controller loads the plot when asked).
    assert "dashr_ext.agent" in GRAPH["dashr_ext._magics.configurable"]
    assert "dashr_ext._plot" in GRAPH["dashr_ext._controller"]
    assert "dashr_ext._summarizers.llm" in GRAPH["dashr_ext._summarizers.factory"]


def test_there_is_no_import_cycle() -> None:
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_every_module_imports_only_from_its_layer_or_below() -> None:
    upward = {
        (m, t)
        for m, targets in GRAPH.items()
        for t in targets
        if layer_of(t) > layer_of(m) and (m, t) not in UPWARD_ALLOWED
    }
    assert not upward, sorted(upward)


@pytest.mark.parametrize("module", sorted(LOG_LAYER & set(MODULES)))
def test_the_log_layer_imports_nothing_above_it(module: str) -> None:
    above = {m for m in GRAPH[module] if m not in LOG_LAYER}
    assert not above, f"{module} imports {sorted(above)}"


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith("dashr_ext._compaction"))
)
def test_compaction_imports_nothing_from_recall_or_the_shells(module: str) -> None:
    bad = {m for m in GRAPH[module] if m.startswith(ABOVE_COMPACTION)}
    assert not bad, f"{module} imports {sorted(bad)}"


def test_only_the_shell_adapter_and_the_cell_runner_import_ipython() -> None:
    users = {m for m in MODULES if any(i.split(".")[0] == "IPython" for i in imports_of(m))}
    assert users, "the IPython adapter was not seen"
    assert all(m.startswith(IPYTHON_SHELL) for m in users), sorted(users)


def test_every_module_outside_the_public_surface_is_internal() -> None:
    public = {m for m in MODULES if not any(part.startswith("_") for part in m.split(".")[1:])}
    assert public == PUBLIC_MODULES


def test_no_module_holds_more_than_one_job_of_code() -> None:
    # ~600 lines is where a module starts doing several jobs; data files are not code.
    big = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 650}
    assert not big, big


def test_the_package_imports_its_public_names_on_first_use() -> None:
    """``import dashr_ext`` loads no engine; every exported name still resolves.

    ``dashr search`` and other read-only commands import only what they use, so a one-off
    search of a large log does not pay for the compaction engine and the summarizers.
    """
    code = (
        "import sys, dashr_ext\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('dashr_ext.'))\n"
        "names = [n for n in dashr_ext.__all__ if getattr(dashr_ext, n) is None]\n"
        "print(loaded, names, 'Dashr' in dir(dashr_ext))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['dashr_ext._version', 'dashr_ext.errors'] [] True"
