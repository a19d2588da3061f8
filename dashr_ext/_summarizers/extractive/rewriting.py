"""Rewriting what a superseded value left in the bullets (SPEC §5.2): the old value quoted
as current becomes the new one (``new (was old)`` with ``show_superseded``), a bullet that
stated only replaced values goes, a quoted request loses those sentences.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .items import Item
from .salience import score
from .text import sentences

if TYPE_CHECKING:
    from .facts import Fact

__all__ = ["only_stale", "rewrite", "rewrite_item", "without_stale_sentences"]


Read = Callable[[str], Sequence[tuple[str, str, tuple[str, ...], bool]]]
"""How a text's statements of values are read (:func:`~.facts.statements`)."""


def only_stale(text: str, stale: dict[str, Fact], read: Read) -> bool:
    """Whether a bullet states only replaced values (as ``read`` finds them) and sets no
    rule besides."""
    found = read(text)
    if not found or any(value not in stale for _, value, _, _ in found):
        return False
    body = re.sub(r"^[^:]{0,60}\(seq[^)]*\):\s*", "", text)
    return not any(score(s).rule >= 6.0 and not _mentions_only(s, stale) for s in sentences(body))


def without_stale_sentences(text: str, stale: dict[str, Fact], read: Read) -> str | None:
    """A quoted request without its sentences that state only replaced values (an excerpt
    now); None when nothing of it is left."""
    out = text
    for sentence in sentences(text, min_chars=8):
        if any(old in sentence for old in stale) and only_stale(sentence, stale, read):
            out = re.sub(r"(?<=\S)  +", " ", out.replace(sentence, ""))
    if out == text:
        return text
    body = out.split(":\n", 1)[-1]
    if not re.search(r"[A-Za-z]{3}", re.sub(r"^\s*>\s?", "", body, flags=re.M)):
        return None
    return out.replace("), verbatim:", "), excerpt:", 1)


def _mentions_only(sentence: str, stale: dict[str, Fact]) -> bool:
    """A sentence whose rule words are about the stale value itself ("a cap of at most $390")."""
    return any(old in sentence for old in stale) and not re.search(
        r"\b(?:never|always|do not|don't|must not|mustn't)\b", sentence, re.I
    )


def rewrite_item(item: Item, stale: dict[str, Fact], show: bool) -> None:
    item.text = rewrite(item.text, stale, show)
    item.variants = tuple(rewrite(v, stale, show) for v in item.variants)


def rewrite(text: str, stale: dict[str, Fact], show_superseded: bool = True) -> str:
    """``text`` with each stale value quoted as current replaced by the new value
    (``new (was old)`` with ``show_superseded``).

    Inline code (a command, an error line) and a bullet's ``(seq N)`` / ``×N`` marks are
    quoted as they were.
    """
    parts = re.split(r"(``\s.+?\s``|`[^`\n]+`|\(seqs? [^)]*\)|×\d+)", text)
    for i in range(0, len(parts), 2):  # the even parts are the prose
        parts[i] = _rewrite_prose(parts[i], stale, show_superseded)
    return "".join(parts)


def _rewrite_prose(text: str, stale: dict[str, Fact], show: bool) -> str:
    for old in sorted(stale, key=len, reverse=True):
        if old not in text:
            continue
        fact = stale[old]
        pattern = re.compile(rf"(?<![\w.$€£¥]){re.escape(old)}(?![\w]|\.\d)(?! \(was)")
        pieces = re.split(r"(?<=[.!?])\s+|\n", text)
        out = text
        for sentence in pieces:
            if not pattern.search(sentence) or fact.value in sentence:
                continue
            if not re.search(rf"(?<![a-z0-9]){re.escape(fact.key[-1])}", sentence, re.I):
                continue  # the sentence is about something else
            now = f"{fact.value} (was {old})" if show else fact.value
            out = out.replace(sentence, pattern.sub(now.replace("\\", "\\\\"), sentence))
        text = out
    return text
