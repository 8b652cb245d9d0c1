"""Small, bounded experiments the notebook (and its widgets) call: one function per question."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from labkit.core.bench import Bench
from labkit.graph.csr import CSR, build_csr_chunked
from labkit.graph.datasets import GraphData
from labkit.graph.importance import NeighborCache, importance, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.rmat import RMatParams, rmat_edge_chunks
from labkit.graph.sampling import AliasTable, sample_neighbors, sample_weighted, topk_neighbors
from labkit.graph.store import PartitionedStore, StoreSampler
from labkit.graph.train import SAGE, train_epoch


def build_streamed(params: RMatParams, chunk_edges: int = 1 << 18,
                   progress: Callable[[int], None] | None = None) -> tuple[CSR, float]:
    """Return (CSR, seconds) built out of core from the R-MAT stream (two passes, progress per chunk)."""
    t = time.perf_counter()
    csr = build_csr_chunked(lambda: rmat_edge_chunks(params, chunk_edges), params.num_nodes,
                            dedup=True, drop_self_loops=True, progress=progress)
    return csr, time.perf_counter() - t


def cache_point(g: GraphData, threshold: float, *, k: int = 1, num_parts: int = 4, batches: int = 4,
                batch_size: int = 256, fanouts: tuple[int, ...] = (10, 5), backend: str = "embedded",
                client=None, seed: int = 0) -> dict:
    """Return cache size, hit rates and one short epoch's time at importance `threshold` (inf = no cache)."""
    part = partition(g.csr, num_parts, "hash")
    cache = None
    if np.isfinite(threshold):
        plan = plan_cache(g.csr, importance(g.csr, g.csc, k), threshold, max_fraction=0.2, k=k)
        cache = NeighborCache.build(g.csr, plan, g.features)
    store = PartitionedStore(g.csr, part, g.features, backend=backend, client=client, cache=cache)
    torch.manual_seed(seed)
    model = SAGE(g.features.shape[1], 32, g.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    r = train_epoch(model, opt, StoreSampler(store), store, g.train, g.labels, list(fanouts), batch_size,
                    seed=seed, max_batches=batches)
    topo = g.csr.indptr.nbytes + g.csr.indices.nbytes
    return {"threshold": float(threshold), "cached_fraction": 0.0 if cache is None else cache.plan.fraction,
            "cache_bytes_fraction": 0.0 if cache is None else cache.nbytes / topo,
            "hit_rate": 0.0 if cache is None else cache.stats.hit_rate,
            "feature_hit_rate": 0.0 if cache is None else cache.feature_stats.hit_rate,
            "epoch_s": r.seconds, "sample_s": r.sample_s, "remote_bytes": store.stats.remote_bytes}


def operator_throughput(csr: CSR, csc: CSR, *, batch: int = 1024, k: int = 10, repeats: int = 3,
                        seed: int = 0) -> list[dict]:
    """Return one row per sampling operator: sampled (or drawn) ids per second on `batch` random vertices."""
    rng = np.random.default_rng(seed)
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
