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
