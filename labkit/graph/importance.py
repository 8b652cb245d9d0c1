"""AliGraph's importance cache: Imp_k(v) = D_in^k(v) / D_out^k(v), and the plan of what to cache.

A vertex's out-neighbour list is *read* once per time the vertex is reached, which happens in
proportion to its (k-hop) in-degree, and *costs* memory in proportion to its out-degree; the
ratio ranks what is worth keeping on every worker. D^k are k-hop path counts
(D^k(v) = sum of D^{k-1} over v's 1-hop neighbours), a cheap upper bound on distinct k-hop
neighbours. The plan (which vertices: a :class:`labkit.core.cacheplan.CachePlan` ranked by
importance) is data, kept apart from the cache mechanism (:class:`NeighborCache`, a
:class:`~labkit.graph.cache.ListCache`), as Ginex and GNNDrive do.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from labkit.core.cacheplan import CachePlan, CacheStats, by_score
from labkit.core.errors import bad_value, check_range
from labkit.graph.cache import ListCache
from labkit.graph.csr import CSR
from labkit.graph.storage import gather_lists


@njit(parallel=True, nogil=True, cache=True)
def _propagate(indptr, indices, x):
    out = np.zeros(len(indptr) - 1, np.float64)
    for v in prange(len(indptr) - 1):
        s = 0.0
        for p in range(indptr[v], indptr[v + 1]):
            s += x[indices[p]]
        out[v] = s
    return out


def khop_degrees(csr: CSR, csc: CSR, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (D_in^k, D_out^k) as float64 arrays: k-hop in- and out-path counts per vertex."""
    check_range("k", k, 1, 4, integer=True)
    d_in = csc.degree().astype(np.float64)
    d_out = csr.degree().astype(np.float64)
    for _ in range(k - 1):
        d_in = _propagate(csc.indptr, csc.indices, d_in)
        d_out = _propagate(csr.indptr, csr.indices, d_out)
    return d_in, d_out


def importance(csr: CSR, csc: CSR, k: int = 1) -> np.ndarray:
    """Return Imp_k(v) = D_in^k(v) / D_out^k(v); inf where D_out^k = 0 < D_in^k, 0 where both are 0."""
    d_in, d_out = khop_degrees(csr, csc, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        imp = d_in / d_out
    imp[(d_in == 0)] = 0.0
    return imp


def plan_cache(csr: CSR, imp: np.ndarray, threshold: float, *, max_fraction: float = 0.2, k: int = 1) -> CachePlan:
    """Return the plan of vertices with Imp >= threshold and an out-list, at most max_fraction of all (highest Imp first).

    `k` names the hop count the importance was computed with (the policy reads "importance-k").
    """
    check_range("threshold", threshold, 0.0)
    check_range("max_fraction", max_fraction, 0.0, 1.0)
    imp = np.asarray(imp)
    if imp.ndim != 1 or len(imp) != csr.num_nodes:
        shown = f"an array of length {len(imp)}" if imp.ndim == 1 else f"an array of shape {imp.shape}"
        raise bad_value("imp", shown, f"length {csr.num_nodes}, one importance per vertex of csr "
                        "(importance(csr, csc, k) of the same graph)")
    if imp.dtype.kind not in "iuf":
        raise bad_value("imp", f"an array of dtype {imp.dtype}", "an array of numbers (importance(csr, csc, k))")
    deg = csr.degree()
    # A list costs its neighbour ids and its offset in the cache's CSR.
    cost = deg.astype(np.int64) * csr.indices.itemsize + 8
    return by_score(imp, (imp >= threshold) & (deg > 0), limit=int(max_fraction * csr.num_nodes), cost=cost,
                    policy=f"importance-{k}", kind="topology")


@njit(nogil=True, cache=True)
def _place_rows(ids, hit_pos, slot, rows, out):
    for i in hit_pos:
        s = slot[ids[i]]
        for j in range(rows.shape[1]):
            out[i, j] = rows[s, j]


class NeighborCache(ListCache):
    """Out-neighbour lists (and optionally feature rows) of the planned vertices, held locally:
    lookups that hit skip the remote fetch. The list mechanism is :class:`~labkit.graph.cache.ListCache`."""

    def __init__(self, csr: CSR, plan: CachePlan, features: np.ndarray | None = None, *, budget=None) -> None:
        """Hold `plan.vertices`' out-neighbour lists copied from `csr` (see :meth:`build`)."""
        n = csr.num_nodes
        v = plan.vertices  # the cached set in id order: the layout of the cache's CSR
        if v.ndim != 1 or v.dtype.kind not in "iu":
            raise bad_value("plan", f"a CachePlan with vertices of shape {v.shape} and dtype {v.dtype}",
                            "a CachePlan from plan_cache (1-d integer vertex ids)")
        if len(v) and (v.min() < 0 or v.max() >= n):
            bad = int(v.min()) if v.min() < 0 else int(v.max())
            raise bad_value("plan", f"a CachePlan with vertex {bad}",
                            f"a plan of this graph's vertices in [0, {n}) (plan_cache(csr, ...) of the same csr)")
        if features is not None and (np.ndim(features) != 2 or len(features) != n):
            raise bad_value("features", f"array of shape {np.shape(features)}",
                            f"a 2-d array of {n} rows (one per node)")
        row_bytes = 0 if features is None else features[:1].nbytes
        super().__init__(v, csr.indptr, lambda ids: gather_lists(csr.indptr, csr.indices, ids), budget=budget,
                         owner="importance cache", dtype=csr.indices.dtype, extra_bytes=len(v) * row_bytes)
        self.plan = plan
        try:
            self.features = None if features is None else np.ascontiguousarray(features[v])
        except BaseException:
            self.release()
            raise
        self.feature_stats = CacheStats()

    @classmethod
    def build(cls, csr: CSR, plan: CachePlan, features: np.ndarray | None = None, *,
              budget=None) -> "NeighborCache":
        """Return a cache holding `plan.vertices`' out-neighbour lists copied from `csr`.

        With `features`, the same vertices' attribute rows are cached too (the vertices
        reached most often per byte are the same whether one fetches their lists or rows).
        With a :class:`labkit.core.memory.MemoryBudget`, the bytes (slot map, lists, rows) are
        reserved first and BudgetExceeded is raised (nothing allocated) if they do not fit.
        """
        return cls(csr, plan, features, budget=budget)

    @property
    def feature_nbytes(self) -> int:
        return 0 if self.features is None else self.features.nbytes

    def feature_rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (hit mask, rows of the hits) for attribute lookups of `ids`."""
        hit = self.hit_mask(ids)
        h = int(hit.sum())
        self.feature_stats.hits += h
        self.feature_stats.misses += len(ids) - h
        rows = self.features[self.slot[ids[hit]]]
        self.feature_stats.hit_bytes += rows.nbytes
        return hit, rows

    @property
    def num_cached(self) -> int:
        return self.plan.size

    def place_feature_rows(self, ids: np.ndarray, hit_pos: np.ndarray, out: np.ndarray) -> None:
        """Copy the cached attribute row of ids[i] into out[i] for every i in `hit_pos` (and count the lookups)."""
        _place_rows(ids, hit_pos, self.slot, self.features, out)
        self.feature_stats.hits += len(hit_pos)
        self.feature_stats.misses += len(ids) - len(hit_pos)
        self.feature_stats.hit_bytes += len(hit_pos) * out[:1].nbytes
