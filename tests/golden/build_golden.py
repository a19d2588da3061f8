"""Drive one scripted session through every compaction path and write what it produced.

Used by ``tests/test_golden.py``: the same script must produce byte-identical outputs
(event log, archive, request messages, recall texts) whatever the internal layout.
Run ``python tests/golden/build_golden.py`` to regenerate the pinned files after a
deliberate behaviour change (and say so in the commit).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: 1_783_339_200_000 + 1000 * next(ticks)


def run(directory: Path) -> dict[str, bytes]:
    """Run the script in ``directory``; returns each output's name and bytes."""
    from dashr_ext import CompactionConfig, Dashr
    from dashr_ext._demo import DEMO_TOOLS, demo_messages

    path = directory / "golden.jsonl"
    config = CompactionConfig(recency_window_tokens=20_000, retain_tokens=4_000)
    requests: list[Any] = []
    with Dashr.create(
        path, config=config, tools=DEMO_TOOLS, session_id="golden", clock=_clock()
    ) as d:
        d.extra_tools = [
            {
                "type": "function",
                "function": {
                    "name": "run_cell",
                    "description": "Run code in the kernel.",
                    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
                },
            }
        ]
        for _i, message in enumerate(demo_messages()):
            d.record_openai(message)
            messages = d.request_messages()
            requests.append(messages)
        d.report_usage(prompt_tokens=d.measure().total + 17, completion_tokens=40)
        manual = d.compact()
        overflow = d.handle_overflow()
        final = d.request_messages()
        recall = {
            "outline": str(d.history_outline()),
            "read": [str(d.history_read(cp.id)) for cp in d.checkpoints()],
            "search": str(d.history_search("Traceback", limit=5)),
            "tools": d.tool_schemas(),
            "manual": None if manual is None else manual.checkpoint,
            "overflow": overflow,
        }
        archive = json.dumps(d.archive, sort_keys=True, indent=1, ensure_ascii=False)
    # Reopen as a writer: the rebuilt archive must agree with the live run.
    with Dashr.open(path, config=config, clock=_clock()) as d2:
        rebuilt = json.dumps(d2.archive, sort_keys=True, indent=1, ensure_ascii=False)
    return {
        "log.jsonl": path.read_bytes(),
        "archive.json": archive.encode(),
        "rebuilt_archive.json": rebuilt.encode(),
        "failures.jsonl": _failures(directory),
        "requests.json": json.dumps(
            {"steps": requests[-3:], "final": final, "count": len(requests)},
            indent=1,
            ensure_ascii=False,
        ).encode(),
        "recall.json": json.dumps(recall, indent=1, ensure_ascii=False).encode(),
    }


def _failures(directory: Path) -> bytes:
    """A capped archive, a failing summarizer, an inflation-guard refusal, an orphan pass."""
    import warnings

    from dashr_ext import CompactionConfig, Dashr
    from dashr_ext._summarizers.base import SummaryResult
    from dashr_ext.errors import CompactionError

    class Failing:
        kind, model = "failing", None

        def summarize(self, request: Any) -> SummaryResult:
            raise RuntimeError("scripted summarizer failure")

        async def asummarize(self, request: Any) -> SummaryResult:
            return self.summarize(request)

    class Bloated(Failing):
        kind = "bloated"

        def summarize(self, request: Any) -> SummaryResult:
            return SummaryResult("word " * 20_000, "bloated", None)

    path = directory / "failures.jsonl"
    config = CompactionConfig(
        recency_window_tokens=1_500, retain_tokens=400, archive_max_bytes=6_000
    )
    with Dashr.create(path, config=config, session_id="failures", clock=_clock()) as d:
        for i in range(18):
            d.record_openai({"role": "user", "content": f"request {i}: " + "detail " * 60})
            d.record_openai({"role": "assistant", "content": f"answer {i}: " + "done " * 40})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                d.request_messages()
        for summarizer in (Failing(), Bloated()):
            d.summarizer = summarizer
            with contextlib.suppress(CompactionError):
                d.compact()
        # An orphan pass: a start event with no end, as a crash would leave it.
        d.session.append_log(
            "compaction/start", {"compactionId": "p999", "trigger": "manual", "engine": "summary"}
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Dashr.open(path, config=config, clock=_clock()) as d2:
            capped = json.dumps(d2.archive, sort_keys=True, ensure_ascii=False)
    return path.read_bytes() + b"# archive\n" + capped.encode() + b"\n"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        outputs = run(Path(tmp))
    outputs.pop("rebuilt_archive.json")  # the test checks it equals archive.json
    for name, data in outputs.items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
