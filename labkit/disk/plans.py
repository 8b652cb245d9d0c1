"""Cache plans: which neighbour lists and which feature rows stay in RAM. Plans are data.

A plan is the ordered list of nodes to cache, best first, and is cut to whatever capacity the
budget split gives (so one plan serves every split the tuner tries). Plans come from

- **pre-sampling** (CaliEX): run the sampler on a few mini-batches, count how often each node's
  neighbour list is expanded and each node's feature row is gathered; rank lists by the
  disk pages they spare per cached byte, and rows by accesses smoothed with an out-degree
  prior (a few batches are a noisy sample of the warm rows);
- **degree** (Ginex's neighbour cache): rank lists by out-degree / in-degree, i.e. how often a
  list is reached per byte it costs, known without sampling;
- Ginex's feature cache is not a static plan but Belady replacement over a superbatch
  (:class:`labkit.disk.iocache.BeladyFeatureCache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.errors import check_range


def _index(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    """`ids` as int32 when every node id fits (a plan's order lives as long as the plan)."""
    return ids.astype(np.int32) if num_nodes < 2**31 else ids.astype(np.int64, copy=False)


def _cost(cost: np.ndarray) -> np.ndarray:
    """Per-node byte costs as int32 when they fit (cumulative sums over them still run in int64)."""
    return cost.astype(np.int32) if cost.size == 0 or int(cost.max()) < 2**30 else cost


def _row_cost(row_bytes: int, num_nodes: int) -> np.ndarray:
    """Every row costs `row_bytes`: a read-only broadcast, no array over the nodes."""
    return np.broadcast_to(np.int64(row_bytes), (num_nodes,))


@dataclass
class CachePlan:
    """Nodes to cache, best first; `cost` is each one's bytes (row size or list size).

    A plan holds a few arrays over all nodes, outside the memory budget while a system opens,
    so they are kept narrow: `order` in the smallest integer type that indexes the nodes, `cost`
    int32 where every cost fits (a read-only broadcast of one value for feature rows, all of one
    size), `score` float32 (the rank was computed in float64; the score is kept to show it).
    """

    kind: str
    source: str
    order: np.ndarray
    cost: np.ndarray
    score: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def nbytes(self) -> int:
        """Bytes the plan's arrays hold (a broadcast cost holds one value)."""
        return sum(a.itemsize if a.size and 0 in a.strides else a.nbytes
                   for a in (self.order, self.cost, self.score))

    def cut(self, capacity_bytes: int) -> np.ndarray:
        """Return the plan's nodes that fit in `capacity_bytes`, taken in rank order."""
        check_range("capacity_bytes", capacity_bytes, 0)
        if self.order.size == 0:
            return self.order
        k = int(np.searchsorted(np.cumsum(self.cost[self.order]), capacity_bytes, side="right"))
        return self.order[:k]


def caliex_plans_nbytes(num_nodes: int) -> int:
    """The most bytes CaliEX's two plans (:func:`topology_presampled`, :func:`features_presampled`) hold.

    Stated from the dtypes above with every node ranked: order 4 bytes per node (8 past 2**31
    nodes) and score 4 in each plan, and topology's cost counted at 8 (it is 4 unless a list's
    bytes pass 2**30); feature rows' cost is one broadcast value. A system keeps both plans
    while its caches fill, outside the memory budget, so :mod:`labkit.disk.rss` states them.
    """
    check_range("num_nodes", num_nodes, 0, integer=True)
    index = 4 if num_nodes < 2**31 else 8
    return int(num_nodes) * (2 * index + 2 * 4 + 8) + 8


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


def topology_presampled(counts: AccessCounts, indptr: np.ndarray, itemsize: int = 4,
                        page: int = 4096) -> CachePlan:
    """Rank neighbour lists by the disk pages their caching spares per cached byte (CaliEX's topology plan).

    A list smaller than a page shares its page with other lists, so caching it alone rarely
    spares a read: the page is fetched for its neighbours anyway (a 2M-node batch touches most
    pages of the indices file). A list spanning whole pages spares them every time it is
    expanded. Lists are ranked by ``expansions * whole pages / bytes``; lists without a whole page
    of their own follow, by expansions per byte, for budgets large enough to hold them too.
    On the small profile, 16 MiB of cache spared 15 MiB of reads per batch this way against
    6 MiB when ranked by expansions per byte alone.
    """
    cost = np.diff(indptr).astype(np.int64) * itemsize
    whole = cost // page
    c = counts.topology.astype(np.float64)
    big = np.flatnonzero((counts.topology > 0) & (whole > 0))
    small = np.flatnonzero((counts.topology > 0) & (whole == 0) & (cost > 0))
    score = np.zeros(cost.size)
    score[big] = c[big] * whole[big] / cost[big]
    score[small] = c[small] / cost[small]
    order = np.concatenate([big[np.argsort(-score[big], kind="stable")],
                            small[np.argsort(-score[small], kind="stable")]])
    del whole, c, big, small
    return CachePlan("topology", "presampled", _index(order, cost.size), _cost(cost), score.astype(np.float32))


def topology_degree(out_degree: np.ndarray, indptr: np.ndarray, itemsize: int = 4) -> CachePlan:
    """Rank neighbour lists by out-degree / in-degree (Ginex's neighbour-cache score)."""
    in_deg = np.diff(indptr).astype(np.int64)
    cost = in_deg * itemsize
    score = out_degree / np.maximum(in_deg, 1)
    nz = np.flatnonzero(in_deg > 0)
    order = nz[np.argsort(-score[nz], kind="stable")]
    return CachePlan("topology", "degree", _index(order, cost.size), _cost(cost), score.astype(np.float32))


def features_presampled(counts: AccessCounts, row_bytes: int, prior: np.ndarray | None = None,
                        prior_batches: float | None = None) -> CachePlan:
    """Rank feature rows by pre-sampled gathers (CaliEX's feature plan), smoothed by a prior.

    A few pre-sampled mini-batches see each warm row once or not at all, so their counts alone
    rank the tail of the cache at random. With `prior` (e.g. out-degree: how many neighbour lists
    a node is in) the score is the posterior estimate of accesses per batch,
    ``(count + w * q) / (batches + w)``, where ``q`` is the prior scaled to the pre-sampled rows
    per batch and ``w`` (`prior_batches`, default 64x the pre-sampled batches) is how many
    batches the prior is worth. On the small profile this raised the held-out hit rate of a
    280k-row cache from 0.75 (counts alone) to 0.82 and cut the pages its misses touch by 28%.
    Measured again with a 242k-row cache, 4 pre-sampled and 12 held-out batches: w = 4x gave a
    hit rate of 0.760, w = 16x 0.789, w = 64x 0.793, the same as the prior alone: on this R-MAT
    graph a handful of batches adds little to out-degree, so the prior gets the larger weight.
    """
    n = counts.features.size
    score = counts.features.astype(np.float64)
    if prior is not None:
        prior = np.asarray(prior)
        if prior.shape != (n,):
            raise ValueError(f"prior has shape {prior.shape}; expected ({n},), one value per node")
        b = max(1, counts.batches)
        w = 64.0 * b if prior_batches is None else float(prior_batches)
        per_batch = counts.features.sum() / b
        total = float(prior.sum(dtype=np.float64))
        q = prior.astype(np.float64)  # a copy: scaled in place, one temporary over the nodes
        if total > 0:
            q *= per_batch / total
        q *= w  # the same operations, in the same order, as (count + w * q) / (b + w)
        score += q
        del q
        score /= b + w
    nz = np.flatnonzero(score > 0)
    order = nz[np.argsort(-score[nz], kind="stable")]
    return CachePlan("features", "presampled" if prior is None else "presampled+prior", _index(order, n),
                     _row_cost(row_bytes, n), score.astype(np.float32))


def features_degree(out_degree: np.ndarray, row_bytes: int) -> CachePlan:
    """Rank feature rows by out-degree (how many lists a node appears in): a sampling-free plan."""
    order = np.argsort(-out_degree.astype(np.int64), kind="stable")
    order = order[out_degree[order] > 0]
    return CachePlan("features", "degree", _index(order, out_degree.size), _row_cost(row_bytes, out_degree.size),
                     out_degree)
