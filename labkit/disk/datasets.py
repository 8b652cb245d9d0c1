"""The on-disk graph CaliEX trains on: CSC topology and row-major features, laid out for O_DIRECT.

Built from the graph core's seeded R-MAT generator (planted communities are the labels).
Files (all committed through the dataset registry, with manifest and sha256):

- ``indptr``   int64 [N+1]: small enough to keep in RAM; row v's in-neighbours are
  ``indices[indptr[v]:indptr[v+1]]`` (GNN messages flow along in-edges).
- ``indices``  int32 [E], padded to 4 KiB: stays on disk, read through direct I/O.
- ``features`` float32/float16 [N, dim], padded to 4 KiB: stays on disk.
- ``out_degree`` int32 [N]: what a degree-based (Ginex) neighbour-cache plan ranks by.
- ``labels`` int16 [N], ``train`` / ``val`` int64 node ids.

Profiles (R-MAT scale, 16 edges per node before self-loops are dropped, 128-d float32 features):

- ``ci``: 2^15 = 32k nodes, ~0.5M edges, 16 MiB of features (tests and the notebook);
- ``small``: 2^21 = 2.1M nodes, ~32M edges (128 MiB of indices), 1 GiB of features; the bench
  budget, 15% of the dataset's bytes, is 176 MiB;
- ``large``: 2^23 = 8.4M nodes, ~128M edges (512 MiB of indices; offsets still fit int32), 4 GiB
  of features, about 4.6 GiB on disk; a 15% budget is about 700 MiB. Build it with
  ``labkit data make caliex --profile large`` and bench it with ``labkit bench disk --profile
  large`` (same settings as small). One builder serves every profile (the tests build ci);
  large is not benchmarked in BENCHMARKS.md.

fp16 features (half the bytes; the stores gather them bit for bit, the trainer widens them to
fp32): ``make_dataset("caliex", profile, root=..., params={"dtype": "float16"})``.

Features are streamed in pieces of 8192 rows (centroid of the node's community plus Gaussian
noise, noisy enough that one node alone is a poor guess and its neighbourhood a good one). The
edge list is streamed twice through the graph core's out-of-core builder: once to count degrees
(:func:`count_csc_degrees`), once to scatter each edge straight into the memory-mapped ``indices``
file being built (:func:`scatter_csc_file`), a window of rows at a time, each window's pages
unmapped once written. Neither the edge list nor
``indices`` is ever held in RAM: the build holds O(nodes) arrays (indptr, degrees, cursors), one
edge chunk (twice: as drawn and grouped by window) and one window of ``indices`` mapped.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import sys
from typing import Callable, Iterable

import numpy as np

from labkit.core.datasets import DatasetWriter, register_dataset
from labkit.core.errors import bad_value, check_range
from labkit.graph.csr import check_node_ids, check_num_nodes, count_csr_chunked, scatter_csr_chunked
from labkit.graph.rmat import RMatParams, community_feature_pieces, rmat_edge_chunks, rmat_labels

NAME = "caliex"
_STREAM_CENTROIDS = 31
_STREAM_NOISE = 32
_STREAM_SPLIT = 33
_WINDOW_BYTES = 32 << 20  # indices written per window of rows; the most of the file mapped at once
_PIECE_ROWS = 1 << 13  # feature rows drawn and written at a time (4 MiB at 128 float32)

PROFILES = {
    "ci": {"scale": 15, "edge_factor": 16, "dim": 128, "communities": 16, "noise": 6.0, "dtype": "float32",
           "train_fraction": 0.3, "val_nodes": 1024},
    "small": {"scale": 21, "edge_factor": 16, "dim": 128, "communities": 16, "noise": 6.0, "dtype": "float32",
              "train_fraction": 0.1, "val_nodes": 4096},
    "large": {"scale": 23, "edge_factor": 16, "dim": 128, "communities": 16, "noise": 6.0, "dtype": "float32",
              "train_fraction": 0.05, "val_nodes": 8192},
}


def rmat_params(p: dict) -> RMatParams:
    """The graph core's R-MAT parameters for one profile's params."""
    return RMatParams(scale=int(p["scale"]), edge_factor=int(p["edge_factor"]),
                      num_communities=int(p["communities"]), seed=int(p.get("seed", 0)))


def feature_chunks(p: dict, labels: np.ndarray, chunk_rows: int = 1 << 18):
    """Yield (num_nodes, dim) features in row pieces: community centroid + noise, seeded per chunk.

    Noise is seeded per `chunk_rows` rows and drawn in pieces of at most ``_PIECE_ROWS`` rows
    from that chunk's generator (the same values as one draw per chunk), so only a piece is held.
    """
    dim, seed = int(p["dim"]), int(p.get("seed", 0))
    dtype = np.dtype(p["dtype"])
    centroids = np.random.default_rng([seed, _STREAM_CENTROIDS]).standard_normal(
        (int(p["communities"]), dim)).astype(np.float32)
    for k, lo in enumerate(range(0, labels.size, chunk_rows)):
        rng = np.random.default_rng([seed, _STREAM_NOISE, k])
        for x in community_feature_pieces(labels, centroids, float(p["noise"]), rng, lo,
                                          min(lo + chunk_rows, labels.size), _PIECE_ROWS):
            yield x.astype(dtype, copy=False)


def _csc(chunks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]], num_nodes: int):
    """The stream's edges reversed (dst, src), checked by their names here: the CSC is the reversed CSR."""
    def reversed_chunks():
        for s, d in chunks():
            s, d = check_node_ids("src", np.asarray(s), num_nodes), check_node_ids("dst", np.asarray(d), num_nodes)
            if len(s) != len(d):
                raise ValueError(f"src/dst have lengths {len(s)} and {len(d)}; expected equal lengths")
            yield d, s
    return reversed_chunks


def count_csc_degrees(chunks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
                      num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (indptr, out_degree) of the in-edge structure (CSC) of the edges src -> dst in ``chunks()``.

    Self-loops are dropped. ``indptr`` (int64 [N+1]) bounds each row's in-neighbours;
    ``out_degree`` (int64 [N]) counts each node's kept out-edges. One pass
    (:func:`labkit.graph.csr.count_csr_chunked` of the reversed edges), one chunk held.
    """
    num_nodes = check_num_nodes(num_nodes, 1)
    out_deg = np.zeros(num_nodes, np.int64)
    indptr = count_csr_chunked(_csc(chunks, num_nodes), num_nodes, drop_self_loops=True, column_degree=out_deg)
    return indptr, out_deg


def _drop_pages(mm: mmap.mmap, lo: int, hi: int) -> None:
    """Unmap bytes [lo, hi) of a shared file mapping from this process (the data stays in the file).

    Linux only: there MADV_DONTNEED on a shared file mapping hands dirty pages to the page cache,
    to be written back, and only the process's resident set shrinks.
    """
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    lo -= lo % mmap.PAGESIZE
    hi = min(len(mm), -(-hi // mmap.PAGESIZE) * mmap.PAGESIZE)
    if hi > lo:
        with contextlib.suppress(OSError):
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def scatter_csc_file(chunks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]], indptr: np.ndarray,
                     path: str | os.PathLike, *, align: int = 0, window_bytes: int = _WINDOW_BYTES) -> int:
    """Write the CSC ``indices`` (int32) of the edges in ``chunks()`` into a new file at `path`.

    `indptr` comes from :func:`count_csc_degrees` over the same stream. Row v's in-neighbours
    land at ``indices[indptr[v]:indptr[v+1]]`` in input order, self-loops dropped: the bytes of
    the in-RAM builder's ``indices``, zero-padded to a multiple of `align` bytes. Edges are
    scattered through a memory map of the file one window of about `window_bytes` of rows at a
    time, each window unmapped when written, so the file is never resident as a whole.
    Returns the file's size in bytes.
    """
    indptr = np.asarray(indptr)
    if indptr.ndim != 1 or len(indptr) < 2 or indptr.dtype.kind not in "iu" or indptr[0] != 0 \
            or np.any(indptr[1:] < indptr[:-1]):
        raise bad_value("indptr", f"{indptr.dtype} array of shape {indptr.shape}",
                        "a non-decreasing integer [N+1] array from 0 (see count_csc_degrees)")
    indptr = indptr.astype(np.int64, copy=False)
    n, m = len(indptr) - 1, int(indptr[-1])
    if n > np.iinfo(np.int32).max + 1:
        raise ValueError(f"num_nodes={n} is not accepted; int32 indices need at most {np.iinfo(np.int32).max + 1}")
    check_range("window_bytes", window_bytes, 4, integer=True)
    size = m * 4 + (-(m * 4) % align if align else 0)
    with open(path, "w+b") as fh:
        fh.truncate(size)  # a sparse file of zeros: the padding is already in place
        if m:
            mm = mmap.mmap(fh.fileno(), size)
            try:
                out = np.frombuffer(mm, np.int32, count=m)
                # A stream that does not replay the counted one raises BadInput (a ValueError).
                scatter_csr_chunked(_csc(chunks, n), indptr, out, drop_self_loops=True,
                                    window_edges=max(1, window_bytes // 4),
                                    written=lambda lo, hi: _drop_pages(mm, 4 * lo, 4 * hi))
                del out
                mm.flush()
            finally:
                with contextlib.suppress(BufferError):  # an exception's frames may still hold `out`
                    mm.close()
        os.fsync(fh.fileno())
    return size


@register_dataset(NAME, description="R-MAT graph with planted communities, CSC topology and 128-d features "
                  "laid out for direct I/O (CaliEX disk-based GNN training)", profiles=PROFILES, version=1,
                  system="disk")
def build(w: DatasetWriter, p: dict) -> None:
    """Stream the graph to disk: in-edge CSR, degrees, features, labels and splits."""
    rp = rmat_params(p)
    n = rp.num_nodes
    # In-neighbour lists (row v lists the sources of edges into v), streamed twice; the second
    # pass writes straight into the indices file.
    def edges():
        return rmat_edge_chunks(rp, 1 << 22)

    indptr, out_deg = count_csc_degrees(edges, n)
    out_deg = out_deg.astype(np.int32)
    w.array("indptr", indptr)
    path = w.path("indices", ".bin", shape=[int(indptr[-1])], dtype=np.dtype(np.int32).str, align=4096)
    scatter_csc_file(edges, indptr, path, align=4096)
    del indptr
    w.array("out_degree", out_deg)
    labels = rmat_labels(rp)
    w.array("labels", labels.astype(np.int16))
    with w.stream("features", np.dtype(p["dtype"]), (int(p["dim"]),), align=4096) as s:
        for x in feature_chunks(p, labels):
            s.append(x)
    perm = np.random.default_rng([int(p.get("seed", 0)), _STREAM_SPLIT]).permutation(n)
    n_val = min(int(p["val_nodes"]), n // 10)
    n_train = int(math.floor(float(p["train_fraction"]) * n))
    w.array("val", np.sort(perm[:n_val]).astype(np.int64))
    w.array("train", perm[n_val:n_val + n_train].astype(np.int64))
    w.meta.update(num_nodes=n, num_edges=int(out_deg.sum()), dim=int(p["dim"]),
                  num_classes=int(p["communities"]), feature_dtype=str(np.dtype(p["dtype"])))
