"""Keeping API keys out of everything shown or recorded (SPEC §12).

In messages, the key is replaced by ``***`` wherever it occurs, and so is a piece of it
that a cut left behind (a snippet of server text can end or start in the middle of the
key). Server text is redacted before it is cut to a snippet, so no cut can split the key.

In the log, :func:`scrub_keys` replaces every configured key (each live :class:`Secret`'s
and the values of :data:`API_KEY_ENV`) by ``[redacted]`` before a record is written, so a
cell that prints a key records, archives and sends ``[redacted]`` instead.
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
    """Holds an API key: its repr never shows it; :func:`scrub_keys` scrubs it while it lives."""

    __slots__ = ("__weakref__", "_value")

    def __init__(self, value: str | None) -> None:
        self._value = value
        if value:
            with _live_lock:
                _live.add(self)

    def __repr__(self) -> str:
        return "<secret>" if self._value else "<none>"

    def get(self) -> str | None:
        return self._value


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

    Dict keys are left alone. What holds no key comes back as the very same object.
    """
    keys = configured_keys() if keys is None else keys
    return _scrub(value, keys) if keys else value


def _scrub(value: Any, keys: list[str]) -> Any:
    if isinstance(value, str):
        for key in keys:
            if key in value:
                value = value.replace(key, REDACTED)
        return value
    if isinstance(value, dict):
        items = {k: _scrub(v, keys) for k, v in value.items()}
        changed = any(items[k] is not v for k, v in value.items())
        return items if changed else value
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
