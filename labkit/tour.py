"""The tour's small real workload: gathering feature rows, in random versus sorted id order.

Every system in the lab gathers rows (embeddings, node features, weight tiles). Whether the ids
arrive in memory order decides how much of each cache line and page is used, which is the
lesson behind CaliEX's coalesced reads and PICASSO's packing. It is also a fair, quick way to
show the bench harness at work.
"""

from __future__ import annotations

import numpy as np

from labkit.core.bench import Bench, Claim
from labkit.core.errors import check_range

TOUR_CLAIMS = [Claim("tour.sorted_gather_speedup", "gathering rows in sorted id order beats random order",
                     "locality (no paper)", 1.0, "x", ">=")]


def feature_table(rows: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    """Return a seeded float32 table of `rows` x `dim` features."""
    check_range("rows", rows, 1, integer=True)
    check_range("dim", dim, 1, 4096, integer=True)
    return np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)


def batch_ids(rows: int, batch: int, seed: int = 1) -> np.ndarray:
    """Return `batch` distinct row ids in random order."""
    check_range("batch", batch, 1, rows, integer=True)
    return np.random.default_rng(seed).choice(rows, size=batch, replace=False)


def gather(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Return table[ids] (the work both contenders do)."""
    return np.take(table, ids, axis=0)


def gather_bench(rows: int, batch: int, dim: int = 16, repeats: int = 5, progress: bool = False):
    """Compare random-order and sorted-order gathers of the same ids; returns (Comparison, Bench)."""
    table = feature_table(rows, dim)
    ids = batch_ids(rows, batch)
    sorted_ids = np.sort(ids)
    b = Bench("tour", "ci", TOUR_CLAIMS, progress=progress, title="Tour: gather locality")
    c = b.compare(f"gather {batch} of {rows} rows x {dim}",
                  {"random order": lambda: gather(table, ids), "sorted order": lambda: gather(table, sorted_ids)},
                  repeats=repeats, warmup=1, min_sample_s=0.01, work=batch * dim * 4, work_unit="B")
    b.measure("tour.sorted_gather_speedup", c.ratio("random order", "sorted order"))
    return c, b


def busy_work(seconds: float = 2.0, n: int = 384) -> int:
    """Run matrix products for about `seconds` (load for the dashboard); returns how many ran."""
    import time

    import torch
    a = torch.randn(n, n)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = torch.tanh(a @ a.T / n)
        done += 1
    return done
