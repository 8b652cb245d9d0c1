"""notebooks/05_picasso.ipynb runs headless at profile ci and records real metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "05_picasso.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_picasso_notebook_records_metrics():
    m = run_notebook(NB, {"PROFILE": "ci", "STEPS": 3})
    assert m["profile"] == "ci" and m["steps"] == 3
    assert m["losses_match"] is True
    assert abs(m["loss_per_field"] - m["loss_packed"]) < 1e-4
    assert m["ops_ratio_32_fields"] > 10 and m["ops_packed_32"] < m["ops_per_field_32"]
    assert m["emb_speedup"] > 0
    assert 0.5 < m["hit_rate_5pct"] <= 1.0
    assert m["explorer_updates"] >= 3 and m["explorer_speedup"] > 0
    assert 0.0 < m["explorer_hit_rate"] <= 1.0 and m["explorer_ops"] > 0
    # The watched run trains for seconds (3 at ci) under the dashboard. How many steps and samples
    # fit in them depends on the machine's load (a first step can take seconds on a loaded 2-core
    # machine), so the counts only need to show that each ran.
    assert m["dashboard_samples"] >= 1 and m["watched_steps"] >= 1
