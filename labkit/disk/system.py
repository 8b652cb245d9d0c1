"""The four ways to train the same GNN on the same graph, same budget, same mini-batches.

- ``caliex``: pre-sampled plans for both caches, the auto-tuned split, the cost-model I/O policy
  (random / coalesced / sweep per mini-batch), pipelined stages: this module;
- its baselines (:mod:`labkit.disk.baselines`): ``naive`` (topology and features on disk, no
  caches, direct I/O with page sharing only, stages one after another), ``ginex`` (neighbour
  cache ranked by out/in degree, Belady feature cache over a sampled superbatch spilled to disk,
  a fixed even split of the cache budget, superbatch schedule: sample, inspect, then gather and
  train, in turn) and ``memory`` (everything in RAM, the upper bound, pipelined stages).

:func:`open_system` builds one; ``system.run(seeds)`` trains on mini-batches and returns
:class:`~labkit.disk.pipeline.RunStats`; ``system.metrics()`` gives hit rates, bytes read, read
amplification and the budget report.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from labkit.core import cacheplan
from labkit.core.datasets import Dataset, open_dataset
from labkit.disk.costmodel import DiskModel
from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.core.machine import cores as machine_cores
from labkit.core.machine import release_free_memory
from labkit.core.memory import BudgetExceeded, MemoryBudget, check_budget, fmt_bytes, machine_limit, parse_bytes
from labkit.core.progress import progress_bar
from labkit.disk.baselines import ginex, memory, naive
from labkit.disk.baselines.spill import SampleSpill
from labkit.disk.pipeline import RunStats, SuperbatchStream, run_pipelined
from labkit.disk.sampler import NeighborSampler, SampledBatch, batch_seeds, check_seeds
from labkit.disk.store import DiskFeatures, DiskTopology, IOPolicy
from labkit.disk.train import ModelConfig, Trainer
from labkit.disk.tuner import StageProfile, Tuner, split_caches

SYSTEMS = ("naive", "ginex", "caliex", "memory")
#: Sampler threads of the pipelined schedules: one thread's numba work overlaps the other's reads.
SAMPLERS = 2
#: Reads each file keeps in flight; pre-sampling fits the disk models at the same depth (it used
#: to fit them at 8 while the systems ran at 16). CaliEX GraphSAGE at the small profile on a 2-core
#: Xeon VM (virtio disk), median s per mini-batch over interleaved 16-batch calls: QD16 0.217,
#: QD32 0.206 and 0.197, QD64 0.194 and 0.187. 32 takes most of the gain and keeps the pread
#: fallback's pool (a thread per read in flight) modest.
QUEUE_DEPTH = 32
#: Training steps pre-sampling runs before it times training, and the steps it times (median).
TRAIN_WARMUP, TRAIN_TIMED = 4, 3


def dataset_bytes(ds: Dataset) -> int:
    """Bytes of the graph a system must serve: topology, features and labels."""
    return sum(int(ds.info(k)["bytes"]) for k in ("indptr", "indices", "features", "labels"))


def as_budget(budget) -> MemoryBudget:
    """Return `budget` as a :class:`MemoryBudget`: one as is, or a new one from a byte count or '512MiB'.

    A byte count above what the machine could ever give (:func:`labkit.core.memory.machine_limit`)
    is refused with one line naming `budget`, the value and the machine's figure.
    """
    if isinstance(budget, MemoryBudget):
        return budget
    if isinstance(budget, (numbers.Real, str)) and not isinstance(budget, bool):
        return MemoryBudget(check_budget(budget, "budget"))
    raise bad_value("budget", budget, "a MemoryBudget, or a byte count such as 1048576 or '512MiB'")


def reference_budget(budget=None) -> MemoryBudget:
    """Return the budget of the in-memory reference system: the machine's whole memory.

    The ``memory`` system holds the whole graph in RAM whatever its budget says (it is the upper
    bound the others are measured against); the budget only bounds its pipeline's queues. A
    byte count passed for it (e.g. ``1 << 40`` for "no limit") is still parsed, so a malformed
    one is refused, but is capped at the machine's figure rather than refused; a MemoryBudget
    passed in is used as is.
    """
    if isinstance(budget, MemoryBudget):
        return budget
    cap = machine_limit()[0]
    if budget is None:
        return MemoryBudget(cap, "memory budget (in-memory reference)")
    if isinstance(budget, (numbers.Real, str)) and not isinstance(budget, bool):
        return MemoryBudget(min(parse_bytes(budget, "budget"), cap), "memory budget (in-memory reference)")
    raise bad_value("budget", budget, "None, a MemoryBudget, or a byte count such as 1048576 or '512MiB'")


@dataclass
class Presampled:
    """What CaliEX learns before training: sampled batches, access counts, stage costs."""

    batches: list[SampledBatch]
    counts: cacheplan.AccessCounts
    profile: StageProfile
    seconds: float
    slot_bytes: tuple[int, int]
    positions: list[list[np.ndarray]] | None = None  # per batch, per hop: indices-file positions read


def presample(ds: Dataset, cfg: ModelConfig, seeds: list[np.ndarray], budget: MemoryBudget, *,
              seed: int = 0, train_batches: int = 2, fallback: bool = False, progress: bool = False,
              queue_depth: int = QUEUE_DEPTH) -> Presampled:
    """Sample `seeds` from disk (no caches), count accesses, fit the disk models, time each stage.

    `progress` shows a bar over the stages (fitting the disk models, each batch sampled, timing
    gathering and training); off by default, as benchmarks call this.
    """
    if len(seeds) == 0:
        raise bad_value("seeds", seeds, "at least one mini-batch of seed node ids (see batch_seeds)")
    check_range("train_batches", train_batches, 1, integer=True)
    check_range("queue_depth", queue_depth, 1, integer=True)
    budget = as_budget(budget)
    t0 = time.perf_counter()
    labels = ds.array("labels", mmap=False)
    topo = feat = bar = None
    try:  # whatever was opened is closed again, however far this gets
        topo = DiskTopology(ds, budget, queue_depth=int(queue_depth), fallback=fallback)
        feat = DiskFeatures(ds, budget, queue_depth=int(queue_depth), fallback=fallback)
        bar = progress_bar(len(seeds) + 2, "pre-sampling: fitting disk models", progress)
        tdisk = DiskModel.fit(topo.file, requests=500, sweep_bytes=16 << 20)
        fdisk = DiskModel.fit(feat.file, requests=1000, sweep_bytes=64 << 20)
        bar.update(1)
        bar.set_description("pre-sampling: sampling batches")
        topo.policy = IOPolicy("auto", tdisk)
        feat.policy = IOPolicy("auto", fdisk)
        sampler = NeighborSampler(topo, list(cfg.fanouts), seed)
        sampler.positions = {}
        batches, t_sample = [], 0.0
        for i, s in enumerate(seeds):
            io0, a = topo.file.counters.seconds, time.perf_counter()
            batches.append(sampler.sample(s, -1 - i))
            if i > 0 or len(seeds) == 1:  # the first call also pays numba's cache load
                t_sample += time.perf_counter() - a - (topo.file.counters.seconds - io0)
            bar.update(1)
        bar.set_description("pre-sampling: timing gather and train")
        a = time.perf_counter()
        xs = [feat.gather(b.n_id) for b in batches[:max(1, train_batches)]]
        rows = sum(b.n_id.size for b in batches[:len(xs)])
        t_gather = time.perf_counter() - a - feat.file.counters.seconds
        trainer = Trainer(cfg, feat.dim, int(ds.meta["num_classes"]), seed=seed + 999)
        # Training warms up over several steps, not one (the optimizer's state, the allocator
        # growing its pools to the batch sizes): a CI notebook timed the steps right after a
        # single warm-up at 4x the steady state and its predicted curve sat flat 4x above every
        # measured run. Warm up for TRAIN_WARMUP steps, then take the median of the timed ones.
        for k in range(TRAIN_WARMUP):
            trainer.step(batches[k % len(xs)], xs[k % len(xs)], labels)
        steps = []
        for k in range(max(len(xs), TRAIN_TIMED)):
            a = time.perf_counter()
            trainer.step(batches[k % len(xs)], xs[k % len(xs)], labels)
            steps.append(time.perf_counter() - a)
        t_train = float(np.median(steps))
        # Issuing a read costs CPU (Python loop, syscall, copy-out); at this scale the engine is
        # CPU-bound, so the measured time per request at full queue depth is taken as its CPU.
        # Calibrate: the micro-benchmark fit says what the disk can do; the pre-sampled reads say
        # what this workload's reads actually cost (threads, copies, a busy machine).
        tcal = topo.file.counters.seconds / topo.policy.predicted if topo.policy.predicted > 0 else 1.0
        fcal = feat.file.counters.seconds / feat.policy.predicted if feat.policy.predicted > 0 else 1.0
        tdisk, fdisk = tdisk.scaled(tcal), fdisk.scaled(fcal)
        prof = StageProfile(max(0.0, t_sample) / max(1, len(batches) - 1), max(0.0, t_gather) / max(1, rows), t_train,
                            tdisk, fdisk, cores=machine_cores(),
                            request_cpu=min(tdisk.seconds_per_request, fdisk.seconds_per_request))
        counts = cacheplan.AccessCounts.from_batches(batches, topo.indptr.size - 1)
        slot = (int(max(b.nbytes for b in batches) * 1.3),
                int(max(b.n_id.size * feat.row_bytes + b.nbytes for b in batches) * 1.3))
        bar.update(1)
    finally:
        try:
            if bar is not None:
                bar.close()
        finally:
            try:
                if topo is not None:
                    topo.close()
            finally:
                if feat is not None:
                    feat.close()
    positions = [sampler.positions[b.index] for b in batches]
    return Presampled(batches, counts, prof, time.perf_counter() - t0, slot, positions)


def out_degree(ds: Dataset) -> np.ndarray:
    """Each node's out-degree (how many neighbour lists it is in): the feature plan's prior."""
    return ds.array("out_degree", mmap=True)


@dataclass
class Holdout:
    """The pre-sampled batches split for tuning: plans from one half, batches to score from the other."""

    held: list[SampledBatch]
    positions: list[list[np.ndarray]] | None
    topo_plan: cacheplan.CachePlan
    feat_plan: cacheplan.CachePlan

    @classmethod
    def of(cls, pre: Presampled, indptr: np.ndarray, row_bytes: int,
           fplan_prior: np.ndarray | None = None) -> "Holdout":
        k = max(1, len(pre.batches) // 2)
        fit, held = pre.batches[:k], pre.batches[k:] or pre.batches[:k]
        pos = None
        if pre.positions is not None:
            pos = pre.positions[k:] if len(pre.batches) > k else pre.positions[:k]
        counts = cacheplan.AccessCounts.from_batches(fit, indptr.size - 1)
        return cls(held, pos, cacheplan.lists_by_access(counts, indptr),
                   cacheplan.rows_by_access(counts, row_bytes, prior=fplan_prior))

    def tuner(self, pre: Presampled, indptr: np.ndarray, row_bytes: int, cache_bytes: int, group: int = 1) -> Tuner:
        return Tuner(self.held, indptr, row_bytes, self.topo_plan, self.feat_plan, pre.profile, cache_bytes,
                     group=group, positions=self.positions)


def holdout_tuner(pre: Presampled, indptr: np.ndarray, row_bytes: int, cache_bytes: int, *,
                  fplan_prior: np.ndarray | None = None, group: int = 1) -> Tuner:
    """A tuner whose plans come from half the pre-sampled batches and whose predictions from the other half.

    Plans built from the very batches they are scored on would predict hit rates no new batch
    sees (every node of those batches looks hot); holding half out predicts what training gets.
    (:class:`Holdout` keeps the plans for several tuners.)
    """
    return Holdout.of(pre, indptr, row_bytes, fplan_prior).tuner(pre, indptr, row_bytes, cache_bytes, group)


def group_choices(pre: Presampled) -> list[int]:
    """Sampling group sizes the tuner can score: powers of two up to the held-out batch count."""
    return [g for g in (1, 2, 4, 8) if g <= _held_out(pre)]


def _held_out(pre: Presampled) -> int:
    """How many pre-sampled batches :func:`holdout_tuner` scores."""
    return len(pre.batches) - max(1, len(pre.batches) // 2) or len(pre.batches)


@dataclass
class DiskGNN:
    """One configured training system (stores, caches, schedule) over one dataset and budget."""

    name: str
    ds: Dataset
    budget: MemoryBudget
    cfg: ModelConfig
    sampler: NeighborSampler
    topology: object
    features: object
    trainer: Trainer
    labels: np.ndarray
    split: float | None = None
    pipeline_depth: int = 1
    slot_bytes: tuple[int, int] = (0, 0)
    superbatch: int = 4
    info: dict = field(default_factory=dict)
    samplers: int = SAMPLERS  # pipelined schedules only
    group: int = 1  # mini-batches a sampler thread samples together (pipelined schedules only)
    spill: SampleSpill | None = None  # ginex: its sampled superbatch on disk

    def run(self, seeds: list[np.ndarray], *, first_index: int = 0) -> RunStats:
        """Train on one mini-batch per entry of `seeds` with this system's schedule."""
        if isinstance(seeds, np.ndarray) or not isinstance(seeds, (list, tuple)):
            raise bad_value("seeds", type(seeds).__name__, "a list of seed arrays, one per mini-batch "
                            "(e.g. from labkit.disk.system.workload or batch_seeds)")
        seeds = [check_seeds(f"seeds[{k}]", s, self.topology.indptr.size - 1) for k, s in enumerate(seeds)]
        if self.name == "naive":
            return naive.run(self, seeds, first_index=first_index)
        if self.name == "ginex":
            return ginex.run(self, seeds, first_index=first_index)
        return run_pipelined(self.sampler, self.features, self.trainer, seeds, self.labels, self.budget,
                             depth=self.pipeline_depth, slot_bytes=self.slot_bytes, first_index=first_index,
                             samplers=self.samplers, group=self.group)

    def stream(self, seeds: list[np.ndarray], *, first_index: int = 0,
               indices: list[int] | None = None) -> SuperbatchStream:
        """ginex only: its schedule over `seeds` as a stream (:func:`labkit.disk.baselines.ginex.stream`)."""
        return ginex.stream(self, seeds, first_index=first_index, indices=indices)

    def reset_counters(self) -> None:
        for s in (self.topology, self.features):
            s.stats.reset()
            if hasattr(s, "file"):
                s.file.counters.reset()
            if hasattr(s, "policy"):
                s.policy.choices.clear()
        if self.spill is not None:
            self.spill.bytes_written = self.spill.bytes_read = self.spill.reads = 0

    def metrics(self) -> dict:
        """Hit rates, bytes read / needed, read amplification, requests, I/O modes, budget."""
        out = {"system": self.name, "split_topology": self.split,
               "hit_rate_topology": self.topology.stats.hit_rate,
               "hit_rate_features": self.features.stats.hit_rate}
        read = used = reqs = 0
        for key, s in (("topology", self.topology), ("features", self.features)):
            if hasattr(s, "file"):
                c = s.file.counters
                read, used, reqs = read + c.bytes_read, used + c.bytes_used, reqs + c.requests
                out[f"bytes_read_{key}"] = c.bytes_read
                out[f"io_modes_{key}"] = dict(s.policy.choices)
        needed = (self.topology.stats.miss_bytes + self.features.stats.miss_bytes)
        out.update(bytes_read=read, bytes_needed=needed, requests=reqs,
                   read_amplification=read / needed if needed else float("nan"),
                   budget=self.budget.report())
        if self.spill is not None:  # Ginex's superbatch on disk: apart from the dataset's reads
            out.update(spill_bytes_written=self.spill.bytes_written, spill_bytes_read=self.spill.bytes_read,
                       spill_reads=self.spill.reads)
        return out

    def close(self) -> None:
        try:
            self.topology.close()
            self.features.close()
        finally:
            if self.spill is not None:
                self.spill.close()


def _size_caliex(pre: Presampled, budget: MemoryBudget, topo: DiskTopology, feat: DiskFeatures,
                 holdout: Holdout, samplers: int, group: int, split: float | None) -> dict:
    """Size CaliEX's queues and caches for one sampling group; return the tuner's pick and prediction.

    The queues hold one group of sampled batches per sampler thread and one gathered batch's
    *disk rows* (cached rows are copied in by the trainer), so what they need depends on the
    cache: size them from the tuner's worst held-out batch, then give the rest to the caches.
    """
    margin = 1 << 20
    sampled = pre.slot_bytes[0] * samplers * group
    batch_bytes = int(max(b.nbytes for b in pre.batches))

    def tuner_for(cache: int) -> Tuner:  # a group above the held-out batches is priced as all of them
        return holdout.tuner(pre, topo.indptr, feat.row_bytes, max(0, cache), min(group, _held_out(pre)))

    def gathered_slot(t: Tuner, f: float) -> int:
        return int((t.predict(f)["max_miss_rows"] * feat.row_bytes + batch_bytes) * 1.3)

    # First pass: size the gathered slot as if nothing were cached (an upper bound).
    t0 = tuner_for(budget.free - sampled - pre.slot_bytes[1] - margin)
    g_slot = gathered_slot(t0, t0.best()[0] if split is None else split)
    cache_bytes = budget.free - sampled - g_slot - margin
    if cache_bytes < 0:
        raise BudgetExceeded(f"budget={fmt_bytes(budget.total)} is too small for caliex: the "
                             f"pipeline queues need {fmt_bytes(sampled + g_slot)} and "
                             f"{fmt_bytes(budget.free)} is left after indptr and staging")
    tuner = tuner_for(cache_bytes)
    best, curve = tuner.best()
    split = best if split is None else split
    need = gathered_slot(tuner, split)
    if need > g_slot:  # the chosen split caches fewer rows than the first pass assumed
        cache_bytes = max(0, cache_bytes - (need - g_slot))
        g_slot = need
    total = next((c["total"] for c in curve if abs(c["f"] - split) < 1e-9), None)
    if total is None:
        total = tuner.predict(split)["total"]
    return {"group": group, "split": split, "best": best, "curve": curve, "tuner": tuner, "total": total,
            "cache_bytes": cache_bytes, "slot": (pre.slot_bytes[0], g_slot)}


def open_system(name: str, ds: Dataset, budget: MemoryBudget, cfg: ModelConfig, *,
                pre: Presampled | None = None, split: float | None = None, seed: int = 0,
                queue_depth: int = QUEUE_DEPTH, fallback: bool = False, superbatch: int = 4, group: int | None = None,
                samplers: int = SAMPLERS, spill_dir: str | None = None) -> DiskGNN:
    """Build system `name` (one of naive, ginex, caliex, memory) within `budget`.

    caliex needs `pre` (from :func:`presample`); `split` overrides the tuner's topology share
    and `group` its sampling group (mini-batches a sampler thread samples together, sharing one
    topology fetch per hop; None: the one the tuner predicts fastest, its queue slots paid from
    the cache budget). `budget` may also be a byte count (int, or a string such as '512MiB'),
    at most what the machine could give (for ``memory``, which holds the graph in RAM anyway, a
    larger count or None stands for the machine's whole memory: :func:`reference_budget`).
    Every cache is sized from the budget but capped by what it could ever hold (a graph's rows
    and lists), so a budget far above the graph costs no more memory than one that just fits it.
    `split` applies to the systems with two caches to split (caliex, ginex) and `group` to the
    pipelined ones that sample in groups (caliex, memory); passing either to another system is
    an error rather than silently ignored.

    ginex writes its sampled superbatch (`superbatch` mini-batches; ``system.superbatch`` may be
    changed between runs) to a file in `spill_dir` (default: the dataset's folder, the disk under
    test) and reads it back with direct I/O; its read buffer and its inspection's first-use map
    are paid from the budget before the caches are sized, and the file is removed on close.
    """
    check_choice("system", name, SYSTEMS)
    if not isinstance(ds, Dataset):
        raise bad_value("ds", ds, "a Dataset from labkit.core.datasets.open_dataset('caliex', profile)")
    if not isinstance(cfg, ModelConfig):
        raise bad_value("cfg", cfg, "a labkit.disk.train.ModelConfig, e.g. ModelConfig.paper('sage')")
    budget = reference_budget(budget) if name == "memory" else as_budget(budget)
    if split is not None:
        if name not in ("caliex", "ginex"):
            raise bad_value("split", split, f"None for system {name} (it has no caches to split; "
                            "a split applies to caliex and ginex)")
        check_range("split", split, 0.0, 1.0)
        split = float(split)
    if group is not None:
        if name not in ("caliex", "memory"):
            raise bad_value("group", group, f"None for system {name} (its stages run in turn; a "
                            "sampling group applies to caliex and memory)")
        check_range("group", group, 1, integer=True)
        group = int(group)
    if name == "caliex" and pre is None:
        raise bad_value("pre", None, "the Presampled result of labkit.disk.system.presample(...)")
    if pre is not None and not isinstance(pre, Presampled):
        raise bad_value("pre", pre, "None or the Presampled result of labkit.disk.system.presample(...)")
    check_range("samplers", samplers, 1, 64, integer=True)
    check_range("superbatch", superbatch, 1, integer=True)
    check_range("queue_depth", queue_depth, 1, integer=True)
    samplers, superbatch, queue_depth = int(samplers), int(superbatch), int(queue_depth)
    labels = ds.array("labels", mmap=False)
    num_classes = int(ds.meta["num_classes"])
    info: dict = {}
    if name == "memory":
        topo, feat = memory.open_stores(ds)
        slot = pre.slot_bytes if pre is not None else (0, 0)
    else:
        policy_mode = "auto" if name == "caliex" else {"naive": naive.IO_MODE, "ginex": ginex.IO_MODE}[name]
        tdisk = pre.profile.topology_disk if pre is not None else DiskModel()
        fdisk = pre.profile.feature_disk if pre is not None else DiskModel()
        topo = DiskTopology(ds, budget, policy=IOPolicy(policy_mode, tdisk), queue_depth=queue_depth,
                            fallback=fallback)
        try:
            feat = DiskFeatures(ds, budget, policy=IOPolicy(policy_mode, fdisk), queue_depth=queue_depth,
                                fallback=fallback)
        except BaseException:
            topo.close()  # its indptr and staging stay reserved otherwise
            raise
        slot = (0, 0)
        spill = None
        try:
            if name == "caliex":
                groups = group_choices(pre) if group is None else [group]
                prior = out_degree(ds)
                # The plans that fill the caches come from all pre-sampled batches; the tuner's
                # from half of them (scored on the other half): each built once for every group.
                fplan = cacheplan.rows_by_access(pre.counts, feat.row_bytes, prior=prior)
                tplan = cacheplan.lists_by_access(pre.counts, topo.indptr)
                holdout = Holdout.of(pre, topo.indptr, feat.row_bytes, prior)
                sized = []
                for g in groups:
                    try:
                        sized.append(_size_caliex(pre, budget, topo, feat, holdout, samplers, g, split))
                    except BudgetExceeded:
                        if g == groups[0]:
                            raise  # even the smallest group does not fit; larger ones ask more
                        break
                # Equal within 1% as far as the model can tell: the smaller group holds less.
                lo = min(z["total"] for z in sized)
                pick = next(z for z in sized if z["total"] <= lo * 1.01)
                group, split, cache_bytes, slot = pick["group"], pick["split"], pick["cache_bytes"], pick["slot"]
                info.update(predicted=pick["curve"], tuned_split=pick["best"],
                            cache_bytes=cache_bytes, slot_bytes=slot, group=group,
                            predicted_by_group={z["group"]: z["total"] for z in sized})
                # The tuners and the hold-out plans (arrays over all nodes, outside the budget) are
                # done: free them before the caches fill, rather than keep them for the whole run.
                del sized, pick, holdout
                t_nodes, f_nodes = split_caches(split, cache_bytes, topo.indptr.size - 1, tplan, fplan)
                topo.set_cache(t_nodes if t_nodes.size else None)
                feat.set_cache(f_nodes if f_nodes.size else None)
            elif name == "ginex":
                spill, split, cache_bytes = ginex.fill_caches(
                    ds, budget, cfg, topo, feat, batch_bytes=pre.slot_bytes[0] if pre is not None else None,
                    split=split, spill_dir=spill_dir)
                info.update(cache_bytes=cache_bytes)
        except BaseException:
            try:
                topo.close()
            finally:
                try:
                    feat.close()
                finally:
                    if spill is not None:
                        spill.close()
            raise
    sampler = NeighborSampler(topo, list(cfg.fanouts), seed)
    trainer = Trainer(cfg, feat.dim, num_classes, seed=seed)
    system = DiskGNN(name, ds, budget, cfg, sampler, topo, feat, trainer, labels, split, 1, slot, superbatch, info,
                     samplers, group or 1, spill if name == "ginex" else None)
    # Filling the caches is setup, not training: keep its reads apart from the run's counters.
    info["fill_bytes_read"] = sum(s.file.counters.bytes_read for s in (topo, feat) if hasattr(s, "file"))
    system.reset_counters()
    release_free_memory()  # the tuner's and the fill's temporaries are gone; don't keep their pages
    return system


def workload(profile: str = "ci", model: str = "sage", num_batches: int = 8, *, seed: int = 0,
             budget_fraction: float = 0.15, presample_batches: int = 8, full_verify: bool = True,
             progress: bool = False):
    """Return (dataset, model config, budget bytes, presample seeds, training seeds) for a profile.

    The budget is `budget_fraction` of the dataset's bytes (above 1 only makes sense for tiny
    graphs, where one mini-batch touches a third of the nodes). `full_verify=False` checks file
    sizes only (for a child process whose parent already verified the checksums). `progress`
    shows a bar if the dataset has to be built first.
    """
    check_range("num_batches", num_batches, 1, integer=True)
    check_range("presample_batches", presample_batches, 1, integer=True)
    check_range("budget_fraction", budget_fraction, 0.0, 100.0, lo_open=True)
    check_seed(seed)
    num_batches, presample_batches, seed = int(num_batches), int(presample_batches), int(seed)
    cfg = ModelConfig.paper(model)
    ds = open_dataset("caliex", profile, full_verify=full_verify, progress=progress)
    train = ds.array("train", mmap=False)
    seeds = batch_seeds(train, cfg.batch_size, presample_batches + num_batches, seed)
    return ds, cfg, int(budget_fraction * dataset_bytes(ds)), seeds[:presample_batches], seeds[presample_batches:]
