"""Multi-hop neighbourhood sampling over any topology store, deterministic for a seed.

Each hop asks the store for the frontier's neighbour lists (a small local CSR: from RAM, a
cache, or disk; the sampler cannot tell) and picks up to ``fanout`` distinct neighbours per
node with the graph core's kernel (:func:`labkit.graph.sampling.sample_neighbors`, Floyd's
algorithm, counter-based draws). Draws depend on (seed, batch, hop, position in the frontier)
and the frontier's order does not depend on the store, so a mini-batch is bit-identical
whichever store served it.

A :class:`SampledBatch` orders nodes by the hop they first appear in and edges by hop, which
lets layer ``i`` of an L-layer GNN work on a prefix of both (PyG's ``trim_to_layer``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.errors import check_range
from labkit.graph.sampling import sample_neighbors


@dataclass
class SampledBatch:
    """One mini-batch's sampled computation graph, nodes and edges ordered by hop."""

    index: int
    n_id: np.ndarray            # global node ids; the first batch_size are the seeds
    edge_src: np.ndarray        # local ids (message source: the sampled neighbour)
    edge_dst: np.ndarray        # local ids (message target: the frontier node)
    node_hops: np.ndarray       # node_hops[h] = number of nodes in hops 0..h
    edge_hops: np.ndarray       # edge_hops[h] = number of edges sampled in hops 0..h
    batch_size: int

    @property
    def expanded(self) -> np.ndarray:
        """Nodes whose neighbour lists were read (all hops but the last)."""
        return self.n_id[:self.node_hops[-2]] if len(self.node_hops) > 1 else self.n_id[:0]

    @property
    def nbytes(self) -> int:
        return self.n_id.nbytes + self.edge_src.nbytes + self.edge_dst.nbytes

    def equals(self, other: "SampledBatch") -> bool:
        return (np.array_equal(self.n_id, other.n_id) and np.array_equal(self.edge_src, other.edge_src)
                and np.array_equal(self.edge_dst, other.edge_dst))


class NeighborSampler:
    """Samples ``fanouts[h]`` neighbours per node at hop h from a topology store."""

    def __init__(self, topology, fanouts: list[int], seed: int = 0) -> None:
        if not fanouts:
            raise ValueError("fanouts=[] is not accepted; expected at least one hop, e.g. [15, 10, 5]")
        for f in fanouts:
            check_range("fanouts[i]", f, 1, 1000, integer=True)
        self.topology = topology
        self.fanouts = [int(f) for f in fanouts]
        self.seed = int(seed)

    def sample(self, seeds: np.ndarray, index: int) -> SampledBatch:
        """Return mini-batch `index`'s sampled graph around `seeds` (unique node ids)."""
        seeds = np.asarray(seeds, np.int64)
        key = (self.seed * 1_000_003 + index) & 0x7FFF_FFFF_FFFF_FFFF
        n_id = [seeds]
        known = np.sort(seeds)
        known_local = np.argsort(seeds, kind="stable")
        node_hops = [seeds.size]
        srcs, dsts, edge_hops = [], [], []
        lo, hi = 0, seeds.size
        total_edges = 0
        for h, fanout in enumerate(self.fanouts):
            frontier = n_id[-1]
            ptr, idx = self.topology.fetch(frontier)
            lptr, eid = sample_neighbors(ptr, idx, np.arange(frontier.size), fanout, seed=key, stream=h)
            counts = np.diff(lptr)
            picks = idx[eid].astype(np.int64)
            dst_local = np.repeat(np.arange(lo, hi, dtype=np.int64), counts)
            uniq = np.unique(picks)
            pos = np.searchsorted(known, uniq)
            pos_c = np.minimum(pos, known.size - 1)
            new = uniq[~((pos < known.size) & (known[pos_c] == uniq))]
            start = hi
            n_id.append(new)
            allk = np.concatenate([known, new])
            alll = np.concatenate([known_local, np.arange(start, start + new.size, dtype=np.int64)])
            o = np.argsort(allk, kind="stable")
            known, known_local = allk[o], alll[o]
            src_local = known_local[np.searchsorted(known, picks)]
            srcs.append(src_local)
            dsts.append(dst_local)
            total_edges += picks.size
            edge_hops.append(total_edges)
            lo, hi = start, start + new.size
            node_hops.append(hi)
        return SampledBatch(index, np.concatenate(n_id), np.concatenate(srcs), np.concatenate(dsts),
                            np.array(node_hops), np.array(edge_hops), seeds.size)


def batch_seeds(train: np.ndarray, batch_size: int, num_batches: int, seed: int = 0) -> list[np.ndarray]:
    """Return `num_batches` mini-batches of training seeds (a seeded shuffle, cycled if needed)."""
    check_range("batch_size", batch_size, 1, integer=True)
    check_range("num_batches", num_batches, 0, integer=True)
    rng = np.random.default_rng([seed, 7])
    perm = rng.permutation(train)
    need = batch_size * num_batches
    if need > perm.size:
        perm = np.concatenate([perm] * (need // perm.size + 1))
    return [np.unique(perm[i * batch_size:(i + 1) * batch_size]) for i in range(num_batches)]
