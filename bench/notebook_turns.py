"""Scripted notebook sessions for the turn-memory bench: deterministic, with planted facts.

A session is an agent working in a Jupyter kernel through ``run_cell``, over a few CSV data
sets, one ``%%agent`` request per turn. A turn opens with the user's request and runs cells:
loading the file, exploring columns (tables of rows, ``describe()``, value counts, a few
mechanical repeats such as ``df.shape``), maybe a failing cell with its traceback, a decision
stated with its reason, maybe a one-line shell cell, writing the result to a file, and ends
with the final answer (an assistant message with no tool call). Turn sizes are drawn from
small (one cell, below the default ``turn_min_tokens``), medium and large.

Each turn comes with the facts planted in it, by kind: ``decision`` (the decision sentence),
``error line`` (the last line of the failing cell's traceback), ``final answer`` (the whole
final message), ``path`` (the files the cells read and write) and ``command`` (the one-line
shell cell). Same seed, same session, byte for byte.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
Facts = dict[str, list[str]]

SYSTEM = (
    "You are a data-analysis agent working inside a Jupyter notebook. Run Python with the "
    "run_cell tool; variables persist between cells. Explain what you find and end each "
    "answer with the result the user asked for."
)
RUN_CELL_TOOL: Message = {
    "type": "function",
    "function": {
        "name": "run_cell",
        "description": "Execute Python code in this Jupyter kernel and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The cell's code."}},
            "required": ["code"],
        },
    },
}


@dataclass(frozen=True)
class Dataset:
    stem: str
    group: str
    groups: tuple[str, ...]
    value: str
    extras: tuple[str, str, str]


DATASETS = (
    Dataset(
        "sales_2024",
        "region",
        ("North", "South", "East", "West", "Central"),
        "revenue",
        ("units", "returns", "discount"),
    ),
    Dataset(
        "sensor_log",
        "site",
        ("Oslo", "Bergen", "Tromso", "Trondheim"),
        "temp_c",
        ("humidity", "battery", "uptime_h"),
    ),
    Dataset(
        "churn_q3",
        "plan",
        ("basic", "plus", "pro", "team", "edu"),
        "monthly_fee",
        ("tenure_m", "support_calls", "seats"),
    ),
    Dataset(
        "shipments",
        "carrier",
        ("DHL", "UPS", "FedEx", "PostNord"),
        "delay_h",
        ("weight_kg", "distance_km", "cost_eur"),
    ),
)

SIZES = {"small": (1, 1, 5, 5), "medium": (3, 7, 20, 45), "large": (10, 16, 40, 70)}
"""Size → (fewest, most exploring cells, fewest, most table rows)."""
SIZE_WEIGHTS = (("small", 3), ("medium", 5), ("large", 2))

QUESTIONS = (
    "find which {group} has the highest median {value}",
    "compare {value} across every {group} and tell me which one stands out",
    "check whether {extra} explains the differences in {value} between {group}s",
)
DECISIONS = (
    "{value} is heavily skewed, so I'll use the median instead of the mean because {n} "
    "outliers above {big} dominate the average.",
    "Decision: drop the {n} rows with a missing {extra} rather than impute them, since "
    "imputing would invent {extra} values for whole {group}s.",
    "I'll keep every {group} separate instead of merging the small ones because the report "
    "compares each {group} on its own.",
    "We should rank the {group}s on the 90th percentile of {value} rather than the maximum, "
    "because one bad day would otherwise decide the ranking.",
)
FINDINGS = (
    "The {g} {group} has {n} rows with {extra} above {x}, far more than the others.",
    "{extra} barely varies within a {group}, so it cannot explain the spread on its own.",
    "There are {n} duplicated rows, all from the {g} {group}.",
)


class NotebookWriter:
    """Writes one scripted session; every random choice comes from ``seed``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.cell = 0

    # ------------------------------------------------------------------ pieces

    def _table(self, ds: Dataset, rows: int, only: str | None = None) -> str:
        r = self.rng
        head = f"{'':>5}  {ds.group:<10} {'id':<9} {ds.value:>11} " + " ".join(
            f"{e:>12}" for e in ds.extras
        )
        lines = [head]
        for _ in range(rows):
            g = only or r.choice(ds.groups)
            ident = f"{ds.stem[:2]}_{r.randrange(10_000):04d}"
            nums = " ".join(f"{r.uniform(0, 500):>12.2f}" for _ in ds.extras)
            lines.append(
                f"{r.randrange(99_999):>5}  {g:<10} {ident:<9} {r.uniform(1, 9e4):>11.2f} {nums}"
            )
        if rows >= 10:
            lines.append(f"\n[{rows} rows x {len(ds.extras) + 3} columns]")
        return "\n".join(lines)

    def _describe(self, column: str) -> str:
        r = self.rng
        stats = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")
        body = "\n".join(f"{s:<8}{r.uniform(0, 9e4):>14.4f}" for s in stats)
        return f"{body}\nName: {column}, dtype: float64"

    def _counts(self, ds: Dataset) -> str:
        lines = [f"{g:<12}{self.rng.randrange(50, 3000):>6}" for g in ds.groups]
        return "\n".join([ds.group, *lines, "Name: count, dtype: int64"])

    def _step(self, text: str, code: str, output: str, turn: int) -> list[Message]:
        self.cell += 1
        cid = f"call_{self.seed}_{turn}_{self.cell}"
        arguments = json.dumps({"code": code})
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "run_cell", "arguments": arguments},
        }
        return [
            {"role": "assistant", "content": text, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": output},
        ]

    def _failure(self, ds: Dataset) -> tuple[str, str, str, str]:
        """(code, output, error line, what the assistant says next)."""
        r, n = self.rng, self.cell + 1
        kind = r.randrange(3)
        if kind == 0:
            typo = ds.group[0] + ds.group[2] + ds.group[1] + ds.group[3:]
            code = f'df.groupby("{typo}")["{ds.value}"].median()'
            error = f"KeyError: '{typo}'"
            frame = (
                'pandas/core/groupby/grouper.py", line 985, in get_grouper\n    raise KeyError(gpr)'
            )
            fix = f"The column is spelled {ds.group}, not {typo}; retrying with the right name."
        elif kind == 1:
            code = f'df["{ds.value}"].astype(float).mean()'
            error = "ValueError: could not convert string to float: 'n/a'"
            frame = 'pandas/core/dtypes/astype.py", line 133, in _astype_nansafe\n'
            frame += "    return arr.astype(dtype, copy=True)"
            fix = f"Some {ds.value} cells hold the text n/a; reading them as missing values."
        else:
            code = f'df.to_parquet("out/{ds.stem}.parquet")'
            error = "ImportError: Unable to find a usable engine; tried using: 'pyarrow', "
            error += "'fastparquet'."
            frame = 'pandas/io/parquet.py", line 67, in get_engine\n    raise ImportError('
            fix = "No parquet engine is installed, so the result goes to CSV instead."
        output = (
            "Traceback (most recent call last):\n"
            f'  File "<cell {n}>", line 1, in <module>\n    {code}\n'
            f'  File "/opt/conda/lib/python3.11/site-packages/{frame}\n{error}'
        )
        return code, output, error, fix

    # ------------------------------------------------------------------ turns

    def turn(
        self, turn: int, size: str | None = None, cells: int | None = None, rows: int | None = None
    ) -> tuple[list[Message], Facts]:
        """One turn's messages and the facts planted in it."""
        r = self.rng
        size = size or r.choices([s for s, _ in SIZE_WEIGHTS], [w for _, w in SIZE_WEIGHTS])[0]
        lo, hi, rlo, rhi = SIZES[size]
        cells = r.randint(lo, hi) if cells is None else cells
        rows = r.randint(rlo, rhi) if rows is None else rows
        ds = r.choice(DATASETS)
        extra = r.choice(ds.extras)
        fill = {"group": ds.group, "value": ds.value, "extra": extra}
        src = f"data/{ds.stem}.csv"
        facts: Facts = {"decision": [], "error line": [], "final answer": [], "path": [src]}
        facts["command"] = []
        question = r.choice(QUESTIONS).format(**fill)
        out: list[Message] = [{"role": "user", "content": f"Load {src} and {question}."}]
        load = f'import pandas as pd\ndf = pd.read_csv("{src}")\ndf.head({rows})'
        out += self._step(
            "Loading the file and looking at the first rows.", load, self._table(ds, rows), turn
        )
        big = size != "small"
        failing = big and r.random() < 0.7
        fail_at = r.randrange(cells) if failing else -1
        for k in range(1, cells):
            g, col = r.choice(ds.groups), r.choice((ds.value, *ds.extras))
            pick = r.randrange(5)
            if pick == 0:
                step = (
                    f"Checking the distribution of {col}.",
                    f'df["{col}"].describe()',
                    self._describe(col),
                )
            elif pick == 1:
                code = f'df[df["{ds.group}"] == "{g}"].head({rows})'
                step = (f"Looking at the {g} rows.", code, self._table(ds, rows, g))
            elif pick == 2:
                step = (
                    "How many rows per group?",
                    f'df["{ds.group}"].value_counts()',
                    self._counts(ds),
                )
            elif pick == 3:
                step = ("Checking the size again.", "df.shape", f"({r.randrange(900, 9000)}, 6)")
            else:
                step = (
                    f"A random sample of {rows} rows.",
                    f"df.sample({rows}, random_state={k})",
                    self._table(ds, rows),
                )
            text = step[0]
            if r.random() < 0.35:
                finding = r.choice(FINDINGS).format(
                    g=g, n=r.randrange(3, 400), x=r.randrange(100, 900), **fill
                )
                text = f"{finding} {text}"
            out += self._step(text, step[1], step[2], turn)
            if k == fail_at:
                code, output, error, fix = self._failure(ds)
                out += self._step("Computing the grouped figure.", code, output, turn)
                facts["error line"].append(error)
                out += self._step(
                    fix, f'df = pd.read_csv("{src}", na_values=["n/a"])', "(no output)", turn
                )
        if big:
            decision = r.choice(DECISIONS).format(
                n=r.randrange(3, 60), big=f"{r.randrange(2, 9)},000,000", **fill
            )
            facts["decision"].append(decision)
            out += self._step(
                f"Looking at the spread of {ds.value}. {decision} Computing it now.",
                f'df["{ds.value}"].quantile([0.5, 0.9, 0.99])',
                self._describe(ds.value),
                turn,
            )
        if big and r.random() < 0.5:
            command = f"!python scripts/clean_{ds.stem}.py --input {src} --drop-duplicates"
            facts["command"].append(command)
            log = "\n".join(
                f"[clean] pass {i}: {r.randrange(10, 900)} rows fixed" for i in range(6)
            )
            out += self._step("Running the cleaning script first.", command, log, turn)
        dest = f"out/{ds.stem}_{ds.value}_by_{ds.group}.csv"
        ranked = r.sample(ds.groups, 3)
        values = sorted((round(r.uniform(10, 9e4), 2) for _ in ranked), reverse=True)
        code = (
            f'result = df.groupby("{ds.group}")["{ds.value}"].median()'
            f'.sort_values(ascending=False)\nresult.to_csv("{dest}")\nresult'
        )
        table = "\n".join(f"{g:<12}{v:>12.2f}" for g, v in zip(ranked, values, strict=True))
        out += self._step("Writing the grouped result.", code, f"{ds.group}\n{table}", turn)
        facts["path"].append(dest)
        answer = (
            f"{ranked[0]} has the highest median {ds.value}: {values[0]:,.2f}, ahead of "
            f"{ranked[1]} at {values[1]:,.2f} and {ranked[2]} at {values[2]:,.2f}. The full "
            f"table is saved in {dest}."
        )
        out.append({"role": "assistant", "content": answer})
        facts["final answer"].append(answer)
        return out, facts


@dataclass(frozen=True)
class NotebookSession:
    name: str
    turns: list[list[Message]]
    facts: list[Facts]


def notebook_session(seed: int, turns: int) -> NotebookSession:
    """A session of ``turns`` turns of drawn sizes."""
    writer = NotebookWriter(seed)
    built = [writer.turn(t) for t in range(1, turns + 1)]
    return NotebookSession(f"notebook-{seed}", [m for m, _ in built], [f for _, f in built])


def sized_session(
    seed: int, turns: int, tokens: int, count: Callable[[str], int]
) -> NotebookSession:
    """A session of ``turns`` large turns of about ``tokens`` tokens each (``count`` counts
    the text of a turn's messages): each turn gets exploring cells until it is that large."""
    out: list[tuple[list[Message], Facts]] = []
    for t in range(1, turns + 1):
        cells = 4
        while True:
            built = NotebookWriter(seed * 1000 + t).turn(t, "large", cells=cells, rows=60)
            size = sum(count(json.dumps(m, ensure_ascii=False)) for m in built[0])
            if size >= tokens or cells > 200:
                break
            cells += max(1, (tokens - size) * cells // max(size, 1) // 2)
        out.append(built)
    return NotebookSession(f"sized-{seed}", [m for m, _ in out], [f for _, f in out])
