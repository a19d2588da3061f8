"""``dashr demo``: build a realistic agent session, compact it, show what recall gives back.

The README's "main job" (SPEC §11): the outline, a checkpoint's footer, an archived original
(labelled as the demo's scripted output, :data:`~._demo.SCRIPTED_NOTE`) and a search hit,
then how to try the other commands on the session. Every hint it prints names ``dashr``
commands on the file ``--out`` keeps (``demo.jsonl`` when the session was temporary).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from ._cliparse import command_name
from ._config import ENGINES, CompactionConfig

__all__ = ["add_demo_parser", "cmd_demo"]


def add_demo_parser(sub: Any) -> None:
    """Add the ``demo`` command to the ``dashr`` subparsers ``sub``."""
    demo = sub.add_parser("demo", help="build a demo agent session, compact it, read it back")
    demo.add_argument("--out", type=Path, help="keep the session file here (default: a temp dir)")
    demo.add_argument("--recency-window-tokens", type=int, default=6000)
    demo.add_argument("--retain-tokens", type=int, default=1500)
    demo.add_argument("--engine", default="summary", choices=list(ENGINES))


def cmd_demo(args: argparse.Namespace) -> int:
    """Build, compact and read back the demo session; the exit status."""
    import tempfile

    from ._cli_syntax import CommandSyntax
    from ._controller import Dashr
    from ._demo import DEMO_TOOLS, demo_facts, demo_messages

    if args.out is not None and (args.out.exists() or args.out.is_symlink()):
        raise ValueError(
            f"{args.out}: already exists (left untouched); choose another --out path, or look "
            f"at it with {command_name()} inspect {shlex.quote(str(args.out))}"
        )
    config = CompactionConfig(
        engine=args.engine,
        recency_window_tokens=args.recency_window_tokens,
        retain_tokens=args.retain_tokens,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = args.out or Path(tmp) / "demo.jsonl"
        with Dashr.create(path, config=config, tools=DEMO_TOOLS, session_id="demo") as d:
            # The hints name the file --out keeps (the closing line says how to keep one).
            d.recall.syntax = CommandSyntax(args.out or "demo.jsonl")
            for message in demo_messages():
                d.record_openai(message)
                d.request_messages()
            print_demo(d, demo_facts())
            first = next(iter(d.checkpoints()), None)
    print()
    print(*try_next(args.out, first.id if first else None, demo_facts()["error"]), sep="\n")
    return 0


def try_next(out: Path | None, checkpoint: str | None, phrase: str) -> list[str]:
    """The closing lines of ``dashr demo``: how to try the other commands on its session."""
    cmd = command_name()
    if out is None:
        return [
            "the session was in a temporary directory (now removed): run "
            f"`{cmd} demo --out demo.jsonl` to keep it and try the inspect, outline, read, "
            "search and compact commands on it"
        ]
    path = shlex.quote(str(out))
    read = f"{cmd} read {path} {checkpoint}" if checkpoint else f"{cmd} read {path} --seq 0"
    return [
        f"session file: {out}",
        "try the other commands on it:",
        f"  {cmd} inspect {path}",
        f"  {cmd} outline {path}",
        f"  {read}",
        f"  {cmd} search {path} {shlex.quote(phrase)}",
    ]


def print_demo(d: Any, facts: dict[str, str]) -> None:
    from ._demo import SCRIPTED_NOTE

    rule = "-" * 72
    cps = d.checkpoints()
    total = d.measure().total
    passes = "compaction pass" if len(cps) == 1 else "compaction passes"
    print(
        f"dashr demo: {len(d.session)} events, {len(cps)} {passes}; the request is now "
        f"~{total:,} tokens\n{rule}"
    )
    print(d.history_outline())
    if not cps:
        print(
            f"{rule}\nnothing was compacted: the session (~{total:,} tokens) never went over "
            f"the trigger ({d.config.trigger_tokens:,} tokens); try a smaller "
            "--recency-window-tokens"
        )
        return
    first = cps[0]
    text = d.session.event(first.node_seq).message.text
    footer = text[text.index("[checkpoint ") :]
    print(f"{rule}\nfooter of {first.id} (what the model sees at the end of the summary):\n{rule}")
    print(footer)
    entry = d.archive[first.id]
    results = entry.get("tool_results") or []
    index = next((i for i, r in enumerate(results) if facts["error"] in r["text"]), 0)
    where = f"dashr_compaction_archive[{first.id!r}]['tool_results'][{index}]['text']"
    print(f"{rule}\nan original {first.id} archived, {where} in a notebook ({SCRIPTED_NOTE}):")
    print(rule)
    print(results[index]["text"] if results else "(no tool results in this checkpoint)")
    print(f"{rule}\n{d.recall.syntax.search(facts['error'])} --limit 3\n{rule}")
    print(d.history_search(facts["error"], limit=3))
