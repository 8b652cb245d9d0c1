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


class MeasuredPool(FakePool):
    """A pool whose workers each make `rate` batches/s (what ProcessWorkerPool.metrics() reports)."""

    max_workers = 3

    def __init__(self, rate):
        super().__init__()
        self.rate = rate

    def metrics(self):
        return {"per_worker_batches_per_s": self.rate}


class MeasuredJob:
    """A live job whose trainer step takes `step_s` (what LiveJob.metrics() reports)."""

    def __init__(self, step_s):
        self.step_s = step_s

    def metrics(self):
        return {"step_s": self.step_s}


def test_measured_jobs_on_three_cpus_give_the_spare_cpu_to_the_starving_job():
    """test_live_jobs_share_a_cpu_budget's setting, with the measurements fixed: two jobs, three CPUs."""
    from labkit.dataworkers.scheduler import measured_demand

    pools = {"images": MeasuredPool(4.0), "ctr": MeasuredPool(50.0)}  # decoding JPEGs is slow, CTR rows are not
    lives = {"images": MeasuredJob(0.05), "ctr": MeasuredJob(0.05)}   # both trainers want 20 batches/s
    jobs = {n: (pools[n], lambda n=n: measured_demand(n, pools[n], lives[n])) for n in pools}
    sched = MultiJobScheduler(jobs, cpus=3)
    # images needs 5 workers to keep its trainer busy, ctr less than one: the spare CPU goes to images.
    assert sched.rebalance() == {"images": 2, "ctr": 1}
    assert (pools["images"].target, pools["ctr"].target) == (2, 1)
    # The measurements change (ctr's rows got expensive, images' cheap): the worker moves across.
    pools["images"].rate, pools["ctr"].rate = 50.0, 4.0
    assert sched.rebalance() == {"images": 1, "ctr": 2}
    assert (pools["images"].target, pools["ctr"].target) == (1, 2)
    assert sched.plans == [{"images": 2, "ctr": 1}, {"images": 1, "ctr": 2}]


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
    """Two real jobs, three CPUs: the scheduler re-plans from live measurements within the budget.

    Which job gets the spare CPU depends on the measured rates (worker batches/s against trainer
    step time), which a loaded machine moves either way; the allocation from given measurements is
    checked in test_measured_jobs_on_three_cpus_give_the_spare_cpu_to_the_starving_job.
    """
    import itertools
    import time

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
            deadline = time.monotonic() + 60  # the first plan comes after one interval, however busy the machine
            while not sched.plans and time.monotonic() < deadline:
                time.sleep(0.05)
            for live in lives:
                live.join(30)
        assert sched.plans, "the scheduler never planned"
        for plan in sched.plans:
            # Every plan covers both jobs, keeps each fed, and stays within the three CPUs.
            assert set(plan) == {"images", "ctr"} and all(n >= 1 for n in plan.values()) and sum(plan.values()) <= 3
        last = sched.plans[-1]
        # The last plan is what the pools were told (nothing else sets their targets here).
        assert [p.target for p in pools] == [last["images"], last["ctr"]]
    finally:
        try:
            for live in lives:
                live.stop()  # waits until its thread has ended and closed the stream
        finally:
            for pool in pools:
                pool.close()


def test_a_failed_plan_in_the_background_is_reported_and_planning_goes_on():
    import time
    a, b = FakePool(), FakePool()
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("dictionary changed size during iteration")
        return JobDemand("heavy", 1, 2.0, 10.0)

    jobs = {"light": (a, lambda: JobDemand("light", 1, 10.0, 10.0)), "heavy": (b, flaky)}
    s = MultiJobScheduler(jobs, cpus=6, interval=0.01)
    with pytest.warns(RuntimeWarning, match="re-planning failed .RuntimeError: dictionary changed"):
        with s:
            deadline = time.monotonic() + 60
            while not s.plans and time.monotonic() < deadline:
                time.sleep(0.01)
    assert len(s.errors) == 1 and s.plans[0] == {"light": 1, "heavy": 5} and b.target == 5
