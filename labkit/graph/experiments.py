"""Small, bounded experiments the notebook (and its widgets) call: one function per question."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

from labkit.core.bench import Bench, Comparison
from labkit.core.errors import check_range, check_seed
from labkit.graph.csr import CSR, build_csr, build_csr_chunked
from labkit.graph.datasets import GraphData
from labkit.graph.importance import CacheStats, NeighborCache, importance, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.rmat import RMatParams, rmat_edge_chunks, rmat_edges
from labkit.graph.sampling import AliasTable, sample_neighbors, sample_weighted, topk_neighbors
from labkit.graph.store import PartitionedStore, StoreSampler
from labkit.graph.train import SAGE, train_epoch


def build_streamed(params: RMatParams, chunk_edges: int = 1 << 18,
                   progress: Callable[[int], None] | None = None) -> tuple[CSR, float]:
    """Return (CSR, seconds) built out of core from the R-MAT stream (two passes, progress per chunk).

    A tiny graph of the same kind is built first, untimed, so that the seconds measure the build
    and not numba compiling (or loading from its cache) the generator and builder kernels.
    """
    tiny = replace(params, scale=min(params.scale, max(6, params.num_communities.bit_length() - 1)))
    build_csr_chunked(lambda: rmat_edge_chunks(tiny, chunk_edges), tiny.num_nodes, dedup=True, drop_self_loops=True)
    t = time.perf_counter()
    csr = build_csr_chunked(lambda: rmat_edge_chunks(params, chunk_edges), params.num_nodes,
                            dedup=True, drop_self_loops=True, progress=progress)
    return csr, time.perf_counter() - t


@dataclass
class BuildComparison:
    """The build section's answer: one row per builder, labkit's speedup over scipy, and the streamed CSR."""

    rows: list[dict]
    speedup_scipy: float
    edges_per_s: float
    streamed: CSR
    comparison: Comparison


def build_comparison(params: RMatParams, *, repeats: int = 3, chunk_edges: int = 1 << 18,
                     progress: Callable[[int], None] | None = None) -> BuildComparison:
    """Build the R-MAT edges of `params` three ways and return the table and labkit's speedup over scipy.

    1. labkit streamed: two passes over generated chunks (:func:`build_streamed`, run once after
       an untimed tiny build, with `progress(n_edges)` after each chunk; its time includes
       generating the edges twice).
    2. labkit in memory (:func:`labkit.graph.csr.build_csr`, dedup) and 3. scipy COO->CSR (which
       sums duplicates, so the same canonical CSR): checked equal once, warmed up once more, then
       timed side by side with :meth:`labkit.core.bench.Bench.compare` (`repeats` interleaved
       rounds, medians), as ``labkit bench graph`` does at larger scale.
    """
    import scipy.sparse as sp

    check_range("repeats", repeats, 1, integer=True)
    streamed, t_stream = build_streamed(params, chunk_edges, progress)
    src, dst = rmat_edges(params)
    n, m = params.num_nodes, params.num_edges
    ones = np.ones(m, np.float32)

    def scipy_build():
        return sp.coo_matrix((ones, (src, dst)), shape=(n, n)).tocsr()

    def labkit_build():
        return build_csr(src, dst, n, dedup=True)

    ours, ref = labkit_build(), scipy_build()  # numba compiles (or loads its cache) here, untimed
    if not (np.array_equal(ours.indptr, ref.indptr) and np.array_equal(ours.indices, ref.indices)):
        raise AssertionError("labkit build and scipy disagree on the CSR")
    del ours, ref
    c = Bench("graph", "ci", progress=False).compare(
        f"build CSR, {m:,} edges", {"scipy_coo_tocsr": scipy_build, "labkit_build_csr": labkit_build},
        repeats=repeats, warmup=1, work=m, work_unit="edges")
    rows = [{"builder": "labkit streamed (2 passes, edges generated twice)", "seconds": t_stream,
             "edges_per_s": m / t_stream, "runs": 1}]
    import numba
    threads = numba.get_num_threads()
    for name, label in (("labkit_build_csr", f"labkit in memory ({threads} thread{'s' * (threads > 1)})"),
                        ("scipy_coo_tocsr", "scipy COO->CSR (1 thread)")):
        rows.append({"builder": label, "seconds": c.median(name), "edges_per_s": c.throughput(name),
                     "runs": repeats})
    return BuildComparison(rows, c.ratio("scipy_coo_tocsr", "labkit_build_csr"), c.throughput("labkit_build_csr"),
                           streamed, c)


def cache_point(g: GraphData, threshold: float, *, k: int = 1, num_parts: int = 4, batches: int = 4,
                batch_size: int = 256, fanouts: tuple[int, ...] = (10, 5), backend: str = "embedded",
                client=None, seed: int = 0) -> dict:
    """Return cache size, hit rates and one short epoch's time at importance `threshold` (inf = no cache).

    The epoch is `batches` mini-batches of GraphSAGE through a :class:`PartitionedStore` of
    `num_parts` hash partitions. With the default ``backend="embedded"`` the partitions are
    objects in this process: a miss costs no network round, so the time shows the cache's own
    lookup overhead, not the fetches it saves (``labkit bench graph`` measures those across
    Dask worker processes). One tiny untimed mini-batch goes through the same store first, so
    the epoch (the first setting a notebook measures included) does not pay for numba compiling
    the sampling and cache kernels or torch's first backward; its counts are then reset.
    """
    check_range("threshold", threshold, 0.0)
    seed = check_seed(seed)
    part = partition(g.csr, num_parts, "hash")
    cache = None
    if np.isfinite(threshold):
        plan = plan_cache(g.csr, importance(g.csr, g.csc, k), threshold, max_fraction=0.2, k=k)
        cache = NeighborCache.build(g.csr, plan, g.features)
    store = PartitionedStore(g.csr, part, g.features, backend=backend, client=client, cache=cache)
    _warm_up(g, store, cache, fanouts, seed)
    torch.manual_seed(seed)
    model = SAGE(g.features.shape[1], 32, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    r = train_epoch(model, opt, StoreSampler(store), store, g.train, g.labels, list(fanouts), batch_size,
                    seed=seed, max_batches=batches)
    topo = g.csr.indptr.nbytes + g.csr.indices.nbytes
    return {"threshold": float(threshold), "cache": "off" if cache is None else "on", "backend": backend,
            "batches": r.batches, "cached_fraction": 0.0 if cache is None else cache.plan.fraction,
            "cache_bytes_fraction": 0.0 if cache is None else cache.nbytes / topo,
            "hit_rate": 0.0 if cache is None else cache.stats.hit_rate,
            "feature_hit_rate": 0.0 if cache is None else cache.feature_stats.hit_rate,
            "epoch_s": r.seconds, "sample_s": r.sample_s, "gather_s": r.gather_s, "train_s": r.train_s,
            "remote_bytes": store.stats.remote_bytes}


def _warm_up(g: GraphData, store, cache: NeighborCache | None, fanouts, seed: int) -> None:
    """Train one tiny mini-batch through `store` on a throwaway model, then zero the counts it left."""
    model = SAGE(g.features.shape[1], 32, g.num_classes)
    train_epoch(model, torch.optim.Adam(model.parameters(), lr=0.01), StoreSampler(store), store, g.train[:8],
                g.labels, list(fanouts), 8, seed=seed, max_batches=1)
    store.stats.reset()
    if cache is not None:
        cache.stats, cache.feature_stats = CacheStats(), CacheStats()


def operator_throughput(csr: CSR, csc: CSR, *, batch: int = 1024, k: int = 10, repeats: int = 3,
                        seed: int = 0) -> list[dict]:
    """Return one row per sampling operator: sampled (or drawn) ids per second on `batch` random vertices."""
    rng = np.random.default_rng(check_seed(seed))
    rows = rng.choice(csr.num_nodes, batch, replace=False)
    w = rng.random(csr.num_edges)
    table = AliasTable.build(csr.indptr, w)
    in_table = AliasTable.build(csr.indptr, csc.degree()[csr.indices].astype(np.float64))
    ops = {
        "NEIGHBORHOOD random (with replacement)":
            lambda: sample_neighbors(csr.indptr, csr.indices, rows, k, replace=True)[1],
        "NEIGHBORHOOD random (without replacement)":
            lambda: sample_neighbors(csr.indptr, csr.indices, rows, k)[1],
        "NEIGHBORHOOD edge_weight (alias)": lambda: sample_weighted(csr.indptr, table, rows, k)[1],
        "NEIGHBORHOOD in_degree (alias)": lambda: sample_weighted(csr.indptr, in_table, rows, k)[1],
        "NEIGHBORHOOD topk by weight": lambda: topk_neighbors(csr.indptr, w, rows, k)[1],
        "NEIGHBORHOOD full": lambda: sample_neighbors(csr.indptr, csr.indices, rows, -1)[1],
        "NEGATIVE random": lambda: negative_sample(csr, rows, k, by="random").dst,
        "NEGATIVE in_degree (rejects neighbours)": lambda: negative_sample(csr, rows, k, by="in_degree").dst,
    }
    ids = {name: len(f()) for name, f in ops.items()}  # also compiles each kernel
    c = Bench("graph", "ci", progress=False).compare(f"operators, {batch} seeds, k={k}", ops, repeats=repeats,
                                                     warmup=0)
    return [{"operator": name, "ids": n, "ids_per_s": n / max(c.median(name), 1e-9)} for name, n in ids.items()]
