"""The AliGraph notebook runs headless at profile ci and records sensible metrics."""

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "02_aligraph.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_notebook_runs_and_records_metrics():
    from labkit.graph.csr import build_csr
    from labkit.graph.rmat import RMatParams, rmat_edges
    m = run_notebook(NB, {"PROFILE": "ci"})
    p = RMatParams(scale=14)
    assert m["build_edges"] == p.num_edges and m["build_edges_per_s"] > 0
    # The out-of-core build kept every distinct edge that is not a self loop, no more, no fewer.
    ref = build_csr(*rmat_edges(p), p.num_nodes, dedup=True, drop_self_loops=True)
    assert m["streamed_edges"] == ref.num_edges < p.num_edges
    assert 0.6 < m["edge_cut_hash4"] < 0.85 and m["edge_cut_ldg4"] < m["edge_cut_hash4"]
    assert m["balance_ldg4"] <= 1.06 and m["edge_cut_fennel4"] < m["edge_cut_hash4"]
    assert 0 < m["cache_fraction"] <= 0.2 and 0 < m["cache_hit_rate"] < 1
    assert m["cache_off_hit_rate"] == 0 and m["cache_epoch_s_off"] > 0 and m["cache_epoch_s_on"] > 0
    assert m["build_speedup_scipy"] > 0
    assert len(m["operators"]) == 8 and all(v > 0 for v in m["operators"].values())
    assert m["gsl_shapes"] == [[64], [64, 10], [640, 5]]
    assert m["accuracy"] > 0.6  # 16 classes, chance 0.0625
    assert m["train_batches"] > 0 and m["dashboard_samples"] >= 1
