"""Seeded filler text for the demo session: project-file blocks, service logs, pytest runs.

Everything random comes from one ``random.Random(seed)`` and the word pools of
``scenario.json``. The order of the draws is part of the output (the pinned golden session
depends on it), so a change here changes every demo session (SPEC §14: deterministic).
"""

from __future__ import annotations

import datetime
import random
import string
from collections.abc import Iterable, Iterator
from typing import Any

_ALNUM = string.ascii_letters + string.digits


def take(lines: Iterable[str], budget: int) -> list[str]:
    """As many lines as fit in ``budget`` characters (counting newlines)."""
    out: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget:
            break
        out.append(line)
        used += len(line) + 1
    return out


def rule(title: str, fill: str = "=") -> str:
    return f" {title} ".center(80, fill)


class TextGen:
    """The random stream of one session and what it draws: ids, sizes, log and test lines."""

    def __init__(self, seed: int, output_chars: int, pools: dict[str, Any], avoid: str) -> None:
        self.rng = random.Random(seed)
        self.oc = output_chars
        self.pools = pools
        self.avoid = avoid  # a planted commit hash must not reappear in random ones
        self.minute = 0

    def budget(self, factor: float = 1.0) -> int:
        return int(self.oc * factor * self.rng.uniform(0.85, 1.15))

    def hex(self, n: int) -> str:
        while True:
            value = "".join(self.rng.choice("0123456789abcdef") for _ in range(n))
            if self.avoid not in value:
                return value

    def ident(self, prefix: str) -> str:
        return prefix + "_" + "".join(self.rng.choice(_ALNUM) for _ in range(6))

    def seconds(self) -> str:
        return f"{self.rng.uniform(0.4, 3.2):.2f}s"

    # ------------------------------------------------------------------ project-file blocks

    def blocks(self) -> dict[str, Any]:
        """The generated parts of the project files, keyed by their template variable."""
        codes = self._codes()
        cases, case_ids = self._cases()
        incidents = self._incidents()
        merchants = self._merchants()
        return {
            "codes": codes,
            "cases": cases,
            "case_ids": case_ids,
            "incidents": incidents,
            "merchants": merchants,
            "changelog": self._changelog(),
        }

    def _codes(self) -> str:
        p = self.pools
        combos = [f"{a}_{b}" for a in p["code_prefixes"] for b in p["code_suffixes"]]
        self.rng.shuffle(combos)

        def lines() -> Iterator[str]:
            version = 1
            while True:
                for code in combos:
                    name = code if version == 1 else f"v{version}_{code}"
                    retry = code.split("_", 1)[1] in p["retryable_suffixes"]
                    yield f'    "{name}": {retry},'
                version += 1

        return "\n".join(take(lines(), max(200, int(self.oc * 0.45))))

    def _cases(self) -> tuple[str, list[str]]:
        caps = [2000, 4000, 8000, 16000]
        combos = [(b, m, a) for b in range(50, 1001, 50) for m in caps for a in range(1, 9)]
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

    def _incidents(self) -> str:
        def lines() -> Iterator[str]:
            month, day, number = 1, 3, self.rng.randint(2100, 2400)
            for year in range(2024, 2100):
                while month <= 12:
                    what = self.rng.choice(self.pools["incident_what"])
                    outcome = self.rng.choice(self.pools["incident_outcome"])
                    yield f"| {year}-{month:02d}-{day:02d} | INC-{number} | {what} | {outcome} |"
                    number += self.rng.randint(3, 40)
                    day = self.rng.randint(1, 28)
                    month += 1
                month = 1

        return "\n".join(take(lines(), max(150, int(self.oc * 0.35))))

    def _merchants(self) -> str:
        def lines() -> Iterator[str]:
            while True:
                yield ""
                yield f"[merchants.{self.ident('m').lower()}]"
                yield f'currency = "{self.rng.choice(self.pools["currencies"]).upper()}"'
                yield f"min_charge_minor = {self.rng.choice([50, 100, 200, 500])}"
                yield f"three_ds = {self.rng.choice(['true', 'false'])}"
                yield f"payout_delay_days = {self.rng.randint(1, 7)}"

        return "\n".join(take(lines(), max(200, int(self.oc * 0.6))))

    def _changelog(self) -> str:
        def lines() -> Iterator[str]:
            major, minor = 2, 14
            while minor > 0:
                yield ""
                yield f"## {major}.{minor}.0"
                subjects = self.pools["commit_subjects"]
                for subject in self.rng.sample(subjects, self.rng.randint(2, 4)):
                    yield f"- {subject}"
                minor -= 1

        return "\n".join(take(lines(), max(300, self.oc)))

    # ------------------------------------------------------------------ tool output

    def log_lines(self, logger: str, *, gateway: bool) -> Iterator[str]:
        """An endless, time-ordered stream of plausible service log lines."""
        while True:
            self.minute += 1
            ms = self.rng.randint(0, 999)
            stamp = f"{self.stamp()},{ms:03d}"
            latency = self.rng.randint(40, 2900)
            if gateway:
                kind = self.rng.random()
                charge = self.ident("ch")
                if kind < 0.55:
                    msg = f"charge {charge} attempt=1 status=200 latency {latency} ms"
                elif kind < 0.75:
                    delay = self.rng.choice([250, 500, 1000, 2000])
                    delay += self.rng.randint(-delay // 10, delay // 10)
                    code = self.rng.choice(self.pools["gateway_errors"])
                    msg = (
                        f"charge {charge} attempt={self.rng.randint(1, 4)} status=502 "
                        f"code={code} latency {latency} ms; retrying in {delay} ms"
                    )
                    yield f"{stamp} WARNING payments.gateway {msg}"
                    continue
                elif kind < 0.9:
                    msg = f"refund {self.ident('re')} status=200 latency {latency} ms"
                else:
                    msg = f"webhook {self.ident('evt')} delivered in {latency} ms"
                yield f"{stamp} INFO    {logger} {msg}"
            else:
                job = self.ident("job")
                what = self.rng.choice(self.pools["worker_jobs"])
                yield f"{stamp} INFO    {logger} {what} {job} finished in {latency} ms"

    def stamp(self) -> str:
        """The log time of the current minute counter (one tick is one second)."""
        hh, mm = 9 + self.minute // 3600 % 12, self.minute // 60 % 60
        return f"2026-03-14 {hh:02d}:{mm:02d}:{self.minute % 60:02d}"

    def fixture_names(self) -> Iterator[str]:
        """Endless distinct test-fixture file names."""
        seen: set[str] = set()
        while True:
            kind = self.rng.choice(self.pools["fixture_kinds"])
            cur, n = self.rng.choice(self.pools["currencies"]), self.rng.randint(1, 999)
            name = f"{kind}_{cur}_{n:04d}.json"
            if name not in seen:
                seen.add(name)
                yield name

    def commits(self, before: str, paths: list[str]) -> Iterator[str]:
        """Endless ``git log --stat`` entries, each older than the last, touching ``paths``."""
        day = datetime.date.fromisoformat(before)
        while True:
            day -= datetime.timedelta(days=self.rng.randint(2, 9))
            ins, dels = self.rng.randint(1, 60), self.rng.randint(0, 30)
            path = self.rng.choice(paths)
            yield (
                f"\n{self.hex(7)} {day.isoformat()} {self.rng.choice(self.pools['authors'])}  "
                f"{self.rng.choice(self.pools['commit_subjects'])}\n\n"
                f" {path} | {ins + dels} {'+' * min(ins, 20)}{'-' * min(dels, 10)}\n"
                f" 1 file changed, {ins} insertions(+), {dels} deletions(-)"
            )

    def test_ids(self, modules: list[str]) -> Iterator[str]:
        """Endless unique passing test node ids from ``modules``."""
        pool = self.pools["test_modules"]
        names = {m: self.rng.sample(pool[m], len(pool[m])) for m in modules}
        for i in range(max(len(v) for v in names.values())):
            for m in modules:
                if i < len(names[m]):
                    yield f"{m}::{names[m][i]}"
        currencies = self.pools["currencies"]
        k = 0
        while True:
            for m in modules:
                for name in names[m]:
                    cur = currencies[k % len(currencies)]
                    amount = [199, 250, 1000, 1999, 5000, 12500, 99999][k // len(currencies) % 7]
                    yield f"{m}::{name}[{cur}-{amount}-{k}]"
            k += 1

    def pytest(
        self,
        command: str,
        core: list[tuple[str, str]],
        extra_modules: list[str],
        budget: int,
        failures: str = "",
        summary: list[str] | None = None,
    ) -> tuple[str, int]:
        """A verbose pytest run of ``core`` plus ~``budget`` characters of other tests.

        Returns the output and its number of passed tests.
        """
        header = [
            "$ " + command,
            rule("test session starts"),
            "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0 -- "
            "/home/dev/payments-service/.venv/bin/python",
            "cachedir: .pytest_cache",
            "rootdir: /home/dev/payments-service",
            "configfile: pyproject.toml",
            "plugins: hypothesis-6.103.1",
        ]
        room = max(budget - sum(len(x) + 1 for x in header) - len(failures) - 200, 80 * 6)
        extras = (
            take((f"{n} PASSED".ljust(79) for n in self.test_ids(extra_modules)), room)
            if extra_modules
            else []
        )
        results = list(core) + [(line.split(" PASSED")[0], "PASSED") for line in extras]
        skipped = {i for i in range(len(core), len(results)) if self.rng.random() < 0.04}
        order = sorted(range(len(results)), key=lambda i: results[i][0].split("::")[0])
        total = len(results)
        lines = [*header, f"collected {total} items", ""]
        counts = {"failed": 0, "passed": 0, "skipped": 0}
        for done, i in enumerate(order, 1):
            node, status = results[i]
            if i in skipped:
                status = "SKIPPED (needs gateway sandbox credentials)"
            counts[status.split()[0].lower()] += 1
            text = f"{node} {status}"
            text = text.ljust(73) if len(text) < 73 else text + " "
            lines.append(f"{text}[{done * 100 // total:3d}%]")
        if failures:
            lines += ["", rule("FAILURES"), failures.rstrip("\n")]
        if summary:
            lines += [rule("short test summary info"), *summary]
        parts = [f"{counts[k]} {k}" for k in ("failed", "passed", "skipped") if counts[k]]
        lines.append(rule(f"{', '.join(parts)} in {self.seconds()}"))
        return "\n".join(lines), counts["passed"]


def backoff_sample(seed: int) -> list[float]:
    """What ``compute_backoff`` gives for attempts 1-5 of the default policy, seeded."""
    rng = random.Random(seed)
    values = []
    for attempt in range(1, 6):
        capped = min(250 * 2 ** (attempt - 1), 8000)
        values.append(round((capped + rng.uniform(-capped * 0.1, capped * 0.1)) / 1000, 3))
    return values


def jitter_bounds(seed: int, count: int) -> str:
    """The extremes of ``count`` seeded first delays of the default policy."""
    rng = random.Random(seed)
    delays = [250 + rng.uniform(-25.0, 25.0) for _ in range(count)]
    return f"min {min(delays):.1f} ms, max {max(delays):.1f} ms"
