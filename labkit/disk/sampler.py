"""Multi-hop neighbourhood sampling over any topology store, deterministic for a seed.

Each hop picks up to ``fanout`` distinct neighbours per frontier node with the graph core's
kernel (:func:`labkit.graph.sampling.sample_neighbors`, Floyd's algorithm, counter-based
draws). The draws need only the lists' lengths (``indptr``, held in RAM), so they come first
and the store is asked only for the sampled entries (``entries``: from RAM, a cache, or disk;
the sampler cannot tell): no neighbour list is materialised, so the sampler's working arrays
are the size of the sample, and a hub's long list costs only the pages its sampled entries
lie in. Draws depend on (seed, batch, hop, position in the frontier) and the frontier's order
does not depend on the store, so a mini-batch is bit-identical whichever store served it.

A :class:`SampledBatch` orders nodes by the hop they first appear in and edges by hop, which
lets layer ``i`` of an L-layer GNN work on a prefix of both (PyG's ``trim_to_layer``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.arrays import unique
from labkit.core.errors import bad_value, check_range, check_seed
from labkit.disk.store import entry_rows, lists_ptr
from labkit.graph.csr import check_node_ids
from labkit.graph.sampling import _sample_hop


@dataclass
class SampledBatch:
    """One mini-batch's sampled computation graph, nodes and edges ordered by hop."""

    index: int
    n_id: np.ndarray            # global node ids; the first batch_size are the seeds
    edge_src: np.ndarray        # local ids, int32 (message source: the sampled neighbour)
    edge_dst: np.ndarray        # local ids, int32 (message target: the frontier node)
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


def check_seeds(arg: str, seeds, num_nodes: int) -> np.ndarray:
    """Return one mini-batch's seeds if they are distinct integer node ids in [0, num_nodes), else raise."""
    seeds = np.asarray(seeds)
    if seeds.ndim != 1:
        raise bad_value(arg, f"an array of shape {seeds.shape}", "a 1-D array of seed node ids")
    seeds = check_node_ids(arg, seeds, num_nodes, "seed node ids")
    if unique(seeds).size != seeds.size:
        raise bad_value(arg, "an array with repeated ids", "distinct seed node ids")
    return seeds


class NeighborSampler:
    """Samples ``fanouts[h]`` neighbours per node at hop h from a topology store."""

    def __init__(self, topology, fanouts: list[int], seed: int = 0) -> None:
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__") or len(fanouts) == 0:
            raise bad_value("fanouts", fanouts, "at least one hop: a list of neighbours per hop, e.g. [15, 10, 5]")
        for i, f in enumerate(fanouts):
            check_range(f"fanouts[{i}]", f, 1, 1000, integer=True)
        self.topology = topology
        self.fanouts = [int(f) for f in fanouts]
        self.seed = check_seed(seed)
        #: Set to a dict to record, per batch index, each hop's global positions in the indices
        #: file that were read (pre-sampling gives them to the tuner).
        self.positions: dict | None = None

    def sample(self, seeds: np.ndarray, index: int) -> SampledBatch:
        """Return mini-batch `index`'s sampled graph around `seeds` (unique node ids)."""
        return self.sample_group([seeds], [index])[0]

    def sample_group(self, seeds: list[np.ndarray], indices: list[int]) -> list[SampledBatch]:
        """Sample several mini-batches side by side, one topology fetch per hop for all of them.

        At each hop the batches' frontiers are merged (each node once), every batch draws its
        positions in the merged lists exactly as it would alone (draws depend on the batch, the
        hop and the position in its own frontier, so the batches are bit-identical to
        :meth:`sample`'s), and the entries all of them picked are fetched together: a page of
        the topology file that several batches need is read once per group rather than once
        per batch. At the last hop, where one batch's picks already touch most pages, a group
        of G batches costs about what one batch does.
        """
        if len(seeds) != len(indices):
            raise ValueError(f"indices has {len(indices)} entries for {len(seeds)} seed arrays; expected one per batch")
        indptr = self.topology.indptr
        seeds = [check_seeds(f"seeds[{k}]", s, indptr.size - 1) for k, s in enumerate(seeds)]
        states = [_BatchState(s.astype(np.int64, copy=False), (self.seed * 1_000_003 + i) & 0x7FFF_FFFF_FFFF_FFFF)
                  for s, i in zip(seeds, indices)]
        for h, fanout in enumerate(self.fanouts):
            if len(states) == 1:
                union = states[0].frontier
                rows = [np.arange(union.size)]
            else:
                union = unique(np.concatenate([st.frontier for st in states]))
                rows = [np.searchsorted(union, st.frontier) for st in states]
            # The draws need only each list's length (indptr), so they come first and only the
            # sampled entries are fetched, once for the whole group.
            ptr = lists_ptr(indptr, union)
            # The kernel behind sample_neighbors, unchecked, as the Dask store's sampler calls it: ptr
            # is built here from lengths, rows index it, and the fanouts were checked when made.
            draws = [_sample_hop(ptr, r, fanout, False, st.key, h) for st, r in zip(states, rows)]
            if len(states) == 1:
                picks = [self.topology.entries(union, ptr, draws[0][1])]
            else:
                pos = unique(np.concatenate([eid for _, eid in draws]))
                vals = self.topology.entries(union, ptr, pos)
                picks = [vals[np.searchsorted(pos, eid)] for _, eid in draws]
            if self.positions is not None:  # global positions read, per batch and hop (pre-sampling)
                for st, i, (_, eid) in zip(states, indices, draws):
                    row = entry_rows(ptr, eid)
                    self.positions.setdefault(i, []).append(indptr[union[row]].astype(np.int64) + (eid - ptr[row]))
            for st, (lptr, _), pk in zip(states, draws, picks):
                st.hop(lptr, pk.astype(np.int64))
        return [st.result(i) for st, i in zip(states, indices)]


class _BatchState:
    """One mini-batch while it is being sampled: nodes known so far (sorted, with local ids), edges."""

    def __init__(self, seeds: np.ndarray, key: int) -> None:
        self.key = key
        self.n_id = [seeds]
        self.known = np.sort(seeds)
        self.known_local = np.argsort(seeds, kind="stable")
        self.node_hops = [seeds.size]
        self.srcs: list[np.ndarray] = []
        self.dsts: list[np.ndarray] = []
        self.edge_hops: list[int] = []
        self.lo, self.hi = 0, seeds.size
        self.total_edges = 0

    @property
    def frontier(self) -> np.ndarray:
        return self.n_id[-1]

    def hop(self, lptr: np.ndarray, picks: np.ndarray) -> None:
        """Add one hop: frontier node i's sampled neighbours are ``picks[lptr[i]:lptr[i+1]]``."""
        counts = np.diff(lptr)
        dst_local = np.repeat(np.arange(self.lo, self.hi, dtype=np.int64), counts)
        uniq = unique(picks)
        known = self.known
        pos = np.searchsorted(known, uniq)
        pos_c = np.minimum(pos, known.size - 1)
        new = uniq[~((pos < known.size) & (known[pos_c] == uniq))]
        start = self.hi
        self.n_id.append(new)
        allk = np.concatenate([known, new])
        alll = np.concatenate([self.known_local, np.arange(start, start + new.size, dtype=np.int64)])
        o = np.argsort(allk, kind="stable")
        self.known, self.known_local = allk[o], alll[o]
        # Local ids fit int32 (a mini-batch has far fewer than 2^31 nodes): half the queue bytes.
        self.srcs.append(self.known_local[np.searchsorted(self.known, picks)].astype(np.int32))
        self.dsts.append(dst_local.astype(np.int32))
        self.total_edges += picks.size
        self.edge_hops.append(self.total_edges)
        self.lo, self.hi = start, start + new.size
        self.node_hops.append(self.hi)

    def result(self, index: int) -> SampledBatch:
        return SampledBatch(index, np.concatenate(self.n_id), np.concatenate(self.srcs), np.concatenate(self.dsts),
                            np.array(self.node_hops), np.array(self.edge_hops), int(self.n_id[0].size))


def batch_seeds(train: np.ndarray, batch_size: int, num_batches: int, seed: int = 0) -> list[np.ndarray]:
    """Return `num_batches` mini-batches of training seeds (a seeded shuffle, cycled if needed)."""
    check_range("batch_size", batch_size, 1, integer=True)
    check_range("num_batches", num_batches, 0, integer=True)
    seed = check_seed(seed, bits=64)
    batch_size, num_batches = int(batch_size), int(num_batches)
    if np.size(train) == 0 and num_batches > 0:
        raise bad_value("train", train, "a non-empty array of training node ids")
    rng = np.random.default_rng([seed, 7])
    perm = rng.permutation(train)
    # A batch of distinct ids never holds more than the training set: any window of the cycled
    # permutation that long already covers all of it (and 1e300 must not size the cycle).
    batch_size = min(batch_size, max(1, perm.size))
    need = batch_size * num_batches
    if need > perm.size:
        perm = np.concatenate([perm] * (need // perm.size + 1))
    return [unique(perm[i * batch_size:(i + 1) * batch_size]) for i in range(num_batches)]
