"""notebooks/04_goldminer.ipynb runs headless at its default profile ("lab") and records real metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "04_goldminer.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_goldminer_notebook_records_metrics(dw_root, monkeypatch, no_leaks):
    monkeypatch.setenv("LABKIT_DATA", dw_root)
    m = run_notebook(NB, {"PROFILE": "lab"})  # its default
    assert m["profile"] == "lab"
    assert m["cut_kind"] == "traced prefix" and m["prefix_nodes"] == ["permute", "float_1", "sub", "truediv"]
    assert m["equivalence_batches"] == 2 and m["equivalence_max_loss_diff"] == 0.0
    # The headline: the job with data workers against the monolithic one, interleaved rounds.
    assert m["rounds"] >= 5 and m["preprocess_ms"] > m["step_ms"] > 0  # preprocessing is the bottleneck
    assert 0 < m["speedup_lo"] <= m["speedup"] <= m["speedup_hi"]
    expected = "faster" if m["speedup_lo"] > 1 else "slower" if m["speedup_hi"] < 1 else "within noise"
    assert m["speedup_verdict"] == expected  # the notebook's own words follow its interval
    # Whether the job gets faster is timing, which a busy machine moves (a CI run once saw the
    # one-worker interval reach down to 0.71x); the bench records it as a claim. The test holds
    # the notebook to reporting a well-formed interval, not to a wall-clock threshold.
    assert 0 < m["speedup_1worker_lo"] <= m["speedup_1worker"]
    # The live panel's scripted session: start, one more worker, a kill, stop; nothing lost.
    assert [e.split()[0] for e in m["live_events"]] == ["start,", "budget", "killed", "stop"]
    assert m["worker_deaths"] == 1 and m["batches_lost"] == 0 and m["live_batches"] > 0
    assert m["live_max_workers_seen"] == 3 and m["dashboard_samples"] >= 3  # the resize shows in the dashboard
    assert m["sim_jct_improvement"] > 1.0 and m["sim_gpu_util_improvement"] > 1.0
    assert m["sim_plot_traces"] == 4  # the explorer draws the JCT CDF and utilisation plots itself
    # The sensitivity plot (modelled): one gain per demand level plus the trace as drawn; where every
    # job fits its GPUs' own vCPUs both policies are one schedule, so the gain there is exactly 1.
    from labkit.dataworkers.simulator import SENSITIVITY_DEMANDS
    assert m["sensitivity_levels"] == len(SENSITIVITY_DEMANDS) + 1 and m["sensitivity_traces"] == 3
    assert m["sensitivity_fit_gains"] and set(m["sensitivity_fit_gains"]) == {1.0}
    assert m["sensitivity_base_gain"] == m["sim_jct_improvement"]  # the explorer's trace, at its defaults
