"""Turn memory (SPEC §6.4): rewrite a completed turn's nodes N→M in place, keeping its shape.

:mod:`.nodes` reads one closed turn's current surface nodes from a session; :mod:`.editor`
is the pure working-turn editor a compressor edits them with (opaque ids, semantic sources
and landing slices, final validation); :mod:`.extractive` is the offline compressor and
:mod:`.landing` the pure plan of the events a rewrite lands as. :mod:`.jobs` is the only
part that writes: the durable queue and its worker thread.
"""

from __future__ import annotations

from .editor import (
    DEFAULT_READ_MAX_CHARS,
    CatalogRow,
    EditorState,
    NewNode,
    ReadResult,
    TurnEditor,
    TurnProblem,
    WorkingNode,
    catalog_text,
    final_problems,
)
from .nodes import NodeKind, TurnNode, image_marker, marker_refs, render_content, turn_nodes

__all__ = [
    "DEFAULT_READ_MAX_CHARS",
    "CatalogRow",
    "EditorState",
    "NewNode",
    "NodeKind",
    "ReadResult",
    "TurnEditor",
    "TurnNode",
    "TurnProblem",
    "WorkingNode",
    "catalog_text",
    "final_problems",
    "image_marker",
    "marker_refs",
    "render_content",
    "turn_nodes",
]
