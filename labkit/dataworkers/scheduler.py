"""The multi-job policy: share one pool of CPUs among jobs' data workers to maximise progress.

A job's progress rate with `c` data-worker CPUs is concave and piecewise linear: each CPU adds
the batches one worker makes, until the job's accelerators are saturated. Handing out CPUs one
at a time to the job with the largest marginal gain is then optimal (the greedy rule for a
separable concave objective). The same :func:`allocate` drives live jobs on this machine
(:class:`MultiJobScheduler`) and the cluster simulator (:mod:`labkit.dataworkers.simulator`).
"""

from __future__ import annotations

import heapq
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from labkit.core.errors import bad_value, check_range


@dataclass
class JobDemand:
    """A job as the policy sees it: its GPUs and how many batches/s one worker and its GPUs can do.

    `worker_rate`: batches per second one data-worker CPU produces; `gpu_rate`: batches per
    second the job's accelerators consume when never starved. Progress is measured in busy
    GPUs: ``gpus * min(1, c * worker_rate / gpu_rate)``. `gpus` is an integer >= 1, `min_cpus` one
    >= 0, the rates finite numbers >= 0; anything else raises ValueError naming the field.
    """

    name: Any
    gpus: int
    worker_rate: float
    gpu_rate: float
    min_cpus: int = 1

    def __post_init__(self) -> None:
        for f, lo in (("gpus", 1), ("min_cpus", 0)):
            v = getattr(self, f)
            setattr(self, f, int(check_range(f, v, lo, integer=True)))
        for f in ("worker_rate", "gpu_rate"):
            setattr(self, f, float(check_range(f, getattr(self, f), 0, float("inf"), hi_open=True)))

    def progress(self, cpus: float) -> float:
        """Busy GPUs this job keeps with `cpus` data-worker CPUs."""
        if self.gpu_rate <= 0:
            return 0.0
        return self.gpus * min(1.0, cpus * self.worker_rate / self.gpu_rate)

    def saturating_cpus(self) -> float:
        """CPUs at which this job's GPUs stop starving."""
        return self.gpu_rate / self.worker_rate if self.worker_rate > 0 else float("inf")


def allocate(jobs: Sequence[JobDemand], cpus: int) -> dict[Any, int]:
    """Return CPUs per job: each job's minimum first, then one CPU at a time to the largest marginal gain.

    CPUs that would add no progress anywhere stay unallocated (they are free for other work).
    """
    check_range("cpus", cpus, 0, integer=True)
    out: dict[Any, int] = {}
    for i, j in enumerate(jobs):
        if not isinstance(j, JobDemand):
            raise bad_value(f"jobs[{i}]", j, "a JobDemand")
        if j.name in out:
            raise bad_value(f"jobs[{i}].name", j.name, "a name no other job in `jobs` has")
        out[j.name] = 0
    left = int(cpus)
    for j in sorted(jobs, key=lambda j: -j.gpus):
        give = min(j.min_cpus, left)
        out[j.name] += give
        left -= give
    heap = []
    for i, j in enumerate(jobs):
        g = j.progress(out[j.name] + 1) - j.progress(out[j.name])
        if g > 1e-12:
            heap.append((-g, i))
    heapq.heapify(heap)
    while left > 0 and heap:
        negg, i = heapq.heappop(heap)
        j = jobs[i]
        out[j.name] += 1
        left -= 1
        g = j.progress(out[j.name] + 1) - j.progress(out[j.name])
        if g > 1e-12:
            heapq.heappush(heap, (-g, i))
    return out


def static_allocation(jobs: Sequence[JobDemand], cpus_per_gpu: int) -> dict[Any, int]:
    """The baseline: every job gets its GPUs' fixed share of CPUs, used or not."""
    check_range("cpus_per_gpu", cpus_per_gpu, 0, integer=True)
    return {j.name: j.gpus * int(cpus_per_gpu) for j in jobs}


def measured_demand(name: Any, pool: Any, job: Any, gpus: int = 1) -> JobDemand:
    """A live job's JobDemand: per-worker batches/s from its pool, accelerator rate from its step time.

    `job` is a :class:`~labkit.dataworkers.trainer.LiveJob`. Before anything is measured the job
    claims a high rate (so it gets workers and gets measured).
    """
    m = pool.metrics()
    step = job.metrics()["step_s"]
    worker_rate = m.get("per_worker_batches_per_s") or 1.0
    return JobDemand(name, gpus, worker_rate, (1.0 / step) if step > 0 else 1e6)


class MultiJobScheduler:
    """Moves data workers between live jobs sharing `cpus` CPUs, re-planning every `interval` s.

    `jobs` maps a name to ``(pool, measure)`` where ``measure()`` returns a JobDemand built from
    the job's measured per-worker throughput and trainer step time.
    """

    def __init__(self, jobs: dict[str, tuple[Any, Callable[[], JobDemand]]], cpus: int, interval: float = 1.0) -> None:
        check_range("cpus", cpus, len(jobs), integer=True)
        check_range("interval", interval, 0, lo_open=True)
        self.jobs, self.cpus, self.interval = jobs, int(cpus), float(interval)
        self.plans: list[dict[str, int]] = []
        self.errors: list[Exception] = []  # plans that failed in the background thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def rebalance(self) -> dict[str, int]:
        """Measure every job, allocate, and set each pool's worker target; returns the plan."""
        demands = [m() for _, m in self.jobs.values()]
        plan = allocate(demands, self.cpus)
        for name, (pool, _) in self.jobs.items():
            n = max(1, min(plan.get(name, 1), getattr(pool, "max_workers", plan.get(name, 1))))
            pool.set_target(n)
        self.plans.append(dict(plan))
        return plan

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.rebalance()
            except Exception as e:  # a failed plan is reported, and the next interval plans again
                self.errors.append(e)
                if len(self.errors) == 1:
                    warnings.warn(f"MultiJobScheduler: re-planning failed ({type(e).__name__}: {e}); "
                                  "it keeps trying every interval (all failures are in .errors)", RuntimeWarning,
                                  stacklevel=1)

    def start(self) -> "MultiJobScheduler":
        self._thread = threading.Thread(target=self._loop, name="labkit-dw-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "MultiJobScheduler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
