"""Recallable vs summary engine: prompt-cache prefix kept across passes, and pass wall time.

    python bench/bench_recallable.py [--prefix] [--sweep] [--walltime] [--record]

(no selection runs all three). Both engines run side by side on the same input; an engine
the installed package cannot build yet is reported as such and skipped.

1. **Prompt-cache prefix kept** (``--prefix``). Every corpus session (``../shared/corpus``)
   and the whole corpus concatenated into one long session are replayed message by message
   through ``Dashr.record_openai`` / ``Dashr.request_messages`` (which runs the pressure
   trigger) under a 20k recency window (``recency_window_tokens=20000, retain_tokens=6000``,
   offline extractive summarizer). Around every ``request_messages()`` that compacted, the
   request messages just before and just after are rendered ChatML-style (role, content,
   tool calls) and tokenized with the session meter's encoding (tiktoken ``cl100k_base``);
   the figure is the longest common token prefix as a fraction of the post-pass request up
   to the end of its last checkpoint node (system + checkpoints, i.e. without the retained
   tail). Reported per engine: median from the 5th pass on, the trend with session length,
   and the stub region's share of the window. Target: recallable >= 60 % median from the
   5th pass on; the summary engine keeps about the system prompt only.
2. **Settings sweep** (``--sweep``): the same figure for the recallable engine on the
   concatenated corpus, varying one of ``chunk_tokens``, ``stub_tokens``,
   ``state_max_tokens``, ``stub_region_ratio`` at a time.
3. **Pass wall time** (``--walltime``): the ``llm`` summarizer against
   :class:`dashr_ext.testing.ScriptedServer` answering every summarize call after a fixed
   latency L; one manual pass of the recallable engine that writes k stubs + the state
   against one pass of the summary engine (one summarize call) on the same session.
   Target: ratio <= 1.3. Three runs; the spread is given.

``--record`` rewrites this benchmark's sections of ``bench/RESULTS.md``.
The handoff-fidelity probe is ``bench/bench_fidelity.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import RESULTS, join_notes, machine_note_list, record_section  # noqa: E402

from dashr_ext import CompactionConfig, Dashr  # noqa: E402
from dashr_ext._checkpoints import checkpoint_of  # noqa: E402
from dashr_ext.errors import CompactionWarning, ConfigError  # noqa: E402

CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()
ENGINES = ("summary", "recallable")
WINDOW = 20_000
RETAIN = 6_000
FROM_PASS = 5
"""Medians are taken from this pass on (1-based): the first passes have no frozen stubs yet."""
PREFIX_SECTION = "## Recallable engine: prompt-cache prefix (bench/bench_recallable.py)"
WALLTIME_SECTION = "## Recallable engine: pass wall time (bench/bench_recallable.py)"

Message = dict[str, Any]


# --------------------------------------------------------------------------- engines


def base_config(engine: str, **changes: Any) -> CompactionConfig:
    """The benchmark's window (20k recency, 6k retained) for ``engine``, plus ``changes``."""
    return CompactionConfig(
        engine=engine, recency_window_tokens=WINDOW, retain_tokens=RETAIN, **changes
    )


def engine_unavailable(config: CompactionConfig) -> str | None:
    """Why a session cannot be compacted by ``config.engine`` here, or None when it can."""
    try:
        Dashr.create(None, in_memory=True, config=config).close()
    except ConfigError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- corpus


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*/*.json")) if CORPUS.is_dir() else []


def load_session(path: Path) -> tuple[list[Message], list[Message] | None]:
    """(messages, tools) of one corpus session."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data["messages"]), data.get("tools")


def concatenated_corpus(files: Sequence[Path]) -> tuple[list[Message], list[Message] | None]:
    """Every corpus session one after the other, as one long session.

    The first session's system message opens it and the later ones are dropped (a system
    prompt change mid-session would break every prefix at position zero); tool-call ids are
    made unique per session; the tool schemas are the union, by name, in first-seen order.
    """
    out: list[Message] = []
    tools: dict[str, Message] = {}
    for k, path in enumerate(files):
        messages, session_tools = load_session(path)
        for schema in session_tools or []:
            tools.setdefault(schema["function"]["name"], schema)
        for m in messages:
            if m["role"] == "system":
                if not out:
                    out.append(m)
                continue
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": f"s{k}-{c['id']}"} for c in m["tool_calls"]]
            if m["role"] == "tool":
                m["tool_call_id"] = f"s{k}-{m['tool_call_id']}"
            out.append(m)
    return out, list(tools.values()) or None


# --------------------------------------------------------------------------- prefix probe


def render_message(message: Mapping[str, Any]) -> str:
    """One chat message as a provider's chat template lays it out (ChatML-like).

    Role header, text content (parts joined; non-text parts as JSON), then the tool calls
    and the tool-call id as JSON, so two messages render equal iff a model would see the
    same bytes.
    """
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(
            str(p.get("text", "")) if p.get("type") == "text" else json.dumps(p, sort_keys=True)
            for p in content
            if isinstance(p, Mapping)
        )
    else:
        text = "" if content is None else str(content)
    out = [f"<|im_start|>{message.get('role', '')}\n{text}"]
    if message.get("reasoning_content"):
        out.insert(1, f"<think>{message['reasoning_content']}</think>")
    if message.get("tool_calls"):
        out.append(json.dumps(message["tool_calls"], ensure_ascii=False, sort_keys=True))
    if message.get("tool_call_id"):
        out.append(f"tool_call_id={message['tool_call_id']}")
    return "\n".join(out) + "<|im_end|>\n"


class RequestTokens:
    """Token ids of rendered messages, cached by rendered text (messages repeat a lot)."""

    def __init__(self, encode: Callable[[str], list[int]]) -> None:
        self._encode = encode
        self._cache: dict[str, list[int]] = {}

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        out = []
        for message in messages:
            text = render_message(message)
            ids = self._cache.get(text)
            if ids is None:
                if len(self._cache) > 4096:
                    self._cache.clear()
                ids = self._cache[text] = self._encode(text)
            out.append(ids)
        return out


def common_prefix(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(tokens, whole-message tokens) two tokenized requests share from their start.

    Messages are tokenized one by one (chat templates put special tokens between them, so
    tokens never straddle two messages); the first pair that differs adds the common prefix
    of its two token lists to the first figure only.
    """
    tokens = 0
    for x, y in zip(a, b, strict=False):
        if list(x) == list(y):
            tokens += len(x)
            continue
        whole = tokens
        n = 0
        for p, q in zip(x, y, strict=False):
            if p != q:
                break
            n += 1
        return tokens + n, whole
    return tokens, tokens


@dataclass(frozen=True)
class PassRecord:
    """One ``request_messages()`` that compacted, seen from the request it produced."""

    index: int
    """1-based, counting compacting requests of this replay."""
    passes: int
    """Committed ``compaction/end`` events (without error) in that request."""
    checkpoints: int
    """``compaction/summary`` events committed in that request (stubs + state, or one)."""
    recorded_tokens: int
    """Tokens recorded into the session so far (message texts): the session length."""
    system_tokens: int
    prefix_tokens: int
    """Tokens of the post-pass request through its last checkpoint node (the denominator)."""
    common_tokens: int
    """Longest common token prefix of the requests before and after."""
    common_whole_tokens: int
    """The same, counting only whole identical messages."""
    request_tokens: int
    """The whole post-pass request."""
    role_tokens: Mapping[str, int]
    """Tokens of the post-pass checkpoint nodes by class (stub, state, directory, summary)."""
    role_counts: Mapping[str, int]

    @property
    def kept(self) -> float:
        return self.common_tokens / self.prefix_tokens if self.prefix_tokens else 0.0

    @property
    def stub_region_tokens(self) -> int:
        return self.role_tokens.get("stub", 0) + self.role_tokens.get("directory", 0)


@dataclass
class Replay:
    label: str
    engine: str
    config: CompactionConfig
    records: list[PassRecord] = field(default_factory=list)
    recorded_tokens: int = 0
    messages: int = 0
    failed_passes: int = 0
    seconds: float = 0.0
    final_request: list[Message] = field(default_factory=list)
    dashr: Dashr | None = None
    """The controller, when the replay was asked to keep it open."""

    def from_pass(self, first: int = FROM_PASS) -> list[PassRecord]:
        return [r for r in self.records if r.index >= first]


def message_tokens(count: Callable[[str], int], message: Mapping[str, Any]) -> int:
    """Tokens of one recorded message as rendered for the model (what grows the session)."""
    return count(render_message(message))


def replay(
    messages: Iterable[Message],
    config: CompactionConfig,
    *,
    label: str,
    tools: Sequence[Message] | None = None,
    keep: bool = False,
    on_message: Callable[[Dashr, int], None] | None = None,
) -> Replay:
    """Record ``messages`` one by one, requesting after each, and probe every pass.

    ``keep`` leaves the controller open on the result (the caller closes it);
    ``on_message(dashr, i)`` runs after the i-th message was recorded and requested.
    """
    d = Dashr.create(None, in_memory=True, config=config, summarizer="extractive", tools=tools)
    meter = d.meter
    import tiktoken

    encoding = tiktoken.get_encoding(meter.effective_encoding)
    tokenize = RequestTokens(encoding.encode_ordinary)
    out = Replay(label, config.engine, config)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompactionWarning)
        for i, message in enumerate(messages):
            d.record_openai(message)
            out.messages += 1
            out.recorded_tokens += message_tokens(meter.count_text, message)
            log_before = len(d.session)
            before = d.session.messages()
            after = d.request_messages()
            new = d.session.events[log_before:]
            ends = [e for e in new if e.type == "compaction/end"]
            out.failed_passes += sum(1 for e in ends if "error" in e.data)
            committed = sum(1 for e in ends if "error" not in e.data)
            if committed:
                out.records.append(
                    probe_pass(
                        d,
                        before,
                        after,
                        tokenize,
                        index=len(out.records) + 1,
                        passes=committed,
                        checkpoints=sum(1 for e in new if e.type == "compaction/summary"),
                        recorded_tokens=out.recorded_tokens,
                    )
                )
            if on_message is not None:
                on_message(d, i)
    out.seconds = time.perf_counter() - began
    out.final_request = d.session.messages()
    if keep:
        out.dashr = d
    else:
        d.close()
    return out


def probe_pass(
    d: Dashr,
    before: Sequence[Message],
    after: Sequence[Message],
    tokenize: RequestTokens,
    **fields_: Any,
) -> PassRecord:
    """The prefix figures of one compacting request (``after`` derived from the surface)."""
    surface = d.session.surface
    offset = len(after) - len(surface)
    roles = {cp.id: cp.role for cp in d.checkpoints()}
    a, b = tokenize(before), tokenize(after)
    role_tokens: dict[str, int] = {}
    role_counts: dict[str, int] = {}
    last = offset - 1
    for pos, seq in enumerate(surface):
        checkpoint = checkpoint_of(d.session.event(seq))
        if checkpoint is None:
            continue
        role = roles.get(checkpoint, "summary")
        role_tokens[role] = role_tokens.get(role, 0) + len(b[offset + pos])
        role_counts[role] = role_counts.get(role, 0) + 1
        last = offset + pos
    common, whole = common_prefix(a, b)
    return PassRecord(
        system_tokens=sum(len(t) for t in b[:offset]),
        prefix_tokens=sum(len(t) for t in b[: last + 1]),
        common_tokens=common,
        common_whole_tokens=whole,
        request_tokens=sum(map(len, b)),
        role_tokens=role_tokens,
        role_counts=role_counts,
        **fields_,
    )


# --------------------------------------------------------------------------- summaries


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else pct(value)


def thirds(records: Sequence[PassRecord]) -> list[list[PassRecord]]:
    """``records`` in three consecutive groups of (nearly) equal size."""
    n = len(records)
    cuts = [0, n // 3, 2 * n // 3, n]
    return [list(records[cuts[i] : cuts[i + 1]]) for i in range(3)]


def trend_text(records: Sequence[PassRecord]) -> str:
    """Median kept share in the first, middle and last third of the passes (from the 5th)."""
    if len(records) < 3:
        return "n/a (fewer than 3 passes)"
    parts = []
    for group in thirds(records):
        lo, hi = group[0].recorded_tokens, group[-1].recorded_tokens
        med = statistics.median(r.kept for r in group)
        parts.append(f"{pct(med)} ({lo / 1000:,.0f}k–{hi / 1000:,.0f}k)")
    return " → ".join(parts)


def stub_share_text(records: Sequence[PassRecord], window: int) -> str:
    """The stub region (stubs + directory) as a share of the window over the session."""
    if not any(r.stub_region_tokens for r in records):
        return "– (no stubs)"
    picks: list[tuple[str, PassRecord]] = []
    for k in (5, 10, 20, 40, 80):
        if k <= len(records):
            picks.append((f"pass {k}", records[k - 1]))
    picks.append((f"last (pass {len(records)})", records[-1]))
    shares = [r.stub_region_tokens / window for r in records]
    body = ", ".join(f"{name} {pct(r.stub_region_tokens / window)}" for name, r in picks)
    return f"{body}; max {pct(max(shares))}"


# --------------------------------------------------------------------------- 1. prefix


@dataclass
class PrefixRun:
    replays: dict[str, list[Replay]]
    """Engine → the per-session replays."""
    long: dict[str, Replay]
    """Engine → the concatenated-corpus replay."""
    unavailable: dict[str, str]


def run_prefix(files: Sequence[Path], engines: Sequence[str]) -> PrefixRun:
    run = PrefixRun({}, {}, {})
    sessions = [(p.stem, *load_session(p)) for p in files]
    long_messages, long_tools = concatenated_corpus(files)
    for engine in engines:
        config = base_config(engine)
        reason = engine_unavailable(config)
        if reason is not None:
            run.unavailable[engine] = reason
            print(f"{engine}: unavailable ({reason})")
            continue
        run.replays[engine] = []
        for name, messages, tools in sessions:
            r = replay(messages, config, label=name, tools=tools)
            run.replays[engine].append(r)
            print(progress_line(r))
        r = replay(long_messages, config, label="corpus concatenated", tools=long_tools)
        run.long[engine] = r
        print(progress_line(r))
    return run


def progress_line(r: Replay) -> str:
    med = median_or_none([x.kept for x in r.from_pass()])
    return (
        f"{r.engine:10s} {r.label:34s} {r.recorded_tokens:>9,} tok {len(r.records):3d} passes, "
        f"median kept from pass {FROM_PASS}: {fmt_pct(med)} ({r.seconds:.1f} s)"
    )


def whole_share(records: Sequence[PassRecord]) -> float | None:
    """Median share of the prefix kept counting whole identical messages only."""
    return median_or_none([r.common_whole_tokens / r.prefix_tokens for r in records])


def prefix_rows(run: PrefixRun) -> list[str]:
    """The per-engine summary table of the prefix benchmark."""
    lines = [
        "| engine | replay | passes | kept, median from pass 5 (IQR) | tokens kept / system + "
        "checkpoints (medians) | kept, whole messages only | trend of kept (first → last "
        "third, by session length) | stub region / window |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine, replays in run.replays.items():
        pooled = [r for rep in replays for r in rep.from_pass()]
        long = run.long[engine]
        for label, recs, total in (
            (
                f"{len(replays)} sessions, pooled (passes ≥ {FROM_PASS} of each)",
                pooled,
                sum(len(rep.records) for rep in replays),
            ),
            (
                f"corpus concatenated ({long.recorded_tokens / 1e6:.2f}M tokens)",
                long.from_pass(),
                len(long.records),
            ),
        ):
            lines.append(
                f"| {engine} | {label} | {total} | {iqr_text([r.kept for r in recs])} | "
                f"{tokens_text(recs)} | {fmt_pct(whole_share(recs))} | "
                f"{trend_text(recs) if recs is not pooled else 'see concatenated'} | "
                f"{stub_share_text(long.records, WINDOW) if recs is not pooled else '–'} |"
            )
    return lines


def tokens_text(records: Sequence[PassRecord]) -> str:
    """Median tokens kept and median size of system prompt + checkpoints."""
    if not records:
        return "n/a"
    kept = statistics.median(r.common_tokens for r in records)
    prefix = statistics.median(r.prefix_tokens for r in records)
    return f"{kept:,.0f} / {prefix:,.0f}"


def iqr_text(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    if len(values) < 4:
        return f"{pct(statistics.median(values))} (n={len(values)})"
    q = statistics.quantiles(values, n=4)
    return f"**{pct(statistics.median(values))}** ({pct(q[0])}–{pct(q[2])}, n={len(values)})"


def per_session_rows(run: PrefixRun) -> list[str]:
    engines = list(run.replays)
    head = "| session | tokens | " + " | ".join(
        f"{e}: passes, median kept from pass {FROM_PASS}" for e in engines
    )
    lines = [head + " |", "|" + " --- |" * (2 + len(engines))]
    if not engines:
        return []
    for i, rep in enumerate(run.replays[engines[0]]):
        cells = []
        for e in engines:
            r = run.replays[e][i]
            med = median_or_none([x.kept for x in r.from_pass()])
            cells.append(f"{len(r.records)}, {fmt_pct(med)}")
        lines.append(f"| {rep.label} | {rep.recorded_tokens:,} | " + " | ".join(cells) + " |")
    return lines


def detail_lines(long: Replay) -> list[str]:
    """A few passes of the concatenated replay, to show what the request looks like."""
    out = []
    recs = long.records
    picks = sorted({k for k in (1, 2, 5, 10, 20, 40, 80, 120, len(recs)) if 1 <= k <= len(recs)})
    for k in picks:
        r = recs[k - 1]
        roles = ", ".join(
            f"{r.role_counts[name]} {name} ({r.role_tokens[name]:,} tok)" for name in r.role_counts
        )
        out.append(
            f"| {long.engine} | {k} | {r.recorded_tokens / 1000:,.0f}k | {r.passes} / "
            f"{r.checkpoints} | {roles} | {r.common_tokens:,} / {r.prefix_tokens:,} = "
            f"{pct(r.kept)} | {r.request_tokens:,} |"
        )
    return out


# --------------------------------------------------------------------------- 2. sweep


SWEEP: list[tuple[str, list[Any]]] = [
    ("chunk_tokens", [4000, 6000, 8192]),
    ("stub_tokens", [80, 160, 320]),
    ("state_max_tokens", [1000, 2000, 4000]),
    ("stub_region_ratio", [0.1, 0.25, 0.5]),
]
BUDGETS = {
    "chunk_tokens": "chunk_budget",
    "stub_tokens": "stub_budget",
    "state_max_tokens": "state_budget",
    "stub_region_ratio": "stub_region_ratio",
}
"""Each swept setting and the config property giving its effective value (None: derived)."""


def run_sweep(messages: list[Message], tools: list[Message] | None) -> list[str]:
    """Recallable engine on ``messages`` varying one setting at a time from the defaults."""
    base = base_config("recallable")
    reason = engine_unavailable(base)
    if reason is not None:
        return [f"sweep skipped: recallable engine unavailable ({reason})"]
    lines = [
        "| setting | value | passes | kept, median from pass 5 (IQR) | tokens kept / system + "
        "checkpoints (medians) | kept, whole messages only | checkpoints written per compacting "
        "request (mean) | stub region / window (max) | replay |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, values in SWEEP:
        for value in values:
            try:
                config = base.with_changes(**{name: value})
            except ConfigError as exc:
                lines.append(f"| {name} | {value} | invalid: {exc} | | | | | | |")
                continue
            r = replay(messages, config, label=f"{name}={value}", tools=tools)
            recs = r.from_pass()
            per_request = statistics.mean(x.checkpoints for x in r.records) if r.records else 0
            default = getattr(base, BUDGETS[name]) == value
            lines.append(
                f"| {name} | {value}{' (default)' if default else ''} | {len(r.records)} | "
                f"{iqr_text([x.kept for x in recs])} | {tokens_text(recs)} | "
                f"{fmt_pct(whole_share(recs))} | "
                f"{per_request:.1f} | "
                f"{pct(max((x.stub_region_tokens for x in r.records), default=0) / WINDOW)} | "
                f"{r.seconds:.0f} s |"
            )
            print(lines[-1])
    return lines


# --------------------------------------------------------------------------- 3. wall time


def summary_text(request: Any) -> str:
    """What the scripted summarizer answers: short, valid as a summary, a stub or a state."""
    return (
        "## Primary Request and Intent\n- Fix the retry helper.\n"
        "## Key Technical Concepts\n- RetryPolicy\n## Files and Code\n- src/payments/retry.py\n"
        "## Errors and Fixes\n- (none)\n## Pending Jobs\n- (none)\n"
        "## Current Work\n- Running the tests.\n## Next Step\n- (none)\n"
        "## Critical Context\n- Keywords: RetryPolicy, compute_backoff"
    )


@dataclass(frozen=True)
class WallRun:
    seconds: float
    calls: int
    checkpoints: int


def build_walltime_session(
    engine: str, chunk: int, k: int, summarizer: Any, *, state_max: int
) -> tuple[Dashr, CompactionConfig]:
    """A session whose stale history is about ``k`` chunks, compaction off until asked.

    Close it with ``d.session.close()``: ``d.close()`` would close the shared summarizer.
    """
    from dashr_ext.testing import DEMO_SYSTEM_PROMPT, DEMO_TOOLS, demo_messages

    retain = 2_000
    window = k * chunk + retain + 4_000
    config = CompactionConfig(
        engine=engine,
        recency_window_tokens=window,
        retain_tokens=retain,
        context_window_tokens=max(128_000, 2 * window),
        chunk_tokens=chunk,
        state_max_tokens=state_max,
        stub_tokens=min(160, chunk // 8),
        auto=False,
        compaction_retries=0,
    )
    d = Dashr.create(
        None,
        in_memory=True,
        config=config,
        summarizer=summarizer,
        system_prompt=DEMO_SYSTEM_PROMPT,
        tools=DEMO_TOOLS,
    )
    target = k * chunk + retain
    for message in demo_messages(turns=40, steps_per_turn=12, output_chars=1500)[1:]:
        d.record_openai(message)
        turn_closed = message["role"] == "assistant" and not message.get("tool_calls")
        if turn_closed and d.measure().total >= target:
            break
    return d, config


def time_pass(d: Dashr, server: Any) -> WallRun:
    calls_before = len(server.compaction_requests)
    log_before = len(d.session)
    start = time.perf_counter()
    result = d.compact()
    seconds = time.perf_counter() - start
    if result is None:
        raise RuntimeError("nothing to compact")
    new = d.session.events[log_before:]
    return WallRun(
        seconds,
        len(server.compaction_requests) - calls_before,
        sum(1 for e in new if e.type == "compaction/summary"),
    )


def run_walltime(
    latencies: Sequence[float], ks: Sequence[int], runs: int, chunk: int
) -> tuple[list[str], list[str]]:
    """Rows of the wall-time table and the target lines."""
    from dashr_ext._summarizers.llm import LLMSummarizer
    from dashr_ext.testing import ScriptedServer, chat_completion, slow

    rows: list[str] = []
    targets: list[str] = []
    reason = engine_unavailable(CompactionConfig(engine="recallable"))
    for latency in latencies:

        def respond(request: Any, latency: float = latency) -> Any:
            return slow(chat_completion(summary_text(request)), latency)

        with ScriptedServer(summarizer=respond) as server:
            # One client for every pass, as in a long-running process; an untimed warm-up
            # pass opens its connections first, so no pass pays for TCP connects (a burst
            # of new connections can overflow the test server's listen backlog and stall
            # one connect for a SYN retransmit, about 1 s).
            summarizer = LLMSummarizer(
                base_url=server.base_url, model="scripted", api_key="k", max_retries=0
            )
            warm = "summary" if reason is not None else "recallable"
            d, _config = build_walltime_session(
                warm, chunk, max(ks), summarizer, state_max=chunk // 4
            )
            time_pass(d, server)
            d.session.close()
            for k in ks:
                measured: dict[str, list[WallRun]] = {e: [] for e in ENGINES}
                for _ in range(runs):
                    for engine in ENGINES:
                        if engine == "recallable" and reason is not None:
                            continue
                        d, _config = build_walltime_session(
                            engine, chunk, k, summarizer, state_max=chunk // 4
                        )
                        try:
                            measured[engine].append(time_pass(d, server))
                        finally:
                            d.session.close()
                summary_runs = measured["summary"]
                rec_runs = measured["recallable"]
                s_times = [w.seconds for w in summary_runs]
                line = (
                    f"| {latency:.2f} s | {k} | {spread(s_times)} ({summary_runs[0].calls} call) | "
                )
                if rec_runs:
                    r_times = [w.seconds for w in rec_runs]
                    ratios = [r / s for r, s in zip(r_times, s_times, strict=True)]
                    line += (
                        f"{spread(r_times)} ({stubs_text(rec_runs[0])} + state, "
                        f"{rec_runs[0].calls} calls) | "
                        f"**{statistics.median(ratios):.2f}** "
                        f"({min(ratios):.2f}–{max(ratios):.2f}) | "
                        f"{statistics.median(r_times) / latency:.2f} |"
                    )
                    met = statistics.median(ratios) <= 1.3
                    targets.append(
                        f"L={latency:.2f} s, {stubs_text(rec_runs[0])} + state "
                        f"({rec_runs[0].calls} summarize calls): ratio "
                        f"{statistics.median(ratios):.2f} (target <= 1.3): "
                        f"{'met' if met else 'MISSED'}"
                    )
                else:
                    line += f"unavailable ({reason}) | – | – |"
                rows.append(line)
                print(line)
            summarizer.close()
    return rows, targets


def stubs_text(run: WallRun) -> str:
    n = run.checkpoints - 1
    return f"{n} stub{'' if n == 1 else 's'}"


def spread(values: Sequence[float]) -> str:
    """Median and min–max of timings in seconds."""
    return (
        f"{statistics.median(values):.3f} s ({min(values):.3f}–{max(values):.3f})"
        if values
        else "n/a"
    )


# --------------------------------------------------------------------------- report


def record_prefix(run: PrefixRun, sweep: list[str], notes: list[str]) -> None:
    body = [
        "Machine: " + join_notes(notes) + ".",
        f"Settings: `recency_window_tokens={WINDOW}`, `retain_tokens={RETAIN}`, offline "
        "extractive summarizer, engine defaults otherwise (effective: "
        f"{settings_text(base_config('recallable'))}). Each corpus session and the whole "
        "corpus concatenated (first system prompt, tool-call ids made unique) replayed one "
        "message at a time through `record_openai` / `request_messages`. For every request "
        "that compacted: the longest common token prefix (tiktoken `cl100k_base`, messages "
        "rendered ChatML-style) of the requests just before and just after, as a share of the "
        "post-pass request up to the end of its last checkpoint node (system prompt + "
        "checkpoints). Deterministic: one run.",
        "",
    ]
    for engine, reason in run.unavailable.items():
        body.append(f"* {engine}: not measured, the engine is unavailable ({reason}).")
    for engine, long in run.long.items():
        recs = long.from_pass()
        pooled = [r for rep in run.replays[engine] for r in rep.from_pass()]
        med = median_or_none([r.kept for r in recs])
        line = (
            f"* {engine}, median kept from pass {FROM_PASS}: {fmt_pct(med)} on the concatenated "
            f"corpus, {fmt_pct(median_or_none([r.kept for r in pooled]))} pooled over the "
            f"single sessions; whole identical messages only: {fmt_pct(whole_share(recs))} and "
            f"{fmt_pct(whole_share(pooled))}"
        )
        if engine == "recallable":
            line += f" (target >= 60%: {'met' if med is not None and med >= 0.6 else 'MISSED'})"
        else:
            sys_share = median_or_none([r.system_tokens / r.prefix_tokens for r in recs])
            line += f"; the system prompt alone is {fmt_pct(sys_share)} of the prefix"
        body.append(line)
    body.append(
        "* The summary engine's token figure is not the system prompt alone because the "
        "extractive summarizer carries its earlier bullets forward byte for byte at the head "
        "of each section (the first request, verbatim, opens every summary), so consecutive "
        "summaries share a long head; a model-written summary would not. Counted in whole "
        "identical messages (what a cache breakpoint at message boundaries reuses), it keeps "
        "the system prompt only."
    )
    body += ["", *prefix_rows(run), ""]
    body += ["Per pass (concatenated corpus):", ""]
    body += [
        "| engine | pass | session length | passes / checkpoints written | checkpoint nodes "
        "after it | common / system+checkpoints | request |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for engine in run.long:
        body += detail_lines(run.long[engine])
    body += ["", "Per session:", "", *per_session_rows(run)]
    if sweep:
        body += ["", "Settings sweep (recallable, concatenated corpus, one setting at a time):", ""]
        body += sweep
    record_section(PREFIX_SECTION, "\n".join(body))


def record_walltime(
    rows: list[str], targets: list[str], notes: list[str], runs: int, chunk: int
) -> None:
    body = [
        "Machine: " + join_notes(notes) + ".",
        f"`LLMSummarizer` against `dashr_ext.testing.ScriptedServer` on loopback; every "
        f"summarize call is answered after a fixed latency L (`testing.slow`). Session: the "
        f"demo session recorded with compaction off until the stale history is about k × "
        f"`chunk_tokens` ({chunk}) plus `retain_tokens` 2000, then one manual pass "
        f"(`Dashr.compact()`), timed; `state_max_tokens` {chunk // 4}. Each engine gets a "
        f"freshly built, identical session; one `LLMSummarizer` (one connection pool) serves "
        f"every pass after an untimed warm-up pass. A pass has at most "
        f"{max_in_flight()} summarize calls in flight (`MAX_CONCURRENT_SUMMARIES`). {runs} "
        "runs, alternating the engines; medians with min–max.",
        "",
        *(f"* {t}" for t in targets),
        "",
        "| L | stale history (chunks) | summary pass (one call) | recallable pass | ratio "
        "recallable / summary | recallable / L |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    record_section(WALLTIME_SECTION, "\n".join(body))


def max_in_flight() -> int | str:
    try:
        from dashr_ext._compaction.summarize import MAX_CONCURRENT_SUMMARIES
    except ImportError:
        return "?"
    return MAX_CONCURRENT_SUMMARIES


def settings_text(config: CompactionConfig) -> str:
    """The effective recallable sizes (the ones left unset follow the window)."""
    return ", ".join(f"`{name}={getattr(config, prop)}`" for name, prop in BUDGETS.items())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", action="store_true", help="prompt-cache prefix kept")
    parser.add_argument("--sweep", action="store_true", help="recallable settings sweep")
    parser.add_argument("--walltime", action="store_true", help="pass wall time")
    parser.add_argument("--latency", type=float, nargs="+", default=[0.25, 1.0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 3, 6, 10, 16])
    parser.add_argument("--chunk", type=int, default=4096, help="chunk_tokens (wall time)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=0, help="only the first N sessions")
    parser.add_argument("--record", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args(argv)
    everything = not (args.prefix or args.sweep or args.walltime)

    files = corpus_files()
    if args.sessions:
        files = files[: args.sessions]
    if (args.prefix or args.sweep or everything) and not files:
        print(f"corpus absent ({CORPUS}): prefix benchmark and sweep skipped")
    if (args.prefix or everything) and files:
        run = run_prefix(files, ENGINES)
        sweep: list[str] = []
        if args.sweep or everything:
            sweep = run_sweep(*concatenated_corpus(files))
        notes = machine_note_list(load_label=None)
        for line in prefix_rows(run):
            print(line)
        if args.record:
            record_prefix(run, sweep, notes)
    elif args.sweep and files:
        for line in run_sweep(*concatenated_corpus(files)):
            print(line)
    if args.walltime or everything:
        rows, targets = run_walltime(args.latency, args.k, args.runs, args.chunk)
        for t in targets:
            print(t)
        if args.record:
            notes = machine_note_list()
            record_walltime(rows, targets, notes, args.runs, args.chunk)
    if args.record:
        print(f"recorded in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
