"""Argument parsing for the magics, and errors shown as one line in magic syntax (SPEC §9).

IPython's ``magic_arguments`` decorators are untyped; the wrappers here give them types so
the magic methods stay checked. A bad argument or a dashr error becomes a
:class:`~IPython.core.error.UsageError`: one line, no traceback, and naming what to type in
a cell (``%history_read --seq 0``, ``%config Dashr.agent_base_url = …``), not the Python
call the core's message names (``history_read(seq=0)``, ``ChatClient.base_url``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar, cast

from IPython.core import magic
from IPython.core import magic_arguments as ipython_arguments
from IPython.core.error import UsageError

from .._cliparse import dash_hint
from ..errors import ConfigError, DashrError, ReadOnlyError

__all__ = [
    "NOT_AN_INT",
    "READ_ONLY_MESSAGE",
    "agent_errors",
    "argument",
    "cell_magic",
    "in_magic_syntax",
    "line_magic",
    "magic_arguments",
    "one_line_errors",
    "parse",
    "unquote",
]

READ_ONLY_MESSAGE = (
    "this session is attached read-only (%dashr attach --read-only): nothing can be recorded "
    "or compacted; %dashr attach PATH attaches it for writing"
)

# The Python calls the core's messages suggest, as a cell types them.
_CALLS_AS_MAGICS = (
    ("history_outline()", "%history_outline"),
    ("history_read(seq=0)", "%history_read --seq 0"),
)
# A recall argument a message starts with, as the magic's option (only these reach a magic).
_FIELDS_AS_OPTIONS = {
    "seq": "--seq",
    "turn": "--turn",
    "cursor": "--cursor",
    "limit": "--limit",
    "query": "QUERY",
}
# Agent fields the %%agent magic sets from its Dashr options.
_AGENT_FIELDS = {
    "ChatClient.base_url": ("agent_base_url", "URL"),
    "ChatClient.model": ("agent_model", "NAME"),
}


def in_magic_syntax(text: str) -> str:
    """``text`` on one line, with the Python calls and arguments it names in magic syntax."""
    text = " ".join(text.split())
    field, sep, rest = text.partition(": ")
    if sep and field in _FIELDS_AS_OPTIONS:
        text = f"{_FIELDS_AS_OPTIONS[field]}: {rest}"
    for call, spelled in _CALLS_AS_MAGICS:
        text = text.replace(call, spelled)
    return text


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn a dashr error (or a file error) into a one-line UsageError: no traceback."""
    try:
        yield
    except ReadOnlyError:
        raise UsageError(READ_ONLY_MESSAGE) from None
    except (DashrError, OSError) as exc:
        raise UsageError(in_magic_syntax(str(exc) or type(exc).__name__)) from None


@contextmanager
def agent_errors() -> Iterator[None]:
    """Bad agent options (a ValueError naming the field) as one-line usage errors.

    A missing or malformed endpoint names the ``Dashr`` option that sets it.
    """
    try:
        yield
    except ConfigError as exc:
        option = _AGENT_FIELDS.get(exc.field)
        if option is None:
            raise UsageError(in_magic_syntax(str(exc))) from None
        name, placeholder = option
        raise UsageError(
            f"Dashr.{name}: expected {exc.accepted}, got {exc.received!r}; set it with "
            f"%config Dashr.{name} = {placeholder}"
        ) from None
    except ValueError as exc:
        raise UsageError(" ".join(str(exc).split())) from None


NOT_AN_INT = re.compile(r"argument (\S+): invalid int value: (.*)")
"""argparse's words for an option given a non-integer (``--limit abc``)."""


def parse(magic_method: Callable[..., Any], line: str) -> Any:
    """The ``magic_arguments`` namespace of ``line``; a line shlex cannot split is a UsageError.
    An option given a non-integer says so in our words (``--limit: expected an integer, got
    'abc'``); a search phrase read as an option (``%history_search ->``) is told to follow
    ``--``."""
    try:
        return ipython_arguments.parse_argstring(magic_method, line)  # type: ignore[no-untyped-call]
    except ValueError as exc:  # shlex: e.g. an unbalanced quote
        raise UsageError(f"cannot split the arguments: {exc}") from None
    except UsageError as exc:
        text = NOT_AN_INT.sub(r"\1: expected an integer, got \2", str(exc))
        hint = dash_hint(line.split(), "%history_search")
        if magic_method.__name__ != "history_search":
            hint = ""
        if text == str(exc) and not hint:
            raise
        raise UsageError(f"{text}{hint}") from None


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
