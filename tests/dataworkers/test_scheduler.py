"""The multi-job allocation policy and the cluster simulator."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.dataworkers.scheduler import JobDemand, MultiJobScheduler, allocate, static_allocation
from labkit.dataworkers.simulator import Cluster, compare, simulate, synthetic_trace

job_st = st.builds(lambda g, w, r: (g, w, r), st.sampled_from([1, 2, 4]), st.floats(0.5, 5), st.floats(1, 40))


@settings(max_examples=30, deadline=None)
@given(specs=st.lists(job_st, min_size=1, max_size=4), cpus=st.integers(4, 12))
def test_allocate_is_optimal_on_small_cases(specs, cpus):
    jobs = [JobDemand(i, g, w, r) for i, (g, w, r) in enumerate(specs)]
    plan = allocate(jobs, cpus)
    assert sum(plan.values()) <= cpus and all(plan[j.name] >= 1 for j in jobs)
    got = sum(j.progress(plan[j.name]) for j in jobs)
    best = max(sum(j.progress(c) for j, c in zip(jobs, combo))
               for combo in itertools.product(range(1, cpus + 1), repeat=len(jobs)) if sum(combo) <= cpus)
    assert got >= best - 1e-9


def test_allocate_leaves_useless_cpus_free():
    plan = allocate([JobDemand("a", 1, 10.0, 20.0)], 16)
    assert plan == {"a": 2}
    assert static_allocation([JobDemand("a", 2, 1.0, 1.0)], 8) == {"a": 16}
    with pytest.raises(ValueError, match="cpus=-1 is not accepted"):
        allocate([], -1)


class FakePool:
    max_workers = 16

    def __init__(self):
        self.target = 1

    def set_target(self, n):
        self.target = n


def test_live_scheduler_moves_workers_to_the_starving_job():
    a, b = FakePool(), FakePool()
    jobs = {"light": (a, lambda: JobDemand("light", 1, 10.0, 10.0)),
            "heavy": (b, lambda: JobDemand("heavy", 1, 2.0, 10.0))}
    plan = MultiJobScheduler(jobs, cpus=6).rebalance()
    assert plan == {"light": 1, "heavy": 5} and (a.target, b.target) == (1, 5)


def test_simulator_basics():
    c = Cluster(gpu_servers=2, cpu_servers=1)
    trace = synthetic_trace(40, cluster=c, load=0.4, seed=3)
    assert trace == synthetic_trace(40, cluster=c, load=0.4, seed=3)
    st_, el = simulate(trace, "static", c), simulate(trace, "elastic", c)
    for r in (st_, el):
        assert set(r.jct) == {j.jid for j in trace}
        # No job finishes faster than its GPU time at full speed.
        assert all(r.jct[j.jid] >= j.work_s - 1e-6 for j in trace)
        assert 0 < r.gpu_util <= 1 + 1e-9
    assert el.gpu_util > st_.gpu_util and el.avg_jct < st_.avg_jct
    with pytest.raises(ValueError, match="policy='greedy' is not accepted"):
        simulate(trace, "greedy", c)


def test_simulator_comparison_at_lab_scale():
    r = compare(120, load=0.4)
    assert r["jct_improvement"] > 1.5 and r["gpu_util_improvement"] > 1.5


@pytest.mark.slow
def test_live_jobs_share_a_cpu_budget(image_prog, ctr_prog, no_leaks):
    """Two real jobs, three CPUs: the heavy image pipeline ends up with more workers than CTR."""
    import itertools

    from labkit.dataworkers.extract import extract
    from labkit.dataworkers.scheduler import measured_demand
    from labkit.dataworkers.trainer import LiveJob, Trainer
    from labkit.dataworkers.workers import ProcessWorkerPool

    jobs, pools, lives = {}, [], []
    try:
        for name, prog in (("images", image_prog), ("ctr", ctr_prog)):
            split = extract(prog)
            pool = ProcessWorkerPool(split.stateless, workers=1, max_workers=3)
            keys = (k for e in itertools.count() for k in prog.batches(e))
            live = LiveJob(Trainer(split.trainer_model, prog.loss_fn, prog.lr), pool.stream(keys), time_limit=5.0)
            pools.append(pool)
            lives.append(live)
            jobs[name] = (pool, lambda n=name, p=pool, j=live: measured_demand(n, p, j))
        for live in lives:
            live.start()
        with MultiJobScheduler(jobs, cpus=3, interval=1.0) as sched:
            for live in lives:
                live.join(30)
        assert sched.plans, "the scheduler never planned"
        last = sched.plans[-1]
        assert sum(last.values()) <= 3 and last["images"] >= last["ctr"] and last["images"] >= 2
    finally:
        try:
            for live in lives:
                live.stop()  # waits until its thread has ended and closed the stream
        finally:
            for pool in pools:
                pool.close()
