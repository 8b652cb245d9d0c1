"""Cache plans rank what the paper says they rank: Ginex's out/in degree, CaliEX's pre-sampled counts."""

from __future__ import annotations

import numpy as np

from labkit.core import cacheplan
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.store import MemoryTopology


def test_ginex_topology_plan_ranks_lists_by_out_over_in_degree(ds):
    ip, out = ds.array("indptr", mmap=False), ds.array("out_degree", mmap=False)
    p = cacheplan.lists_by_degree(out, ip)
    in_deg = np.diff(ip)
    assert np.array_equal(np.sort(p.order), np.flatnonzero(in_deg > 0))  # every non-empty list, once
    r = out[p.order] / in_deg[p.order]
    assert np.all(np.diff(r) <= 0)
    assert np.array_equal(p.cost, in_deg * 4)
    kept = p.cut(1 << 16).order
    assert p.cost[kept].sum() <= 1 << 16 < p.cost[p.order[:kept.size + 1]].sum()


def test_presampled_counts_are_access_frequencies(ds):
    mt = MemoryTopology.from_dataset(ds)
    sampler = NeighborSampler(mt, [4, 3], seed=0)
    batches = [sampler.sample(s, i) for i, s in enumerate(batch_seeds(ds.array("train"), 128, 3))]
    n = ds.meta["num_nodes"]
    c = cacheplan.AccessCounts.from_batches(batches, n)
    want_f = sum(np.bincount(b.n_id, minlength=n) for b in batches)
    want_t = sum(np.bincount(b.expanded, minlength=n) for b in batches)
    assert np.array_equal(c.features, want_f) and np.array_equal(c.topology, want_t) and c.batches == 3
    fp = cacheplan.rows_by_access(c, 512)
    assert np.array_equal(np.sort(fp.order), np.flatnonzero(want_f))
    assert np.all(np.diff(want_f[fp.order]) <= 0)  # most-gathered rows first
    tp = cacheplan.lists_by_access(c, mt.indptr)
    assert set(tp.order.tolist()) <= set(np.flatnonzero(want_t).tolist())
