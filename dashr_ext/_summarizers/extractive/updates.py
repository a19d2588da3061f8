"""Statements a later one superseded: only current values and plans are shown (SPEC §5.2).

The user's statement bullets (rules, goals, labelled statements, decisions) are compared in
the order they were said. A later statement replaces an earlier one when it says it
updates something ("update:", "instead", "actually", "no longer", "change of plan", "scratch
that", …) and is about the same subject: it shares the subject's words (with the same kind
of value, or as the same kind of statement), or the same label. Two statements that merely
look alike stay apart when their subjects are qualified differently ("the project budget"
and "the travel budget", "the staging URL" and "the production URL"). A plain change of plan
("scratch that, let's go with Redis") replaces the latest decision before it.

An update that names the kind of statement it replaces ("change of plan on that rule",
"forget the earlier task") replaces the one statement of that kind, or the one said just
before it; a labelled goal ("GOAL STATE: …") replaces the task. A statement a previous
checklist carried without its head takes part as said before the span.

The superseded statement leaves the summary, with the labelled values it alone stated and
the sentences quoting it in other bullets; with ``show_superseded`` its replacement notes
it as ``(was: …)``. It stays recallable from the archive. Without it, :func:`purge` leaves
no replaced value in any bullet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .anchors import typed_literals
from .items import CRITICAL, REQUEST, Item, Items
from .salience import is_filler, is_generic_label, label_of, reads_as_request, score
from .text import clip, sentences, words

__all__ = ["purge", "supersede"]

_STATEMENT = re.compile(r"^(User (?:rule|goal|decision|note)) \(seq (\d+)\): (.*)$", re.S)
# Other bullets that state one thing: the assistant's facts, a file's labelled lines, and a
# request (a short one is all one statement; of a longer one only its values are updated,
# see .facts).
_OTHER = re.compile(
    r"^(Assistant|Printed by `[^`\n]*`|(?:Later )?[Rr]equest|Original request) \(seq (\d+)\)"
    r"(?:, verbatim)?:\s*(.*)$",
    re.S,
)
_PLAN_CHANGE = re.compile(
    r"\b(?:scratch that|change of plans?|on second thought|never ?mind|forget (?:that|what i "
    r"said)|new plan|let's not)\b",
    re.I,
)
_KIND_REF = re.compile(
    r"\b(?:that|this|th[ei]s? (?:earlier|previous|old|last|first|original)|my (?:earlier|"
    r"previous|last|first|original)|earlier|previous)\s+(rule|constraint|task|goal|plan|"
    r"preference|decision)s?\b|\b(rule|constraint|task|goal|preference|decision)s? on that\b"
    r"|\bwhat i (?P<said>said|asked|wanted) (?:before|earlier|previously)\b"
    r"|\bthe (?P<kind>rule|constraint|task|goal|plan|preference|decision)s? (?:about|on|for|"
    r"regarding) (?P<subject>[^:;,.]{2,60})",
    re.I,
)
"""An update that names the kind of statement it replaces ("change of plan on that rule",
"forget the earlier task"): without shared subject words it replaces the latest of that kind."""
_KINDS_OF_REF = {
    "rule": ("User rule",),
    "constraint": ("User rule",),
    "preference": ("User rule", "User note"),
    "task": ("Original request", "Request", "Later request", "request", "User goal"),
    "goal": ("User goal", "Original request", "Request", "Later request", "request"),
    "plan": ("User decision", "User goal"),
    "decision": ("User decision",),
}
_STOP = words(
    "the a an and or but of to in on at for with from by about into over under this that these "
    "those it its is are was were be been being will would should could can may might must "
    "shall do does did done not no yes now then than also just only very really quite please "
    "update updated quick small correction change plan instead actually longer let's lets use "
    "using go going with switch switching keep keeping make sure all any every each our your "
    "my their we you they i me us them there here what which who when where how scratch "
    "rather prefer always never note fact rule important user goal state new old current "
    "later earlier first next last one two three four five six seven eight nine ten hundred "
    "thousand set stay stays remain remains become becomes start starts today tomorrow "
    "yesterday tonight morning afternoon evening week weeks weekend month months quarter year "
    "years day days hour hours minute minutes time ago soon"
)
_TASK_LABELS = frozenset(
    {"NEXT", "NEXT STEP", "NEXT STEPS", "CURRENT TASK", "TASK", "STATUS", "PROGRESS", "DONE SO FAR",
     "STEPS DONE", "STEP DONE", "COMPLETED", "REMAINING", "BLOCKED", "BLOCKED ON", "WAITING ON"}
)  # fmt: skip
_ENVIRONMENTS = words("staging stage production prod dev development test testing qa local")
_VALUE_CLASSES = {
    "money": re.compile(r"[$€£¥]|\b(?:dollars?|euros?|pounds?|usd|eur|gbp|cents?)\b", re.I),
    "time": re.compile(
        r"\b\d+\s*(?:ms|s|sec|secs|seconds?|minutes?|mins?|hours?|hrs?|days?|weeks?)\b|"
        r"\b(?:seconds?|minutes?|hours?|days?|weeks?)\b",
        re.I,
    ),
    "date": re.compile(
        r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|"
        r"april|may|june|july|august|september|october|november|december|\d{4}-\d\d-\d\d)\b",
        re.I,
    ),
    "url": re.compile(r"https?://|\b[\w-]+\.(?:com|org|net|io|internal|local|dev)\b", re.I),
    "percent": re.compile(r"%|\bpercent\b", re.I),
    "version": re.compile(r"\bv?\d+\.\d+(?:\.\d+)?\b"),
}


@dataclass
class _Said:
    seq: int
    item: Item
    body: str
    kind: str


def _stems(text: str) -> list[str]:
    """The subject words of ``text`` (cut to five letters), its dotted values (hosts, URLs,
    versions) left out: two hosts of one domain are not one subject."""
    prose = re.sub(r"\S+\.\w\S*", " ", text.lower())
    return [w[:5] for w in re.findall(r"[a-z][a-z0-9_-]+", prose) if w not in _STOP]


def _classes(text: str) -> set[str]:
    return {name for name, pattern in _VALUE_CLASSES.items() if pattern.search(text)}


def _qualifiers(text: str, shared: set[str]) -> set[str]:
    """The words that qualify a shared subject word ("travel" of "the travel budget")."""
    out = set()
    for match in re.finditer(r"\b(?=([a-z][a-z0-9_-]+)[ \t]+([a-z][a-z0-9_-]+))", text.lower()):
        before, word = match.group(1), match.group(2)
        if word[:5] in shared and before not in _STOP and before[:5] not in shared:
            out.add(before)
    return out


def _distinct(old: str, new: str, shared: set[str]) -> bool:
    """Two statements about differently qualified things (project vs travel budget)."""
    envs_old = {w for w in re.findall(r"[a-z]+", old.lower()) if w in _ENVIRONMENTS}
    envs_new = {w for w in re.findall(r"[a-z]+", new.lower()) if w in _ENVIRONMENTS}
    if envs_old and envs_new and not envs_old & envs_new:
        return True
    q_old, q_new = _qualifiers(old, shared), _qualifiers(new, shared)
    return bool(q_old and q_new and not q_old & q_new)


def _replaces(old: _Said, new: _Said, override: bool) -> bool:
    label_old, label_new = label_of(old.body), label_of(new.body)
    same_label = (
        label_old is not None and label_old == label_new and not is_generic_label(label_old)
    )
    shared = set(_stems(old.body)) & set(_stems(new.body))
    if not shared and not same_label:
        return False
    if _distinct(old.body, new.body, shared):
        return False
    same_value = bool(_classes(old.body) & _classes(new.body))
    if same_label:
        return override or same_value or label_old in _TASK_LABELS
    if not override:
        # Two decisions on one subject ("Kafka for the feature flags", later "DuckDB for
        # the feature flags"): the later one is the decision now.
        return len(shared) >= 2 and _decides(old.body) and _decides(new.body)

    return len(shared) >= 2 or same_value or old.kind == new.kind


def _decides(body: str) -> bool:
    """A statement of a decision: a decision cue or label ("DECISION:", "ADR:", "we're going
    with …"), not a rule."""
    salience = score(body)
    label = label_of(body) or ""
    return not salience.is_rule and (
        salience.decision or bool(re.match(r"(?:DECI[DS]\w*|ADR|CHOICE|CHOSEN)\b", label))
    )


def _kind_of(body: str) -> str:
    """The kind of a statement read back without its head (a checklist line)."""
    salience = score(body)
    if salience.is_rule:
        return "User rule"
    if salience.decision or salience.override:
        return "User decision"
    return "User goal" if salience.goal else "User note"


def _said(items: Items) -> list[_Said]:
    """The statements that may be replaced, in the order they were said: the user's
    statement bullets, one-statement requests and facts, and the statements a previous
    checklist carried without a head (as said before everything of the span)."""
    said: list[_Said] = []
    for item in items.items:
        if item.section not in (CRITICAL, REQUEST) or item.anchor_kind or item.label:
            continue
        match = _STATEMENT.match(item.text)
        if match:
            if item.section == CRITICAL:
                said.append(_Said(int(match.group(2)), item, match.group(3), match.group(1)))
            continue
        other = _OTHER.match(item.text)
        if item.seq is not None and item.text.startswith(_DECISION):
            said.append(_Said(item.seq, item, item.text[len(_DECISION) :], "Assistant"))
        elif other:
            body = re.sub(r"^\s*>[ ]?", "", other.group(3), flags=re.M).strip()
            if len(sentences(body, min_chars=8)) == 1:
                said.append(_Said(int(other.group(2)), item, body, other.group(1)))
        elif item.carried and item.section == CRITICAL and "(seq " not in item.text[:60]:
            said.append(_Said(-1, item, item.text, _kind_of(item.text)))
    return said


_DECISION = "Decision: "
_INSTEAD_OF = re.compile(r"\binstead of (?P<what>[^,;:.]{3,60})", re.I)
"""An update that names what it replaces ("instead of pytest over unittest, …")."""
_TASK_SWITCH = re.compile(
    r"^(?:\w+[,.:!]?\s+){0,2}?(?:let's instead|instead,? let's|let's now|let's switch to|"
    r"let's move on to)\s+(?!use\b|go\b|keep\b|stick\b|stay\b|try\b)[a-z]+\b",
    re.I,
)
"""A switch of task ("let's instead split the thumbnail worker"), not of a choice ("let's
instead go with Redis", "let's instead use …": decisions, settled by their subject)."""


def _named_by_instead(new: _Said, earlier: list[_Said]) -> _Said | None:
    """The latest earlier statement holding every subject word of what ``new`` says it is
    "instead of"."""
    found = _INSTEAD_OF.search(new.body)
    if found is None:
        return None
    what = set(_stems(found.group("what")))
    if not what:
        return None
    return next((s for s in reversed(earlier) if what <= set(_stems(s.body))), None)


_NEXT_REF = re.compile(r"\b(?:next step|next,? we|then,? we)\b", re.I)
_NEXT_LABELS = frozenset({"NEXT", "NEXT STEP", "NEXT STEPS"})
_NEXT_BODY = re.compile(r"^(?:\w+[.,:]\s+)?(?:the next step is|next,? we|then,? we)\b", re.I)


def _says_next(body: str) -> bool:
    """A statement of the next step: labelled ``NEXT``/``NEXT STEP``, or saying it is."""
    return (label_of(body) or "") in _NEXT_LABELS or _NEXT_BODY.match(body) is not None


def _by_kind(new: _Said, earlier: list[_Said]) -> _Said | None:
    """The latest earlier statement of the kind ``new`` names ("that rule")."""
    ref = _KIND_REF.search(new.body)
    label = label_of(new.body) or ""
    if _NEXT_REF.search(new.body) and label not in _NEXT_LABELS:
        # "Scratch that, next we backfill the table", "switch the next step: …": the one
        # next step said before (an item labelled NEXT, or "the next step is …").
        steps = [s for s in earlier if _says_next(s.body)]
        if steps:
            return steps[-1]
    kinds: tuple[str, ...]
    switch = False
    if _NEXT_REF.search(new.body) and label not in _NEXT_LABELS:
        # No next step said before: "scratch that, next we …" is the task now.
        kinds, switch = _KINDS_OF_REF["task"], True
    elif ref is not None and ref.group("said"):  # "no longer what I said before": its kind
        kinds = (new.kind, _kind_of(new.body))
    elif ref is not None:
        kinds = _KINDS_OF_REF[(ref.group(1) or ref.group(2) or ref.group("kind")).lower()]
    elif re.search(r"\b(?:GOAL|OBJECTIVE|TASK)\b", label) and new.item.section == CRITICAL:
        kinds = _KINDS_OF_REF["task"]  # "GOAL STATE: …" says what the task is now
    elif _TASK_SWITCH.match(new.body) and not _holds_value(new.body):
        kinds, switch = _KINDS_OF_REF["task"], True  # "let's instead split …": the task now
    else:
        return None
    labelled_task = "Original request" in kinds  # "CURRENT TASK: …" is the task too
    pool = [
        s
        for s in earlier
        if (
            s.kind in kinds
            or (labelled_task and re.search(r"\b(?:TASK|GOAL)\b", label_of(s.body) or ""))
        )
        and (s.item.section != REQUEST or s.kind == "Original request" or reads_as_request(s.body))
        and not (labelled_task and _not_a_task(s.body))
    ]  # a later message is a task when it asks for something
    if ref is not None and ref.group("subject"):
        # "the rule about a branch": the one of that kind about it, whoever said it (a rule
        # a file printed is one too); none about it: no target.
        subject = set(_stems(ref.group("subject")))
        about = [s for s in pool if subject & set(_stems(s.body))]
        if not about and ref.group("kind").lower() in ("rule", "constraint"):
            about = [s for s in earlier if subject & set(_stems(s.body)) and score(s.body).is_rule]
        return about[-1] if about else None
    if not pool:
        return None
    if len(pool) == 1 or pool[-1] is earlier[-1] or switch:
        return pool[-1]
    return None  # "that rule" among several, not the one just said: which one is unclear


def _states_a_value(said: _Said) -> bool:
    """A one-statement request that asks for nothing but states a value: a fact, which a
    later update of that value replaces like any other."""
    return (
        said.item.section == REQUEST
        and said.kind != "Original request"
        and _holds_value(said.body)
        and not reads_as_request(said.body)
    )


def _not_a_task(body: str) -> bool:
    """A request that sets a rule or states a value ("do not edit vendor/", "use $9,525 as
    the budget"): not the task a task switch replaces."""
    return score(body).is_rule or _holds_value(body)


def supersede(items: Items, show: bool) -> set[str]:
    """Drop the user's statements a later one replaced (see the module docstring).

    With ``show`` the replacement keeps ``(was: …)``. Returns the values (literal texts)
    superseded statements held that no current statement says, for no line to show.
    """
    said = _said(items)
    said.sort(key=lambda s: (s.seq, s.item.order))
    gone: list[tuple[_Said, _Said]] = []
    dropped: set[int] = set()
    for j, new in enumerate(said):
        if new.item.carried:
            continue  # settled by the pass that kept it
        salience = score(new.body)
        earlier = [s for s in said[:j] if id(s.item) not in dropped and s.seq != new.seq]
        target = _named_by_instead(new, earlier) or next(
            (
                s
                for s in reversed(earlier)
                if (s.item.section == CRITICAL or _states_a_value(s))
                and _replaces(s, new, salience.override)
            ),
            None,
        )  # a request is replaced only as the task a later statement names (see _by_kind),
        # or when all it did was state a value ("heads up, the budget: $5,700")
        if target is None and (
            salience.override or _PLAN_CHANGE.search(new.body) or label_of(new.body)
        ):
            target = _by_kind(new, earlier)
        if (
            target is None
            and new.kind.startswith("User")
            and _PLAN_CHANGE.search(new.body)
            and not _KIND_REF.search(new.body)
            and not _holds_value(new.body)
        ):
            # "Scratch that, let's go with Redis": the user's latest decision of a plan (a
            # value's update is the facts' to settle; a named kind was looked for above).
            target = next(
                (
                    s
                    for s in reversed(earlier)
                    if s.kind == "User decision" and not _holds_value(s.body)
                ),
                None,
            )
        if target is not None:
            dropped.add(id(target.item))
            gone.append((target, new))
    if not gone:
        return set()
    for old, new in gone:
        items.remove(old.item)
        if show:
            note = f" (was: {clip(old.body, 100)})"
            new.item.text += note
            new.item.variants = tuple(v + note for v in new.item.variants)
    return _forget(items, [old.body for old, _ in gone], {id(new.item) for _, new in gone})


def _forget(items: Items, bodies: list[str], news: set[int]) -> set[str]:
    """Take superseded statements out of the other bullets and the labelled values; the
    values the superseded statements held that no current statement says."""
    old_sentences = {s for body in bodies for s in sentences(body, min_chars=8)}
    kept_text = " ".join(i.text for i in items.items if i.label is None and i.anchor_kind is None)
    stale: set[str] = set()
    for item in list(items.items):
        if item.label is not None and item.value is not None:
            if any(item.value in body for body in bodies) and item.value not in kept_text:
                stale.add(item.value)
                items.remove(item)
        elif item.section in (REQUEST, CRITICAL) and item.anchor_kind is None:
            if id(item) in news:
                continue  # the replacement may quote what it replaces
            text = item.text
            for sentence in old_sentences:
                if sentence in text:
                    text = re.sub(r"(?<=\S)  +", " ", text.replace(sentence, ""))
            if text != item.text:
                if not re.search(r"[A-Za-z]{3}", _body(text)):
                    items.remove(item)
                    continue
                item.text = text
                item.variants = tuple(v for v in item.variants if not _holds(v, old_sentences))
    current = " ".join(i.text for i in items.items if i.anchor_kind is None)
    for body in bodies:
        stale.update(lit.value for lit in typed_literals(body) if lit.value not in current)
    return stale


def _holds_value(body: str) -> bool:
    """Whether a statement states a value (a number with its unit, a date, an address …)."""
    return any(lit.type not in ("identifier", "config", "path") for lit in typed_literals(body))


def _body(text: str) -> str:
    """A bullet's text after its head (``Task (seq 3):``), quote marks and filler left out."""
    body = text.split(":", 1)[-1].replace(">", "") if re.match(r"^[^:]{0,60}\(seq", text) else text
    return " ".join(w for w in body.split() if not is_filler(w.strip(".,!;")))


def _holds(text: str, old: set[str]) -> bool:
    return any(s in text for s in old)


def purge(items: Items, stale: set[str]) -> None:
    """No bullet shows a superseded value: the sentences quoting one leave the bullet, and
    a bullet left with nothing else is dropped (the labelled values and the keyword line
    leave them out already)."""
    if not stale:
        return
    for item in list(items.items):
        if item.anchor_kind is not None or item.label is not None:
            continue
        if not any(_quotes(item.text, old) for old in stale):
            continue
        text = _without(item.text, stale)
        if text is None or not re.search(r"[A-Za-z]{3}", _body(text)):
            items.remove(item)
            continue
        item.text = text
        item.variants = tuple(v for v in (_without(v, stale) for v in item.variants) if v)


def _without(text: str, stale: set[str]) -> str | None:
    """``text`` less its sentences that hold a stale value, its head (``Task (seq 3):``)
    and line breaks kept (None when nothing is left after the head)."""
    head = re.match(r"^[^\n:]{0,80}\(seq \d+\)[^\n:]*:[ \t]*", text)
    start = head.end() if head else 0
    lines = []
    for line in text[start:].split("\n"):
        quote = re.match(r"^\s*>?[ ]?", line)
        lead = quote.group(0) if quote else ""
        parts = re.split(r"(?<=[.;!?])\s+", line[len(lead) :])
        kept = [p for p in parts if not any(_quotes(p, old) for old in stale)]
        if kept and " ".join(kept).strip():
            lines.append(lead + " ".join(kept))
        elif not parts or not "".join(parts).strip():
            lines.append(line)
    rest = "\n".join(lines)
    return text[:start] + rest if rest.strip(" >\n") else None


def _quotes(text: str, value: str) -> bool:
    """Whether ``text`` shows ``value`` as a whole (not inside a longer word or number)."""
    at = text.find(value)
    while at >= 0:
        before = text[at - 1] if at else " "
        after = text[at + len(value)] if at + len(value) < len(text) else " "
        if not (before.isalnum() or after.isalnum()):
            return True
        at = text.find(value, at + 1)
    return False
