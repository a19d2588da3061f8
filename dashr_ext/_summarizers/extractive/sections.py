"""Filling the eight sections: bullets carried from a previous summary and new ones from
the span's facts, each with the priority the budget drops by (SPEC §5.2).

Priorities follow salience (:mod:`.salience`): the original request, the user's rules and
labelled values lead, then pending asks, the next step, the current work, unfixed errors and
decisions; files, concepts, repeated commands and low-salience chatter come last.
"""

from __future__ import annotations

import re

from .anchors import bounded
from .facts import Facts, parse_values
from .items import (
    CONCEPTS,
    CRITICAL,
    CURRENT,
    ERRORS,
    FILES,
    KEYWORDS,
    N_SECTIONS,
    NEXT,
    PENDING,
    REQUEST,
    VALUES,
    Items,
)
from .notes import (
    FACT_PRIORITY,
    add_said_facts,
    carried_fact_priority,
    fact_subject,
    labelled,
    printed,
)
from .reading import OP_WEIGHTS, Command, FileNote, Span
from .requests import (
    LOW_SALIENCE,
    RULE_LABEL,
    USER_DECISION_LABEL,
    USER_GOAL_LABEL,
    USER_NOTE_LABEL,
    add_pending_asks,
    add_requests,
    add_rules,
    relevant_rules,
    statement_priority,
    unanswered,
)
from .salience import excerpt, is_trivial, says_decision, score, scored_sentences, substance
from .text import (
    FILE_PATH,
    clip,
    code,
    command_label,
    leading_code,
    one_line,
    prose,
    sentences,
)

__all__ = ["carry", "carry_state", "fill", "read_facts"]

# What assistant prose says: quoted identifiers, to-dos, next steps.
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_IDENTIFIER = re.compile(
    r"^(?:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*(?:\(\))?|[A-Za-z_]\w*\([^()]{0,40}\))$"
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
_REQUEST_QUOTE = re.compile(r"^(Original request \(seq \d+\)), (?:verbatim|excerpt):\n(.*)$", re.S)
_LATER_REQUEST = re.compile(r"^((?:Later )?[Rr]equest \([^)]*\): )(.*)$", re.S)


# --------------------------------------------------------------------------- carried forward


def carry(items: Items, old: list[list[list[str]]], span: Span, facts: Facts) -> None:
    """Carry the bullets of previous summaries (parsed, oldest first) forward.

    They lead their sections. A request "not answered yet" that ``span`` answered or moved
    past is dropped, an error is updated when ``span`` reran its command, and the keyword
    line and the state sections (Current Work, Next Step) are left to
    :func:`~.anchors.add_anchors` and :func:`carry_state`. The labelled values (the
    ``Values —`` line) and the values the carried requests and rules state are read into
    ``facts``, older than anything in the span, so the span's statements update them.
    """
    for p, parsed in enumerate(old):
        order = -1000.0 + p * 10
        for section, bullets in enumerate(parsed):
            n = len(bullets)
            if section in (CURRENT, NEXT):
                continue  # replaced by the newer state (see carry_state)
            for i, bullet in enumerate(bullets):
                if section == CRITICAL and bullet.startswith(KEYWORDS):
                    continue  # merged as anchors
                if section == CRITICAL and bullet.startswith(VALUES):
                    for label, value, was in parse_values(bullet):
                        facts.state(label, value, order + 5, 0, was=was)
                    continue
                if section == PENDING and _superseded_request(bullet, span):
                    continue  # answered since, or a newer request took over
                if section == ERRORS:
                    bullet = _refresh_error(bullet, span)
                if section in (REQUEST, CRITICAL, PENDING, N_SECTIONS):
                    facts.read(bullet, order + i * 0.01, 0)
                recency = 0.0 if _STATEMENT_BODY.match(bullet) else (i + 1) / (n + 1)
                item = items.add(
                    section,
                    bullet,
                    _carried_priority(section, bullet) + 4 * recency,
                    carried=True,
                    variants=_carried_variants(section, bullet),
                )
                if item is not None:
                    item.order = -1_000_000 + len(items.items)  # carried bullets lead


def _carried_priority(section: int, bullet: str) -> float:
    if section == N_SECTIONS:  # a state's constraint (see .state)
        return 89.0
    if section == REQUEST:
        if bullet.startswith("Original request"):
            return 96.0
        body = bullet.split("): ", 1)[-1]
        given = max((substance(s) for _, s in scored_sentences(body)), default=0.0)
        if given < LOW_SALIENCE:  # chatter stays below every fact
            return 12.0 + min(given, 3.0)
        return 66.0 + min(score(bullet).score, 16.0)
    if section == CRITICAL:
        if bullet.startswith((RULE_LABEL, USER_GOAL_LABEL, USER_DECISION_LABEL, USER_NOTE_LABEL)):
            # Ranked as when it was first kept (see .requests.statement_priority).
            body = _STATEMENT_BODY.sub("", bullet, count=1)
            body = re.sub(r" \(was: [^()]*\)$", "", body)
            found = statement_priority(body)
            return (found if found is not None else 83.0) + 0.001
        if fact_subject(bullet) is not None:
            return carried_fact_priority(bullet)
        if bullet.startswith("Decision: "):
            return 50.0 + min(score(bullet).score, 14.0)
        if not bullet.startswith(("Command run ×", "Context (seq")):
            # A checklist line shows a statement without its head: ranked by what it says.
            found = statement_priority(bullet)
            if found is not None:
                return found + 0.001
            if substance(score(bullet)) > 0:
                return FACT_PRIORITY
        return 48.0
    if section == PENDING:
        return 80.0 if bullet.startswith("Request of seq") else 58.0
    return {ERRORS: 55.0, FILES: 48.0, CONCEPTS: 34.0}.get(section, 46.0)


_STATEMENT_BODY = re.compile(r"^User (?:rule|goal|decision|note) \(seq \d+\): ")


def _carried_variants(section: int, bullet: str) -> tuple[str, ...]:
    """Shorter forms of a carried request: its most salient sentences."""
    if section != REQUEST:
        return (clip(bullet, 160),) if len(bullet) > 200 else ()
    quote = _REQUEST_QUOTE.match(bullet)
    if quote:
        body = "\n".join(re.sub(r"^\s*>[ ]?", "", line) for line in quote.group(2).splitlines())
        return tuple(
            f"{quote.group(1)}, excerpt:\n"
            + "\n".join(f"  > {line}" for line in short.splitlines())
            for limit, keep in ((240, 0), (120, 1))
            if (short := excerpt(body, limit, keep)) is not None
        )
    later = _LATER_REQUEST.match(bullet)
    if later:
        return tuple(
            later.group(1) + short
            for limit, keep in ((200, 0), (100, 1))
            if (short := excerpt(later.group(2), limit, keep)) is not None
        )
    return ()


def carry_state(items: Items, old: list[list[list[str]]], span: Span) -> None:
    """Keep the latest previous Current Work / Next Step where the span gave none.

    They are state sections: the newer state replaces the older, so this runs after
    :func:`fill`. A span whose last request was answered has no next step: the previous
    one is not carried either.
    """
    for section in (CURRENT, NEXT):
        if items.has(section) or (section == NEXT and span.answered):
            continue
        for parsed in old[-1:]:
            for i, bullet in enumerate(parsed[section]):
                if not bullet.startswith("(none)"):
                    items.add(section, bullet, _state_priority(section, bullet, i), carried=True)


def _state_priority(section: int, bullet: str, index: int) -> float:
    """A carried Current Work / Next Step bullet ranks as it did when first kept."""
    if section == NEXT:
        return 80.0 - index * 0.1
    if bullet.startswith("Last assistant message"):
        return _current_priority(bullet.split("): ", 1)[-1])
    return 62.0 - index * 0.1


def _current_priority(text: str) -> float:
    """The last assistant message's priority: low when it says nothing but filler."""
    return 78.0 if any(not s.trivial for _, s in scored_sentences(text)) else 12.0


_UNANSWERED = re.compile(
    r"^(?:The request of seq (\d+) has no final answer yet$|Request of seq (\d+), not answered yet)"
)


def _superseded_request(bullet: str, span: Span) -> bool:
    """An earlier "no final answer yet" bullet that the span answered or moved past."""
    match = _UNANSWERED.match(bullet)
    if match is None:
        return False
    seq = int(match.group(1) or match.group(2))
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

    The first salient request is quoted only when no previous summary already holds one;
    the ``*_chars`` options bound the request and current-work bullets, in characters.
    """
    add_requests(items, span, has_previous_request, first_request_chars, request_chars)
    add_rules(items, span)
    _concepts(items, span)
    _files(items, span)
    _errors(items, span)
    _pending(items, span)
    _current(items, span, current_work_chars)
    _next(items, span)
    _critical(items, span)
    add_said_facts(items, span)


def read_facts(facts: Facts, span: Span) -> None:
    """The labelled values the span states, in the order they were stated: the user's
    sentences, config literals of the assistant, settings and values tool output printed."""
    said: list[tuple[int, int, str, str]] = [(seq, 1, text, "") for seq, text in span.requests]
    said += [(seq, 2, prose(text), "") for seq, text, _ in span.assistant if text.strip()]
    said += [(seq, 4, key, value) for seq, key, value in span.tool_facts]
    for seq, _command, text in span.tool_outputs:
        said += [(seq, 5, key, value) for key, value in printed(span, seq, text)[0]]
        # A file's "NOTE: the cap is $450" line: read as the assistant's prose is, so that
        # a later statement of the same thing supersedes it (its own bullet shows it).
        said += [(seq, 6, line, "") for line in labelled(span, seq, text)]
    for seq, source, text, value in sorted(said, key=lambda s: (s[0], s[1])):
        if source in (1, 2, 6):
            facts.read(text, float(seq), min(source, 2))
        else:
            facts.state(text, value, float(seq), 4)


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
        items.add(CONCEPTS, f"{code(term)}{suffix}", 36.0 - rank * 0.5)


def _files(items: Items, span: Span) -> None:
    notes = sorted(
        span.files.values(),
        key=lambda f: (-max(OP_WEIGHTS.get(op, 1) for op in f.ops), -f.touches, f.first_seen),
    )[:30]
    for rank, note in enumerate(notes):
        top = max(OP_WEIGHTS.get(op, 1) for op in note.ops)
        items.add(FILES, _file_bullet(note), 40.0 + 3 * top - rank * 0.5)


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
    add_pending_asks(items, span)
    todos: list[str] = []
    for _, text, _ in span.assistant[-6:]:
        todos.extend(s for s in sentences(text) if _TODO.search(s))
    for i, sentence in enumerate(todos[-4:]):
        items.add(PENDING, one_line(sentence, 240), 60.0 + i)


def _current(items: Items, span: Span, current_work_chars: int) -> None:
    last = next(((seq, t) for seq, t, _ in reversed(span.assistant) if t.strip()), None)
    if last is not None:
        seq, text = last
        head = f"Last assistant message (seq {seq}): "
        body = one_line(prose(text), current_work_chars)
        short = excerpt(" ".join(prose(text).split()), 240)
        variants = (head + short,) if short else ()
        items.add(
            CURRENT,
            head + body,
            _current_priority(body),
            variants=(*variants, head + clip(body, 160)),
        )
    recent = [c for c in span.commands if c.text][-3:]
    for i, cmd in enumerate(recent):
        items.add(CURRENT, "Ran " + _command_outcome(cmd), 62.0 + i)


def _next(items: Items, span: Span) -> None:
    """The next step; none when the last request was answered (the section is left out)."""
    if span.answered:
        return
    waiting = [(seq, text) for seq, text in unanswered(span) if not is_trivial(text)]
    last_said = span.assistant[-1][0] if span.assistant else -1
    if waiting and waiting[-1][0] > last_said:  # the user spoke last: answering is next
        seq, text = waiting[-1]  # (what it asks is under Pending Jobs, said once)
        items.add(NEXT, f"Answer the request of seq {seq} (see Pending Jobs)", 82.0)
        relevant_rules(items, text)
        return
    for seq, text, _ in reversed(span.assistant[-3:]):
        if seq < span.last_user_seq:
            break
        candidates = [s for s in sentences(text) if _NEXT.search(s)]
        if candidates:
            items.add(NEXT, one_line(candidates[-1], 300), 80.0)
            relevant_rules(items, candidates[-1])
            return
    recent = [c for c in span.commands if c.text]
    if recent:
        items.add(NEXT, "Continue from the last command: " + _command_outcome(recent[-1]), 76.0)
        relevant_rules(items, recent[-1].text)


def _critical(items: Items, span: Span) -> None:
    decisions: dict[str, tuple[float, int]] = {}
    for seq, text, _ in span.assistant:
        if not says_decision(text):
            continue
        for sentence in sentences(bounded(text)):
            if not says_decision(sentence):
                continue
            salience = score(sentence)
            if salience.decision:
                decisions[one_line(sentence, 240)] = (salience.score, seq)
    top = sorted(decisions.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))[:8]
    for sentence, (value, seq) in sorted(top, key=lambda kv: kv[1][1]):
        item = items.add(CRITICAL, "Decision: " + sentence, 50.0 + min(value, 18.0) + seq * 1e-6)
        if item is not None:
            item.seq = seq
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
            50.0 - rank,
        )
    for i, (seq, text) in enumerate(span.context[-3:]):
        salience = score(text)
        base = 80.0 if salience.is_rule else 35.0
        items.add(CRITICAL, f"Context (seq {seq}): {one_line(text, 240)}", base + i)


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
