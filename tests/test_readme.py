"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

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
    named = set(re.findall(r"`(_?[a-z][a-z_]*)`", section))
    package = README.parent / "dashr_ext"
    tree = {
        p.stem if p.is_file() else p.name
        for p in package.iterdir()
        if (p.suffix == ".py" and p.stem not in {"__init__", "_version"})
        or (p.is_dir() and (p / "__init__.py").is_file())
    }
    assert tree - named == set(), "modules missing from the README architecture section"
    assert {n for n in named if n.startswith("_")} - tree == set(), "named but not in the tree"
