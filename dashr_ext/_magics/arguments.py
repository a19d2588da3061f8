"""Argument parsing for the magics, and errors shown as one line (SPEC §9).

IPython's ``magic_arguments`` decorators are untyped; the wrappers here give them types so
the magic methods stay checked. A bad argument or a dashr error becomes a
:class:`~IPython.core.error.UsageError`: one line, no traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, cast

from IPython.core import magic
from IPython.core import magic_arguments as ipython_arguments
from IPython.core.error import UsageError

from ..errors import DashrError

__all__ = [
    "agent_errors",
    "argument",
    "cell_magic",
    "line_magic",
    "magic_arguments",
    "one_line_errors",
    "parse",
    "unquote",
]


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn a dashr error (or a file error) into a one-line UsageError: no traceback."""
    try:
        yield
    except (DashrError, OSError) as exc:
        text = str(exc) or type(exc).__name__
        raise UsageError(" ".join(text.split())) from None


@contextmanager
def agent_errors() -> Iterator[None]:
    """Bad agent options (a ValueError naming the field) as one-line usage errors."""
    try:
        yield
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from None


def parse(magic_method: Callable[..., Any], line: str) -> Any:
    """The ``magic_arguments`` namespace of ``line``; a line shlex cannot split is a UsageError."""
    try:
        return ipython_arguments.parse_argstring(magic_method, line)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # shlex: e.g. an unbalanced quote
        raise UsageError(f"cannot split the arguments: {exc}") from None


def unquote(token: str) -> str:
    """``"a b"`` or ``'a b'`` -> ``a b`` (IPython's splitter keeps the quotes)."""
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1]
    return token


_F = TypeVar("_F", bound=Callable[..., Any])


class _Decorator(Protocol):
    def __call__(self, func: _F, /) -> _F: ...


line_magic = cast(_Decorator, magic.line_magic)
"""IPython's ``line_magic`` with a precise type (IPython types it as returning a union)."""
cell_magic = cast(_Decorator, magic.cell_magic)
"""IPython's ``cell_magic`` with a precise type."""


def magic_arguments() -> _Decorator:
    """IPython's ``magic_arguments()`` with a type (its argument decorators are untyped)."""
    return cast(_Decorator, ipython_arguments.magic_arguments())  # type: ignore[no-untyped-call]


def argument(*args: Any, **kwargs: Any) -> _Decorator:
    """IPython's ``argument(...)`` with a type."""
    return cast(_Decorator, ipython_arguments.argument(*args, **kwargs))  # type: ignore[no-untyped-call]
