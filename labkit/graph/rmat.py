"""Seeded R-MAT graphs (Graph500 parameters) with planted communities, streamed in chunks.

Edge ``e`` is a pure function of ``(seed, e)`` (a counter-based hash per edge), so any range of
edges can be generated on its own, in any chunk size, in parallel, and twice over (a two-pass
out-of-core build re-streams the same edges); the whole edge list is never held unless asked.

Communities: R-MAT is generated over "raw" ids; the community of a raw id is its low
``log2(num_communities)`` bits. With probability ``p_intra`` an edge's destination is moved into
the source's community (its low bits replaced, its high bits, and so most of its degree skew,
kept). Raw ids are then relabelled with a seeded bijection (Graph500's vertex scrambling), so
hubs are spread over the id space.

Graph500 uses one scrambling for both ends of an edge, so a vertex's in- and out-degree are
strongly correlated (about 0.93 in log degree). ``split_roles=True`` scrambles the destination
role's high bits with a second bijection (community bits kept), making in- and out-degree
independent draws, as in user-item graphs where popular items are not active users; that
asymmetry is what AliGraph's importance Imp = D_in / D_out ranks. Node labels are the communities, and
:func:`rmat_features` gives noisy class-centred features, so a GNN that aggregates neighbours
beats one that does not and accuracy means something.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from numba import njit, prange

from labkit.core.errors import bad_value, check_range
from labkit.graph.rng import GOLDEN, mix64, stream_key

_STREAM_EDGES = 1
_STREAM_FEATURES = 2


@dataclass(frozen=True)
class RMatParams:
    """Everything that fixes an R-MAT graph: size, Graph500 quadrant probabilities, communities, seed."""

    scale: int
    edge_factor: int = 16
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    num_communities: int = 16
    p_intra: float = 0.8
    seed: int = 0
    split_roles: bool = False

    def __post_init__(self) -> None:
        check_range("scale", self.scale, 1, 40, integer=True)
        check_range("edge_factor", self.edge_factor, 1, integer=True)
        for name in ("a", "b", "c", "p_intra"):
            check_range(name, getattr(self, name), 0.0, 1.0)
        if self.a + self.b + self.c > 1.0:
            raise bad_value("a+b+c", self.a + self.b + self.c, "a sum of at most 1 (d = 1 - a - b - c)")
        nc = self.num_communities
        if not isinstance(nc, int) or nc < 1 or nc & (nc - 1) or nc > self.num_nodes:
            raise bad_value("num_communities", nc, f"a power of two in [1, {self.num_nodes}]")
        check_range("seed", self.seed, 0, 2**63 - 1, integer=True)

    @property
    def num_nodes(self) -> int:
        return 1 << self.scale

    @property
    def num_edges(self) -> int:
        return self.edge_factor << self.scale

    @property
    def id_dtype(self) -> np.dtype:
        """int32 while ids fit (half the bytes of int64), else int64."""
        return np.dtype(np.int32 if self.scale < 31 else np.int64)


@njit(inline="always", cache=True)
def _scramble(x, scale, k1, k2):
    """Return a seeded bijection of x on [0, 2**scale) (multiply by odd, add, xorshift; twice)."""
    mask = (np.uint64(1) << np.uint64(scale)) - np.uint64(1)
    half = np.uint64(max(scale // 2, 1))
    x = np.uint64(x)
    x = (x * (k1 | np.uint64(1)) + k2) & mask
    x ^= x >> half
    x = (x * (k2 | np.uint64(1)) + k1) & mask
    x ^= x >> half
    return x


@njit(parallel=True, nogil=True, cache=True)
def _rmat_range(start, stop, scale, a, b, c, comm_bits, p_intra, seed, split_roles, src, dst):
    ab = a + b
    abc = a + b + c
    k1 = mix64(np.uint64(seed) ^ np.uint64(0x5CA1AB1E))
    k2 = mix64(np.uint64(seed) ^ np.uint64(0xC0FFEE))
    cmask = (np.uint64(1) << np.uint64(comm_bits)) - np.uint64(1)
    inv53 = 1.0 / 9007199254740992.0
    for i in prange(stop - start):
        st = stream_key(seed, 1, start + i)
        u = np.uint64(0)
        v = np.uint64(0)
        for lvl in range(scale):
            st += GOLDEN
            r = float(mix64(st) >> np.uint64(11)) * inv53
            bit = np.uint64(1) << np.uint64(scale - 1 - lvl)
            if r >= ab:
                u |= bit
                if r >= abc:
                    v |= bit
            elif r >= a:
                v |= bit
        st += GOLDEN
        if float(mix64(st) >> np.uint64(11)) * inv53 < p_intra:
            v = (v & ~cmask) | (u & cmask)
        if split_roles and scale > comm_bits:
            v = (_scramble(v >> np.uint64(comm_bits), scale - comm_bits, k2, k1) << np.uint64(comm_bits)) | (v & cmask)
        src[i] = _scramble(u, scale, k1, k2)
        dst[i] = _scramble(v, scale, k1, k2)


def rmat_edge_chunks(params: RMatParams, chunk_edges: int = 1 << 22, *, start: int = 0,
                     stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (src, dst) arrays of at most `chunk_edges` edges each, edges [start, stop) in order.

    Never holds more than one chunk; the same params give the same edges whatever the chunk size.
    """
    check_range("chunk_edges", chunk_edges, 1, integer=True)
    stop = params.num_edges if stop is None else stop
    check_range("start", start, 0, params.num_edges, integer=True)
    check_range("stop", stop, start, params.num_edges, integer=True)
    comm_bits = int(math.log2(params.num_communities))
    for lo in range(start, stop, chunk_edges):
        hi = min(lo + chunk_edges, stop)
        src = np.empty(hi - lo, params.id_dtype)
        dst = np.empty(hi - lo, params.id_dtype)
        _rmat_range(lo, hi, params.scale, params.a, params.b, params.c, comm_bits, params.p_intra,
                    params.seed, params.split_roles, src, dst)
        yield src, dst


def rmat_edges(params: RMatParams) -> tuple[np.ndarray, np.ndarray]:
    """Return all (src, dst) edges of the graph as two arrays (for graphs that fit in memory)."""
    src = np.empty(params.num_edges, params.id_dtype)
    dst = np.empty(params.num_edges, params.id_dtype)
    comm_bits = int(math.log2(params.num_communities))
    _rmat_range(0, params.num_edges, params.scale, params.a, params.b, params.c, comm_bits,
                params.p_intra, params.seed, params.split_roles, src, dst)
    return src, dst


@njit(parallel=True, cache=True)
def _labels(scale, comm_bits, seed, out):
    k1 = mix64(np.uint64(seed) ^ np.uint64(0x5CA1AB1E))
    k2 = mix64(np.uint64(seed) ^ np.uint64(0xC0FFEE))
    cmask = (1 << comm_bits) - 1
    for r in prange(1 << scale):
        out[np.int64(_scramble(np.uint64(r), scale, k1, k2))] = r & cmask


def rmat_labels(params: RMatParams) -> np.ndarray:
    """Return each node's planted community (int64 labels in [0, num_communities))."""
    out = np.empty(params.num_nodes, np.int64)
    _labels(params.scale, int(math.log2(params.num_communities)), params.seed, out)
    return out


def community_feature_pieces(labels: np.ndarray, centroids: np.ndarray, noise: float, rng: np.random.Generator,
                             lo: int = 0, hi: int | None = None, piece_rows: int = 1 << 13):
    """Yield float32 features of rows [lo, hi) in pieces: each row's community centroid plus `noise` x N(0, 1).

    The noise is drawn from `rng` in row order, a piece of at most `piece_rows` rows at a time (the
    same values as one draw of all rows), so only a piece is held.
    """
    hi = labels.size if hi is None else hi
    for a in range(lo, hi, piece_rows):
        b = min(a + piece_rows, hi)
        x = rng.standard_normal((b - a, centroids.shape[1]), dtype=np.float32)
        x *= noise
        x += centroids[labels[a:b]]
        yield x


def rmat_features(params: RMatParams, dim: int = 32, noise: float = 2.0,
                  labels: np.ndarray | None = None, dtype=np.float32) -> np.ndarray:
    """Return (num_nodes, dim) features: the node's community centroid plus Gaussian `noise`.

    With noise well above the centroid spread, one node's features say little about its
    label; averaging over same-community neighbours (what a GNN does) says much more.
    """
    check_range("dim", dim, 1, integer=True)
    check_range("noise", noise, 0.0)
    labels = rmat_labels(params) if labels is None else labels
    rng = np.random.default_rng([params.seed, _STREAM_FEATURES])
    centroids = rng.standard_normal((params.num_communities, dim)).astype(np.float32)
    x = np.empty((params.num_nodes, dim), dtype)
    a = 0
    for piece in community_feature_pieces(labels, centroids, noise, rng):
        x[a:a + len(piece)] = piece
        a += len(piece)
    return x
