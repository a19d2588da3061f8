"""Keeping an API key out of everything shown: reprs, error messages, server text (SPEC §12).

The key is replaced by ``***`` wherever it occurs, and so is a piece of it that a cut
left behind (a snippet of server text can end or start in the middle of the key).
Server text is redacted before it is cut to a snippet, so no cut can split the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = ["Secret", "error_detail", "redact_key", "snippet"]

_FRAGMENT_MIN = 8
"""Shortest start or end of the key that :func:`redact_key` scrubs on its own."""


class Secret:
    """Holds the API key; its repr never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

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
