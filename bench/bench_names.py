"""Names kept across a compaction pass, measured on the corpus.

    python bench/bench_names.py [--sessions N] [--record]

Every session of ``shared/corpus`` beside the repository (skipped when absent; ``--sessions
N``: the first N in path order) is replayed through ``Dashr`` as an agent would: message by
message, and before each assistant message ``request_messages()`` (the pressure check, so
prune and summary passes run there), under ``recency_window_tokens`` 8k (retain 2k) and
20k (retain 4k), the offline extractive summarizer and every other setting at its default.

A *pass* is a request check that commits a checkpoint. At each one:

* the shadowed text is the text of the request nodes the pass took off the request (as
  they read before the pass: a checkpoint they held included), in order;
* the kept part is the system prompt and the request nodes after the pass that are not a
  checkpoint or the recall pointer (the kept tail);
* *left*: the names in the shadowed text that do not occur in the kept part;
* *needed*: the left names the agent itself writes again later, in the text or the
  tool-call arguments of the assistant message being requested or of any after it;
* *kept*: the needed names that occur in the request right after the pass (system prompt,
  checkpoint, pointer and tail).

Share = kept / needed, summed over the passes of every session. Baselines: the same needed
names against a plain truncation of the shadowed text to the checkpoint's size in
characters, keeping its head or its tail.

A *name* is what this instrument finds by itself (it shares no code with the package):
file paths (``django/db/models/query.py``, ``/testbed/reproduce.py``, ``setup.cfg``),
exception names (``TypeError``, ``django.core.exceptions.FieldError``: a class name ending
in Error, Exception, Warning, Exit or Interrupt) and identifiers that look like code
(dotted ``QuerySet.filter``, snake ``order_by``, camel ``assertEqual``, ``QuerySet``). A
name *occurs* in a text when it is there verbatim with no letter, digit or underscore right
before or after it. Tool-call arguments are read as the JSON strings they hold.

Deterministic: one run gives the figures. ``--record`` writes the section "Names kept
across a pass (corpus)" of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import join_notes, machine_note_list, package_commit, record_section  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._events import Event  # noqa: E402

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
CONFIGS: tuple[tuple[int, int], ...] = ((8_000, 2_000), (20_000, 4_000))
KINDS = ("file", "error", "symbol")
SECTION = "## Names kept across a pass (corpus) (bench/bench_names.py)"

# --------------------------------------------------------------------------- names

_CHUNK = re.compile(r"[\w./\-]+")
# fmt: off
_EXTENSIONS = frozenset({
    "py", "pyi", "pyx", "pxd", "txt", "cfg", "toml", "ini", "json", "yaml", "yml", "rst", "md",
    "c", "h", "cc", "cpp", "hpp", "js", "ts", "html", "css", "sh", "patch", "diff", "log", "csv",
    "xml", "in", "lock", "out",
})
# fmt: on
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_FILE_NAME = re.compile(r"[A-Za-z0-9_][\w\-]*(?:\.[\w\-]+)*\.([A-Za-z0-9]{1,5})")
_SEGMENT = re.compile(r"[\w.\-]*[A-Za-z][\w.\-]*|\.{1,2}")
_ERROR = re.compile(rf"(?:{_IDENT}\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)")
_DOTTED = re.compile(rf"{_IDENT}(?:\.{_IDENT})+")
_SNAKE = re.compile(r"_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*|__[A-Za-z0-9]+__")
_CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+")


def _path_kind(chunk: str) -> bool:
    """A chunk with slashes that reads as a path (not ``and/or``, not a URL's tail)."""
    parts = chunk.split("/")
    inner = [p for p in parts if p]
    if not inner or not all(_SEGMENT.fullmatch(p) for p in inner):
        return False
    last = _FILE_NAME.fullmatch(inner[-1])
    if last is not None and last[1] in _EXTENSIONS:
        return True
    if chunk.startswith("/"):  # /testbed, /tmp/x; not /a
        return len(inner) >= 2 or len(inner[0]) >= 3
    return len(inner) >= 3


def _classify(chunk: str) -> str | None:
    """The kind of one chunk (``file``, ``error``, ``symbol``) or None when it is no name."""
    if "/" in chunk:
        return "file" if _path_kind(chunk) else None
    match = _FILE_NAME.fullmatch(chunk)
    if match is not None and match[1] in _EXTENSIONS and not chunk[0].isdigit():
        return "file"
    if _ERROR.fullmatch(chunk):
        return "error"
    if _DOTTED.fullmatch(chunk):
        parts = chunk.split(".")
        if len(chunk) >= 5 and all(len(p) >= 2 for p in parts):
            return "symbol"
        return None
    if len(chunk) >= 4 and (_SNAKE.fullmatch(chunk) or _CAMEL.fullmatch(chunk)):
        return "symbol"
    return None


def find_names(text: str) -> dict[str, str]:
    """Every name in ``text`` with its kind, in order of first appearance."""
    out: dict[str, str] = {}
    for match in _CHUNK.finditer(text):
        chunk = match.group().strip(".-")
        if match.start() >= 1 and text[match.start() - 1] == ":" and chunk.startswith("//"):
            continue  # a URL: scheme://host/…
        if not chunk or chunk in out:
            continue
        kind = _classify(chunk.rstrip("/"))
        if kind is not None:
            out.setdefault(chunk.rstrip("/"), kind)
            continue
        if "/" not in chunk and "-" in chunk:  # option-like or hyphenated words: the parts
            for part in chunk.split("-"):
                part = part.strip(".")
                if part and part not in out and (kind := _classify(part)) is not None:
                    out[part] = kind
    return out


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def occurs(name: str, text: str) -> bool:
    """``name`` is in ``text`` verbatim, with no letter, digit or underscore at either side."""
    start = text.find(name)
    size = len(name)
    while start != -1:
        end = start + size
        if (start == 0 or not _is_word(text[start - 1])) and (
            end == len(text) or not _is_word(text[end])
        ):
            return True
        start = text.find(name, start + 1)
    return False


# --------------------------------------------------------------------------- message text


def _argument_text(arguments: str) -> str:
    """The strings a tool call's JSON arguments hold, one a line (the raw text if not JSON)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif item is not None:
            out.append(str(item))
    return "\n".join(out)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def request_message_text(message: Mapping[str, Any]) -> str:
    """One OpenAI request message as text: its content and its tool calls' arguments."""
    parts = [_content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(f"{fn.get('name', '')}\n{_argument_text(str(fn.get('arguments', '')))}")
    return "\n".join(parts)


def event_text(event: Event) -> str:
    """One surface node as the request shows it: its text and its tool calls' arguments."""
    message = event.message
    parts = [message.text]
    for call in message.tool_calls:
        parts.append(f"{call.name}\n{_argument_text(call.arguments)}")
    return "\n".join(parts)


def agent_text(message: Mapping[str, Any]) -> str:
    """What the agent itself wrote in one corpus message ("" for any other role)."""
    return request_message_text(message) if message.get("role") == "assistant" else ""


# --------------------------------------------------------------------------- passes


@dataclass
class Tally:
    """Names over a set of passes: needed and kept per kind, and the baselines' kept."""

    passes: int = 0
    left: int = 0
    needed: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    head: Counter[str] = field(default_factory=Counter)
    tail: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    """Needed names the request after the pass lacked, by how many passes lost them."""

    def add(self, other: Tally) -> None:
        self.passes += other.passes
        self.left += other.left
        for mine, theirs in (
            (self.needed, other.needed),
            (self.kept, other.kept),
            (self.head, other.head),
            (self.tail, other.tail),
            (self.missing, other.missing),
        ):
            mine.update(theirs)

    def share(self, which: str = "kept", kind: str | None = None) -> float:
        got: Counter[str] = getattr(self, which)
        needed = self.needed[kind] if kind else sum(self.needed.values())
        kept = got[kind] if kind else sum(got.values())
        return kept / needed if needed else 1.0


def measure_pass(
    shadowed: str,
    kept_part: str,
    after: str,
    later: str,
    checkpoint_chars: int,
) -> Tally:
    """The names of one pass: ``shadowed`` the text it took off the request, ``kept_part``
    what stayed (system prompt and tail), ``after`` the whole request after it, ``later``
    what the agent writes from this request on, ``checkpoint_chars`` the checkpoint's size."""
    tally = Tally(passes=1)
    head = shadowed[:checkpoint_chars]
    tail = shadowed[len(shadowed) - checkpoint_chars :] if checkpoint_chars else ""
    for name, kind in find_names(shadowed).items():
        if occurs(name, kept_part):
            continue
        tally.left += 1
        if not occurs(name, later):
            continue
        tally.needed[kind] += 1
        if occurs(name, after):
            tally.kept[kind] += 1
        else:
            tally.missing[f"{kind}:{name}"] += 1
        if occurs(name, head):
            tally.head[kind] += 1
        if occurs(name, tail):
            tally.tail[kind] += 1
    return tally


def _is_overlay(event: Event) -> bool:
    """A checkpoint node or the recall pointer: not part of the kept tail."""
    kind = event.message.source_kind
    return kind in ("compact-checkpoint", "history-access")


def replay_session(path: Path, window: int, retain: int) -> Tally:
    """One corpus session replayed under one window: the names of all its passes."""
    data = json.loads(path.read_text(encoding="utf-8"))
    messages: list[Mapping[str, Any]] = data["messages"]
    agent = [agent_text(m) for m in messages]
    config = CompactionConfig(recency_window_tokens=window, retain_tokens=retain)
    tally = Tally()
    with Dashr.create(in_memory=True, config=config, tools=data.get("tools")) as d:
        session = d.session
        for index, message in enumerate(messages):
            if message.get("role") == "assistant":
                before_surface = list(session.surface)
                before_checkpoints = len(d.checkpoints())
                request = d.request_messages()
                if len(d.checkpoints()) > before_checkpoints:
                    tally.add(_pass(session, before_surface, request, agent[index:]))
            d.record_openai(message)
    return tally


def _pass(
    session: Any, before: Sequence[int], request: Sequence[Mapping[str, Any]], later: list[str]
) -> Tally:
    after_surface = list(session.surface)
    remaining = set(after_surface)
    gone = [q for q in before if q not in remaining]
    shadowed = "\n".join(event_text(session.event(q)) for q in gone)
    system = "\n".join(request_message_text(m) for m in request if m.get("role") == "system")
    tail = [session.event(q) for q in after_surface]
    kept_part = "\n".join([system, *(event_text(e) for e in tail if not _is_overlay(e))])
    checkpoint_chars = sum(
        len(e.message.text) for e in tail if e.message.source_kind == "compact-checkpoint"
    )
    after = "\n".join(request_message_text(m) for m in request)
    return measure_pass(shadowed, kept_part, after, "\n".join(later), checkpoint_chars)


def corpus_sessions(limit: int | None = None) -> list[Path]:
    """The corpus session files in path order (the first ``limit``), [] when absent."""
    files = sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []
    return files[:limit] if limit is not None else files


def run(paths: Iterable[Path]) -> Iterator[tuple[tuple[int, int], Path, Tally]]:
    """Every session under every window: ``((window, retain), path, tally)``."""
    for path in paths:
        for window, retain in CONFIGS:
            yield (window, retain), path, replay_session(path, window, retain)


# --------------------------------------------------------------------------- report


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def report(
    totals: Mapping[tuple[int, int], Tally], with_pass: Mapping[tuple[int, int], int]
) -> list[str]:
    """The results table and each window's most often lost names, as Markdown lines."""
    lines = [
        "| window / retain | passes | sessions with a pass | left | needed (file / error / "
        "symbol) | kept share | file | error | symbol | head truncation | tail truncation |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (window, retain), t in totals.items():
        kinds = " / ".join(str(t.needed[k]) for k in KINDS)
        lines.append(
            f"| {window // 1000}k / {retain // 1000}k | {t.passes} | {with_pass[window, retain]} "
            f"| {t.left:,} | {sum(t.needed.values()):,} ({kinds}) | **{_pct(t.share())}** | "
            + " | ".join(_pct(t.share("kept", k)) for k in KINDS)
            + f" | {_pct(t.share('head'))} | {_pct(t.share('tail'))} |"
        )
    lines.append("")
    for (window, retain), t in totals.items():
        top = ", ".join(f"`{n}` ({c})" for n, c in t.missing.most_common(12))
        lines.append(f"* most often lost at {window // 1000}k / {retain // 1000}k: {top}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--sessions", type=int, default=None, help="the first N sessions")
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md")
    args = parser.parse_args(argv)
    paths = corpus_sessions(args.sessions)
    if not paths:
        print(f"no corpus at {CORPUS}: nothing to measure")
        return 0
    totals: dict[tuple[int, int], Tally] = {c: Tally() for c in CONFIGS}
    with_pass: dict[tuple[int, int], int] = dict.fromkeys(CONFIGS, 0)
    start = time.perf_counter()
    for config, _path, tally in run(paths):
        totals[config].add(tally)
        with_pass[config] += tally.passes > 0
    seconds = time.perf_counter() - start
    lines = report(totals, with_pass)
    print("\n".join(lines))
    print(f"\n{len(paths)} sessions, both windows, {seconds:.1f} s")
    if args.record:
        notes = join_notes(machine_note_list())
        body = "\n".join(
            [
                f"Machine: {notes}. Package at: `{package_commit()}`.",
                "",
                f"Corpus: {len(paths)} sessions; both windows in one process: {seconds:.1f} s.",
                "",
                *lines,
            ]
        )
        record_section(SECTION, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
