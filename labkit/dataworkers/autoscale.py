"""The elastic autoscaler: add data workers while the trainer stalls and throughput keeps rising.

Hill climbing on measured trainer throughput, as Cachew does (add a worker while the batch rate
improves by more than `gain`, 7% by default), gated by what GoldMiner watches: the trainer's
stall time (waiting for data) and the queue of ready batches. Each decision is judged on a
fresh window after the change has warmed up; a step that does not pay is reverted and becomes a
ceiling (or floor), so the count settles instead of oscillating. A sustained change in the
measured rate (the job or the machine changed) lifts the ceiling and floor again.

A CPU model changes how steps are judged, as in FastFlow: when the job's own processes (the
trainer and its data workers) already keep nearly every CPU it may use busy, another worker adds
no CPU, it only shifts the CPUs' time-slices between the trainer and the workers. That pays
while the trainer starves (the workers are the short side), and not once it is fed. So on a
saturated machine a step up is taken only while the trainer stalls, and kept only if it cuts
the trainer's stall by `stall_cut` (30%) without losing more than `gain` in rate,
judged on three windows after a warm-up one against three before it; it then becomes a floor.
On free CPUs a step up is kept when the rate rises by `gain`, or when the stall falls by
`stall_cut` without the rate falling by more than `gain`: a worker that feeds a starving trainer
is not reverted because a noisy neighbour flattened the two windows it was judged on (the image
job at one worker stalled 0.6-0.7 of its time while windows at one worker count scattered by
15.9-28.3 batches/s). The stall share is the signal here because it is far steadier than the rate: on the image job
on 2 CPUs (both busy from 2 workers on) windows at one worker count scattered by +-15% in rate
while the trainer's stall went from 0.12-0.28 with 2 workers to 0.04-0.09 with 3 and stayed
there with 4, and 3 workers beat 2 by 2-9% in every recorded side-by-side run. With more
workers than CPUs and nothing to gain, the autoscaler probes one fewer, kept (and made a
ceiling) if the rate holds. Where the job's CPU time cannot be read (a Dask pool, a stand-in
job) every step is judged on its gain in rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from labkit.core.errors import check_range
from labkit.core.machine import cores as machine_cores


@dataclass
class Window:
    """One measurement window: what the autoscaler saw and what it did."""

    t: float
    workers: int
    throughput: float
    stall: float
    queue_depth: float
    action: str
    cpu: float | None = None  # CPUs the job kept busy in this window (None where unknown)


class JobCpu:
    """CPUs a job keeps busy between samples: this process plus the pool's live worker processes."""

    def __init__(self, pool: Any, *, clock: Callable[[], float] = time.perf_counter,
                 own_cpu: Callable[[], float] = time.process_time) -> None:
        self.pool, self.clock, self.own_cpu = pool, clock, own_cpu
        self._last: tuple[float, float, dict[int, float]] | None = None

    def sample(self) -> float | None:
        """Cores used since the previous call (None on the first call or where unknown)."""
        probe = getattr(self.pool, "cpu_seconds", None)
        if not callable(probe):
            return None  # a pool whose workers' CPU time cannot be read: the gate is off
        workers = dict(probe())
        now, own = self.clock(), self.own_cpu()
        last, self._last = self._last, (now, own, workers)
        if last is None or not workers or now <= last[0]:
            return None
        # Only workers seen at both ends count: one that started or exited in between is partial.
        used = own - last[1] + sum(t - last[2][pid] for pid, t in workers.items() if pid in last[2])
        return max(0.0, used / (now - last[0]))


@dataclass
class Autoscaler:
    """Drives ``pool.set_target`` from per-batch trainer measurements (call :meth:`on_step`)."""

    pool: Any
    min_workers: int = 1
    max_workers: int | None = None
    window_s: float = 1.0
    min_batches: int = 4
    warmup_s: float = 0.3
    gain: float = 0.07
    stall_hi: float = 0.05
    stall_lo: float = 0.01
    drift: float = 0.4
    probe_windows: int = 2
    reprobe_windows: int = 10
    cpus: float | None = None  # CPUs the job may use (default: those this process may run on)
    saturation: float = 0.85  # the job is CPU-bound when it keeps this share of `cpus` busy
    stall_cut: float = 0.3  # on saturated CPUs a step up must cut the trainer's stall by this share
    job_cpu: Any = None  # has .sample() -> CPUs busy since the last call; default JobCpu(pool)
    history: list[Window] = field(default_factory=list)
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        if self.max_workers is None:
            self.max_workers = getattr(self.pool, "max_workers", 8)
        check_range("min_workers", self.min_workers, 1, integer=True)
        check_range("max_workers", self.max_workers, self.min_workers, integer=True)
        check_range("window_s", self.window_s, 0, lo_open=True)
        check_range("gain", self.gain, 0, 1)
        check_range("saturation", self.saturation, 0, 1, lo_open=True)
        check_range("stall_cut", self.stall_cut, 0, 1)
        if self.cpus is None:
            self.cpus = float(machine_cores())
        check_range("cpus", self.cpus, 0, lo_open=True)
        self._cpu = self.job_cpu if self.job_cpu is not None else JobCpu(self.pool)
        self._cpu.sample()  # the baseline the first window is measured against
        self._busy: float | None = None
        self._t0 = self.clock()
        self._reset_window(self.clock())
        # (direction, workers before, rate before, judged as a re-balancing of saturated CPUs, stall before)
        self._probe: tuple[str, int, float, bool, float] | None = None
        self._ceiling = self.max_workers
        self._sure = False  # the ceiling was judged on saturated CPUs (not retried on stall alone)
        self._floor = self.min_workers
        self._settled_rate: float | None = None
        self.settled_at: float | None = None
        self._drifted = 0
        self._here: list[float] = []  # rates measured at the current count
        self._probe_rates: list[float] = []
        self._probe_stalls: list[float] = []
        self._stalls: list[tuple[int, float]] = []  # (workers, stall) of the last three windows

    def set_budget(self, cpus: int) -> None:
        """Change the CPU budget (most workers allowed); a raised budget is explored again."""
        check_range("cpus", cpus, self.min_workers, integer=True)
        raised = cpus > self.max_workers
        self.max_workers = int(cpus)
        self._ceiling = self.max_workers if raised else min(self._ceiling, self.max_workers)
        self._sure = self._sure and not raised
        self._floor = min(self._floor, self.max_workers)
        self._settled_rate = None if raised else self._settled_rate
        if self.workers > self.max_workers:
            self._probe = None
            self._set(self.max_workers)

    @property
    def workers(self) -> int:
        return int(self.pool.target)

    def _reset_window(self, now: float) -> None:
        self._w_start, self._w_batches, self._w_stall, self._w_depth, self._w_n = now, 0, 0.0, 0.0, 0

    def on_step(self, wait_s: float, step_s: float) -> None:
        """Account one trainer step; at the end of a window, maybe change the worker count."""
        now = self.clock()
        if now - self._w_start < 0:
            return
        self._w_batches += 1
        self._w_stall += wait_s
        self._w_depth += self.pool.metrics().get("queue_depth", 0) if hasattr(self.pool, "metrics") else 0
        self._w_n += 1
        elapsed = now - self._w_start
        if elapsed < self.window_s or self._w_batches < self.min_batches:
            return
        rate = self._w_batches / elapsed
        stall = min(1.0, self._w_stall / elapsed)
        depth = self._w_depth / max(self._w_n, 1)
        self._busy = self._cpu.sample()
        action = self._decide(rate, stall, depth)
        self.history.append(Window(now - self._t0, self.workers, rate, stall, depth, action, self._busy))
        # A new worker needs a moment to start: do not judge it on its first batches.
        self._reset_window(now + (self.warmup_s if action in ("add", "remove", "revert") else 0.0))
        if action in ("add", "remove"):
            self._here = []

    def _set(self, n: int) -> None:
        self.pool.set_target(int(n))

    @property
    def cpu_bound(self) -> bool:
        """The last window's job kept nearly all of its CPUs busy (False where unknown)."""
        return self._busy is not None and self._busy >= self.saturation * float(self.cpus)

    def _decide(self, rate: float, stall: float, depth: float) -> str:
        w = self.workers
        self._stalls = self._stalls[-2:] + [(w, stall)]  # a probe's baseline: the last three
        if self._probe is not None:
            direction, before, r0, saturated, s0 = self._probe
            self._probe_rates.append(rate)
            self._probe_stalls.append(stall)
            # A re-balancing step is small: its first window (a worker still starting) is dropped and
            # it is judged on three more, as many as the rate before it.
            if len(self._probe_rates) < (max(3, self.probe_windows) + 1 if saturated else self.probe_windows):
                return "probe"
            rates, stalls = self._probe_rates[int(saturated):], self._probe_stalls[int(saturated):]
            r, s = sum(rates) / len(rates), sum(stalls) / len(stalls)
            self._probe, self._probe_rates, self._probe_stalls = None, [], []
            self._here = [r]
            holds = r >= r0 * (1 - self.gain / 2)
            if direction == "up":
                # The trainer's stall is the steadier signal; the rate (noisier) only vetoes a real loss.
                # On saturated CPUs it is the only signal; on free ones a step that feeds a starving
                # trainer (its stall cut by `stall_cut`) is kept too, even if one noisy window hid the gain.
                rebalanced = r >= r0 * (1 - self.gain) and s <= s0 * (1 - self.stall_cut)
                if r >= r0 * (1 + self.gain) or rebalanced:
                    if saturated:  # judged at least as good as one fewer: do not shed back
                        self._floor = max(self._floor, w)
                    return self._maybe_grow(w, r, stall) or "keep"
                self._ceiling, self._sure = w - 1, saturated
                self._set(before)
                self._settle(r0)
                self._here = [r0]
                return "revert"
            if holds:
                if saturated:  # the extra worker only time-sliced the CPUs: do not add it back
                    self._ceiling, self._sure = min(self._ceiling, w), True
                self._settle(r)
                return "keep"
            self._floor = before
            self._set(before)
            self._settle(r0)
            self._here = [r0]
            return "revert"
        self._here.append(rate)
        if self._settled_rate is not None and abs(rate - self._settled_rate) > self.drift * self._settled_rate:
            self._drifted += 1
        else:
            self._drifted = 0
        if self._drifted >= 4:
            # Four windows in a row far from the settled rate: the job or the machine changed.
            self._ceiling, self._floor, self._settled_rate, self._drifted = self.max_workers, self.min_workers, None, 0
            self._sure = False
        if (stall > self.stall_hi and w == self._ceiling < self.max_workers and not self._sure
                and len(self._here) >= self.reprobe_windows):
            # Still stalling long after a failed step up: one noisy window may have misled us, retry.
            self._ceiling = w + 1
        grown = self._maybe_grow(w, rate, stall)
        if grown:
            return grown
        if self.cpu_bound and w > self.cpus and w > self._floor:
            # More workers than CPUs and every CPU busy: one fewer may do the same work with
            # less time-slicing. The probe keeps it only if the rate holds.
            self._start_probe("down", w, saturated=True)
            self._set(w - 1)
            return "remove"
        if stall < self.stall_lo and depth >= 1.0 and w > self._floor:
            self._start_probe("down", w)
            self._set(w - 1)
            return "remove"
        if self._settled_rate is None:
            self._settle(rate)
        return "hold"

    def _start_probe(self, direction: str, w: int, *, saturated: bool = False) -> None:
        # Judge a step against the recent mean at the old count, not one window: noise is +-20% here.
        recent = self._here[-3:]
        stalls = [s for n, s in self._stalls[-3:] if n == w] or [0.0]
        self._probe = (direction, w, sum(recent) / len(recent), saturated, sum(stalls) / len(stalls))
        self._probe_rates, self._probe_stalls = [], []

    def _maybe_grow(self, w: int, rate: float, stall: float) -> str:
        if stall > self.stall_hi and w < self._ceiling:
            # The trainer starves: one more worker, judged on its gain, or on a saturated machine
            # (where it can only shift CPU time to the workers) on the cut in the trainer's stall,
            # against three windows at the current count, not one.
            if not self._here:
                self._here = [rate]
            if self.cpu_bound and len(self._here) < 3:
                return ""
            self._start_probe("up", w, saturated=self.cpu_bound)
            self._set(w + 1)
            return "add"
        if stall <= self.stall_hi:
            self._settle(rate)
        return ""

    def _settle(self, rate: float) -> None:
        self._settled_rate = rate
        if self.settled_at is None or (self.history and self.history[-1].action in ("add", "remove")):
            self.settled_at = self.clock() - self._t0

    def summary(self) -> dict:
        """Final worker count, number of changes, and when it last changed (seconds since start)."""
        changes = [h for h in self.history if h.action in ("add", "remove", "revert")]
        return {"workers": self.workers, "changes": len(changes),
                "last_change_s": changes[-1].t if changes else 0.0,
                "ceiling": self._ceiling, "floor": self._floor}
