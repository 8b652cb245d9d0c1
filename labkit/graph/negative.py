"""NEGATIVE sampling: uniform or in-degree weighted, true out-neighbours of the source never returned.

Each draw is rejected while it hits a true out-neighbour, up to ``max_retries`` times. A uniform
draw that still hits one then takes a uniform draw from the source's non-neighbours directly (one
pass over its list), so it fails only when the source links to every candidate. A draw that finds
no negative is -1 and counted in ``capped``: fewer negatives, marked, never a neighbour passed off
as one (as DGL's and PyG's negative samplers return fewer samples rather than false ones).

Store needs: every draw may read any source's whole list and an in-degree draw picks a random
entry of the whole edge array, so negatives are drawn on a CSR in RAM: a :class:`CSR`, or any
:class:`~labkit.graph.storage.GraphStore` whose lists are one in-RAM CSR (``indptr`` and
``indices`` arrays: LocalStore, CSRTopology, CaliEX's MemoryTopology). A partitioned or disk
store has no such arrays; draw negatives on the graph it was built from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.graph.csr import CSR, check_node_ids
from labkit.graph.rng import GOLDEN, mix64, stream_key

STRATEGIES = ("random", "in_degree")


@dataclass
class Negatives:
    """k negatives per source: ``dst[i*k:(i+1)*k]`` for ``src[i]``; -1 where none was found, counted in `capped`."""

    src: np.ndarray
    dst: np.ndarray
    capped: int

    @property
    def found(self) -> np.ndarray:
        """Return the mask of slots that hold a negative (False where ``dst`` is -1)."""
        return self.dst >= 0


@njit(inline="always")
def _is_neighbor(indptr, indices, u, v):
    for p in range(indptr[u], indptr[u + 1]):
        if indices[p] == v:
            return True
    return False


@njit(inline="always")
def _non_neighbor(indptr, indices, u, num_dst, st):
    """Return a uniform draw from [0, num_dst) minus u's out-neighbours, or -1 if u links to all of them."""
    lo, hi = indptr[u], indptr[u + 1]
    nb = np.empty(hi - lo, np.int64)
    c = 0
    for p in range(lo, hi):
        if indices[p] < num_dst:
            nb[c] = indices[p]
            c += 1
    nb = np.sort(nb[:c])
    distinct = 0
    for j in range(c):
        if j == 0 or nb[j] != nb[j - 1]:
            nb[distinct] = nb[j]
            distinct += 1
    free = num_dst - distinct
    if free <= 0:
        return -1
    # The r-th id not in the sorted list: step past every neighbour at or below it.
    v = np.int64((mix64(st) >> np.uint64(32)) * np.uint64(free) >> np.uint64(32))
    for j in range(distinct):
        if nb[j] <= v:
            v += 1
        else:
            break
    return v


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
            found = False
            for r in range(max_retries + 1):
                st += GOLDEN
                x = mix64(st) >> np.uint64(32)
                if by_in_degree:
                    # A uniformly random edge's destination is a node drawn in proportion to in-degree.
                    v = np.int64(indices[np.int64((x * np.uint64(m)) >> np.uint64(32))])
                else:
                    v = np.int64((x * np.uint64(num_nodes)) >> np.uint64(32))
                if not reject or not _is_neighbor(indptr, indices, u, v):
                    found = True
                    break
            if not found:
                st += GOLDEN
                v = -1 if by_in_degree else _non_neighbor(indptr, indices, u, num_nodes, st)
                if v < 0:
                    capped[i] += 1
            out[i * k + j] = v
    return out, capped.sum()


def negative_sample(csr: CSR, src, k: int, *, by: str = "random", reject_neighbors: bool = True,
                    max_retries: int = 10, seed: int = 0, stream: int = 0,
                    num_dst: int | None = None) -> Negatives:
    """Return `k` negative destinations per source in `src`: nodes that are not its out-neighbours.

    `csr` is a CSR or a GraphStore holding one in RAM (see the module's note).
    by="random": uniform over the candidates; by="in_degree": in proportion to in-degree. A draw
    that hits a true out-neighbour of the source is retried up to `max_retries` times. Then a
    uniform draw is taken from the source's non-neighbours directly (exact, O(its degree)); an
    in-degree draw is given up. A slot left without a negative (the source links to every
    candidate, or to every in-degree candidate the retries found) is -1 and counted in ``capped``,
    so the result is never a neighbour passed off as a negative, and never an endless loop.
    ``reject_neighbors=False`` skips the check (non-strict negatives, which may be neighbours).
    `num_dst` bounds uniform draws to ids in [0, num_dst) (default: every node of `csr`), for
    bipartite edges whose destinations are another node type with fewer ids (e.g. items, when
    there are more users).
    """
    if not isinstance(csr, CSR):
        arrays = getattr(csr, "indptr", None), getattr(csr, "indices", None)
        if not all(isinstance(a, np.ndarray) for a in arrays):
            raise bad_value("csr", type(csr).__name__, "a labkit CSR, or a GraphStore holding one in RAM "
                            "(LocalStore, CSRTopology, MemoryTopology)")
        csr = CSR(*arrays)
    check_choice("by", by, STRATEGIES)
    check_range("k", k, 1, integer=True)
    check_range("max_retries", max_retries, 0, 1000, integer=True)
    seed, stream = check_seed(seed), check_seed(stream, "stream")
    src = check_node_ids("src", np.asarray(src), csr.num_nodes).astype(np.int64)
    if num_dst is None:
        num_dst = csr.num_nodes
    else:
        num_dst = int(check_range("num_dst", num_dst, 1, csr.num_nodes, integer=True))
    if by == "in_degree" and csr.num_edges == 0:
        raise check_range("num_edges", 0, 1)
    dst, capped = _negatives(csr.indptr, csr.indices, src, int(k), by == "in_degree", bool(reject_neighbors),
                             int(max_retries), int(num_dst), seed, stream)
    return Negatives(np.repeat(src, k), dst, int(capped))
