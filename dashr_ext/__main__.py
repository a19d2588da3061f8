"""``python -m dashr_ext``: the ``dashr`` command, for when the console script is not on PATH."""

from __future__ import annotations

from ._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
