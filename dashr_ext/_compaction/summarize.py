"""Step 2 of a pass, ``summarize``: the only step that talks to a model (SPEC §5.2).

Takes every summary request of a plan at once, so an engine that compacts several regions
in one pass has them summarized concurrently; a lone request runs on the calling thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .._summarizers.base import Summarizer, SummaryRequest, SummaryResult
from ..errors import SummarizerError

__all__ = ["summarize"]

MAX_CONCURRENT_SUMMARIES = 4


def summarize(summarizer: Summarizer, requests: Sequence[SummaryRequest]) -> list[SummaryResult]:
    """One non-empty summary per request, in request order; the first failure raises.

    Threads rather than an event loop: a Jupyter kernel already runs one on this thread.
    """
    if len(requests) == 1:
        results = [summarizer.summarize(requests[0])]
    else:
        workers = min(MAX_CONCURRENT_SUMMARIES, len(requests)) or 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dashr-summarize") as pool:
            results = list(pool.map(summarizer.summarize, requests))
    for result in results:
        if not result.text.strip():
            raise SummarizerError(f"{result.kind} summarizer returned an empty summary")
    return results
