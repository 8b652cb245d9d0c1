"""Executing mini-batches: stages one after another, or as a pipeline of concurrent stages.

The three stages are *sample* (read topology, pick neighbours), *gather* (read feature rows)
and *train* (forward, backward, step). :func:`run_serial` runs them back to back per
mini-batch, as naive disk training does. :func:`run_superbatch` is Ginex's schedule: sample a
whole superbatch first, spilled to disk, inspect it (so the feature cache can plan Belady
replacement), then read each batch back, gather and train batch by batch. :func:`run_pipelined` is CaliEX's: sampler threads (each sampling a group
of mini-batches with one topology fetch per hop) and a gatherer thread feed the trainer through
bounded queues, so disk reads, numba sampling and torch training
(all GIL-free for their heavy parts) overlap. Queue slots are reserved from the memory budget.

Every run returns :class:`RunStats`: per-stage busy time, a timeline of (stage, batch, start,
end), losses and accuracies. Batches are processed in order, so results are deterministic for
a seed whatever the schedule.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from labkit.core.errors import check_range
from labkit.core.memory import MemoryBudget
from labkit.disk.iocache import BeladyFeatureCache
from labkit.disk.sampler import NeighborSampler, SampledBatch

STAGES = ("sample", "gather", "train")


@dataclass
class RunStats:
    """What one run of mini-batches did and how long each stage was busy."""

    schedule: str
    batches: int = 0
    seconds: float = 0.0
    busy: dict = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    timeline: list = field(default_factory=list)   # (stage, batch, t0, t1) relative to the start
    losses: list = field(default_factory=list)
    accs: list = field(default_factory=list)

    @property
    def per_batch(self) -> float:
        """Seconds per mini-batch (wall clock)."""
        return self.seconds / self.batches if self.batches else float("nan")

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "batches": self.batches, "seconds": self.seconds,
                "per_batch_s": self.per_batch, "busy_s": dict(self.busy),
                "loss_last": self.losses[-1] if self.losses else float("nan"),
                "acc_mean": float(np.mean(self.accs)) if self.accs else float("nan")}


class _Clock:
    def __init__(self, stats: RunStats) -> None:
        self.stats, self.t0, self.lock = stats, time.perf_counter(), threading.Lock()

    def stage(self, name: str, batch: int | list[int]):
        """Time a stage's work on `batch` (or on a group of batches done together, counted once)."""
        clock = self
        group = batch if isinstance(batch, list) else [batch]

        class _Span:
            def __enter__(self_inner):
                self_inner.a = time.perf_counter()

            def __exit__(self_inner, *exc):
                b = time.perf_counter()
                with clock.lock:
                    clock.stats.busy[name] += b - self_inner.a
                    for i in group:
                        clock.stats.timeline.append((name, i, self_inner.a - clock.t0, b - clock.t0))
        return _Span()


def run_serial(sampler: NeighborSampler, features, trainer, seeds: list[np.ndarray],
               labels: np.ndarray, *, first_index: int = 0) -> RunStats:
    """Sample, gather and train each mini-batch in turn (no overlap)."""
    st = RunStats("serial")
    clock = _Clock(st)
    for k, s in enumerate(seeds):
        i = first_index + k
        with clock.stage("sample", i):
            b = sampler.sample(s, i)
        with clock.stage("gather", i):
            x = features.gather(b.n_id)
        with clock.stage("train", i):
            loss, acc = trainer.step(b, x, labels)
        st.losses.append(loss)
        st.accs.append(acc)
    st.batches = len(seeds)
    st.seconds = time.perf_counter() - clock.t0
    return st


class SuperbatchStream:
    """Ginex's schedule over a stream of mini-batches, trained a few at a time (see :func:`run_superbatch`).

    :meth:`run` trains the next `k` mini-batches of `seeds` in order; whenever the next one is
    not yet in a sampled superbatch, it first samples the next `superbatch` mini-batches to
    `spill` and inspects them (inside that call), so a superbatch may span many calls, as an
    epoch-long one does. ``phase_seconds`` and ``phase_batches`` total the sample-and-inspect
    phases run so far and the mini-batches they sampled.
    """

    def __init__(self, sampler: NeighborSampler, features, trainer, seeds: list[np.ndarray],
                 labels: np.ndarray, budget: MemoryBudget, spill, *, superbatch: int = 4,
                 first_index: int = 0, indices: list[int] | None = None) -> None:
        check_range("superbatch", superbatch, 1, integer=True)
        if indices is not None and len(indices) != len(seeds):
            raise ValueError(f"indices has {len(indices)} entries for {len(seeds)} mini-batches; expected one each")
        #: Each mini-batch's index (its sampling draws depend on it): `indices`, else first_index + position.
        self.indices = [int(i) for i in indices] if indices is not None else \
            [int(first_index) + k for k in range(len(seeds))]
        self.sampler, self.features, self.trainer, self.seeds = sampler, features, trainer, seeds
        self.labels, self.budget, self.spill = labels, budget, spill
        self.superbatch, self.first_index = int(superbatch), int(first_index)
        self.belady = isinstance(getattr(features, "cache", None), BeladyFeatureCache)
        self.pos = 0            # next mini-batch to train
        self._lo = self._hi = 0  # the spilled superbatch holds mini-batches [lo, hi)
        self.phase_seconds = 0.0
        self.phase_batches = 0

    @property
    def remaining(self) -> int:
        return len(self.seeds) - self.pos

    def _phases(self, clock: "_Clock") -> None:
        """Sample the next superbatch to disk and inspect it."""
        a = time.perf_counter()
        lo, hi = self.pos, min(self.pos + self.superbatch, len(self.seeds))
        self.spill.reset()
        for k in range(lo, hi):
            i = self.indices[k]
            with clock.stage("sample", i):
                b = self.sampler.sample(self.seeds[k], i)
                with self.budget.reserve("superbatch (batch being written)", b.nbytes):
                    self.spill.write(b)
                del b
        with clock.stage("inspect", self.indices[lo:hi]):
            first = self.spill.inspect()
            if self.belady:
                self.features.cache.begin_superbatch(first)
            del first
        self._lo, self._hi = lo, hi
        self.phase_seconds += time.perf_counter() - a
        self.phase_batches += hi - lo

    def run(self, k: int) -> RunStats:
        """Train the next `k` mini-batches (sampling and inspecting superbatches as needed)."""
        check_range("k", k, 0, self.remaining, integer=True)
        st = RunStats("superbatch")
        st.busy["inspect"] = 0.0
        clock = _Clock(st)
        for _ in range(int(k)):
            if self.pos >= self._hi:
                self._phases(clock)
            j, i = self.pos - self._lo, self.indices[self.pos]
            with clock.stage("gather", i):
                b, nxt = self.spill.read(j)
                x = self.features.gather(b.n_id, nxt) if self.belady else self.features.gather(b.n_id)
            with clock.stage("train", i):
                loss, acc = self.trainer.step(b, x, self.labels)
            st.losses.append(loss)
            st.accs.append(acc)
            self.pos += 1
        st.batches = int(k)
        st.seconds = time.perf_counter() - clock.t0
        return st


def run_superbatch(sampler: NeighborSampler, features, trainer, seeds: list[np.ndarray],
                   labels: np.ndarray, budget: MemoryBudget, spill, *, superbatch: int = 4,
                   first_index: int = 0) -> RunStats:
    """Ginex's schedule, one superbatch of `superbatch` mini-batches at a time, in three phases.

    1. *sample*: sample each mini-batch and write it to `spill` (a
       :class:`~labkit.disk.baselines.spill.SampleSpill` on disk): only the batch being written is in RAM;
    2. *inspect*: read the superbatch's node ids back from disk and write each mini-batch's
       next-use array (Ginex's inspection pass, timed as its own stage, ``busy["inspect"]``);
       the Belady feature cache takes the first uses for the rows it holds;
    3. *gather and train*: read each mini-batch and its next uses back from disk (timed as
       gather), gather its rows through the Belady cache, train.

    The stages run in turn, as Ginex's do. Every mini-batch of a run is trained, in order; a
    run's last superbatch may be shorter.
    """
    return SuperbatchStream(sampler, features, trainer, seeds, labels, budget, spill, superbatch=superbatch,
                            first_index=first_index).run(len(seeds))


_DONE = object()


def run_pipelined(sampler: NeighborSampler, features, trainer, seeds: list[np.ndarray],
                  labels: np.ndarray, budget: MemoryBudget, *, depth: int = 1,
                  slot_bytes: tuple[int, int] = (0, 0), first_index: int = 0, samplers: int = 1,
                  group: int = 1) -> RunStats:
    """Run sample -> gather -> train as concurrent stages, `depth` batches in flight per edge.

    `samplers` threads sample consecutive groups of `group` mini-batches side by side (group g
    on thread g mod samplers; a group shares one topology fetch per hop, see
    :meth:`NeighborSampler.sample_group`; the first group is batch 0 alone, so training starts
    as soon as one batch is sampled), so one thread's numba work overlaps another's
    topology reads; the gatherer still takes batches in index order. A group may start
    sampling only while its last batch would leave fewer than ``depth * samplers * group``
    sampled batches waiting for the gatherer, and at most `depth`
    gathered batches (being gathered or queued) exist at once; their bytes, `slot_bytes` =
    (one sampled batch, one gathered batch), are reserved from the budget up front. A batch
    bigger than its slot grows the reservation (and so can raise BudgetExceeded rather than
    silently exceed the budget). With a disk store and a static feature cache, a gathered
    batch in flight is only its disk rows (``fetch_misses``); the trainer copies the cached
    rows in (``complete``, timed as gather) when it takes the batch. The batch being trained
    belongs to the trainer (with the model), outside the budget.
    """
    check_range("depth", depth, 1, 64, integer=True)
    check_range("samplers", samplers, 1, 16, integer=True)
    check_range("group", group, 1, 64, integer=True)
    st = RunStats("pipelined")
    clock = _Clock(st)
    q2: queue.Queue = queue.Queue()
    tok2 = threading.Semaphore(depth)
    cap = depth * samplers * group
    res1 = budget.reserve("pipeline slots (sampled)", cap * slot_bytes[0])
    res2 = budget.reserve("pipeline slots (gathered)", depth * slot_bytes[1])
    errors: list[BaseException] = []
    stop = threading.Event()
    cond = threading.Condition()
    ready: dict[int, SampledBatch] = {}
    taken = [0]  # sampled batches the gatherer has taken
    n = len(seeds)
    # A store with a static cache hands over only its disk rows; the trainer adds the cached ones.
    split = hasattr(features, "fetch_misses") and not isinstance(getattr(features, "cache", None),
                                                                 BeladyFeatureCache)

    def fit(res, nbytes: int, count: int) -> None:
        if nbytes * count > res.nbytes:
            res.resize(nbytes * count)

    def acquire(tok) -> bool:
        while not stop.is_set():
            if tok.acquire(timeout=0.1):
                return True
        return False

    # Sampling groups in batch order; the first is a single batch, so the trainer starts after one
    # batch is sampled rather than a whole group (a group's batches all finish at its last hop).
    spans = [(0, min(1, n))] + [(k, min(k + group, n)) for k in range(1, n, group)] if group > 1 else \
        [(k, k + 1) for k in range(n)]

    def sample_stage(w: int) -> None:
        try:
            for a, z in spans[w::samplers]:
                ks = list(range(a, z))
                if not ks:
                    continue
                with cond:
                    while ks[-1] - taken[0] >= cap and not stop.is_set():
                        cond.wait(0.1)
                if stop.is_set():
                    return
                idx = [first_index + k for k in ks]
                with clock.stage("sample", idx):
                    bs = sampler.sample_group([seeds[k] for k in ks], idx)
                fit(res1, max(b.nbytes for b in bs), cap)
                with cond:
                    ready.update(zip(ks, bs))
                    cond.notify_all()
        except BaseException as e:  # surfaced in the caller
            errors.append(e)
            stop.set()

    def gather_stage() -> None:
        try:
            for k in range(n):
                with cond:
                    while k not in ready and not stop.is_set():
                        cond.wait(0.1)
                    if k not in ready:
                        break
                    b = ready.pop(k)
                if not acquire(tok2):
                    break
                with cond:
                    taken[0] += 1
                    cond.notify_all()
                with clock.stage("gather", b.index):
                    x = features.fetch_misses(b.n_id) if split else features.gather(b.n_id)
                fit(res2, x.nbytes + b.nbytes, depth)
                q2.put((b, x))
        except BaseException as e:
            errors.append(e)
            stop.set()
        q2.put(_DONE)

    threads = [threading.Thread(target=sample_stage, args=(w,), name=f"disk-sample-{w}", daemon=True)
               for w in range(samplers)]
    threads.append(threading.Thread(target=gather_stage, name="disk-gather", daemon=True))
    for t in threads:
        t.start()
    try:
        while True:
            item = q2.get()
            if item is _DONE:
                break
            tok2.release()  # from here the batch belongs to the trainer
            b, x = item
            if split:  # the cached rows join the disk rows as the trainer takes the batch
                with clock.stage("gather", b.index):
                    x = features.complete(x)
            with clock.stage("train", b.index):
                loss, acc = trainer.step(b, x, labels)
            st.losses.append(loss)
            st.accs.append(acc)
            st.batches += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
        res1.release()
        res2.release()
    if errors:
        raise errors[0]
    st.seconds = time.perf_counter() - clock.t0
    return st
