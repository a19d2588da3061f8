"""Facts the assistant said and tool output printed: short fact bullets (SPEC §5.2).

An assistant sentence that states a value, a constraint or a status ("Status: canary at 50%
of traffic", "I'll read from db-replica-07.internal") becomes a bullet of Critical Context;
a tool output line that states a value (``region = "eu-west-1"``, ``primary on-call: Priya
Raman``, ``deployed build b49d95bb to staging``) becomes a labelled value or a bullet. Rows
of a log or a listing (lines of one shape, repeated) state nothing. A later statement about
the same subject (a status, a line of the same shape) replaces the earlier one.
"""

from __future__ import annotations

import re

from .anchors import LITERAL_WEIGHTS, typed_literals
from .items import CRITICAL, Items
from .reading import Span
from .requests import statement_priority
from .salience import label_of, overrides, score, substance
from .text import clip, command_label, one_line, prose, sentences

__all__ = [
    "FACT_PRIORITY",
    "add_said_facts",
    "carried_fact_priority",
    "fact_subject",
    "printed",
    "printed_facts",
    "said_priority",
]

FACT_PRIORITY = 72.0
"""A fact bullet's priority (more for a weightier statement)."""

_STATUS = re.compile(r"^\s*(?:status(?: update)?|progress|current state)\s*:", re.I)
_CONSTRAINT = re.compile(
    r"\b(?:hard constraint|constraint|stays? unchanged|must(?: not)?|never|requirement|"
    r"your preference|not(?:ed|ing) the (?:rule|preference)|house rule)\b",
    re.I,
)
_TASK_HINT = re.compile(
    r"\b(?:next step|waiting (?:on|for) you|can you (?:tell|confirm|let)|let me know|i will hold|"
    r"open question|(?:that|this) (?:part|step) is (?:finished|done|complete)|i(?:'ve| have) "
    r"(?:finished|completed))\b",
    re.I,
)
"""The assistant saying where the task stands: a question awaiting the user, a step done."""
_SUBJECT = re.compile(r"^\s*([A-Za-z][\w -]{0,30}?)\s*:")
_STATEMENT_LABEL = re.compile(r"^\s*(?:[-*]\s+)?[A-Z][A-Z ]*[A-Z]:\s+\S+(?:\s+\S+){3,}")
"""An upper-case label opening a sentence of four words or more (``NOTE: the cap is $450``)."""
_LIST_LABELS = frozenset(
    {"DONE", "TODO", "TO DO", "NOTE", "FACT", "INFO", "FYI", "IMPORTANT", "REMEMBER", "RULE",
     "POLICY", "CONSTRAINT", "PREFERENCE", "USER PREFERENCE", "DECISION", "WARNING", "FINDING",
     "ISSUE", "BUG", "RISK", "QUESTION", "OPEN QUESTION", "PS", "NB"}
)  # fmt: skip
"""Labels that head one item of a list (``DONE: …``, ``RULE: …``): every such sentence is an
item of its own, never an update of the one before (``STATUS: …`` or ``branch: …`` is)."""


def _lists(label: str) -> bool:
    return label.strip().upper() in _LIST_LABELS


_SUBJECT_NOISE = re.compile(r"\b(?:update|updated|new|current|latest)\b", re.I)
_KV = re.compile(
    r'^\s*(?:[-*]\s+)?"?(?P<key>[A-Za-z][\w .-]{1,40}?)"?\s*(?::|=)\s*'
    r'"?(?P<value>[^"]{1,60}?)"?\s*,?\s*$'
)
_NAME = re.compile(r"^[A-Z][a-z]+(?: [A-Z][a-z'-]+){1,2}$")
_HEX = re.compile(r"\b[0-9a-f]{6,}\b")
_VALUE_HINT = re.compile(r"\d|\w[.@/]\w")
"""What a line holding a typed value has (a line without it needs a ``key: value`` form)."""
_FACT_HINT = re.compile(r"\d|\w[.@/]\w|\w-\d")
# Lines that list code, a diff, a grep hit or a log record, not a statement of a value.
_NOT_A_STATEMENT = re.compile(
    r"^\s*\d+[\t:]|^\S+:\d+:|^(?:diff --git|index |\+\+\+|---|@@|\$\s)|^\s*\d{4}-\d\d-\d\d[ T]\d|"
    r"==|!=| = |\b(?:return|assert|def|import|class|self)\b|[{};]\s*$"
)
_DIFF = re.compile(r"^(?:diff --git |@@ -\d)", re.M)
_MAX_PRINTED = 4
_SENTENCES_READ = 8
"""An assistant message states its facts early; a long one is an explanation."""
_LINES_READ = 40
"""Candidate lines of one tool result read at most (a long one is a listing)."""
_MAX_SAID = 10


def _shape(line: str) -> str:
    """A line with its values and words replaced: rows of one table share it."""
    line = _HEX.sub("#", line)
    line = re.sub(r"\d+", "#", line)
    return " ".join(re.sub(r"[A-Za-z_]+", "w", line).split())


def _weight(text: str) -> int:
    """The weight of the weightiest typed literal of ``text`` (a name counts 4)."""
    weights = [LITERAL_WEIGHTS[lit.type] for lit in typed_literals(text)]
    return max(weights, default=4 if _NAME.match(text.strip()) else 0)


def printed_facts(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The ``(key, value)`` lines and the other value lines a tool printed, weightiest first.

    Lines of a shape that repeats (log lines, listing rows) and lines with several weighty
    values are left out.
    """
    if _DIFF.search(text):
        return [], []  # a diff shows code, old and new
    lines = [line for line in text.splitlines()[:300] if 4 < len(line.strip()) <= 120]
    shaped = [_shape(line) for line in lines]
    shapes: dict[str, int] = {}
    for shape in shaped:
        shapes[shape] = shapes.get(shape, 0) + 1
    pairs: list[tuple[int, int, str, str]] = []
    others: list[tuple[int, int, str]] = []
    read = 0
    for i, line in enumerate(lines):
        if shapes[shaped[i]] >= 3 or not (_VALUE_HINT.search(line) or _KV.match(line)):
            continue
        read += 1
        if read > _LINES_READ:
            break
        weighty = [lit for lit in typed_literals(line) if LITERAL_WEIGHTS[lit.type] >= 4]
        if len(weighty) > 1:
            continue
        kv = _KV.match(line)
        if kv is not None and _STATEMENT_LABEL.match(line):
            continue  # "REMEMBER: the production URL is …": a labelled statement, not a pair
        if kv is not None:
            value = kv.group("value").strip()
            weight = _weight(value)
            if weight >= 4:
                pairs.append((-weight, i, kv.group("key").strip(), value))
            continue
        if weighty and not _NOT_A_STATEMENT.search(line):
            others.append((-LITERAL_WEIGHTS[weighty[0].type], i, line.strip().rstrip(".")))
    pairs.sort()
    others.sort()
    return (
        [(key, value) for _, _, key, value in pairs[:_MAX_PRINTED]],
        [line for _, _, line in others[:2]],
    )


def printed(span: Span, seq: int, text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """:func:`printed_facts` of the tool result of ``seq``, read once per span."""
    found = span.printed.get(seq)
    if found is None:
        found = span.printed[seq] = printed_facts(text)
    return found


def _said(text: str) -> list[tuple[str, float, str | None]]:
    """The sentences of an assistant text that state a fact: (sentence, weight, subject)."""
    out: list[tuple[str, float, str | None]] = []
    for sentence in sentences(prose(text))[:_SENTENCES_READ]:
        hint = _TASK_HINT.search(sentence)
        if (
            hint is not None
            and not _labelled(sentence)
            and not _CONTENT.search(sentence[: hint.start()] + sentence[hint.end() :])
        ):
            continue  # "That part is done.": where the task stands, but not what it did
        marked = _labelled(sentence) or overrides(sentence) or hint is not None
        if len(sentence) > 400 or not (
            marked
            or _FACT_HINT.search(sentence)
            or _STATUS.match(sentence)
            or _CONSTRAINT.search(sentence)
        ):
            continue  # no label, value, status or constraint
        # A command quoted states nothing.
        salience = score(re.sub(r"`[^`]*`", "", sentence) if "`" in sentence else sentence)
        if salience.trivial or salience.values >= 3:
            continue
        given = substance(salience)
        status = _STATUS.match(sentence) is not None
        constraint = _CONSTRAINT.search(sentence) is not None
        changed = salience.update and re.search(r"\d", sentence) is not None
        if not (marked or status or constraint or changed or salience.values):
            continue
        subject = None
        if status:
            subject = "status"
        elif (m := _SUBJECT.match(sentence)) is not None and not _lists(m.group(1)):
            subject = _SUBJECT_NOISE.sub("", m.group(1)).strip().lower() or None
        weight = min(given, 10.0) + (3.0 if status else 0.0) + (2.0 if constraint else 0.0)
        out.append((sentence, weight, subject))
    return out


_CONTENT = re.compile(
    r"\b(?!(?:i|we|it|that|this|the|a|an|and|so|now|then|here|there|too|also|all|just|ok|okay|"
    r"yes|is|are|was|has|have|been|finished|done|complete|completed|thanks|great|good)\b)"
    r"[A-Za-z][\w/.-]+",
    re.I,
)
"""A word that says something beyond where the task stands."""


def said_priority(sentence: str, weight: float) -> float:
    """The priority of a fact the assistant said: a labelled statement or a constraint ranks
    as the user's statement would (a constraint found in the code binds like one stated)."""
    priority = FACT_PRIORITY + 2.0 + 0.4 * weight
    if _labelled(sentence) or _CONSTRAINT.search(sentence):
        priority = max(priority, statement_priority(sentence) or 0.0)
    return priority


def carried_fact_priority(bullet: str) -> float:
    """A fact bullet read back from a previous summary ranks as when it was first kept."""
    match = _FACT_BULLET.match(bullet)
    if match is None:
        return FACT_PRIORITY
    body = match.group(2)
    if match.group(1) != "Assistant":
        return statement_priority(body) or FACT_PRIORITY
    said = _said(body)
    return said_priority(said[0][0], said[0][1]) if said else FACT_PRIORITY


def _labelled(sentence: str) -> bool:
    """Whether a sentence opens with an upper-case label ("NOTE: …", "GOAL STATE: …")."""
    label = label_of(sentence)
    return label is not None and label.isupper()


def labelled(span: Span, seq: int, text: str) -> list[str]:
    """:func:`labelled_lines` of the tool result of ``seq``, read once per span."""
    found = span.labelled.get(seq)
    if found is None:
        found = span.labelled[seq] = labelled_lines(text)
    return found


def labelled_lines(text: str) -> list[str]:
    """The lines of a tool output that open with an upper-case label (``TODO: …``) or tick a
    box (``[x] …``, as ``Done: …``): notes a file states, unless the output is a listing of
    them (more than a few)."""
    found = []
    for line in text.splitlines()[:_LINES_READ]:
        line = line.strip().lstrip("-*# ").strip()
        label = label_of(line) if 8 < len(line) <= 200 else None
        if label is not None and label.isupper() and not score(line).trivial:
            found.append(line)
        elif _CHECKED.match(line) and len(line) <= 200:
            found.append("Done: " + _CHECKED.sub("", line, count=1))  # "[x] pinned the client"
    return found if len(found) <= _MAX_PRINTED else []


_CHECKED = re.compile(r"^\[[xX✓✔]\]\s+(?=\S{2})")
"""A ticked box of a checklist a file keeps (``[x] pinned the HTTP client``): a step done."""


_FACT_BULLET = re.compile(r"^(Assistant|Printed by `[^`]*`) \(seq \d+\): (.*)$", re.S)


def fact_subject(bullet: str) -> str | None:
    """What a fact bullet (of :func:`add_said_facts`) is about; None for another bullet."""
    match = _FACT_BULLET.match(bullet)
    if match is None:
        return None
    if match.group(1) != "Assistant":
        return "\0printed\0" + _shape(match.group(2))
    for sentence, _, subject in _said(match.group(2)) or [(match.group(2), 0.0, None)]:
        return "\0said\0" + (subject or sentence)
    return None


def add_said_facts(items: Items, span: Span) -> None:
    """Critical Context bullets of the facts the assistant said and tools printed; a later
    statement about the same subject replaces the earlier one."""
    found: dict[str, tuple[float, int, str]] = {}
    for seq, text, _ in span.assistant:
        for sentence, weight, subject in _said(text):
            key = "\0said\0" + (subject or sentence)
            bullet = f"Assistant (seq {seq}): {one_line(sentence, 240)}"
            found.pop(key, None)
            found[key] = (said_priority(sentence, weight), seq, bullet)
    for seq, command, text in span.tool_outputs:
        _, lines = printed(span, seq, text) if command else ((), [])
        label = command_label(command, 60) if command else "a tool"
        for line in labelled(span, seq, text):  # a file's "TODO: …", "RULE: …" lines
            key = "\0printed\0" + line
            found.pop(key, None)
            priority = statement_priority(line) or FACT_PRIORITY
            found[key] = (priority, seq, f"Printed by `{label}` (seq {seq}): {clip(line, 160)}")
        for line in lines:
            key = "\0printed\0" + _shape(line)
            found.pop(key, None)
            found[key] = (
                FACT_PRIORITY,
                seq,
                f"Printed by `{label}` (seq {seq}): {clip(line, 160)}",
            )
    for item in list(items.items):  # a carried fact the span states anew
        if item.carried and (subject := fact_subject(item.text)) is not None and subject in found:
            items.remove(item)
    ranked = sorted(found.values(), key=lambda v: (-v[0], -v[1]))[:_MAX_SAID]
    said = {bullet.split("): ", 1)[1] for _, _, bullet in ranked}
    for item in list(items.items):  # a decision said as a fact: one bullet
        if item.section == CRITICAL and item.text.removeprefix("Decision: ") in said:
            items.remove(item)
    for priority, seq, bullet in sorted(ranked, key=lambda v: v[1]):
        items.add(CRITICAL, bullet, priority + seq * 1e-6)
