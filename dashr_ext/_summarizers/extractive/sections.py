"""Filling the eight sections: bullets carried from a previous summary and new ones from
the span's facts, each with the priority the budget drops by (SPEC §5.2).
"""

from __future__ import annotations

import re

from .items import (
    CONCEPTS,
    CRITICAL,
    CURRENT,
    ERRORS,
    FILES,
    KEYWORDS,
    NEXT,
    PENDING,
    REQUEST,
    Items,
)
from .reading import OP_WEIGHTS, Command, FileNote, Span
from .text import (
    FILE_PATH,
    clip,
    code,
    command_label,
    leading_code,
    norm,
    one_line,
    prose,
    sentences,
)

__all__ = ["carry", "carry_state", "fill"]

# What assistant prose says: quoted identifiers, decisions, to-dos, next steps.
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_IDENTIFIER = re.compile(
    r"^(?:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*(?:\(\))?|[A-Za-z_]\w*\([^()]{0,40}\))$"
)
_DECISION = re.compile(
    r"\b(?:decid\w*|instead of|because|the (?:root cause|cause|issue|problem|bug|fix|solution) "
    r"(?:is|was|here is|lies)|this means|so that|we (?:must|need to)|must not|"
    r"the correct (?:fix|approach|behaviou?r))\b",
    re.I,
)
_TODO = re.compile(
    r"\b(?:TODO|FIXME|still need to|still have to|remaining|not yet (?:done|implemented|fixed)|"
    r"left to do)\b",
    re.I,
)
_NEXT = re.compile(
    r"\b(?:next|now (?:I|we|let)|then|I(?:'ll| will| am going to)|let me|let's|we(?:'ll| will) "
    r"(?:now|need|run|check|try))\b",
    re.I,
)


# --------------------------------------------------------------------------- carried forward


def carry(items: Items, old: list[list[list[str]]], span: Span) -> None:
    """Carry the bullets of previous summaries (parsed, oldest first) forward.

    They lead their sections. A request "without a final answer" that ``span`` answered
    or moved past is dropped, an error is updated when ``span`` reran its command, and
    the keyword line and the state sections (Current Work, Next Step) are left to
    :func:`~.anchors.add_anchors` and :func:`carry_state`.
    """
    for parsed in old:
        for section, bullets in enumerate(parsed):
            n = len(bullets)
            if section in (CURRENT, NEXT):
                continue  # replaced by the newer state (see carry_state)
            for i, bullet in enumerate(bullets):
                if section == CRITICAL and bullet.startswith(KEYWORDS):
                    continue  # merged as anchors
                if section == PENDING and _superseded_request(bullet, span):
                    continue  # answered since, or a newer request took over
                if section == ERRORS:
                    bullet = _refresh_error(bullet, span)
                recency = (i + 1) / (n + 1)
                base = {REQUEST: 90.0, ERRORS: 55.0, FILES: 52.0}.get(section, 50.0)
                if section == REQUEST and i == 0:
                    base = 99.0
                item = items.add(section, bullet, base + 4 * recency, carried=True)
                if item is not None:
                    item.order = -1_000_000 + len(items.items)  # carried bullets lead


def carry_state(items: Items, old: list[list[list[str]]]) -> None:
    """Keep the latest previous Current Work / Next Step where the span gave none.

    They are state sections: the newer state replaces the older, so this runs after
    :func:`fill`.
    """
    for section in (CURRENT, NEXT):
        if not items.has(section):
            for parsed in old[-1:]:
                for bullet in parsed[section]:
                    items.add(section, bullet, 20.0, carried=True)


_UNANSWERED = re.compile(r"^The request of seq (\d+) has no final answer yet$")


def _superseded_request(bullet: str, span: Span) -> bool:
    """An earlier "no final answer yet" bullet that the span answered or moved past."""
    match = _UNANSWERED.match(bullet)
    if match is None:
        return False
    seq = int(match.group(1))
    return span.answered or any(later > seq for later, _text in span.requests)


_ERROR_SOURCE = re.compile(r"^(.* — from (`[^`]+`|`` .+? ``) \(seq \d+\))(?:; .*)?$", re.S)


def _refresh_error(bullet: str, span: Span) -> str:
    """An earlier error bullet, updated when the span reran its command successfully."""
    match = _ERROR_SOURCE.match(bullet)
    if match is None:
        return bullet
    label = leading_code(match.group(2))
    for cmd in reversed(span.commands):
        if cmd.text and command_label(cmd.text, 120) == label:
            if cmd.status == 0 and not cmd.errors:
                return f"{match.group(1)}; a later run succeeded (seq {cmd.result_seq})"
            return f"{match.group(1)}; still failing at a later run (seq {cmd.seq})"
    return bullet


# --------------------------------------------------------------------------- new from the span


def fill(
    items: Items,
    span: Span,
    *,
    has_previous_request: bool,
    first_request_chars: int,
    request_chars: int,
    current_work_chars: int,
) -> None:
    """Add the bullets of every section from the facts of ``span``, section by section.

    The first request is quoted only when no previous summary already holds it; the
    ``*_chars`` options bound the request and current-work bullets, in characters.
    """
    _requests(items, span, has_previous_request, first_request_chars, request_chars)
    _concepts(items, span)
    _files(items, span)
    _errors(items, span)
    _pending(items, span)
    _current(items, span, current_work_chars)
    _next(items, span)
    _critical(items, span)


def _requests(
    items: Items, span: Span, has_previous_request: bool, first_limit: int, later_limit: int
) -> None:
    requests = list(span.requests)
    if requests and not has_previous_request:
        seq, text = requests.pop(0)
        quoted = "\n".join(
            f"  > {line}" if line.strip() else "  >"
            for line in clip(re.sub(r"\n{3,}", "\n\n", text), first_limit).splitlines()
        )
        items.add(REQUEST, f"Original request (seq {seq}), verbatim:\n{quoted}", 100.0)
    # Identical later requests (a harness repeating itself) become one bullet.
    grouped: dict[str, list[tuple[int, str]]] = {}
    for seq, text in requests:
        grouped.setdefault(norm(text), []).append((seq, text))
    n = len(grouped)
    for i, group in enumerate(grouped.values()):
        seqs = ", ".join(str(seq) for seq, _ in group)
        times = f"; ×{len(group)}" if len(group) > 1 else ""
        clipped = one_line(group[-1][1], later_limit)
        label = "seqs" if len(group) > 1 else "seq"
        priority = 80.0 + 10 * (i + 1) / n - (5.0 if len(group) > 1 else 0.0)
        items.add(REQUEST, f"Later request ({label} {seqs}{times}): {clipped}", priority)


def _concepts(items: Items, span: Span) -> None:
    counts: dict[str, int] = {}
    for _, text, _ in span.assistant:
        for term in _BACKTICK.findall(prose(text)):
            term = term.strip()
            if _IDENTIFIER.match(term) and not FILE_PATH.fullmatch(term) and len(term) > 2:
                counts[term] = counts.get(term, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
    for rank, (term, count) in enumerate(ranked):
        suffix = f" (×{count})" if count > 1 else ""
        items.add(CONCEPTS, f"{code(term)}{suffix}", 40.0 - rank)


def _files(items: Items, span: Span) -> None:
    notes = sorted(
        span.files.values(),
        key=lambda f: (-max(OP_WEIGHTS.get(op, 1) for op in f.ops), -f.touches, f.first_seen),
    )[:30]
    for rank, note in enumerate(notes):
        top = max(OP_WEIGHTS.get(op, 1) for op in note.ops)
        items.add(FILES, _file_bullet(note), 45.0 + 4 * top - rank * 0.5)


def _errors(items: Items, span: Span) -> None:
    ordered = list(span.errors.items())
    n = len(ordered)
    for i, (line, (seq, cmd)) in enumerate(ordered):
        count = span.error_counts.get(line, 1)
        text = code(line) + (f" (×{count})" if count > 1 else "")
        fixed = False
        if cmd is not None:
            text += f" — from {code(command_label(cmd.text, 120))} (seq {seq})"
            runs = [c for c in span.commands if c.text == cmd.text]
            later = [c for c in runs if c.seq > cmd.seq and c.status == 0 and not c.errors]
            if later:
                text += f"; a later run succeeded (seq {later[-1].result_seq})"
                fixed = True
            elif len(runs) > 1 and runs[-1] is cmd:
                text += f"; still failing at the last of {len(runs)} runs"
        else:
            text += f" (seq {seq})"
        items.add(ERRORS, text, (50.0 if fixed else 64.0) + 8 * (i + 1) / max(n, 1))


def _pending(items: Items, span: Span) -> None:
    if span.requests and not span.answered:
        seq = span.requests[-1][0]
        items.add(PENDING, f"The request of seq {seq} has no final answer yet", 72.0)
    todos: list[str] = []
    for _, text, _ in span.assistant[-6:]:
        todos.extend(s for s in sentences(text) if _TODO.search(s))
    for i, sentence in enumerate(todos[-4:]):
        items.add(PENDING, one_line(sentence, 240), 60.0 + i)


def _current(items: Items, span: Span, current_work_chars: int) -> None:
    last = next(((seq, t) for seq, t, _ in reversed(span.assistant) if t.strip()), None)
    if last is not None:
        seq, text = last
        body = one_line(prose(text), current_work_chars)
        items.add(CURRENT, f"Last assistant message (seq {seq}): {body}", 78.0)
    recent = [c for c in span.commands if c.text][-3:]
    for i, cmd in enumerate(recent):
        items.add(CURRENT, "Ran " + _command_outcome(cmd), 66.0 + i)


def _next(items: Items, span: Span) -> None:
    if span.requests and span.answered:
        items.add(NEXT, "(none): the last request was answered; wait for the user", 74.0)
        return
    for _, text, _ in reversed(span.assistant[-3:]):
        candidates = [s for s in sentences(text) if _NEXT.search(s)]
        if candidates:
            items.add(NEXT, one_line(candidates[-1], 300), 76.0)
            return
    recent = [c for c in span.commands if c.text]
    if recent:
        items.add(NEXT, "Continue from the last command: " + _command_outcome(recent[-1]), 74.0)


def _critical(items: Items, span: Span) -> None:
    decisions: list[str] = []
    for _, text, _ in span.assistant:
        decisions.extend(one_line(s, 240) for s in sentences(text) if _DECISION.search(s))
    unique = list(dict.fromkeys(decisions))[-8:]
    for i, sentence in enumerate(unique):
        items.add(CRITICAL, "Decision: " + sentence, 56.0 + i * 0.5)
    runs: dict[str, list[Command]] = {}
    for cmd in span.commands:
        if cmd.text:
            runs.setdefault(cmd.text, []).append(cmd)
    repeated = sorted(
        ((text, cmds) for text, cmds in runs.items() if len(cmds) > 1),
        key=lambda kv: (-len(kv[1]), kv[1][0].seq),
    )[:5]
    for rank, (_, cmds) in enumerate(repeated):
        last = cmds[-1]
        items.add(
            CRITICAL,
            f"Command run ×{len(cmds)}: " + _command_outcome(last),
            58.0 - rank,
        )
    for i, (seq, text) in enumerate(span.context[-3:]):
        items.add(CRITICAL, f"Context (seq {seq}): {one_line(text, 240)}", 35.0 + i)


def _file_bullet(note: FileNote) -> str:
    ops = ", ".join(f"{op} ×{n}" for op, n in note.ops.items())
    text = f"{code(note.path)} — {ops}"
    if note.last_edit:
        text += f"; last edit: {code(note.last_edit)}"
    return text


def _command_outcome(cmd: Command) -> str:
    out = f"{code(command_label(cmd.text, 160))} (seq {cmd.seq})"
    if cmd.status is not None:
        out += f" → exit {cmd.status}"
    elif cmd.result_seq is None:
        out += " → no result yet"
    if cmd.summary_line:
        out += f"; {cmd.summary_line}"
    elif cmd.errors:
        out += f"; {code(clip(cmd.errors[0], 120))}"
    return out
