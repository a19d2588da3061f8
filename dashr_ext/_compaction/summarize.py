"""Step 2 of a pass, ``summarize``: the only step that talks to a model (SPEC §5.2).

Takes every summary request of a plan at once, so an engine that compacts several regions
in one pass has them summarized concurrently; a lone request runs on the calling thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._summarizers.base import Summarizer, SummaryRequest, SummaryResult
from ..errors import SummarizerError

__all__ = ["MAX_CONCURRENT_SUMMARIES", "summarize", "summarize_each"]

MAX_CONCURRENT_SUMMARIES = 16
"""Summarize calls of one pass in flight at once: a pass rarely has more regions (a 128k
window compacts ~80k tokens, ten 8k chunks), and a provider may rate-limit more."""


def summarize(summarizer: Summarizer, requests: Sequence[SummaryRequest]) -> list[SummaryResult]:
    """One non-empty summary per request, in request order; the first failure raises.

    Threads rather than an event loop: a Jupyter kernel already runs one on this thread.
    """
    if len(requests) == 1:
        results = [summarizer.summarize(requests[0])]
    else:
        from concurrent.futures import ThreadPoolExecutor  # (and logging) for a pass that needs it

        workers = min(MAX_CONCURRENT_SUMMARIES, len(requests)) or 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dashr-summarize") as pool:
            results = list(pool.map(summarizer.summarize, requests))
    for result in results:
        if not result.text.strip():
            raise SummarizerError(f"{result.kind} summarizer returned an empty summary")
    return results


def summarize_each(
    summarizer: Summarizer, requests: Sequence[SummaryRequest]
) -> list[SummaryResult | Exception]:
    """Every request summarized concurrently; each outcome is its result or its exception.

    A failure does not cancel the others: the recallable engine degrades a failed stub to
    a code-only pointer stub and needs only the state summary. An empty summary counts as
    a :class:`SummarizerError`.
    """

    def one(request: SummaryRequest) -> SummaryResult | Exception:
        try:
            result = summarizer.summarize(request)
        except Exception as exc:  # the caller decides which failures are fatal
            return exc
        if not result.text.strip():
            return SummarizerError(f"{result.kind} summarizer returned an empty summary")
        return result

    if len(requests) <= 1:
        return [one(r) for r in requests]
    from concurrent.futures import ThreadPoolExecutor

    workers = min(MAX_CONCURRENT_SUMMARIES, len(requests))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dashr-summarize") as pool:
        return list(pool.map(one, requests))
