"""The keyword line of an index stub (SPEC §6.3): finding it, trimming a stub to it.

An index stub ends with one line that starts with ``Keywords:`` and lists the literal
anchors of its slice grouped by kind (``errors: `KeyError: 'x'`; paths: src/a.py``).
"""

from __future__ import annotations

import re

__all__ = ["KEYWORDS_LABEL", "stub_keywords", "trim_stub"]

KEYWORDS_LABEL = "Keywords:"
"""How the keyword line of a stub starts."""

# Lenient: a model may bullet it, bold it or write it in lower case.
_KEYWORD_LINE = re.compile(
    r"^[ \t]*(?:[-*•][ \t]+)?(?:\*\*|__)?keywords(?:\*\*|__)?[ \t]*:(?:\*\*|__)?[ \t]*(.*?)[ \t]*$",
    re.I | re.M,
)


def stub_keywords(text: str) -> str | None:
    """The content of the first keyword line of a stub (what follows ``Keywords:``).

    The line may be bulleted, bold or lower case (``- **keywords:** …``). ``None`` when
    ``text`` has no keyword line or the line is empty.
    """
    match = _KEYWORD_LINE.search(text)
    if match is None:
        return None
    return match.group(1).strip() or None


def trim_stub(text: str) -> str:
    """A model-written stub cut after its keyword line, which is rewritten as ``Keywords: …``.

    The keyword line ends a stub, so whatever follows it (sign-offs, a second list) is
    dropped, and so is an empty keyword line. A stub without a keyword line is returned
    stripped, unchanged otherwise.
    """
    match = _KEYWORD_LINE.search(text)
    if match is None:
        return text.strip()
    head = text[: match.start()].rstrip()
    content = match.group(1).strip()
    if not content:
        return head
    line = f"{KEYWORDS_LABEL} {content}"
    return f"{head}\n{line}" if head else line
