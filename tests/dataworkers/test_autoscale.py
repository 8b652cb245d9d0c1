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
