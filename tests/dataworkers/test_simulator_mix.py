"""The simulator is a model: its claims are "modelled", its trace follows a stated mix, and its
sensitivity to the jobs' CPU-per-GPU demand has the shape the model implies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labkit.dataworkers.simulator import (ASSUMPTIONS, MIX, Cluster, Family, WorkloadMix, compare, policy_speeds,
                                          sensitivity, synthetic_trace, trace_demand)


def test_the_simulator_claims_are_modelled_and_the_rest_measured():
    from labkit.dataworkers.bench import CLAIMS

    kinds = {c.id: c.kind for c in CLAIMS}
    assert kinds.pop("dw.sim_jct_improvement") == "modelled"
    assert kinds.pop("dw.sim_gpu_util_improvement") == "modelled"
    assert set(kinds.values()) == {"measured"}


MIX2 = WorkloadMix(families=(Family("vision", 0.6, 20.0, 0.3), Family("ctr", 0.3, 10.0, 0.2),
                             Family("speech", 0.1, 2.0, 0.1)),
                   gpu_sizes=((1, 0.5), (4, 0.3), (8, 0.2)), work_median_h=2.0, work_sigma=0.5, work_cap_h=48.0)


def test_the_trace_follows_its_mix():
    n = 6000
    trace = synthetic_trace(n, mix=MIX2, seed=5)
    fams = np.array([j.family for j in trace])
    for f in MIX2.families:
        got = np.mean(fams == f.name)
        assert abs(got - f.share) < 4 * math.sqrt(f.share * (1 - f.share) / n), (f.name, got)
        d = np.array([j.demand_per_gpu for j in trace if j.family == f.name])
        assert abs(np.median(d) / f.cpus_per_gpu - 1) < 0.05, f.name
        assert abs(np.std(np.log(d)) / f.sigma - 1) < 0.1, f.name
    gpus = np.array([j.gpus for j in trace])
    assert set(gpus) == {g for g, _ in MIX2.gpu_sizes}
    for g, p in MIX2.gpu_sizes:
        assert abs(np.mean(gpus == g) - p) < 4 * math.sqrt(p * (1 - p) / n)
    work_h = np.array([j.work_s for j in trace]) / 3600
    assert abs(np.median(work_h) / MIX2.work_median_h - 1) < 0.05 and work_h.max() <= MIX2.work_cap_h
    arrivals = np.array([j.arrival for j in trace])
    assert (np.diff(arrivals) >= 0).all()


def test_the_trace_is_seeded_and_a_scaled_mix_changes_only_the_demands():
    a = synthetic_trace(200, mix=MIX2, seed=1)
    assert a == synthetic_trace(200, mix=MIX2, seed=1)
    assert a != synthetic_trace(200, mix=MIX2, seed=2)
    b = synthetic_trace(200, mix=MIX2.scaled(2.0), seed=1)
    assert [(j.arrival, j.gpus, j.work_s, j.family) for j in a] == [(j.arrival, j.gpus, j.work_s, j.family) for j in b]
    assert all(abs(y.demand_per_gpu - 2 * x.demand_per_gpu) < 1e-9 for x, y in zip(a, b)
               if x.demand_per_gpu > MIX2.min_cpus_per_gpu)


def test_the_default_mix_names_its_assumptions():
    assert {f.name for f in MIX.families} == {"image", "ctr", "nlp"}
    assert {"families", "demand", "gpus", "size", "arrivals", "cluster"} <= set(ASSUMPTIONS)
    assert [r["family"] for r in MIX.table()] == ["image", "ctr", "nlp"]


@pytest.mark.parametrize("kw, match", [
    ({"families": ()}, r"families=\(\) is not accepted; expected a non-empty tuple of Family"),
    ({"families": (Family("a", 0.5, 4.0), Family("b", 0.4, 4.0))}, r"families=\[0.5, 0.4\] .* shares that sum to 1"),
    ({"families": (Family("a", 0.5, 4.0), Family("a", 0.5, 4.0))}, r"families=\['a', 'a'\] .* distinct names"),
    ({"gpu_sizes": ((1, 0.5), (2, 0.6))}, r"gpu_sizes=\[0.5, 0.6\] .* probabilities that sum to 1"),
    ({"gpu_sizes": ((0, 1.0),)}, r"gpu_sizes gpus=0 is not accepted"),
    ({"work_median_h": 0}, r"work_median_h=0 is not accepted"),
])
def test_a_bad_mix_is_named(kw, match):
    with pytest.raises(ValueError, match=match):
        WorkloadMix(**kw)
    with pytest.raises(ValueError, match=r"cpus_per_gpu=-1 is not accepted"):
        Family("x", 1.0, -1)


def test_elastic_never_keeps_fewer_gpus_busy_than_static():
    # The model's guarantee at every instant: the pooled vCPUs, placed where they keep the most GPUs
    # busy, can always do what each job's own vCPUs do (the cluster has at least as many).
    rng = np.random.default_rng(0)
    for cluster in (Cluster(), Cluster(cpu_servers=0), Cluster(gpu_servers=2, cpu_servers=1)):
        trace = synthetic_trace(300, cluster=cluster, mix=MIX.scaled(float(rng.uniform(0.2, 3))), seed=3)
        for _ in range(30):
            pick, used = [], 0
            for j in rng.permutation(len(trace)):
                if used + trace[j].gpus <= cluster.gpus:
                    pick.append(trace[j])
                    used += trace[j].gpus
            st, el = policy_speeds(pick, "static", cluster), policy_speeds(pick, "elastic", cluster)
            busy = [sum(j.gpus * sp[j.jid] for j in pick) for sp in (st, el)]
            assert busy[1] >= busy[0] - 1e-9
            assert all(0 < v <= 1 for sp in (st, el) for v in sp.values())


def test_sensitivity_gives_one_gain_per_demand_level_shaped_as_the_model_implies():
    levels = (1.0, 3.0, 8.0, 16.0, 40.0)
    t = sensitivity(levels, n_jobs=60, seed=2)
    base = synthetic_trace(60, seed=2)
    assert len(t) == len(levels) + 1 and t["base"].sum() == 1
    assert list(t["demand"]) == sorted(list(levels) + [trace_demand(base)])
    assert (t["jct_gain"] > 0).all() and np.isfinite(t[["jct_gain", "gpu_util_gain"]].to_numpy()).all()
    # every job's demand scales with the level (the mix stays the same)
    ratio = t["max_job_demand"] / t["demand"]
    assert np.allclose(ratio, ratio.iloc[0])
    # more demand never starves fewer jobs under static provisioning
    assert (np.diff(t["starved_static"]) >= 0).all()
    # where no job needs more than its GPUs' own vCPUs, both policies are the same schedule: gain 1
    fits = t["max_job_demand"] <= Cluster().cpus_per_gpu
    assert fits.any() and (t.loc[fits, "jct_gain"] == 1.0).all() and (t.loc[fits, "gpu_util_gain"] == 1.0).all()
    assert (t.loc[~fits, "starved_static"] > 0).all()
    # the unscaled level is the trace compare() simulates
    r = compare(60, seed=2)
    row = t[t["base"]].iloc[0]
    assert row["jct_gain"] == pytest.approx(r["jct_improvement"])
    assert row["gpu_util_gain"] == pytest.approx(r["gpu_util_improvement"])
    assert t.attrs["cpus_per_gpu"] == 8 and t.attrs["pooled_cpus_per_gpu"] == Cluster().cpus / Cluster().gpus


@pytest.mark.parametrize("demands, match", [
    ((), r"demands=\(\) is not accepted; expected a non-empty list"),
    ((4.0, -1.0), r"demands=-1.0 is not accepted"),
    ("8", r"demands='8' is not accepted"),
])
def test_sensitivity_names_bad_levels(demands, match):
    with pytest.raises(ValueError, match=match):
        sensitivity(demands, n_jobs=5)
