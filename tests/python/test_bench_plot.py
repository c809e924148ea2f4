"""bench/plot.py's batch-wait figure on made-up rows (no benchmark run): the left panel is a
distribution per source (a box per source, named on the x axis), not the raw per-batch series
whose zigzag read as noise; the right panel keeps one CDF per source."""

from __future__ import annotations

import importlib.util
import random

import pytest

from conftest import REPO


def load_plot():
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("feed_plot", REPO / "bench" / "plot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wait_panel_is_a_distribution_per_source():
    plot = load_plot()
    rng = random.Random(3)
    batches, n = [], 200
    for src in ("sync", "local", "remote"):
        for i in range(n):
            # Alternating 0 and a few ms: the pattern whose raw series zigzags.
            wait = 0.0 if i % 2 else rng.uniform(1, 5)
            batches.append({"source": src, "wait_ms": str(wait), "warmup": "0"})
    runs = [{"source": s, "wait_p50_ms": 1.0, "wait_p99_ms": 5.0, "wait_max_ms": 5.0}
            for s in ("sync", "local", "remote")]
    fig = plot.wait_figure({"device": "cpu", "model": "mlp", "batch": 32}, batches, runs)
    left, right = fig.axes[0], fig.axes[1]
    assert [t.get_text() for t in left.get_xticklabels()] == ["sync", "local", "remote"]
    assert not [ln for ln in left.get_lines() if len(ln.get_xdata()) >= n], \
        "the left panel draws a per-batch series"
    assert len([ln for ln in right.get_lines() if len(ln.get_xdata()) >= n]) == 3
    plot.plt.close(fig)
