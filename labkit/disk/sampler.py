"""CaliEX's mini-batch sampling: the graph core's one sampler over a topology store, in groups.

There is one sampling loop, :class:`labkit.graph.sampling.NeighborSampler`: it draws positions
from the lists' lengths (``indptr``, held in RAM) and asks the store only for the sampled
entries (``entries``: from RAM, a cache, or disk; the sampler cannot tell), so no neighbour list
is materialised and a hub's long list costs only the pages its sampled entries lie in. This
module adds what the disk system needs on top: the draw key of mini-batch `index` under the
run's seed (so a batch is bit-identical whichever store served it, alone or in a group), the
group mode as the I/O plan (several mini-batches' frontiers merged per hop, each page read once),
and :class:`SampledBatch`, the pipeline's format of the one sampler's result.

A :class:`SampledBatch` orders nodes by the hop they first appear in and edges by hop, which
lets layer ``i`` of an L-layer GNN work on a prefix of both (PyG's ``trim_to_layer``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.core.arrays import unique
from labkit.core.errors import bad_value, check_range, check_seed
from labkit.graph.csr import check_node_ids
from labkit.graph.sampling import MultiHopSample
from labkit.graph.sampling import NeighborSampler as GraphSampler


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


def batch_key(seed: int, index: int) -> int:
    """Return the one sampler's seed for mini-batch `index` of a run seeded `seed` (its stream is 0)."""
    return (seed * 1_000_003 + index) & 0x7FFF_FFFF_FFFF_FFFF


def to_batch(s: MultiHopSample, index: int) -> SampledBatch:
    """Return the one sampler's `s` as the pipeline's SampledBatch (int32 local ids: half the queue bytes)."""
    return SampledBatch(index, s.nodes, np.concatenate(s.cols).astype(np.int32),
                        np.concatenate(s.rows).astype(np.int32), np.array(s.num_nodes_per_hop),
                        np.cumsum([len(r) for r in s.rows]), s.num_nodes_per_hop[0])


class NeighborSampler:
    """Samples ``fanouts[h]`` distinct neighbours per node at hop h from a topology store."""

    def __init__(self, topology, fanouts: list[int], seed: int = 0) -> None:
        if isinstance(fanouts, (str, bytes)) or not hasattr(fanouts, "__len__") or len(fanouts) == 0:
            raise bad_value("fanouts", fanouts, "at least one hop: a list of neighbours per hop, e.g. [15, 10, 5]")
        for i, f in enumerate(fanouts):
            check_range(f"fanouts[{i}]", f, 1, 1000, integer=True)
        self.topology = topology
        self.fanouts = [int(f) for f in fanouts]
        self.seed = check_seed(seed)
        # A hash workspace sized by the sample: a per-node one would escape the memory budget.
        self._sampler = GraphSampler(topology, workspace="sample")
        #: Set to a dict to record, per batch index, each hop's global positions in the indices
        #: file that were read (pre-sampling gives them to the tuner).
        self.positions: dict | None = None

    def sample(self, seeds: np.ndarray, index: int) -> SampledBatch:
        """Return mini-batch `index`'s sampled graph around `seeds` (unique node ids)."""
        return self.sample_group([seeds], [index])[0]

    def sample_group(self, seeds: list[np.ndarray], indices: list[int]) -> list[SampledBatch]:
        """Sample several mini-batches side by side, one topology read per hop for all of them.

        Each batch is bit-identical to :meth:`sample`'s (draws depend on the batch, the hop and
        the position in its own frontier), and the entries all of them picked are read together:
        a page of the topology file that several batches need is read once per group rather than
        once per batch. At the last hop, where one batch's picks already touch most pages, a
        group of G batches costs about what one batch does.
        """
        if len(seeds) != len(indices):
            raise ValueError(f"indices has {len(indices)} entries for {len(seeds)} seed arrays; expected one per batch")
        n = self.topology.num_nodes
        seeds = [check_seeds(f"seeds[{k}]", s, n) for k, s in enumerate(seeds)]
        out = self._sampler.sample_group(seeds, self.fanouts, keys=[(batch_key(self.seed, i), 0) for i in indices])
        if self.positions is not None:  # global positions read, per batch and hop (pre-sampling)
            for s, i in zip(out, indices):
                self.positions.setdefault(i, []).extend(s.eids)
        return [to_batch(s, i) for s, i in zip(out, indices)]


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
