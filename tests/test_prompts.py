"""Prompt templates: the strict renderer, fresh reads, and packaging in the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dashr_ext import _templates as prompts
from dashr_ext._templates import (
    load_template,
    parse_template,
    render,
    render_text,
    summary_sections,
    template_names,
)
from dashr_ext.errors import PromptError

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code",
    "Errors and Fixes",
    "Pending Jobs",
    "Current Work",
    "Next Step",
    "Critical Context",
)


# --------------------------------------------------------------------------- renderer


def test_variables_are_substituted() -> None:
    assert render_text("Hello {{name}}, {{ n }} left.", name="Ada", n=3) == "Hello Ada, 3 left."


def test_if_blocks_keep_or_drop_their_body() -> None:
    text = "a\n{{#if extra}}\nextra: {{extra}}\n{{/if}}\nb\n"
    assert render_text(text, extra="X") == "a\nextra: X\nb\n"
    assert render_text(text, extra="") == "a\nb\n"
    assert render_text(text, extra=None) == "a\nb\n"
    # Inline blocks keep the surrounding text untouched.
    assert render_text("x{{#if f}}-y{{/if}}z", f=True) == "x-yz"
    assert render_text("x{{#if f}}-y{{/if}}z", f=0) == "xz"


def test_unused_variables_are_fine_and_values_are_not_rescanned() -> None:
    assert render_text("{{a}}", a="{{b}} }}", unused=1) == "{{b}} }}"


@pytest.mark.parametrize(
    ("text", "variables", "message"),
    [
        ("Hi {{who}}", {}, "template 't', line 1:4: unknown variable 'who'; supplied: (none)"),
        (
            "x\n{{#if flag}}y{{/if}}",
            {"other": 1},
            "template 't', line 2:1: unknown flag 'flag' in {{#if flag}}; supplied: other",
        ),
        (
            "{{#if f}}{{missing}}{{/if}}",
            {"f": False},
            "template 't', line 1:10: unknown variable 'missing'",
        ),
        ("{{x}}", {"x": None}, "line 1:1: variable 'x' is None; pass a value or guard it"),
        ("{{x}}", {"x": ["a"]}, "variable 'x' must be a str, int or float, got list"),
    ],
)
def test_render_errors(text: str, variables: dict[str, object], message: str) -> None:
    with pytest.raises(PromptError) as info:
        render_text(text, "t", **variables)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "{{#if a}}\n  {{#if b}}x{{/if}}\n{{/if}}",
            "template 't', line 2:3: nested {{#if b}} inside {{#if a}} opened at line 1:1",
        ),
        ("a\n{{#if a}}\nb", "template 't', line 2:1: {{#if a}} is never closed (missing {{/if}})"),
        ("a {{/if}}", "template 't', line 1:3: {{/if}} without {{#if}}"),
        ("a {{ b", "template 't', line 1:3: leftover '{{' outside a complete"),
        ("a }} b", "template 't', line 1:3: leftover '}}' outside a complete"),
        ("{{#if a}}x }}{{/if}}", "line 1:12: leftover '}}'"),
        ("x {{> partial}}", "line 1:3: unsupported tag '{{> partial}}'"),
        ("x {{#each items}}", "line 1:3: unsupported tag '{{#each items}}'"),
        ("{{#if}}x{{/if}}", "line 1:1: malformed tag '{{#if}}'; expected {{#if flag}}"),
        ("{{#if a b}}x{{/if}}", "malformed tag '{{#if a b}}'"),
        ("{{a.b}}", "line 1:1: unsupported tag '{{a.b}}'"),
        ("ok\n{{ {{x}}", "template 't', line 2:4: leftover '{{' inside a tag"),
    ],
)
def test_syntax_errors_name_template_problem_and_position(text: str, message: str) -> None:
    with pytest.raises(PromptError) as info:
        parse_template(text, "t")
    assert message in str(info.value)


def test_parsed_template_lists_its_variables() -> None:
    template = parse_template("{{a}} {{#if b}}{{c}}{{/if}}", "t")
    assert template.variables == frozenset({"a", "b", "c"})


# --------------------------------------------------------------------------- files


def test_bad_template_names_are_rejected() -> None:
    for name in ("../secrets", "a/b", "", ".hidden"):
        with pytest.raises(PromptError, match="template name"):
            load_template(name)


def test_missing_template_lists_the_available_ones(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text("1", encoding="utf-8")
    (tmp_path / "two.md").write_text("2", encoding="utf-8")
    with pytest.raises(
        PromptError, match=r"'nope.md' not found in .*available templates: one, two"
    ):
        render("nope", prompts_dir=tmp_path)
    assert template_names(tmp_path) == ["one", "two"]


def test_templates_are_read_fresh_on_every_call(tmp_path: Path) -> None:
    path = tmp_path / "greet.md"
    path.write_text("Hello {{name}}\n", encoding="utf-8")
    assert render("greet", prompts_dir=tmp_path, name="Ada") == "Hello Ada\n"
    path.write_text("Goodbye {{name}}\n", encoding="utf-8")
    assert render("greet", prompts_dir=tmp_path, name="Ada") == "Goodbye Ada\n"
    path.write_text("Broken {{name\n", encoding="utf-8")
    with pytest.raises(PromptError, match=r"template 'greet\.md', line 1:8: leftover"):
        render("greet.md", prompts_dir=tmp_path, name="Ada")


def test_environment_variable_overrides_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "checkpoint.md").write_text("custom preamble\n", encoding="utf-8")
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path))
    assert render("checkpoint") == "custom preamble\n"
    monkeypatch.delenv(prompts.PROMPTS_DIR_ENV)
    assert render("checkpoint") != "custom preamble\n"


def test_source_tree_prompts_are_found_first() -> None:
    assert Path(prompts.resolve_prompts_dir()) == ROOT / "prompts"


# --------------------------------------------------------------------------- shipped templates


def test_summarize_template_has_the_eight_sections_and_rules() -> None:
    assert summary_sections() == SECTIONS
    plain = render("summarize", max_summary_tokens=8192, previous_summary=None)
    assert "Stay under 8192 tokens." in plain
    assert "<previous-summary>" not in plain
    assert "{{" not in plain and "}}" not in plain
    for rule in ("terse bullet points", "exactly, character for character", "never mention"):
        assert rule in plain
    merged = render("summarize", max_summary_tokens=100, previous_summary="## Next Step\n- ship")
    assert "Merge it with what happened since instead of restating it" in merged
    assert "<previous-summary>\n## Next Step\n- ship\n</previous-summary>" in merged


def test_checkpoint_preamble_is_short_framing() -> None:
    text = render("checkpoint").strip()
    assert "condensed record of the earlier part of this conversation" in text
    assert "continues after it" in text
    assert "pinned statements come first" in text and "is the current one" in text
    assert text.count(".") <= 2 and "\n" not in text


def test_every_shipped_template_parses() -> None:
    names = template_names()
    assert {"summarize", "checkpoint"} <= set(names)
    for name in names:
        parse_template(load_template(name), name)


# --------------------------------------------------------------------------- packaging


def _build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the source tree (the working tree stays untouched)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "dashr_ext", src / "dashr_ext", ignore=ignore)
    shutil.copytree(ROOT / "prompts", src / "prompts", ignore=ignore)
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"wheel build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    [wheel] = out.glob("*.whl")
    return wheel


def test_wheel_ships_prompts_and_the_loader_finds_them(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in sorted((ROOT / "prompts").glob("*.md")):
        assert f"dashr_ext/_prompts/{template.name}" in names
    # Every module of the source tree is in the wheel (the package list is explicit).
    for module in sorted((ROOT / "dashr_ext").rglob("*.py")):
        rel = module.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} is missing from the wheel: add its package to pyproject.toml"

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    code = (
        "import dashr_ext._templates as p, pathlib;"
        "print(p.resolve_prompts_dir());"
        "print(p.render('summarize', max_summary_tokens=77, previous_summary='PREV'));"
        "print(p.summary_sections()[-1])"
    )
    env = {k: v for k, v in os.environ.items() if k != prompts.PROMPTS_DIR_ENV}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    first, rest = proc.stdout.split("\n", 1)
    assert Path(first) == site / "dashr_ext" / "_prompts"
    assert (
        "Stay under 77 tokens." in rest and "<previous-summary>\nPREV\n</previous-summary>" in rest
    )
    assert rest.rstrip().endswith("Critical Context")
