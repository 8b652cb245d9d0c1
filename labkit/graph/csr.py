"""CSR (out-edges) and CSC (in-edges) topology, and the fast parallel builder that makes them.

The builder is a counting sort by source, made cache-friendly by buckets (:func:`build_csr`).
Sources are grouped into buckets of 2**k consecutive rows (about :data:`BUCKET_EDGES` edges each).
Pass 1 streams every edge into its bucket's slice of ``indices``; pass 2 takes one bucket at a
time, counts its rows into ``indptr`` and moves its edges into row order, then sorts each row, all
while the slice is in cache. A one-pass scatter writes each edge at a random place in all of
``indices`` and reads a random cursor: both miss the cache and the TLB per edge (on a 2-core VM
it took 2.0 of a 3.2 s build of 34M edges; the bucketed build takes 1.2 s in all). The kernels
are numba and release the GIL; thread t takes slice t of the edges with its own cursors, so no two
threads write the same slot and rows keep input order (a stable sort).

The chunked builder (:func:`build_csr_chunked`), for an edge list larger than memory, makes two
streaming passes over the chunks while only the CSR itself (and one chunk) is held: it counts
each row's edges, then writes them at their rows' cursors. Each chunk is partitioned by bucket
first, so those counts and writes stay within one bucket's rows at a time.

Topology is kept apart from attributes (as in AliGraph): a :class:`CSR` holds ``indptr``,
``indices`` and, when asked, ``eid`` (the input position of each stored edge) through which
edge weights and attributes stored elsewhere are looked up.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Iterable

import numba
import numpy as np
from numba import njit, prange

from labkit.core.errors import BadInput, bad_value, check_range


@dataclass
class CSR:
    """Compressed sparse rows: row v's neighbours are ``indices[indptr[v]:indptr[v+1]]``.

    Used for both directions: built from (src, dst) it holds out-edges (CSR); built from
    (dst, src) it holds in-edges (CSC). ``eid[p]`` is the input edge id of stored edge p (None
    when not tracked); ``weights[p]`` its weight (None when unweighted).
    """

    indptr: np.ndarray
    indices: np.ndarray
    eid: np.ndarray | None = None
    weights: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_edges(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        """Bytes held by the topology arrays (indptr, indices, eid and weights when present)."""
        return sum(a.nbytes for a in (self.indptr, self.indices, self.eid, self.weights) if a is not None)

    def degree(self) -> np.ndarray:
        """Return every row's degree (int64)."""
        return np.diff(self.indptr)

    def neighbors(self, v: int) -> np.ndarray:
        """Return row `v`'s neighbour ids (a view)."""
        check_node_ids("v", np.asarray([v]), self.num_nodes)
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def to_scipy(self):
        """Return the topology as a scipy.sparse.csr_matrix (weights, or ones, as data)."""
        import scipy.sparse as sp
        data = self.weights if self.weights is not None else np.ones(self.num_edges, np.float32)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.num_nodes, self.num_nodes))

    def reverse(self) -> "CSR":
        """Return the transpose (CSR <-> CSC), carrying eid and weights along."""
        src = np.repeat(np.arange(self.num_nodes, dtype=self.indices.dtype), np.diff(self.indptr))
        out = build_csr(self.indices, src, self.num_nodes, return_eid=True)
        pos = out.eid  # positions in self
        out.eid = self.eid[pos] if self.eid is not None else pos
        if self.weights is not None:
            out.weights = self.weights[pos]
        return out


def check_node_ids(arg: str, ids: np.ndarray, num_nodes: int, what: str = "node ids") -> np.ndarray:
    """Return `ids` if every id is an integer in [0, num_nodes), else raise naming the first bad one.

    No ids (``[]``, which NumPy reads as float64) are an empty int64 array.
    """
    ids = np.asarray(ids)
    if ids.size == 0 and ids.dtype.kind not in "iu":
        return np.empty(ids.shape, np.int64)
    if ids.dtype.kind not in "iu":
        raise bad_value(arg, ids.dtype, f"an integer array of {what}")
    if len(ids):
        lo, hi = ids.min(), ids.max()
        if lo < 0 or hi >= num_nodes:
            bad = int(lo) if lo < 0 else int(hi)
            pos = int(np.flatnonzero(ids == bad)[0])
            raise BadInput(f"{arg}[{pos}]={bad} is not accepted; expected {what} in [0, {num_nodes})")
    return ids


#: What :func:`check_weights` accepts, in its messages.
WEIGHTS_ACCEPTED = "finite numbers >= 0"


def check_weights(weights, arg: str = "weights", offset: int = 0) -> np.ndarray:
    """Return `weights` as a numeric array if every entry is a finite number >= 0, else raise naming the first bad one.

    Integer and float arrays keep their dtype (an object array of real numbers becomes float64);
    strings, booleans, complex numbers, None, NaN, infinities and negatives are refused, as
    ``weights[1]=nan is not accepted; expected finite numbers >= 0`` (positions counted from
    `offset`, for a chunk of a stream). Two vectorised reductions when the weights are good.
    """
    w = np.asarray(weights)
    if w.dtype.kind == "O":
        flat = w.ravel()
        real = np.fromiter((isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in flat),
                           bool, len(flat))
        if not real.all():
            pos = int(np.argmin(real))
            raise bad_value(f"{arg}[{offset + pos}]", flat[pos], WEIGHTS_ACCEPTED)
        w = w.astype(np.float64)
    elif w.dtype.kind not in "iuf":
        if w.size == 0:
            return w.astype(np.float64)
        raise bad_value(f"{arg}[{offset}]", w.ravel()[0], WEIGHTS_ACCEPTED)
    if w.size and w.dtype.kind != "u":
        lo, hi = w.min(), w.max()
        if not (lo >= 0 and hi < np.inf):  # NaN fails both comparisons
            flat = w.ravel()
            bad = ~(flat >= 0) | (flat == np.inf)
            pos = int(np.argmax(bad))
            raise bad_value(f"{arg}[{offset + pos}]", flat[pos], WEIGHTS_ACCEPTED)
    return w


def check_num_nodes(num_nodes, lo: int = 0, arg: str = "num_nodes") -> int:
    """Return `num_nodes` as an int if it is a whole number >= `lo` (Python or NumPy int), else raise."""
    return int(check_range(arg, num_nodes, lo, integer=True))


def _threads() -> int:
    return max(1, numba.get_num_threads())


#: Below this many bytes of working arrays a build is not checked against the machine's memory.
_CHECK_RAM_FROM = 1 << 30


#: Per-node int64 arrays a build holds at once: indptr, then a write cursor (chunked) or the rows'
#: distinct counts (dedup), then the deduplicated indptr.
_PER_NODE_ARRAYS = 3


def build_bytes(num_nodes: int) -> int:
    """Return the bytes the builder holds per node count (:data:`_PER_NODE_ARRAYS` int64 arrays)."""
    return _PER_NODE_ARRAYS * 8 * (int(num_nodes) + 1)


def max_buildable_nodes() -> int:
    """Return the largest node count whose build arrays (:func:`build_bytes`) fit in this machine's RAM."""
    from labkit.core.machine import memory_bytes
    return memory_bytes() // (_PER_NODE_ARRAYS * 8) - 1


def _too_big(num_nodes: int) -> str | None:
    """Return why `num_nodes` cannot be built here (its arrays exceed physical RAM), or None.

    Only the node count matters (edges are streamed); the rule refuses only builds that could not
    finish on this machine, so any graph whose indptr and counts fit is let through.
    """
    need = build_bytes(num_nodes)
    if need < _CHECK_RAM_FROM:
        return None
    from labkit.core.machine import memory_bytes
    from labkit.core.memory import fmt_bytes
    ram = memory_bytes()
    if need <= ram:
        return None
    return (f"num_nodes={num_nodes} needs {fmt_bytes(need)} for indptr and its build arrays but this "
            f"machine has {fmt_bytes(ram)} of RAM, so at most {max_buildable_nodes()} nodes")


def check_buildable(num_nodes: int, arg: str = "num_nodes") -> int:
    """Return `num_nodes` if a CSR of that many nodes can be built in this machine's RAM, else raise."""
    why = _too_big(num_nodes)
    if why is not None:
        raise bad_value(arg, num_nodes, f"a node count whose CSR fits in memory: {why}")
    return num_nodes


def _check_implied(name: str, a: np.ndarray, offset: int, num_nodes: int) -> None:
    """Raise naming the largest id of `a` if the node count it implies (max id + 1) cannot be built here."""
    why = _too_big(num_nodes)
    if why is not None:
        pos = int(np.argmax(a))
        raise BadInput(f"{name}[{offset + pos}]={int(a[pos])} is not accepted; expected node ids a CSR can "
                         f"hold in memory: that id implies {why} (relabel ids to 0..n-1)")


#: Edges per bucket the builders aim for (see the module doc): one bucket's slice of ``indices``
#: (256 KiB of int32), its row numbers and its rows' cursors stay in cache while it is scattered,
#: where a single scatter over all of ``indices`` misses the cache and the TLB per edge.
BUCKET_EDGES = 1 << 16
#: A bucket spans at most 2**16 rows, so an edge's row within its bucket fits in a uint16.
_MAX_SHIFT = 16


def _bucket_shift(num_nodes: int, num_edges: int) -> int:
    """Rows per bucket as a power of two: about :data:`BUCKET_EDGES` edges per bucket, at most 2**16 rows."""
    buckets = max(1, num_edges // BUCKET_EDGES)
    rows = -(-max(1, num_nodes) // buckets)
    return min(_MAX_SHIFT, int(rows - 1).bit_length())


@njit(parallel=True, nogil=True, cache=True)
def _bucket_counts(src, dst, drop_self_loops, shift, cnt):
    """cnt[t, k] = edges of thread t's slice whose source lies in bucket k (rows k << shift onwards)."""
    nt = cnt.shape[0]
    m = len(src)
    for t in prange(nt):
        c = cnt[t]
        for i in range(t * m // nt, (t + 1) * m // nt):
            s = src[i]
            if drop_self_loops and s == dst[i]:
                continue
            c[s >> shift] += 1


@njit(parallel=True, nogil=True, cache=True)
def _partition(src, dst, drop_self_loops, shift, cur, indices, low, eid, track_eid, with_dst):
    """Write each edge's source row within its bucket (and its destination if `with_dst`, its
    position if `track_eid`) at its thread's cursor in its bucket's slice: sequential streams, one
    per bucket, input order kept."""
    nt = cur.shape[0]
    m = len(src)
    mask = (1 << shift) - 1
    for t in prange(nt):
        c = cur[t]
        for i in range(t * m // nt, (t + 1) * m // nt):
            s = src[i]
            d = dst[i]
            if drop_self_loops and s == d:
                continue
            k = s >> shift
            p = c[k]
            if with_dst:
                indices[p] = d
            low[p] = s & mask
            if track_eid:
                eid[p] = i
            c[k] = p + 1


@njit(parallel=True, nogil=True, cache=True)
def _scatter_buckets(bstart, bucket_bounds, shift, num_nodes, max_edges, low, indices, eid, track_eid, indptr,
                     sort, ucount):
    """Pass 2, bucket by bucket: count the bucket's rows, write their ``indptr``, then move its edges
    into row order inside the bucket's own slice (cache-resident; stable, so rows keep input order).
    With `sort` (never with `track_eid`) each row is then sorted while it is still in cache, and
    ucount[v] = its distinct ids (if len(ucount)). max_edges[t]: the most edges in a bucket of thread t's
    (its scratch; a row is never longer than its bucket)."""
    nt = len(bucket_bounds) - 1
    span = 1 << shift
    for t in prange(nt):
        cur = np.empty(span + 1, np.int64)
        sd = np.empty(max_edges[t], indices.dtype)
        se = np.empty(max_edges[t] if track_eid else 0, np.int64)
        bsort = np.empty(max_edges[t] // 4 + 2 if sort else 0, np.int64)
        for k in range(bucket_bounds[t], bucket_bounds[t + 1]):
            a = bstart[k]
            e = bstart[k + 1]
            r0 = k << shift
            nr = min(num_nodes, r0 + span) - r0
            cur[:nr + 1] = 0
            for q in range(a, e):
                cur[np.int64(low[q]) + 1] += 1
            cur[0] = a
            for j in range(nr):
                cur[j + 1] += cur[j]
                indptr[r0 + j + 1] = cur[j + 1]
            for q in range(a, e):
                sd[q - a] = indices[q]
            if track_eid:
                for q in range(a, e):
                    se[q - a] = eid[q]
            for q in range(e - a):
                j = np.int64(low[a + q])
                p = cur[j]
                indices[p] = sd[q]
                if track_eid:
                    eid[p] = se[q]
                cur[j] = p + 1
            if sort:  # sd is free again: it is the sort's scratch
                lo = a  # (not indptr[r0]: the thread with the bucket before may not have written it yet)
                for j in range(nr):
                    hi = cur[j]  # row j's end, where its cursor stopped
                    _sort_row(indices, lo, hi, num_nodes, sd, bsort)
                    if len(ucount):
                        ucount[r0 + j] = _count_distinct(indices, lo, hi)
                    lo = hi


@njit(parallel=True, nogil=True, cache=True)
def _count_buckets(bstart, bucket_bounds, shift, low, deg):
    """deg[v] += the edges of row v in each bucket (a bucket's rows are one thread's alone)."""
    nt = len(bucket_bounds) - 1
    for t in prange(nt):
        for k in range(bucket_bounds[t], bucket_bounds[t + 1]):
            r0 = k << shift
            for q in range(bstart[k], bstart[k + 1]):
                deg[r0 + np.int64(low[q])] += 1


@njit(parallel=True, nogil=True, cache=True)
def _scatter_chunk(bstart, bucket_bounds, shift, low, dst, pos, eid0, track_eid, cursor, end, indices, eid, overflow):
    """Write a partitioned chunk's edges at their rows' cursors in the whole CSR, bucket by bucket
    (so the writes stay within a bucket's rows). An edge whose row is full already is not written:
    overflow[t] counts them (the stream changed between passes)."""
    nt = len(bucket_bounds) - 1
    for t in prange(nt):
        bad = 0
        for k in range(bucket_bounds[t], bucket_bounds[t + 1]):
            r0 = k << shift
            for q in range(bstart[k], bstart[k + 1]):
                v = r0 + np.int64(low[q])
                p = cursor[v]
                if p >= end[v]:
                    bad += 1
                    continue
                indices[p] = dst[q]
                if track_eid:
                    eid[p] = eid0 + pos[q]
                cursor[v] = p + 1
        overflow[t] = bad


@njit(inline="always")
def _insertion_sort(a, lo, hi):
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(inline="always")
def _sort_row(indices, lo, hi, num_nodes, scratch, bstart):
    """Sort indices[lo:hi] in place. Short rows: insertion sort. Long rows (hubs hold most R-MAT
    edges): a bucket sort by value range with about 4 ids per bucket, then insertion sort inside
    buckets; O(d) expected since ids are scrambled over [0, num_nodes). `scratch` holds d ids and
    `bstart` d // 4 + 2 counts."""
    d = hi - lo
    if d <= 32:
        _insertion_sort(indices, lo, hi)
        return
    nb = d // 4 + 1
    bstart[:nb + 1] = 0
    for p in range(lo, hi):
        bstart[(np.int64(indices[p]) * nb) // num_nodes + 1] += 1
    for j in range(nb):
        bstart[j + 1] += bstart[j]
    for p in range(lo, hi):
        bk = (np.int64(indices[p]) * nb) // num_nodes
        scratch[bstart[bk]] = indices[p]
        bstart[bk] += 1
    # bstart[j] now holds the end of bucket j; sort each bucket back into place.
    prev = 0
    for j in range(nb):
        end = bstart[j]
        for q in range(prev, end):
            x = scratch[q]
            r = lo + q - 1
            while r >= lo + prev and indices[r] > x:
                indices[r + 1] = indices[r]
                r -= 1
            indices[r + 1] = x
        prev = end


@njit(parallel=True, nogil=True, cache=True)
def _sort_rows(indptr, indices, row_bounds, num_nodes, max_deg, ucount):
    """Sort every row's neighbour ids in place (:func:`_sort_row`); ucount[v] = distinct ids in row v
    (if len(ucount)). Scratch is one max-degree buffer per thread."""
    nt = len(row_bounds) - 1
    for t in prange(nt):
        scratch = np.empty(max_deg, indices.dtype)
        bstart = np.empty(max_deg // 4 + 2, np.int64)
        for v in range(row_bounds[t], row_bounds[t + 1]):
            lo, hi = indptr[v], indptr[v + 1]
            _sort_row(indices, lo, hi, num_nodes, scratch, bstart)
            if len(ucount):
                ucount[v] = _count_distinct(indices, lo, hi)


@njit(inline="always")
def _count_distinct(a, lo, hi):
    c = 0
    for p in range(lo, hi):
        if p == lo or a[p] != a[p - 1]:
            c += 1
    return c


@njit(parallel=True, nogil=True, cache=True)
def _sort_rows_by_key(indptr, indices, eid, row_bounds):
    nt = len(row_bounds) - 1
    for t in prange(nt):
        for v in range(row_bounds[t], row_bounds[t + 1]):
            lo, hi = indptr[v], indptr[v + 1]
            if hi - lo > 1:
                order = np.argsort(indices[lo:hi], kind="mergesort")  # stable: first input kept
                indices[lo:hi] = indices[lo:hi][order]
                eid[lo:hi] = eid[lo:hi][order]


@njit(parallel=True, nogil=True, cache=True)
def _count_unique(indptr, indices, row_bounds, ucount):
    nt = len(row_bounds) - 1
    for t in prange(nt):
        for v in range(row_bounds[t], row_bounds[t + 1]):
            lo, hi = indptr[v], indptr[v + 1]
            c = 0
            for p in range(lo, hi):
                if p == lo or indices[p] != indices[p - 1]:
                    c += 1
            ucount[v] = c


@njit(parallel=True, nogil=True, cache=True)
def _compact_unique(indptr, indices, eid, new_indptr, out, out_eid, track_eid, row_bounds):
    nt = len(row_bounds) - 1
    for t in prange(nt):
        for v in range(row_bounds[t], row_bounds[t + 1]):
            lo, hi = indptr[v], indptr[v + 1]
            q = new_indptr[v]
            for p in range(lo, hi):
                if p == lo or indices[p] != indices[p - 1]:
                    out[q] = indices[p]
                    if track_eid:
                        out_eid[q] = eid[p]
                    q += 1


def _edge_balanced_bounds(indptr: np.ndarray, nt: int) -> np.ndarray:
    """Row boundaries that give each thread about the same number of edges."""
    m = indptr[-1]
    b = np.searchsorted(indptr, np.linspace(0, m, nt + 1)).astype(np.int64)
    b[0], b[-1] = 0, len(indptr) - 1
    return np.maximum.accumulate(b)


def _index_dtype(num_nodes: int) -> np.dtype:
    return np.dtype(np.int32 if num_nodes <= np.iinfo(np.int32).max else np.int64)


def _check_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int | None, offset: int = 0) -> int:
    if src.ndim != 1:
        raise bad_value("src", f"array of shape {src.shape}", "a 1-d array of node ids")
    if dst.ndim != 1 or len(src) != len(dst):
        raise bad_value("dst", f"array of shape {dst.shape}", f"a 1-d array of {len(src)} node ids, one per src id")
    for name, a in (("src", src), ("dst", dst)):
        if a.dtype.kind not in "iu":
            raise bad_value(name, a.dtype, "an integer array of node ids")
        if len(a) and a.min() < 0:
            pos = int(np.argmin(a))
            raise BadInput(f"{name}[{offset + pos}]={int(a[pos])} is not accepted; expected node ids >= 0")
    smax, dmax = (int(src.max()), int(dst.max())) if len(src) else (-1, -1)
    top = max(smax, dmax) + 1
    if num_nodes is None and len(src):
        _check_implied(*(("src", src) if smax >= dmax else ("dst", dst)), offset, top)
    if num_nodes is not None and top > num_nodes:
        a, name = (src, "src") if smax >= num_nodes else (dst, "dst")
        pos = int(np.argmax(a))
        raise BadInput(f"{name}[{offset + pos}]={int(a[pos])} is not accepted; expected node ids in [0, {num_nodes})")
    return top


def _finish(indptr, indices, eid, num_nodes, sort, dedup, nt, presorted: np.ndarray | None = None):
    """Sort rows (`sort` or `dedup`) and keep each row's first copy of an id (`dedup`).

    `presorted`: the rows are sorted already, and this array holds each row's distinct ids
    (when `dedup`) as :func:`_bucket_build` counted them.
    """
    bounds = _edge_balanced_bounds(indptr, nt)
    ucount = presorted if presorted is not None else np.empty(num_nodes if dedup else 0, np.int64)
    if (sort or dedup) and presorted is None:
        if eid is None:
            max_deg = int(np.max(np.diff(indptr))) if num_nodes else 0
            _sort_rows(indptr, indices, bounds, num_nodes, max_deg, ucount)
        else:
            _sort_rows_by_key(indptr, indices, eid, bounds)
            if dedup:
                _count_unique(indptr, indices, bounds, ucount)
    if dedup:
        new_indptr = np.zeros(num_nodes + 1, np.int64)
        np.cumsum(ucount, out=new_indptr[1:])
        del ucount
        if new_indptr[-1] != indptr[-1]:
            out = np.empty(int(new_indptr[-1]), indices.dtype)
            out_eid = np.empty(len(out) if eid is not None else 0, np.int64)
            _compact_unique(indptr, indices, eid if eid is not None else out_eid, new_indptr, out, out_eid,
                            eid is not None, bounds)
            indptr, indices, eid = new_indptr, out, (out_eid if eid is not None else None)
    return indptr, indices, eid


@dataclass
class _Buckets:
    """Edges partitioned by source bucket (rows ``k << shift`` onwards): bucket k's edges are
    ``[bstart[k], bstart[k + 1])`` of ``dst``, ``low`` (row within the bucket) and ``pos`` (input
    position); thread t takes buckets ``[bounds[t], bounds[t + 1])`` (about equal edges)."""

    shift: int
    bstart: np.ndarray
    bounds: np.ndarray
    dst: np.ndarray
    low: np.ndarray
    pos: np.ndarray


def _partition_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, shift: int, drop_self_loops: bool,
                     track_eid: bool, nt: int, with_dst: bool = True) -> _Buckets:
    """Partition the edges by source bucket of 2**shift rows, stable (input order kept per bucket)."""
    nb = (num_nodes + (1 << shift) - 1) >> shift
    cnt = np.zeros((nt, nb), np.int64)
    _bucket_counts(src, dst, drop_self_loops, shift, cnt)
    bstart = np.zeros(nb + 1, np.int64)
    np.cumsum(cnt.sum(axis=0), out=bstart[1:])
    cur = bstart[:-1] + np.cumsum(cnt, axis=0) - cnt  # thread t writes after threads < t in each bucket
    del cnt
    m = int(bstart[-1])
    out = np.empty(m if with_dst else 0, _index_dtype(num_nodes))
    low = np.empty(m, np.uint16)
    pos = np.empty(m if track_eid else 0, np.int64)
    _partition(src, dst, drop_self_loops, shift, cur, out, low, pos, track_eid, with_dst)
    bounds = np.searchsorted(bstart, np.linspace(0, m, nt + 1)).astype(np.int64)
    bounds[0], bounds[-1] = 0, nb
    bounds = np.maximum.accumulate(np.minimum(bounds, nb))
    return _Buckets(shift, bstart, bounds, out, low, pos)


def _bucket_build(src: np.ndarray, dst: np.ndarray, num_nodes: int, drop_self_loops: bool, track_eid: bool,
                  nt: int, sort: bool = False, ucount: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counting sort of the edges by source in two cache-friendly passes; return (indptr, indices, eid).

    Sources are grouped into buckets of 2**shift rows. Pass 1 (:func:`_partition`) streams each
    edge into its bucket's slice, which is already its place in ``indices``; pass 2
    (:func:`_scatter_buckets`) puts each slice in row order while it sits in cache. Rows come out as
    a one-pass scatter would give them (stable), but no write lands at random over all of ``indices``.
    `sort` (not with `track_eid`) sorts each row in pass 2 and fills `ucount` (distinct ids per row).
    """
    bk = _partition_edges(src, dst, num_nodes, _bucket_shift(num_nodes, len(src)), drop_self_loops, track_eid, nt)
    indices, eid = bk.dst, bk.pos
    indptr = np.empty(num_nodes + 1, np.int64)
    indptr[0] = 0
    # Each thread's scratch holds its largest bucket (a hub's bucket needs it on one thread only).
    sizes = np.diff(bk.bstart)
    max_edges = np.array([sizes[a:b].max() if b > a else 0 for a, b in zip(bk.bounds[:-1], bk.bounds[1:])],
                         np.int64)
    ucount = np.empty(0, np.int64) if ucount is None else ucount
    _scatter_buckets(bk.bstart, bk.bounds, bk.shift, num_nodes, max_edges, bk.low, indices, eid, track_eid, indptr,
                     bool(sort) and not track_eid, ucount)
    return indptr, indices, eid


def build_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int | None = None, *,
              weights: np.ndarray | None = None, drop_self_loops: bool = False, dedup: bool = False,
              sort: bool = False, return_eid: bool = False) -> CSR:
    """Return the CSR of edges src[i] -> dst[i] (pass (dst, src) for the CSC / in-edges).

    `dedup` keeps one copy of each (src, dst) pair (the first in input order, whose weight
    is kept); it implies `sort` (neighbour lists in ascending id order). Otherwise a row's
    neighbours keep input order. `return_eid` (implied by `weights`) records each stored edge's
    input position in ``eid``. Ids must lie in [0, num_nodes); num_nodes defaults to max id + 1.
    A node count (given, or implied by the largest id) whose per-node build arrays (:func:`build_bytes`)
    exceed this machine's RAM is refused up front, naming the id or count. `weights`
    must be finite numbers >= 0 (:func:`check_weights`); the first other one is refused by position.
    """
    if num_nodes is not None:
        num_nodes = check_buildable(check_num_nodes(num_nodes))
    src, dst = np.asarray(src), np.asarray(dst)
    top = _check_edges(src, dst, num_nodes)
    num_nodes = top if num_nodes is None else num_nodes
    if weights is not None:
        weights = np.asarray(weights)
        if weights.shape != src.shape:
            raise bad_value("weights", f"shape {weights.shape}", f"shape {src.shape} (one weight per edge)")
        weights = check_weights(weights)
        return_eid = True
    nt = _threads()
    # Without edge ids the rows are sorted (and their distinct ids counted) in the builder's own
    # second pass, while each bucket is in cache; with them, _finish sorts ids and eids together.
    presort = (sort or dedup) and not return_eid
    ucount = np.empty(num_nodes if presort and dedup else 0, np.int64)
    indptr, indices, eid = _bucket_build(src, dst, num_nodes, drop_self_loops, return_eid, nt, presort, ucount)
    indptr, indices, eid = _finish(indptr, indices, eid if return_eid else None, num_nodes, sort, dedup, nt,
                                   ucount if presort else None)
    return CSR(indptr, indices, eid, None if weights is None else weights[eid])


def build_csc(src: np.ndarray, dst: np.ndarray, num_nodes: int | None = None, **kw) -> CSR:
    """Return the in-edge structure (CSC): row v lists the sources of edges into v."""
    return build_csr(dst, src, num_nodes, **kw)


def build_csr_chunked(chunks: Callable[[], Iterable[tuple[np.ndarray, ...]]], num_nodes: int, *,
                      drop_self_loops: bool = False, dedup: bool = False, sort: bool = False,
                      return_eid: bool = False, progress: Callable[[int], None] | None = None,
                      weighted: bool = False) -> CSR:
    """Return the CSR of an edge stream too large to hold, in two passes over ``chunks()``.

    `chunks` is called twice and must yield the same (src, dst) chunks both times (e.g.
    :func:`labkit.graph.rmat.rmat_edge_chunks`, or a reader over Parquet/CSV files). Only one
    chunk plus the CSR is held. `progress(n_edges)` is called after each chunk of each pass.
    With `weighted`, chunks are (src, dst, weights) and the CSR gets ``weights`` (and ``eid``)
    exactly as ``build_csr(..., weights=)`` gives them (and checked as it checks them, positions
    counted over the whole stream); the stream's weights are then held too.
    A chunk of another length is refused, and `num_nodes` must fit in RAM as for :func:`build_csr`.
    To build ``indices`` somewhere else than RAM (a memory-mapped file), call its two passes,
    :func:`count_csr_chunked` and :func:`scatter_csr_chunked`, directly.
    """
    num_nodes = check_buildable(check_num_nodes(num_nodes, 1))
    if weighted:
        return _build_csr_chunked_weighted(chunks, num_nodes, drop_self_loops=drop_self_loops, dedup=dedup,
                                           sort=sort, progress=progress)
    indptr = count_csr_chunked(chunks, num_nodes, drop_self_loops=drop_self_loops, progress=progress)
    indices = np.empty(int(indptr[-1]), _index_dtype(num_nodes))
    eid = np.empty(len(indices) if return_eid else 0, np.int64)
    scatter_csr_chunked(chunks, indptr, indices, drop_self_loops=drop_self_loops, eid=eid if return_eid else None,
                        progress=progress)
    indptr, indices, eid = _finish(indptr, indices, eid if return_eid else None, num_nodes, sort, dedup, _threads())
    return CSR(indptr, indices, eid)


@njit(nogil=True, cache=True)
def _count_columns(src, dst, drop_self_loops, deg):
    """deg[d] += 1 per edge s -> d (self-loops dropped if asked). Serial: no threads x nodes histograms."""
    for i in range(len(src)):
        if drop_self_loops and src[i] == dst[i]:
            continue
        deg[dst[i]] += 1


def count_csr_chunked(chunks: Callable[[], Iterable[tuple[np.ndarray, ...]]], num_nodes: int, *,
                      drop_self_loops: bool = False, column_degree: np.ndarray | None = None,
                      progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Pass 1 of the out-of-core build: return ``indptr`` (int64 [N+1]) of the (src, dst) chunks' CSR.

    With `column_degree` (an int array of N zeros), each kept edge also counts its destination
    there (the CSR's in-degrees; a CSC's out-degrees), in the same pass.
    """
    num_nodes = check_num_nodes(num_nodes, 1)
    nt = _threads()
    # Each chunk is first partitioned by source bucket, so the counts of a bucket stay within its rows.
    indptr = np.zeros(num_nodes + 1, np.int64)
    off = 0
    for chunk in chunks():
        s, d = _pair(chunk)
        _check_edges(s, d, num_nodes, off)
        bk = _partition_edges(s, d, num_nodes, _bucket_shift(num_nodes, len(s)), drop_self_loops, False, nt,
                              with_dst=False)
        _count_buckets(bk.bstart, bk.bounds, bk.shift, bk.low, indptr[1:])
        del bk
        if column_degree is not None:
            _count_columns(s, d, drop_self_loops, column_degree)
        off += len(s)
        if progress:
            progress(len(s))
    np.cumsum(indptr, out=indptr)
    return indptr


def _windows(indptr: np.ndarray, shift: int, window_edges: int | None) -> list[int]:
    """Bucket cuts [0, ..., nb] grouping consecutive buckets of 2**shift rows into about `window_edges` edges."""
    n = len(indptr) - 1
    nb = (n + (1 << shift) - 1) >> shift
    if window_edges is None:
        return [0, nb]
    ends = indptr[np.minimum(np.arange(1, nb + 1, dtype=np.int64) << shift, n)]
    cuts = np.searchsorted(ends, np.arange(window_edges, int(indptr[-1]), window_edges), side="left") + 1
    return [0] + sorted(set(int(c) for c in cuts if 0 < c < nb)) + [nb]


def scatter_csr_chunked(chunks: Callable[[], Iterable[tuple[np.ndarray, ...]]], indptr: np.ndarray,
                        indices: np.ndarray, *, drop_self_loops: bool = False, eid: np.ndarray | None = None,
                        window_edges: int | None = None, written: Callable[[int, int], None] | None = None,
                        progress: Callable[[int], None] | None = None) -> None:
    """Pass 2 of the out-of-core build: write each edge's destination into `indices` at its row's place.

    `indptr` is :func:`count_csr_chunked` over the same stream; `indices` (and `eid`, each edge's
    stream position, if given) is the caller's array of ``indptr[-1]`` entries: RAM, or a memory map
    of the file being built. Rows keep input order. With `window_edges`, each chunk is written one
    window of about that many edges of rows at a time and ``written(lo, hi)`` is called after entries
    [lo, hi) of a window were written, so a caller can unmap them: a memory map is then never
    resident as a whole. A stream that does not replay pass 1's edges raises BadInput.
    """
    num_nodes = len(indptr) - 1
    nt = _threads()
    cursor = indptr[:-1].copy()
    end = indptr[1:]
    overflow = np.zeros(nt, np.int64)
    track_eid = eid is not None
    eid = eid if track_eid else np.empty(0, np.int64)
    shift = _bucket_shift(num_nodes, len(indices))  # buckets of the whole CSR's size: their rows' slices stay in cache
    cuts = _windows(indptr, shift, window_edges)
    off = 0
    for chunk in chunks():
        s, d = _pair(chunk)
        _check_edges(s, d, num_nodes, off)  # again: a changed stream must not index out of bounds
        bk = _partition_edges(s, d, num_nodes, shift, drop_self_loops, track_eid, nt)
        for k0, k1 in zip(cuts[:-1], cuts[1:]):
            bounds = bk.bounds
            if len(cuts) > 2:  # this window's buckets, shared among the threads by edges
                bounds = np.searchsorted(bk.bstart[k0:k1 + 1], np.linspace(bk.bstart[k0], bk.bstart[k1], nt + 1))
                bounds = np.maximum.accumulate(np.clip(bounds + k0, k0, k1)).astype(np.int64)
                bounds[0], bounds[-1] = k0, k1
            _scatter_chunk(bk.bstart, bounds, bk.shift, bk.low, bk.dst, bk.pos, off, track_eid, cursor, end,
                           indices, eid, overflow)
            if overflow.any():
                raise BadInput(_REPLAY_ERROR)
            if written is not None:
                written(int(indptr[min(num_nodes, k0 << shift)]), int(indptr[min(num_nodes, k1 << shift)]))
        del bk
        off += len(s)
        if progress:
            progress(len(s))
    if not np.array_equal(cursor, end):
        raise BadInput(_REPLAY_ERROR)


def _pair(chunk) -> tuple[np.ndarray, np.ndarray]:
    """Return an unweighted chunk's (src, dst) arrays, refusing any other shape of chunk by name."""
    n = len(chunk) if hasattr(chunk, "__len__") else None
    if n != 2:
        what = f"a chunk of {n} arrays" if n is not None else f"a chunk of type {type(chunk).__name__}"
        hint = "; (src, dst, weights) chunks need weighted=True" if n == 3 else ""
        raise bad_value("chunks", what, f"(src, dst) chunks{hint}")
    return np.asarray(chunk[0]), np.asarray(chunk[1])


_REPLAY_ERROR = "chunks() yielded different edges on its second pass; it must replay the same stream"


def _build_csr_chunked_weighted(chunks, num_nodes: int, **kw) -> CSR:
    """build_csr_chunked over (src, dst, weights) chunks: the topology as unweighted, then weights[eid].

    The weights are checked on both passes and gathered in input order on the second, so
    ``weights[eid]`` picks, like build_csr, each stored edge's own weight (the first copy's under dedup).
    """
    state = {"passes": 0, "m": 0, "dtype": None, "w": None}

    def topology():
        state["passes"] += 1
        second, off = state["passes"] == 2, 0
        for chunk in chunks():
            if len(chunk) != 3:
                raise bad_value("chunks", f"a chunk of {len(chunk)} arrays", "(src, dst, weights) chunks when weighted")
            s, d, w = chunk
            w = np.asarray(w)
            if w.shape != np.shape(s):
                raise bad_value("weights", f"shape {w.shape}", f"shape {np.shape(s)} (one weight per edge)")
            w = check_weights(w, offset=off)  # on both passes: a stream that is not replayed may differ
            if second:
                if off + len(w) > state["m"]:
                    raise BadInput(_REPLAY_ERROR)
                if state["w"] is None:
                    state["w"] = np.empty(state["m"], state["dtype"])
                state["w"][off:off + len(w)] = w
            else:
                state["dtype"] = w.dtype if state["dtype"] is None else np.result_type(state["dtype"], w.dtype)
            off += len(w)
            yield s, d
        if not second:
            state["m"] = off
        elif off != state["m"]:
            raise BadInput(_REPLAY_ERROR)

    csr = build_csr_chunked(topology, num_nodes, return_eid=True, **kw)
    w = state["w"] if state["w"] is not None else np.empty(0, state["dtype"] or np.float64)
    csr.weights = w[csr.eid]
    return csr
