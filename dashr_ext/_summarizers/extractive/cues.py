"""The phrases that tie a value to the thing it is the value of, or name the thing an update
replaces: read by :mod:`.facts` (SPEC §5.2)."""

from __future__ import annotations

import re

__all__ = ["CHOOSES", "EARLIER", "FOR_LABEL", "LABEL_AFTER", "MONEY_HEADS"]

LABEL_AFTER = re.compile(
    r"\s+(?:as|is)\s+(?:the|our|my|your)\s+([a-z][a-z0-9]*(?:[ -][a-z0-9]+){0,3}?)"
    r"(?=\s*(?:[.,;!?)]|$)|\s+(?:from|for|now|today|and|but)\b)",
    re.I,
)
"""A label said after its value: "… as the code freeze date", "… is the replica host"."""
EARLIER = re.compile(
    r"\b(?:the |my |our )?(?:earlier|previous|old|former)\s+([a-z][\w-]*(?:\s+[a-z][\w-]*){0,3}?)"
    r"\s+(?:no longer|is (?:gone|dropped|replaced|void)|does not|doesn't|isn't)\b",
    re.I,
)
"""An update naming what it replaces ("the earlier code freeze date no longer applies")."""
CHOOSES = re.compile(
    r"\b(?:use|using|go(?:ing)? with|switch(?:ing)? to|pick|choose|stick with|settle on)\s+$",
    re.I,
)
"""A choice of a value, just before it ("let's go with …", "use …")."""
FOR_LABEL = re.compile(
    r"\s+for\s+(?:(?:the|our|my|your)\s+)?([a-z][a-z0-9]*(?:[ -][a-z0-9]+){0,3}?)"
    r"(?=\s*(?:[.,;!?)]|$)|\s+(?:from|now|today|and|but|instead)\b)",
    re.I,
)
"""The thing a value is chosen for: "use v5.35.9 for the release", "… for read traffic"."""
MONEY_HEADS = frozenset(
    {"budget", "budgets", "spend", "spending", "cap", "limit", "money", "allowance"}
)
"""Nouns a sum of money is the value of, one for another: "the travel budget" is "travel
spend" when both qualify the same thing."""
