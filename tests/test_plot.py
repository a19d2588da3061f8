"""The token-pressure series (a pure fold of the log) and its optional matplotlib plot."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dashr_ext import CompactionConfig, Dashr
from dashr_ext._demo import demo_messages
from dashr_ext._plot import pressure_series


@pytest.fixture
def compacted(tmp_path: Path, clock: Callable[[], int]) -> Dashr:
    config = CompactionConfig(recency_window_tokens=6000, retain_tokens=1500)
    d = Dashr.create(tmp_path / "s.jsonl", config=config, clock=clock)
    for message in demo_messages():
        if message["role"] == "assistant":
            d.request_messages()
        d.record_openai(message)
    return d


def test_series_ends_at_the_meters_count_and_marks_every_checkpoint(compacted: Dashr) -> None:
    d = compacted
    extra, recall = d.extra_envelope()
    series = pressure_series(d.session, d.meter, d.config, extra_tokens=extra, recall_tokens=recall)
    assert series.tokens[-1] == d.measure().counted
    assert [c.checkpoint for c in series.compactions] == [cp.id for cp in d.checkpoints()]
    for c in series.compactions:
        assert c.tokens_before > series.trigger_tokens > c.tokens_after
        assert c.tokens_after == series.tokens[series.seqs.index(c.seq)]
    assert list(series.seqs) == sorted(series.seqs)
    assert (series.trigger_tokens, series.retain_tokens) == (6000, 1500)
    assert series.peak_tokens == max(series.tokens)


def test_series_after_reopening_the_log_is_identical(compacted: Dashr) -> None:
    path = compacted.session.path
    assert path is not None
    live = pressure_series(compacted.session, compacted.meter, compacted.config)
    compacted.close()
    with Dashr.open(path, config=compacted.config, read_only=True) as again:
        assert pressure_series(again.session, again.meter, again.config) == live


def test_plot_pressure_draws_the_series_and_thresholds(compacted: Dashr) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = compacted.plot_pressure()
    try:
        extra, recall = compacted.extra_envelope()
        series = pressure_series(
            compacted.session,
            compacted.meter,
            compacted.config,
            extra_tokens=extra,
            recall_tokens=recall,
        )
        line = ax.get_lines()[0]
        assert list(line.get_xdata()) == list(series.seqs)
        assert list(line.get_ydata()) == list(series.tokens)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["request tokens", "trigger: recency window (6000)", "retain (1500)"]
        assert [t.get_text() for t in ax.texts] == [c.id for c in compacted.checkpoints()]
    finally:
        plt.close(ax.figure)


def test_plot_pressure_without_matplotlib_names_the_extra(
    compacted: Dashr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'dashr_ext\[plot\]'"):
        compacted.plot_pressure()
