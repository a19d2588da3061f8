"""The code-only rollup of the oldest index stubs into one directory node (pure; SPEC §6.3).

When the stub region passes ``stub_region_ratio × trigger``, the oldest stubs (and any
earlier directory) are replaced by one directory checkpoint listing, for every rolled-up
checkpoint, its footer line (so each id stays a recall target: ``history_read("c42")``
still reads its span) and its keyword line. No model is involved: the listing is a pure
function of the rolled-up checkpoints' ``compaction/summary`` data, recorded as
``data["directory"]`` so a later rollup carries the entries forward and a replay composes
the same bytes. When the listing is still too long, the keyword lines merge into one
deduplicated line, then the footers shorten to ``id #start–#end``.

A rollup appends: the new directory takes the place of the stubs it lists, right after the
earlier directories, so the request prefix up to them survives the rollup too. Only when
the directories alone fill half the share are they merged, with the oldest stubs, into one
(the one rollup that rewrites the head, and the rarest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .._footers import checkpoint_footer
from .._summarizers import stub_keywords

__all__ = ["DirectoryEntry", "Rollup", "directory_text", "entries_from_data", "plan_rollup"]

HEADER = (
    "Index of earlier checkpoints, rolled up. Each checkpoint below still names its "
    'original events: read them with history_read("<id>") or find them with history_search.'
)
KEYWORDS_PREFIX = "Keywords:"


@dataclass(frozen=True)
class DirectoryEntry:
    """One rolled-up checkpoint: its id, span and keyword line."""

    checkpoint: str
    start: int
    end: int
    events: int
    tokens: int
    keywords: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DirectoryEntry:
        return cls(
            str(data["checkpoint"]),
            int(data["start"]),
            int(data["end"]),
            int(data["events"]),
            int(data["tokens"]),
            str(data.get("keywords", "")),
        )


def entries_from_data(data: Mapping[str, Any]) -> list[DirectoryEntry]:
    """The directory entries a checkpoint contributes: itself (a stub), or its listing."""
    if data.get("checkpointClass") == "directory":
        return [DirectoryEntry.from_json(e) for e in data.get("directory", [])]
    seqs = data["shadowedSeqs"]
    return [
        DirectoryEntry(
            str(data["checkpoint"]),
            int(data["shadowedRange"]["start"]),
            int(data["shadowedRange"]["end"]),
            len(seqs),
            int(data["shadowedTokenCount"]),
            stub_keywords(str(data["summary"])) or "",
        )
    ]


def _merged_keywords(entries: Sequence[DirectoryEntry], limit: int) -> str:
    """Every entry's anchors, grouped by kind, each anchor once, clipped to ``limit`` chars."""
    kinds: dict[str, list[str]] = {}
    for entry in entries:
        for group in entry.keywords.split(";"):
            kind, sep, items = group.partition(":")
            if not sep:
                kind, items = "", kind
            bucket = kinds.setdefault(kind.strip(), [])
            for item in items.split(","):
                item = item.strip()
                if item and item not in bucket:
                    bucket.append(item)
    parts = [f"{k}: {', '.join(v)}" if k else ", ".join(v) for k, v in kinds.items() if v]
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def directory_text(
    entries: Sequence[DirectoryEntry], count_tokens: Callable[[str], int], budget: int
) -> str:
    """The directory listing, in the most detailed form that fits ``budget`` tokens.

    Forms, most detailed first: each entry's footer line and keyword line; the footers and
    one merged keyword line; ``id #start–#end`` entries and one merged keyword line. The
    last form is returned even when over budget (every id must stay listed).
    """
    full = [HEADER]
    for e in entries:
        full.append(checkpoint_footer(e.checkpoint, (e.start, e.end), e.events, e.tokens))
        if e.keywords:
            full.append(f"  {KEYWORDS_PREFIX} {e.keywords}")
    text = "\n".join(full)
    if count_tokens(text) <= budget:
        return text
    footers = [
        checkpoint_footer(e.checkpoint, (e.start, e.end), e.events, e.tokens) for e in entries
    ]
    base = "\n".join([HEADER, *footers])
    room = max(0, (budget - count_tokens(base)) * 3)
    merged = _merged_keywords(entries, room)
    text = f"{base}\n{KEYWORDS_PREFIX} {merged}" if merged else base
    if count_tokens(text) <= budget:
        return text
    spans = ", ".join(f"{e.checkpoint} #{e.start}\u2013#{e.end}" for e in entries)
    base = f"{HEADER}\nCheckpoints: {spans}"
    room = max(0, (budget - count_tokens(base)) * 3)
    merged = _merged_keywords(entries, room)
    return f"{base}\n{KEYWORDS_PREFIX} {merged}" if merged else base


@dataclass(frozen=True)
class Rollup:
    """A planned rollup: index positions ``[start, end)`` become one directory node."""

    start: int
    end: int
    text: str
    tokens: int
    """The directory node's size, message overhead included."""
    entries: tuple[DirectoryEntry, ...]


def plan_rollup(
    roles: Sequence[str],
    sizes: Sequence[int],
    entries_of: Callable[[int], list[DirectoryEntry]],
    cap: int,
    count_tokens: Callable[[str], int],
    overhead: int = 0,
) -> Rollup | None:
    """The rollup of the index nodes (``roles``/``sizes`` from the surface head), or None.

    None while the index fits ``cap``, or when no directory would be smaller than the
    nodes it replaces. Afterwards the index is at most half the cap when that is possible.
    """
    lo = len(roles)
    if sum(sizes) <= cap:
        return None
    dirs = 0
    while dirs < lo and roles[dirs] == "directory":
        dirs += 1
    merge_all = sum(sizes[:dirs]) > cap // 2 or lo - dirs < 2
    start = 0 if merge_all else dirs
    budget = cap // 2 if merge_all else max(1, cap // 4)
    target = cap // 2
    entries: list[DirectoryEntry] = []
    chosen: Rollup | None = None
    for j in range(start, lo):
        entries += entries_of(j)
        if j - start < 1:
            continue
        text = directory_text(entries, count_tokens, budget)
        tokens = count_tokens(text) + overhead
        chosen = Rollup(start, j + 1, text, tokens, tuple(entries))
        if sum(sizes[:start]) + tokens + sum(sizes[j + 1 :]) <= target:
            break
    if chosen is None or chosen.tokens >= sum(sizes[chosen.start : chosen.end]):
        return None
    return chosen
