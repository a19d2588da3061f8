"""Shared fixtures: the real-session corpus and deterministic clocks."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from dashr_ext.testing import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / ".." / "shared" / "corpus").resolve()


def corpus_files() -> list[Path]:
    """Every corpus session file, or [] when the corpus is absent."""
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.glob("*/*.json"))


def load_corpus(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


NO_PASS_UNDER: dict[int, frozenset[str]] = {
    20_000: frozenset(
        {
            "Project-MONAI__MONAI-3715_4",
            "Project-MONAI__MONAI-5686_4",
            "Project-MONAI__MONAI-6849_1",
            "getmoto__moto-6387_0",
            "python__mypy-15976_0",
            "sympy__sympy-15976",  # its one large unit cannot be condensed
        }
    ),
    8_000: frozenset({"Project-MONAI__MONAI-5686_4", "Project-MONAI__MONAI-6849_1"}),
}
"""The corpus sessions in which no compaction pass runs when they are recorded with a
``request_messages()`` after each message under a recency window of that many tokens (the
tests retain 4k of 20k, 2k of 8k): a test of what the passes did leaves them out when it is
collected, rather than generating a case that could only skip."""


def compacting_corpus_files(window: int) -> list[Path]:
    """The corpus session files in which a pass runs under a ``window``-token recency window."""
    return [p for p in corpus_files() if p.stem not in NO_PASS_UNDER[window]]


def no_pass_ran(path: Path, window: int) -> str:
    """The failure message of a session expected to compact under ``window`` that did not."""
    return (
        f"no pass ran on {path.stem} under a {window // 1000}k recency window: if that is now "
        "expected, add it to NO_PASS_UNDER in tests/conftest.py"
    )


def corpus_params(compacting_under: int | None = None) -> list[Any]:
    """One parameter per corpus session file (its stem the id); with ``compacting_under``,
    only the sessions in which a pass runs under a recency window of that many tokens."""
    if compacting_under is None:
        files = corpus_files()
    else:
        files = compacting_corpus_files(compacting_under)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/corpus is absent"))]
    return [pytest.param(p, id=p.stem) for p in files]


@pytest.fixture
def clock() -> Callable[[], int]:
    """A deterministic clock: 2026-07-06 12:00:00 UTC, one second per call."""
    ticks = itertools.count()
    start = 1_783_339_200_000
    return lambda: start + 1000 * next(ticks)


@pytest.fixture(autouse=True)
def _dashr_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Keep every test's default session location out of the real home directory."""
    monkeypatch.setenv("DASHR_HOME", str(tmp_path_factory.mktemp("dashr_home")))
    yield


@pytest.fixture(autouse=True)
def _close_controllers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every controller a test made (releasing its file and lock) when the test ends."""
    from dashr_ext._controller import Dashr

    made: list[Dashr] = []
    original = Dashr.__init__

    def tracking_init(self: Dashr, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Dashr, "__init__", tracking_init)
    yield
    for controller in made:
        controller.close()


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The global IPython instance (what ``get_ipython()`` returns), removed afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    main = sys.modules.get("__main__")
    existed = InteractiveShell.initialized()
    ip = InteractiveShell.instance(config=config)
    yield ip
    if not existed:
        InteractiveShell.clear_instance()
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _no_api_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never use a real key; a key set on the machine must not leak into them."""
    from dashr_ext._redaction import API_KEY_ENV

    for name in API_KEY_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted OpenAI-compatible server on loopback, stopped after the test."""
    from dashr_ext.testing import ScriptedServer

    with ScriptedServer() as s:
        yield s


@pytest.fixture
def shells() -> Iterator[list[InteractiveShell]]:
    """Shells made by a test; each is unloaded (sessions closed) afterwards."""
    import dashr_ext

    main = sys.modules.get("__main__")
    made: list[InteractiveShell] = []
    yield made
    for made_shell in made:
        dashr_ext.unload_ipython_extension(made_shell)
    if main is not None:
        sys.modules["__main__"] = main
