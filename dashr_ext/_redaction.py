"""Keeping API keys out of everything shown or recorded (SPEC §12).

In messages, the key is replaced by ``***`` wherever it occurs, and so is a piece of it
that a cut left behind (a snippet of server text can end or start in the middle of the
key). Server text is redacted before it is cut to a snippet, so no cut can split the key.

In the log, :func:`scrub_keys` replaces every configured key (each live :class:`Secret`'s
and the values of :data:`API_KEY_ENV`) by ``[redacted]`` before a record is written, so a
cell that prints a key records, archives and sends ``[redacted]`` instead. Dict keys are
scrubbed like values. A piece of a key that a cut left at the start or the end of a string
(the key's tail starting it, or its head ending it, at least 8 characters) is scrubbed too;
a piece inside a string is not, as it cannot be told from ordinary text. Whoever cuts text
that is to be recorded scrubs it first (the agent does, before it cuts a cell's output).
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import httpx

__all__ = [
    "API_KEY_ENV",
    "REDACTED",
    "Secret",
    "configured_keys",
    "error_detail",
    "redact_key",
    "scrub_keys",
    "snippet",
]

API_KEY_ENV: tuple[str, ...] = ("DASHR_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY")
"""Environment variables searched, in order, for the API key."""
REDACTED = "[redacted]"
"""What :func:`scrub_keys` writes in place of a key."""

_FRAGMENT_MIN = 8
"""Shortest start or end of the key that :func:`redact_key` scrubs on its own."""
_SCRUB_MIN = 8
"""Shortest key :func:`scrub_keys` replaces: a shorter one would mangle ordinary text."""

_T = TypeVar("_T")
_live: weakref.WeakSet[Secret] = weakref.WeakSet()
_live_lock = threading.Lock()


class Secret:
    """Holds an API key: its repr never shows it; :func:`scrub_keys` scrubs it while it lives.

    A constructor wraps its ``api_key`` argument in one first thing, before any check can
    raise, so no frame of a traceback holds the key itself. Whatever was passed is held,
    even a value of the wrong type, so the check that refuses it can still name its type
    (:attr:`wrong_type`).
    """

    __slots__ = ("__weakref__", "_value")

    def __init__(self, value: object) -> None:
        self._value = value
        if value and isinstance(value, str):
            with _live_lock:
                _live.add(self)

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<none>"

    def get(self) -> str | None:
        """The key; ``None`` when none was given or it is not a string."""
        return self._value if isinstance(self._value, str) else None

    @property
    def given(self) -> bool:
        """Whether anything but ``None`` was passed."""
        return self._value is not None

    @property
    def wrong_type(self) -> str | None:
        """The type name of a value that is neither a string nor ``None``."""
        if self._value is None or isinstance(self._value, str):
            return None
        return type(self._value).__name__


def redact_key(text: str, key: str | None) -> str:
    """``text`` with every occurrence of ``key``, and every piece a cut left of it, as ``***``.

    Keys shorter than 4 characters are left alone: scrubbing them would mangle text.
    """
    if not key or len(key) < 4:
        return text
    text = text.replace(key, "***")
    return _scrub_fragments(text, key)


def configured_keys() -> list[str]:
    """The keys to scrub, longest first: each live :class:`Secret`'s and each set
    :data:`API_KEY_ENV` variable's (read now), leaving out any shorter than 8 characters."""
    with _live_lock:
        values = {secret.get() for secret in _live}
    values.update(os.environ.get(name) for name in API_KEY_ENV)
    return sorted((v for v in values if v and len(v) >= _SCRUB_MIN), key=len, reverse=True)


def scrub_keys(value: _T, keys: list[str] | None = None) -> _T:
    """``value`` with every configured key (:func:`configured_keys`, or ``keys``) in its
    strings replaced by ``[redacted]``; nested dicts, lists and tuples are walked.

    A piece of a key that a cut left at either end of a string is replaced too: the key's
    last ``n`` characters starting the string, its first ``n`` ending it (``n`` at least
    ``_FRAGMENT_MIN``), or a string that is nothing but a run of at least twice that many
    from inside the key. Dict keys are scrubbed like strings; when two of them come out
    the same (or the same as a key already there), the later ones get ``~2``, ``~3``, …
    so no entry is lost. What holds no key comes back as the very same object.
    """
    keys = configured_keys() if keys is None else keys
    return _scrub(value, keys) if keys else value


def _scrub_text(text: str, keys: list[str]) -> str:
    for key in keys:
        if key in text:
            text = text.replace(key, REDACTED)
    for key in keys:
        text = _scrub_edges(text, key)
    return text


def _scrub_edges(text: str, key: str) -> str:
    """``text`` without the piece of ``key`` a cut left at its start or its end."""
    m = _FRAGMENT_MIN
    if len(text) < m or len(key) <= m:
        return text
    if len(text) >= 2 * m and len(text) < len(key) and text in key:
        return REDACTED  # a run from inside the key, cut at both ends
    if text[:m] in key:  # the key's tail (its head cut off) starting the text
        for n in range(min(len(key) - 1, len(text)), m - 1, -1):
            if text.startswith(key[-n:]):
                text = REDACTED + text[n:]
                break
    if text[-m:] in key:  # the key's head (its tail cut off) ending the text
        for n in range(min(len(key) - 1, len(text)), m - 1, -1):
            if text.endswith(key[:n]):
                text = text[: len(text) - n] + REDACTED
                break
    return text


def _scrub_dict(value: dict[Any, Any], keys: list[str]) -> dict[Any, Any]:
    names = {k: _scrub_text(k, keys) if isinstance(k, str) else k for k in value}
    items = {k: _scrub(v, keys) for k, v in value.items()}
    if all(names[k] is k for k in value) and all(items[k] is v for k, v in value.items()):
        return value
    taken = {k for k in value if names[k] is k}  # unchanged names keep their place
    out: dict[Any, Any] = {}
    for k, v in items.items():
        name = names[k]
        if name is not k:
            base, n = name, 1
            while name in taken:
                n += 1
                name = f"{base}~{n}"
            taken.add(name)
        out[name] = v
    return out


def _scrub(value: Any, keys: list[str]) -> Any:
    if isinstance(value, str):
        return _scrub_text(value, keys)
    if isinstance(value, dict):
        return _scrub_dict(value, keys)
    if isinstance(value, list | tuple):
        seq = [_scrub(v, keys) for v in value]
        if all(a is b for a, b in zip(seq, value, strict=True)):
            return value
        return seq if isinstance(value, list) else tuple(seq)
    return value


def snippet(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters with a note of how much was cut."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + f"… [+{len(text) - limit} chars]"


def error_detail(response: httpx.Response, redact: Callable[[str], str]) -> str:
    """The server's error message, ``redact``-ed before it is cut to a snippet."""
    try:
        data = json.loads(response.content)
    except ValueError:
        return snippet(redact(response.text)) or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            parts = [str(error[k]) for k in ("message", "code", "type") if error.get(k)]
            if parts:
                return snippet(redact(" | ".join(dict.fromkeys(parts))))
        elif isinstance(error, str):
            return snippet(redact(error))
    return snippet(redact(response.text))


def _scrub_fragments(text: str, key: str) -> str:
    """``text`` without pieces of ``key`` that a cut (of its head or its tail) left behind.

    Scrubbed: a run of at least ``_FRAGMENT_MIN`` characters that starts the key or ends
    it, and a run of at least twice that many from anywhere inside it.
    """
    n, m = len(key), _FRAGMENT_MIN
    if n < 2 * m:
        return text
    grams = {key[j : j + m] for j in range(n - m + 1)}
    out: list[str] = []
    i = done = 0
    while i <= len(text) - m:
        if text[i : i + m] not in grams:
            i += 1
            continue
        best = 0
        for start in range(n - m + 1):
            if key[start : start + m] != text[i : i + m]:
                continue
            length = m
            while (
                start + length < n
                and i + length < len(text)
                and key[start + length] == text[i + length]
            ):
                length += 1
            edge = start == 0 or start + length == n
            if length >= (m if edge else 2 * m):
                best = max(best, length)
        if best:
            out.append(text[done:i])
            out.append("***")
            i = done = i + best
        else:
            i += 1
    out.append(text[done:])
    return "".join(out)
