"""History recall: read and search what compaction condensed (SPEC 8).

Recall is a pure function of the session log: no index files, no embeddings, no model
calls. :class:`Recall` offers ``history_outline``, ``history_read`` and ``history_search``
with one semantics whether they are called from Python, from a magic or by a model through
:meth:`Recall.call_tool`; every call returns a :class:`RecallResult`.

Searching every session of a directory (:mod:`.index`, ``dashr search --all``) is the one
exception: it keeps an SQLite FTS5 index next to the logs, derived from them alone and rebuilt
from them when missing or damaged (docs/search-index.md).
"""

from __future__ import annotations

from .queries import Recall
from .result import RecallResult
from .tools import ACCEPTED_ARGUMENTS, TOOL_NAMES, tool_schemas

__all__ = [
    "ACCEPTED_ARGUMENTS",
    "TOOL_NAMES",
    "Recall",
    "RecallResult",
    "tool_schemas",
]
