"""The keyword line: low-frequency literal anchors of the span, by kind (SPEC §5.2)."""

from __future__ import annotations

import re

from .items import ANCHOR_KINDS, CRITICAL, KEYWORDS, Items
from .reading import Span
from .text import FILE_PATH, URLISH, first_line

__all__ = ["add_anchors", "candidate_anchors"]

_DIR_PATH = re.compile(r"(?<![\w/.:@-])(?:~|\.{1,2})?/(?:[\w.+@-]+/)+[\w.+@-]+/?(?![\w/-])")

_NUMBER_UNIT = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?[ ]?(?:ms|µs|us|ns|s|sec|seconds?|min(?:utes?)?|h|hours?|"
    r"[KMGT]i?B|[kKMG]b|bytes?|tokens?|%|px|x|passed|failed|errors?|skipped|warnings?)(?![\w])"
    r"|(?<![\w.])v?\d+\.\d+\.\d+(?:[-.+][\w.]+)?(?![\w.])"
)
_CONFIG = re.compile(
    r"(?<![\w-])--[A-Za-z][\w-]*(?:=[^\s'\"`,;]+)?"
    r"|(?<![\w.])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?:=[^\s'\"`,;]+)?\b"
    r"|(?<![\w.-])[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+=[^\s'\"`,;]+"
)
_CODE_IDENT = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:\(\))?"
    r"|(?<![\w.])[a-z_][a-z0-9]*_[a-z0-9_]+(?![\w.])"
    r"|(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+(?![\w.])"
)
_ANCHOR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("paths", FILE_PATH),
    ("paths", _DIR_PATH),
    ("numbers", _NUMBER_UNIT),
    ("config", _CONFIG),
    ("identifiers", _CODE_IDENT),
)


def add_anchors(items: Items, span: Span, old: list[list[list[str]]], per_kind: int) -> None:
    """Add the keyword line: up to ``per_kind`` literal anchors of each kind.

    Anchors are the rarest exact strings of the span that the bullets do not already
    contain, grouped as ``errors``, ``paths``, ``numbers`` (values with units, versions),
    ``config`` (flags, ``KEY=value``, environment names), ``identifiers`` and
    ``commands``, so that a later ``history_search`` has something exact to look for.
    The keyword lines of previous summaries (``old``) are merged in, one union per kind in
    which the previous anchors keep up to half the slots. Call it after every other bullet
    is in.
    """
    if per_kind == 0:
        return
    previous: dict[str, list[str]] = {}
    for parsed in old:
        for bullet in parsed[CRITICAL]:
            if bullet.startswith(KEYWORDS):
                for kind, anchors in _parse_keywords(bullet).items():
                    previous.setdefault(kind, []).extend(anchors)
    body = "\n".join(i.text for i in items.items)
    fresh = candidate_anchors(span)
    for kind in ANCHOR_KINDS:
        new = [a for a in fresh.get(kind, []) if a.rstrip("…") not in body]
        old_kind = list(dict.fromkeys(previous.get(kind, [])))
        keep_new = new[: max(per_kind - min(len(old_kind), per_kind // 2), 0)]
        chosen = list(dict.fromkeys(keep_new + old_kind))[:per_kind]
        chosen += [a for a in new if a not in chosen][: per_kind - len(chosen)]
        for rank, anchor in enumerate(chosen):
            items.anchor(kind, anchor, 30.0 - rank * 2 + (1.0 if kind == "errors" else 0.0))


def candidate_anchors(span: Span) -> dict[str, list[str]]:
    """Literal anchors by kind, most salient first.

    An anchor's weight adds up over the texts that mention it: 3 for an error
    line, 2 for assistant prose and tool-call commands or paths, 1 for user
    text. Ties keep the order of first appearance.
    """
    found: dict[str, dict[str, list[int]]] = {k: {} for k in ANCHOR_KINDS}

    def note(kind: str, value: str, where: int, weight: int) -> None:
        value = value.strip()
        if kind != "errors":
            value = value.rstrip(".,:;)")
        if 3 <= len(value) <= 100:
            hits = found[kind].setdefault(value, [where, 0])
            hits[1] += weight

    for where, line in enumerate(span.errors):
        note("errors", line if len(line) <= 100 else line[:97].rstrip() + "…", where, 3)
    texts_seen: set[str] = set()
    for where, (weight, text) in enumerate(span.salient):
        if text in texts_seen:  # a message repeated verbatim (harness boilerplate) counts once
            continue
        texts_seen.add(text)
        seen: set[tuple[str, str]] = set()
        for kind, pattern in _ANCHOR_PATTERNS:
            for match in pattern.finditer(text):
                value = match.group(0)
                if kind == "paths":
                    if URLISH.match(value):
                        continue
                    value = value.rstrip("/")
                elif kind == "identifiers" and (
                    len(value) < 4
                    or FILE_PATH.fullmatch(value)
                    or re.fullmatch(r"[\d.]+|(?:\w\.)+\w?", value)
                ):
                    continue
                if (kind, value) not in seen:
                    seen.add((kind, value))
                    note(kind, value, where, weight)
    for where, cmd in enumerate(span.commands):
        if cmd.text:
            line = first_line(cmd.text, 200)
            note("commands", line if len(line) <= 60 else " ".join(line.split()[:3]), where, 2)
    out: dict[str, list[str]] = {}
    for kind, values in found.items():
        ranked = sorted(values.items(), key=lambda kv: (-kv[1][1], kv[1][0]))
        out[kind] = [value for value, _ in ranked]
    return out


def _parse_keywords(bullet: str) -> dict[str, list[str]]:
    body = bullet[len(KEYWORDS) :].strip()
    out: dict[str, list[str]] = {}
    for group in re.split(r";\s+(?=[a-z]+: )", body):
        kind, _, rest = group.partition(": ")
        if kind.strip() in ANCHOR_KINDS:
            out[kind.strip()] = [a or b for a, b in re.findall(r"``\s(.+?)\s``|`([^`]+)`", rest)]
    return out
