"""TRAVERSE: shuffled batches of vertices or edges, epoch after epoch, deterministic per (seed, epoch).

Store needs: vertex batches need only ids (any store's ``num_nodes``); edge batches walk every
edge position, so they need the CSR in RAM (``indptr``, ``indices``), as :func:`edge_batches` takes it.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from labkit.core.errors import bad_value, check_range, check_seed
from labkit.graph.csr import CSR

#: Random streams per epoch: batch b of epoch e samples with stream ``e * EPOCH_STREAMS + b``, so
#: no batch of any epoch repeats another's draws (an epoch has far fewer than 2**32 batches).
EPOCH_STREAMS = 2**32


def check_epoch(epoch) -> int:
    """Return `epoch` as an int if its batches' streams (:func:`batch_stream`, 64 per hop) fit the kernels' keys."""
    return check_seed(epoch, "epoch", per=EPOCH_STREAMS * 64)


def batch_stream(epoch: int, batch: int) -> int:
    """The random stream batch `batch` of epoch `epoch` samples with (distinct for every pair)."""
    if not 0 <= batch < EPOCH_STREAMS:
        raise bad_value("batch", batch, f"a batch index in [0, {EPOCH_STREAMS}): an epoch of fewer batches")
    return epoch * EPOCH_STREAMS + batch


def node_batches(ids: np.ndarray, batch_size: int, *, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                 drop_last: bool = False) -> Iterator[np.ndarray]:
    """Yield int64 batches of `ids`, reshuffled each epoch from (seed, epoch) when `shuffle`.

    The arguments are checked when it is called, before the first batch is asked for.
    """
    check_range("batch_size", batch_size, 1, integer=True)
    seed, epoch = check_seed(seed), check_seed(epoch, "epoch")
    ids = np.asarray(ids)
    if ids.ndim != 1 or (len(ids) and ids.dtype.kind not in "iu"):
        raise bad_value("ids", f"array of shape {ids.shape} and dtype {ids.dtype}", "a 1-d integer array of ids")
    return _node_batches(ids.astype(np.int64, copy=False), int(batch_size), shuffle, seed, epoch, drop_last)


def _node_batches(ids: np.ndarray, batch_size: int, shuffle: bool, seed: int, epoch: int, drop_last: bool):
    if shuffle:
        ids = ids[np.random.default_rng([seed, epoch]).permutation(len(ids))]
    stop = len(ids) - (len(ids) % batch_size if drop_last else 0)
    for lo in range(0, stop, batch_size):
        yield ids[lo:lo + batch_size]


def edge_batches(csr: CSR, batch_size: int, *, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                 drop_last: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (src, dst, edge position) batches over all edges of `csr`, shuffled per epoch.

    Each edge comes once per epoch; its position p indexes ``csr.indices``, ``csr.eid`` and
    ``csr.weights``. This is the edge TRAVERSE behind ``Graph.E()``. The arguments are checked
    when it is called.
    """
    batches = node_batches(np.arange(csr.num_edges), batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                           drop_last=drop_last)
    return _edge_batches(csr, batches)


def _edge_batches(csr: CSR, batches):
    src_of = np.repeat(np.arange(csr.num_nodes, dtype=np.int64), csr.degree()) if csr.num_edges else \
        np.empty(0, np.int64)
    for pos in batches:
        yield src_of[pos], csr.indices[pos].astype(np.int64), pos
