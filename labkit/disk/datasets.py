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

Features are streamed chunk by chunk (centroid of the node's community plus Gaussian noise,
noisy enough that one node alone is a poor guess and its neighbourhood a good one). The edge
list itself is streamed twice through the graph core's chunked CSR builder; only the CSR is
held while building.
"""

from __future__ import annotations

import math

import numpy as np

from labkit.core.datasets import DatasetWriter, register_dataset
from labkit.graph.csr import build_csr_chunked
from labkit.graph.rmat import RMatParams, rmat_edge_chunks, rmat_labels

NAME = "caliex"
_STREAM_CENTROIDS = 31
_STREAM_NOISE = 32
_STREAM_SPLIT = 33

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
    """Yield (num_nodes, dim) features in row chunks: community centroid + noise, seeded per chunk."""
    dim, seed = int(p["dim"]), int(p.get("seed", 0))
    dtype = np.dtype(p["dtype"])
    centroids = np.random.default_rng([seed, _STREAM_CENTROIDS]).standard_normal(
        (int(p["communities"]), dim)).astype(np.float32)
    for k, lo in enumerate(range(0, labels.size, chunk_rows)):
        hi = min(lo + chunk_rows, labels.size)
        x = np.random.default_rng([seed, _STREAM_NOISE, k]).standard_normal((hi - lo, dim), dtype=np.float32)
        x *= float(p["noise"])
        x += centroids[labels[lo:hi]]
        yield x.astype(dtype, copy=False)


@register_dataset(NAME, description="R-MAT graph with planted communities, CSC topology and 128-d features "
                  "laid out for direct I/O (CaliEX disk-based GNN training)", profiles=PROFILES, version=1,
                  system="disk")
def build(w: DatasetWriter, p: dict) -> None:
    """Stream the graph to disk: in-edge CSR, degrees, features, labels and splits."""
    rp = rmat_params(p)
    n = rp.num_nodes
    # In-neighbour lists: the builder gets (dst, src) so row v lists the sources of edges into v.
    chunk = 1 << 22
    csc = build_csr_chunked(lambda: ((d, s) for s, d in rmat_edge_chunks(rp, chunk)), n, drop_self_loops=True)
    out_deg = np.bincount(csc.indices, minlength=n).astype(np.int32)
    w.array("indptr", csc.indptr.astype(np.int64))
    with w.stream("indices", np.int32, (), align=4096) as s:
        for lo in range(0, csc.num_edges, chunk):
            s.append(csc.indices[lo:lo + chunk].astype(np.int32, copy=False))
    del csc
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
