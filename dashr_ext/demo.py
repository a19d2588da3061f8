'''Deterministic, realistic coding-agent sessions for demos, notebooks and tests.

:func:`demo_messages` returns a list of OpenAI chat-completions messages: a system prompt,
then ``turns`` user requests, each worked through in ``steps_per_turn`` tool-using steps
(one assistant message with exactly one tool call, then its ``tool`` result) and closed by
a text-only assistant message. The story is a coding agent fixing the retry helper of a
small payments service (``RetryPolicy``, ``compute_backoff``, ``retry_call``): it explores
with ``bash``, reads and writes files, runs pytest (a real-looking failing run with a
traceback, then passing runs), is corrected by the user at the start of turn 2, and later
adds tests, documents settings and writes a report with ``run_cell``.

The same arguments always give the same messages: no clock, no I/O, and all variation
comes from ``random.Random(seed)`` (log lines, test names, durations, padding). A different
seed changes the content, never the structure (roles, tool-call ids, message count).
``output_chars`` sets the typical size of a tool result; outputs are padded with more of
what they naturally contain (file lines, test results, log lines, commits), so text grows
with ``output_chars`` and ``turns``. With the defaults the session holds about 70k
characters of text (about 21k tokens), so a recency window of 6000 tokens with 1500
retained compacts it several times. Turns 4 and later are follow-up requests (structured
logging, the policy description, a changelog entry, a jitter test) taken in rotation.
``steps_per_turn`` must be at least 7 and ``output_chars`` at least 200.

Planted facts (:func:`demo_facts`), where they appear verbatim (step numbers are the
``call_<turn>_<step>`` ids with the default ``steps_per_turn=12``; with other values the
same steps keep their order, optional steps are dropped from the end of a turn's plan or
extra exploration or verification steps are inserted at a fixed point after the steps
named below, so with more steps their ids stay the same):

* ``error`` — turn 1 only: the pytest output of step 2 (``call_1_2``: the failing
  ``test_gives_up_after_budget``, whose short traceback runs through
  ``src/payments/retry.py`` with line numbers).
* ``secret_value`` — turn 1 only: the ``cat config/settings.toml`` output of step 6
  (``call_1_6``).
* ``commit`` — turn 1 only: the ``git log`` output of step 7 (``call_1_7``), the config
  refactor that introduced the bug.
* ``magic_number`` — turn 1 only: the ``tail logs/gateway.log`` output of step 8
  (``call_1_8``).
* ``correction`` — the whole text of the user message that opens turn 2, and nowhere else.
* ``config_key`` — first in the turn-2 user correction, then in later edits, tests and docs
  (never in turn 1).
* ``report_path`` — turn 3: the ``run_cell`` code of step 7 (``call_3_7``) that writes the
  report with ``open(..., "w")``, and later steps that read it back.
* ``file`` — the file at the heart of the story; it appears throughout the session.

The first four are the *early* facts: with compaction they end up only in shadowed
originals, so they can be found again only through recall.
'''

from __future__ import annotations

import datetime
import difflib
import json
import random
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEMO_SYSTEM_PROMPT",
    "DEMO_TOOLS",
    "MIN_OUTPUT_CHARS",
    "MIN_STEPS_PER_TURN",
    "demo_facts",
    "demo_messages",
]

MIN_STEPS_PER_TURN = 7
MIN_OUTPUT_CHARS = 200

DEMO_SYSTEM_PROMPT = (
    "You are a careful coding agent working in the Python repository "
    "/home/dev/payments-service (package `payments`, tests under tests/, virtualenv .venv). "
    "Use the tools to inspect and change the code: `bash` runs a shell command in the "
    "repository root, `read_file` and `write_file` read and replace whole files, and "
    "`run_cell` executes Python in a Jupyter kernel whose working directory is the "
    "repository root. Make the smallest change that fixes the problem, run the tests "
    "before you say you are done, and finish each request with a short summary."
)


def _tool(name: str, description: str, params: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
                "required": list(params),
                "additionalProperties": False,
            },
        },
    }


DEMO_TOOLS: list[dict[str, Any]] = [
    _tool(
        "bash",
        "Run a shell command in the repository root; returns stdout and stderr.",
        {"command": "The command line to run."},
    ),
    _tool(
        "read_file",
        "Read a text file; returns its lines numbered from 1.",
        {"path": "Path relative to the repository root."},
    ),
    _tool(
        "write_file",
        "Create or overwrite a text file with the given content.",
        {"path": "Path relative to the repository root.", "content": "The full new content."},
    ),
    _tool(
        "run_cell",
        "Execute Python code in the Jupyter kernel; returns what the cell printed.",
        {"code": "The Python source of the cell."},
    ),
]

# --------------------------------------------------------------------------- planted facts

_ERROR = "AssertionError: expected retry budget 3, got 5"
_FILE = "src/payments/retry.py"
_SECRET = "whsec_test_7Qm2Vx9Lp4KdR"
_COMMIT = "a41c9e2"
_MAGIC = "4711 ms"
_CONFIG_KEY = "retry.max_attempts"
_REPORT = "reports/retry_report.md"
_CORRECTION = (
    "Actually, don't change the public API of RetryPolicy: keep `max_attempts` as the field "
    "and keyword name, other services construct it directly. The production value comes "
    "from the config key retry.max_attempts = 5 in config/settings.toml and that is "
    "intentional. Revert the rename and make the tests use an explicit policy (or their own "
    "settings fixture) instead of the production config. Keep the backoff at 250 ms and the "
    "gateway timeout at 30 s."
)


def demo_facts() -> dict[str, str]:
    """The distinctive literal values planted in :func:`demo_messages` (see the module doc)."""
    return {
        "error": _ERROR,
        "file": _FILE,
        "secret_value": _SECRET,
        "commit": _COMMIT,
        "magic_number": _MAGIC,
        "config_key": _CONFIG_KEY,
        "correction": _CORRECTION,
        "report_path": _REPORT,
    }


# --------------------------------------------------------------------------- project files

_RETRY_V1 = '''"""Retry helper for outbound payment-gateway calls.

The retry budget and the backoff come from config/settings.toml (the keys of
the [retry] table); docs/retry.md explains how operations tune them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from payments.config import Settings, load_settings
from payments.errors import GatewayError, GatewayTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_MS = 250
DEFAULT_MAX_DELAY_MS = 8_000


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry one gateway call."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_ms: int = DEFAULT_BACKOFF_MS
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    jitter: float = 0.1

    @classmethod
    def from_config(cls, settings: Settings | None = None) -> RetryPolicy:
        """Build the policy from the [retry] table of the service settings."""
        section = (settings or load_settings()).get("retry", {})
        return cls(
            max_attempts=int(section.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
            backoff_ms=int(section.get("backoff_ms", DEFAULT_BACKOFF_MS)),
            max_delay_ms=int(section.get("max_delay_ms", DEFAULT_MAX_DELAY_MS)),
        )


def is_retryable(exc: BaseException) -> bool:
    """Timeouts, connection resets and gateway errors whose code is retryable."""
    if isinstance(exc, GatewayTimeout | ConnectionResetError):
        return True
    return isinstance(exc, GatewayError) and GATEWAY_CODES.get(exc.code, False)


def compute_backoff(
    attempt: int, policy: RetryPolicy, rng: random.Random | None = None
) -> float:
    """Delay in seconds before retry number ``attempt`` (1-based), capped and jittered."""
    base = policy.backoff_ms * (2 ** (attempt - 1))
    capped = min(base, policy.max_delay_ms)
    spread = capped * policy.jitter
    draw = rng.uniform if rng is not None else random.uniform
    return (capped + draw(-spread, spread)) / 1000.0


def retry_call(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    on_give_up: Callable[[int], None] | None = None,
) -> T:
    """Call ``fn`` until it succeeds or the retry budget is spent."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            if attempt >= policy.max_attempts:
                log.warning("giving up after %d attempts: %s", attempt, exc)
                if on_give_up is not None:
                    on_give_up(attempt)
                raise
            delay = compute_backoff(attempt, policy)
            log.info("attempt %d failed (%s); retrying in %.3f s", attempt, exc, delay)
            sleep(delay)


# Gateway error codes that are safe to retry (True) or final (False).
GATEWAY_CODES: dict[str, bool] = {
@@CODES@@
}
'''

_TEST_RETRY_V1 = '''"""Tests for payments.retry."""

from __future__ import annotations

import pytest

from payments.config import Settings, load_settings
from payments.errors import GatewayTimeout
from payments.retry import RetryPolicy, compute_backoff, retry_call


def no_sleep(_: float) -> None:
    return None


def always_timeout() -> None:
    raise GatewayTimeout("simulated gateway timeout")


@pytest.fixture
def settings() -> Settings:
    return load_settings()


def test_default_policy_values() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.backoff_ms == 250


def test_first_backoff_is_base_delay() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert compute_backoff(1, policy) == pytest.approx(0.25)


def test_gives_up_after_budget(settings: Settings) -> None:
    policy = RetryPolicy.from_config(settings)

    def on_give_up(attempts: int) -> None:
        assert attempts == 3, f"expected retry budget 3, got {attempts}"

    with pytest.raises(GatewayTimeout):
        retry_call(always_timeout, policy, sleep=no_sleep, on_give_up=on_give_up)


def test_succeeds_on_second_attempt(settings: Settings) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise GatewayTimeout("first call times out")
        return "ok"

    assert retry_call(flaky, RetryPolicy.from_config(settings), sleep=no_sleep) == "ok"
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("policy", "attempt", "expected_ms"),
    [
@@CASES@@
    ],
)
def test_backoff_table(policy: RetryPolicy, attempt: int, expected_ms: int) -> None:
    assert compute_backoff(attempt, policy) * 1000 == pytest.approx(expected_ms)
'''

_TEST_RETRY_V2 = '''"""Tests for payments.retry.

The tests build their policies explicitly; production values (the config key
retry.max_attempts = 5) are checked against a settings file of their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from payments.config import load_settings
from payments.errors import GatewayTimeout
from payments.retry import RetryPolicy, compute_backoff, retry_call

TEST_POLICY = RetryPolicy(max_attempts=3, backoff_ms=250, jitter=0.0)


def no_sleep(_: float) -> None:
    return None


def always_timeout() -> None:
    raise GatewayTimeout("simulated gateway timeout")


def test_default_policy_values() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.backoff_ms == 250


def test_first_backoff_is_base_delay() -> None:
    assert compute_backoff(1, TEST_POLICY) == pytest.approx(0.25)


def test_gives_up_after_budget() -> None:
    def on_give_up(attempts: int) -> None:
        assert attempts == 3, f"expected retry budget 3, got {attempts}"

    with pytest.raises(GatewayTimeout):
        retry_call(always_timeout, TEST_POLICY, sleep=no_sleep, on_give_up=on_give_up)


def test_succeeds_on_second_attempt() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise GatewayTimeout("first call times out")
        return "ok"

    assert retry_call(flaky, TEST_POLICY, sleep=no_sleep) == "ok"
    assert len(calls) == 2


def test_from_config_reads_retry_max_attempts(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("[retry]\\nmax_attempts = 5\\nbackoff_ms = 250\\n")
    policy = RetryPolicy.from_config(load_settings(path))
    assert (policy.max_attempts, policy.backoff_ms) == (5, 250)


@pytest.mark.parametrize(
    ("policy", "attempt", "expected_ms"),
    [
@@CASES@@
    ],
)
def test_backoff_table(policy: RetryPolicy, attempt: int, expected_ms: int) -> None:
    assert compute_backoff(attempt, policy) * 1000 == pytest.approx(expected_ms)
'''

_TEST_BACKOFF = '''"""compute_backoff: the first delay, the doubling and the cap."""

from __future__ import annotations

import random

import pytest

from payments.retry import RetryPolicy, compute_backoff

NO_JITTER = RetryPolicy(max_attempts=5, backoff_ms=250, max_delay_ms=8000, jitter=0.0)


def test_first_delay_is_250_ms() -> None:
    assert compute_backoff(1, NO_JITTER) == pytest.approx(0.250)


@pytest.mark.parametrize(
    ("attempt", "expected_ms"),
    [(2, 500), (3, 1000), (4, 2000), (5, 4000), (6, 8000), (7, 8000), (12, 8000)],
)
def test_doubles_then_caps_at_8000_ms(attempt: int, expected_ms: int) -> None:
    assert compute_backoff(attempt, NO_JITTER) * 1000 == pytest.approx(expected_ms)


def test_jitter_stays_within_ten_percent() -> None:
    policy = RetryPolicy(backoff_ms=250, jitter=0.1)
    rng = random.Random(0)
    delays = [compute_backoff(3, policy, rng) * 1000 for _ in range(100)]
    assert all(900 <= d <= 1100 for d in delays)
'''

_BACKOFF_PARAMS = ["2-500", "3-1000", "4-2000", "5-4000", "6-8000", "7-8000", "12-8000"]

_GATEWAY = '''"""HTTP client for the card gateway: charges, captures and refunds."""

from __future__ import annotations

from typing import Any

import httpx

from payments.config import Settings, load_settings
from payments.errors import GatewayError, GatewayTimeout
from payments.retry import RetryPolicy, retry_call


class GatewayClient:
    """Thin wrapper over the gateway REST API with retries and idempotency keys."""

    def __init__(self, settings: Settings | None = None, policy: RetryPolicy | None = None):
        self.settings = settings or load_settings()
        gateway = self.settings["gateway"]
        self.base_url = gateway["base_url"]
        self.timeout_s = float(gateway.get("timeout_s", 30))
        self.policy = policy or RetryPolicy.from_config(self.settings)
        self._http = httpx.Client(base_url=self.base_url, timeout=self.timeout_s)

    def charge(self, amount_minor: int, currency: str, token: str, key: str) -> dict[str, Any]:
        payload = {"amount": amount_minor, "currency": currency, "source": token}
        return retry_call(lambda: self._post("/charges", payload, key), self.policy)

    def capture(self, charge_id: str, key: str) -> dict[str, Any]:
        return retry_call(lambda: self._post(f"/charges/{charge_id}/capture", {}, key), self.policy)

    def refund(self, charge_id: str, amount_minor: int, key: str) -> dict[str, Any]:
        payload = {"charge": charge_id, "amount": amount_minor}
        return retry_call(lambda: self._post("/refunds", payload, key), self.policy)

    def describe_policy(self) -> str:
        p = self.policy
        backoff = f"backoff {p.backoff_ms} ms"
        return f"{p.max_attempts} attempts, {backoff}, timeout {self.timeout_s:.0f} s"

    def _post(self, path: str, payload: dict[str, Any], key: str) -> dict[str, Any]:
        try:
            response = self._http.post(path, json=payload, headers={"Idempotency-Key": key})
        except httpx.TimeoutException as exc:
            raise GatewayTimeout(str(exc)) from exc
        if response.status_code >= 400:
            body = response.json()
            raise GatewayError(body.get("code", "unknown"), body.get("message", ""))
        result: dict[str, Any] = response.json()
        return result
'''

_CONFIG_PY = '''"""Service settings: config/settings.toml, overridable per environment."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

Settings = dict[str, Any]

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "config" / "settings.toml"


def load_settings(path: str | Path | None = None) -> Settings:
    """Read the TOML settings; PAYMENTS_SETTINGS overrides the default location."""
    target = Path(path or os.environ.get("PAYMENTS_SETTINGS") or DEFAULT_PATH)
    with target.open("rb") as fh:
        data: Settings = tomllib.load(fh)
    return data


def setting(settings: Settings, dotted: str, default: Any = None) -> Any:
    """Look up a dotted key such as "gateway.timeout_s"."""
    node: Any = settings
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node
'''

_SETTINGS = '''# payments-service runtime settings (production defaults; CI and staging override)
[service]
name = "payments-service"
region = "eu-west-1"
log_level = "INFO"

[gateway]
base_url = "https://sandbox.gateway.example.com/v2"
timeout_s = 30
webhook_secret = "@@SECRET@@"  # sandbox signing secret

[retry]
max_attempts = 5
backoff_ms = 250
max_delay_ms = 8000

[ledger]
database_url = "postgresql://payments@localhost:5432/ledger"
batch_size = 200
@@MERCHANTS@@'''

_DOCS_V1 = '''# Retries

Outbound gateway calls go through `payments.retry.retry_call`. It retries timeouts,
connection resets and gateway errors whose code is marked retryable in
`GATEWAY_CODES`, sleeping `compute_backoff(attempt, policy)` seconds in between.

## Settings

The `[retry]` table of `config/settings.toml`:

    max_attempts = 5      # total attempts, including the first call
    backoff_ms = 250      # first delay; doubles on every retry
    max_delay_ms = 8000   # cap for a single delay

## Incident history

| date | incident | what happened | outcome |
|------|----------|---------------|---------|
@@INCIDENTS@@
'''

_DOCS_V2 = '''# Retries

Outbound gateway calls go through `payments.retry.retry_call`. It retries timeouts,
connection resets and gateway errors whose code is marked retryable in
`GATEWAY_CODES`, sleeping `compute_backoff(attempt, policy)` seconds in between.

## Settings

| key | production value | meaning |
|-----|------------------|---------|
| `retry.max_attempts` | 5 | total attempts, including the first call |
| `retry.backoff_ms` | 250 ms | first delay; doubles on every retry |
| `retry.max_delay_ms` | 8000 ms | cap for a single delay |
| `gateway.timeout_s` | 30 s | per-request timeout of the HTTP client |

`RetryPolicy.from_config()` reads these keys; `RetryPolicy(max_attempts=...)` builds a
policy directly and is the public API other services use. The test suite never reads
the production settings: it builds explicit policies (`TEST_POLICY` in
`tests/test_retry.py`) or writes its own settings file.

With the production values a call gives up after 5 attempts and waits
250 + 500 + 1000 + 2000 = 3750 ms (plus or minus 10 % jitter) in between.

## Incident history

| date | incident | what happened | outcome |
|------|----------|---------------|---------|
@@INCIDENTS@@
'''

# --------------------------------------------------------------------------- word pools

_CODE_PREFIXES = [
    "card", "issuer", "acquirer", "network", "threeds", "fx", "ledger", "token",
    "wallet", "bank", "risk", "payout", "mandate", "terminal",
]
_CODE_SUFFIXES = [
    "declined", "timeout", "unavailable", "rate_limited", "expired", "invalid",
    "not_found", "locked", "mismatch", "rejected", "busy", "unreachable", "duplicate",
    "insufficient_funds", "limit_exceeded", "maintenance",
]
_RETRYABLE_SUFFIXES = {
    "timeout", "unavailable", "rate_limited", "locked", "busy", "unreachable", "maintenance",
}
_CURRENCIES = ["eur", "usd", "gbp", "sek", "chf", "pln", "jpy", "nok", "dkk", "czk", "huf", "aud"]
_TEST_MODULES: dict[str, list[str]] = {
    "tests/test_config.py": [
        "test_load_settings_default_path", "test_env_override", "test_dotted_lookup",
        "test_missing_key_returns_default", "test_merchant_sections_parse",
    ],
    "tests/test_gateway.py": [
        "test_charge_succeeds", "test_charge_retries_on_timeout", "test_charge_sends_key",
        "test_capture_after_authorize", "test_refund_partial", "test_refund_rejects_negative",
        "test_error_body_maps_to_gateway_error", "test_describe_policy",
    ],
    "tests/test_idempotency.py": [
        "test_same_key_returns_cached_response", "test_key_expires", "test_conflicting_body",
    ],
    "tests/test_ledger.py": [
        "test_posting_balances", "test_reversal_links_original", "test_batch_flush",
        "test_currency_minor_units", "test_rounding_half_even",
    ],
    "tests/test_webhooks.py": [
        "test_signature_valid", "test_signature_rejects_stale_timestamp",
        "test_event_dispatch", "test_unknown_event_ignored",
    ],
}
_AUTHORS = ["Dana Whitfield", "Ravi Menon", "Sofia Lindqvist", "Tomas Ferreira", "Mei Chen"]
_COMMIT_SUBJECTS = [
    "feat(retry): add jitter to compute_backoff",
    "fix(gateway): treat HTTP 425 as retryable",
    "test: cover refund retries",
    "chore(deps): bump httpx to 0.27",
    "docs: describe the retry settings",
    "refactor(gateway): share one httpx client per process",
    "fix(retry): cap single delays at max_delay_ms",
    "feat(ledger): batch postings",
    "test(retry): table-driven backoff cases",
    "chore: tighten mypy settings",
    "fix(webhooks): reject stale signatures",
    "feat(gateway): idempotency keys on captures",
]
_INCIDENT_WHAT = [
    "acquirer 503 burst", "issuer timeouts during batch run", "DNS failover of the gateway",
    "rate limiting after a deploy", "TLS handshake stalls", "webhook backlog",
    "slow 3DS challenges", "duplicate refunds from client retries",
]
_INCIDENT_OUTCOME = [
    "retries absorbed it", "manual replay of failed charges", "raised max_delay_ms",
    "no customer impact", "added an idempotency check", "alert threshold tuned",
]
_FIXTURE_KINDS = ["charge", "refund", "capture", "webhook", "dispute"]
_ALNUM = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- helpers


def _take(lines: Iterable[str], budget: int) -> list[str]:
    """As many lines as fit in ``budget`` characters (counting newlines)."""
    out: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget:
            break
        out.append(line)
        used += len(line) + 1
    return out


def _numbered(text: str) -> str:
    return "\n".join(f"{i:>5}\t{line}" for i, line in enumerate(text.splitlines(), 1))


def _line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise ValueError(f"{needle!r} not in text")  # pragma: no cover - a bug in the templates


def _rule(title: str, fill: str = "=") -> str:
    return f" {title} ".center(80, fill)


@dataclass(frozen=True)
class _Step:
    say: str
    tool: str
    args: dict[str, str]
    output: str


@dataclass(frozen=True)
class _Plan:
    build: Callable[[], _Step]
    required: bool = False
    fillers_before: bool = False


@dataclass(frozen=True)
class _Task:
    """A follow-up request of turns 4 and later."""

    text: str
    path: str
    needle: str
    change: Callable[[str], str]
    test_files: list[str]
    code: str
    topic: str


@dataclass(frozen=True)
class _Script:
    user: str
    plans: list[_Plan]
    final: Callable[[], str]


class _Demo:
    """One generated session: a random stream, the project's files and the turn scripts."""

    def __init__(self, seed: int, output_chars: int) -> None:
        self.rng = random.Random(seed)
        self.oc = output_chars
        self.minute = 0
        self.last_passed = 0
        self.report_text = ""
        self.files: dict[str, str] = {}
        self._codes = self._codes_block()
        self._cases, self.case_ids = self._cases_block()
        incidents = self._incidents_block()
        self.files = {
            "src/payments/retry.py": _RETRY_V1.replace("@@CODES@@", self._codes),
            "src/payments/gateway.py": _GATEWAY,
            "src/payments/config.py": _CONFIG_PY,
            "tests/test_retry.py": _TEST_RETRY_V1.replace("@@CASES@@", self._cases),
            "config/settings.toml": _SETTINGS.replace("@@SECRET@@", _SECRET).replace(
                "@@MERCHANTS@@", self._merchants_block()
            ),
            "docs/retry.md": _DOCS_V1.replace("@@INCIDENTS@@", incidents),
            "CHANGELOG.md": self._changelog(),
        }
        self._docs_v2 = _DOCS_V2.replace("@@INCIDENTS@@", incidents)
        self.head = dict(self.files)

    # ------------------------------------------------------------------ random pieces

    def budget(self, factor: float = 1.0) -> int:
        return int(self.oc * factor * self.rng.uniform(0.85, 1.15))

    def hex(self, n: int) -> str:
        while True:
            value = "".join(self.rng.choice("0123456789abcdef") for _ in range(n))
            if _COMMIT not in value:
                return value

    def ident(self, prefix: str) -> str:
        return prefix + "_" + "".join(self.rng.choice(_ALNUM) for _ in range(6))

    def seconds(self) -> str:
        return f"{self.rng.uniform(0.4, 3.2):.2f}s"

    def _codes_block(self) -> str:
        combos = [f"{p}_{s}" for p in _CODE_PREFIXES for s in _CODE_SUFFIXES]
        self.rng.shuffle(combos)

        def lines() -> Iterator[str]:
            version = 1
            while True:
                for code in combos:
                    name = code if version == 1 else f"v{version}_{code}"
                    retry = code.split("_", 1)[1] in _RETRYABLE_SUFFIXES
                    yield f'    "{name}": {retry},'
                version += 1

        return "\n".join(_take(lines(), max(200, int(self.oc * 0.45))))

    def _cases_block(self) -> tuple[str, list[str]]:
        bases = list(range(50, 1001, 50))
        caps = [2000, 4000, 8000, 16000]
        combos = [(b, m, a) for b in bases for m in caps for a in range(1, 9)]
        self.rng.shuffle(combos)
        rows: list[str] = []
        ids: list[str] = []
        used = 0
        for i, (b, m, a) in enumerate(combos):
            expected = min(b * 2 ** (a - 1), m)
            policy = f"RetryPolicy(backoff_ms={b}, max_delay_ms={m}, jitter=0.0)"
            row = f"        ({policy}, {a}, {expected}),"
            if used + len(row) + 1 > max(200, int(self.oc * 0.45)):
                break
            rows.append(row)
            ids.append(f"policy{i}-{a}-{expected}")
            used += len(row) + 1
        return "\n".join(rows), ids

    def _incidents_block(self) -> str:
        def lines() -> Iterator[str]:
            month, day, number = 1, 3, self.rng.randint(2100, 2400)
            for year in range(2024, 2100):
                while month <= 12:
                    what = self.rng.choice(_INCIDENT_WHAT)
                    outcome = self.rng.choice(_INCIDENT_OUTCOME)
                    yield f"| {year}-{month:02d}-{day:02d} | INC-{number} | {what} | {outcome} |"
                    number += self.rng.randint(3, 40)
                    day = self.rng.randint(1, 28)
                    month += 1
                month = 1

        return "\n".join(_take(lines(), max(150, int(self.oc * 0.35))))

    def _merchants_block(self) -> str:
        def lines() -> Iterator[str]:
            while True:
                yield ""
                yield f"[merchants.{self.ident('m').lower()}]"
                yield f'currency = "{self.rng.choice(_CURRENCIES).upper()}"'
                yield f"min_charge_minor = {self.rng.choice([50, 100, 200, 500])}"
                yield f"three_ds = {self.rng.choice(['true', 'false'])}"
                yield f"payout_delay_days = {self.rng.randint(1, 7)}"

        return "\n".join(_take(lines(), max(200, int(self.oc * 0.6))))

    def _changelog(self) -> str:
        def lines() -> Iterator[str]:
            major, minor = 2, 14
            while minor > 0:
                yield ""
                yield f"## {major}.{minor}.0"
                for subject in self.rng.sample(_COMMIT_SUBJECTS, self.rng.randint(2, 4)):
                    yield f"- {subject}"
                minor -= 1

        body = "\n".join(_take(lines(), max(300, self.oc)))
        return "# Changelog\n\n## Unreleased\n" + body + "\n"

    # ------------------------------------------------------------------ outputs

    def log_lines(self, logger: str, *, gateway: bool) -> Iterator[str]:
        """An endless, time-ordered stream of plausible service log lines."""
        while True:
            self.minute += 1
            hh, mm = 9 + self.minute // 3600 % 12, self.minute // 60 % 60
            ms = self.rng.randint(0, 999)
            stamp = f"2026-03-14 {hh:02d}:{mm:02d}:{self.minute % 60:02d},{ms:03d}"
            latency = self.rng.randint(40, 2900)
            if gateway:
                kind = self.rng.random()
                charge = self.ident("ch")
                if kind < 0.55:
                    msg = f"charge {charge} attempt=1 status=200 latency {latency} ms"
                elif kind < 0.75:
                    delay = self.rng.choice([250, 500, 1000, 2000])
                    delay += self.rng.randint(-delay // 10, delay // 10)
                    code = self.rng.choice(
                        ["acquirer_unavailable", "network_busy", "issuer_timeout"]
                    )
                    msg = (f"charge {charge} attempt={self.rng.randint(1, 4)} status=502 "
                           f"code={code} latency {latency} ms; retrying in {delay} ms")
                    yield f"{stamp} WARNING payments.gateway {msg}"
                    continue
                elif kind < 0.9:
                    msg = f"refund {self.ident('re')} status=200 latency {latency} ms"
                else:
                    msg = f"webhook {self.ident('evt')} delivered in {latency} ms"
                yield f"{stamp} INFO    {logger} {msg}"
            else:
                job = self.ident("job")
                what = self.rng.choice(
                    ["settle batch", "payout run", "ledger flush", "dispute sync", "fx refresh"]
                )
                yield f"{stamp} INFO    {logger} {what} {job} finished in {latency} ms"

    def test_ids(self, modules: list[str]) -> Iterator[str]:
        """Endless unique passing test node ids from ``modules``."""
        names = {m: self.rng.sample(_TEST_MODULES[m], len(_TEST_MODULES[m])) for m in modules}
        for i in range(max(len(v) for v in names.values())):
            for m in modules:
                if i < len(names[m]):
                    yield f"{m}::{names[m][i]}"
        k = 0
        while True:
            for m in modules:
                for name in names[m]:
                    cur = _CURRENCIES[k % len(_CURRENCIES)]
                    amount = [199, 250, 1000, 1999, 5000, 12500, 99999][k // len(_CURRENCIES) % 7]
                    yield f"{m}::{name}[{cur}-{amount}-{k}]"
            k += 1

    def nodeids(self, path: str) -> list[str]:
        """The test node ids of a test file in its current state."""
        text = self.files[path]
        out: list[str] = []
        for name in re.findall(r"^def (test_\w+)", text, flags=re.MULTILINE):
            if name == "test_backoff_table":
                out.extend(f"{path}::{name}[{i}]" for i in self.case_ids)
            elif name == "test_doubles_then_caps_at_8000_ms":
                out.extend(f"{path}::{name}[{p}]" for p in _BACKOFF_PARAMS)
            else:
                out.append(f"{path}::{name}")
        return out

    def pytest(
        self,
        command: str,
        core: list[tuple[str, str]],
        extra_modules: list[str],
        budget: int,
        *,
        failures: str = "",
        summary: list[str] | None = None,
    ) -> str:
        """A verbose pytest run: ``core`` results plus ~``budget`` characters of other tests."""
        header = [
            "$ " + command,
            _rule("test session starts"),
            "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0 -- "
            "/home/dev/payments-service/.venv/bin/python",
            "cachedir: .pytest_cache",
            "rootdir: /home/dev/payments-service",
            "configfile: pyproject.toml",
            "plugins: hypothesis-6.103.1",
        ]
        room = max(budget - sum(len(x) + 1 for x in header) - len(failures) - 200, 80 * 6)
        extras = (
            _take((f"{n} PASSED".ljust(79) for n in self.test_ids(extra_modules)), room)
            if extra_modules
            else []
        )
        results = list(core) + [(line.split(" PASSED")[0], "PASSED") for line in extras]
        skipped = set()
        for i in range(len(core), len(results)):
            if self.rng.random() < 0.04:
                skipped.add(i)
        order = sorted(range(len(results)), key=lambda i: results[i][0].split("::")[0])
        total = len(results)
        lines = [*header, f"collected {total} items", ""]
        counts = {"failed": 0, "passed": 0, "skipped": 0}
        for done, i in enumerate(order, 1):
            node, status = results[i]
            if i in skipped:
                status = "SKIPPED (needs gateway sandbox credentials)"
            key = status.split()[0].lower()
            counts[key] += 1
            text = f"{node} {status}"
            text = text.ljust(73) if len(text) < 73 else text + " "
            lines.append(f"{text}[{done * 100 // total:3d}%]")
        if failures:
            lines += ["", _rule("FAILURES"), failures.rstrip("\n")]
        if summary:
            lines += [_rule("short test summary info"), *summary]
        parts = [f"{counts[k]} {k}" for k in ("failed", "passed", "skipped") if counts[k]]
        self.last_passed = counts["passed"]
        lines.append(_rule(f"{', '.join(parts)} in {self.seconds()}"))
        return "\n".join(lines)

    def grep(self, needle: str, roots: list[str]) -> list[str]:
        hits: list[str] = []
        for path in sorted(self.files):
            if not any(path.startswith(r) for r in roots):
                continue
            for i, line in enumerate(self.files[path].splitlines(), 1):
                if needle in line:
                    hits.append(f"{path}:{i}:{line}")
        return hits

    def read(self, path: str, say: str) -> _Step:
        return _Step(say, "read_file", {"path": path}, _numbered(self.files[path]))

    def write(self, path: str, content: str, say: str) -> _Step:
        self.files[path] = content
        return _Step(
            say,
            "write_file",
            {"path": path, "content": content},
            f"Wrote {len(content.encode())} bytes to {path}",
        )

    def _diff_lines(self, path: str) -> list[str]:
        if path not in self.head:  # untracked: git diff shows nothing
            return []
        old, new = self.head[path], self.files.get(path, "")
        return list(
            difflib.unified_diff(
                old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm="", n=2
            )
        )

    def diff(self, *paths: str) -> str:
        """``git diff -- paths`` against the files as they were at the start of the session."""
        out: list[str] = []
        for path in paths:
            lines = self._diff_lines(path)
            if lines:
                index = f"index {self.hex(7)}..{self.hex(7)} 100644"
                out += [f"diff --git a/{path} b/{path}", index, *lines]
        return "\n".join(out)

    def diffstat(self) -> str:
        """``git diff --stat`` against the start of the session (tracked files only)."""
        rows: list[tuple[str, int, int]] = []
        for path in sorted(self.head):
            lines = self._diff_lines(path)[2:]
            plus = sum(1 for x in lines if x.startswith("+"))
            minus = sum(1 for x in lines if x.startswith("-"))
            if plus or minus:
                rows.append((path, plus, minus))
        if not rows:
            return ""
        width = max(len(p) for p, _, _ in rows)
        out = [f" {p.ljust(width)} | {a + d:>3} {'+' * a}{'-' * d}" for p, a, d in rows]
        adds, dels = sum(r[1] for r in rows), sum(r[2] for r in rows)
        out.append(
            f" {len(rows)} file{'s' if len(rows) > 1 else ''} changed, "
            f"{adds} insertions(+), {dels} deletions(-)"
        )
        return "\n".join(out)

    def bash(self, say: str, command: str, output: str) -> _Step:
        return _Step(say, "bash", {"command": command}, output)

    def cell(self, say: str, code: str, output: str) -> _Step:
        return _Step(say, "run_cell", {"code": code}, output)

    # ------------------------------------------------------------------ fillers

    def filler(self) -> _Step:
        """An exploration or verification step that plants no fact."""
        kind = self.rng.randrange(6)
        if kind == 0:
            return self.read(
                "src/payments/gateway.py", "Checking how the gateway client uses the policy."
            )
        if kind == 1:
            return self.read("src/payments/config.py", "Looking at how settings are loaded.")
        if kind == 2:
            cmd = ".venv/bin/pytest tests/test_gateway.py -v"
            return self.bash(
                "Running the gateway tests to make sure nothing else moved.",
                cmd,
                self.pytest(cmd, [], ["tests/test_gateway.py"], self.budget()),
            )
        if kind == 3:
            hits = self.grep("RetryPolicy", ["src/", "tests/"])
            return self.bash(
                "Listing every place that constructs or mentions RetryPolicy.",
                'grep -rn "RetryPolicy" src tests',
                "\n".join(_take(hits, max(self.budget(), 400))),
            )
        if kind == 4:
            lines = _take(self.log_lines("payments.worker", gateway=False), self.budget())
            return self.bash(
                "Checking the worker log for anything retry related.",
                f"tail -n {len(lines)} logs/worker.log",
                "\n".join(lines),
            )
        seed = self.rng.randint(0, 99)
        rng = random.Random(seed)
        values = []
        for attempt in range(1, 6):
            capped = min(250 * 2 ** (attempt - 1), 8000)
            values.append(round((capped + rng.uniform(-capped * 0.1, capped * 0.1)) / 1000, 3))
        code = (
            "import random\n"
            "from payments.retry import RetryPolicy, compute_backoff\n\n"
            f"rng = random.Random({seed})\n"
            "print([round(compute_backoff(a, RetryPolicy(), rng), 3) for a in range(1, 6)])"
        )
        return self.cell("Sampling a few jittered delays from compute_backoff.", code, str(values))

    # ------------------------------------------------------------------ turn 1

    def turn1(self) -> _Script:
        retry_v1 = self.files["src/payments/retry.py"]
        test_v1 = self.files["tests/test_retry.py"]

        def ls() -> _Step:
            sections = [
                ".:\nCHANGELOG.md\nREADME.md\nconfig\ndocs\nlogs\npyproject.toml\nsrc\ntests",
                "./config:\nsettings.toml",
                "./docs:\nretry.md\nwebhooks.md",
                "./logs:\ngateway.log\nworker.log",
                "./src:\npayments",
                "./src/payments:\n__init__.py\nconfig.py\nerrors.py\ngateway.py\nledger.py\n"
                "retry.py\nwebhooks.py",
                "./tests:\nconftest.py\nfixtures\ntest_config.py\ntest_gateway.py\n"
                "test_idempotency.py\ntest_ledger.py\ntest_retry.py\ntest_webhooks.py",
            ]
            core = "\n\n".join(sections)

            def names() -> Iterator[str]:
                seen: set[str] = set()
                while True:
                    kind = self.rng.choice(_FIXTURE_KINDS)
                    cur, n = self.rng.choice(_CURRENCIES), self.rng.randint(1, 999)
                    name = f"{kind}_{cur}_{n:04d}.json"
                    if name not in seen:
                        seen.add(name)
                        yield name

            fixtures = sorted(_take(names(), max(100, self.budget() - len(core))))
            return self.bash(
                "Let me get an overview of the repository first.",
                "ls -R src tests config docs logs",
                core + "\n\n./tests/fixtures:\n" + "\n".join(fixtures),
            )

        def failing_run() -> _Step:
            call = _line_of(test_v1, "retry_call(always_timeout, policy")
            check = _line_of(test_v1, "assert attempts == 3")
            give_up = _line_of(retry_v1, "on_give_up(attempt)")
            warn = _line_of(retry_v1, 'log.warning("giving up')
            failures = "\n".join([
                _rule("test_gives_up_after_budget", "_"),
                f"tests/test_retry.py:{call}: in test_gives_up_after_budget",
                "    retry_call(always_timeout, policy, sleep=no_sleep, on_give_up=on_give_up)",
                f"{_FILE}:{give_up}: in retry_call",
                "    on_give_up(attempt)",
                f"tests/test_retry.py:{check}: in on_give_up",
                '    assert attempts == 3, f"expected retry budget 3, got {attempts}"',
                f"E   {_ERROR}",
                "E   assert 5 == 3",
                _rule("Captured log call", "-"),
                f"WARNING  payments.retry:retry.py:{warn} giving up after 5 attempts: "
                "simulated gateway timeout",
            ])
            node = "tests/test_retry.py::test_gives_up_after_budget"
            core = [
                (n, "FAILED" if n == node else "PASSED")
                for n in self.nodeids("tests/test_retry.py")
            ]
            cmd = ".venv/bin/pytest -v --tb=short"
            out = self.pytest(
                cmd,
                core,
                ["tests/test_config.py", "tests/test_gateway.py", "tests/test_ledger.py"],
                self.budget(1.3),
                failures=failures,
                summary=[f"FAILED {node} - {_ERROR}"],
            )
            return self.bash("Running the test suite to see the failure.", cmd, out)

        def read_test() -> _Step:
            return self.read("tests/test_retry.py", "Reading the failing test.")

        def read_retry() -> _Step:
            return self.read(_FILE, "Now the retry helper, RetryPolicy and compute_backoff.")

        def grep() -> _Step:
            hits = self.grep("max_attempts", ["src/", "tests/", "docs/", "config/"])
            return self.bash(
                "Where does max_attempts come from?",
                'grep -rn "max_attempts" src tests docs config',
                "\n".join(hits),
            )

        def settings() -> _Step:
            return self.bash(
                "The policy is built from the settings file; checking its values.",
                "cat config/settings.toml",
                self.files["config/settings.toml"],
            )

        def git_log() -> _Step:
            lines = [
                f"{_COMMIT} 2026-03-13 Dana Whitfield  refactor(config): load the retry policy "
                "from config/settings.toml",
                "",
                f" {_FILE}      | 18 +++++++++-------",
                " config/settings.toml       |  5 +++++",
                " 2 files changed, 16 insertions(+), 7 deletions(-)",
            ]
            core = "\n".join(lines)

            def older() -> Iterator[str]:
                day = datetime.date(2026, 3, 13)
                while True:
                    day -= datetime.timedelta(days=self.rng.randint(2, 9))
                    ins, dels = self.rng.randint(1, 60), self.rng.randint(0, 30)
                    path = self.rng.choice([_FILE, "tests/test_retry.py", "config/settings.toml"])
                    yield (
                        f"\n{self.hex(7)} {day.isoformat()} "
                        f"{self.rng.choice(_AUTHORS)}  {self.rng.choice(_COMMIT_SUBJECTS)}\n\n"
                        f" {path} | {ins + dels} {'+' * min(ins, 20)}{'-' * min(dels, 10)}\n"
                        f" 1 file changed, {ins} insertions(+), {dels} deletions(-)"
                    )

            out = core + "\n" + "\n".join(_take(older(), max(0, self.budget() - len(core))))
            return self.bash(
                "When did this start? Checking recent history of the retry code and settings.",
                "git log --date=short --format='%h %ad %an  %s' --stat -- "
                f"{_FILE} config/settings.toml tests/test_retry.py",
                out.rstrip("\n"),
            )

        def log_tail() -> _Step:
            budget = self.budget()
            stream = self.log_lines("payments.gateway", gateway=True)
            before = _take(stream, budget // 2)
            self.minute += 1
            stamp = f"2026-03-14 {9 + self.minute // 3600 % 12:02d}:{self.minute // 60 % 60:02d}:"
            fact = (
                f"{stamp}{self.minute % 60:02d},552 WARNING payments.retry giving up on charge "
                f"ch_5VtPq1 after 5 attempts (elapsed {_MAGIC}, gateway timeout 30 s)"
            )
            after = _take(stream, budget - budget // 2 - len(fact))
            lines = [*before, fact, *after]
            return self.bash(
                "Production logs should show how many attempts a real call makes.",
                f"tail -n {len(lines)} logs/gateway.log",
                "\n".join(lines),
            )

        def rename() -> _Step:
            new = (
                self.files[_FILE]
                .replace("DEFAULT_MAX_ATTEMPTS", "DEFAULT_BUDGET")
                .replace("max_attempts: int = DEFAULT_BUDGET", "budget: int = DEFAULT_BUDGET")
                .replace(
                    'max_attempts=int(section.get("max_attempts", DEFAULT_BUDGET))',
                    'budget=int(section.get("budget", DEFAULT_BUDGET))',
                )
                .replace("attempt >= policy.max_attempts", "attempt >= policy.budget")
            )
            return self.write(
                _FILE,
                new,
                "The tests speak of a retry budget of 3 while from_config() now picks up "
                "max_attempts = 5 from the settings. I will rename the field to `budget`, read "
                "from an optional [retry] budget key that defaults to 3.",
            )

        def sed() -> _Step:
            gw = self.files["src/payments/gateway.py"]
            self.files["src/payments/gateway.py"] = gw.replace("p.max_attempts", "p.budget")
            tr = self.files["tests/test_retry.py"]
            self.files["tests/test_retry.py"] = tr.replace("policy.max_attempts", "policy.budget")
            hits = self.grep("budget", ["src/payments/gateway.py", "tests/test_retry.py"])
            return self.bash(
                "Updating the call sites that read the old attribute.",
                "sed -i 's/p\\.max_attempts/p.budget/' src/payments/gateway.py && "
                "sed -i 's/policy\\.max_attempts/policy.budget/' tests/test_retry.py && "
                'grep -n "budget" src/payments/gateway.py tests/test_retry.py',
                "\n".join(hits),
            )

        def passing_run() -> _Step:
            cmd = ".venv/bin/pytest tests/test_retry.py tests/test_gateway.py -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            out = self.pytest(cmd, core, ["tests/test_gateway.py"], self.budget())
            return self.bash("Re-running the retry and gateway tests.", cmd, out)

        def full_run() -> _Step:
            cmd = ".venv/bin/pytest -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            mods = ["tests/test_config.py", "tests/test_gateway.py", "tests/test_idempotency.py",
                    "tests/test_ledger.py", "tests/test_webhooks.py"]
            out = self.pytest(cmd, core, mods, self.budget(1.6))
            return self.bash("And the whole suite once more.", cmd, out)

        def final() -> str:
            return (
                "The retry tests pass again. Root cause: yesterday's config refactor made "
                "`RetryPolicy.from_config()` read `config/settings.toml`, which sets "
                "`max_attempts = 5`, while `test_gives_up_after_budget` expects the default budget "
                "of 3. I renamed `RetryPolicy.max_attempts` to `budget` (read from an optional "
                "`[retry] budget` key, default 3) and updated the call sites in "
                "`src/payments/gateway.py` and `tests/test_retry.py`. Backoff is unchanged "
                f"(250 ms, doubling, capped at 8000 ms). Last test run: {self.last_passed} passed."
            )

        return _Script(
            "Fix the failing retry tests in tests/test_retry.py. CI has been red since "
            "yesterday's config refactor. Find the root cause, fix it and run the tests.",
            [
                _Plan(ls),
                _Plan(failing_run, required=True),
                _Plan(read_test),
                _Plan(read_retry),
                _Plan(grep),
                _Plan(settings, required=True),
                _Plan(git_log, required=True),
                _Plan(log_tail, required=True),
                _Plan(rename, required=True, fillers_before=True),
                _Plan(sed, required=True),
                _Plan(passing_run, required=True),
                _Plan(full_run),
            ],
            final,
        )

    # ------------------------------------------------------------------ turn 2

    def turn2(self) -> _Script:
        def read_renamed() -> _Step:
            return self.read(_FILE, "Understood. Let me look at the file as I left it.")

        def restore() -> _Step:
            new = _RETRY_V1.replace("@@CODES@@", self._codes).replace(
                '        """Build the policy from the [retry] table of the service settings."""',
                '        """Build the policy from the settings: keys retry.max_attempts,\n'
                '        retry.backoff_ms and retry.max_delay_ms (defaults 3, 250, 8000)."""',
            )
            return self.write(
                _FILE,
                new,
                "Restoring the public API: RetryPolicy keeps `max_attempts`, and from_config() "
                f"documents the {_CONFIG_KEY} key it reads.",
            )

        def revert_sed() -> _Step:
            gw = self.files["src/payments/gateway.py"]
            self.files["src/payments/gateway.py"] = gw.replace("p.budget", "p.max_attempts")
            tr = self.files["tests/test_retry.py"]
            self.files["tests/test_retry.py"] = tr.replace("policy.budget", "policy.max_attempts")
            return self.bash(
                "Reverting the call-site edits as well.",
                "sed -i 's/p\\.budget/p.max_attempts/' src/payments/gateway.py && "
                "sed -i 's/policy\\.budget/policy.max_attempts/' tests/test_retry.py && "
                "git diff --stat",
                self.diffstat(),
            )

        def grep_budget() -> _Step:
            hits = self.grep("budget", ["src/", "tests/"])
            return self.bash(
                "Making sure no `budget` attribute is left over.",
                'grep -rn "budget" src tests',
                "\n".join(hits),
            )

        def read_tests() -> _Step:
            return self.read(
                "tests/test_retry.py",
                "Now the tests: they should not read the production settings.",
            )

        def write_tests() -> _Step:
            new = _TEST_RETRY_V2.replace("@@CASES@@", self._cases)
            return self.write(
                "tests/test_retry.py",
                new,
                "The tests now use an explicit TEST_POLICY with max_attempts=3, and a new test "
                f"checks that {_CONFIG_KEY} = 5 is read from a settings file.",
            )

        def run_retry() -> _Step:
            cmd = ".venv/bin/pytest tests/test_retry.py tests/test_gateway.py -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            return self.bash(
                "Running the retry and gateway tests.",
                cmd,
                self.pytest(cmd, core, ["tests/test_gateway.py"], self.budget()),
            )

        def run_all() -> _Step:
            cmd = ".venv/bin/pytest -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            mods = ["tests/test_config.py", "tests/test_idempotency.py", "tests/test_ledger.py",
                    "tests/test_webhooks.py"]
            return self.bash("Full suite.", cmd, self.pytest(cmd, core, mods, self.budget(1.6)))

        def mypy() -> _Step:
            return self.bash(
                "Type-checking the package.",
                ".venv/bin/mypy src",
                "Success: no issues found in 7 source files",
            )

        def ruff() -> _Step:
            return self.bash("Lint.", ".venv/bin/ruff check src tests", "All checks passed!")

        def show_diff() -> _Step:
            text = self.diff(_FILE, "tests/test_retry.py")
            return self.bash(
                "Reviewing the final diff of the two files.",
                f"git diff -- {_FILE} tests/test_retry.py",
                "\n".join(_take(text.strip("\n").splitlines(), max(self.budget(1.2), 600))),
            )

        def status() -> _Step:
            return self.bash(
                "Checking the working tree.",
                "git status --short",
                f" M {_FILE}\n M tests/test_retry.py",
            )

        def final() -> str:
            return (
                "Done. I reverted the rename: `RetryPolicy` keeps `max_attempts` and "
                f"`from_config()` reads the {_CONFIG_KEY} key unchanged (5 in production). "
                "The tests no longer read `config/settings.toml`: they use an explicit "
                "`TEST_POLICY = RetryPolicy(max_attempts=3, backoff_ms=250, jitter=0.0)`, and "
                f"`test_from_config_reads_retry_max_attempts` checks that {_CONFIG_KEY} = 5 is "
                "picked up from a settings file. Backoff stays 250 ms and the gateway timeout "
                f"30 s. The suite passes ({self.last_passed} passed)."
            )

        return _Script(
            _CORRECTION,
            [
                _Plan(read_renamed),
                _Plan(restore, required=True, fillers_before=True),
                _Plan(revert_sed, required=True),
                _Plan(grep_budget),
                _Plan(read_tests),
                _Plan(write_tests, required=True),
                _Plan(run_retry, required=True),
                _Plan(run_all),
                _Plan(mypy),
                _Plan(ruff),
                _Plan(show_diff),
                _Plan(status),
            ],
            final,
        )

    # ------------------------------------------------------------------ turn 3

    def turn3(self) -> _Script:
        rows: list[tuple[int, list[int]]] = []

        def read_docs() -> _Step:
            return self.read("docs/retry.md", "Reading the current retry documentation.")

        def schedule() -> _Step:
            count = max(3, self.budget() // 75)
            stop = 50 * (count + 1)
            for base in range(50, stop, 50):
                rows.append((base, [min(base * 2 ** (a - 1), 8000) for a in range(1, 9)]))
            code = (
                "from payments.retry import RetryPolicy, compute_backoff\n\n"
                "print(RetryPolicy.from_config())\n"
                f"for base in range(50, {stop}, 50):\n"
                "    policy = RetryPolicy(backoff_ms=base, jitter=0.0)\n"
                "    delays = [round(compute_backoff(a, policy) * 1000) for a in range(1, 9)]\n"
                '    print(f"{base:>5} ms | " + " ".join(f"{d:>5}" for d in delays))'
            )
            out = ["RetryPolicy(max_attempts=5, backoff_ms=250, max_delay_ms=8000, jitter=0.1)"]
            out += [f"{b:>5} ms | " + " ".join(f"{d:>5}" for d in ds) for b, ds in rows]
            return self.cell(
                "First the actual backoff schedule, so the test and docs use real numbers.",
                code,
                "\n".join(out),
            )

        def write_test() -> _Step:
            return self.write(
                "tests/test_backoff.py",
                _TEST_BACKOFF,
                "Adding tests for the first delay (250 ms), the doubling and the 8000 ms cap.",
            )

        def run_test() -> _Step:
            cmd = ".venv/bin/pytest tests/test_backoff.py tests/test_retry.py -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_backoff.py")]
            core += [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            return self.bash("Running the new tests.", cmd, self.pytest(cmd, core, [], 0))

        def write_docs() -> _Step:
            return self.write(
                "docs/retry.md",
                self._docs_v2,
                "Documenting the settings as a table with their full config keys and units.",
            )

        def grep_docs() -> _Step:
            hits = self.grep("retry.", ["docs/retry.md"])
            return self.bash(
                "Checking the keys in the docs match the code.",
                'grep -n "retry\\." docs/retry.md',
                "\n".join(hits),
            )

        def report() -> _Step:
            table = "\n".join(
                f"| {b} ms | " + " | ".join(str(d) for d in ds[:5]) + " |" for b, ds in rows
            )
            self.report_text = (
                "# Retry fix report\n\n"
                "## What broke\n\n"
                "The config refactor made `RetryPolicy.from_config()` read the production "
                "settings, so the retry tests saw 5 attempts instead of 3.\n\n"
                "## What changed\n\n"
                "- `RetryPolicy` keeps its public API (`max_attempts`).\n"
                f"- Production keeps `{_CONFIG_KEY} = 5`, backoff 250 ms, cap 8000 ms, "
                "gateway timeout 30 s.\n"
                "- Tests build explicit policies; `tests/test_backoff.py` covers the schedule.\n"
                "- `docs/retry.md` documents every key.\n\n"
                "## Backoff schedule (ms, no jitter)\n\n"
                "| base | 1 | 2 | 3 | 4 | 5 |\n|------|---|---|---|---|---|\n" + table + "\n"
            )
            code = (
                "from pathlib import Path\n\n"
                f'report = """\\\n{self.report_text}"""\n'
                'Path("reports").mkdir(exist_ok=True)\n'
                f'with open("{_REPORT}", "w") as fh:\n'
                "    fh.write(report)\n"
                f'print(f"wrote {{len(report)}} characters to {_REPORT}")'
            )
            self.files[_REPORT] = self.report_text
            return self.cell(
                "Writing the report from the kernel.",
                code,
                f"wrote {len(self.report_text)} characters to {_REPORT}",
            )

        def cat_report() -> _Step:
            return self.bash("Checking the report on disk.", f"cat {_REPORT}", self.report_text)

        def run_all() -> _Step:
            cmd = ".venv/bin/pytest -v"
            core = [(n, "PASSED") for n in self.nodeids("tests/test_backoff.py")]
            core += [(n, "PASSED") for n in self.nodeids("tests/test_retry.py")]
            mods = ["tests/test_config.py", "tests/test_gateway.py", "tests/test_webhooks.py"]
            return self.bash("Full suite.", cmd, self.pytest(cmd, core, mods, self.budget(1.6)))

        def ruff() -> _Step:
            return self.bash(
                "Lint the new test file.", ".venv/bin/ruff check tests/test_backoff.py",
                "All checks passed!",
            )

        def sanity() -> _Step:
            code = (
                "from payments.gateway import GatewayClient\n\n"
                "print(GatewayClient().describe_policy())"
            )
            return self.cell(
                "A last sanity check of what production will use.",
                code,
                "5 attempts, backoff 250 ms, timeout 30 s",
            )

        def status() -> _Step:
            return self.bash(
                "Working tree.",
                "git status --short",
                f" M docs/retry.md\n M {_FILE}\n M tests/test_retry.py\n"
                f"?? {_REPORT}\n?? tests/test_backoff.py",
            )

        def final() -> str:
            return (
                "All three done: `tests/test_backoff.py` pins the first delay (250 ms), the "
                "doubling and the 8000 ms cap; `docs/retry.md` now has a settings table with "
                f"{_CONFIG_KEY}, retry.backoff_ms, retry.max_delay_ms and gateway.timeout_s; and "
                f"the report is in `{_REPORT}`. Suite: {self.last_passed} passed."
            )

        return _Script(
            "Good, thanks. Now: add a test that compute_backoff starts at 250 ms and caps at "
            "8000 ms, document the retry settings in docs/retry.md, and use run_cell to write "
            "a short markdown report of this fix under reports/.",
            [
                _Plan(read_docs),
                _Plan(schedule, required=True),
                _Plan(write_test, required=True),
                _Plan(run_test, required=True),
                _Plan(write_docs, required=True),
                _Plan(grep_docs),
                _Plan(report, required=True),
                _Plan(cat_report, fillers_before=True),
                _Plan(run_all),
                _Plan(ruff),
                _Plan(sanity),
                _Plan(status),
            ],
            final,
        )

    # ------------------------------------------------------------------ later turns

    def later_turn(self, turn: int) -> _Script:
        tasks = [
            _Task(
                "Add structured logging to retry_call: pass attempt and delay_ms as `extra` "
                "fields so the log pipeline can chart them. Keep the message text unchanged.",
                _FILE,
                "log.",
                lambda t: t.replace(
                    'log.info("attempt %d failed (%s); retrying in %.3f s", attempt, exc, delay)',
                    'log.info(\n                "attempt %d failed (%s); retrying in %.3f s",'
                    "\n                attempt,\n                exc,\n                delay,"
                    '\n                extra={"attempt": attempt, "delay_ms": round(delay * 1000)},'
                    "\n            )",
                ),
                ["tests/test_retry.py", "tests/test_backoff.py"],
                "import logging\nfrom payments.retry import RetryPolicy, retry_call\n"
                "from payments.errors import GatewayTimeout\n\n"
                "records = []\nhandler = logging.Handler()\nhandler.emit = records.append\n"
                'logging.getLogger("payments.retry").addHandler(handler)\n'
                'logging.getLogger("payments.retry").setLevel(logging.INFO)\n'
                "def boom():\n    raise GatewayTimeout('simulated')\n"
                "try:\n    retry_call(boom, RetryPolicy(max_attempts=3), sleep=lambda s: None)\n"
                "except GatewayTimeout:\n    pass\n"
                "print([(r.levelname, getattr(r, 'attempt', None), getattr(r, 'delay_ms', None))"
                " for r in records])",
                "structured logging",
            ),
            _Task(
                "Make GatewayClient.describe_policy() also show the delay cap, like "
                "'5 attempts, backoff 250 ms (max 8000 ms), timeout 30 s'.",
                "src/payments/gateway.py",
                "describe_policy",
                lambda t: t.replace(
                    'backoff = f"backoff {p.backoff_ms} ms"',
                    'backoff = f"backoff {p.backoff_ms} ms (max {p.max_delay_ms} ms)"',
                ),
                ["tests/test_gateway.py"],
                "from payments.gateway import GatewayClient\n\n"
                "print(GatewayClient().describe_policy())",
                "the policy description",
            ),
            _Task(
                "Add a CHANGELOG.md entry for the retry fix under Unreleased.",
                "CHANGELOG.md",
                "Unreleased",
                lambda t: t.replace(
                    "## Unreleased\n",
                    "## Unreleased\n\n- fix(retry): tests use explicit policies; "
                    f"{_CONFIG_KEY} stays 5 in production\n"
                    "- test: backoff schedule and 8000 ms cap\n- docs: retry settings table\n",
                    1,
                ),
                ["tests/test_retry.py"],
                'print(open("CHANGELOG.md").read()[:300])',
                "the changelog",
            ),
            _Task(
                "Add a test to tests/test_backoff.py that 200 seeded jittered delays for "
                "attempt 1 stay within 225-275 ms.",
                "tests/test_backoff.py",
                "def test_",
                lambda t: t
                + "\n\ndef test_first_delay_jitter_bounds() -> None:\n"
                "    rng = random.Random(42)\n"
                "    policy = RetryPolicy(backoff_ms=250, jitter=0.1)\n"
                "    delays = [compute_backoff(1, policy, rng) * 1000 for _ in range(200)]\n"
                "    assert min(delays) >= 225 and max(delays) <= 275\n",
                ["tests/test_backoff.py"],
                "import random\nfrom payments.retry import RetryPolicy, compute_backoff\n\n"
                "rng = random.Random(42)\n"
                "delays = [compute_backoff(1, RetryPolicy(), rng) * 1000 for _ in range(200)]\n"
                'print(f"min {min(delays):.1f} ms, max {max(delays):.1f} ms")',
                "the jitter bounds",
            ),
        ]
        index = (turn - 4) % len(tasks)
        rounds = (turn - 4) // len(tasks)
        task = tasks[index]
        path, needle, change, test_files, code, topic = (
            task.path, task.needle, task.change, task.test_files, task.code, task.topic
        )
        user = task.text
        if rounds:
            user += f" (Pass {rounds + 1}: re-check it against the current code.)"

        def read() -> _Step:
            return self.read(path, f"Reading {path} before changing it.")

        def grep() -> _Step:
            hits = self.grep(needle, ["src/", "tests/", "CHANGELOG.md"])
            return self.bash(
                f"Where else is {needle.strip('.')} used?",
                f'grep -rn "{needle}" src tests CHANGELOG.md',
                "\n".join(_take(hits, max(self.budget(), 400))) or "(no matches)",
            )

        def write() -> _Step:
            old = self.files.get(path, "")
            return self.write(path, change(old), f"Applying the change for {topic}.")

        def run_tests() -> _Step:
            cmd = ".venv/bin/pytest " + " ".join(test_files) + " -v"
            core = [(n, "PASSED") for f in test_files if f in self.files for n in self.nodeids(f)]
            extra = [f for f in test_files if f in _TEST_MODULES]
            return self.bash("Running the affected tests.", cmd,
                             self.pytest(cmd, core, extra, self.budget()))

        def cell() -> _Step:
            outputs = {
                0: "[('INFO', 1, 263), ('INFO', 2, 488), ('WARNING', None, None)]",
                1: "5 attempts, backoff 250 ms (max 8000 ms), timeout 30 s",
                2: self.files.get("CHANGELOG.md", "")[:300],
                3: _jitter_bounds(),
            }
            return self.cell(f"Checking {topic} in the kernel.", code, outputs[index])

        def lint() -> _Step:
            return self.bash(
                "Lint and types.",
                ".venv/bin/ruff check src tests && .venv/bin/mypy src",
                "All checks passed!\nSuccess: no issues found in 7 source files",
            )

        def show_diff() -> _Step:
            return self.bash(
                "Reviewing the diff.", f"git diff -- {path}",
                self.diff(path) or "(no output)",
            )

        def final() -> str:
            return (
                f"Done with {topic}: {path} is updated and the affected tests pass "
                f"({self.last_passed} passed). No other files changed."
            )

        return _Script(
            user,
            [
                _Plan(read, required=True),
                _Plan(grep),
                _Plan(write, required=True, fillers_before=True),
                _Plan(run_tests, required=True),
                _Plan(cell),
                _Plan(lint),
                _Plan(show_diff),
            ],
            final,
        )

    def script(self, turn: int) -> _Script:
        if turn == 1:
            return self.turn1()
        if turn == 2:
            return self.turn2()
        if turn == 3:
            return self.turn3()
        return self.later_turn(turn)


def _jitter_bounds() -> str:
    """What the jitter-bounds cell prints: compute_backoff(1, RetryPolicy(), Random(42))."""
    rng = random.Random(42)
    delays = [250 + rng.uniform(-25.0, 25.0) for _ in range(200)]
    return f"min {min(delays):.1f} ms, max {max(delays):.1f} ms"


def _select(script: _Script, steps: int, demo: _Demo) -> list[Callable[[], _Step]]:
    """Fit a turn's plan to ``steps`` steps: drop optional steps or insert fillers."""
    plans = list(script.plans)
    while len(plans) > steps:
        for i in range(len(plans) - 1, -1, -1):
            if not plans[i].required:
                del plans[i]
                break
    out: list[Callable[[], _Step]] = []
    missing = steps - len(plans)
    for plan in plans:
        if plan.fillers_before:
            out.extend(demo.filler for _ in range(missing))
            missing = 0
        out.append(plan.build)
    out.extend(demo.filler for _ in range(missing))
    return out


def demo_messages(
    *, turns: int = 3, steps_per_turn: int = 12, seed: int = 7, output_chars: int = 1500
) -> list[dict[str, Any]]:
    """A realistic coding-agent session as OpenAI chat-completions messages.

    The system message comes first, then ``turns`` turns of one user message,
    ``steps_per_turn`` (assistant tool call, tool result) pairs with ids
    ``call_<turn>_<step>``, and a closing text-only assistant message. The same arguments
    always give an identical list. See the module docstring for the planted facts.
    """
    for name, value, least in (
        ("turns", turns, 1),
        ("steps_per_turn", steps_per_turn, MIN_STEPS_PER_TURN),
        ("output_chars", output_chars, MIN_OUTPUT_CHARS),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    demo = _Demo(seed, output_chars)
    messages: list[dict[str, Any]] = [{"role": "system", "content": DEMO_SYSTEM_PROMPT}]
    for turn in range(1, turns + 1):
        script = demo.script(turn)
        messages.append({"role": "user", "content": script.user})
        for number, build in enumerate(_select(script, steps_per_turn, demo), 1):
            step = build()
            call_id = f"call_{turn}_{number}"
            messages.append({
                "role": "assistant",
                "content": step.say,
                "tool_calls": [{
                    "id": call_id,
                    "type": "function",
                    "function": {"name": step.tool, "arguments": json.dumps(step.args)},
                }],
            })
            messages.append({"role": "tool", "tool_call_id": call_id, "content": step.output})
        messages.append({"role": "assistant", "content": script.final()})
    return messages
