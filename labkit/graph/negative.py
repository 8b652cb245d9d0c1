"""NEGATIVE sampling: uniform, or in-degree weighted with true neighbours rejected (retry cap, counted)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from labkit.core.errors import check_choice, check_range, check_seed
from labkit.graph.csr import CSR, check_node_ids
from labkit.graph.rng import GOLDEN, mix64, stream_key

STRATEGIES = ("random", "in_degree")


@dataclass
class Negatives:
    """k negatives per source: ``dst[i*k:(i+1)*k]`` for ``src[i]``; `capped` counts draws that hit the retry cap."""

    src: np.ndarray
    dst: np.ndarray
    capped: int


@njit(inline="always")
def _is_neighbor(indptr, indices, u, v):
    for p in range(indptr[u], indptr[u + 1]):
        if indices[p] == v:
            return True
    return False


@njit(parallel=True, nogil=True, cache=True)
def _negatives(indptr, indices, src, k, by_in_degree, reject, max_retries, num_nodes, seed, stream):
    m = len(indices)
    out = np.empty(len(src) * k, np.int64)
    capped = np.zeros(len(src), np.int64)
    for i in prange(len(src)):
        u = src[i]
        st = stream_key(seed, stream, i)
        for j in range(k):
            v = 0
            for r in range(max_retries + 1):
                st += GOLDEN
                x = mix64(st) >> np.uint64(32)
                if by_in_degree:
                    # A uniformly random edge's destination is a node drawn in proportion to in-degree.
                    v = np.int64(indices[np.int64((x * np.uint64(m)) >> np.uint64(32))])
                else:
                    v = np.int64((x * np.uint64(num_nodes)) >> np.uint64(32))
                if not reject or not _is_neighbor(indptr, indices, u, v):
                    break
                if r == max_retries:
                    capped[i] += 1
            out[i * k + j] = v
    return out, capped.sum()


def negative_sample(csr: CSR, src, k: int, *, by: str = "random", reject_neighbors: bool | None = None,
                    max_retries: int = 10, seed: int = 0, stream: int = 0,
                    num_dst: int | None = None) -> Negatives:
    """Return `k` negative destinations per source in `src`.

    by="random": uniform over all nodes; by="in_degree": in proportion to in-degree. Rejection
    of true out-neighbours of the source (default: on for in_degree, off for random) retries
    up to `max_retries` times; a draw that still hits a neighbour is kept and counted in
    ``capped``, so callers can tell (never silently wrong). `num_dst` bounds uniform draws to
    ids in [0, num_dst) (default: every node of `csr`), for bipartite edges whose destinations
    are another node type with fewer ids (e.g. items, when there are more users).
    """
    check_choice("by", by, STRATEGIES)
    check_range("k", k, 1, integer=True)
    check_range("max_retries", max_retries, 0, integer=True)
    seed, stream = check_seed(seed), check_seed(stream, "stream")
    src = check_node_ids("src", np.asarray(src), csr.num_nodes).astype(np.int64)
    if num_dst is None:
        num_dst = csr.num_nodes
    else:
        num_dst = int(check_range("num_dst", num_dst, 1, csr.num_nodes, integer=True))
    if by == "in_degree" and csr.num_edges == 0:
        raise check_range("num_edges", 0, 1)
    reject = (by == "in_degree") if reject_neighbors is None else bool(reject_neighbors)
    dst, capped = _negatives(csr.indptr, csr.indices, src, k, by == "in_degree", reject, max_retries,
                             int(num_dst), seed, stream)
    return Negatives(np.repeat(src, k), dst, int(capped))
