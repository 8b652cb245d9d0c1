"""Vertex partitioning: hash (as graph-learn), LDG and Fennel streaming (locality-aware), with edge cut and balance.

A partitioning is an ``owner`` array (owner[v] = partition serving v's out-edges and attributes).
:func:`partition_quality` reports the edge cut (fraction of edges whose endpoints live on
different partitions, i.e. that need a remote hop) and balance (largest partition / mean).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.graph.csr import CSR

METHODS = ("hash", "ldg", "fennel")


@dataclass
class Partitioning:
    """Who owns each vertex, how it was decided, and what it costs."""

    owner: np.ndarray
    num_parts: int
    method: str
    edge_cut: float
    balance: float
    edge_balance: float

    def members(self, part: int) -> np.ndarray:
        """Return the sorted global ids owned by `part`."""
        check_range("part", part, 0, self.num_parts - 1, integer=True)
        return np.flatnonzero(self.owner == part)


def _check_csc(csr: CSR, csc: CSR | None) -> CSR:
    """Return `csc` (or csr's reverse when None) if it has csr's nodes and edges, else raise (O(1))."""
    if csc is None:
        return csr.reverse()
    if csc.num_nodes != csr.num_nodes or csc.num_edges != csr.num_edges or len(csc.indices) < csc.num_edges:
        raise bad_value("csc", f"a CSC of {csc.num_nodes} nodes and {csc.num_edges} edges",
                        f"the in-edges of csr ({csr.num_nodes} nodes, {csr.num_edges} edges), e.g. csr.reverse()")
    return csc


def _check_num_parts(num_parts, num_nodes: int) -> int:
    """Return `num_parts` as an int if it is a whole number in [1, num_nodes] (1 for an empty graph), else raise."""
    num_parts = int(check_range("num_parts", num_parts, 1, integer=True))
    top = max(1, int(num_nodes))
    if num_parts > top:
        raise bad_value("num_parts", num_parts, f"an integer in [1, {top}]: at most one part per vertex "
                        f"(the graph has {int(num_nodes)})")
    return num_parts


def hash_partition(num_nodes: int, num_parts: int) -> np.ndarray:
    """Return owner[v] = v mod num_parts (graph-learn's hash partitioning of integer ids); num_parts <= num_nodes."""
    num_nodes = int(check_range("num_nodes", num_nodes, 0, integer=True))
    num_parts = _check_num_parts(num_parts, num_nodes)
    return (np.arange(num_nodes, dtype=np.int64) % num_parts).astype(np.int32)


@njit(nogil=True, cache=True)
def _count_placed(v, out_ptr, out_idx, in_ptr, in_idx, owner, score):
    """score[p] = how many of v's already-placed (out- and in-) neighbours partition p holds."""
    score[:] = 0.0
    for p in range(out_ptr[v], out_ptr[v + 1]):
        o = owner[out_idx[p]]
        if o >= 0:
            score[o] += 1.0
    for p in range(in_ptr[v], in_ptr[v + 1]):
        o = owner[in_idx[p]]
        if o >= 0:
            score[o] += 1.0


@njit(nogil=True, cache=True)
def _stream_partition(out_ptr, out_idx, in_ptr, in_idx, order, num_parts, capacity, fennel, alpha, gamma):
    """One pass over `order`: each vertex goes to the open partition with the best score for its
    already-placed neighbours. LDG: placed * (1 - |P|/capacity); Fennel: placed minus the marginal
    cost of growing P, alpha * gamma * |P|^(gamma-1). Ties go to the least loaded partition."""
    n = len(out_ptr) - 1
    owner = np.full(n, -1, np.int32)
    size = np.zeros(num_parts, np.int64)
    score = np.zeros(num_parts, np.float64)
    for v in order:
        _count_placed(v, out_ptr, out_idx, in_ptr, in_idx, owner, score)
        best = -1
        best_s = -np.inf
        for i in range(num_parts):
            if size[i] >= capacity:
                continue
            if fennel:
                s = score[i] - alpha * gamma * size[i] ** (gamma - 1.0)
            else:
                s = score[i] * (1.0 - size[i] / capacity)
            if s > best_s or (s == best_s and size[i] < size[best]):
                best, best_s = i, s
        owner[v] = best
        size[best] += 1
    return owner


def ldg_partition(csr: CSR, num_parts: int, *, csc: CSR | None = None, slack: float = 1.05,
                  seed: int = 0) -> np.ndarray:
    """Return owners from Linear Deterministic Greedy streaming partitioning (Stanton & Kliot 2012).

    Vertices arrive in a seeded random order; each goes to the partition holding most of its
    already-placed (in- and out-) neighbours, discounted by how full it is; capacity is
    ``slack * n / num_parts``.
    """
    num_parts = _check_num_parts(num_parts, csr.num_nodes)
    check_range("slack", slack, 1.0)
    seed = check_seed(seed)
    csc = _check_csc(csr, csc)
    n = csr.num_nodes
    order = np.random.default_rng(seed).permutation(n)
    capacity = max(1.0, np.ceil(slack * n / num_parts))
    return _stream_partition(csr.indptr, csr.indices, csc.indptr, csc.indices, order, num_parts, capacity,
                             False, 0.0, 1.0)


def fennel_partition(csr: CSR, num_parts: int, *, csc: CSR | None = None, gamma: float = 1.5,
                     slack: float = 1.1, seed: int = 0) -> np.ndarray:
    """Return owners from Fennel streaming partitioning (Tsourakakis et al., WSDM 2014).

    Each arriving vertex goes to the partition maximising (placed neighbours there) minus
    alpha * gamma * |P|^(gamma - 1), with alpha = sqrt(k) * m / n^gamma (the paper's choice, which
    balances cut against load), under a hard capacity of ``slack * n / num_parts``.
    """
    num_parts = _check_num_parts(num_parts, csr.num_nodes)
    check_range("gamma", gamma, 1.0)
    check_range("slack", slack, 1.0)
    seed = check_seed(seed)
    csc = _check_csc(csr, csc)
    n, m = csr.num_nodes, csr.num_edges
    alpha = np.sqrt(num_parts) * m / max(1.0, float(n)) ** gamma
    order = np.random.default_rng(seed).permutation(n)
    capacity = max(1.0, np.ceil(slack * n / num_parts))
    return _stream_partition(csr.indptr, csr.indices, csc.indptr, csc.indices, order, num_parts, capacity,
                             True, float(alpha), float(gamma))


@njit(nogil=True, cache=True)
def _cut(indptr, indices, owner):
    cut = 0
    for v in range(len(indptr) - 1):
        o = owner[v]
        for p in range(indptr[v], indptr[v + 1]):
            if owner[indices[p]] != o:
                cut += 1
    return cut


def partition_quality(csr: CSR, owner: np.ndarray, num_parts: int) -> dict:
    """Return {edge_cut, balance, edge_balance}: cut fraction, max/mean vertices, max/mean out-edges."""
    owner = np.asarray(owner)
    num_parts = int(check_range("num_parts", num_parts, 1, integer=True))
    if owner.ndim != 1 or len(owner) != csr.num_nodes:
        raise bad_value("owner", f"array of shape {owner.shape}", f"one owner per vertex of csr ({csr.num_nodes})")
    if owner.dtype.kind not in "iu":
        raise bad_value("owner", owner.dtype, "an integer array of partition ids")
    if len(owner) and (owner.min() < 0 or owner.max() >= num_parts):
        bad = int(owner.min() if owner.min() < 0 else owner.max())
        raise bad_value("owner", f"an owner id {bad}", f"partition ids in [0, {num_parts})")
    cut = _cut(csr.indptr, csr.indices, owner) / max(1, csr.num_edges)
    sizes = np.bincount(owner, minlength=num_parts)
    edges = np.bincount(owner, weights=csr.degree(), minlength=num_parts)
    return {"edge_cut": float(cut), "balance": float(sizes.max() / max(sizes.mean(), 1e-12)),
            "edge_balance": float(edges.max() / max(edges.mean(), 1e-12))}


def partition(csr: CSR, num_parts: int, method: str = "hash", *, csc: CSR | None = None, seed: int = 0) -> Partitioning:
    """Return a Partitioning of `csr`'s vertices into `num_parts` by `method` ("hash", "ldg" or "fennel").

    `num_parts` is at most the number of vertices (a part with no vertex serves nothing).
    """
    check_choice("method", method, METHODS)
    num_parts = _check_num_parts(num_parts, csr.num_nodes)
    seed = check_seed(seed)  # checked for "hash" too, which does not use it
    if method == "hash":
        owner = hash_partition(csr.num_nodes, num_parts)
    elif method == "ldg":
        owner = ldg_partition(csr, num_parts, csc=csc, seed=seed)
    else:
        owner = fennel_partition(csr, num_parts, csc=csc, seed=seed)
    q = partition_quality(csr, owner, num_parts)
    return Partitioning(owner, num_parts, method, q["edge_cut"], q["balance"], q["edge_balance"])
