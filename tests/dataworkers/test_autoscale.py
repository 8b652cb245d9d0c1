"""The autoscaler against a deterministic model of a job: it climbs, settles, and backs off."""

from __future__ import annotations

import pytest

from labkit.dataworkers.autoscale import Autoscaler


class FakeJob:
    """Workers make `per_worker` batches/s each; the trainer consumes at most `trainer` batches/s."""

    def __init__(self, per_worker: float, trainer: float, max_workers: int = 8, start: int = 1) -> None:
        self.per_worker, self.trainer, self.max_workers = per_worker, trainer, max_workers
        self.target, self.t = start, 0.0

    def set_target(self, n: int) -> None:
        assert 1 <= n <= self.max_workers
        self.target = n

    def metrics(self) -> dict:
        return {"queue_depth": 4.0 if self.target * self.per_worker > self.trainer else 0.0}

    def clock(self) -> float:
        return self.t

    def drive(self, scaler: Autoscaler, seconds: float) -> None:
        while self.t < seconds:
            rate = min(self.target * self.per_worker, self.trainer)
            step = 1.0 / self.trainer
            dt = 1.0 / rate
            self.t += dt
            scaler.on_step(dt - step, step)


@pytest.mark.parametrize("per_worker,trainer,best", [(10, 25, 3), (10, 8, 1), (3, 20, 7), (10, 40, 4)])
def test_climbs_to_the_saturating_count_and_settles(per_worker, trainer, best):
    job = FakeJob(per_worker, trainer)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock)
    job.drive(s, 30.0)
    assert job.target == best
    settled = [h for h in s.history if h.t > 20]
    assert settled and all(h.action in ("hold", "keep") for h in settled)


def test_removes_workers_the_trainer_does_not_need():
    job = FakeJob(10, 12, start=5)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock)
    job.drive(s, 30.0)
    assert job.target == 2  # 2 x 10 >= 12; one worker would starve it


def test_rescales_when_the_job_changes():
    job = FakeJob(10, 25)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock)
    job.drive(s, 20.0)
    assert job.target == 3
    job.per_worker = 5  # e.g. heavier augmentation: each worker now makes half as much
    job.drive(s, 60.0)
    assert job.target == 5


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_workers=0 is not accepted"):
        Autoscaler(FakeJob(1, 1), max_workers=0)


def test_a_step_judged_on_a_noisy_window_is_retried():
    class Sabotaged(FakeJob):
        """The first time it runs 3 workers, a noisy neighbour halves the rate for a few seconds."""

        def drive(self, scaler, seconds):
            self.first3 = getattr(self, "first3", None)
            while self.t < seconds:
                if self.target == 3 and self.first3 is None:
                    self.first3 = self.t
                noisy = self.first3 is not None and self.t - self.first3 < 4.0
                rate = min(self.target * self.per_worker, self.trainer) * (0.5 if noisy else 1.0)
                step = 1.0 / self.trainer
                self.t += 1.0 / rate
                scaler.on_step(1.0 / rate - step, step)

    job = Sabotaged(10, 25)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock)
    job.drive(s, 12.0)
    assert job.target == 2 and any(h.action == "revert" for h in s.history)
    job.drive(s, 40.0)
    assert job.target == 3


class CpuBoundJob(FakeJob):
    """A job on a `cpus`-CPU machine: each batch costs 1/per_worker CPU-s in a worker plus `step_cpu`
    in the trainer; workers beyond the CPUs only time-slice them, losing `thrash` each to switching."""

    def __init__(self, per_worker: float, trainer: float, *, cpus: int = 2, step_cpu: float = 0.01,
                 thrash: float = 0.05, **kw) -> None:
        super().__init__(per_worker, trainer, **kw)
        self.cpus, self.step_cpu, self.thrash, self.cpu_used, self.seen = cpus, step_cpu, thrash, 0.0, set()

    def cost(self) -> float:
        return (1 / self.per_worker + self.step_cpu) * (1 + self.thrash * max(0, self.target - self.cpus))

    def drive(self, scaler: Autoscaler, seconds: float) -> None:
        while self.t < seconds:
            self.seen.add(self.target)
            rate = min(self.target * self.per_worker, self.trainer, self.cpus / self.cost())
            self.t += 1.0 / rate
            self.cpu_used += self.cost()
            scaler.on_step(1.0 / rate - 1.0 / self.trainer, 1.0 / self.trainer)


class Meter:
    """CPUs the fake job kept busy since the last sample (what JobCpu reads from /proc)."""

    def __init__(self, job: CpuBoundJob) -> None:
        self.job, self.last = job, None

    def sample(self):
        now = (self.job.t, self.job.cpu_used)
        last, self.last = self.last, now
        return None if last is None or now[0] <= last[0] else (now[1] - last[1]) / (now[0] - last[0])


def test_a_worker_that_only_time_slices_the_cpus_is_tried_and_reverted():
    job = CpuBoundJob(25, 100)  # 1 worker: 1.25 CPUs busy; 2 workers: both CPUs busy
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock, cpus=2, job_cpu=Meter(job))
    job.drive(s, 30.0)
    assert job.target == 2 and max(job.seen) == 3  # the trainer starves, so a third is tried...
    assert [h.action for h in s.history].count("revert") == 1  # ...once: it costs 5%, and is not retried
    assert s.history[-1].cpu == pytest.approx(2.0, rel=0.05) and s.cpu_bound
    assert all(h.action == "hold" for h in s.history if h.t > 10)


class TableJob(FakeJob):
    """A measured job: batches/s, trainer stall share and CPUs busy for each worker count."""

    def __init__(self, table: dict[int, tuple[float, float, float]], **kw) -> None:
        super().__init__(1, 1, **kw)
        self.table, self.cpu_used = table, 0.0

    def drive(self, scaler: Autoscaler, seconds: float) -> None:
        while self.t < seconds:
            rate, stall, cpu = self.table[self.target]
            self.t += 1.0 / rate
            self.cpu_used += cpu / rate
            scaler.on_step(stall / rate, (1 - stall) / rate)


def test_on_saturated_cpus_a_starving_trainer_gets_another_worker():
    # The image job on 2 CPUs: 2 workers keep both busy, yet the trainer stalls 20% of its time;
    # a third worker shifts CPU time to the data side (+3.6%, under the 7% a free CPU must bring).
    table = {1: (20.0, 0.40, 1.3), 2: (28.0, 0.20, 1.96), 3: (29.0, 0.12, 1.98), 4: (27.5, 0.12, 1.99)}
    job = TableJob(table, max_workers=4)
    s = Autoscaler(job, max_workers=4, window_s=1.0, clock=job.clock, cpus=2, job_cpu=Meter(job))
    job.drive(s, 30.0)
    assert job.target == 3  # 4 costs 5%: reverted, and 3 becomes the floor so it is not shed
    assert all(h.action == "hold" for h in s.history if h.t > 17)


def test_a_step_that_feeds_a_starving_trainer_is_kept_though_the_rate_looks_flat():
    # Measured on the image job on a busy machine: at one worker the trainer waited 60% of its time;
    # with two it waited 17-24%, but a noisy neighbour kept the rate windows flat. Judged on the rate
    # alone the step was reverted twice and the job ran at one worker for good.
    table = {1: (26.0, 0.60, 1.40), 2: (25.5, 0.20, 1.55), 3: (25.5, 0.19, 1.60)}
    job = TableJob(table, max_workers=3)
    s = Autoscaler(job, max_workers=3, window_s=1.0, clock=job.clock, cpus=2, job_cpu=Meter(job))
    job.drive(s, 20.0)
    assert job.target == 2  # the stall fell by two thirds: kept; a third cuts nothing more: reverted
    acts = [h.action for h in s.history]
    assert acts[:3] == ["add", "probe", "add"] and "revert" in acts  # 2 kept at once; 3 tried, reverted


def test_sheds_workers_that_only_time_slice_the_cpus():
    job = CpuBoundJob(25, 100, start=4)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock, cpus=2, job_cpu=Meter(job))
    job.drive(s, 30.0)
    assert job.target == 2
    assert [h.action for h in s.history].count("remove") == 2


def test_without_a_cpu_reading_the_climb_is_ungated():
    job = FakeJob(10, 25)
    s = Autoscaler(job, max_workers=8, window_s=1.0, clock=job.clock, cpus=1)
    job.drive(s, 30.0)
    assert job.target == 3 and all(h.cpu is None for h in s.history)


def test_job_cpu_reads_the_pool_and_this_process():
    from labkit.dataworkers.autoscale import JobCpu

    class Pool:
        def __init__(self):
            self.cpu = {11: 1.0, 12: 5.0}

        def cpu_seconds(self):
            return dict(self.cpu)

    pool, clock, own = Pool(), [0.0], [0.0]
    m = JobCpu(pool, clock=lambda: clock[0], own_cpu=lambda: own[0])
    assert m.sample() is None
    clock[0], own[0] = 2.0, 0.5
    pool.cpu = {11: 2.5, 12: 6.0, 13: 9.0}  # 13 started in between: partial, not counted
    assert m.sample() == pytest.approx((0.5 + 1.5 + 1.0) / 2.0)
    assert JobCpu(object()).sample() is None


def test_bad_cpu_arguments():
    with pytest.raises(ValueError, match="saturation=1.5 is not accepted"):
        Autoscaler(FakeJob(1, 1), saturation=1.5)
    with pytest.raises(ValueError, match="cpus=0 is not accepted"):
        Autoscaler(FakeJob(1, 1), cpus=0)
