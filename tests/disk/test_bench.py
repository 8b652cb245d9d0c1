"""`labkit bench disk` at profile ci: every claim is measured, and what explains them is recorded."""

import importlib
import math

import pytest

from labkit.core.datasets import open_dataset
from labkit.core.systems import registered
from labkit.disk.plans import caliex_plans_nbytes


@pytest.mark.slow
def test_bench_ci_measures_every_claim():
    importlib.import_module("labkit.disk.bench")  # registers the system
    rep = registered()["disk"].run_bench("ci", progress=False)
    claims = {c.id: c for c in rep.claims}
    assert set(claims) == {"disk.speedup_naive", "disk.speedup_naive_gat", "disk.speedup_ginex",
                           "disk.slowdown_vs_memory", "disk.tuner_gap", "disk.peak_rss_vs_stated"}
    for cid, c in claims.items():
        assert c.measured is not None and math.isfinite(c.measured), cid
    # the tuned split against the best of a sweep that holds it, by the same per-round statistic
    sweep = next(c for c in rep.comparisons if "split sweep" in c.case)
    tuned = f"f={rep.results['disk.tuner.split']:.2f}"
    assert tuned in sweep.names
    gap = claims["disk.tuner_gap"].measured
    assert gap >= 0 and gap == pytest.approx(max(sweep.ratio(tuned, n) for n in sweep.names) - 1)
    r = rep.results
    for model, names in (("sage", ("naive", "ginex", "caliex", "memory")), ("gat", ("naive", "caliex"))):
        for n in names:
            assert r[f"disk.{model}.{n}.wall_s_per_batch"] > 0 and r[f"disk.{model}.{n}.open_s"] > 0
            assert 0 <= r[f"disk.{model}.{n}.acc_last_batches"] <= 1
        # the one-off setup is charged somewhere: per mini-batch of an epoch, and said in a note
        assert r[f"disk.{model}.caliex.setup_s_per_epoch_batch"] > 0
    assert any(n.startswith("disk.speedup_naive_gat: CaliEX's one-off setup") for n in rep.notes)
    assert 0 <= r["disk.hit_rate_features"] <= 1 and r["disk.read_amplification"] >= 1
    # the overhead is stated before the run (a measured training working set, the plans' bytes per node, the allowance)
    assert r["disk.caliex.rss.training_working_set_mib"] > 0
    nodes = int(open_dataset("caliex", "ci").meta["num_nodes"])
    assert r["disk.caliex.rss.plans_mib"] * 2**20 == pytest.approx(caliex_plans_nbytes(nodes))
    assert r["disk.caliex.rss.stated_overhead_mib"] == pytest.approx(
        r["disk.caliex.rss.training_working_set_mib"] + r["disk.caliex.rss.plans_mib"]
        + r["disk.caliex.rss.allocator_allowance_mib"])
    grew = max(r["disk.caliex.rss.growth_mib"], r["disk.caliex.rss.setup_growth_mib"])
    assert claims["disk.peak_rss_vs_stated"].measured == pytest.approx(grew / r["disk.caliex.rss.bound_mib"])
    bare = r["disk.caliex.rss.bound_mib"] - r["disk.caliex.rss.allocator_allowance_mib"]
    assert r["disk.caliex.rss.over_bound_without_allowance"] == pytest.approx(grew / bare)
    assert any(n.startswith("disk.peak_rss_vs_stated: without the allowance") for n in rep.notes)
