"""The demo's simulated repository: its files as the agent changes them, and what ``grep``,
``git diff`` and pytest's collection would show of them (SPEC §11)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable


class Repo:
    """Files by path; ``head`` keeps them as they were when the session started."""

    def __init__(
        self, files: dict[str, str], params: dict[str, list[str]], short_hash: Callable[[], str]
    ) -> None:
        self.files = files
        self.head = dict(files)
        self.params = params  # test name -> its parametrize ids
        self.short_hash = short_hash

    def nodeids(self, path: str) -> list[str]:
        """The test node ids of a test file in its current state."""
        out: list[str] = []
        for name in re.findall(r"^def (test_\w+)", self.files[path], flags=re.MULTILINE):
            ids = self.params.get(name)
            out += [f"{path}::{name}[{i}]" for i in ids] if ids is not None else [f"{path}::{name}"]
        return out

    def grep(self, needle: str, roots: list[str]) -> list[str]:
        return [
            f"{path}:{i}:{line}"
            for path in sorted(self.files)
            if any(path.startswith(r) for r in roots)
            for i, line in enumerate(self.files[path].splitlines(), 1)
            if needle in line
        ]

    def _diff_lines(self, path: str) -> list[str]:
        if path not in self.head:  # untracked: git diff shows nothing
            return []
        old, new = self.head[path].splitlines(), self.files.get(path, "").splitlines()
        return list(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", lineterm="", n=2))

    def diff(self, paths: list[str]) -> str:
        """``git diff -- paths`` against ``head``."""
        out: list[str] = []
        for path in paths:
            lines = self._diff_lines(path)
            if lines:
                index = f"index {self.short_hash()}..{self.short_hash()} 100644"
                out += [f"diff --git a/{path} b/{path}", index, *lines]
        return "\n".join(out)

    def diffstat(self) -> str:
        """``git diff --stat`` against ``head`` (tracked files only)."""
        rows: list[tuple[str, int, int]] = []
        for path in sorted(self.head):
            lines = self._diff_lines(path)[2:]
            plus = sum(1 for x in lines if x.startswith("+"))
            minus = sum(1 for x in lines if x.startswith("-"))
            if plus or minus:
                rows.append((path, plus, minus))
        if not rows:
            return ""
        width = max(len(p) for p, _, _ in rows)
        out = [f" {p.ljust(width)} | {a + d:>3} {'+' * a}{'-' * d}" for p, a, d in rows]
        adds, dels = sum(r[1] for r in rows), sum(r[2] for r in rows)
        s = "s" if len(rows) > 1 else ""
        out.append(f" {len(rows)} file{s} changed, {adds} insertions(+), {dels} deletions(-)")
        return "\n".join(out)
