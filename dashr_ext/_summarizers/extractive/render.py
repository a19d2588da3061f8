"""The summary's Markdown: rendering bullets, fitting the token budget, parsing a summary
back into bullets (SPEC §5.2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from ...errors import SummarizerError
from .items import ANCHOR_KINDS, CRITICAL, KEYWORDS, NONE_TEXT, Item, Items
from .text import code, norm

__all__ = ["fit", "parse_summary", "render"]


def parse_summary(text: str, sections: Sequence[str]) -> list[list[str]]:
    """Split a summary into per-section bullet lists (bullets keep their continuation lines).

    Headings are matched to ``sections`` by name (case, numbering and bold marks
    ignored); text under an unknown heading or before any heading goes to the
    last section. ``(none)`` bullets are dropped.
    """
    wanted = {norm(s): i for i, s in enumerate(sections)}
    out: list[list[str]] = [[] for _ in sections]
    current = len(sections) - 1
    bullet: list[str] | None = None

    def flush() -> None:
        nonlocal bullet
        if bullet is not None:
            joined = "\n".join(bullet).rstrip()
            if joined and norm(joined) != NONE_TEXT:
                out[current].append(joined)
        bullet = None

    for raw in text.splitlines():
        line = raw.rstrip()
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*)$", line)
        if heading:
            flush()
            name = re.sub(r"^\s*\d+[.)]\s*", "", heading.group(1)).strip().strip("*_: ").strip()
            current = wanted.get(norm(name), len(sections) - 1)
            continue
        if not line.strip():
            continue
        item = re.match(r"^\s{0,1}[-*•]\s+(.*)$", line)
        if item:
            flush()
            bullet = [item.group(1)]
        elif bullet is not None and (line.startswith("  ") or line.startswith("\t")):
            bullet.append(line)
        else:
            flush()
            bullet = [line.strip()]
    flush()
    return out


def fit(
    items: Items,
    sections: Sequence[str],
    count: Callable[[str], int],
    budget: int,
    renderer: Callable[[Sequence[str], Iterable[Item]], str] | None = None,
) -> str:
    """The summary of ``items`` under ``sections``, within ``budget`` tokens by ``count``.

    Every bullet has a priority: while the rendered summary exceeds the budget, the
    lowest-priority bullet (the newest of equals) is dropped. Raises
    :class:`~dashr_ext.errors.SummarizerError` when not even the headings fit.
    ``renderer`` writes the Markdown (default :func:`render`, the eight sections).
    """
    render_fn = renderer or render
    alive = list(items.items)
    skeleton = render_fn(sections, [])
    floor = count(skeleton)
    if floor > budget:
        raise SummarizerError(
            f"max_summary_tokens={budget} cannot hold the {len(sections)} section headings "
            f"(they need {floor} tokens)"
        )
    for item in alive:
        item.tokens = count(item.text) + (2 if item.anchor_kind else 3)
    estimate = floor + sum(i.tokens for i in alive) + 8 * bool(any(i.anchor_kind for i in alive))
    drop_order = sorted(alive, key=lambda i: (i.priority, -i.order))
    dropped: set[int] = set()
    cursor = 0
    while estimate > budget and cursor < len(drop_order):
        victim = drop_order[cursor]
        cursor += 1
        dropped.add(id(victim))
        estimate -= victim.tokens
    while True:
        kept = [i for i in alive if id(i) not in dropped]
        text = render_fn(sections, kept)
        over = count(text) - budget
        if over <= 0 or cursor >= len(drop_order):
            break
        saved = 0
        while saved < over and cursor < len(drop_order):
            victim = drop_order[cursor]
            cursor += 1
            dropped.add(id(victim))
            saved += max(victim.tokens, 1)
    if count(text) > budget:  # only the skeleton is left and it fits: unreachable guard
        text = skeleton
    return text


def render(sections: Sequence[str], items: Iterable[Item]) -> str:
    """The Markdown of ``items``: a heading per section, its bullets, ``(none)`` when empty.

    The keyword anchors make one last bullet of Critical Context, grouped by kind.
    """
    by_section: list[list[Item]] = [[] for _ in sections]
    anchors: dict[str, list[Item]] = {}
    for item in items:
        if item.anchor_kind is not None:
            anchors.setdefault(item.anchor_kind, []).append(item)
        else:
            by_section[item.section].append(item)
    blocks: list[str] = []
    for index, name in enumerate(sections):
        lines = [f"## {name}"]
        bullets = sorted(by_section[index], key=lambda i: i.order)
        lines.extend(f"- {item.text}" for item in bullets)
        if index == CRITICAL and anchors:
            groups = [
                f"{kind}: "
                + ", ".join(code(a.text) for a in sorted(anchors[kind], key=lambda i: i.order))
                for kind in ANCHOR_KINDS
                if kind in anchors
            ]
            lines.append(f"- {KEYWORDS} " + "; ".join(groups))
        if len(lines) == 1:
            lines.append(f"- {NONE_TEXT}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
