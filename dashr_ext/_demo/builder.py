"""Builds the demo session's OpenAI messages from ``scenario.json`` and ``texts/`` (SPEC §11).

The scenario is the story as data: the project's files, each turn's steps (tool, what the
agent says, the call's arguments, where the output comes from) and closing answers. Texts
use ``{{name}}`` for a planted fact, a generated block (``{{codes}}``) or a value the step
computes (``{{n_lines}}``); a value that is exactly one ``{{name}}`` stands for that value
itself (a list, an output spec). In the JSON, ``{"lines": [...]}`` is a multi-line text.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from typing import Any

from .repo import Repo
from .textgen import TextGen, backoff_sample, jitter_bounds, take

Ctx = dict[str, Any]
_VAR = re.compile(r"\{\{(\w+)\}\}")


def _lines(obj: dict[str, Any]) -> Any:
    return "\n".join(obj["lines"]) if obj.keys() == {"lines"} else obj


@cache
def scenario() -> dict[str, Any]:
    """The parsed scenario; shared, so callers must not mutate it."""
    text = files(__package__).joinpath("scenario.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text, object_hook=_lines)
    return data


@cache
def template(name: str) -> str:
    return files(__package__).joinpath("texts", f"{name}.txt").read_text(encoding="utf-8")


def render(text: str, ctx: Ctx) -> str:
    return _VAR.sub(lambda m: str(ctx[m.group(1)]), text)


def resolve(value: Any, ctx: Ctx) -> Any:
    """``value`` with its placeholders filled, recursively."""
    if isinstance(value, str):
        whole = _VAR.fullmatch(value)
        return ctx[whole.group(1)] if whole else render(value, ctx)
    if isinstance(value, list):
        return [resolve(v, ctx) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, ctx) for k, v in value.items()}
    return value


def _whole(value: Any, ctx: Ctx) -> Any:
    """The value a lone ``{{name}}`` stands for; anything else unchanged."""
    whole = _VAR.fullmatch(value) if isinstance(value, str) else None
    return ctx[whole.group(1)] if whole else value


def _line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise ValueError(f"scenario.json: {needle!r} is not in the file it locates")


def fit(plan: list[dict[str, Any]], steps: int) -> list[dict[str, Any] | None]:
    """Fit a turn's plan to ``steps`` steps: drop optional steps from the end or add fillers
    (``None``) before the first step marked ``fillers_before`` (else at the end)."""
    plan = list(plan)
    while len(plan) > steps:
        del plan[max(i for i, s in enumerate(plan) if not s.get("required"))]
    out: list[dict[str, Any] | None] = []
    missing = steps - len(plan)
    for step in plan:
        if step.get("fillers_before"):
            out += [None] * missing
            missing = 0
        out.append(step)
    return out + [None] * missing


class Session:
    """One generated session: the random stream, the project's files as they change."""

    def __init__(self, seed: int, output_chars: int) -> None:
        self.sc = scenario()
        self.gen = TextGen(seed, output_chars, self.sc["pools"], avoid=self.sc["facts"]["commit"])
        self.ctx: Ctx = {**self.sc["facts"], **self.gen.blocks()}
        self.repo = Repo(
            {p: render(template(n), self.ctx) for p, n in self.sc["files"].items()},
            resolve(self.sc["parametrize"], self.ctx),
            lambda: self.gen.hex(7),
        )
        self.rows: list[tuple[int, list[int]]] = []
        self.last_passed = 0

    def messages(self, turns: int, steps: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": self.sc["system_prompt"]}]
        for turn in range(1, turns + 1):
            script, ctx, user = self.script(turn)
            out.append({"role": "user", "content": user})
            for number, spec in enumerate(fit(script["steps"], steps), 1):
                if spec is None:
                    fillers = self.sc["fillers"]
                    spec = fillers[self.gen.rng.randrange(len(fillers))]
                tool, say, args, output = self.step(spec, ctx)
                call_id = f"call_{turn}_{number}"
                call = {"name": tool, "arguments": json.dumps(args)}
                out.append(
                    {
                        "role": "assistant",
                        "content": say,
                        "tool_calls": [{"id": call_id, "type": "function", "function": call}],
                    }
                )
                out.append({"role": "tool", "tool_call_id": call_id, "content": output})
            final = render(script["final"], {**ctx, "last_passed": self.last_passed})
            out.append({"role": "assistant", "content": final})
        return out

    def script(self, turn: int) -> tuple[dict[str, Any], Ctx, str]:
        """A turn's script, its context and its user message; later turns rotate the tasks."""
        scripted, later = self.sc["turns"], self.sc["later"]
        if turn <= len(scripted):
            return scripted[turn - 1], self.ctx, render(scripted[turn - 1]["user"], self.ctx)
        rounds, index = divmod(turn - len(scripted) - 1, len(later["tasks"]))
        ctx = {**self.ctx, **resolve(later["tasks"][index], self.ctx)}
        ctx["tests"] = " ".join(ctx["test_files"])
        user = render(later["user"], ctx)
        if rounds:
            user += render(later["repeat"], {"pass": rounds + 1})
        return later, ctx, user

    def step(self, spec: dict[str, Any], turn_ctx: Ctx) -> tuple[str, str, dict[str, str], str]:
        ctx = dict(turn_ctx)
        for name, (path, needle) in spec.get("locate", {}).items():
            ctx[name] = _line_of(self.repo.files[render(path, ctx)], needle)
        for path, edits in spec.get("edits", {}).items():
            self.repo.files[path] = self.edit(self.repo.files[path], edits, ctx)
        tool = spec["tool"]
        if tool == "write_file":
            path = render(spec["path"], ctx)
            change = _whole(spec["content"], ctx)
            if "template" in change:
                content = render(template(change["template"]), self.ctx)
            else:
                content = self.repo.files.get(path, "")
            content = self.edit(content, change.get("edits", []), ctx)
            content += render(change.get("append", ""), ctx)
            self.repo.files[path] = content
            output = f"Wrote {len(content.encode())} bytes to {path}"
            return tool, render(spec["say"], ctx), {"path": path, "content": content}, output
        if tool == "read_file":
            lines = self.repo.files[render(spec["path"], ctx)].splitlines()
            output = "\n".join(f"{i:>5}\t{line}" for i, line in enumerate(lines, 1))
        else:
            output = self.output(_whole(spec["output"], ctx), spec, ctx)
        params = self.sc["tools"][tool]["parameters"]
        return tool, render(spec["say"], ctx), {p: render(spec[p], ctx) for p in params}, output

    def edit(self, text: str, edits: list[list[str]], ctx: Ctx) -> str:
        for old, new in edits:
            text = text.replace(render(old, ctx), render(new, ctx))
        return text

    def output(self, spec: Any, step: dict[str, Any], ctx: Ctx) -> str:
        """A tool result from its spec; values the call shows (``{{n_lines}}``) go into ``ctx``."""
        gen, repo = self.gen, self.repo
        match spec:
            case str():
                return render(spec, ctx)
            case {"cat": path}:
                return repo.files[render(path, ctx)][: spec.get("chars")]
            case {"grep": needle, "roots": roots}:
                hits = repo.grep(render(needle, ctx), resolve(roots, ctx))
                if spec.get("take"):
                    hits = take(hits, max(gen.budget(), 400))
                return "\n".join(hits) or spec.get("empty", "")
            case {"pytest": paths}:
                return self.pytest(resolve(paths, ctx), spec, render(step["command"], ctx), ctx)
            case {"diffstat": True}:
                return repo.diffstat()
            case {"diff": paths}:
                text = repo.diff(resolve(paths, ctx))
                if "budget" in spec:
                    lines = text.strip("\n").splitlines()
                    text = "\n".join(take(lines, max(gen.budget(spec["budget"]), 600)))
                return text or spec.get("empty", "")
            case {"gen": "ls", "listing": listing, "fixtures": folder}:
                listing = render(listing, ctx)
                names = sorted(take(gen.fixture_names(), max(100, gen.budget() - len(listing))))
                return f"{listing}\n\n{folder}:\n" + "\n".join(names)
            case {"gen": "git_log", "head": head, "since": since, "paths": paths}:
                head = render(head, ctx)
                commits = gen.commits(since, resolve(paths, ctx))
                older = take(commits, max(0, gen.budget() - len(head)))
                return (head + "\n" + "\n".join(older)).rstrip("\n")
            case {"gen": "log", "logger": logger, "gateway": gateway}:
                return self.log(logger, gateway, spec.get("fact"), ctx)
            case {"gen": "schedule", "head": head}:
                ctx["stop"] = stop = 50 * (max(3, gen.budget() // 75) + 1)
                self.rows = [
                    (base, [min(base * 2 ** (a - 1), 8000) for a in range(1, 9)])
                    for base in range(50, stop, 50)
                ]
                rows = [f"{b:>5} ms | " + " ".join(f"{d:>5}" for d in ds) for b, ds in self.rows]
                return "\n".join([head, *rows])
            case {"gen": "report", "template": name, "path": path, "text": text}:
                table = "\n".join(
                    f"| {b} ms | " + " | ".join(str(d) for d in ds[:5]) + " |"
                    for b, ds in self.rows
                )
                report = render(template(name), {**ctx, "table": table})
                repo.files[render(path, ctx)] = report
                ctx.update(report=report, report_chars=len(report))
                return render(text, ctx)
            case {"gen": "jitter_sample"}:
                ctx["seed"] = seed = gen.rng.randint(0, 99)
                return str(backoff_sample(seed))
            case {"gen": "jitter_bounds", "seed": seed, "count": count}:
                return jitter_bounds(seed, count)
        raise ValueError(f"scenario.json: unknown output {spec!r}")

    def pytest(self, paths: list[str], spec: dict[str, Any], command: str, ctx: Ctx) -> str:
        """Session test files run for real (``core``), the others are drawn from the pools."""
        core = [
            (n, "FAILED" if n == spec.get("failed") else "PASSED")
            for path in paths
            if path in self.repo.files
            for n in self.repo.nodeids(path)
        ]
        others = [path for path in paths if path not in self.repo.files]
        factor = spec.get("budget", 1.0)
        budget = self.gen.budget(factor) if factor else 0
        failures = render(spec.get("failures", ""), ctx)
        summary = [render(s, ctx) for s in spec.get("summary", [])]
        text, self.last_passed = self.gen.pytest(command, core, others, budget, failures, summary)
        return text

    def log(self, logger: str, gateway: bool, fact: str | None, ctx: Ctx) -> str:
        """The tail of a service log; a planted ``fact`` line goes halfway, a second later."""
        budget = self.gen.budget()
        stream = self.gen.log_lines(logger, gateway=gateway)
        if fact is None:
            lines = take(stream, budget)
        else:
            before = take(stream, budget // 2)
            self.gen.minute += 1
            fact = render(fact, {**ctx, "stamp": self.gen.stamp()})
            lines = [*before, fact, *take(stream, budget - budget // 2 - len(fact))]
        ctx["n_lines"] = len(lines)
        return "\n".join(lines)
