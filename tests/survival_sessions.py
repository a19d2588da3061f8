"""Fact-survival sessions: synthetic agent sessions with typed planted facts (issue 13).

:func:`make_session` builds a deterministic OpenAI-format agent session (user turns,
assistant text with tool calls, tool results) in which 18 facts of nine kinds
(:data:`FACT_KINDS`, two of each) are stated, each with a unique verbatim value, by the
user, by the assistant or inside tool output; 8 of them are later UPDATED to a new value.
The layout is adversarial for position-based ranking:

* head filler: the task, then long exploration output (a file listing, an install log, a
  test run) and chit-chat before the first fact;
* facts: every fact is stated once, mixed with long tool outputs (logs, listings);
* updates: the 8 updates (the new value only; an update never repeats the old value);
* tail filler: long logs and chit-chat, no fact at all (:data:`TAIL_FILLER_SHARE` of the
  session or more), so a summary that keeps the newest text loses every fact, and one that
  keeps the oldest text loses most of them.

:func:`replay` replays a session through :class:`~dashr_ext.Dashr` under a budget of a
share of the session's uncompacted request size and scores the final request with
:func:`score`. The rules (what "present", "stale" and "found" mean) are documented there.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._checkpoints import checkpoint_of
from dashr_ext._summarizers.base import Summarizer

__all__ = [
    "BUDGETS",
    "FACT_KINDS",
    "PASS_COUNTS",
    "RETAIN_SHARE",
    "SESSIONS",
    "TAIL_FILLER_SHARE",
    "Fact",
    "FactScore",
    "Outcome",
    "SurvivalSession",
    "make_session",
    "message_text",
    "original_tokens",
    "replay",
    "replay_passes",
    "score",
    "stale_as_current",
]

FACT_KINDS = (
    "safety rule",
    "hard constraint",
    "numeric limit",
    "id/hash",
    "date",
    "region/host",
    "person",
    "preference",
    "goal state",
)
BUDGETS = (0.10, 0.20, 0.30)
"""Budgets as shares of the session's uncompacted request tokens."""
PASS_COUNTS = (1, 5)
RETAIN_SHARE = 0.35
"""``retain_tokens`` as a share of the budget: the verbatim tail a pass keeps."""
TAIL_FILLER_SHARE = 0.25
"""At least this share of a session's tokens, at its end, states no fact."""
VARIANTS = 3


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Fact:
    """One planted fact: its kind, its verbatim value, who states it, and maybe an update."""

    key: str
    kind: str
    value: str
    source: str
    """``user``, ``assistant`` or ``tool``: where the value is first stated."""
    new_value: str | None = None
    update_source: str | None = None

    @property
    def current(self) -> str:
        """The value that holds at the end of the session."""
        return self.new_value or self.value

    @property
    def stale(self) -> str | None:
        """The superseded value, for an updated fact."""
        return self.value if self.new_value else None

    @property
    def values(self) -> tuple[str, ...]:
        return (self.value,) if self.new_value is None else (self.value, self.new_value)


@dataclass(frozen=True)
class _Slot:
    """A fact template: per-variant values, the statement, and maybe an update."""

    key: str
    kind: str
    source: str
    values: tuple[str, str, str]
    say: str
    """The statement with ``{v}``; for a tool fact, one line of the tool's output."""
    command: str = ""
    """For a tool fact: the command that printed it (``{pkg}`` is filled in)."""
    update_source: str | None = None
    new_values: tuple[str, str, str] | None = None
    update_say: str = ""
    update_command: str = ""


_SLOTS: tuple[_Slot, ...] = (
    _Slot(
        "safety-1",
        "safety rule",
        "user",
        (
            "never run migrations against the primary without a fresh snapshot",
            "never replay the dead-letter queue into production",
            "never rotate the signing keys during peak hours",
        ),
        "Before you touch anything else, one safety rule that is non-negotiable: {v}. "
        "If a step would break it, stop and ask me first.",
    ),
    _Slot(
        "safety-2",
        "safety rule",
        "tool",
        (
            "never deploy on Fridays",
            "never scale the worker pool below two replicas",
            "never purge the CDN cache without a ticket",
        ),
        "- Rule: {v}.",
        "cat docs/RUNBOOK.md",
        "user",
        (
            "never deploy after 14:00 UTC on a Thursday",
            "never scale the worker pool below three replicas",
            "never purge the CDN cache outside the maintenance window",
        ),
        "Ops rewrote the runbook rule this morning, so please go by the new one: {v}. "
        "The earlier wording is withdrawn.",
    ),
    _Slot(
        "constraint-1",
        "hard constraint",
        "user",
        (
            "must stay compatible with Python 3.9",
            "must not add a new runtime dependency",
            "must keep the v2 response schema byte-compatible",
        ),
        "Hard constraint for everything in this task: the code {v}. CI enforces it.",
    ),
    _Slot(
        "constraint-2",
        "hard constraint",
        "assistant",
        (
            "the public signature of settle_invoice() stays unchanged",
            "the Kafka topic names stay exactly as they are",
            "the /v2/session endpoint keeps its URL",
        ),
        "Reading the callers, there is a hard constraint here: {v}, because three other "
        "teams depend on it directly.",
    ),
    _Slot(
        "limit-1",
        "numeric limit",
        "user",
        ("$390", "$1,240", "$615"),
        "Budget note: the spend cap for the new jobs is {v} per month, so keep the instance "
        "sizes modest.",
        update_source="user",
        new_values=("$450", "$1,480", "$720"),
        update_say="Finance approved more headroom: the spend cap is now {v} per month, "
        "effective today.",
    ),
    _Slot(
        "limit-2",
        "numeric limit",
        "tool",
        ("retry_limit: 7", "batch_size: 250", "max_connections: 64"),
        "  {v}",
        "cat config/{pkg}.yaml",
        "assistant",
        ("retry_limit: 4", "batch_size: 400", "max_connections: 96"),
        "Following the SRE note I changed the setting in config/{pkg}.yaml; it now reads {v}.",
    ),
    _Slot(
        "id-1",
        "id/hash",
        "tool",
        ("", "", ""),  # random hex, filled per variant
        "deployed build {v} to staging (healthy after 3 checks)",
        "make deploy-staging",
        "tool",
        ("", "", ""),
        "deployed build {v} to staging (healthy after 4 checks)",
        "make deploy-staging",
    ),
    _Slot(
        "id-2",
        "id/hash",
        "user",
        ("INC-20417", "DATA-3381", "MOB-7702"),
        "Please reference ticket {v} in every commit message for this work.",
    ),
    _Slot(
        "date-1",
        "date",
        "user",
        ("2026-03-13", "2026-05-06", "2026-07-21"),
        "Heads-up: the code freeze starts {v}, so this has to be merged before then.",
        update_source="user",
        new_values=("2026-03-20", "2026-05-13", "2026-07-28"),
        update_say="Release management moved the freeze: it now starts {v}.",
    ),
    _Slot(
        "date-2",
        "date",
        "tool",
        ("2026-04-02", "2026-06-10", "2026-08-04"),
        '  "maintenance_window": "{v}",',
        "cat ops/calendar.json",
    ),
    _Slot(
        "region-1",
        "region/host",
        "tool",
        ("eu-west-1", "us-east-2", "ap-southeast-2"),
        '  region = "{v}"',
        "cat infra/main.tf",
        "user",
        ("eu-central-1", "us-west-2", "ap-northeast-1"),
        "Infra decision from this morning: we move the deployment to {v}; plan everything "
        "against that region from now on.",
    ),
    _Slot(
        "host-2",
        "region/host",
        "assistant",
        ("db-replica-07.internal", "pg-ro-3.data.internal", "cache-edge-12.internal"),
        "For the backfill I'll read from {v}, since the primary is busy during the day.",
    ),
    _Slot(
        "person-1",
        "person",
        "user",
        ("Dana Whitfield", "Tomasz Brandt", "Ingrid Solberg"),
        "{v} reviews anything that touches {pkg}; please add them to the PR.",
        update_source="user",
        new_values=("Marcus Oyelaran", "Keiko Hayashi", "Rafael Duarte"),
        update_say="Change of reviewer: {v} takes over the reviews from today, the previous "
        "reviewer is on leave.",
    ),
    _Slot(
        "person-2",
        "person",
        "tool",
        ("Priya Raman", "Jonas Lindqvist", "Amara Okafor"),
        "primary on-call this week: {v}",
        "oncall show --team {pkg}",
    ),
    _Slot(
        "pref-1",
        "preference",
        "user",
        (
            "squash merges with one-line subjects",
            "structlog over the stdlib logger",
            "httpx over requests",
        ),
        "A preference of mine for this repo: {v}, please.",
    ),
    _Slot(
        "pref-2",
        "preference",
        "user",
        (
            "tables over bullet lists",
            "UTC timestamps in every log line",
            "British spelling in user-facing text",
        ),
        "Also, for anything you write up for me: I prefer {v}.",
    ),
    _Slot(
        "goal-1",
        "goal state",
        "assistant",
        ("canary at 10% of traffic", "backfill at 2 of 9 shards", "rollout on 1 of 4 clusters"),
        "Status: {v}. I will keep watching the error rate before going further.",
        update_source="assistant",
        new_values=(
            "canary at 50% of traffic",
            "backfill at 6 of 9 shards",
            "rollout on 3 of 4 clusters",
        ),
        update_say="Status update: {v}. The error rate stayed flat through the last step.",
    ),
    _Slot(
        "goal-2",
        "goal state",
        "user",
        ("p99 latency under 250 ms", "zero duplicate events per day", "cold start under 800 ms"),
        "The goal for this week is {v}; everything else is secondary.",
    ),
)

_DOMAINS = (
    {"repo": "payments-platform", "svc": "billing-api", "pkg": "billing"},
    {"repo": "data-pipeline", "svc": "ingest-worker", "pkg": "ingest"},
    {"repo": "mobile-backend", "svc": "edge-gateway", "pkg": "gateway"},
)
_TASKS = (
    "move the invoice settlement job onto the new scheduler and make its retries safe",
    "make the event ingest idempotent so replays stop creating duplicates",
    "put the session refresh path behind the new gateway and cut its cold start",
)


# --------------------------------------------------------------------------- filler

_WORD_TEXT = (
    "alpha beta gamma delta kernel buffer cache shard worker queue ledger invoice router "
    "session token client server schema mapper loader parser writer reader index batch "
    "window metric probe handler adapter"
)
_WORDS = tuple(_WORD_TEXT.split())
_FILLER_PEOPLE = ("Alex Kim", "Sam Ortiz", "Lee Novak", "Chris Bauer", "Noor Haddad")


class _Filler:
    """Deterministic long tool outputs and chit-chat (no planted value ever appears)."""

    def __init__(self, rng: random.Random, domain: Mapping[str, str], offset: int) -> None:
        self.rng = rng
        self.d = domain
        self.offset = offset
        self.chats = 0

    def _name(self) -> str:
        return "_".join(self.rng.sample(_WORDS, 2))

    def _hex(self, n: int = 8) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def listing(self, lines: int) -> tuple[str, str]:
        pkg = self.d["pkg"]
        out = [f"total {lines * 4}"]
        for _ in range(lines):
            size = self.rng.randint(200, 48_000)
            day = self.rng.randint(1, 27)
            folder = self.rng.choice(["src", "tests", "scripts", "docs", "migrations"])
            out.append(
                f"-rw-r--r-- 1 dev dev {size:6d} Feb {day:2d} 1{self.rng.randint(0, 9)}:"
                f"{self.rng.randint(10, 59)} {folder}/{pkg}/{self._name()}.py"
            )
        return "ls -la --recursive src tests scripts docs migrations", "\n".join(out)

    def install_log(self, lines: int) -> tuple[str, str]:
        out = []
        for _ in range(lines):
            name = self.rng.choice(_WORDS) + "-" + self.rng.choice(_WORDS)
            ver = f"{self.rng.randint(0, 9)}.{self.rng.randint(0, 30)}.{self.rng.randint(0, 9)}"
            out.append(f"Collecting {name}=={ver}")
            out.append(
                f"  Downloading {name.replace('-', '_')}-{ver}-py3-none-any.whl "
                f"({self.rng.randint(12, 900)} kB)"
            )
        out.append("Successfully installed " + " ".join(o.split()[1] for o in out[::2][:30]))
        return "pip install -e '.[dev]'", "\n".join(out)

    def test_run(self, lines: int) -> tuple[str, str]:
        pkg = self.d["pkg"]
        out = ["============================= test session starts =============================="]
        for i in range(lines):
            pct = int(100 * (i + 1) / lines)
            out.append(
                f"tests/{pkg}/test_{self._name()}.py::test_{self._name()} PASSED [{pct:3d}%]"
            )
        out.append(f"======================= {lines} passed in {self.rng.randint(3, 90)}.21s ====")
        return f"pytest -q tests/{pkg}", "\n".join(out)

    def service_log(self, lines: int) -> tuple[str, str]:
        svc = self.d["svc"]
        out = []
        for _ in range(lines):
            day, hour = self.rng.randint(1, 27), self.rng.randint(0, 23)
            level = self.rng.choice(["INFO", "INFO", "INFO", "DEBUG", "WARN"])
            out.append(
                f"2026-02-{day:02d}T{hour:02d}:{self.rng.randint(10, 59)}:"
                f"{self.rng.randint(10, 59)}Z {level} {svc}[{self.rng.randint(1000, 9999)}]: "
                f"{self.rng.choice(_WORDS)} {self.rng.choice(['processed', 'flushed', 'retried'])}"
                f" batch {self.rng.randint(1000, 99999)} in {self.rng.randint(3, 900)} ms "
                f"(req {self._hex(12)})"
            )
        return f"journalctl -u {svc} --since yesterday --no-pager", "\n".join(out)

    def git_log(self, lines: int) -> tuple[str, str]:
        out = []
        for _ in range(lines):
            who = self.rng.choice(_FILLER_PEOPLE)
            out.append(f"{self._hex()} {who}: {self.rng.choice(_WORDS)} {self.rng.choice(_WORDS)}")
        return "git log --oneline --format='%h %an: %s' -n 200", "\n".join(out)

    def pods(self, lines: int) -> tuple[str, str]:
        svc = self.d["svc"]
        out = ["NAME                                  READY   STATUS    RESTARTS   AGE"]
        for _ in range(lines):
            out.append(
                f"{svc}-{self._hex(10)}-{self._hex(5)}   1/1     Running   "
                f"{self.rng.randint(0, 4)}          {self.rng.randint(1, 40)}h"
            )
        return f"kubectl get pods -l app={svc} -o wide", "\n".join(out)

    def any(self, lines: int) -> tuple[str, str]:
        kind = self.rng.choice(
            [self.listing, self.install_log, self.test_run, self.service_log, self.git_log]
        )
        return kind(lines)

    def chat(self) -> tuple[str, str]:
        """The next chit-chat exchange (they come round in turn)."""
        self.chats += 1
        return _CHAT[(self.offset + self.chats) % len(_CHAT)]

    def document(self, command: str, line: str) -> str:
        """What ``command`` prints: a file or report of its kind, ``line`` somewhere in it."""
        for marker, make in (
            ("RUNBOOK", self._runbook),
            (".yaml", self._yaml),
            ("deploy", self._deploy),
            ("calendar", self._calendar),
            (".tf", self._terraform),
            ("oncall", self._oncall),
        ):
            if marker in command:
                lines, low, high = make()
                at = self.rng.randint(low, high)
                return "\n".join([*lines[:at], line, *lines[at:]])
        raise ValueError(f"no document for {command!r}")

    # Each returns the document's lines and where the planted line may go (inclusive).

    def _runbook(self) -> tuple[list[str], int, int]:
        svc, r = self.d["svc"], self.rng
        steps = [
            f"- Deploys go through `make deploy-<env>`; watch the {svc} dashboard for "
            f"{r.randint(5, 20)} minutes afterwards.",
            "- Roll back with `make rollback` when the error rate doubles.",
            f"- Page the on-call through the pager app, then open #inc-{svc}.",
            "- Write the timeline in the incident doc while it is fresh.",
            f"- Disk alerts on the {svc} nodes: rotate logs first, resize second.",
            "- Certificates renew automatically; check the expiry panel once a month.",
            f"- The {svc} health check is /healthz; a 503 during warm-up is expected.",
            "- Feature flags live in the flags service; never edit them by hand in the DB.",
        ]
        r.shuffle(steps)
        return (
            [f"# {svc} runbook", "", "## Operations", *steps[:4], "", "## Incidents", *steps[4:]],
            3,
            7,
        )

    def _yaml(self) -> tuple[list[str], int, int]:
        r = self.rng
        lines = [
            f"# {self.d['pkg']} settings, loaded at start-up",
            f"service: {self.d['svc']}",
            "log_level: info",
            f"listen_port: {r.randint(8000, 8999)}",
            "worker:",
            f"  threads: {r.randint(2, 32)}",
            f"  queue_depth: {r.randint(100, 5000)}",
            f"  backoff_ms: {r.randint(50, 900)}",
            f"  timeout_s: {r.randint(5, 120)}",
            "metrics:",
            "  enabled: true",
            f"  flush_interval_s: {r.randint(5, 60)}",
            f"  namespace: {self.d['pkg']}_prod",
            "tracing:",
            f"  sample_rate: 0.{r.randint(1, 9)}",
            f"  exporter: otlp://collector:{r.randint(4300, 4399)}",
        ]
        return lines, 5, 9

    def _deploy(self) -> tuple[list[str], int, int]:
        svc = self.d["svc"]
        _, log = self.service_log(self.rng.randint(8, 14))
        layers = [
            f"Step {i}/9 : {self.rng.choice(_WORDS)} layer {self._hex(12)}" for i in range(1, 10)
        ]
        lines = [
            f"docker build -t {svc}:staging .",
            *layers,
            f"pushing {svc}:staging to the registry ... done",
            *log.split("\n"),
        ]
        return lines, 11, 14

    def _calendar(self) -> tuple[list[str], int, int]:
        r = self.rng
        holidays = ", ".join(f'"2026-02-{r.randint(1, 27):02d}"' for _ in range(4))
        return (
            [
                "{",
                f'  "team": "{self.d["pkg"]}",',
                '  "rotation": "weekly",',
                f'  "standup": "09:{r.randint(10, 45)} UTC",',
                f'  "holidays": [{holidays}],',
                f'  "retro_every_weeks": {r.randint(2, 4)},',
                f'  "planning_room": "{r.choice(_WORDS)}-{r.randint(1, 9)}"',
                "}",
            ],
            2,
            6,
        )

    def _terraform(self) -> tuple[list[str], int, int]:
        r, svc = self.rng, self.d["svc"]
        return (
            [
                'terraform {\n  required_version = ">= 1.6"\n}',
                'provider "aws" {',
                f'  default_tags {{ tags = {{ team = "{self.d["pkg"]}" }} }}',
                "}",
                f'module "{svc}" {{',
                '  source        = "./modules/service"',
                f'  instance_type = "{r.choice(["t3.medium", "m6i.large", "c6g.xlarge"])}"',
                f"  min_size      = {r.randint(1, 3)}",
                f"  max_size      = {r.randint(4, 12)}",
                f'  image_tag     = "{self._hex(12)}"',
                "}",
            ],
            2,
            2,
        )

    def _oncall(self) -> tuple[list[str], int, int]:
        r = self.rng
        return (
            [
                f"team: {self.d['pkg']}",
                "rotation: weekly, handover Monday 09:00 UTC",
                f"secondary on-call this week: {r.choice(_FILLER_PEOPLE)}",
                "escalation: engineering manager, then the director on duty",
                f"open pages: {r.randint(0, 3)}, acknowledged: all",
                f"last incident: INC-{r.randint(10000, 19999)} (resolved)",
            ],
            1,
            4,
        )

    def paste(self, lines: int) -> str:
        """A user message pasting a long log from their own machine."""
        _, log = self.service_log(lines)
        return (
            "This is what I see on my machine when I run the service locally, in case it "
            f"helps:\n{log}\nAnything in there that worries you?"
        )


_CHAT = (
    (
        "Ha, the coffee machine on the third floor is broken again, so I am running on tea "
        "today. Anyway, no rush, carry on with what you were doing and tell me when the next "
        "part is done. I also have a long meeting coming up about the quarterly planning and "
        "the offsite, so I may be slow to answer for an hour or so.",
        "Tea works too! Good luck with the planning meeting; offsites always take longer than "
        "the agenda says. I'll keep going in the meantime and leave you a short note of where "
        "things stand, so you can pick it up whenever you are back from it.",
    ),
    (
        "Random question while the tests run: do you think the team channel should be called "
        "#build-health or #ci-weather? People keep arguing about it in the standup and I want "
        "to settle it before the end of the week, it has gone on long enough.",
        "I'd lean towards #ci-weather: it is friendlier and people will remember it, while "
        "#build-health sounds like an alerting channel that nobody reads. Either is fine as "
        "long as the topic line says what belongs there, which matters more than the name.",
    ),
    (
        "Thanks, that looks reasonable. I was at a conference last week and half the talks "
        "were about agents that forget what they were told an hour earlier, which was funny "
        "given what we are doing here. The hallway track was better than the talks, as usual.",
        "That does sound familiar! The hallway track usually is the best part. The recurring "
        "theme in those talks tends to be that long sessions need a reliable record of what "
        "was decided, not just a shorter transcript; it is a useful framing for our work too.",
    ),
    (
        "Sorry, I got pulled into an incident review for another team. Nothing to do with us, "
        "they had a disk fill up on a logging node over the weekend. Where were we? Just "
        "continue with the current step, I will read back through the thread later.",
        "No problem, hope the review went smoothly; full disks on logging nodes are a classic. "
        "We were in the middle of the current step, so I'll continue from there and write a "
        "short recap once it is finished so you don't have to scroll back through everything.",
    ),
    (
        "By the way, the new laptops finally arrived and I spent the morning moving my dotfiles "
        "over, which took far longer than it should have. Half of my shell aliases are broken "
        "now. Not your problem though, just keep going with the work.",
        "Moving dotfiles always takes longer than planned; a small install script in a private "
        "repo helps next time. I'll keep going with the work and leave the aliases to you, "
        "although I'm happy to look at them later if you paste the ones that fail.",
    ),
    (
        "Quick aside: the quarterly survey asks what slows us down the most, and I am tempted "
        "to write 'waiting for CI' in capital letters. Do you have a better candidate? No need "
        "to overthink it, I just want a second opinion before I send it in this afternoon.",
        "Waiting for CI is a fair answer, and it is measurable, which helps it get fixed. If "
        "you want a second item, flaky tests are usually the cause behind slow pipelines, so "
        "naming both gives whoever reads the survey something concrete to act on.",
    ),
)


# --------------------------------------------------------------------------- building


@dataclass(frozen=True)
class SurvivalSession:
    """A generated session: OpenAI messages (system first) and the facts planted in it."""

    name: str
    seed: int
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    facts: tuple[Fact, ...]
    stated_at: dict[str, int]
    """Each planted value (old and new) → the index in :attr:`messages` that states it."""
    tail_start: int
    """Index of the first message of the tail filler (no value is stated from there on)."""


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


@dataclass
class _Builder:
    filler: _Filler
    messages: list[dict[str, Any]] = field(default_factory=list)
    stated_at: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    def user(self, text: str, values: Sequence[str] = ()) -> None:
        self._add({"role": "user", "content": text}, values)

    def say(self, text: str, values: Sequence[str] = ()) -> None:
        self._add({"role": "assistant", "content": text}, values)

    def step(self, text: str, command: str, output: str, values: Sequence[str] = ()) -> None:
        """An assistant message calling ``bash`` once, then the tool's result."""
        self.calls += 1
        call_id = f"call_{self.calls:03d}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        self._add({"role": "assistant", "content": text, "tool_calls": [call]}, ())
        self._add({"role": "tool", "tool_call_id": call_id, "content": output}, values)

    def filler_step(self, lines: int) -> None:
        command, output = self.filler.any(lines)
        self.step(f"Let me check with `{command.split()[0]}`.", command, output)

    def _add(self, message: dict[str, Any], values: Sequence[str]) -> None:
        for value in values:
            self.stated_at[value] = len(self.messages)
        self.messages.append(message)


def _hex8(rng: random.Random) -> str:
    while True:
        value = "".join(rng.choice("0123456789abcdef") for _ in range(8))
        if re.search("[a-f]", value) and re.search("[0-9]", value):
            return value


def _facts(variant: int, rng: random.Random) -> tuple[Fact, ...]:
    facts = []
    for slot in _SLOTS:
        value = slot.values[variant] or _hex8(rng)
        new = None
        if slot.new_values is not None:
            new = slot.new_values[variant] or _hex8(rng)
        facts.append(Fact(slot.key, slot.kind, value, slot.source, new, slot.update_source))
    return tuple(facts)


def _state(b: _Builder, slot: _Slot, value: str, source: str, update: bool, pkg: str) -> None:
    """State ``value`` of ``slot`` (its first statement, or its update) as one turn."""
    say = (slot.update_say if update else slot.say).format(v=value, pkg=pkg)
    f = b.filler
    if source == "user":
        b.user(f"{say} Then carry on with the next part of the task.", [value])
        b.filler_step(f.rng.randint(18, 30))
        b.say("Noted, continuing with the next part.")
    elif source == "assistant":
        b.user("Keep going with the next part and tell me where things stand.")
        b.filler_step(f.rng.randint(18, 30))
        b.say(say, [value])
    else:
        command = (slot.update_command if update else slot.command).format(pkg=pkg)
        output = f.document(command, say)
        b.user("Keep going with the next part.")
        b.step(f"Let me check with `{command}`.", command, output, [value])
        b.say("Checked; continuing.")


def make_session(variant: int) -> SurvivalSession:
    """The session of ``variant`` (0, 1 or 2): same plan, other domain, values and order."""
    seed = 1300 + variant
    rng = random.Random(seed)
    domain = _DOMAINS[variant]
    pkg = domain["pkg"]
    facts = _facts(variant, rng)
    slots = {s.key: s for s in _SLOTS}
    f = _Filler(rng, domain, variant)
    b = _Builder(f)

    # Head filler: the task, exploration output, chit-chat; no fact.
    b.user(
        f"We are working in {domain['repo']} on {domain['svc']}. The task: {_TASKS[variant]}. "
        "Start by getting familiar with the repository and the test suite."
    )
    b.step("I'll look around the repository first.", *f.listing(70))
    b.step("Installing the development dependencies.", *f.install_log(30))
    b.step("Running the test suite to get a baseline.", *f.test_run(60))
    b.say("The repository builds and all tests pass; I have a picture of the layout now.")
    user, reply = f.chat()
    b.user(user)
    b.say(reply)

    # Facts, in a per-variant order, with filler turns between them.
    order = list(facts)
    rng.shuffle(order)
    for i, fact in enumerate(order):
        _state(b, slots[fact.key], fact.value, fact.source, False, pkg)
        if i % 3 == 2:
            b.user("Continue.")
            b.filler_step(rng.randint(40, 60))
            b.say("Done with that part; the next one is in progress.")
        if i % 6 == 4:
            user, reply = f.chat()
            b.user(user)
            b.say(reply)

    # Updates (new values only), with filler between.
    updated = [fact for fact in facts if fact.new_value is not None]
    rng.shuffle(updated)
    for i, fact in enumerate(updated):
        assert fact.new_value is not None and fact.update_source is not None
        _state(b, slots[fact.key], fact.new_value, fact.update_source, True, pkg)
        if i % 2 == 1:
            b.user("Continue.")
            b.filler_step(rng.randint(40, 60))
            b.say("That part is done.")

    # Tail filler: long logs and chit-chat, no fact.
    tail_start = len(b.messages)
    for i in range(12):
        if i % 3 == 1:
            user, reply = f.chat()
            b.user(user)
            b.say(reply)
        elif i % 3 == 2:
            b.user(f.paste(rng.randint(25, 35)))
            b.say("Nothing in that log worries me: the batches are processed and retried normally.")
        else:
            b.user("Keep going; show me the relevant output as you work.")
            b.step("Checking the current state.", *f.pods(rng.randint(25, 35)))
            b.filler_step(rng.randint(45, 60))
            b.say("Nothing unusual in that output; moving on.")
    b.user(
        "Good. Before the next step, tell me where we stand, and which rules, limits and "
        "decisions are in force right now."
    )
    system = {
        "role": "system",
        "content": "You are a careful coding agent working in the user's repository. Use the "
        "bash tool to inspect and change files; explain what you do briefly.",
    }
    return SurvivalSession(
        name=f"{domain['svc']}",
        seed=seed,
        tools=_TOOLS,
        messages=[system, *b.messages],
        facts=facts,
        stated_at={value: index + 1 for value, index in b.stated_at.items()},
        tail_start=tail_start + 1,
    )


SESSIONS: tuple[SurvivalSession, ...] = tuple(make_session(v) for v in range(VARIANTS))


# --------------------------------------------------------------------------- replay and score


def message_text(message: Mapping[str, Any]) -> str:
    """A message's content and tool-call arguments, as the model reads them."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        parts.append(f"{call['function']['name']} {call['function']['arguments']}")
    return "\n".join(parts)


def _squash(text: str) -> str:
    return " ".join(text.split())


_WAS = re.compile(r"\(was\b[^()]*\)")


def stale_as_current(text: str, stale: str) -> bool:
    """True when ``stale`` occurs in ``text`` outside every ``(was …)`` parenthesis."""
    return stale in _WAS.sub("", _squash(text))


@dataclass(frozen=True)
class Outcome:
    """One replay: its budget, passes and request sizes, and the facts' score (:func:`score`)."""

    session: str
    budget_ratio: float
    budget_tokens: int
    original_tokens: int
    passes: int
    failed_passes: int
    prune_passes: int
    """Prune passes (no model call) that ran before the summary passes."""
    over_budget: tuple[int, ...]
    """Measured totals above the budget of the requests sent (after every pressure check,
    passes or not), unless the newest unit alone is larger than the budget."""
    final_total: int
    largest_request: int
    """The largest measured total of a request sent."""
    present: dict[str, bool]
    """Fact key → its current value is verbatim in the final request."""
    stale: dict[str, bool]
    """Updated fact key → its stale value is presented as current in a checkpoint."""
    not_found: tuple[str, ...]
    """Planted values ``history_search`` does not find at the message stating them."""
    kinds: dict[str, str]

    @property
    def present_share(self) -> float:
        return sum(self.present.values()) / len(self.present)


def original_tokens(session: SurvivalSession) -> int:
    """The uncompacted request size: every message recorded, measured with TokenMeter."""
    if session.name not in _ORIGINALS:
        with Dashr.create(
            config=CompactionConfig(auto=False), tools=session.tools, in_memory=True
        ) as d:
            d.record_openai(session.messages)
            _ORIGINALS[session.name] = d.measure().total
    return _ORIGINALS[session.name]


_ORIGINALS: dict[str, int] = {}


def budget_config(budget_tokens: int, engine: str = "summary") -> CompactionConfig:
    """The trigger at ``budget_tokens``, a verbatim tail of :data:`RETAIN_SHARE` of it, one
    pass per pressure check (``compaction_retries=0``); ``max_summary_tokens`` left default."""
    return CompactionConfig(
        engine=engine,
        recency_window_tokens=budget_tokens,
        retain_tokens=int(RETAIN_SHARE * budget_tokens),
        compaction_retries=0,
    )


def _passes(d: Dashr) -> tuple[int, int, int]:
    """Summary passes that committed and that failed, and prune passes."""
    ok = failed = pruned = 0
    for event in d.session.events:
        if event.type != "compaction/end":
            continue
        if "pruned" in event.data:
            pruned += 1
        elif "error" in event.data:
            failed += 1
        else:
            ok += 1
    return ok, failed, pruned


def _newest_unit_tokens(d: Dashr) -> int:
    nodes = dict(d.measure().nodes)
    s = d.session
    for unit in reversed(s.units()):
        seqs = s.surface[unit.start : unit.end]
        if all(s.event(q).type == "context/message" for q in seqs):
            continue
        return sum(nodes.get(q, 0) for q in seqs)
    return 0


def replay(
    session: SurvivalSession,
    budget_ratio: float,
    check_from: int | None = None,
    *,
    engine: str = "summary",
    summarizer: str | Summarizer = "extractive",
) -> tuple[Outcome, Dashr]:
    """Replay ``session`` under a budget of ``budget_ratio`` × its uncompacted size.

    Every message is recorded in order; the pressure check (``request_messages()``) runs
    before each model turn (assistant message) at index ``check_from`` or later, and once
    after the last message: that final request is the one scored. ``check_from=None`` checks
    only at the end, so exactly one pass runs. The returned controller is open (in memory).
    """
    original = original_tokens(session)
    budget = int(budget_ratio * original)
    d = Dashr.create(
        config=budget_config(budget, engine),
        summarizer=summarizer,
        tools=session.tools,
        in_memory=True,
    )
    over: list[int] = []
    totals: list[int] = []

    def check() -> list[dict[str, Any]]:
        messages = d.request_messages()
        total = d.measure().total
        totals.append(total)
        if total > budget and _newest_unit_tokens(d) <= budget:
            over.append(total)
        return messages

    start = len(session.messages) if check_from is None else check_from
    for index, message in enumerate(session.messages):
        if message["role"] == "assistant" and index >= start:
            check()
        d.record_openai(message)
    final = check()
    facts = score(d, session, final)
    passes, failed, pruned = _passes(d)
    outcome = Outcome(
        session=session.name,
        budget_ratio=budget_ratio,
        budget_tokens=budget,
        original_tokens=original,
        passes=passes,
        failed_passes=failed,
        prune_passes=pruned,
        over_budget=tuple(over),
        final_total=totals[-1],
        largest_request=max(totals),
        present=facts.present,
        stale=facts.stale,
        not_found=facts.not_found,
        kinds={f.key: f.kind for f in session.facts},
    )
    return outcome, d


@dataclass(frozen=True)
class FactScore:
    present: dict[str, bool]
    stale: dict[str, bool]
    not_found: tuple[str, ...]


def score(d: Dashr, session: SurvivalSession, final: Sequence[Mapping[str, Any]]) -> FactScore:
    """Score the facts of ``session`` in ``final``, the last request of a replay into ``d``.

    * present: the current value occurs verbatim (case kept, whitespace runs read as one
      space) anywhere in the request's text (contents and tool-call arguments).
    * stale: an updated fact's old value occurs in a checkpoint node's text outside every
      ``(was …)`` parenthesis. The verbatim tail may hold old values (it is history as it
      happened, and an update follows them there); the generator never restates an old value
      in its update, so any other occurrence in a checkpoint presents it as current.
    * found: ``history_search(value)`` lists the message that stated the value (by seq).
    """
    text = _squash("\n".join(message_text(m) for m in final))
    s = d.session
    checkpoint_texts = [
        s.event(q).message.text for q in s.surface if checkpoint_of(s.event(q)) is not None
    ]
    seqs = _message_seqs(d)
    return FactScore(
        present={f.key: _squash(f.current) in text for f in session.facts},
        stale={
            f.key: any(stale_as_current(t, f.stale) for t in checkpoint_texts)
            for f in session.facts
            if f.stale is not None
        },
        not_found=tuple(
            value
            for value, index in session.stated_at.items()
            if f"seq {seqs[index]} |" not in str(d.history_search(value, limit=20))
        ),
    )


def _message_seqs(d: Dashr) -> dict[int, int]:
    """Index in the session's messages (system = 0) → seq of the event recording it."""
    out: dict[int, int] = {}
    index = 1
    for event in d.session.events:
        if event.type in ("user/message", "assistant/message", "tool/result") and (
            event.surface_op == "append"  # not a checkpoint, nor a pruned output's new node
            and event.message.source_kind != "synthetic"
        ):
            out[index] = event.seq
            index += 1
    return out


def model_turns(session: SurvivalSession) -> list[int]:
    """Indices of the assistant messages: where a pressure check may run."""
    return [i for i, m in enumerate(session.messages) if m["role"] == "assistant"]


def replay_passes(
    session: SurvivalSession,
    budget_ratio: float,
    passes: int,
    *,
    engine: str = "summary",
    summarizer: str | Summarizer | Callable[[], Summarizer] = "extractive",
) -> tuple[Outcome, Dashr]:
    """A replay in which ``passes`` passes run (1: one check at the end).

    For more, the pressure check runs before every model turn from the latest turn at
    which that gives at least ``passes`` passes (binary search over the model turns; the
    count grows with the number of checks, and the first check after the uncompacted
    prefix always compacts). ``Outcome.passes`` says how many ran.
    """

    def run(check_from: int | None) -> tuple[Outcome, Dashr]:
        made = summarizer() if callable(summarizer) else summarizer
        return replay(session, budget_ratio, check_from, engine=engine, summarizer=made)

    if passes == 1:
        return run(None)
    turns = model_turns(session)
    lo, hi = 0, len(turns) - 1  # invariant: checks from turns[lo] give >= passes (assumed)
    best: tuple[Outcome, Dashr] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        outcome, d = run(turns[mid])
        if outcome.passes + outcome.prune_passes >= passes:
            if best is not None:
                best[1].close()
            best = (outcome, d)
            lo = mid + 1
        else:
            d.close()
            hi = mid - 1
    if best is None:
        return run(turns[0])
    return best
