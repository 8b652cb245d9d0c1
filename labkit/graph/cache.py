"""The neighbour-list cache mechanism: which lookups hit, and the cached lists copied out.

One mechanism for every store: AliGraph's importance cache in front of a partitioned store
(:class:`labkit.graph.importance.NeighborCache`, which adds the plan and feature rows) and
CaliEX's topology cache in front of the indices file (:class:`labkit.disk.store.DiskTopology`).
*Which* nodes are cached is a :class:`~labkit.core.cacheplan.CachePlan`'s business; the cache
holds a node -> slot map and a compact CSR of the cached lists, and counts its lookups in a
:class:`~labkit.core.cacheplan.CacheStats`.

Bytes: the slot map (4 bytes a node, 8 past 2^31 nodes), the local offsets (8 bytes a list, plus
one) and the entries are reserved from a :class:`~labkit.core.memory.MemoryBudget` before
anything is allocated.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from labkit.core.cacheplan import CacheStats
from labkit.graph.storage import gather_lists


@njit(nogil=True, cache=True)
def _split(ids, slot):
    hit = np.empty(len(ids), np.bool_)
    for i in range(len(ids)):
        hit[i] = slot[ids[i]] >= 0
    return hit


@njit(nogil=True, cache=True)
def _cached_lengths(ids, hit_pos, slot, cptr, counts):
    for i in hit_pos:
        s = slot[ids[i]]
        counts[i] = cptr[s + 1] - cptr[s]


@njit(nogil=True, cache=True)
def _place_cached(ids, hit_pos, slot, cptr, cidx, out_ptr, out):
    n = 0
    for i in hit_pos:
        s = slot[ids[i]]
        lo, q = cptr[s], out_ptr[i]
        d = cptr[s + 1] - lo
        for j in range(d):
            out[q + j] = cidx[lo + j]
        n += d
    return n


@njit(nogil=True, cache=True)
def _assemble(nodes, slot, cptr, cidx, miss_ptr, miss_idx, out_ptr, out_idx):
    """Write each node's list (cached, or the next list of the miss buffer) into out_ptr/out_idx."""
    m = 0
    for k in range(nodes.shape[0]):
        s = slot[nodes[k]]
        p = out_ptr[k]
        if s >= 0:
            ln = cptr[s + 1] - cptr[s]
            out_idx[p:p + ln] = cidx[cptr[s]:cptr[s + 1]]
        else:
            ln = miss_ptr[m + 1] - miss_ptr[m]
            out_idx[p:p + ln] = miss_idx[miss_ptr[m]:miss_ptr[m + 1]]
            m += 1


class ListCache:
    """Neighbour lists of chosen nodes held in RAM, found through a node -> slot map.

    Counts go to :attr:`stats`: lookups (nodes, or entries for :meth:`pick`) that hit or
    missed, and the bytes the hits served (entries plus 8 bytes of offset per list).
    """

    def __init__(self, nodes: np.ndarray, indptr: np.ndarray, source, *, budget=None,
                 owner: str = "list cache", dtype=np.int32, extra_bytes: int = 0) -> None:
        """Hold the lists of `nodes` (slot k is nodes[k]) of a graph with offsets `indptr`.

        `source(nodes) -> (ptr, idx)` reads the lists once (a CSR in RAM, a file); `dtype` is its
        entries' type. With a `budget`, the cache's bytes plus `extra_bytes` (what a subclass
        holds besides) are reserved under `owner` first: BudgetExceeded, nothing allocated, if
        they do not fit.
        """
        nodes = np.asarray(nodes, np.int64)
        n = indptr.size - 1
        slot_dtype = np.int32 if n < 2**31 else np.int64
        entries = int((indptr[nodes + 1] - indptr[nodes]).sum(dtype=np.int64)) if nodes.size else 0
        need = n * np.dtype(slot_dtype).itemsize + (nodes.size + 1) * 8 + entries * np.dtype(dtype).itemsize
        self.reservation = None if budget is None else budget.reserve(owner, need + int(extra_bytes))
        try:
            # `nodes` is not kept: it is often a view of a whole plan's order, which would then stay
            # alive outside the budget (8 bytes per node it ranks); the slot map says which lists are held.
            self.slot = np.full(n, -1, slot_dtype)
            self.slot[nodes] = np.arange(nodes.size, dtype=slot_dtype)
            if nodes.size:
                self.ptr, self.idx = source(nodes)
            else:
                self.ptr, self.idx = np.zeros(1, np.int64), np.zeros(0, dtype)
        except BaseException:
            self.release()  # no phantom bytes left behind for a retry on the same budget
            raise
        self.stats = CacheStats()
        self._lock = threading.Lock()  # several sampler threads may share one store's cache

    @property
    def nbytes(self) -> int:
        """Bytes of cached lists and their offsets (the slot map is per-node metadata)."""
        return self.ptr.nbytes + self.idx.nbytes

    def _count(self, hits: int, misses: int, hit_bytes: int = 0) -> None:
        with self._lock:
            self.stats.hits += hits
            self.stats.misses += misses
            self.stats.hit_bytes += hit_bytes

    def hit_mask(self, ids: np.ndarray) -> np.ndarray:
        """Return a bool mask of which `ids` are cached (not counted)."""
        return _split(ids, self.slot)

    def split(self, ids: np.ndarray) -> np.ndarray:
        """Return a bool mask of which `ids` hit (and count the lookups and hits)."""
        hit = _split(ids, self.slot)
        h = int(np.count_nonzero(hit))
        self._count(h, len(ids) - h)
        return hit

    def list_lengths(self, ids: np.ndarray, hit_pos: np.ndarray, counts: np.ndarray) -> None:
        """Write the cached list length of ids[i] into counts[i] for every i in `hit_pos` (all must hit)."""
        _cached_lengths(ids, hit_pos, self.slot, self.ptr, counts)

    def place_lists(self, ids: np.ndarray, hit_pos: np.ndarray, out_ptr: np.ndarray, out: np.ndarray) -> None:
        """Copy the cached list of ids[i] into out[out_ptr[i]:out_ptr[i + 1]] for every i in `hit_pos`."""
        n = _place_cached(ids, hit_pos, self.slot, self.ptr, self.idx, out_ptr, out)
        self._count(0, 0, n * self.idx.itemsize + 8 * len(hit_pos))

    def assemble(self, ids: np.ndarray, miss_ptr: np.ndarray, miss_idx: np.ndarray, out_ptr: np.ndarray,
                 out: np.ndarray) -> None:
        """Write every list of `ids` into out[out_ptr[i]:out_ptr[i + 1]]: cached ones from the cache,
        the others, in order, from the miss buffer (`miss_ptr`, `miss_idx`: the misses' lists packed)."""
        _assemble(ids, self.slot, self.ptr, self.idx, miss_ptr, miss_idx, out_ptr, out)
        hits = len(ids) - (len(miss_ptr) - 1)
        self._count(0, 0, (len(out) - len(miss_idx)) * self.idx.itemsize + 8 * hits)

    def pick(self, ids: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> np.ndarray:
        """For entry k at `offsets[k]` in the list of `ids[k]`: write it into out[k] if cached; return the hit mask.

        Counted per entry (a sampler reading single entries looks each one up).
        """
        s = self.slot[ids]
        hit = s >= 0
        out[hit] = self.idx[self.ptr[s[hit]] + offsets[hit]]
        h = int(np.count_nonzero(hit))
        self._count(h, len(ids) - h, h * self.idx.itemsize)
        return hit

    def lists(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, nbrs) for cached `ids` (all must hit)."""
        ptr, out = gather_lists(self.ptr, self.idx, self.slot[ids].astype(np.int64))
        self._count(0, 0, out.nbytes + 8 * len(ids))
        return ptr, out

    def release(self) -> None:
        """Give the bytes back to the budget and drop the arrays (idempotent)."""
        if self.reservation is not None:
            self.reservation.release()
            self.reservation = None
        self.slot = self.ptr = self.idx = None
