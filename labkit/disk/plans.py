"""Cache plans: which neighbour lists and which feature rows stay in RAM. Plans are data.

A plan is the ordered list of nodes to cache, best first, and is cut to whatever capacity the
budget split gives (so one plan serves every split the tuner tries). Plans come from

- **pre-sampling** (CaliEX): run the sampler on a few mini-batches, count how often each node's
  neighbour list is expanded and each node's feature row is gathered; rank lists by
  accesses per byte (lists differ in size) and rows by accesses;
- **degree** (Ginex's neighbour cache): rank lists by out-degree / in-degree, i.e. how often a
  list is reached per byte it costs, known without sampling;
- Ginex's feature cache is not a static plan but Belady replacement over a superbatch
  (:class:`labkit.disk.iocache.BeladyFeatureCache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.errors import check_range


@dataclass
class CachePlan:
    """Nodes to cache, best first; `cost` is each one's bytes (row size or list size)."""

    kind: str
    source: str
    order: np.ndarray
    cost: np.ndarray
    score: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def cut(self, capacity_bytes: int) -> np.ndarray:
        """Return the plan's nodes that fit in `capacity_bytes`, taken in rank order."""
        check_range("capacity_bytes", capacity_bytes, 0)
        if self.order.size == 0:
            return self.order
        k = int(np.searchsorted(np.cumsum(self.cost[self.order]), capacity_bytes, side="right"))
        return self.order[:k]


@dataclass
class AccessCounts:
    """How often each node's neighbour list was expanded and its feature row gathered."""

    topology: np.ndarray
    features: np.ndarray
    batches: int

    @classmethod
    def from_batches(cls, batches, num_nodes: int) -> "AccessCounts":
        """Count accesses over sampled mini-batches (objects with `.expanded` and `.n_id`)."""
        topo = np.zeros(num_nodes, np.int64)
        feat = np.zeros(num_nodes, np.int64)
        n = 0
        for b in batches:
            _bump(topo, b.expanded)
            _bump(feat, b.n_id)
            n += 1
        return cls(topo, feat, n)


def _bump(counts: np.ndarray, ids: np.ndarray) -> None:
    # ids within one batch are unique (the sampler deduplicates across hops), so plain fancy-index increment is exact.
    counts[ids] += 1


def topology_presampled(counts: AccessCounts, indptr: np.ndarray, itemsize: int = 4) -> CachePlan:
    """Rank neighbour lists by pre-sampled expansions per byte (CaliEX's topology plan)."""
    cost = np.diff(indptr).astype(np.int64) * itemsize
    score = counts.topology / np.maximum(cost, 1)
    nz = np.flatnonzero((counts.topology > 0) & (cost > 0))
    order = nz[np.argsort(-score[nz], kind="stable")]
    return CachePlan("topology", "presampled", order, cost, score)


def topology_degree(out_degree: np.ndarray, indptr: np.ndarray, itemsize: int = 4) -> CachePlan:
    """Rank neighbour lists by out-degree / in-degree (Ginex's neighbour-cache score)."""
    in_deg = np.diff(indptr).astype(np.int64)
    cost = in_deg * itemsize
    score = out_degree / np.maximum(in_deg, 1)
    nz = np.flatnonzero(in_deg > 0)
    order = nz[np.argsort(-score[nz], kind="stable")]
    return CachePlan("topology", "degree", order, cost, score)


def features_presampled(counts: AccessCounts, row_bytes: int) -> CachePlan:
    """Rank feature rows by pre-sampled gathers (CaliEX's feature plan)."""
    n = counts.features.size
    nz = np.flatnonzero(counts.features > 0)
    order = nz[np.argsort(-counts.features[nz], kind="stable")]
    return CachePlan("features", "presampled", order, np.full(n, row_bytes, np.int64), counts.features)


def features_degree(out_degree: np.ndarray, row_bytes: int) -> CachePlan:
    """Rank feature rows by out-degree (how many lists a node appears in): a sampling-free plan."""
    order = np.argsort(-out_degree.astype(np.int64), kind="stable")
    order = order[out_degree[order] > 0]
    return CachePlan("features", "degree", order, np.full(out_degree.size, row_bytes, np.int64), out_degree)
