"""`labkit bench disk` at profile ci: every claim is measured, and what explains them is recorded."""

import importlib
import math

import numpy as np
import pytest

from labkit.core.datasets import open_dataset
from labkit.core.systems import registered
from labkit.disk.bench import CLAIMS, SETTINGS, epoch_seconds
from labkit.disk.plans import caliex_plans_nbytes


def test_epoch_time_charges_the_setup_once_per_epoch():
    """A contender whose setup is slow loses per epoch what it gains per mini-batch."""
    fast_setup = epoch_seconds(1.0, [2.0, 2.2], per_call=16, epoch_batches=200)
    assert fast_setup == pytest.approx([1.0 + 200 * 2.0 / 16, 1.0 + 200 * 2.2 / 16])
    slow = epoch_seconds(400.0, [1.0, 1.1], 16, 200)
    naive = epoch_seconds(0.0, [4.0, 4.4], 16, 200)
    steady = [a / b for a, b in zip([4.0, 4.4], [1.0, 1.1])]
    whole = [a / b for a, b in zip(naive, slow)]
    assert steady == pytest.approx([4.0, 4.0]) and max(whole) < 1.0


def test_every_speedup_claim_is_per_epoch_with_setup_and_an_interval_of_enough_rounds():
    st = SETTINGS["small"]
    assert st["repeats"] >= 5 and st["max_rounds"] >= st["repeats"]
    assert 0 in st["superbatches"] and min(st["superbatches"][:-1]) == 4  # 4 .. one epoch
    # two tuner budgets, neither the main one (where the best split sat on the boundary)
    assert len(st["tuner_fractions"]) == 2 and st["fraction"] not in st["tuner_fractions"]
    for c in CLAIMS:
        if c.id.startswith("disk.speedup") or c.id == "disk.slowdown_vs_memory":
            assert "per epoch, setup included" in c.claim, c.id


@pytest.mark.slow
def test_bench_ci_measures_every_claim():
    importlib.import_module("labkit.disk.bench")  # registers the system
    rep = registered()["disk"].run_bench("ci", progress=False)
    claims = {c.id: c for c in rep.claims}
    assert set(claims) == {"disk.speedup_naive", "disk.speedup_naive_gat", "disk.speedup_ginex",
                           "disk.slowdown_vs_memory", "disk.tuner_gap", "disk.peak_rss_vs_stated"}
    for cid, c in claims.items():
        assert c.measured is not None and math.isfinite(c.measured), cid
        if cid != "disk.peak_rss_vs_stated":  # from repeated timings: a bootstrap interval over >= 5 rounds
            assert c.rounds >= 5 and c.low <= c.measured <= c.high, cid
            assert c.status in ("pass", "miss", "inconclusive"), cid
    r = rep.results
    comp = next(c for c in rep.comparisons if c.case.startswith("sage: "))
    E, k = r["disk.sage.epoch_batches"], SETTINGS["ci"]["per_call"]
    # Setup is part of each round's epoch: the claim is the median of whole-job epoch ratios.
    assert r["disk.sage.caliex.setup_s"] == pytest.approx(r["disk.sage.presample_s"] + r["disk.sage.caliex.open_s"])
    n = claims["disk.speedup_naive"].rounds

    def epoch(name):
        return np.array(epoch_seconds(r[f"disk.sage.{name}.setup_s"], comp.times[name][:n], k, E))
    assert claims["disk.speedup_naive"].measured == pytest.approx(float(np.median(epoch("naive") / epoch("caliex"))))
    assert r["disk.speedup_naive.steady_state"] == pytest.approx(comp.spread("naive", "caliex").median)
    for cid in ("disk.speedup_naive", "disk.speedup_ginex", "disk.slowdown_vs_memory", "disk.speedup_naive_gat"):
        assert r[cid + ".steady_state_lo"] <= r[cid + ".steady_state"] <= r[cid + ".steady_state_hi"]
    # Ginex: a sweep of superbatch sizes up to an epoch's worth, each read back from its spill file;
    # the claim is taken against the size with the lowest epoch time.
    sizes = sorted(int(v) for key, v in r.items() if key.startswith("disk.sage.ginex_sb") and key.endswith(".superbatch"))
    assert len(sizes) == 3 and max(sizes) >= E == r["disk.sage.ginex.largest_superbatch"]
    for s in sizes:
        g = f"disk.sage.ginex_sb{s}"
        assert r[g + ".spill_mib_read"] > 0 and r[g + ".spill_mib_written_per_batch"] > 0 and r[g + ".phase_batches"] > 0
        assert r[g + ".epoch_s"] >= r[g + ".setup_s"] > 0
    # the epoch-long superbatch really sampled (and spilled) an epoch's mini-batches ahead
    assert r[f"disk.sage.ginex_sb{max(sizes)}.phase_batches"] >= E
    best = int(r["disk.sage.ginex.best_superbatch"])
    assert r[f"disk.sage.ginex_sb{best}.epoch_s"] == min(r[f"disk.sage.ginex_sb{s}.epoch_s"] for s in sizes)
    assert any(n_.startswith("disk.speedup_ginex: Ginex samples each superbatch") for n_ in rep.notes)
    # Tuner: two budgets, each with its tuned split in its sweep; the claim is the worse gap.
    sweeps = [c for c in rep.comparisons if "split sweep" in c.case]
    assert len(sweeps) == 2
    gaps = []
    for i, sw in enumerate(sweeps):
        tuned, best_f = f"f={r[f'disk.tuner.b{i}.split']:.2f}", f"f={r[f'disk.tuner.b{i}.best_split']:.2f}"
        assert tuned in sw.names and best_f in sw.names
        first = SETTINGS["ci"]["sweep_repeats"]  # the rounds the best split was chosen from

        def loses(name, sw=sw, tuned=tuned, first=first):
            return float(np.median(np.array(sw.times[tuned][:first]) / np.array(sw.times[name][:first])))
        assert best_f == max(sw.names, key=loses)
        splits = sorted(float(name[2:]) for name in sw.names)
        assert r[f"disk.tuner.b{i}.best_interior"] == float(splits[0] < float(best_f[2:]) < splits[-1])
        gaps.append(r[f"disk.tuner.b{i}.gap"])
    w = int(r["disk.tuner.worse_budget"])
    assert r[f"disk.tuner.b{w}.gap"] == max(gaps)
    sw = sweeps[w]
    tuned, best_f = f"f={r[f'disk.tuner.b{w}.split']:.2f}", f"f={r[f'disk.tuner.b{w}.best_split']:.2f}"
    m = claims["disk.tuner_gap"].rounds
    assert claims["disk.tuner_gap"].measured == pytest.approx(
        float(np.median(np.array(sw.times[tuned][:m]) / np.array(sw.times[best_f][:m]) - 1)))
    assert any(n_.startswith("disk.tuner_gap: the worse gap of two budgets") for n_ in rep.notes)
    for model, names in (("sage", ("naive", "caliex", "memory", f"ginex_sb{best}")), ("gat", ("naive", "caliex"))):
        for name in names:
            assert r[f"disk.{model}.{name}.wall_s_per_batch"] > 0 and r[f"disk.{model}.{name}.open_s"] > 0
            assert 0 <= r[f"disk.{model}.{name}.acc_last_batches"] <= 1
        assert r[f"disk.{model}.caliex.setup_s_per_epoch_batch"] > 0
    assert any(n_.startswith("disk.speedup_naive_gat: per epoch") for n_ in rep.notes)
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
    assert any(n_.startswith("disk.peak_rss_vs_stated: without the allowance") for n_ in rep.notes)
