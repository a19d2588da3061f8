"""Prompt templates: loading from ``prompts/*.md`` and a strict renderer.

SPEC §5.3; :func:`render` documents the template language and where templates are found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import PromptError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "PROMPTS_DIR_ENV",
    "Template",
    "load_template",
    "parse_template",
    "render",
    "render_text",
    "resolve_prompts_dir",
    "state_sections",
    "summary_sections",
    "template_names",
]

PROMPTS_DIR_ENV = "DASHR_PROMPTS_DIR"
"""Environment variable naming a directory of templates that overrides the built-in ones."""

_PACKAGE_DATA = "_prompts"
_SOURCE_DIR = Path(__file__).resolve().parent.parent / "prompts"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TAG = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_VAR_TAG = re.compile(rf"\s*({_IDENT})\s*")
_IF_TAG = re.compile(rf"\s*#if\s+({_IDENT})\s*")
_IF_LIKE = re.compile(r"\s*#\s*if\b")
_END_TAG = re.compile(r"\s*/if\s*")
_SECTION = re.compile(r"^\s*\d+\.\s+\*\*(.+?)\*\*", re.MULTILINE)

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- locating


def resolve_prompts_dir(override: PathLike | None = None) -> Path | Traversable:
    """The directory templates are read from (see the module docstring for the order)."""
    if override is not None:
        return Path(override)
    env = os.environ.get(PROMPTS_DIR_ENV)
    if env:
        return Path(env)
    # A checkout or an editable install: prompts/ beside the package, in a project root.
    in_source = (_SOURCE_DIR / "summarize.md").is_file()
    if in_source and (_SOURCE_DIR.parent / "pyproject.toml").is_file():
        return _SOURCE_DIR
    from importlib import resources  # only here: it imports tempfile and shutil

    installed = resources.files("dashr_ext").joinpath(_PACKAGE_DATA)
    if in_source and not installed.is_dir():
        return _SOURCE_DIR
    return installed


def _file_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise PromptError(
            f"template name {name!r}: expected a file name such as 'summarize' "
            "(letters, digits, '_', '-', '.'; no path separators)"
        )
    return name if name.endswith(".md") else name + ".md"


def template_names(directory: PathLike | None = None) -> list[str]:
    """The names of the available templates (file names without ``.md``), sorted."""
    base = resolve_prompts_dir(directory)
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    return sorted(e.name[:-3] for e in entries if e.name.endswith(".md") and e.is_file())


def load_template(name: str, prompts_dir: PathLike | None = None) -> str:
    """The raw text of template ``name`` (``"summarize"`` or ``"summarize.md"``), read now."""
    file_name = _file_name(name)
    base = resolve_prompts_dir(prompts_dir)
    path = base.joinpath(file_name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        known = ", ".join(template_names(prompts_dir)) or "none"
        raise PromptError(
            f"template {file_name!r} not found in {base} ({type(exc).__name__}); "
            f"available templates: {known}"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(f"template {file_name!r} in {base}: not valid UTF-8 ({exc})") from None


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Var:
    name: str
    where: str


@dataclass(frozen=True, slots=True)
class _If:
    flag: str
    where: str
    body: tuple[_Text | _Var, ...]


_Node = _Text | _Var | _If


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: render it with :meth:`render`."""

    name: str
    nodes: tuple[_Node, ...]

    @property
    def variables(self) -> frozenset[str]:
        """Every variable and flag name the template refers to."""
        names: set[str] = set()
        for node in self.nodes:
            if isinstance(node, _Var):
                names.add(node.name)
            elif isinstance(node, _If):
                names.add(node.flag)
                names.update(n.name for n in node.body if isinstance(n, _Var))
        return frozenset(names)

    def render(self, variables: Mapping[str, Any]) -> str:
        out: list[str] = []
        for node in self.nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Var):
                out.append(self._value(node, variables))
            else:
                if node.flag not in variables:
                    raise PromptError(
                        f"template {self.name!r}, {node.where}: unknown flag {node.flag!r} in "
                        f"{{{{#if {node.flag}}}}}; supplied: {_supplied(variables)}"
                    )
                keep = bool(variables[node.flag])
                for part in node.body:
                    if isinstance(part, _Text):
                        if keep:
                            out.append(part.text)
                    elif keep:
                        out.append(self._value(part, variables))
                    else:  # every variable must be supplied, whichever branch is taken
                        self._check_supplied(part, variables)
        return "".join(out)

    def _check_supplied(self, node: _Var, variables: Mapping[str, Any]) -> None:
        if node.name not in variables:
            raise PromptError(
                f"template {self.name!r}, {node.where}: unknown variable {node.name!r}; "
                f"supplied: {_supplied(variables)}"
            )

    def _value(self, node: _Var, variables: Mapping[str, Any]) -> str:
        self._check_supplied(node, variables)
        value = variables[node.name]
        if value is None:
            raise PromptError(
                f"template {self.name!r}, {node.where}: variable {node.name!r} is None; pass a "
                f"value or guard it with {{{{#if {node.name}}}}}…{{{{/if}}}}"
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise PromptError(
                f"template {self.name!r}, {node.where}: variable {node.name!r} must be a str, "
                f"int or float, got {type(value).__name__}"
            )
        return str(value)


def _supplied(variables: Mapping[str, Any]) -> str:
    return ", ".join(sorted(variables)) or "(none)"


def _where(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}:{column}"


def _check_literal(name: str, text: str, chunk: str, offset: int) -> None:
    for token in ("{{", "}}"):
        pos = chunk.find(token)
        if pos >= 0:
            raise PromptError(
                f"template {name!r}, {_where(text, offset + pos)}: leftover {token!r} "
                "outside a complete {{name}} / {{#if flag}} / {{/if}} tag"
            )


def _standalone(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The whole-line span of a block tag that is alone on its line, else None."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    if text[line_start:start].strip(" \t") or text[end:line_end].strip(" \t\r\n"):
        return None
    return line_start, line_end


def parse_template(text: str, name: str = "<string>") -> Template:
    """Parse ``text``; raises :class:`PromptError` with ``line:column`` on bad syntax."""
    nodes: list[_Node] = []
    body: list[_Text | _Var] | None = None
    open_if: tuple[str, str] | None = None
    pos = 0

    def emit(node: _Text | _Var) -> None:
        if isinstance(node, _Text) and not node.text:
            return
        (body if body is not None else nodes).append(node)

    for match in _TAG.finditer(text):
        start, end = match.span()
        inner = match.group(1)
        where = _where(text, start)
        is_block = bool(_IF_LIKE.match(inner) or _END_TAG.fullmatch(inner))
        cut_start, cut_end = start, end
        if is_block:
            span = _standalone(text, start, end)
            if span is not None:
                cut_start, cut_end = span
        literal = text[pos:cut_start]
        _check_literal(name, text, literal, pos)
        if "{{" in inner:
            at = _where(text, start + 2 + inner.index("{{"))
            raise PromptError(f"template {name!r}, {at}: leftover '{{{{' inside a tag")
        emit(_Text(literal))
        if m := _IF_TAG.fullmatch(inner):
            if open_if is not None:
                raise PromptError(
                    f"template {name!r}, {where}: nested {{{{#if {m.group(1)}}}}} inside "
                    f"{{{{#if {open_if[0]}}}}} opened at {open_if[1]}; blocks do not nest"
                )
            open_if = (m.group(1), where)
            body = []
        elif _IF_LIKE.match(inner):
            raise PromptError(
                f"template {name!r}, {where}: malformed tag {match.group(0)!r}; "
                "expected {{#if flag}} with one variable name"
            )
        elif _END_TAG.fullmatch(inner):
            if open_if is None or body is None:
                raise PromptError(f"template {name!r}, {where}: {{{{/if}}}} without {{{{#if}}}}")
            nodes.append(_If(open_if[0], open_if[1], tuple(body)))
            open_if, body = None, None
        elif m := _VAR_TAG.fullmatch(inner):
            emit(_Var(m.group(1), where))
        else:
            raise PromptError(
                f"template {name!r}, {where}: unsupported tag {match.group(0)!r}; supported: "
                "{{name}}, {{#if flag}}, {{/if}}"
            )
        pos = cut_end
    literal = text[pos:]
    _check_literal(name, text, literal, pos)
    emit(_Text(literal))
    if open_if is not None:
        raise PromptError(
            f"template {name!r}, {open_if[1]}: {{{{#if {open_if[0]}}}}} is never closed "
            "(missing {{/if}})"
        )
    return Template(name, tuple(nodes))


# --------------------------------------------------------------------------- rendering


def render_text(text: str, name: str = "<string>", /, **variables: Any) -> str:
    """Render template source ``text`` (``name`` is used in error messages)."""
    return parse_template(text, name).render(variables)


def render(name: str, /, prompts_dir: PathLike | None = None, **variables: Any) -> str:
    """Read template ``name`` now and render it with ``variables``.

    >>> render("checkpoint")  # doctest: +SKIP
    'This is a condensed record of the earlier conversation...'

    Every prompt text lives in a Markdown file of the top-level ``prompts/``
    directory and is read fresh on every call, so an edit applies to the very next
    render. The template language has exactly two constructs:

    ``{{name}}``
        replaced by the value of the variable ``name`` (``str``, ``int`` or ``float``).
    ``{{#if flag}} … {{/if}}``
        the enclosed text is kept when the variable ``flag`` is truthy. Blocks do
        not nest. A tag that stands alone on its line takes the whole line with it,
        so block tags never leave blank lines behind.

    Everything else is an error (:class:`~dashr_ext.errors.PromptError`) whose
    message names the template, the problem and the line:column where it is: a
    variable or flag that was not supplied, a variable whose value is ``None`` (guard
    it with ``{{#if}}``), a nested ``{{#if}}``, an unclosed block, a stray
    ``{{/if}}``, any other ``{{…}}`` tag, and a leftover ``{{`` or ``}}``. Variables
    that are supplied but unused are fine. Substituted values are inserted as they
    are and never re-scanned, so a value may itself contain ``{{``.

    Where templates are found, first match wins:

    1. the ``prompts_dir`` argument of :func:`render` / :func:`load_template`;
    2. the ``DASHR_PROMPTS_DIR`` environment variable;
    3. the source tree's ``prompts/`` next to the package directory (editable installs
       and checkouts);
    4. the copy installed with the package (``dashr_ext/_prompts/`` in a wheel).
    """
    return render_text(load_template(name, prompts_dir), _file_name(name), **variables)


def summary_sections(prompts_dir: PathLike | None = None) -> tuple[str, ...]:
    """The section headings of ``summarize.md``, in order.

    They are the numbered bold items of the template (``1. **Primary Request and
    Intent** — …``), the single source of truth for every summarizer's output
    structure.
    """
    return _sections("summarize", "Primary Request and Intent", prompts_dir)


def state_sections(prompts_dir: PathLike | None = None) -> tuple[str, ...]:
    """The section headings of ``state.md`` (the state checkpoint), in order.

    Read like :func:`summary_sections`: the numbered bold items (``1. **Goal** — …``).
    """
    return _sections("state", "Goal", prompts_dir)


def _sections(name: str, example: str, prompts_dir: PathLike | None) -> tuple[str, ...]:
    text = load_template(name, prompts_dir)
    sections = tuple(m.group(1).strip() for m in _SECTION.finditer(text))
    if not sections:
        raise PromptError(
            f"template '{name}.md': no numbered section list found "
            f"(expected lines like '1. **{example}** — …')"
        )
    return sections
