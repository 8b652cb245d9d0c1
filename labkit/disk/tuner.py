"""CaliEX's auto-tuner: how to split the cache budget between topology and features.

Pre-sampling gives a few mini-batches, their per-node access counts and measured stage costs
(sampling CPU time, gathering CPU time per row, training time; disk cost from the fitted
:class:`~labkit.disk.costmodel.DiskModel`). For a topology share ``f`` of the cache bytes the
tuner fills both caches from their plans, counts what each pre-sampled batch would still miss,
prices those misses with the cheapest read plan (random / coalesced / sweep) and predicts

    time per mini-batch = max(sample(f), gather(f), io(f), train + cpu(f) / cores)   pipelined
                        = sample(f) + gather(f) + train                       serial stages

where ``io(f)`` is the disk time of both stages (they share one disk) and ``cpu(f)`` is the CPU the sampling and gathering stages burn (their own work plus the
per-request cost of issuing reads): training uses every core, so on a small machine the
overlapped stages still slow it down by that much.

It returns the ``f`` that minimises the prediction, and the whole predicted curve so it can be
drawn against measured points.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.arrays import unique
from labkit.core.cacheplan import CachePlan
from labkit.core.directio import PAGE, extent_pages
from labkit.disk.costmodel import DiskModel
from labkit.core.errors import bad_value, check_range
from labkit.disk.sampler import SampledBatch
from labkit.disk.store import entry_rows


@dataclass
class StageProfile:
    """Measured per-batch costs the model is built from."""

    sample_cpu: float           # seconds per batch of sampling work outside disk reads
    gather_cpu_per_row: float   # seconds per gathered row outside disk reads
    train: float                # seconds per training step
    topology_disk: DiskModel = field(default_factory=DiskModel)
    feature_disk: DiskModel = field(default_factory=DiskModel)
    cores: int = 2
    request_cpu: float = 20e-6  # CPU seconds to issue one read request (Python, syscall, copy)


def split_caches(f: float, cache_bytes: int, num_nodes: int, topo_plan: CachePlan,
                 feat_plan: CachePlan) -> tuple[np.ndarray, np.ndarray]:
    """Return (topology nodes, feature nodes) cached when a share `f` goes to topology.

    The topology cache pays its node -> slot map (4 bytes per node) before holding anything,
    and 8 bytes of local indptr per list; the feature cache pays 8 bytes (a sorted id) per row.
    """
    from labkit.disk.iocache import FeatureCache
    check_range("f", f, 0.0, 1.0)
    # Negative bytes (a budget already spent elsewhere) cache nothing; the bound keeps the sums in int64.
    check_range("cache_bytes", cache_bytes, -2**62, 2**62, integer=True)
    cache_bytes = int(cache_bytes)
    t_bytes = int(f * cache_bytes)
    f_bytes = cache_bytes - t_bytes
    map_bytes = num_nodes * 4
    if t_bytes > map_bytes + 8:
        o = topo_plan.order
        k = int(np.searchsorted(np.cumsum(topo_plan.cost[o] + 8), t_bytes - map_bytes - 8, side="right"))
        t_nodes = o[:k]
    else:
        t_nodes = topo_plan.order[:0]
    o = feat_plan.order
    k = int(np.searchsorted(np.cumsum(feat_plan.cost[o] + FeatureCache.ID_BYTES), f_bytes, side="right"))
    return t_nodes, o[:k]


class Tuner:
    """Predicts time per mini-batch for any topology/feature split from pre-sampled batches."""

    def __init__(self, batches: list[SampledBatch], indptr: np.ndarray, row_bytes: int,
                 topo_plan: CachePlan, feat_plan: CachePlan, profile: StageProfile, cache_bytes: int,
                 *, pipelined: bool = True, max_request: int = 256 << 10, sweep_request: int = 1 << 20,
                 group: int = 1, positions: list[list[np.ndarray]] | None = None) -> None:
        if len(batches) == 0:
            raise bad_value("batches", batches, "at least one pre-sampled SampledBatch")
        check_range("group", group, 1, integer=True)
        if group > len(batches):
            raise ValueError(f"group={group} is not accepted; expected 1 to {len(batches)} "
                             "(the number of pre-sampled batches the tuner scores)")
        check_range("cache_bytes", cache_bytes, 0, integer=True)
        check_range("row_bytes", row_bytes, 1, integer=True)
        self.batches, self.indptr, self.row_bytes = batches, indptr, row_bytes
        self.group = int(group)
        if positions is not None and len(positions) != len(batches):
            raise ValueError(f"positions has {len(positions)} entries for {len(batches)} batches; expected one per batch")
        self.positions = positions
        self.topo_plan, self.feat_plan, self.profile = topo_plan, feat_plan, profile
        self.cache_bytes, self.pipelined = int(cache_bytes), pipelined
        self.num_nodes = indptr.size - 1
        self.max_request, self.sweep_request = max_request, sweep_request
        # Topology: a sampler thread reads each hop's sampled entries once for its whole group of
        # batches (NeighborSampler.sample_group), so misses are priced per hop over the group's
        # merged positions (the indices-file positions pre-sampling read; without them, the
        # frontier's whole lists); only whole groups are scored. What a group-hop reads does not
        # depend on the split, only which of it the cache serves: prepared once here.
        G = self.group
        self._n_scored = len(batches) // G * G
        self._reads = []  # per group and hop: (frontier, node of each position, page of each position)
        for g0 in range(0, self._n_scored, G):
            grp = range(g0, g0 + G)
            for h in range(len(batches[g0].node_hops) - 1):
                front = unique(np.concatenate([self._frontier(batches[j], h) for j in grp]))
                if positions is not None:
                    pos = unique(np.concatenate([positions[j][h] for j in grp]))
                    self._reads.append((front, entry_rows(indptr, pos), pos * 4 // PAGE))
                else:
                    self._reads.append((front, None, None))
        self._topo_memo: dict[int, tuple] = {}  # by cached lists (a prefix of the plan's order)

    def _topology(self, cached: int, in_t: np.ndarray) -> tuple[float, float, int, int]:
        """(disk seconds, requests, hits, lookups) of the topology reads of all scored batches; lookups are
        sampled entries where pre-sampling recorded positions (as the store counts them), else lists."""
        if cached in self._topo_memo:
            return self._topo_memo[cached]
        p = self.profile
        s_io = requests = 0.0
        t_hits = t_all = 0
        scale = len(self.batches) / max(1, self._n_scored)
        for front, node, page in self._reads:
            if node is not None:  # hits counted per sampled entry, as the store counts them
                hit = in_t[node]
                t_hits += int(hit.sum())
                t_all += node.size
                pages = unique(page[~hit])
            else:  # per list
                t_hits += int(in_t[front].sum())
                t_all += front.size
                miss = front[~in_t[front]]
                starts = self.indptr[miss].astype(np.int64) * 4
                lens = (self.indptr[miss + 1] - self.indptr[miss]).astype(np.int64) * 4
                pages = extent_pages(starts, lens)
            g, t, _ = p.topology_disk.best_gap(pages, self.max_request, self.sweep_request)
            s_io += t * scale
            requests += self._requests(p.topology_disk, pages, g) * scale
        self._topo_memo[cached] = (s_io, requests, t_hits, t_all)
        return self._topo_memo[cached]

    def predict(self, f: float) -> dict:
        """Return predicted seconds per batch for topology share `f` (0 to 1): stages, total, hit rates."""
        check_range("f", f, 0.0, 1.0)
        t_nodes, f_nodes = split_caches(f, self.cache_bytes, self.num_nodes, self.topo_plan, self.feat_plan)
        in_t = np.zeros(self.num_nodes, bool)
        in_t[t_nodes] = True
        in_f = np.zeros(self.num_nodes, bool)
        in_f[f_nodes] = True
        p = self.profile
        g_io = 0.0
        f_hits = f_all = 0
        rows = max_miss = 0
        s_io, requests, t_hits, t_all = self._topology(t_nodes.size, in_t)
        for b in self.batches:
            fmiss = b.n_id[~in_f[b.n_id]]
            max_miss = max(max_miss, fmiss.size)
            f_hits += b.n_id.size - fmiss.size
            f_all += b.n_id.size
            rows += b.n_id.size
            pages = unique(fmiss.astype(np.int64) * self.row_bytes // PAGE)
            g, t, _ = p.feature_disk.best_gap(pages, self.max_request, self.sweep_request)
            g_io += t
            requests += self._requests(p.feature_disk, pages, g)
        n = max(1, len(self.batches))
        sample = p.sample_cpu + s_io / n
        gather = p.gather_cpu_per_row * rows / n + g_io / n
        cpu = p.sample_cpu + p.gather_cpu_per_row * rows / n + p.request_cpu * requests / n
        if self.pipelined:
            # Both I/O stages share one disk, so their reads add up even when the stages overlap.
            total = max(sample, gather, (s_io + g_io) / n, p.train + cpu / max(1, p.cores))
        else:
            total = sample + gather + p.train
        return {"f": float(f), "sample": sample, "gather": gather, "train": p.train, "total": total,
                "io": (s_io + g_io) / n,
                "cpu_other": cpu, "requests": requests / n,
                "hit_rate_topology": t_hits / max(1, t_all), "hit_rate_features": f_hits / max(1, f_all),
                "topology_nodes": int(t_nodes.size), "feature_rows": int(f_nodes.size),
                "max_miss_rows": int(max_miss)}

    @staticmethod
    def _frontier(b: SampledBatch, h: int) -> np.ndarray:
        return b.n_id[(b.node_hops[h - 1] if h else 0):b.node_hops[h]]

    def _requests(self, model: DiskModel, pages: np.ndarray, gap: int) -> int:
        cap = (self.sweep_request if gap >= 1 << 40 else self.max_request) // PAGE
        return model.plan_cost(pages, gap, cap)[1]

    def curve(self, fs=None) -> list[dict]:
        """Return predictions over a grid of topology shares (default 0, 0.05, ..., 1)."""
        fs = np.linspace(0, 1, 21) if fs is None else fs
        if isinstance(fs, (str, bytes)) or not hasattr(fs, "__iter__"):
            raise bad_value("fs", fs, "None or a sequence of topology shares in [0, 1]")
        return [self.predict(float(f)) for f in fs]

    def best(self, fs=None, tolerance: float = 0.01) -> tuple[float, list[dict]]:
        """Return (the share with the lowest predicted time, the predicted curve).

        Shares within `tolerance` of the lowest time are equal as far as the model can tell
        (training-bound runs give a flat curve); among them the one that asks least of the
        disk and the CPU (sample + gather + their CPU) wins, as it leaves most for training.
        """
        check_range("tolerance", tolerance, 0.0)
        c = self.curve(fs)
        if not c:
            raise bad_value("fs", fs, "None or at least one topology share in [0, 1]")
        lo = min(p["total"] for p in c)
        near = [p for p in c if p["total"] <= lo * (1 + tolerance)]
        pick = min(near, key=lambda p: (p["sample"] + p["gather"] + p["cpu_other"], p["f"]))
        return pick["f"], c
