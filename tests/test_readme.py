"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_quick_tour_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    tour = python_blocks()[0]
    assert "Dashr.create" in tour
    namespace: dict[str, object] = {}
    exec(compile(tour, "README.md (quick tour)", "exec"), namespace)
    assert (tmp_path / "agent.jsonl").is_file()
    from dashr_ext import Dashr
    from dashr_ext._formats.openai import to_openai

    with Dashr.open(tmp_path / "agent.jsonl", read_only=True) as d:
        roles = [m["role"] for m in to_openai(d.session)]
        assert roles == ["system", "user", "assistant"]


def test_the_architecture_section_names_every_module_of_the_tree() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("<!-- architecture -->")[1].split("<!-- /architecture -->")[0]
    named = set(re.findall(r"`(_{0,2}[a-z][a-z_]*)`", section))
    package = README.parent / "dashr_ext"
    tree = {
        p.stem if p.is_file() else p.name
        for p in package.iterdir()
        if (p.suffix == ".py" and p.stem not in {"__init__", "_version"})
        or (p.is_dir() and (p / "__init__.py").is_file())
    }
    assert tree - named == set(), "modules missing from the README architecture section"
    assert {n for n in named if n.startswith("_")} - tree == set(), "named but not in the tree"


def section(title: str) -> str:
    """The README text under ``## title`` up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_setup_section_keeps_exactly_two_commands_and_says_when_corpus_tests_skip() -> None:
    setup = section("Two commands on a fresh machine")
    blocks = re.findall(r"```\n(.*?)```", setup, flags=re.S)
    assert [len(b.strip().splitlines()) for b in blocks] == [1, 1]
    assert "`../shared/corpus`" in setup and "they are skipped" in setup


def test_the_readme_says_how_to_get_a_front_end_and_register_the_venv_as_a_kernel() -> None:
    jupyter = section("In Jupyter")
    assert ".venv/bin/pip install jupyterlab && .venv/bin/jupyter lab" in jupyter
    register = (
        '.venv/bin/python -m ipykernel install --user --name dashr --display-name "Python (dashr)"'
    )
    assert register in jupyter
    pyproject = (README.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"ipykernel>=' in pyproject  # the install above brings the kernel side


def test_the_readme_names_the_cell_magic_manual_as_ipython_shows_it(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    text = README.read_text(encoding="utf-8")
    assert "`%%agent?` the cell magic's" in text and "`%agent?`" not in text
    import dashr_ext

    shell.run_line_magic("load_ext", "dashr_ext")
    try:
        capsys.readouterr()
        shell.run_cell("%%agent?")
        assert "Run one agent turn: the cell body is the user's message." in capsys.readouterr().out
        shell.run_cell("%agent?")
        assert "Object `%agent` not found." in capsys.readouterr().out
    finally:
        dashr_ext.unload_ipython_extension(shell)


def test_the_readme_says_the_writer_lock_needs_posix() -> None:
    tour = section("Quick tour")
    assert "That lock needs POSIX (Linux, macOS and other Unixes)" in tour
    assert "on Windows a\n  session opens only with `read_only=True`" in tour
    from dashr_ext import _filelock

    assert "needs a POSIX system" in (_filelock.__doc__ or "")
