"""NEIGHBORHOOD sampling kernels (numba, parallel, GIL released, deterministic per seed).

Every kernel takes plain ``indptr`` / ``indices`` arrays and *row ids into indptr*, so the
neighbour lists may come from anywhere: a whole CSR or CSC, one partition, or a sub-CSR
gathered from a cache or from disk (then ``rows = arange(len(indptr) - 1)``). Results are
edge *positions* into ``indices`` (``eid``), from which neighbour ids, edge weights and edge
attributes stored elsewhere are all one gather away.

Randomness is counter-based (:mod:`labkit.graph.rng`): the draws for the i-th requested row
depend only on ``(seed, stream, i)``, so a given seed yields the same sample on any number of
threads. Without replacement, k of d neighbours are drawn with Floyd's algorithm in O(k)
time and memory, whatever d is (hubs on R-MAT have lists of 10^4-10^5 entries).

Main entry points:
- :func:`sample_neighbors` one hop: uniform with or without replacement, or full lists.
- :func:`sample_multihop` fanouts over hops with a single relabelling (seeds first).
- :class:`AliasTable` / :func:`sample_weighted` edge-weight sampling in O(1) per draw.
- :func:`topk_neighbors` the k heaviest edges of each row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from labkit.core.arrays import unique
from labkit.core.errors import BadInput, bad_value, check_range, check_seed
from labkit.graph.csr import check_weights
from labkit.graph.rng import GOLDEN, mix64, stream_key

FULL = -1  #: fanout meaning "all neighbours"


# --------------------------------------------------------------------------------------------
# one hop


@njit(nogil=True, cache=True)
def _counts(indptr, rows, k, replace):
    n = len(rows)
    ptr = np.empty(n + 1, np.int64)
    ptr[0] = 0
    for i in range(n):
        v = rows[i]
        d = indptr[v + 1] - indptr[v]
        if k < 0:
            c = d
        elif replace:
            c = k if d > 0 else 0
        else:
            c = min(d, k)
        ptr[i + 1] = ptr[i] + c
    return ptr


@njit(inline="always")
def _draw_one_row(lo, d, k, replace, st, out, q):
    """Write the positions of this row's sample into out[q:q+c]; return c."""
    if d == 0:
        return 0
    if k < 0 or (not replace and d <= k):
        for j in range(d):
            out[q + j] = lo + j
        return d
    if replace:
        for j in range(k):
            st += GOLDEN
            out[q + j] = lo + np.int64(((mix64(st) >> np.uint64(32)) * np.uint64(d)) >> np.uint64(32))
        return k
    # Floyd: for j in d-k..d-1 pick t in [0, j]; take t unless already taken, else take j.
    # k distinct offsets in O(k) draws; the membership scan is over at most k entries.
    c = 0
    for j in range(d - k, d):
        st += GOLDEN
        t = np.int64(((mix64(st) >> np.uint64(32)) * np.uint64(j + 1)) >> np.uint64(32))
        dup = False
        for x in range(c):
            if out[q + x] == lo + t:
                dup = True
                break
        out[q + c] = lo + (j if dup else t)
        c += 1
    return k


#: Below this many sampled items a kernel runs on one thread: a mini-batch hop is ~1 ms of work,
#: and on a shared, oversubscribed machine each parallel region's barrier can cost more than that.
PARALLEL_MIN_WORK = 1 << 16


@njit(nogil=True, cache=True)
def _sample_hop_serial(indptr, rows, k, replace, seed, stream):
    ptr = _counts(indptr, rows, k, replace)
    eid = np.empty(ptr[-1], np.int64)
    for i in range(len(rows)):
        v = rows[i]
        lo = indptr[v]
        _draw_one_row(lo, indptr[v + 1] - lo, k, replace, stream_key(seed, stream, i), eid, ptr[i])
    return ptr, eid


@njit(parallel=True, nogil=True, cache=True)
def _sample_hop_parallel(indptr, rows, k, replace, seed, stream):
    ptr = _counts(indptr, rows, k, replace)
    eid = np.empty(ptr[-1], np.int64)
    for i in prange(len(rows)):
        v = rows[i]
        lo = indptr[v]
        _draw_one_row(lo, indptr[v + 1] - lo, k, replace, stream_key(seed, stream, i), eid, ptr[i])
    return ptr, eid


def _sample_hop(indptr, rows, k, replace, seed, stream):
    """One hop over `rows`; the same draws whether it runs on one thread or many."""
    work = len(rows) * (k if k > 0 else 16)
    f = _sample_hop_parallel if work >= PARALLEL_MIN_WORK else _sample_hop_serial
    return f(indptr, rows, k, replace, seed, stream)


def check_fanout(fanout: int, arg: str = "fanout") -> int:
    """Return `fanout` if it is a positive int or -1 (all neighbours), else raise."""
    if isinstance(fanout, bool) or not isinstance(fanout, (int, np.integer)) or (fanout < 1 and fanout != FULL):
        raise bad_value(arg, fanout, "a positive integer, or -1 for all neighbours")
    return int(fanout)


def check_fanouts(fanouts) -> list[int]:
    """Return a multi-hop sample's `fanouts` (one per hop) as ints, else raise naming the bad one."""
    if not isinstance(fanouts, (list, tuple)) or not fanouts:
        raise bad_value("fanouts", fanouts, "a non-empty list of positive ints (or -1 for all)")
    return [check_fanout(f, f"fanouts[{i}]") for i, f in enumerate(fanouts)]


def check_multihop(fanouts, seed, stream) -> tuple[list[int], int, int]:
    """Return (fanouts, seed, stream) of a multi-hop sample checked; hop h draws stream ``stream * 64 + h``."""
    return check_fanouts(fanouts), check_seed(seed), check_seed(stream, "stream", per=64)


def _check_rows(arg: str, rows, num_rows: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.ndim == 1 and rows.size == 0:  # [] reads as float64: no ids, of any dtype, is no ids
        return np.empty(0, np.int64)
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        raise bad_value(arg, f"array of shape {rows.shape} and dtype {rows.dtype}", "a 1-d integer array of row ids")
    if len(rows):
        lo, hi = int(rows.min()), int(rows.max())
        if lo < 0 or hi >= num_rows:
            bad = lo if lo < 0 else hi
            pos = int(np.flatnonzero(rows == bad)[0])
            raise BadInput(f"{arg}[{pos}]={bad} is not accepted; expected ids in [0, {num_rows})")
    return rows.astype(np.int64, copy=False)


def _check_indptr(indptr) -> np.ndarray:
    """Return `indptr` if it is a non-empty 1-d integer array starting at 0 (O(1): the rest is not scanned)."""
    indptr = np.asarray(indptr)
    if indptr.ndim != 1 or len(indptr) == 0 or indptr.dtype.kind not in "iu":
        raise bad_value("indptr", f"array of shape {indptr.shape} and dtype {indptr.dtype}",
                        "a non-empty 1-d integer array of row offsets")
    if indptr[0] != 0:
        raise bad_value("indptr[0]", indptr[0], "0 (row offsets start at 0)")
    return indptr


#: The most neighbours a row may have: the kernels draw offsets into a row with 32-bit
#: multiply-shift (:func:`labkit.graph.rng.randint`), so a longer row would only ever be sampled
#: in its first 2**32 entries.
MAX_DEGREE = 2**32 - 1


def _check_offsets(indptr: np.ndarray) -> None:
    """Raise naming the first entry of a checked `indptr` that is below the one before it, or that ends a row
    of more than MAX_DEGREE neighbours (O(len(indptr)), once per topology: where it is wrapped or tables are
    built, not per batch)."""
    if len(indptr) > 1:
        span = np.diff(indptr)
        bad = (span < 0) | (span > MAX_DEGREE)
        if bad.any():
            v = int(np.argmax(bad))
            if span[v] < 0:
                raise bad_value(f"indptr[{v + 1}]", indptr[v + 1],
                                f"non-decreasing row offsets (indptr[{v}]={int(indptr[v])} before it)")
            raise bad_value(f"indptr[{v + 1}]", indptr[v + 1], f"at most {MAX_DEGREE:,} neighbours in row {v} "
                            f"(indptr[{v}]={int(indptr[v])}; the samplers draw 32-bit offsets)")


def _check_row_spans(indptr: np.ndarray, rows: np.ndarray, end: int, end_name: str = "len(indices)") -> None:
    """Raise unless each of `rows` has offsets 0 <= indptr[v] <= indptr[v + 1] <= end (O(len(rows)): per batch).

    Only the rows a call reads are checked, so a sample never holds a position outside its row's
    slice or past `end` (len(indices), or indptr[-1] when no indices are given).
    """
    if not len(rows):
        return
    lo, hi = indptr[rows], indptr[1:][rows]
    if lo.min() >= 0 and hi.max() <= end and not (hi < lo).any():
        span = hi - lo
        if span.max() <= MAX_DEGREE:
            return
        i = int(np.argmax(span))
        raise bad_value(f"indptr[{int(rows[i]) + 1}]", hi[i], f"at most {MAX_DEGREE:,} neighbours in row "
                        f"{int(rows[i])} (indptr[{int(rows[i])}]={int(lo[i])}; the samplers draw 32-bit offsets)")
    i = int(np.argmax((hi < lo) | (lo < 0) | (hi > end)))
    v = int(rows[i])
    if hi[i] < lo[i]:
        raise bad_value(f"indptr[{v + 1}]", hi[i], f"non-decreasing row offsets (indptr[{v}]={int(lo[i])} before it; "
                        f"rows[{i}]={v} reads them)")
    bad, at = (lo[i], v) if lo[i] < 0 else (hi[i], v + 1)
    raise bad_value(f"indptr[{at}]", bad, f"row offsets in [0, {end}] ({end_name}={end}; rows[{i}]={v} reads it)")


def check_topology(indptr, indices) -> None:
    """Raise unless `indices` holds every edge `indptr` points at (O(1): indptr[0] = 0, indptr[-1] <= len(indices))."""
    indptr = _check_indptr(indptr)
    indices = np.asarray(indices)
    if indices.ndim != 1:
        raise bad_value("indices", f"array of shape {indices.shape}", "a 1-d array of neighbour ids")
    if int(indptr[-1]) > len(indices):
        raise bad_value("indices", f"an array of {len(indices)} entries",
                        f"at least indptr[-1]={int(indptr[-1])} entries (indptr and indices of the same graph)")


def sample_neighbors(indptr: np.ndarray, indices: np.ndarray | None, rows, fanout: int, *, replace: bool = False,
                     seed: int = 0, stream: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return (ptr, eid): row i's sampled edge positions are ``eid[ptr[i]:ptr[i+1]]``.

    Neighbour ids are ``indices[eid]``. ``fanout=-1`` takes all neighbours. Without
    replacement a row of degree d gets min(d, fanout) distinct neighbours; with replacement it
    gets exactly fanout (or none when d = 0). `stream` separates independent draws under one
    seed (e.g. hops, batches). The draws read only `indptr`, so `indices` may be None (then
    positions are checked against indptr[-1]). `indptr` must be an integer array starting at 0;
    the offsets of the requested rows must not decrease nor pass len(indices), checked in
    O(len(rows)) per call (a full scan per batch would cost more than the draws on large graphs;
    :class:`NeighborSampler` scans the whole indptr once when it is made).
    """
    fanout = check_fanout(fanout)
    seed, stream = check_seed(seed), check_seed(stream, "stream")
    indptr = _check_indptr(indptr)
    if indices is not None:
        check_topology(indptr, indices)
    rows = _check_rows("rows", rows, len(indptr) - 1)
    if indices is None:
        _check_row_spans(indptr, rows, int(indptr[-1]), "indptr[-1]")
    else:
        _check_row_spans(indptr, rows, len(indices))
    return _sample_hop(indptr, rows, fanout, bool(replace), seed, stream)


# --------------------------------------------------------------------------------------------
# multi-hop with relabelling


@njit(nogil=True, cache=True)
def _relabel(nbrs, local, nodes, n_nodes):
    """Map global ids to local ids, appending unseen ones to `nodes`; return (local ids, new count)."""
    out = np.empty(len(nbrs), np.int64)
    n = n_nodes
    for j in range(len(nbrs)):
        g = nbrs[j]
        l = local[g]
        if l < 0:
            l = n
            local[g] = n
            nodes[n] = g
            n += 1
        out[j] = l
    return out, n


@njit(nogil=True, cache=True)
def _gather_serial(indices, eid):
    out = np.empty(len(eid), np.int64)
    for j in range(len(eid)):
        out[j] = indices[eid[j]]
    return out


@njit(parallel=True, nogil=True, cache=True)
def _gather_parallel(indices, eid):
    out = np.empty(len(eid), np.int64)
    for j in prange(len(eid)):
        out[j] = indices[eid[j]]
    return out


def _gather(indices, eid):
    return (_gather_parallel if len(eid) >= PARALLEL_MIN_WORK else _gather_serial)(indices, eid)


@njit(nogil=True, cache=True)
def _reset(local, nodes, n):
    for i in range(n):
        local[nodes[i]] = -1


@dataclass
class MultiHopSample:
    """A sampled multi-hop neighbourhood, relabelled to local ids (seeds first, then discovery order).

    For hop h, ``rows[h]`` are the local ids of the expanded nodes (message *targets*),
    ``cols[h]`` the local ids of their sampled neighbours (message *sources*) and ``eids[h]``
    the edge positions in the sampled structure. ``num_nodes_per_hop[h]`` counts the nodes
    known after hop h (entry 0 = number of seeds).
    """

    nodes: np.ndarray
    rows: list[np.ndarray] = field(default_factory=list)
    cols: list[np.ndarray] = field(default_factory=list)
    eids: list[np.ndarray] = field(default_factory=list)
    num_nodes_per_hop: list[int] = field(default_factory=list)

    @property
    def num_sampled_edges(self) -> int:
        return int(sum(len(r) for r in self.rows))


class NeighborSampler:
    """Multi-hop NEIGHBORHOOD sampler over one (indptr, indices) pair, reusing its relabel workspace.

    `frontier` chooses what hop h+1 expands: "new" (only nodes first seen at hop h, as PyG)
    or "all" (every node known so far, as DGL blocks: each layer's frontier is the merged
    node set). One sampler must not be used from two threads at once (the workspace is
    shared); make one per thread.
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, *, frontier: str = "new") -> None:
        if frontier not in ("new", "all"):
            raise bad_value("frontier", frontier, "'new' or 'all'")
        check_topology(indptr, indices)
        indptr, indices = np.asarray(indptr), np.asarray(indices)
        # The whole topology is checked once here, so sample() runs the kernels on it unchecked.
        _check_offsets(indptr)
        if indices.dtype.kind not in "iu":
            raise bad_value("indices", f"array of dtype {indices.dtype}", "an integer array of neighbour ids")
        used = indices[:int(indptr[-1])]
        if len(used) and used.min() < 0:
            pos = int(np.argmin(used))
            raise bad_value(f"indices[{pos}]", used[pos], "neighbour ids >= 0")
        self.indptr, self.indices, self.frontier = indptr, indices, frontier
        self.num_rows = len(indptr) - 1
        self._top = int(used.max()) if len(used) else -1
        self._local = np.full(max(self.num_rows, self._top + 1), -1, np.int64)

    def sample(self, seeds, fanouts: list[int], *, replace: bool = False, seed: int = 0,
               stream: int = 0) -> MultiHopSample:
        """Return the relabelled multi-hop sample of `seeds` with one fanout per hop."""
        fanouts, seed, stream = check_multihop(fanouts, seed, stream)
        if len(fanouts) > 1 and self._top >= self.num_rows:
            # A second hop would expand neighbours that have no row (a bipartite CSR, e.g. user -> item).
            raise bad_value("fanouts", fanouts, f"one hop for this CSR: its neighbour ids reach {self._top} but it "
                            f"has rows only for ids < {self.num_rows} (multi-hop needs one id space; for typed "
                            "edges walk hop by hop with labkit.graph.query)")
        seeds = _check_rows("seeds", seeds, self.num_rows)
        uniq = unique(seeds)
        if len(uniq) != len(seeds):
            raise bad_value("seeds", "an array with repeated ids", "distinct seed ids")
        nodes = np.empty(len(self._local), np.int64)  # untouched pages cost nothing
        nodes[:len(seeds)] = seeds
        self._local[seeds] = np.arange(len(seeds))
        out = MultiHopSample(nodes, num_nodes_per_hop=[len(seeds)])
        n, start = len(seeds), 0
        try:
            for h, k in enumerate(fanouts):
                frontier_lo = start if self.frontier == "new" else 0
                frontier = nodes[frontier_lo:n]
                ptr, eid = _sample_hop(self.indptr, frontier, k, bool(replace), int(seed),
                                       int(stream) * 64 + h)
                nbrs = _gather(self.indices, eid)
                cols, n_new = _relabel(nbrs, self._local, nodes, n)
                rows = np.repeat(np.arange(frontier_lo, n, dtype=np.int64), np.diff(ptr))
                out.rows.append(rows)
                out.cols.append(cols)
                out.eids.append(eid)
                start, n = n, n_new
                out.num_nodes_per_hop.append(n)
        finally:
            _reset(self._local, nodes, n)
        out.nodes = nodes[:n].copy()
        return out


def sample_multihop(indptr: np.ndarray, indices: np.ndarray, seeds, fanouts: list[int], *,
                    replace: bool = False, seed: int = 0, frontier: str = "new") -> MultiHopSample:
    """Return the relabelled multi-hop sample of `seeds` (one-off; reuse a NeighborSampler in loops)."""
    return NeighborSampler(indptr, indices, frontier=frontier).sample(seeds, fanouts, replace=replace, seed=seed)


# --------------------------------------------------------------------------------------------
# edge-weight sampling (alias tables) and top-k


@njit(parallel=True, nogil=True, cache=True)
def _build_alias(indptr, weights, prob, alias):
    for v in prange(len(indptr) - 1):
        lo, hi = indptr[v], indptr[v + 1]
        d = hi - lo
        if d == 0:
            continue
        total = 0.0
        for p in range(lo, hi):
            total += weights[p]
        small = np.empty(d, np.int64)
        large = np.empty(d, np.int64)
        ns = 0
        nl = 0
        scaled = np.empty(d, np.float64)
        for j in range(d):
            scaled[j] = weights[lo + j] * d / total if total > 0 else 1.0
            if scaled[j] < 1.0:
                small[ns] = j
                ns += 1
            else:
                large[nl] = j
                nl += 1
        while ns > 0 and nl > 0:
            ns -= 1
            s = small[ns]
            l = large[nl - 1]
            prob[lo + s] = scaled[s]
            alias[lo + s] = l
            scaled[l] = scaled[l] + scaled[s] - 1.0
            if scaled[l] < 1.0:
                nl -= 1
                small[ns] = l
                ns += 1
        for j in range(nl):
            prob[lo + large[j]] = 1.0
            alias[lo + large[j]] = large[j]
        for j in range(ns):
            prob[lo + small[j]] = 1.0
            alias[lo + small[j]] = small[j]


@dataclass
class AliasTable:
    """Walker alias tables for every row at once: O(1) weighted draws per sample."""

    prob: np.ndarray
    alias: np.ndarray

    @classmethod
    def build(cls, indptr: np.ndarray, weights: np.ndarray) -> "AliasTable":
        """Return the alias tables of each row's edge `weights` (non-negative, one per edge)."""
        indptr = _check_indptr(indptr)
        _check_offsets(indptr)
        weights = np.asarray(weights)
        if weights.ndim != 1:
            raise bad_value("weights", f"array of shape {weights.shape}", "a 1-d array (one weight per edge)")
        if len(weights) != indptr[-1]:
            raise bad_value("weights", f"length {len(weights)}", f"length {int(indptr[-1])} (one per edge)")
        weights = check_weights(weights).astype(np.float64, copy=False)
        prob = np.ones(len(weights), np.float64)
        alias = np.zeros(len(weights), np.int64)
        _build_alias(indptr, weights, prob, alias)
        return cls(prob, alias)


@njit(parallel=True, nogil=True, cache=True)
def _sample_weighted(indptr, prob, alias, rows, k, seed, stream):
    n = len(rows)
    ptr = np.empty(n + 1, np.int64)
    ptr[0] = 0
    for i in range(n):
        d = indptr[rows[i] + 1] - indptr[rows[i]]
        ptr[i + 1] = ptr[i] + (k if d > 0 else 0)
    eid = np.empty(ptr[-1], np.int64)
    for i in prange(n):
        v = rows[i]
        lo = indptr[v]
        d = indptr[v + 1] - lo
        if d == 0:
            continue
        st = stream_key(seed, stream, i)
        for j in range(k):
            st += GOLDEN
            x = mix64(st)
            col = np.int64(((x >> np.uint64(32)) * np.uint64(d)) >> np.uint64(32))
            u = float(x & np.uint64(0xFFFFFFFF)) / 4294967296.0
            eid[ptr[i] + j] = lo + (col if u < prob[lo + col] else alias[lo + col])
    return ptr, eid


def sample_weighted(indptr: np.ndarray, table: AliasTable, rows, fanout: int, *, seed: int = 0,
                    stream: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return (ptr, eid): `fanout` draws per row, with replacement, each edge drawn in proportion to its weight."""
    fanout = check_fanout(fanout)
    if fanout == FULL:
        raise bad_value("fanout", fanout, "a positive integer (weighted sampling draws a fixed number)")
    indptr = _check_indptr(indptr)
    if len(table.prob) != indptr[-1] or len(table.alias) != len(table.prob):
        raise bad_value("table", f"an AliasTable of {len(table.prob)} edges",
                        f"one built for this indptr ({int(indptr[-1])} edges; AliasTable.build(indptr, weights))")
    seed, stream = check_seed(seed), check_seed(stream, "stream")
    rows = _check_rows("rows", rows, len(indptr) - 1)
    _check_row_spans(indptr, rows, int(indptr[-1]), "indptr[-1]")
    return _sample_weighted(indptr, table.prob, table.alias, rows, fanout, seed, stream)


@njit(parallel=True, nogil=True, cache=True)
def _topk(indptr, weights, rows, k):
    n = len(rows)
    ptr = np.empty(n + 1, np.int64)
    ptr[0] = 0
    for i in range(n):
        d = indptr[rows[i] + 1] - indptr[rows[i]]
        ptr[i + 1] = ptr[i] + min(d, k)
    eid = np.empty(ptr[-1], np.int64)
    nan = np.zeros(n, np.bool_)  # rows whose ranking met a NaN weight (the caller raises)
    for i in prange(n):
        v = rows[i]
        lo, hi = indptr[v], indptr[v + 1]
        c = ptr[i + 1] - ptr[i]
        if c == hi - lo:
            for j in range(c):
                eid[ptr[i] + j] = lo + j
        else:
            w = weights[lo:hi]
            for j in range(hi - lo):
                if np.isnan(w[j]):
                    nan[i] = True
            order = np.argsort(-w, kind="mergesort")[:c]
            for j in range(c):
                eid[ptr[i] + j] = lo + order[j]
    return ptr, eid, nan


def topk_neighbors(indptr: np.ndarray, weights: np.ndarray, rows, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (ptr, eid): each row's min(d, k) heaviest edges (ties: lower position first).

    A row with more than k edges lists its k heaviest, heaviest first; a row with at most k edges
    lists all of them in stored order (nothing to rank, so its weights are not read).
    """
    k = check_fanout(k, "k")
    indptr = _check_indptr(indptr)
    weights = np.asarray(weights)
    if weights.dtype.kind not in "iuf":  # O(1); the values are looked at only in the rows ranked
        raise bad_value("weights", f"array of dtype {weights.dtype}", "an array of numbers (one weight per edge)")
    weights = weights.astype(np.float64, copy=False)
    if weights.ndim != 1 or len(weights) != indptr[-1]:
        raise bad_value("weights", f"array of shape {weights.shape}",
                        f"a 1-d array of {int(indptr[-1])} weights (one per edge of indptr)")
    if k == FULL:
        k = int(np.max(np.diff(indptr))) if len(indptr) > 1 else 0
    rows = _check_rows("rows", rows, len(indptr) - 1)
    _check_row_spans(indptr, rows, int(indptr[-1]), "indptr[-1]")
    # NaN cannot be ranked; the kernel flags it in the rows it ranks (no extra pass over all edges).
    ptr, eid, nan = _topk(indptr, weights, rows, k)
    if nan.any():
        v = int(rows[int(np.flatnonzero(nan)[0])])
        lo, hi = int(indptr[v]), int(indptr[v + 1])
        pos = lo + int(np.flatnonzero(np.isnan(weights[lo:hi]))[0])
        raise BadInput(f"weights[{pos}]=nan is not accepted; expected weights that can be ranked "
                         f"(not NaN; edge {pos} is in row {v})")
    return ptr, eid


def sampled_edges_per_s(sample: MultiHopSample, seconds: float) -> float:
    """Return sampled edges per second for `sample` drawn in `seconds`."""
    check_range("seconds", seconds, 0.0, lo_open=True)
    return sample.num_sampled_edges / seconds
