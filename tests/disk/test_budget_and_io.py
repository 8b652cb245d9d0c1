"""The budget covers what the caches hold; reads bypass the page cache; the policy picks per batch."""

from __future__ import annotations

import os

import numpy as np
import pytest

from labkit.core.datasets import get_spec
from labkit.core.directio import PAGE, probe_direct
from labkit.disk.costmodel import DiskModel
from labkit.core.memory import MemoryBudget
from labkit.core import cacheplan
from labkit.disk.store import DiskFeatures, DiskTopology, IOPolicy, MemoryFeatures, MemoryTopology


def _held_bytes(obj) -> int:
    """Bytes of every array `obj` refers to, counted at the buffer that owns the memory (views included)."""
    roots = {}
    for v in vars(obj).values():
        if isinstance(v, np.ndarray):
            while isinstance(v.base, np.ndarray):
                v = v.base
            roots[id(v)] = v.nbytes
    return sum(roots.values())


def test_caches_hold_no_more_than_they_reserve(ds):
    """A cache filled from a plan's cut (a view of the whole ranking) must not keep the ranking alive."""
    b = MemoryBudget("64MiB")
    dt, df = DiskTopology(ds, b), DiskFeatures(ds, b)
    try:
        ip = dt.indptr
        tplan = cacheplan.lists_by_degree(ds.array("out_degree", mmap=False), ip)
        fplan = cacheplan.rows_by_degree(ds.array("out_degree", mmap=False), df.row_bytes)
        dt.set_cache(tplan.order[:200])  # a view of an order over every node with in-edges
        df.set_cache(fplan.order[:300])
        assert tplan.order.size > 10 * 200
        for c in (dt.cache, df.cache):
            assert 0 < _held_bytes(c) <= c.reservation.nbytes
        df.set_cache(belady_rows=100)
        assert 0 < _held_bytes(df.cache) <= df.cache.reservation.nbytes
        owners = b.report()["owners"]
        assert owners["topology indptr"] == dt.indptr.nbytes
        assert owners["topology staging"] == dt.file._staging.nbytes
        assert owners["feature staging"] == df.file._staging.nbytes
        assert b.used == sum(owners.values()) <= b.total
    finally:
        dt.close()
        df.close()
    assert b.used == 0 and b.report()["owners"] == {}


def test_disk_reads_bypass_the_page_cache(ds):
    """The stores' files are opened with O_DIRECT (the kernel's own flags, not just `direct`)."""
    if not probe_direct(ds.path("features")) or not os.path.isdir("/proc/self/fdinfo"):
        pytest.skip("the data folder is not on an O_DIRECT filesystem here")
    b = MemoryBudget("64MiB")
    dt, df = DiskTopology(ds, b), DiskFeatures(ds, b)
    try:
        for f in (dt.file, df.file):
            assert f.direct
            with open(f"/proc/self/fdinfo/{f._fd}") as fh:
                flags = int(next(ln for ln in fh if ln.startswith("flags:")).split()[1], 8)
            assert flags & os.O_DIRECT
    finally:
        dt.close()
        df.close()


def test_auto_policy_sweeps_a_dense_batch_and_reads_a_sparse_one_page_by_page(ds):
    """Per gather, the cost model picks: 20% of 512-byte rows touch most pages (sweep); 10 far-apart rows don't."""
    model = DiskModel(seconds_per_request=80e-6, bytes_per_second=1e9)
    b = MemoryBudget("64MiB")
    df = DiskFeatures(ds, b, policy=IOPolicy("auto", model), fallback=True)
    mf = MemoryFeatures.from_dataset(ds)
    n = ds.meta["num_nodes"]
    file_pages = os.path.getsize(ds.path("features")) // PAGE
    try:
        assert df.row_bytes == 512
        dense = np.random.default_rng(0).choice(n, n // 5, replace=False)
        assert np.array_equal(df.gather(dense), mf.gather(dense))
        assert df.policy.choices == {"sweep": 1}
        # a sweep reads the region between the first and last needed page in large requests
        assert df.file.counters.requests <= -(-file_pages * PAGE // df.file.sweep_request) + 1
        assert df.file.counters.bytes_read >= 0.9 * file_pages * PAGE
        df.file.counters.reset()
        sparse = np.arange(10, dtype=np.int64) * 800  # 100 pages apart: nothing worth reading through
        assert np.array_equal(df.gather(sparse), mf.gather(sparse))
        assert df.policy.choices == {"sweep": 1, "random": 1}
        assert df.file.counters.requests == 10 and df.file.counters.bytes_read == 10 * PAGE
        assert df.file.counters.bytes_used == 10 * 512
        # A model whose requests cost far more makes the same sparse batch worth a sweep.
        df.policy = IOPolicy("auto", DiskModel(seconds_per_request=1.0, bytes_per_second=1e9))
        df.gather(sparse)
        assert df.policy.choices == {"sweep": 1}
    finally:
        df.close()


def test_topology_auto_policy_equals_memory_under_each_model(ds):
    """Whatever plan the model picks for the neighbour lists, the lists are the in-memory ones."""
    mt = MemoryTopology.from_dataset(ds)
    picked = set()
    for model in (DiskModel(1e-9, 1e12), DiskModel(1.0, 1e9)):
        b = MemoryBudget("64MiB")
        dt = DiskTopology(ds, b, policy=IOPolicy("auto", model), fallback=True)
        try:
            nodes = np.random.default_rng(3).choice(ds.meta["num_nodes"], 500, replace=False)
            p1, i1 = mt.fetch(nodes)
            p2, i2 = dt.fetch(nodes)
            assert np.array_equal(p1, p2) and np.array_equal(i1, i2)
            picked |= set(dt.policy.choices)
        finally:
            dt.close()
    assert picked == {"random", "sweep"}


def test_profiles_registered_at_the_issue_sizes():
    """ci, small and large are registered (R-MAT, 16 edges per node, 128-d) and built with checksums."""
    spec = get_spec("caliex")
    assert set(spec.profiles) == {"ci", "small", "large"}
    nodes = {k: 1 << p["scale"] for k, p in spec.profiles.items()}
    edges = {k: nodes[k] * p["edge_factor"] for k, p in spec.profiles.items()}
    assert 30_000 <= nodes["ci"] <= 60_000
    assert 1.9e6 <= nodes["small"] <= 2.2e6 and 31e6 <= edges["small"] <= 35e6
    assert 7.9e6 <= nodes["large"] <= 8.8e6 and 125e6 <= edges["large"] <= 140e6
    for k, p in spec.profiles.items():
        assert p["dim"] == 128 and p["dtype"] in ("float32", "float16"), k
    assert nodes["small"] * 128 * 4 == 1 << 30  # ~1 GiB of fp32 features


def test_built_dataset_has_a_checksum_per_file(ds):
    for key in ("indptr", "indices", "features", "labels", "train", "val", "out_degree"):
        info = ds.info(key)
        assert len(info["sha256"]) == 64 and info["bytes"] > 0, key
    for key in ("indices", "features"):
        assert ds.info(key)["align"] == 4096
