"""The bench runs at profile ci and fills in every claim (values checked, timings not)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_bench_ci_measures_every_claim(dw_root, monkeypatch, no_leaks):
    monkeypatch.setenv("LABKIT_DATA", dw_root)
    from labkit.dataworkers.bench import CLAIMS, SYSTEM

    report = SYSTEM.run_bench("ci", progress=False)
    claims = {c.id: c for c in report.claims}
    assert set(claims) == {c.id for c in CLAIMS}
    assert all(c.measured is not None for c in claims.values())
    assert claims["dw.lost_batches"].measured == 0 and claims["dw.duplicated_batches"].measured == 0
    assert report.results["fault_in_order"] == 1.0 and report.results["fault_workers_killed"] >= 1
    assert claims["dw.speedup_monolithic"].measured > 0 and claims["dw.vs_dataloader_best"].measured > 0
    assert claims["dw.sim_jct_improvement"].measured > 1.0
    assert claims["dw.sim_gpu_util_improvement"].measured > 1.0
    assert 0 < claims["dw.autoscale_fraction_of_best"].measured
    # a speed claim that misses (timings are the machine's) is explained by a note that names it
    for cid in ("dw.speedup_monolithic", "dw.vs_dataloader_best", "dw.autoscale_fraction_of_best"):
        if claims[cid].passed is False:
            assert any(cid in n for n in report.notes), (cid, report.notes)
    names = {n for c in report.comparisons for n in c.names}
    assert {"monolithic", "goldminer_autoscaled", "static_workers1", "dataloader_nw1"} <= names
