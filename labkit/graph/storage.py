"""Where a graph's bytes live: the store protocols every sampler, loader and trainer reads through.

PyG splits a graph's storage from its sampling and its loading (``torch_geometric.data.GraphStore``
/ ``FeatureStore``, ``BaseSampler``, ``NodeLoader``); labkit does the same, so the in-memory CSR
(:class:`~labkit.graph.store.LocalStore`), the partitioned store served by Dask workers
(:class:`~labkit.graph.store.PartitionedStore`) and CaliEX's on-disk stores
(:mod:`labkit.disk.store`) are interchangeable behind two protocols:

- :class:`GraphStore`: neighbour lists. ``degree(ids)`` is cheap (list lengths, held close:
  RAM, or the client side of a partitioned store), so a sampler draws *positions* from lengths
  first and then asks ``entries(ids, ptr, pos)`` for only the sampled entries (a hub's long
  list on disk costs the pages its sampled entries lie in). ``neighbors(ids)`` returns whole lists.
- :class:`FeatureStore`: feature rows, ``features(ids)``.

A store whose neighbour lists are one in-RAM CSR also exposes ``indptr`` and ``indices`` arrays;
the sampler then runs its fused kernels on them (positions drawn and gathered in place). A store
with a global ``indptr`` (in RAM or on disk) lets the sampler report global edge positions.
Every method takes int node ids in ``[0, num_nodes)`` and raises a one-line
:class:`~labkit.core.errors.BadInput` otherwise (:func:`check_ids`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from numba import njit, prange

from labkit.graph.csr import check_node_ids

#: Below this many sampled items a kernel runs on one thread: a mini-batch hop is ~1 ms of work,
#: and on a shared, oversubscribed machine each parallel region's barrier can cost more than that.
PARALLEL_MIN_WORK = 1 << 16


@njit(nogil=True, cache=True)
def _list_ptr(indptr, rows):
    ptr = np.empty(len(rows) + 1, np.int64)
    ptr[0] = 0
    for i in range(len(rows)):
        ptr[i + 1] = ptr[i] + indptr[rows[i] + 1] - indptr[rows[i]]
    return ptr


@njit(nogil=True, cache=True)
def _gather_lists_serial(indptr, indices, rows, ptr, out):
    for i in range(len(rows)):
        lo = indptr[rows[i]]
        for j in range(ptr[i + 1] - ptr[i]):
            out[ptr[i] + j] = indices[lo + j]


@njit(parallel=True, nogil=True, cache=True)
def _gather_lists_parallel(indptr, indices, rows, ptr, out):
    for i in prange(len(rows)):
        lo = indptr[rows[i]]
        for j in range(ptr[i + 1] - ptr[i]):
            out[ptr[i] + j] = indices[lo + j]


def gather_lists(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (ptr, nbrs): the neighbour lists of `rows` packed as a sub-CSR in row order."""
    rows = np.asarray(rows, np.int64)
    ptr = _list_ptr(indptr, rows)
    out = np.empty(ptr[-1], indices.dtype)
    f = _gather_lists_parallel if len(out) >= PARALLEL_MIN_WORK else _gather_lists_serial
    f(indptr, indices, rows, ptr, out)
    return ptr, out


@runtime_checkable
class GraphStore(Protocol):
    """Neighbour lists of `num_nodes` nodes, addressed by node id."""

    num_nodes: int

    def degree(self, ids: np.ndarray) -> np.ndarray:
        """Return the int64 lengths of the lists of `ids` (cheap: no entries are read)."""

    def neighbors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (ptr, nbrs): the whole lists of `ids`, packed as a local CSR in the order given."""

    def entries(self, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Return the entries at local positions `pos` of the lists of `ids` (`ptr` from their degrees)."""

    def close(self) -> None:
        """Release files, caches and budget reservations (idempotent for in-memory stores)."""


@runtime_checkable
class FeatureStore(Protocol):
    """Feature rows of `num_nodes` nodes, `dim` columns each."""

    num_nodes: int

    @property
    def dim(self) -> int:
        """Return the number of feature columns."""

    def features(self, ids: np.ndarray) -> np.ndarray:
        """Return the feature rows of `ids`, in order."""

    def close(self) -> None:
        """Release files, caches and budget reservations."""


def check_ids(ids, num_nodes: int, arg: str = "ids") -> np.ndarray:
    """Return `ids` as int64 if they are a 1-d array of node ids in [0, num_nodes), else raise (one line)."""
    from labkit.core.errors import bad_value
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise bad_value(arg, f"an array of shape {ids.shape}", "a 1-D array of node ids")
    return check_node_ids(arg, ids, num_nodes).astype(np.int64, copy=False)


def lists_ptr(indptr: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Return the local offsets of the lists of `ids` in a CSR with offsets `indptr` (int64, len(ids) + 1)."""
    ptr = np.zeros(ids.size + 1, np.int64)
    np.cumsum(indptr[ids + 1] - indptr[ids], out=ptr[1:])
    return ptr


def degree_ptr(degrees: np.ndarray) -> np.ndarray:
    """Return the local offsets (int64, len(degrees) + 1) of lists of the given lengths."""
    ptr = np.zeros(degrees.size + 1, np.int64)
    np.cumsum(degrees, out=ptr[1:])
    return ptr


def entry_rows(ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Return, for each position `pos` into a local CSR with offsets `ptr`, the row it lies in."""
    return np.searchsorted(ptr, pos, side="right") - 1


def global_positions(indptr: np.ndarray, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Return the positions in the whole graph's edge array of local positions `pos` of the lists of `ids`."""
    row = entry_rows(ptr, pos)
    return indptr[ids[row]].astype(np.int64) + (pos - ptr[row])


def entries_from_neighbors(store, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The default ``entries``: fetch the whole lists of `ids`, keep the sampled positions.

    A store that can read single entries (a disk file, a CSR in RAM) does better; a remote one
    ships whole lists in one round either way, so this costs it nothing extra.
    """
    _, nbrs = store.neighbors(ids)
    return nbrs[pos]


def in_memory_csr(store) -> tuple[np.ndarray, np.ndarray] | None:
    """Return (indptr, indices) when `store`'s lists are one CSR in RAM (the sampler's fused path), else None."""
    indptr, indices = getattr(store, "indptr", None), getattr(store, "indices", None)
    if isinstance(indptr, np.ndarray) and isinstance(indices, np.ndarray) and not getattr(store, "counts_reads",
                                                                                         False):
        return indptr, indices
    return None


class CSRTopology:
    """Neighbour lists held as one CSR in RAM (``indptr``, ``indices``): the in-memory :class:`GraphStore`.

    The sampler reads its arrays directly (fused kernels); the methods serve every other reader.
    Row ids are checked against ``len(indptr) - 1``; the arrays themselves are the caller's
    (:class:`~labkit.graph.sampling.NeighborSampler` checks them once when it wraps them).
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.indptr, self.indices = indptr, indices
        self.num_nodes = len(indptr) - 1

    def degree(self, ids: np.ndarray) -> np.ndarray:
        ids = check_ids(ids, self.num_nodes)
        return (self.indptr[ids + 1] - self.indptr[ids]).astype(np.int64, copy=False)

    def neighbors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return gather_lists(self.indptr, self.indices, check_ids(ids, self.num_nodes))

    def entries(self, ids: np.ndarray, ptr: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return self.indices[global_positions(self.indptr, ids, ptr, pos)]

    def close(self) -> None:
        pass
