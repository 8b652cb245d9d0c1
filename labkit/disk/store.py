"""Where the graph's bytes live: in RAM, or on disk behind caches and the direct-I/O engine.

Both implement the graph core's store protocols (:mod:`labkit.graph.storage`), so the one
sampler (:class:`labkit.graph.sampling.NeighborSampler`), the PyG adapters and the trainers read
them as they read an in-memory or a partitioned store:

- a topology store is a ``GraphStore``: ``degree(nodes)`` from ``indptr`` (in RAM),
  ``entries(nodes, ptr, pos)`` for only the sampled entries, ``neighbors(nodes)`` (= ``fetch``)
  for whole lists;
- a feature store is a ``FeatureStore``: ``features(nodes)`` (= ``gather``) returns the feature
  rows of `nodes` in order; the pipeline also splits a gather into ``fetch_misses`` + ``complete``.

The disk versions hold ``indptr`` (charged to the budget), an optional cache, and an
:class:`IOPolicy` that decides per request how the cache misses are fetched: random page
reads, coalesced reads, or a sequential sweep, from a :class:`~labkit.disk.costmodel.DiskModel`
fitted to the measured disk.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numba
import numpy as np

from labkit.core.buffers import BufferPool
from labkit.core.cacheplan import CacheStats as StoreStats  # lookups served from cache vs. disk
from labkit.core.datasets import Dataset
from labkit.core.directio import PAGE, SWEEP, DirectFile, extent_pages
from labkit.disk.costmodel import DiskModel
from labkit.core.errors import check_choice
from labkit.core.memory import MemoryBudget
from labkit.disk.iocache import BeladyFeatureCache, FeatureCache
from labkit.graph.cache import ListCache
from labkit.graph.csr import check_node_ids
from labkit.graph.storage import check_ids, entry_rows, lists_ptr

MODES = ("random", "coalesced", "sweep", "auto")


def check_indptr(ds: Dataset, indptr: np.ndarray) -> None:
    """Raise DatasetError unless `indptr` is a valid CSR offset array over the dataset's indices file.

    A dataset opened with ``full_verify=False`` is checked by file size only; offsets damaged in
    place would send reads past the end of the indices file or give lists of negative length,
    so the one array every disk system loads is checked here: starts at 0, never decreases, ends
    at the number of indices. In chunks, so the check holds no second array over all nodes.
    """
    from labkit.core.datasets import DatasetError
    n_idx = int(ds.info("indices")["shape"][0])
    bad = indptr.size == 0 or int(indptr[0]) != 0 or int(indptr[-1]) != n_idx
    step = 1 << 22
    for lo in range(0, indptr.size - 1, step):
        if bad:
            break
        c = indptr[lo:lo + step + 1]
        bad = bool((c[1:] < c[:-1]).any())
    if bad:
        raise DatasetError(f"{ds.path('indptr')} is corrupted (its offsets are not a CSR index over the "
                           f"{n_idx} entries of {ds.path('indices').name}); rebuild it with: labkit data make "
                           f"{ds.name} --profile {ds.profile} --force")


def staging_for(budget: MemoryBudget, share: int = 16, most: int = 8 << 20) -> int:
    """Staging bytes for one file: 1/`share` of the budget, within [256 KiB, `most`], page-aligned."""
    return max(256 << 10, min(most, budget.total // share)) // PAGE * PAGE


def _open_file(path, budget: MemoryBudget, owner: str, queue_depth: int, staging_bytes: int | None,
               fallback: bool, most: int) -> DirectFile:
    st = staging_for(budget, most=most) if staging_bytes is None else staging_bytes
    return DirectFile(path, queue_depth=queue_depth, staging_bytes=st, sweep_request=min(1 << 20, st),
                      max_request=min(256 << 10, st), budget=budget, owner=owner, fallback=fallback)


@dataclass
class IOPolicy:
    """How cache misses are read: a fixed mode, or "auto" (cheapest plan under the disk model)."""

    mode: str = "auto"
    model: DiskModel = field(default_factory=DiskModel)
    choices: dict = field(default_factory=dict)
    predicted: float = 0.0  # model seconds of the plans chosen (auto mode), to calibrate against

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, MODES)

    def gap(self, starts: np.ndarray, lengths: np.ndarray, f: DirectFile) -> int:
        """Return the gap (pages) to read these extents with, and count the mode chosen."""
        if self.mode == "random":
            g, mode = 0, "random"
        elif self.mode == "coalesced":
            g, mode = max(1, self.model.break_even_gap), "coalesced"
        elif self.mode == "sweep":
            g, mode = SWEEP, "sweep"
        else:
            pages = extent_pages(starts, lengths, PAGE)
            g, t, mode = self.model.best_gap(pages, f.max_request, f.sweep_request)
            self.predicted += t
        self.choices[mode] = self.choices.get(mode, 0) + 1
        return g


class MemoryTopology:
    """All neighbour lists in RAM (the in-memory upper bound); reads are counted as cache hits."""

    #: Sampled through ``entries`` (not the fused in-RAM kernels) so that its reads are counted.
    counts_reads = True

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices
        self.num_nodes = indptr.size - 1
        self.stats = StoreStats()

    @classmethod
    def from_dataset(cls, ds: Dataset) -> "MemoryTopology":
        return cls(ds.array("indptr", mmap=False), ds.array("indices", mmap=False))

    def degree(self, nodes: np.ndarray) -> np.ndarray:
        """Return the lengths of the lists of `nodes` (int64)."""
        nodes = check_ids(nodes, self.num_nodes)
        return (self.indptr[nodes + 1] - self.indptr[nodes]).astype(np.int64)

    def fetch(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, idx): the neighbour lists of `nodes` as a local CSR."""
        from labkit.graph.storage import gather_lists
        ptr, idx = gather_lists(self.indptr, self.indices, check_ids(nodes, self.num_nodes))
        self.stats.hits += nodes.size
        self.stats.hit_bytes += idx.nbytes
        return ptr, idx

    neighbors = fetch

    def entries(self, nodes: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Return the entries at local positions `pos` of `nodes`' lists (local offsets `ptr`)."""
        row = entry_rows(ptr, pos)
        out = self.indices[self.indptr[nodes[row]] + (pos - ptr[row])]
        self.stats.hits += pos.size
        self.stats.hit_bytes += out.nbytes
        return out

    def close(self) -> None:
        pass


class DiskTopology:
    """Neighbour lists on disk (int32 ``indices`` file), an optional list cache in front.

    The cache is the graph core's :class:`~labkit.graph.cache.ListCache`, filled from the file.
    """

    def __init__(self, ds: Dataset, budget: MemoryBudget, *, policy: IOPolicy | None = None,
                 queue_depth: int = 8, staging_bytes: int | None = None, fallback: bool = False) -> None:
        ip = ds.array("indptr", mmap=False)
        check_indptr(ds, ip)
        # Offsets below 2^31 fit int32: half the RAM for the one array every disk system holds.
        self.indptr = ip.astype(np.int32) if ip.size and int(ip[-1]) < 2**31 else ip
        del ip
        self.num_nodes = self.indptr.size - 1
        self._indptr_res = budget.reserve("topology indptr", self.indptr.nbytes)
        try:
            self.file = _open_file(ds.path("indices"), budget, "topology staging", queue_depth, staging_bytes,
                                   fallback, 4 << 20)
        except BaseException:
            self._indptr_res.release()  # no phantom bytes left behind for a retry on the same budget
            raise
        self.policy = policy or IOPolicy("random")
        self._lock = threading.Lock()
        self.cache: ListCache | None = None
        self.stats = StoreStats()
        self.budget = budget

    def set_cache(self, nodes: np.ndarray | None) -> None:
        """Replace the cache with the lists of `nodes` (None: no cache), read once from disk."""
        if self.cache is not None:
            self.cache.release()
            self.cache = None
        if nodes is not None:
            self.cache = ListCache(nodes, self.indptr, self._read_lists, budget=self.budget, owner="topology cache")

    def _read_lists(self, nodes: np.ndarray, gap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        ptr = lists_ptr(self.indptr, nodes)
        starts = self.indptr[nodes].astype(np.int64) * 4
        lengths = (ptr[1:] - ptr[:-1]) * 4
        if gap is None:
            gap = SWEEP if nodes.size > 4096 else 0  # cache fill: bulk, sorted
        raw = self.file.read_extents(starts, lengths, gap_pages=gap)
        return ptr, raw.view(np.int32)

    def degree(self, nodes: np.ndarray) -> np.ndarray:
        """Return the lengths of the lists of `nodes` (int64, from ``indptr`` in RAM: no read)."""
        nodes = check_ids(nodes, self.num_nodes)
        return (self.indptr[nodes + 1] - self.indptr[nodes]).astype(np.int64)

    def fetch(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, idx): the neighbour lists of `nodes`, from the cache or from disk."""
        nodes = check_ids(nodes, self.num_nodes)
        ptr = lists_ptr(self.indptr, nodes)
        cache = self.cache
        miss = nodes if cache is None else nodes[~cache.split(nodes)]
        if miss.size == nodes.size and miss.size:
            # Nothing cached: the lists come back from disk already in order (no second copy).
            starts = self.indptr[nodes].astype(np.int64) * 4
            with self._lock:
                gap = self.policy.gap(starts, (ptr[1:] - ptr[:-1]) * 4, self.file)
            _, idx = self._read_lists(nodes, gap)
            with self._lock:
                self.stats.misses += nodes.size
                self.stats.miss_bytes += idx.nbytes
            return ptr, idx
        idx = np.empty(int(ptr[-1]), np.int32)
        if miss.size:
            starts = self.indptr[miss].astype(np.int64) * 4
            lengths = (self.indptr[miss + 1] - self.indptr[miss]).astype(np.int64) * 4
            with self._lock:  # several sampler threads may share this store
                gap = self.policy.gap(starts, lengths, self.file)
            mptr, midx = self._read_lists(miss, gap)
        else:
            mptr, midx = np.zeros(1, np.int64), np.zeros(0, np.int32)
        if cache is not None:  # else there are no nodes: nothing to place
            cache.assemble(nodes, mptr, midx, ptr, idx)
        with self._lock:
            self.stats.hits += nodes.size - miss.size
            self.stats.misses += miss.size
            self.stats.miss_bytes += midx.nbytes
            self.stats.hit_bytes += idx.nbytes - midx.nbytes
        return ptr, idx

    def neighbors(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, idx): the whole lists of `nodes` (the GraphStore name of :meth:`fetch`)."""
        return self.fetch(nodes)

    def entries(self, nodes: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Return the entries at local positions `pos` of `nodes`' lists (local offsets `ptr`).

        Only the sampled entries are fetched: from the cache where their node's list is cached,
        else from disk, as 4-byte extents the policy reads page by page, coalesced, or in a
        sweep (a hub's long list costs the pages its sampled entries lie in, not all of them).
        """
        row = entry_rows(ptr, pos)
        v = nodes[row]
        off = pos - ptr[row]
        glob = self.indptr[v].astype(np.int64) + off
        out = np.empty(pos.size, np.int32)
        if self.cache is not None:
            miss = np.flatnonzero(~self.cache.pick(v, off, out))
        else:
            miss = None
        mpos = glob if miss is None else glob[miss]
        if mpos.size:
            starts = mpos * 4
            with self._lock:  # several sampler threads may share this store
                gap = self.policy.gap(starts, np.full(mpos.size, 4, np.int64), self.file)
            vals = self.file.read_rows(mpos, 4, gap_pages=gap).view(np.int32).reshape(-1)
            if miss is None:
                out = vals
            else:
                out[miss] = vals
        with self._lock:
            self.stats.hits += pos.size - mpos.size
            self.stats.misses += mpos.size
            self.stats.hit_bytes += (pos.size - mpos.size) * 4
            self.stats.miss_bytes += mpos.size * 4
        return out

    def close(self) -> None:
        self.set_cache(None)
        self.file.close()
        self._indptr_res.release()


@dataclass
class PartialRows:
    """A gathered batch before its cached rows are copied in: node ids, cache slots, disk rows."""

    nodes: np.ndarray
    slot: np.ndarray | None
    miss_pos: np.ndarray
    rows: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.miss_pos.nbytes + (self.slot.nbytes if self.slot is not None else 0)


def _bits(a: np.ndarray) -> np.ndarray:
    """`a` as numba can copy it: float16 rows as their uint16 bit patterns (numba has no float16)."""
    return a.view(np.uint16) if a.dtype == np.float16 else a


@numba.njit(nogil=True, cache=True)
def _gather_rows(x, nodes, out):
    """out[i] = x[nodes[i]], one pass."""
    d = x.shape[1]
    for i in range(nodes.shape[0]):
        r = nodes[i]
        for j in range(d):
            out[i, j] = x[r, j]


@numba.njit(nogil=True, cache=True)
def _merge_rows(slot, cached, miss_pos, disk_rows, out):
    """out[i] = disk_rows[k] where miss_pos[k] == i (ascending), else cached[slot[i]]; one pass."""
    d = out.shape[1]
    k = 0
    nm = miss_pos.shape[0]
    for i in range(slot.shape[0]):
        if k < nm and miss_pos[k] == i:
            for j in range(d):
                out[i, j] = disk_rows[k, j]
            k += 1
        else:
            s = slot[i]
            for j in range(d):
                out[i, j] = cached[s, j]


class MemoryFeatures:
    """All feature rows in RAM (the in-memory upper bound)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self.stats = StoreStats()
        self._out = BufferPool(keep=6)  # reused batch arrays, as the disk stores' (see labkit.core.buffers)

    @classmethod
    def from_dataset(cls, ds: Dataset) -> "MemoryFeatures":
        return cls(ds.array("features", mmap=False))

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def dim(self) -> int:
        return self.x.shape[1]

    def gather(self, nodes: np.ndarray) -> np.ndarray:
        # The copy kernel does not bounds-check, so the ids are checked here (x[nodes] did it before).
        nodes = check_node_ids("nodes", nodes, self.x.shape[0]).astype(np.int64, copy=False)
        out = self._out.take((nodes.size, self.x.shape[1]), self.x.dtype)
        _gather_rows(_bits(self.x), nodes, _bits(out))
        self.stats.hits += nodes.size
        self.stats.hit_bytes += out.nbytes
        return out

    def features(self, nodes: np.ndarray) -> np.ndarray:
        """Return the feature rows of `nodes` (the FeatureStore name of :meth:`gather`; a fresh array)."""
        return self.gather(check_ids(nodes, self.num_nodes)).copy()

    def close(self) -> None:
        pass


class DiskFeatures:
    """Feature rows on disk, read through direct I/O, with an optional static or Belady cache."""

    def __init__(self, ds: Dataset, budget: MemoryBudget, *, policy: IOPolicy | None = None,
                 queue_depth: int = 8, staging_bytes: int | None = None, fallback: bool = False) -> None:
        info = ds.info("features")
        self.num_nodes, self._dim = int(info["shape"][0]), int(info["shape"][1])
        self.dtype = np.dtype(info["dtype"])
        self.row_bytes = self._dim * self.dtype.itemsize
        self.file = _open_file(ds.path("features"), budget, "feature staging", queue_depth, staging_bytes,
                               fallback, 8 << 20)
        self.policy = policy or IOPolicy("random")
        self.cache: FeatureCache | BeladyFeatureCache | None = None
        self.stats = StoreStats()
        self.budget = budget
        # The trainer's batch arrays, reused once trained (outside the budget, like the batch itself).
        self._out = BufferPool(keep=6)

    @property
    def dim(self) -> int:
        return self._dim

    def read(self, nodes: np.ndarray, gap: int = 0) -> np.ndarray:
        """Return rows of `nodes` straight from disk (no cache)."""
        raw = self.file.read_rows(nodes, self.row_bytes, gap_pages=gap)
        return raw.view(self.dtype).reshape(nodes.size, self._dim)

    def set_cache(self, nodes: np.ndarray | None = None, *, belady_rows: int | None = None) -> None:
        """Cache the rows of `nodes` (static plan), or set up a Belady cache of `belady_rows` rows."""
        if self.cache is not None:
            self.cache.release()
            self.cache = None
        if belady_rows is not None:
            self.cache = BeladyFeatureCache(belady_rows, self.num_nodes, self._dim, self.dtype, self.budget)
        elif nodes is not None:
            self.cache = FeatureCache(nodes, self.num_nodes, self._dim, self.dtype, self.budget,
                                      lambda v: self.read(v, SWEEP if v.size > 4096 else 0))

    def fetch_misses(self, nodes: np.ndarray) -> "PartialRows":
        """Read from disk the rows of `nodes` the cache lacks; cached rows are copied in later.

        The pipeline's gather stage calls this, so a gathered batch waiting in the queue holds
        only the rows that came from disk (the bytes the budget must reserve for it), and
        :meth:`complete` fills in the cached rows when the batch is consumed.
        """
        if self.cache is not None:
            slot = self.cache.lookup(nodes)
            miss_pos = np.flatnonzero(slot < 0)
        else:
            slot = None
            miss_pos = np.arange(nodes.size)
        miss = nodes[miss_pos]
        if miss.size:
            starts = miss.astype(np.int64) * self.row_bytes
            gap = self.policy.gap(starts, np.full(miss.size, self.row_bytes, np.int64), self.file)
            rows = self.read(miss, gap)
        else:
            rows = np.zeros((0, self._dim), self.dtype)
        self.stats.hits += nodes.size - miss.size
        self.stats.misses += miss.size
        self.stats.hit_bytes += (nodes.size - miss.size) * self.row_bytes
        self.stats.miss_bytes += miss.size * self.row_bytes
        return PartialRows(nodes, slot, miss_pos, rows)

    def complete(self, part: "PartialRows") -> np.ndarray:
        """Return all rows of `part.nodes` in order: its disk rows plus the cached ones."""
        if part.slot is None:
            return part.rows  # no cache: every row came from disk, already in order
        out = self._out.take((part.nodes.size, self._dim), self.dtype)
        _merge_rows(part.slot, _bits(self.cache.rows), part.miss_pos, _bits(part.rows), _bits(out))
        return out

    def gather(self, nodes: np.ndarray, next_use: np.ndarray | None = None) -> np.ndarray:
        """Return the feature rows of `nodes` (in order): cache hits copied, misses read from disk.

        `next_use` (a Belady cache only): each node's next use in the superbatch, from Ginex's
        inspection pass (:class:`labkit.disk.baselines.spill.SampleSpill`).
        """
        if isinstance(self.cache, BeladyFeatureCache):
            part = self.fetch_misses(nodes)
            out = self.complete(part)
            self.cache.update(nodes, out, next_use)
            return out
        return self.complete(self.fetch_misses(nodes))

    def features(self, nodes: np.ndarray) -> np.ndarray:
        """Return the feature rows of `nodes` (the FeatureStore name of :meth:`gather`; a fresh array)."""
        return self.gather(check_ids(nodes, self.num_nodes)).copy()

    def close(self) -> None:
        self.set_cache(None)
        self.file.close()
