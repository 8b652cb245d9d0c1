"""notebooks/03_caliex.ipynb runs headless at profile ci and records real metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "03_caliex.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_caliex_notebook_records_metrics():
    m = run_notebook(NB, {"PROFILE": "ci", "BATCHES": 2})
    assert m["profile"] == "ci" and m["batches"] == 2
    for k in ("naive_s_per_batch", "caliex_s_per_batch", "ginex_s_per_batch", "memory_s_per_batch"):
        assert m[k] > 0  # recorded (how fast is the bench's business, not a test's)
    assert m["losses_match"] is True
    assert 0.0 <= m["tuned_split"] <= 1.0 and len(m["predicted_curve"]) == 21
    assert all(t > 0 for t in m["predicted_curve"])
    assert 0.0 <= m["hit_rate_features"] <= 1.0 and 0.0 <= m["hit_rate_topology"] <= 1.0
    assert m["hit_rate_features"] + m["hit_rate_topology"] > 0  # some cache serves something
    assert m["read_amplification"] >= 1.0 and m["naive_bytes_read"] > 0 and m["caliex_bytes_read"] > 0
    # Same mini-batches: what CaliEX must fetch from disk is naive's need minus its cache hits
    # (it may still read more bytes, as sweeps and coalescing read through gaps).
    assert 0 < m["caliex_bytes_needed"] < m["naive_bytes_needed"]
    assert m["explorer_updates"] >= 2 and 0.0 <= m["explorer_hit_rate_features"] <= 1.0
    assert m["dashboard_samples"] >= 1
    assert 0 < m["budget_peak"] <= m["budget_total"]
