"""Small-scale survival sessions: short agent sessions with planted facts, and their scoring.

:func:`make_session` builds, from a seed alone, one OpenAI-format agent session of a size
class (:data:`SIZES`): **small** (100-600 tokens) or **medium** (2k-8k characters). Its
facts (:class:`Value`) are of five kinds (:data:`KINDS`): rules, preferences, values (URLs,
money, numbers with units, dates, ids, versions, paths, hosts), task state (current task,
steps done, next step, open question) and decisions with their reason. Each is stated by
the user, by the assistant or inside a tool's output, either **labelled** (an upper-case
label and a colon: ``RULE:``, ``GOAL STATE:``, ``TODO:`` ...) or as a plain sentence, in a
wording drawn from several template families per kind. Around them:

* **updates**: some values are later superseded, in the same wording pattern or
  paraphrased ("scratch that, ...", "switch to ...", "no longer ..."); an update never
  repeats the old value;
* **near-duplicates**: two distinct items of one family (project budget and travel
  budget, staging and production URL, two deadlines) that must both survive;
* an **exact repeat**: one statement recorded verbatim at two seqs (it must be kept once);
* **filler** between and after the facts (acknowledgements, small talk, "Random: ...",
  status chatter, tool output noise) and a fact-free last exchange, so that ranking by
  position loses; the first user message is chit-chat or the real request.

Each session carries its ground truth (:class:`Truth`) and four **segments**
(:class:`Segment`): more conversation to append between passes, each with the ground truth
that holds after it. Every planted string occurs in the messages only where it is stated
(:func:`occurrences` checks it), an old value only before its update, and no fact in a
last exchange.

:func:`score` is the scoring rule (documented there); the pass protocol that drives
``Dashr`` is ``small_protocol``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "KINDS",
    "SEGMENTS",
    "SIZES",
    "Score",
    "Segment",
    "SmallSession",
    "Truth",
    "Value",
    "checklist",
    "make_session",
    "message_text",
    "normalize",
    "occurrences",
    "request_text",
    "score",
    "sessions",
]

KINDS = ("rule", "preference", "value", "task", "decision")
SIZES = {"small": (100, 600), "medium": (2000, 8000)}
"""Size classes: small in tokens (the meter's), medium in characters of request text."""
SEGMENTS = 4
"""Segments appended in the same-session mode: passes 2 to 5."""


# --------------------------------------------------------------------------- ground truth


@dataclass(frozen=True)
class Value:
    """One string that must be in the request while it is current.

    ``text`` is unique in its session: it occurs in the messages only where it is stated.
    """

    key: str
    text: str
    kind: str
    labelled: bool
    source: str
    """``user``, ``assistant`` or ``tool``: who states it."""
    rule: bool = False


@dataclass(frozen=True)
class Truth:
    """What holds after a stretch of conversation."""

    current: tuple[Value, ...]
    """Must be present (verbatim, see :func:`score`)."""
    superseded: tuple[str, ...]
    """Old values an update replaced: must not be visible, not even as ``(was ...)``."""
    repeated: tuple[str, ...]
    """Statements recorded verbatim at two seqs: each must be kept at most once."""

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(v.text for v in self.current if v.rule)


@dataclass(frozen=True)
class Segment:
    """Conversation appended after a pass, and the ground truth once it is recorded."""

    messages: tuple[dict[str, Any], ...]
    truth: Truth


@dataclass(frozen=True)
class SmallSession:
    name: str
    size: str
    seed: int
    system: str
    messages: tuple[dict[str, Any], ...]
    """The conversation after the system prompt; its last two messages are the last
    exchange (a user message and the reply), which states no fact."""
    truth: Truth
    segments: tuple[Segment, ...]


# --------------------------------------------------------------------------- text helpers


def normalize(text: str) -> str:
    """Case folded, whitespace runs as one space: how presence is read."""
    return " ".join(text.casefold().split())


def message_text(message: Mapping[str, Any]) -> str:
    """A message's content and its tool calls' names and arguments, as the model reads them."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        parts.append(f"{call['function']['name']} {call['function']['arguments']}")
    return "\n".join(parts)


def request_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The request-visible text of ``messages`` (system prompt included when present)."""
    return "\n".join(message_text(m) for m in messages)


def occurrences(messages: Sequence[Mapping[str, Any]], text: str) -> list[int]:
    """Indices of the messages whose text holds ``text`` (as :func:`score` reads it)."""
    needle = normalize(text)
    return [i for i, m in enumerate(messages) if needle in normalize(message_text(m))]


def checklist(truth: Truth) -> str:
    """The plainest summary that keeps every current value: the values, one per line."""
    return "\n".join(v.text for v in truth.current)


# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Score:
    """One request scored against a :class:`Truth` (see :func:`score`)."""

    present: dict[str, bool]
    """Current value key → present."""
    stale: tuple[str, ...]
    """Superseded values visible."""
    duplicates: int
    labelled: tuple[int, int]
    """Labelled current values present, of all labelled ones."""
    rules: tuple[int, int]
    """Rule values present, of all rules."""

    @property
    def share(self) -> float:
        return sum(self.present.values()) / len(self.present) if self.present else 1.0


def score(text: str, truth: Truth) -> Score:
    """Score a request's text against ``truth``.

    * present: the value's text occurs in the request text, case folded, whitespace runs
      read as one space (the check is a substring check: values are unique strings);
    * stale: a superseded value occurs anywhere, a ``(was ...)`` note included; the
      generator states old values only before the last compacted point, never in a kept
      tail, so any occurrence is the summary's;
    * duplicates: for each current value and each repeated statement, its occurrences
      beyond the first (the same fact stated twice);
    * labelled / rules: the present values among the labelled ones, and among the rules.
    """
    t = normalize(text)
    present = {v.key: normalize(v.text) in t for v in truth.current}
    stale = tuple(s for s in truth.superseded if normalize(s) in t)
    counted = {normalize(v.text) for v in truth.current} | {normalize(r) for r in truth.repeated}
    duplicates = sum(max(0, t.count(s) - 1) for s in counted)
    labelled = [present[v.key] for v in truth.current if v.labelled]
    rules = [present[v.key] for v in truth.current if v.rule]
    return Score(
        present=present,
        stale=stale,
        duplicates=duplicates,
        labelled=(sum(labelled), len(labelled)),
        rules=(sum(rules), len(rules)),
    )


# --------------------------------------------------------------------------- fact catalog
#
# Each value subject: key, noun, paraphrase aliases (naming it without its noun), and a
# value maker. Subjects of one family are near-duplicates of each other.

Maker = Callable[[random.Random], str]


def _money(r: random.Random) -> str:
    return f"${r.randint(11, 98) * 100 + r.choice((0, 25, 50, 75)):,}"


def _tok(r: random.Random, n: int = 4) -> str:
    return "".join(r.choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(n))


def _url(kind: str) -> Maker:
    return lambda r: f"https://{kind}-{_tok(r)}.{r.choice(('acme.dev', 'corp.example', 'qx.io'))}"


def _date(r: random.Random) -> str:
    months = ("March", "April", "May", "June", "July", "August", "September", "October")
    month, day = r.randrange(len(months)), r.randint(10, 28)
    return r.choice((f"2027-{month + 3:02d}-{day}", f"{months[month]} {day}, 2027"))


def _unit(low: int, high: int, unit: str) -> Maker:
    return lambda r: f"{r.randint(low, high)} {unit}"


def _ticket(r: random.Random) -> str:
    return f"{r.choice(('OPS', 'PAY', 'INFRA', 'DATA'))}-{r.randint(1000, 9899)}"


def _version(r: random.Random) -> str:
    return f"v{r.randint(2, 9)}.{r.randint(11, 39)}.{r.randint(1, 9)}"


def _path(kind: str) -> Maker:
    return lambda r: f"/srv/{_tok(r, 5)}/{kind}"


def _host(kind: str) -> Maker:
    return lambda r: f"{kind}-{r.randint(11, 89)}.{_tok(r, 3)}.internal"


_SUBJECTS: tuple[tuple[str, str, tuple[str, ...], Maker], ...] = (
    ("budget.project", "project budget", ("project spend", "the project's money"), _money),
    ("budget.travel", "travel budget", ("travel spend", "the travel allowance"), _money),
    ("budget.cloud", "monthly cloud cap", ("cloud spend", "the cloud bill"), _money),
    ("url.staging", "staging URL", ("the staging link", "staging"), _url("stg")),
    ("url.prod", "production URL", ("the prod link", "production"), _url("www")),
    ("url.hook", "webhook endpoint", ("the webhook", "the hook target"), _url("hooks")),
    ("date.freeze", "code freeze date", ("the freeze", "the code freeze"), _date),
    ("date.launch", "launch date", ("the launch", "go-live"), _date),
    ("date.signoff", "QA sign-off deadline", ("QA sign-off", "the sign-off"), _date),
    ("limit.api", "API timeout", ("the API call timeout", "API calls"), _unit(120, 980, "ms")),
    ("limit.db", "database timeout", ("DB queries", "the query timeout"), _unit(12, 95, "s")),
    ("limit.upload", "max upload size", ("uploads", "the upload cap"), _unit(13, 990, "MB")),
    ("id.ticket", "tracking ticket", ("the ticket", "commits"), _ticket),
    ("id.version", "release version", ("the release", "the tag"), _version),
    ("path.logs", "log directory", ("logs", "the logs folder"), _path("logs")),
    ("host.db", "primary DB host", ("the primary", "the main database"), _host("pg")),
    ("host.replica", "replica host", ("the replica", "read traffic"), _host("ro")),
)
_FAMILY = {key: key.split(".")[0] for key, *_ in _SUBJECTS}

_RULES = (
    "never push straight to main",
    "always run the linter before committing",
    "do not edit anything under vendor/",
    "never log customer email addresses",
    "always ask before deleting a branch",
    "do not restart the billing workers during business hours",
    "never run migrations without a fresh backup",
    "must keep the public API backwards compatible",
    "always add a regression test for every bug fix",
    "do not add dependencies without asking first",
    "never commit .env files",
    "must pin every dependency to an exact version",
    "never disable TLS verification, not even in tests",
    "do not squash-merge release branches",
    "always tag the on-call engineer on schema changes",
    "never force-push a shared branch",
)
_PREFERENCES = (
    "answers in bullet points",
    "commit subjects under 50 characters",
    "British spelling in the docs",
    "type hints on every new function",
    "several small PRs over one big one",
    "pytest over unittest",
    "the explanation before the code",
    "one question at a time",
    "ISO dates in every report",
    "dataclasses over plain dicts",
    "short paragraphs without headings",
    "numbered steps for anything manual",
)
_TASK_VERBS = ("port", "refactor", "split", "harden", "speed up", "document", "migrate")
_TASK_OBJECTS = (
    "the invoice exporter",
    "the session cache",
    "the CSV importer",
    "the webhook retry loop",
    "the search indexer",
    "the audit log writer",
    "the thumbnail worker",
    "the quota checker",
)
_STEPS = (
    "added the retry wrapper",
    "split the settings module",
    "wrote the fixture loader",
    "removed the dead feature flags",
    "renamed the ledger columns",
    "pinned the HTTP client",
    "moved the cron jobs to the scheduler",
    "deleted the legacy endpoints",
)
_NEXT = (
    "backfill the ledger table",
    "wire up the rollout flag",
    "write the rollback script",
    "profile the slow export query",
    "add the health check endpoint",
    "rotate the service account keys",
    "draft the migration notes",
    "replace the polling loop with webhooks",
)
_QUESTIONS = (
    "whether we can drop the legacy_users table",
    "which region the new bucket goes in",
    "if the old CSV format still has users",
    "whether the nightly job may run twice",
    "who owns the billing dashboard now",
    "if we can bump the minimum Python version",
)
_TECH = ("Redis", "NATS", "Kafka", "SQLite", "Postgres", "DuckDB", "RabbitMQ", "Memcached")
_PURPOSES = ("job queue", "session store", "metrics store", "feature flags", "rate limiter")
_REASONS = (
    "it is already deployed in every region",
    "the team knows it well",
    "it needs no extra ops work",
    "its licence is simpler",
    "the benchmark showed half the latency",
    "it keeps the stack small",
    "the vendor support contract covers it",
    "it survived the failover drill",
)

_LABELS = {
    "rule": ("RULE", "IMPORTANT", "HARD RULE", "POLICY", "CONSTRAINT"),
    "preference": ("USER PREFERENCE", "PREFERENCE", "STYLE"),
    "value": ("FACT", "NOTE", "IMPORTANT", "CONFIG", "REMEMBER"),
    "task": ("GOAL STATE", "CURRENT TASK", "GOAL"),
    "done": ("DONE", "STATUS", "PROGRESS"),
    "next": ("TODO", "NEXT STEP", "NEXT"),
    "question": ("OPEN QUESTION", "BLOCKED", "QUESTION"),
    "decision": ("DECISION", "DECIDED", "ADR"),
}

# Unlabelled statement families, per kind and source; {x} is the planted text, {n} a noun.
_PLAIN: dict[str, dict[str, tuple[str, ...]]] = {
    "rule": {
        "user": (
            "{X}, please.",
            "One thing before you start: {x}.",
            "House rule here: {x}.",
            "Just so you know, {x}; that burned us last quarter.",
            "And {x}. That one is non-negotiable.",
        ),
        "assistant": ("Understood, noted the rule: {x}.", "Got it, so {x}. I will stick to it."),
        "tool": ("- {X}.", "* Contributors {x}.", "{X} (see the onboarding doc)."),
    },
    "preference": {
        "user": (
            "I'd prefer {x}.",
            "If you can, I like {x}.",
            "My preference for this work: {x}.",
            "Generally I go for {x}, fwiw.",
        ),
        "assistant": ("Noting your preference for {x}.",),
        "tool": ("- prefers {x}",),
    },
    "value": {
        "user": (
            "The {n} is {x}.",
            "Heads up, the {n}: {x}.",
            "For the record, {x} is the {n}.",
            "Use {x} as the {n}.",
        ),
        "assistant": ("I checked, and the {n} is {x}.", "According to the config the {n} is {x}."),
        "tool": ("{n}: {x}", "{n} = {x}"),
    },
    "task": {
        "user": ("Today we need to {x}.", "The job is to {x}.", "What I need from you: {x}."),
        "assistant": ("Working on the task now: {x}.",),
        "tool": ("goal: {x}",),
    },
    "done": {
        "user": ("I already {x} myself yesterday.",),
        "assistant": ("Done so far: {x}.", "That part is finished, I {x}."),
        "tool": ("[x] {x}",),
    },
    "next": {
        "user": ("After that, the next step is to {x}.", "Then {x}, please."),
        "assistant": ("Next step is to {x}.", "Up next I will {x}."),
        "tool": ("# next: {x}",),
    },
    "question": {
        "user": ("I still owe you an answer on {x}.",),
        "assistant": (
            "Waiting on you to confirm {x}.",
            "Before I go on, can you tell me {x}? I will hold until then.",
        ),
        "tool": ("? {x}",),
    },
    "decision": {
        "user": ("We're going with {x}.", "Let's settle it: {x}."),
        "assistant": ("I went with {x}.", "Decided, then: {x}."),
        "tool": ("- accepted: {x}",),
    },
}
_LABELLED = ("{L}: {x}.", "{L}: {X}.")
_VALUE_LABELLED = ("{L}: the {n} is {x}.", "{L}: {n} = {x}.")

# Update wordings: same pattern, or paraphrased (an alias {a} instead of the noun).
_VALUE_UPDATES = (
    "The {n} is {x} now.",
    "Quick update: the {n} changed to {x}.",
    "Scratch that, {a} is {x}.",
    "Change of plan: use {x} for {a}.",
    "Let's instead go with {x} for {a}.",
    "Switch {a} to {x}.",
    "The earlier {n} no longer applies; {a} is {x} from today.",
)
_MONEY_UPDATES = ("Quick update: keep {a} under {x}.", "Finance says {a} is capped at {x} now.")
_TEXT_UPDATES = {
    # A rule or preference is one of several: its update names which ({t}, its last words).
    "rule": (
        "Scratch the earlier rule about {t}; instead: {x}.",
        "Change of plan on the rule about {t}: {x}.",
    ),
    "preference": ("Actually, instead of {t}, let's switch to {x}.", "No longer {t}; I want {x}."),
    "task": ("Change of plan: forget the earlier task, we {x} first.", "Let's instead {x}."),
    "next": ("Scratch that, next we {x}.", "Switch the next step: {x}."),
    "decision": ("Change of plan: {x}.", "Let's instead go with {x}."),
}

# --------------------------------------------------------------------------- filler

_ACKS = (
    "Acknowledged. Continuing with the plan.",
    "Got it.",
    "Okay, on it.",
    "Sounds good, carrying on.",
    "Sure, will do.",
    "Noted. Moving on to the next part.",
    "Makes sense.",
)
_NUDGES = ("Continue.", "Keep going.", "Carry on, please.", "Any progress?", "What's next?", "ok")
_SMALL_TALK = (
    "Random: my cat just walked across the keyboard again.",
    "Morning! Coffee first, then code.",
    "Did you catch the match last night? What a finish.",
    "Random: the office plants need watering, remind me later.",
    "Off-topic, but the new standing desks are great.",
    "Lunch was excellent, the ramen place reopened.",
    "Weather is awful here, rain all week.",
    "Aside: I'm out for an hour this afternoon.",
)
_REPLIES = (
    "Ha, sounds like a busy morning.",
    "Enjoy it! I'll keep things moving.",
    "Noted, no rush on my side.",
    "Sounds nice. Back to the code.",
)
_CHATTER = (
    "Still working through the test output.",
    "Build is running, this takes a minute.",
    "Looking at the logs now; nothing unusual so far.",
    "The install went through cleanly.",
    "Status: still reading the code, no changes yet.",
)
_WORDS = (
    *("alpha", "beta", "gamma", "delta", "kernel", "buffer", "shard", "worker", "queue"),
    *("router", "client", "server", "schema", "mapper", "loader", "parser", "writer"),
    *("reader", "index", "batch", "window", "probe", "handler", "adapter"),
)
_COMMANDS = ("ls -la", "pytest -q", "git log --oneline -n 12", "pip list", "du -sh *", "ps aux")


class _Rng:
    """A seeded random source with the session's drawing helpers."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.used: set[str] = set()
        self.purposes: set[str] = set()
        """What the session's decisions are about: two decisions are about two things."""

    def pick(self, items: Sequence[str]) -> str:
        return self.r.choice(items)

    def fresh(self, make: Callable[[], str]) -> str:
        """A value unlike every one drawn so far (no substring either way)."""
        for _ in range(200):
            value = make()
            if not any(value in u or u in value for u in self.used):
                self.used.add(value)
                return value
        raise RuntimeError("no fresh value")

    def noise(self, lines: int) -> tuple[str, str]:
        """A tool call's command and a noisy output of about ``lines`` lines."""
        r = self.r
        command = r.choice(_COMMANDS)
        out = []
        for _ in range(lines):
            a, b = r.sample(_WORDS, 2)
            out.append(
                r.choice(
                    (
                        f"-rw-r--r-- 1 dev dev {r.randint(100, 9999):5d} src/{a}_{b}.py",
                        f"tests/test_{a}.py::test_{b} PASSED",
                        f"{r.getrandbits(28):07x} {a} {b} cleanup",
                        f"{a}-{b} 0.{r.randint(1, 9)}.{r.randint(0, 9)}",
                        f"{r.randint(1, 999)}K\t{a}/{b}",
                    )
                )
            )
        return command, "\n".join(out)


# --------------------------------------------------------------------------- building


@dataclass
class _Fact:
    """A planted item while the session is built: its values and how it is stated."""

    kind: str
    """rule, preference, value, task, done, next, question or decision."""
    key: str
    text: str
    source: str
    labelled: bool
    noun: str = ""
    aliases: tuple[str, ...] = ()
    reason: str = ""
    """For a decision: the reason, a second value."""

    def values(self) -> list[Value]:
        kind = _KIND_OF[self.kind]
        out = [Value(self.key, self.text, kind, self.labelled, self.source, self.kind == "rule")]
        if self.reason:
            out.append(Value(self.key + ".why", self.reason, kind, self.labelled, self.source))
        return out

    def old(self) -> list[str]:
        return [self.text, *([self.reason] if self.reason else [])]


_KIND_OF = {
    "rule": "rule",
    "preference": "preference",
    "value": "value",
    "task": "task",
    "done": "task",
    "next": "task",
    "question": "task",
    "decision": "decision",
}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _say(g: _Rng, f: _Fact) -> str:
    """The sentence (or tool line) stating ``f``."""
    x = f.text if not f.reason else f"{f.text} because {f.reason}"
    if f.labelled:
        label = g.pick(_LABELS[f.kind])
        forms = _VALUE_LABELLED if f.kind == "value" else _LABELLED
        return g.pick(forms).format(L=label, x=x, X=_cap(x), n=f.noun)
    return g.pick(_PLAIN[f.kind][f.source]).format(x=x, X=_cap(x), n=f.noun)


def _say_update(g: _Rng, f: _Fact, money: bool, old: _Fact) -> str:
    x = f.text if not f.reason else f"{f.text}, since {f.reason}"
    if f.kind == "value":
        forms = _VALUE_UPDATES + (_MONEY_UPDATES if money else ())
        return g.pick(forms).format(n=f.noun, a=g.pick(f.aliases), x=x)
    topic = " ".join(old.text.split()[-2:])
    return g.pick(_TEXT_UPDATES[f.kind]).format(x=x, t=topic)


class _Builder:
    """Messages of one session, built exchange by exchange."""

    def __init__(self, g: _Rng) -> None:
        self.g = g
        self.messages: list[dict[str, Any]] = []
        self.calls = 0

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def assistant(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def tool(self, lead: str, command: str, output: str) -> None:
        self.calls += 1
        call_id = f"call_{self.calls}"
        arguments = json.dumps({"command": command})
        self.messages.append(
            {
                "role": "assistant",
                "content": lead,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": arguments},
                    }
                ],
            }
        )
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})

    def filler(self, medium: bool) -> None:
        """One exchange that states nothing."""
        g = self.g
        roll = g.r.random()
        if roll < 0.3:
            self.user(g.pick(_SMALL_TALK))
            self.assistant(g.pick(_REPLIES))
        elif roll < 0.55 or not medium:
            self.user(g.pick(_NUDGES))
            self.assistant(g.pick(_CHATTER + _ACKS))
        else:
            self.user(g.pick(_NUDGES))
            self.tool(g.pick(_CHATTER), *g.noise(g.r.randint(6, 16)))
            self.assistant(g.pick(_ACKS))

    def state(self, sentences: Sequence[tuple[str, str]], medium: bool) -> None:
        """One exchange stating ``(source, sentence)`` pairs (of one source)."""
        g = self.g
        source = sentences[0][0]
        text = " ".join(s for _, s in sentences)
        if source == "user":
            lead = g.pick(("", "", "Ok. ", "Also: ", "Thanks. "))
            self.user(lead + text)
            self.assistant(g.pick(_ACKS))
        elif source == "assistant":
            self.user(g.pick(_NUDGES))
            self.assistant(text)
        else:
            _, noise = g.noise(g.r.randint(3, 9) if medium else g.r.randint(0, 2))
            lines = noise.split("\n") if noise else []
            for _, s in sentences:
                lines.insert(g.r.randint(0, len(lines)), s)
            file = g.pick(("NOTES.md", "CONTRIBUTING.md", "config/app.env", "docs/plan.md"))
            self.user(g.pick(_NUDGES))
            self.tool(f"Checking {file}.", f"cat {file}", "\n".join(lines))
            self.assistant(g.pick(_ACKS))

    def size(self) -> int:
        return sum(len(message_text(m)) + 1 for m in self.messages)


_SYSTEMS = (
    "You are a coding agent. Use the bash tool; be brief.",
    "You help with this repository. Run commands with bash.",
    "Coding assistant. Tools: bash. Keep replies short.",
)


def _draw_fact(g: _Rng, kind: str, key_hint: str, source: str, labelled: bool) -> _Fact:
    r = g.r
    if kind == "value":
        key, noun, aliases, make = next(s for s in _SUBJECTS if s[0] == key_hint)
        return _Fact(kind, key, g.fresh(lambda: make(r)), source, labelled, noun, aliases)
    if kind == "decision":
        free = [p for p in _PURPOSES if p not in g.purposes] or list(_PURPOSES)
        purpose = g.pick(free)
        g.purposes.add(purpose)
        text = g.fresh(lambda: f"{g.pick(_TECH)} for the {purpose}")
        return _Fact(
            kind, key_hint, text, source, labelled, reason=g.fresh(lambda: g.pick(_REASONS))
        )
    pools: dict[str, Callable[[], str]] = {
        "rule": lambda: g.pick(_RULES),
        "preference": lambda: g.pick(_PREFERENCES),
        "task": lambda: f"{g.pick(_TASK_VERBS)} {g.pick(_TASK_OBJECTS)}",
        "done": lambda: g.pick(_STEPS),
        "next": lambda: g.pick(_NEXT),
        "question": lambda: g.pick(_QUESTIONS),
    }
    return _Fact(kind, key_hint, g.fresh(pools[kind]), source, labelled)


_SOURCES = {
    "rule": ("user", "user", "tool", "assistant"),
    "preference": ("user", "user", "assistant", "tool"),
    "value": ("user", "assistant", "tool", "tool"),
    "task": ("user", "user", "assistant"),
    "done": ("assistant", "assistant", "tool", "user"),
    "next": ("assistant", "user", "tool"),
    "question": ("assistant", "assistant", "user"),
    "decision": ("user", "assistant", "tool"),
}
_UPDATABLE = ("value", "value", "value", "next", "decision", "preference", "task", "rule")


def _plan_facts(g: _Rng, n: int) -> list[_Fact]:
    """``n`` facts of mixed kinds, with at least one near-duplicate pair of values."""
    r = g.r
    facts: list[_Fact] = []
    subjects = [s[0] for s in _SUBJECTS]
    families = sorted({f for f in _FAMILY.values() if list(_FAMILY.values()).count(f) > 1})
    family = r.choice(families)
    twins = r.sample([k for k in subjects if _FAMILY[k] == family], 2)
    pool = ["value", "value", "rule", "preference", "task", "done", "next", "question", "decision"]
    kinds = ["value", "value", *r.choices(pool, k=max(0, n - 2))]
    once = {"task", "question", "next"}  # one current task, one open question per session
    free_subjects = [k for k in subjects if k not in twins]
    r.shuffle(free_subjects)
    for i, kind in enumerate(kinds):
        if kind in once and any(f.kind == kind for f in facts):
            kind = "rule"
        hint = twins[i] if i < 2 else (free_subjects.pop() if kind == "value" else f"{kind}.{i}")
        source = r.choice(_SOURCES[kind])
        facts.append(_draw_fact(g, kind, hint, source, r.random() < 0.5))
    r.shuffle(facts)
    return facts


def _update_of(g: _Rng, f: _Fact) -> tuple[_Fact, str]:
    """A new fact replacing ``f`` (same key) and the sentence that states it."""
    new = _draw_fact(g, f.kind, f.key, g.pick(("user", "user", "assistant")), False)
    if f.kind == "value":
        new = _Fact(f.kind, f.key, new.text, new.source, False, f.noun, f.aliases)
    if f.kind == "decision":  # a new decision on the same subject ("… for the job queue")
        purpose = f.text.split(" for the ", 1)[1]
        text = g.fresh(lambda: f"{g.pick(_TECH)} for the {purpose}")
        new = _Fact(f.kind, f.key, text, new.source, False, reason=new.reason)
    # A statement that replaces another says so, or is about the same subject: an unrelated
    # rule stated later is a second rule, not an update, and no reader could tell otherwise.
    labelled = g.r.random() < 0.3 and f.kind in ("decision", "task", "next")
    if labelled:
        new = _Fact(new.kind, new.key, new.text, new.source, True, reason=new.reason)
        return new, _say(g, new)
    return new, _say_update(g, new, f.key.startswith("budget"), f)


@dataclass
class _State:
    current: dict[str, _Fact] = field(default_factory=dict)
    superseded: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)

    def truth(self) -> Truth:
        values = [v for f in self.current.values() for v in f.values()]
        return Truth(tuple(values), tuple(self.superseded), tuple(self.repeated))


def _session(seed: int, size: str) -> SmallSession:
    g = _Rng(seed)
    r = g.r
    medium = size == "medium"
    if medium:
        target = r.randint(2300, 7600)
        n = max(5, min(12, target // 600))
    else:
        target = int(4.2 * r.choice((r.randint(110, 300), *[r.randint(300, 560)] * 3)))
        n = max(2, min(6, (target - 1450) // 160))
    facts = _plan_facts(g, n)
    state = _State()
    b = _Builder(g)
    if r.random() < 0.5:
        b.user(g.pick(_SMALL_TALK))
        b.assistant(g.pick(_REPLIES))
    said: dict[str, str] = {}
    # Statements: each fact, maybe grouped with the next of the same source.
    i = 0
    while i < len(facts):
        group = [facts[i]]
        while (
            i + len(group) < len(facts)
            and facts[i + len(group)].source == facts[i].source
            and r.random() < 0.4
        ):
            group.append(facts[i + len(group)])
        lines = [(f.source, _say(g, f)) for f in group]
        b.state(lines, medium)
        said.update((f.key, line) for f, (_, line) in zip(group, lines, strict=True))
        for f in group:
            state.current[f.key] = f
        i += len(group)
        if r.random() < (0.7 if medium else 0.35):
            b.filler(medium)
    # The exact repeat, then updates (the old value never again), each after filler.
    stable = [f for f in facts if f.kind != "done"]
    repeat = r.choice(stable) if (medium or r.random() < 0.5) else None
    updates = r.sample(
        [f for f in facts if f.kind in _UPDATABLE and f is not repeat],
        k=min(max(1, len(facts) // 3) + (1 if medium else 0), 4),
    )
    for f in updates:
        if r.random() < 0.6:
            b.filler(medium)
        new, sentence = _update_of(g, f)
        b.state([(new.source, sentence)], medium)
        state.current[f.key] = new
        state.superseded.extend(f.old())
    if repeat is not None:
        b.filler(medium)
        b.state([(repeat.source, said[repeat.key])], medium)
        state.repeated.append(said[repeat.key])
    while b.size() < target - 60:
        b.filler(medium)
    b.user(g.pick(_NUDGES))  # the last exchange: kept verbatim, states nothing
    b.assistant(g.pick(_ACKS))
    truth = state.truth()
    main = tuple(b.messages)
    segments = []
    for _ in range(SEGMENTS):
        start = len(b.messages)
        roll = r.random()
        current = list(state.current.values())
        if roll < 0.35:
            old = r.choice([f for f in current if f.kind in _UPDATABLE] or current)
            new, sentence = _update_of(g, old)
            b.state([(new.source, sentence)], medium)
            state.current[old.key] = new
            state.superseded.extend(old.old())
        elif roll < 0.6:
            kind = r.choice(("rule", "done", "preference"))
            f = _draw_fact(g, kind, f"{kind}.s{len(b.messages)}", r.choice(_SOURCES[kind]), False)
            b.state([(f.source, _say(g, f))], medium)
            state.current[f.key] = f
        for _ in range(r.randint(1, 3 if medium else 2)):
            b.filler(medium)
        b.user(g.pick(_NUDGES))
        b.assistant(g.pick(_ACKS))
        segments.append(Segment(tuple(b.messages[start:]), state.truth()))
    return SmallSession(
        name=f"{size}-{seed}",
        size=size,
        seed=seed,
        system=g.pick(_SYSTEMS),
        messages=main,
        truth=truth,
        segments=tuple(segments),
    )


def make_session(seed: int, size: str) -> SmallSession:
    """The session of ``seed`` in size class ``size``: the same in every process."""
    if size not in SIZES:
        raise ValueError(f"size: expected one of {', '.join(SIZES)}, got {size!r}")
    low, high = _CHARS[size]
    for attempt in range(100):
        made = _session(100_000 * attempt + seed * 2 + (size == "medium"), size)
        if low <= len(request_text([{"content": made.system}, *made.messages])) <= high and (
            _checklist_fits(made)
        ):
            return replace(made, name=f"{size}-{seed}")
    raise RuntimeError(f"no {size} session of seed {seed} within {low}-{high} characters")


def _checklist_fits(s: SmallSession) -> bool:
    """Where 20% of the text holds the system prompt, the last exchange and 40 tokens of
    framing (at 3.5 characters a token, the least this text has), it also holds them at
    4.3 and the checklist: the bar the suite sets can be met."""
    budget = 0.2 * len(request_text([{"content": s.system}, *s.messages]))
    fixed = len(s.system) + len(request_text(s.messages[-2:]))
    return budget < fixed + 40 * 3.5 or budget >= fixed + 40 * 4.3 + len(checklist(s.truth))


_CHARS = {"small": (430, 2100), "medium": (2100, 7900)}
"""Characters of request text a session may have: small sessions stay within 100-600
tokens at the meter's 3.6-4.3 characters per token on this text."""


def sessions(size: str, count: int, first_seed: int = 0) -> tuple[SmallSession, ...]:
    """``count`` sessions of ``size``, seeds ``first_seed`` onwards."""
    return tuple(make_session(s, size) for s in range(first_seed, first_seed + count))
