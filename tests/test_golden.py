"""No behaviour change across internal restructuring: one scripted session, pinned outputs.

``tests/golden/build_golden.py`` drives a realistic session through pressure passes, a
usage anchor, a manual pass, an overflow reduction, recall, a capped archive, a failing
summarizer, an inflation-guard refusal and orphan repair on open. The files beside it were
written by that script; the current code must reproduce them byte for byte.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


def _load_builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_golden", GOLDEN / "build_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_golden"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    result: dict[str, bytes] = _load_builder().run(tmp_path_factory.mktemp("golden"))
    return result


def _first_difference(expected: bytes, actual: bytes) -> str:
    diff = difflib.unified_diff(
        expected.decode().splitlines(), actual.decode().splitlines(), lineterm="", n=1
    )
    return "\n".join(line[:300] for line in list(diff)[:20])


@pytest.mark.parametrize(
    "name", ["log.jsonl", "archive.json", "requests.json", "recall.json", "failures.jsonl"]
)
def test_scripted_session_reproduces_the_pinned_output(
    outputs: dict[str, bytes], name: str
) -> None:
    expected = (GOLDEN / name).read_bytes()
    actual = outputs[name]
    assert actual == expected, f"{name} changed:\n{_first_difference(expected, actual)}"


def test_archive_rebuilt_on_open_equals_the_live_archive(outputs: dict[str, bytes]) -> None:
    assert outputs["rebuilt_archive.json"] == outputs["archive.json"]


def test_the_log_does_not_depend_on_hash_seeds(tmp_path: Path) -> None:
    """What a pass stores (its names among it) is the same whatever order sets iterate in."""
    import os
    import subprocess

    code = (
        "import sys, tempfile, pathlib, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('b', {str(GOLDEN / 'build_golden.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['b'] = m\n"
        "spec.loader.exec_module(m)\n"
        "out = m.run(pathlib.Path(tempfile.mkdtemp()))\n"
        "sys.stdout.write(out['log.jsonl'].decode())\n"
    )
    outputs = set()
    for seed in ("0", "7", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "DASHR_HOME": str(tmp_path)}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout)
    assert len(outputs) == 1
