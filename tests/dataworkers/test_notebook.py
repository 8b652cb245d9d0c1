"""notebooks/04_goldminer.ipynb runs headless at profile ci and records real metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "04_goldminer.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_goldminer_notebook_records_metrics(dw_root, monkeypatch, no_leaks):
    monkeypatch.setenv("LABKIT_DATA", dw_root)
    m = run_notebook(NB, {"PROFILE": "ci", "LIVE_SECONDS": 5.0, "SIM_JOBS": 80})
    assert m["profile"] == "ci"
    assert m["cut_kind"] == "traced prefix" and m["prefix_nodes"] == ["permute", "float_1", "sub", "truediv"]
    assert m["equivalence_batches"] == 2 and m["equivalence_max_loss_diff"] == 0.0
    # The monolithic job trains for a time (3 s at ci; its batches never run out, so only the time
    # ends it) with the dashboard sampling meanwhile. How many batches and samples fit in those
    # seconds depends on the machine's load, so the counts only need to show that each ran.
    assert m["mono_seconds"] >= 3.0 and m["mono_batches"] >= 1 and 0.0 < m["mono_stall_fraction"] < 1.0
    assert m["mono_dashboard_samples"] >= 1
    assert m["live_batches"] > 0 and m["live_throughput"] > 0
    # Every batch the pool handed over reached the trainer, once, despite the kill.
    assert m["delivered"] == m["live_batches"]
    assert m["worker_deaths"] == 1 and any(a.startswith("killed worker") for a in m["panel_actions"])
    assert 1 <= m["workers_final"] <= 4 and m["autoscale_windows"] >= 1
    assert m["sim_jct_improvement"] > 1.0 and m["sim_gpu_util_improvement"] > 1.0
    assert m["sim_plot_traces"] == 4  # the explorer draws the JCT CDF and utilisation plots itself
    assert m["dashboard_samples"] >= 1  # the live job's dashboard sampled while it ran
