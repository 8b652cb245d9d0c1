"""Ginex (Park et al., VLDB 2022) as CaliEX's baseline: degree-ranked neighbour cache, Belady feature cache.

Ginex samples a *superbatch* of mini-batches ahead and spills it to disk
(:class:`~labkit.disk.baselines.spill.SampleSpill`); an inspection pass over the spill gives each
node's next use, so its feature cache replaces rows by Belady's rule (the row needed latest goes
first) while the superbatch is gathered and trained. Its neighbour cache is a static plan ranked
by out/in degree; the cache budget is split evenly between the two unless told otherwise.
"""

from __future__ import annotations

import numpy as np

from labkit.core import cacheplan
from labkit.core.datasets import Dataset
from labkit.core.errors import bad_value, check_range
from labkit.core.memory import MemoryBudget
from labkit.disk.baselines.spill import SampleSpill
from labkit.disk.iocache import BeladyFeatureCache
from labkit.disk.pipeline import RunStats, SuperbatchStream, run_superbatch
from labkit.disk.sampler import check_seeds
from labkit.disk.store import DiskFeatures, DiskTopology
from labkit.disk.train import ModelConfig
from labkit.disk.tuner import split_caches

#: How its stores read cache misses: one request per page run, never coalesced or swept.
IO_MODE = "random"


def batch_bytes_bound(cfg: ModelConfig, num_nodes: int) -> int:
    """An upper bound on a sampled mini-batch's bytes (node ids, edges, hop offsets) before any is sampled."""
    nodes = reach = cfg.batch_size
    edges = 0
    for f in cfg.fanouts:
        reach *= int(f)
        edges += reach
        nodes += reach
    nodes = min(nodes, num_nodes)
    return int(nodes * 8 + edges * 8 + 16 * (len(cfg.fanouts) + 1))


def fill_caches(ds: Dataset, budget: MemoryBudget, cfg: ModelConfig, topo: DiskTopology, feat: DiskFeatures, *,
                batch_bytes: int | None, split: float | None, spill_dir) -> tuple[SampleSpill, float, int]:
    """Open Ginex's spill, then size and fill its caches from what the budget has left.

    The spill's read buffer and first-use map are paid first; the caches get the rest, less the
    batch being written. Returns (spill, the topology share of the cache budget, cache bytes).
    `batch_bytes` is the largest sampled batch if pre-sampled (else :func:`batch_bytes_bound`).
    """
    n = topo.indptr.size - 1
    batch = batch_bytes if batch_bytes is not None else batch_bytes_bound(cfg, n)
    spill = SampleSpill(spill_dir or ds.path("features").parent, budget, n, buffer_bytes=batch)
    try:
        # Left for the caches: what the spill's buffers leave, less the batch being written.
        cache_bytes = budget.free - batch - (1 << 20)
        split = 0.5 if split is None else split
        out_deg = ds.array("out_degree", mmap=False)
        tplan = cacheplan.lists_by_degree(out_deg, topo.indptr)
        fplan = cacheplan.rows_by_degree(out_deg, feat.row_bytes)
        t_nodes, _ = split_caches(split, cache_bytes, n, tplan, fplan)
        topo.set_cache(t_nodes if t_nodes.size else None)
        f_bytes = cache_bytes - int(split * cache_bytes) - n * 4
        rows = max(0, f_bytes // (feat.row_bytes + BeladyFeatureCache.SLOT_BYTES))
        # No cache holds more rows than the graph has: a budget far above the graph's
        # size once sized it in the millions of rows (and doubled the RSS).
        feat.set_cache(belady_rows=int(min(rows, feat.num_nodes)))
    except BaseException:
        spill.close()
        raise
    return spill, split, cache_bytes


def run(system, seeds: list[np.ndarray], *, first_index: int = 0) -> RunStats:
    """Train `system` (a ginex DiskGNN) superbatch by superbatch: sample and spill, inspect, gather and train."""
    check_range("superbatch", system.superbatch, 1, integer=True)
    return run_superbatch(system.sampler, system.features, system.trainer, seeds, system.labels, system.budget,
                          system.spill, superbatch=int(system.superbatch), first_index=first_index)


def stream(system, seeds: list[np.ndarray], *, first_index: int = 0,
           indices: list[int] | None = None) -> SuperbatchStream:
    """`system`'s schedule over `seeds` as a stream, trained a few mini-batches per ``run(k)``.

    A superbatch (``system.superbatch`` mini-batches, up to one epoch's) then spans calls, as
    Ginex's do over an epoch: :class:`~labkit.disk.pipeline.SuperbatchStream`.
    """
    if system.name != "ginex":
        raise bad_value("system", system.name, "ginex (only Ginex trains from a spilled superbatch)")
    check_range("superbatch", system.superbatch, 1, integer=True)
    seeds = [check_seeds(f"seeds[{k}]", s, system.topology.indptr.size - 1) for k, s in enumerate(seeds)]
    return SuperbatchStream(system.sampler, system.features, system.trainer, seeds, system.labels, system.budget,
                            system.spill, superbatch=int(system.superbatch), first_index=first_index,
                            indices=indices)
