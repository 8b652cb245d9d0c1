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
    # Claims from repeated timings carry a 95% interval; exact counts and modelled figures do not.
    for cid in ("dw.speedup_monolithic", "dw.vs_dataloader_best", "dw.autoscale_fraction_of_best"):
        c = claims[cid]
        assert c.kind == "measured" and c.low <= c.measured <= c.high and c.rounds >= 2, cid
    for cid in ("dw.lost_batches", "dw.duplicated_batches", "dw.sim_jct_improvement", "dw.sim_gpu_util_improvement"):
        assert claims[cid].low is None and claims[cid].high is None, cid
    assert claims["dw.sim_jct_improvement"].kind == claims["dw.sim_gpu_util_improvement"].kind == "modelled"
    assert report.results["compare_rounds"] >= 2
    # The sensitivity of the modelled JCT gain to the CPU-per-GPU demand, recorded per level.
    from labkit.dataworkers.simulator import SENSITIVITY_DEMANDS
    gains = {d: report.results[f"sim_sensitivity_jct_gain_demand{d:g}"] for d in SENSITIVITY_DEMANDS}
    assert all(g > 0 for g in gains.values()) and report.results["sim_trace_mean_cpus_per_gpu"] > 0
    # a speed claim that misses (timings are the machine's) is explained by a note that names it
    for cid in ("dw.speedup_monolithic", "dw.vs_dataloader_best", "dw.autoscale_fraction_of_best"):
        if claims[cid].status in ("miss", "inconclusive"):
            assert any(cid in n for n in report.notes), (cid, report.notes)
    # CPU per batch of the whole process tree, and the speedup that CPU time allows on these cores
    r = report.results
    assert r["cpu_ms_per_batch_monolithic"] > 0 and r["cpu_ms_per_batch_goldminer_autoscaled"] > 0
    assert r["goldminer_cpu_bound_vs_monolithic"] > 0
    names = {n for c in report.comparisons for n in c.names}
    assert {"monolithic", "goldminer_autoscaled", "static_workers1", "dataloader_nw1"} <= names


BUSY = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nsys.stdin.read()"


def test_metered_counts_the_cpu_of_child_processes():
    import subprocess
    import sys
    import time

    from labkit.dataworkers.bench import metered
    from labkit.dataworkers.workers import process_cpu_seconds

    children = []

    def start_busy_child() -> None:  # a child that burns 0.3 s of CPU and is still alive when the meter reads
        p = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE)
        children.append(p)
        while (process_cpu_seconds(p.pid) or 0) < 0.3:
            time.sleep(0.01)

    used: list[float] = []
    try:
        metered(start_busy_child, used)()
    finally:
        for p in children:
            p.communicate(b"")
    assert len(used) == 1 and used[0] >= 0.25
