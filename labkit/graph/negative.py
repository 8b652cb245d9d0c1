"""NEGATIVE sampling: uniform or in-degree weighted, true out-neighbours of the source never returned.

Each draw is rejected while it hits a true out-neighbour, up to ``max_retries`` times. A uniform
draw that still hits one then takes a uniform draw from the source's non-neighbours directly (one
pass over its list), so it fails only when the source links to every candidate. A draw that finds
no negative is -1 and counted in ``capped``: fewer negatives, marked, never a neighbour passed off
as one (as DGL's and PyG's negative samplers return fewer samples rather than false ones).

Store needs: every draw may read any source's whole list, and an in-degree draw picks a random
entry of the whole edge array. On a CSR in RAM (a :class:`CSR`, or a store holding one:
``indptr`` and ``indices`` arrays) the kernel reads both in place. On any other
:class:`~labkit.graph.storage.GraphStore` (partitioned, on disk) the sources' lists come in one
``neighbors`` read per call; in-degree draws also read their sampled edges' destinations through
``entries`` (one read for the first k + 2 draws of every source, another for the few sources
that reject more). Each source's draws come from its own stream, not from where its list lives,
so every store gives the same negatives for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from labkit.core.errors import bad_value, check_choice, check_range, check_seed
from labkit.graph.csr import CSR, check_node_ids
from labkit.graph.rng import GOLDEN, mix64, stream_key
from labkit.graph.storage import GraphStore, degree_ptr

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


@njit(inline="always")
def _source_negatives(indptr, indices, u, st, k, by_in_degree, reject, max_retries, num_nodes, num_edges,
                      drawn, i, from_table, out):
    """Write source i's k negatives into out[i*k:(i+1)*k] (its lists: row u); return (capped, short).

    In-degree draws read the whole edge array `indices` (num_edges entries), or with `from_table`
    (a constant, so the unused branch compiles away) the t-th draw's destination from drawn[i, t];
    a source needing more draws than `drawn` holds returns short=True (to be drawn again).
    """
    capped = 0
    t = 0
    for j in range(k):
        v = 0
        found = False
        for r in range(max_retries + 1):
            st += GOLDEN
            t += 1
            x = mix64(st) >> np.uint64(32)
            if by_in_degree:
                # A uniformly random edge's destination is a node drawn in proportion to in-degree.
                if not from_table:
                    v = np.int64(indices[np.int64((x * np.uint64(num_edges)) >> np.uint64(32))])
                elif t <= drawn.shape[1]:
                    v = drawn[i, t - 1]
                else:
                    return capped, True
            else:
                v = np.int64((x * np.uint64(num_nodes)) >> np.uint64(32))
            if not reject or not _is_neighbor(indptr, indices, u, v):
                found = True
                break
        if not found:
            st += GOLDEN
            t += 1
            v = -1 if by_in_degree else _non_neighbor(indptr, indices, u, num_nodes, st)
            if v < 0:
                capped += 1
        out[i * k + j] = v
    return capped, False


@njit(parallel=True, nogil=True, cache=True)
def _negatives(indptr, indices, src, k, by_in_degree, reject, max_retries, num_nodes, seed, stream):
    """Negatives of `src` on a CSR in RAM: draws from stream_key(seed, stream, i) for the i-th source."""
    out = np.empty(len(src) * k, np.int64)
    capped = np.zeros(len(src), np.int64)
    none = np.zeros((0, 0), np.int64)
    for i in prange(len(src)):
        capped[i], _ = _source_negatives(indptr, indices, src[i], stream_key(seed, stream, i), k, by_in_degree,
                                         reject, max_retries, num_nodes, len(indices), none, i, False, out)
    return out, capped.sum()


@njit(parallel=True, nogil=True, cache=True)
def _drawn_negatives(ptr, nbrs, rows, keys, k, by_in_degree, reject, max_retries, num_nodes, seed, stream,
                     num_edges, drawn):
    """Negatives of sources whose lists are rows `rows` of (ptr, nbrs) and whose draws are keys `keys`."""
    out = np.empty(len(rows) * k, np.int64)
    capped = np.zeros(len(rows), np.int64)
    short = np.zeros(len(rows), np.bool_)
    for i in prange(len(rows)):
        capped[i], short[i] = _source_negatives(ptr, nbrs, rows[i], stream_key(seed, stream, keys[i]), k,
                                                by_in_degree, reject, max_retries, num_nodes, num_edges, drawn,
                                                i, True, out)
    return out, capped, short


@njit(parallel=True, nogil=True, cache=True)
def _edge_draws(keys, seed, stream, width, num_edges):
    """Return the edge positions of each source's first `width` draws (as _negatives' in-degree draws)."""
    pos = np.empty((len(keys), width), np.int64)
    for i in prange(len(keys)):
        st = stream_key(seed, stream, keys[i])
        for t in range(width):
            st += GOLDEN
            x = mix64(st) >> np.uint64(32)
            pos[i, t] = np.int64((x * np.uint64(num_edges)) >> np.uint64(32))
    return pos


def _store_offsets(store) -> np.ndarray:
    """The store's global list offsets: its own `indptr` when it holds one, else from every degree."""
    indptr = getattr(store, "indptr", None)
    if isinstance(indptr, np.ndarray):
        return indptr
    ptr = np.zeros(store.num_nodes + 1, np.int64)
    np.cumsum(store.degree(np.arange(store.num_nodes)), out=ptr[1:])
    return ptr


def _edge_destinations(store, indptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Return the entries at global edge positions `pos` of `store`, in one ``entries`` read."""
    flat = pos.reshape(-1)
    row = np.searchsorted(indptr, flat, side="right") - 1
    ids, inv = np.unique(row, return_inverse=True)
    ptr = degree_ptr(store.degree(ids))
    local = ptr[inv] + (flat - indptr[row].astype(np.int64))
    return np.asarray(store.entries(ids, ptr, local), np.int64).reshape(pos.shape)


def _store_negatives(store, src, k, by_in_degree, reject, max_retries, num_dst, seed, stream):
    """Negatives of `src` over a store: the sources' lists in one ``neighbors`` read, as in RAM."""
    uniq, rows = np.unique(src, return_inverse=True)
    ptr, nbrs = store.neighbors(uniq)
    rows = rows.astype(np.int64).reshape(-1)
    keys = np.arange(len(src), dtype=np.int64)
    no_table = np.zeros((len(src), 0), np.int64)
    if not by_in_degree:
        dst, capped, _ = _drawn_negatives(ptr, nbrs, rows, keys, k, False, reject, max_retries, num_dst, seed,
                                          stream, 0, no_table)
        return dst, int(capped.sum())
    indptr = _store_offsets(store)
    m = int(indptr[-1])
    if m == 0:
        raise check_range("num_edges", 0, 1)
    dst = np.empty(len(src) * k, np.int64)
    capped = np.zeros(len(src), np.int64)
    # Most slots take their first draw, so k + 2 draws a source are read at once; a source that
    # rejects more is drawn again with twice the draws (the same stream: the same result).
    width, todo = min(k + 2, k * (max_retries + 2)), keys
    while todo.size:
        drawn = _edge_destinations(store, indptr, _edge_draws(todo, seed, stream, width, m))
        d, c, short = _drawn_negatives(ptr, nbrs, rows[todo], todo, k, True, reject, max_retries, num_dst, seed,
                                       stream, m, drawn)
        done = ~short
        slots = (todo[done][:, None] * k + np.arange(k)).reshape(-1)
        dst[slots] = d.reshape(-1, k)[done].reshape(-1)
        capped[todo[done]] = c[done]
        todo, width = todo[short], min(2 * width, k * (max_retries + 2))
    return dst, int(capped.sum())


def negative_sample(csr, src, k: int, *, by: str = "random", reject_neighbors: bool = True,
                    max_retries: int = 10, seed: int = 0, stream: int = 0,
                    num_dst: int | None = None) -> Negatives:
    """Return `k` negative destinations per source in `src`: nodes that are not its out-neighbours.

    `csr` is a CSR or any GraphStore (see the module's note: the same negatives from every one).
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
    store = None
    if not isinstance(csr, CSR):
        arrays = getattr(csr, "indptr", None), getattr(csr, "indices", None)
        if all(isinstance(a, np.ndarray) for a in arrays):
            csr = CSR(*arrays)
        elif isinstance(csr, GraphStore):
            store = csr
        else:
            raise bad_value("csr", type(csr).__name__, "a labkit CSR or a GraphStore (labkit.graph.storage)")
    num_nodes = csr.num_nodes
    check_choice("by", by, STRATEGIES)
    check_range("k", k, 1, integer=True)
    check_range("max_retries", max_retries, 0, 1000, integer=True)
    seed, stream = check_seed(seed), check_seed(stream, "stream")
    src = check_node_ids("src", np.asarray(src), num_nodes).astype(np.int64)
    if num_dst is None:
        num_dst = num_nodes
    else:
        num_dst = int(check_range("num_dst", num_dst, 1, num_nodes, integer=True))
    if store is not None:
        dst, capped = _store_negatives(store, src, int(k), by == "in_degree", bool(reject_neighbors),
                                       int(max_retries), int(num_dst), seed, stream)
        return Negatives(np.repeat(src, k), dst, capped)
    if by == "in_degree" and csr.num_edges == 0:
        raise check_range("num_edges", 0, 1)
    dst, capped = _negatives(csr.indptr, csr.indices, src, int(k), by == "in_degree", bool(reject_neighbors),
                             int(max_retries), int(num_dst), seed, stream)
    return Negatives(np.repeat(src, k), dst, int(capped))
