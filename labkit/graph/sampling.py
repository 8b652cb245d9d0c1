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
from labkit.graph.csr import CSR, check_weights
from labkit.graph.rng import GOLDEN, mix64, stream_key
from labkit.graph.storage import (PARALLEL_MIN_WORK, CSRTopology, GraphStore, degree_ptr, global_positions,
                                  in_memory_csr)

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
    the sampled edges' positions in the graph's edge array (``indptr[v] + offset``; -1 from a
    store without global offsets). ``num_nodes_per_hop[h]`` counts the nodes
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


@njit(nogil=True, cache=True)
def _hash_relabel(nbrs, keys, vals, nodes, n_nodes):
    """As :func:`_relabel`, with an open-addressing table (size a power of two, -1 = empty) for the map.

    Memory is sized by the sample, not the graph: the sampler over a store that charges a
    memory budget (on disk) cannot hold a workspace of one entry per node.
    """
    mask = np.uint64(len(keys) - 1)
    out = np.empty(len(nbrs), np.int64)
    n = n_nodes
    for j in range(len(nbrs)):
        g = np.int64(nbrs[j])
        s = np.int64(mix64(np.uint64(g)) & mask)
        while True:
            k = keys[s]
            if k == g:
                out[j] = vals[s]
                break
            if k < 0:
                keys[s] = g
                vals[s] = n
                nodes[n] = g
                out[j] = n
                n += 1
                break
            s = np.int64((np.uint64(s) + np.uint64(1)) & mask)
    return out, n


#: Sampler workspaces: "dense" (one int64 per node, reset after each sample: the in-memory fast
#: path), "sample" (a hash table sized by the sample: for stores under a memory budget), "auto".
WORKSPACES = ("auto", "dense", "sample")


class _Walk:
    """One seed set while it is sampled: nodes known so far (seeds first, then discovery order), edges."""

    def __init__(self, seeds: np.ndarray, seed: int, stream: int, local: np.ndarray | None) -> None:
        self.seed, self.stream, self.local = seed, stream, local
        n = len(seeds)
        if local is not None:  # dense: a page of `nodes` costs nothing until written
            self.nodes = np.empty(len(local), np.int64)
            self.nodes[:n] = seeds
            local[seeds] = np.arange(n)
        else:
            self.nodes = np.empty(max(16, 2 * n), np.int64)
            self.keys = np.full(_table_size(n), -1, np.int64)
            self.vals = np.empty(len(self.keys), np.int64)
            _hash_relabel(seeds, self.keys, self.vals, self.nodes, 0)
        self.out = MultiHopSample(self.nodes, num_nodes_per_hop=[n])
        self.n, self.start = n, 0

    def frontier(self, everything: bool) -> tuple[int, np.ndarray]:
        lo = 0 if everything else self.start
        return lo, self.nodes[lo:self.n]

    def hop(self, lo: int, sptr: np.ndarray, nbrs: np.ndarray, eid: np.ndarray) -> None:
        """Add one hop: frontier node i (local id lo + i) drew ``nbrs[sptr[i]:sptr[i+1]]``."""
        n = self.n
        if self.local is not None:
            cols, n_new = _relabel(nbrs, self.local, self.nodes, n)
        else:
            need = n + len(nbrs)
            if len(self.nodes) < need:
                self.nodes = np.concatenate([self.nodes[:n], np.empty(max(need, 2 * len(self.nodes)) - n, np.int64)])
            if 2 * need > len(self.keys):  # keep the table at most half full
                self.keys = np.full(_table_size(need), -1, np.int64)
                self.vals = np.empty(len(self.keys), np.int64)
                _hash_relabel(self.nodes[:n], self.keys, self.vals, self.nodes, 0)
            cols, n_new = _hash_relabel(nbrs, self.keys, self.vals, self.nodes, n)
        self.out.rows.append(np.repeat(np.arange(lo, n, dtype=np.int64), np.diff(sptr)))
        self.out.cols.append(cols)
        self.out.eids.append(eid)
        self.start, self.n = n, n_new
        self.out.num_nodes_per_hop.append(n_new)

    def finish(self) -> MultiHopSample:
        if self.local is not None:
            _reset(self.local, self.nodes, self.n)
        self.out.nodes = self.nodes[:self.n].copy()
        return self.out

    def abandon(self) -> None:
        if self.local is not None:
            _reset(self.local, self.nodes, self.n)


def _table_size(n: int) -> int:
    return 1 << max(4, int(2 * max(n, 1) - 1).bit_length())


class NeighborSampler:
    """Multi-hop NEIGHBORHOOD sampler over any :class:`~labkit.graph.storage.GraphStore`.

    `graph` is a store (in memory, partitioned, on disk), a :class:`~labkit.graph.csr.CSR`, or
    the ``indptr`` of a CSR whose ``indices`` follow. Each hop draws positions from the lists'
    lengths first (``store.degree``; the draws never see an entry), then reads only the sampled
    entries (``store.entries``). When the lists are one CSR in RAM the same kernels draw and
    gather in place (``indptr[v] + offset``): the fast path, with identical draws. Draw i of hop
    h depends only on (seed, ``stream * 64 + h``, i) and the frontier's order does not depend on
    the store, so a sample is bit-identical whichever store serves it.

    `frontier` chooses what hop h+1 expands: "new" (only nodes first seen at hop h, as PyG)
    or "all" (every node known so far, as DGL blocks). `workspace` (:data:`WORKSPACES`): the
    relabel map is one int64 per node ("dense", the default for stores without a memory budget)
    or a hash table sized by the sample ("sample", the default for a store with a ``budget``).
    One sampler must not be used from two threads at once (the dense workspace is shared).
    """

    def __init__(self, graph, indices: np.ndarray | None = None, *, frontier: str = "new",
                 workspace: str = "auto") -> None:
        if frontier not in ("new", "all"):
            raise bad_value("frontier", frontier, "'new' or 'all'")
        if workspace not in WORKSPACES:
            raise bad_value("workspace", workspace, "'auto', 'dense' or 'sample'")
        self._top = -1
        if isinstance(graph, CSR):
            graph, indices = graph.indptr, graph.indices
        if indices is not None:
            indptr, indices = self._check_csr(graph, indices)
            store = CSRTopology(indptr, indices)
        elif isinstance(graph, GraphStore):
            store = graph
        else:
            raise bad_value("graph", type(graph).__name__, "a GraphStore (labkit.graph.storage), a CSR, "
                            "or indptr followed by indices")
        self.store, self.frontier = store, frontier
        self.num_rows = int(store.num_nodes)
        self._csr = in_memory_csr(store)
        if self._csr is not None:
            self.indptr, self.indices = self._csr
            if indices is None:  # a store's own arrays: checked once here, as raw arrays are
                self._check_csr(*self._csr)
        gi = getattr(store, "indptr", None)
        self._indptr = gi if isinstance(gi, np.ndarray) else None  # global edge positions for eids
        if workspace == "auto":
            workspace = "sample" if getattr(store, "budget", None) is not None else "dense"
        self.workspace = workspace
        self._local = np.full(max(self.num_rows, self._top + 1), -1, np.int64) if workspace == "dense" else None

    def _check_csr(self, indptr, indices) -> tuple[np.ndarray, np.ndarray]:
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
        self._top = int(used.max()) if len(used) else -1
        return indptr, indices

    def _check_seeds(self, seeds, fanouts, arg: str = "seeds") -> np.ndarray:
        if len(fanouts) > 1 and self._top >= self.num_rows:
            # A second hop would expand neighbours that have no row (a bipartite CSR, e.g. user -> item).
            raise bad_value("fanouts", fanouts, f"one hop for this CSR: its neighbour ids reach {self._top} but it "
                            f"has rows only for ids < {self.num_rows} (multi-hop needs one id space; for typed "
                            "edges walk hop by hop with labkit.graph.query)")
        seeds = _check_rows(arg, seeds, self.num_rows)
        if len(unique(seeds)) != len(seeds):
            raise bad_value(arg, "an array with repeated ids", "distinct seed ids")
        return seeds

    def sample(self, seeds, fanouts: list[int], *, replace: bool = False, seed: int = 0,
               stream: int = 0) -> MultiHopSample:
        """Return the relabelled multi-hop sample of `seeds` with one fanout per hop."""
        fanouts, seed, stream = check_multihop(fanouts, seed, stream)
        seeds = self._check_seeds(seeds, fanouts)
        return self._run([seeds], fanouts, bool(replace), [(seed, stream)])[0]

    def sample_group(self, seed_sets: list, fanouts: list[int], *, replace: bool = False,
                     keys: list[tuple[int, int]]) -> list[MultiHopSample]:
        """Return the samples of several seed sets, each drawn under its (seed, stream) in `keys`.

        Each sample is bit-identical to ``sample(seed_sets[b], fanouts, seed=..., stream=...)``;
        what changes is the I/O: at each hop the sets' frontiers are merged (each node once) and
        the entries any of them drew are read from the store once, so a page of a topology file
        that several mini-batches need is read once per group (CaliEX's I/O plan).
        """
        if len(seed_sets) != len(keys):
            raise bad_value("keys", f"{len(keys)} (seed, stream) pairs", f"one per seed set ({len(seed_sets)})")
        fanouts = check_fanouts(fanouts)
        keys = [(check_seed(s), check_seed(t, "stream", per=64)) for s, t in keys]
        sets = [self._check_seeds(s, fanouts, f"seed_sets[{b}]") for b, s in enumerate(seed_sets)]
        return self._run(sets, fanouts, bool(replace), keys)

    def _run(self, sets: list[np.ndarray], fanouts: list[int], replace: bool,
             keys: list[tuple[int, int]]) -> list[MultiHopSample]:
        # A dense workspace maps one walk at a time; a group walks side by side, each with its own table.
        dense = self._local is not None and len(sets) == 1
        walks = [_Walk(s, k, t, self._local if dense else None) for s, (k, t) in zip(sets, keys)]
        everything = self.frontier == "all"
        try:
            for h, k in enumerate(fanouts):
                if self._csr is not None:
                    for w in walks:  # the fast path: draw at indptr[v] + offset, gather in place
                        lo, front = w.frontier(everything)
                        sptr, eid = _sample_hop(self.indptr, front, k, replace, w.seed, w.stream * 64 + h)
                        w.hop(lo, sptr, _gather(self.indices, eid), eid)
                    continue
                self._hop_store(walks, k, h, replace, everything)
        except BaseException:
            for w in walks:
                w.abandon()
            raise
        return [w.finish() for w in walks]

    def _hop_store(self, walks: list[_Walk], k: int, h: int, replace: bool, everything: bool) -> None:
        """One hop through the store: lengths, draws per walk, one ``entries`` read for all of them."""
        fronts = [w.frontier(everything) for w in walks]
        if len(walks) == 1:
            union = fronts[0][1]
            rows = [np.arange(len(union), dtype=np.int64)]
        else:
            union = unique(np.concatenate([f for _, f in fronts]))
            rows = [np.searchsorted(union, f) for _, f in fronts]
        ptr = degree_ptr(np.asarray(self.store.degree(union), np.int64))
        # The kernel over local offsets: ptr is built here from lengths and rows index it, so unchecked.
        draws = [_sample_hop(ptr, r, k, replace, w.seed, w.stream * 64 + h) for w, r in zip(walks, rows)]
        if len(walks) == 1:
            picks = [np.asarray(self.store.entries(union, ptr, draws[0][1]))]
        else:
            pos = unique(np.concatenate([p for _, p in draws]))
            vals = np.asarray(self.store.entries(union, ptr, pos))
            picks = [vals[np.searchsorted(pos, p)] for _, p in draws]
        for w, (lo, _), (sptr, p), nb in zip(walks, fronts, draws, picks):
            eid = (global_positions(self._indptr, union, ptr, p) if self._indptr is not None
                   else np.full(len(p), -1, np.int64))  # a store without a global indptr has no edge ids
            w.hop(lo, sptr, nb.astype(np.int64, copy=False), eid)


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
