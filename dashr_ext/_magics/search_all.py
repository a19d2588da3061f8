"""``%history_search --all``: every session file of the session directory, through its index.

The directory is ``Dashr.session_dir`` (``$DASHR_HOME/sessions`` when unset); the index is
``<dir>/.dashr-index.sqlite3``, built and kept up to date from the logs by
:mod:`dashr_ext._recall.index`.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from .._config import RecallConfig
from .._recall import RecallResult
from .._recall.index import search_all
from .arguments import one_line_errors
from .attachment import sessions_dir

__all__ = ["search_sessions"]


def search_sessions(
    session_dir: str | None,
    query: str,
    checkpoint: str | None,
    limit: int | None,
    config: RecallConfig,
    cursor: str | None = None,
) -> RecallResult:
    """The hits of ``query`` in every session of the session directory, newest first."""
    if cursor is not None:
        raise UsageError(
            "%history_search --all: --cursor pages through one session's hits; drop --all to "
            "page this session's, or narrow the --all search with a longer phrase"
        )
    if checkpoint is not None:
        raise UsageError(
            "%history_search --all: --checkpoint names a checkpoint of one session; leave it "
            "out to search every session, or drop --all to search this one"
        )
    directory = sessions_dir(session_dir)
    if not directory.is_dir():
        raise UsageError(
            f"%history_search --all: no session directory {directory} (Dashr.session_dir, "
            "$DASHR_HOME/sessions when unset)"
        )
    with one_line_errors():
        return search_all(directory, query, limit=limit, config=config)
