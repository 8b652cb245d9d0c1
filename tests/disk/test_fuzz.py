"""Fuzz CaliEX's public entry points that take user data: each case returns a correct result or one line."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from labkit.core.machine import memory_bytes
from labkit.core.memory import MemoryBudget, check_budget, machine_limit, parse_bytes
from labkit.core import cacheplan
from labkit.disk.iocache import BeladyFeatureCache
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.store import MemoryTopology
from labkit.disk.system import as_budget, reference_budget
from labkit.disk.train import ModelConfig
from labkit.disk.tuner import split_caches
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call

CAP = machine_limit()[0]

#: Budgets as users type them: well-formed strings, the malformed ones from the issue, numbers of any size.
budgets = st.one_of(
    st.sampled_from(["512MiB", "-1", "1e30", "abc", 0, "0", "1.5GiB", "40GiB", "1TiB", " 64 kib ", "", "12 parsecs",
                     float("nan"), float("inf"), -1, True, None, [1], "1e3", ".5MiB"]),
    st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.builds(lambda n, u: f"{n}{u}", st.floats(0, 1e6, allow_nan=False), st.sampled_from(["", "B", "KiB", "MB", "GiB",
                                                                                           "TiB", "xb", " gb"])),
    st.text(max_size=12),
)


@settings(parent=FUZZ_SETTINGS, max_examples=300)
@given(budgets)
def test_fuzz_budgets(value):
    for entry, fn in (("MemoryBudget", MemoryBudget), ("disk.as_budget", as_budget), ("check_budget", check_budget)):
        try:
            got = fuzz_call(entry, fn, value)
        except Refused as r:
            msg = str(r)
            assert " is not accepted; expected " in msg, msg
            continue
        n = got.total if isinstance(got, MemoryBudget) else got
        assert 0 <= n <= CAP and n == parse_bytes(value)  # accepted: exactly what was asked, within the machine
    try:
        ref = fuzz_call("disk.reference_budget", reference_budget, value)
    except Refused:
        return
    assert ref.total == (CAP if value is None else min(parse_bytes(value), CAP))


def _toy_graph(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    deg = rng.integers(0, 6, n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    return indptr, rng.integers(0, n, int(indptr[-1])).astype(np.int32)


@settings(parent=FUZZ_SETTINGS, max_examples=200)
@given(st.integers(1, 300), st.integers(0, 3), st.one_of(st.floats(allow_nan=True), st.integers(-3, 3)),
       st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=True)), st.integers(1, 64))
def test_fuzz_cache_plans(n, seed, f, cache_bytes, row_bytes):
    indptr, _ = _toy_graph(n, seed)
    out_deg = np.random.default_rng(seed + 1).integers(0, 9, n)
    tplan = cacheplan.lists_by_degree(out_deg, indptr)
    fplan = cacheplan.rows_by_degree(out_deg, row_bytes)
    try:
        t_nodes, f_nodes = fuzz_call("disk.split_caches", split_caches, f, cache_bytes, n, tplan, fplan)
    except Refused:
        return
    assert 0 <= f <= 1
    for nodes, plan in ((t_nodes, tplan), (f_nodes, fplan)):
        assert nodes.size <= n and np.unique(nodes).size == nodes.size  # never more than the graph holds
        assert np.array_equal(nodes, plan.order[:nodes.size])  # a prefix of the plan's ranking
    f_bytes = cache_bytes - int(f * cache_bytes)
    assert f_nodes.size * (row_bytes + 8) <= max(0, f_bytes)
    try:
        cut = fuzz_call("disk.CachePlan.cut", fplan.cut, cache_bytes)
    except Refused:
        return
    assert cut.size == min(fplan.order.size, max(0, int(cache_bytes // row_bytes)))


@settings(parent=FUZZ_SETTINGS, max_examples=100)
@given(st.one_of(st.integers(-5, 2**62), st.floats(allow_nan=True)), st.integers(0, 200), st.integers(1, 8))
def test_fuzz_belady_cache_capacity(capacity, num_nodes, dim):
    b = MemoryBudget("16MiB")
    try:
        c = fuzz_call("disk.BeladyFeatureCache", BeladyFeatureCache, capacity, num_nodes, dim, np.float32, b)
    except Refused:
        assert b.used == 0
        return
    assert c.capacity == min(int(capacity), num_nodes) and c.rows.shape == (c.capacity, dim)
    assert b.used == c.reservation.nbytes
    c.release()
    assert b.used == 0


@settings(parent=FUZZ_SETTINGS, max_examples=150)
@given(st.integers(1, 200), st.integers(0, 3),
       st.one_of(st.lists(st.integers(-2, 1200), max_size=4), st.lists(st.floats(allow_nan=True), max_size=3),
                 st.sampled_from([None, "15,10", (2.0, 3.0)])),
       st.one_of(st.lists(st.integers(-3, 230), max_size=40), st.lists(st.floats(allow_nan=True), max_size=3)),
       st.one_of(st.integers(-2, 2**63), st.sampled_from([1.5, "7", None])), st.integers(-3, 3))
def test_fuzz_sampler_fanouts_and_seeds(n, gseed, fanouts, seeds, seed, index):
    indptr, indices = _toy_graph(n, gseed)
    topo = MemoryTopology(indptr, indices)
    try:
        sampler = fuzz_call("disk.NeighborSampler", NeighborSampler, topo, fanouts, seed)
        batch = fuzz_call("disk.NeighborSampler.sample", sampler.sample, np.asarray(seeds), index)
    except Refused:
        return
    s = np.asarray(seeds)
    assert np.array_equal(batch.n_id[:s.size], s) and batch.batch_size == s.size
    assert np.unique(batch.n_id).size == batch.n_id.size and len(batch.node_hops) == len(fanouts) + 1
    for h, fo in enumerate(sampler.fanouts):  # each frontier node got at most fanouts[h] neighbours, all real
        e0 = batch.edge_hops[h - 1] if h else 0
        dst, src = batch.edge_dst[e0:batch.edge_hops[h]], batch.edge_src[e0:batch.edge_hops[h]]
        assert np.bincount(dst, minlength=batch.n_id.size).max(initial=0) <= fo
        for v, u in zip(batch.n_id[dst], batch.n_id[src]):
            assert u in indices[indptr[v]:indptr[v + 1]]


@settings(parent=FUZZ_SETTINGS, max_examples=150)
@given(st.lists(st.integers(0, 1000), max_size=50), st.one_of(st.integers(-2, 70), st.floats(allow_nan=True)),
       st.one_of(st.integers(-2, 10), st.just(2.5)), st.one_of(st.integers(-3, 2**64), st.sampled_from([1.5, "x"])))
def test_fuzz_batch_seeds(train, batch_size, num_batches, seed):
    train = np.asarray(train, np.int64)
    try:
        out = fuzz_call("disk.batch_seeds", batch_seeds, train, batch_size, num_batches, seed)
    except Refused:
        return
    assert len(out) == num_batches
    for s in out:
        assert 0 < s.size <= batch_size and np.unique(s).size == s.size and np.isin(s, train).all()


@settings(parent=FUZZ_SETTINGS, max_examples=150)
@given(st.sampled_from(["sage", "gat", "gcn", ""]),
       st.one_of(st.lists(st.integers(-1, 1001), max_size=4), st.sampled_from(["15", (), None, (1.5,)])),
       st.one_of(st.integers(-1, 600), st.floats(allow_nan=True)), st.integers(-1, 9),
       st.one_of(st.integers(-1, 5000), st.just(1.5)), st.floats(allow_nan=True, allow_infinity=True))
def test_fuzz_model_config(name, fanouts, hidden, heads, batch_size, lr):
    try:
        cfg = fuzz_call("disk.ModelConfig", ModelConfig, name, fanouts, hidden, heads, batch_size, lr)
    except Refused:
        return
    assert cfg.fanouts == tuple(int(f) for f in fanouts) and all(1 <= f <= 1000 for f in cfg.fanouts)
    assert cfg.hidden >= 1 and cfg.batch_size >= 1 and 0 < cfg.lr < math.inf


# -- opening a dataset whose files were truncated or corrupted --------------------------------

@pytest.fixture(scope="module")
def ds_copy(ds, tmp_path_factory):
    """A private copy of the ci dataset (the cases damage and restore its files)."""
    root = tmp_path_factory.mktemp("caliex-fuzz")
    shutil.copytree(ds.dir, root / "caliex" / "ci")
    return root, ds


FILES = ["indptr", "indices", "features", "labels", "train", "out_degree", "manifest.json"]


@settings(parent=FUZZ_SETTINGS, max_examples=30)
@example("indptr", "flip", 0.5, False)
@example("indptr", "flip", 1.0, False)  # the last offset: the end of the indices file
@example("indptr", "flip", 0.0, False)
@example("indices", "flip", 0.3, False)
@example("features", "flip", 0.0, False)
@example("out_degree", "flip", 0.1, False)
@given(st.sampled_from(FILES), st.sampled_from(["truncate", "flip", "append", "empty", "json"]),
       st.floats(0, 1), st.booleans())
def test_fuzz_open_damaged_dataset(ds_copy, key, how, where, full_verify):
    from labkit.core.datasets import open_dataset
    from labkit.disk.store import DiskFeatures, DiskTopology

    root, ds = ds_copy
    d = root / "caliex" / "ci"
    path = d / key if key == "manifest.json" else d / ds.path(key).name
    original = path.read_bytes()
    data = bytearray(original)
    at = min(len(data) - 1, int(where * len(data)))
    if how == "truncate":
        data = data[:at]
    elif how == "flip":
        data[at] ^= 0x5A
    elif how == "append":
        data += b"\0garbage"
    elif how == "empty":
        data = bytearray()
    elif key == "manifest.json":
        m = json.loads(original)
        m["arrays"] = {"indptr": [1, 2]} if where < 0.5 else None
        data = bytearray(json.dumps(m).encode())
    else:
        return
    path.write_bytes(bytes(data))
    changed_size = len(data) != len(original)
    try:
        def open_and_read():
            dd = open_dataset("caliex", "ci", root=root, build=False, full_verify=full_verify)
            b = MemoryBudget("64MiB")
            topo = DiskTopology(dd, b, staging_bytes=1 << 20, fallback=True)
            try:
                feat = DiskFeatures(dd, b, staging_bytes=1 << 20, fallback=True)
                try:
                    nodes = np.array([0, 5, 77, dd.meta["num_nodes"] - 1], np.int64)
                    return feat.gather(nodes).copy(), topo.fetch(nodes)
                finally:
                    feat.close()
            finally:
                topo.close()
        try:
            rows, (ptr, idx) = fuzz_call("disk.open_dataset+stores", open_and_read)
        except Refused as r:
            return
        # Opened: only a same-size change without full verification may go unnoticed (sizes only).
        assert not changed_size and not full_verify and how != "json", (key, how)
        if key == "features" and how == "flip":
            return  # a flipped byte in the rows read comes back as it is on disk: sizes-only checks allow it
        nodes = np.array([0, 5, 77, ds.meta["num_nodes"] - 1], np.int64)
        if key not in ("indptr", "indices"):
            assert np.array_equal(rows, ds.array("features")[nodes])
    finally:
        path.write_bytes(original)
