"""Running one cell for the agent's ``run_cell`` tool and capturing what it produced.

A cell runs in an IPython shell (variables persist in the kernel, magics work) or, without
one, in a plain ``dict`` namespace; stdout, stderr, ``display()`` text, the last
expression's value and exception text come back as a :class:`CellOutput`, which
:func:`truncate_output` cuts to the tool's budget. SPEC §10.

The captured text is made valid UTF-8 before it is returned, so it can always be logged:
surrogates (``print(name)`` of a file name that is not UTF-8 gives ``"caf\\udce9"``) are
replaced as :func:`~dashr_ext._jsontext.utf8_text` does, a lone one by U+FFFD.

IPython is imported only when a cell runs in a shell, so this module works in any process.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import io
import itertools
import linecache
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ._jsontext import utf8_text
from .errors import ConfigError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = [
    "CELL_SOURCES_KEPT",
    "DEFAULT_TOOL_OUTPUT_MAX_CHARS",
    "INTERRUPTED_CELL",
    "NO_OUTPUT",
    "RUN_CELL",
    "CellOutput",
    "run_cell",
    "run_cell_schema",
    "truncate_output",
]

RUN_CELL = "run_cell"
"""The name of the code tool."""
DEFAULT_TOOL_OUTPUT_MAX_CHARS = 10_000
NO_OUTPUT = "(no output)"
INTERRUPTED_CELL = "[interrupted: KeyboardInterrupt stopped this cell]"


@dataclass(frozen=True)
class CellOutput:
    """What one ``run_cell`` produced."""

    stdout: str = ""
    stderr: str = ""
    results: tuple[str, ...] = ()
    """Plain text of ``display()`` calls and of the last expression's value, in order."""
    error: str | None = None
    """The exception's text (traceback of the cell's own frames, then ``Type: message``)."""
    interrupted: bool = False
    """A ``KeyboardInterrupt`` stopped the cell."""

    @property
    def is_error(self) -> bool:
        return self.error is not None or self.interrupted

    @property
    def text(self) -> str:
        """Everything the cell produced, in the order a notebook shows it."""
        out = ""
        pieces = [self.stdout, self.stderr, *self.results, self.error or ""]
        if self.interrupted:
            pieces.append(INTERRUPTED_CELL)
        for piece in pieces:
            if not piece:
                continue
            if out and not out.endswith("\n"):
                out += "\n"
            out += piece
        return out or NO_OUTPUT


def truncate_output(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars``: the head and the tail around an explicit marker.

    The result, marker included, is at most ``max_chars`` long (only the head is kept when
    ``max_chars`` cannot even hold the marker). The tail is kept because that is where errors
    and final results usually are.
    """
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    while True:  # the marker's length depends on the count it shows: settle both
        marker = f"\n… [output truncated: +{omitted} chars] …\n"
        keep = max_chars - len(marker)
        if keep < 0:
            return text[: max(max_chars, 0)]
        if len(text) - keep == omitted:
            break
        omitted = len(text) - keep
    head = keep * 2 // 3
    tail = keep - head
    return f"{text[:head]}{marker}{text[len(text) - tail :]}"


def run_cell(
    code: str,
    *,
    shell: InteractiveShell | None = None,
    namespace: dict[str, Any] | None = None,
) -> CellOutput:
    """Run ``code`` in an IPython ``shell``, or else in ``namespace``; capture what it produced.

    With a shell: ``shell.run_cell(code, store_history=False)`` under
    ``IPython.utils.capture.capture_output``, so stdout, stderr, ``display()`` output and the
    last expression's value are captured instead of shown, and the shell does not display
    tracebacks (the exception is reported in :attr:`CellOutput.error`). Without a shell:
    ``exec`` of the cell, then ``eval`` of a trailing expression, in ``namespace`` (which
    must then be given), with ``sys.stdout``/``sys.stderr`` redirected. A
    ``KeyboardInterrupt`` in the cell is reported as :attr:`CellOutput.interrupted`.
    Surrogates in the captured text are replaced (see the module doc).
    """
    if shell is not None:
        return _utf8(_run_in_shell(shell, code))
    if namespace is None:
        raise ConfigError("namespace", "a dict when no IPython shell is given", namespace)
    return _utf8(_run_in_namespace(code, namespace))


def _utf8(output: CellOutput) -> CellOutput:
    """``output`` with every piece of text encodable as UTF-8."""
    return replace(
        output,
        stdout=utf8_text(output.stdout),
        stderr=utf8_text(output.stderr),
        results=tuple(utf8_text(r) for r in output.results),
        error=utf8_text(output.error) if output.error is not None else None,
    )


def _run_in_shell(shell: InteractiveShell, code: str) -> CellOutput:
    from IPython.utils.capture import capture_output

    # The display trap first: nested inside it, run_cell leaves sys.displayhook alone, so the
    # last expression's value reaches the capturing hook instead of the notebook.
    with (
        _quiet_tracebacks(shell),
        shell.display_trap,
        capture_output(stdout=True, stderr=True, display=False) as captured,
        _capture_display(shell) as outputs,
    ):
        result = shell.run_cell(code, store_history=False)  # type: ignore[no-untyped-call]
    texts = tuple(str(o["data"]["text/plain"]) for o in outputs if "text/plain" in o["data"])
    exc = result.error_before_exec or result.error_in_exec
    if isinstance(exc, KeyboardInterrupt):
        return CellOutput(captured.stdout, captured.stderr, texts, None, interrupted=True)
    error = _exception_text(exc) if exc is not None else None
    return CellOutput(captured.stdout, captured.stderr, texts, error)


@contextlib.contextmanager
def _capture_display(shell: InteractiveShell) -> Iterator[list[dict[str, Any]]]:
    """Collect ``display()`` output and expression values of ``shell`` instead of showing them.

    What ``capture_output(display=True)`` does, but for the given shell rather than the
    global instance.
    """
    from IPython.core.displayhook import CapturingDisplayHook
    from IPython.core.displaypub import CapturingDisplayPublisher

    publisher = CapturingDisplayPublisher()  # type: ignore[no-untyped-call]
    outputs: list[dict[str, Any]] = publisher.outputs
    saved_publisher, shell.display_pub = shell.display_pub, publisher
    hook = CapturingDisplayHook(shell, outputs)  # type: ignore[no-untyped-call]
    saved_hook, sys.displayhook = sys.displayhook, hook
    try:
        yield outputs
    finally:
        shell.display_pub = saved_publisher
        sys.displayhook = saved_hook


@contextlib.contextmanager
def _quiet_tracebacks(shell: InteractiveShell) -> Iterator[None]:
    """Keep the shell from displaying the cell's traceback (the agent reports it instead).

    ``_showtraceback`` is IPython's documented override point for where tracebacks go.
    """
    missing = object()
    saved = shell.__dict__.get("_showtraceback", missing)
    shell._showtraceback = lambda etype, evalue, stb: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        if saved is missing:
            del shell._showtraceback
        else:
            shell._showtraceback = saved  # type: ignore[method-assign]


_cell_numbers = itertools.count(1)
CELL_SOURCES_KEPT = 64
"""How many of the latest plain-namespace cells keep their source in ``linecache``.

Tracebacks through a function defined in one of them show its lines; older cells' entries
are dropped, so running cells does not grow ``linecache`` without bound."""
_cell_sources: collections.deque[str] = collections.deque()


def _remember_source(filename: str, code: str) -> None:
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    _cell_sources.append(filename)
    while len(_cell_sources) > CELL_SOURCES_KEPT:
        linecache.cache.pop(_cell_sources.popleft(), None)


def _run_in_namespace(code: str, namespace: dict[str, Any]) -> CellOutput:
    filename = f"<agent-cell-{next(_cell_numbers)}>"
    _remember_source(filename, code)
    stdout, stderr = io.StringIO(), io.StringIO()
    results: list[str] = []
    error: str | None = None
    interrupted = False
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            tree = ast.parse(code, filename, "exec")
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):
                tree.body.pop()
            exec(compile(tree, filename, "exec"), namespace)
            if isinstance(last, ast.Expr):
                expression = ast.Expression(last.value)
                value = eval(compile(expression, filename, "eval"), namespace)
                if value is not None:
                    results.append(repr(value))
        except KeyboardInterrupt:
            interrupted = True
        except (Exception, SystemExit) as exc:
            error = _exception_text(exc)
    return CellOutput(stdout.getvalue(), stderr.getvalue(), tuple(results), error, interrupted)


def _exception_text(exc: BaseException) -> str:
    """The traceback from the cell's own frames on (the runner's frame left out)."""
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(exc)).rstrip("\n")
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")


def run_cell_schema(max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS) -> dict[str, Any]:
    """The OpenAI ``tools`` entry of ``run_cell``."""
    return {
        "type": "function",
        "function": {
            "name": RUN_CELL,
            "description": (
                "Execute Python code in this Jupyter kernel. Variables, imports and files "
                "persist between calls. Returns stdout, stderr, the value of the last "
                "expression and the text of any exception, cut to about "
                f"{max_chars} characters. Originals of compacted context are in the kernel "
                'variable dashr_compaction_archive, e.g. dashr_compaction_archive["c42"].'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python code of the cell."}
                },
                "required": ["code"],
                "additionalProperties": False,
            },
        },
    }
