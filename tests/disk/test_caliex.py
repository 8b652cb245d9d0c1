"""CaliEX: disk reads equal memory bit for bit, plans and caches behave, budget holds, runs are deterministic."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.datasets import DatasetError, make_dataset, open_dataset
from labkit.core.memory import BudgetExceeded, MemoryBudget
from labkit.core import cacheplan
from labkit.disk import plans
from labkit.disk.iocache import BeladyFeatureCache
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.store import DiskFeatures, DiskTopology, IOPolicy, MemoryFeatures, MemoryTopology
from labkit.disk.system import SYSTEMS, open_system, presample, reference_budget, workload


@pytest.fixture(scope="module")
def pre(ds):
    _, cfg, budget, pseeds, _ = workload("ci", "sage", 2, budget_fraction=2.0, presample_batches=2)
    return presample(ds, cfg, pseeds, MemoryBudget(budget))


def test_dataset_layout(ds):
    assert ds.meta["num_nodes"] == 1 << 15
    assert os.path.getsize(ds.path("features")) % 4096 == 0
    assert os.path.getsize(ds.path("indices")) % 4096 == 0
    ip = ds.array("indptr")
    assert ip[0] == 0 and ip[-1] == ds.meta["num_edges"] and np.all(np.diff(ip) >= 0)
    assert ds.array("labels").max() < ds.meta["num_classes"]


@pytest.mark.parametrize("mode", ["random", "coalesced", "sweep", "auto"])
def test_disk_batches_equal_memory_bit_for_bit(ds, mode):
    b = MemoryBudget("64MiB")
    mt, mf = MemoryTopology.from_dataset(ds), MemoryFeatures.from_dataset(ds)
    dt, df = DiskTopology(ds, b, policy=IOPolicy(mode)), DiskFeatures(ds, b, policy=IOPolicy(mode))
    try:
        rng = np.random.default_rng(1)
        dt.set_cache(rng.choice(ds.meta["num_nodes"], 5000, replace=False))
        df.set_cache(rng.choice(ds.meta["num_nodes"], 3000, replace=False))
        seeds = batch_seeds(ds.array("train"), 256, 2)
        for i, s in enumerate(seeds):
            a = NeighborSampler(mt, [15, 10, 5], seed=3).sample(s, i)
            d = NeighborSampler(dt, [15, 10, 5], seed=3).sample(s, i)
            assert a.equals(d)
            assert np.array_equal(mf.gather(a.n_id), df.gather(d.n_id))
        assert 0 < dt.stats.hit_rate < 1 and 0 < df.stats.hit_rate < 1
        assert df.file.counters.bytes_read >= df.file.counters.bytes_used > 0
    finally:
        dt.close()
        df.close()
    assert b.used == 0


def test_sampler_respects_fanout_and_edges(ds):
    mt = MemoryTopology.from_dataset(ds)
    s = batch_seeds(ds.array("train"), 128, 1)[0]
    bt = NeighborSampler(mt, [4, 3], seed=0).sample(s, 0)
    ip, ix = mt.indptr, mt.indices
    assert np.array_equal(bt.n_id[:bt.batch_size], s)
    assert np.unique(bt.n_id).size == bt.n_id.size
    for e in range(0, bt.edge_src.size, 97):  # every sampled edge exists in the graph
        v, u = bt.n_id[bt.edge_dst[e]], bt.n_id[bt.edge_src[e]]
        assert u in ix[ip[v]:ip[v + 1]]
    per = np.bincount(bt.edge_dst[:bt.edge_hops[0]], minlength=bt.batch_size)
    assert per.max() <= 4 and np.all(per == np.minimum(4, np.diff(ip)[s]))
    assert np.all(np.diff(bt.edge_dst) >= 0)  # sorted by target: layers build CSR without sorting


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=12, unique=True), min_size=1, max_size=6),
       st.integers(0, 10))
def test_belady_matches_brute_force(batches, cap):
    """Hits of the Belady cache equal a straightforward simulation of the same policy."""
    b = MemoryBudget("1MiB")
    c = BeladyFeatureCache(cap, 31, 2, np.float32, b)
    bs = [np.array(sorted(x), np.int64) for x in batches]
    c.start_superbatch(bs)
    hits = 0
    held: set[int] = set()
    want = 0
    for i, nodes in enumerate(bs):
        slot = c.lookup(nodes)
        hits += int((slot >= 0).sum())
        assert np.all(c.rows[slot[slot >= 0], 0] == nodes[slot >= 0])  # a hit returns the right row
        want += len(held & set(nodes.tolist()))
        before = set(c.owner_of[c.owner_of >= 0].tolist())
        rows = np.stack([nodes, nodes], 1).astype(np.float32)
        c.update(nodes, rows)
        nxt = {v: next((j for j in range(i + 1, len(bs)) if v in bs[j]), None) for v in held | set(nodes.tolist())}
        cand = sorted((j, v) for v, j in nxt.items() if j is not None)
        held = {v for _, v in cand[:cap]} if cap else set()
        # Ties in next use may be broken differently; the count of kept rows per next use is fixed.
        now = set(c.owner_of[c.owner_of >= 0].tolist())
        # Rows needed again are kept first; rows with no next use fill only spare room (never evicted
        # for nothing, so the cache stays full), those already held before the new ones.
        seen = before | set(nodes.tolist())
        again = {v for v in seen if any(v in bs[j] for j in range(i + 1, len(bs)))}
        assert len(now & again) == min(cap, len(again)) and len(now) == min(cap, len(seen))
        spare_old = before - again
        assert len(now & spare_old) == min(max(0, cap - len(again)), len(spare_old))
    assert hits == want


def test_belady_cache_stays_full_across_superbatches():
    """Rows with no next use in one superbatch stay while there is room, and hit in the next one."""
    b = MemoryBudget("1MiB")
    c = BeladyFeatureCache(8, 31, 2, np.float32, b)
    first, second = [np.array([1, 2, 3], np.int64)], [np.array([2, 3, 4], np.int64)]
    c.start_superbatch(first)
    c.update(first[0], np.stack([first[0], first[0]], 1).astype(np.float32))
    assert sorted(c.owner_of[c.owner_of >= 0].tolist()) == [1, 2, 3]
    c.start_superbatch(second)
    slot = c.lookup(second[0])
    assert np.all(slot[:2] >= 0) and slot[2] == -1
    assert np.all(c.rows[slot[:2], 0] == [2, 3])


def test_plans_cut_to_capacity(ds, pre):
    ip = ds.array("indptr")
    tp = cacheplan.lists_by_access(pre.counts, ip)
    kept = tp.cut(100_000).order
    assert tp.cost[kept].sum() <= 100_000
    assert tp.cost[tp.order[:kept.size + 1]].sum() > 100_000 or kept.size == tp.order.size
    fp = cacheplan.rows_by_access(pre.counts, 512)
    assert fp.cut(512 * 10).size == 10
    dp = cacheplan.lists_by_degree(ds.array("out_degree"), ip)
    assert np.all(np.diff(dp.score[dp.order]) <= 0)


def test_plans_held_bytes_within_the_stated_bound(ds, pre):
    # CaliEX keeps both plans while its caches fill, outside the budget; rss states their bytes per node.
    ip, n = ds.array("indptr"), ds.array("indptr").size - 1
    tp = cacheplan.lists_by_access(pre.counts, ip)
    fp = cacheplan.rows_by_access(pre.counts, 512, prior=ds.array("out_degree"))
    assert tp.order.dtype == fp.order.dtype == np.int32 and tp.cost.dtype == np.int32
    assert fp.cost.strides == (0,) and fp.nbytes == fp.order.nbytes + fp.score.nbytes + 8
    assert tp.nbytes + fp.nbytes <= plans.caliex_plans_nbytes(n)
    assert plans.caliex_plans_nbytes(n) == 24 * n + 8
    # narrow arrays, same ranking and costs as int64/float64 ones
    cost = np.diff(ip).astype(np.int64) * 4
    assert np.array_equal(tp.cost, cost)
    wide = np.concatenate([np.flatnonzero((pre.counts.topology > 0) & (cost >= 4096)),
                           np.flatnonzero((pre.counts.topology > 0) & (cost < 4096) & (cost > 0))])
    assert np.array_equal(np.sort(tp.order), np.sort(wide))
    assert np.array_equal(fp.cut(512 * 100).order, fp.order[:100])


def test_tuner_curve(ds, pre):
    _, cfg, budget, _, _ = workload("ci", "sage", 1, budget_fraction=2.0)
    s = open_system("caliex", ds, MemoryBudget(budget), cfg, pre=pre)
    try:
        curve = s.info["predicted"]
        assert len(curve) == 21 and s.split in [c["f"] for c in curve]
        best = min(c["total"] for c in curve)
        assert next(c for c in curve if c["f"] == s.split)["total"] <= best * 1.01
        # More topology share never lowers the topology hit rate, nor raises the feature one.
        ht = [c["hit_rate_topology"] for c in curve]
        hf = [c["hit_rate_features"] for c in curve]
        assert all(a <= b + 1e-12 for a, b in zip(ht, ht[1:]))
        assert all(a >= b - 1e-12 for a, b in zip(hf, hf[1:]))
    finally:
        s.close()


@pytest.mark.slow
def test_systems_train_same_batches_deterministically(ds, pre):
    """Every system sees identical mini-batches; losses match across systems and schedules."""
    _, cfg, budget, _, seeds = workload("ci", "sage", 2, budget_fraction=2.0, presample_batches=2)
    losses = {}
    for name in SYSTEMS:
        b = MemoryBudget(budget) if name != "memory" else reference_budget()
        s = open_system(name, ds, b, cfg, pre=pre)
        try:
            r = s.run(seeds)
            losses[name] = r.losses
            m = s.metrics()
            assert b.peak <= b.total
            if name != "memory":
                assert m["bytes_read"] >= m["bytes_needed"] or m["bytes_needed"] == 0
            assert r.batches == 2 and all(v > 0 for v in r.busy.values())
        finally:
            s.close()
        assert b.used == 0
    ref = losses["memory"]
    for name, ls in losses.items():
        np.testing.assert_allclose(ls, ref, rtol=1e-5, err_msg=name)


def test_budget_too_small_is_a_clear_error(ds, pre):
    _, cfg, _, _, _ = workload("ci", "sage", 1)
    with pytest.raises(BudgetExceeded, match="too small for caliex|asked for"):
        open_system("caliex", ds, MemoryBudget("3MiB"), cfg, pre=pre)
    with pytest.raises(ValueError, match="system='fast'"):
        open_system("fast", ds, MemoryBudget("3MiB"), cfg, pre=pre)
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler(MemoryTopology.from_dataset(ds), [])


def test_truncated_and_corrupted_files_refused(tmp_path):
    root = tmp_path / "data"
    d = make_dataset("caliex", "ci", root=root).dir
    feats = d / "features.bin"
    with open(feats, "r+b") as fh:  # corrupt one byte, keep the size
        fh.seek(12345)
        b = fh.read(1)
        fh.seek(12345)
        fh.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(DatasetError, match="corrupted"):
        open_dataset("caliex", "ci", root=root)
    os.truncate(d / "indices.bin", 4096)
    with pytest.raises(DatasetError, match="truncated"):
        open_dataset("caliex", "ci", root=root, full_verify=False)


def test_interrupted_build_leaves_nothing_valid(tmp_path, monkeypatch):
    import labkit.disk.datasets as dsmod
    root = tmp_path / "data"

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(dsmod, "feature_chunks", boom)
    with pytest.raises(KeyboardInterrupt):
        make_dataset("caliex", "ci", root=root)
    assert not (root / "caliex" / "ci").exists()
    assert not any(p.name.startswith(".ci.building") for p in (root / "caliex").iterdir())
    with pytest.raises(DatasetError, match="not built"):
        open_dataset("caliex", "ci", root=root, build=False)


def test_dataset_on_tmpfs_is_refused_or_falls_back(ds):
    """On a RAM filesystem direct I/O would measure memory: refuse, or fall back when asked."""
    import shutil

    from labkit.core.directio import DirectIOUnsupported
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    root = f"/dev/shm/labkit-disk-test-{os.getpid()}"
    try:
        shutil.copytree(ds.dir, os.path.join(root, "caliex", "ci"))
        shm = open_dataset("caliex", "ci", root=root, full_verify=False)
        with pytest.raises(DirectIOUnsupported, match="O_DIRECT"):
            DiskFeatures(shm, MemoryBudget("64MiB"))
        f = DiskFeatures(shm, MemoryBudget("64MiB"), fallback=True)
        try:
            assert not f.file.direct
            nodes = np.array([3, 1, 2000, 77], np.int64)
            assert np.array_equal(f.gather(nodes), ds.array("features")[nodes])
        finally:
            f.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_pipeline_overlaps_stages_and_keeps_order(ds, pre):
    _, cfg, budget, _, seeds = workload("ci", "sage", 3, budget_fraction=2.0, presample_batches=2)
    b = MemoryBudget(budget)
    s = open_system("caliex", ds, b, cfg, pre=pre)
    try:
        r = s.run(seeds)
    finally:
        s.close()
    spans = {(st, i): (t0, t1) for st, i, t0, t1 in r.timeline}
    idx = sorted({i for _, i, _, _ in r.timeline})
    assert len(idx) == 3 and r.batches == 3
    # The next batch is sampled while an earlier one is still in flight (gathered or trained).
    assert any(spans[("sample", idx[k + 1])][0] < spans[("train", idx[k])][1] for k in range(2))
    # Training consumes batches in order.
    assert [spans[("train", i)][0] for i in idx] == sorted(spans[("train", i)][0] for i in idx)
    assert b.used == 0 and b.peak <= b.total


def test_tuner_serial_model_adds_stages(ds, pre):
    from labkit.disk.tuner import Tuner
    ip = ds.array("indptr")
    tp, fp = cacheplan.lists_by_access(pre.counts, ip), cacheplan.rows_by_access(pre.counts, 512)
    args = (pre.batches, ip, 512, tp, fp, pre.profile, 20 << 20)
    serial, piped = Tuner(*args, pipelined=False).predict(0.3), Tuner(*args).predict(0.3)
    assert serial["total"] == pytest.approx(serial["sample"] + serial["gather"] + serial["train"])
    assert piped["total"] <= serial["total"] + 1e-12
    assert piped["total"] >= max(piped["sample"], piped["gather"], piped["train"]) - 1e-12


def test_feature_plan_prior_ranks_unseen_rows(ds, pre):
    deg = ds.array("out_degree")
    fp = cacheplan.rows_by_access(pre.counts, 512, prior=deg)
    seen = pre.counts.features > 0
    # Rows never pre-sampled still enter the plan, ranked by the prior; counts still lift a row.
    assert fp.order.size >= int(seen.sum()) and fp.order.size > 0
    assert np.all(np.diff(fp.score[fp.order]) <= 0)
    v = int(np.flatnonzero(~seen & (deg > 0))[0])
    w = np.flatnonzero(seen & (deg == deg[v]))
    if w.size:
        assert fp.score[w[0]] > fp.score[v]
    with pytest.raises(ValueError, match="prior has shape"):
        cacheplan.rows_by_access(pre.counts, 512, prior=deg[:10])


def test_feature_cache_lookup_and_partial_rows(ds):
    from labkit.disk.iocache import FeatureCache
    b = MemoryBudget("64MiB")
    df = DiskFeatures(ds, b, policy=IOPolicy("auto"))
    mf = MemoryFeatures.from_dataset(ds)
    try:
        cached = np.array([5, 17, 3, 900, 17], np.int64)
        df.set_cache(cached)
        assert isinstance(df.cache, FeatureCache)
        assert df.cache.reservation.nbytes == 4 * (FeatureCache.ID_BYTES + 512)  # ids deduplicated
        nodes = np.array([17, 4, 900, 3, 0, 5], np.int64)
        assert np.array_equal(df.cache.lookup(nodes) >= 0, [True, False, True, True, False, True])
        part = df.fetch_misses(nodes)
        assert part.rows.shape == (2, ds.meta["dim"]) and part.nbytes < nodes.size * 512
        assert np.array_equal(df.complete(part), mf.gather(nodes))
        with pytest.raises(ValueError, match=r"nodes\[1\]=-1 is not accepted"):
            mf.gather(np.array([3, -1], np.int64))
        with pytest.raises(ValueError, match="is not accepted"):
            mf.gather(np.array([ds.meta["num_nodes"]], np.int64))
    finally:
        df.close()
    assert b.used == 0


def test_caliex_queues_hold_disk_rows_only(ds, pre):
    """CaliEX's gathered-batch slot is sized by predicted cache misses, not whole batches."""
    _, cfg, budget, _, seeds = workload("ci", "sage", 2, budget_fraction=2.0, presample_batches=2)
    b = MemoryBudget(budget)
    s = open_system("caliex", ds, b, cfg, pre=pre)
    try:
        assert s.slot_bytes[1] < pre.slot_bytes[1]
        r = s.run(seeds)
        assert r.batches == 2 and b.peak <= b.total
    finally:
        s.close()


def test_uncached_topology_reads_equal_memory(ds):
    """Without a cache the lists come straight from the read buffer, in order, bit for bit."""
    b = MemoryBudget("64MiB")
    mt, dt = MemoryTopology.from_dataset(ds), DiskTopology(ds, b, policy=IOPolicy("auto"))
    try:
        s = batch_seeds(ds.array("train"), 128, 1)[0]
        assert NeighborSampler(mt, [10, 5], seed=1).sample(s, 4).equals(NeighborSampler(dt, [10, 5], seed=1).sample(s, 4))
        assert dt.stats.hits == 0 and dt.stats.misses > 0
    finally:
        dt.close()


# ---------------------------------------------------------------- pyg_mmap (PyG on np.memmap in a memory cgroup)

def test_pyg_mmap_batches_equal_in_memory_batches(ds):
    """The child's mini-batches (sampled and gathered through np.memmap in a cgroup) equal the in-memory ones."""
    from labkit.disk.pygmmap import batch_digest, cgroup_support, run_pyg_mmap
    parent, reason = cgroup_support()
    if parent is None:
        pytest.skip(f"pyg_mmap needs a memory cgroup: {reason}")
    r = run_pyg_mmap("ci", "sage", per_call=1, rounds=2, fraction=2.0, digests=True, timeout=300)
    assert "skipped" not in r
    _, cfg, _, _, seeds = workload("ci", "sage", 2, budget_fraction=2.0)
    mem = open_system("memory", ds, reference_budget(), cfg)
    want = []
    for k, s in enumerate(seeds):
        b = mem.sampler.sample(s, 10_000 * (k + 1))
        want.append(batch_digest(b, mem.features.gather(b.n_id)))
    assert r["digests"] == want
    # The cgroup was really applied (and removed: run_pyg_mmap's context manager).
    assert 0 < r["cgroup"]["limit"] <= r["limit"]  # the kernel rounds down to a page
    assert r["limit"] == r["baseline_charged"] + r["budget"] + r["anon_growth"]
    assert len(r["accs"]) == 2 and all(0.0 <= a <= 1.0 for a in r["accs"])
    assert not list(parent.glob(f"labkit-pyg-mmap-{os.getpid()}-*"))  # ours (other runs may hold theirs)


def test_pyg_mmap_skips_with_a_reason_without_cgroups(monkeypatch):
    from labkit.disk import pygmmap
    monkeypatch.setattr(pygmmap, "_PROBED", (None, "creating a memory cgroup needs root (euid 1000)"))
    r = pygmmap.run_pyg_mmap("ci", "sage", 1, 2, 2.0)
    assert r == {"skipped": "creating a memory cgroup needs root (euid 1000)"}


def test_pyg_mmap_bad_input():
    from labkit.disk.pygmmap import run_pyg_mmap
    with pytest.raises(ValueError, match="rounds"):
        run_pyg_mmap("ci", "sage", 1, 1, 2.0)


def test_sample_group_equals_one_by_one_and_reads_less(ds):
    """A group shares one topology fetch per hop; each batch is bit-identical to sampling it alone."""
    b = MemoryBudget("64MiB")
    mt = MemoryTopology.from_dataset(ds)
    dt = DiskTopology(ds, b, policy=IOPolicy("random"))
    try:
        dt.set_cache(np.random.default_rng(2).choice(ds.meta["num_nodes"], 2000, replace=False))
        seeds = batch_seeds(ds.array("train"), 128, 3, seed=5)
        alone = [NeighborSampler(mt, [15, 10, 5], seed=4).sample(s, 7 + i) for i, s in enumerate(seeds)]
        one = NeighborSampler(dt, [15, 10, 5], seed=4)
        for i, s in enumerate(seeds):
            one.sample(s, 7 + i)
        read_alone = dt.file.counters.bytes_read
        dt.file.counters.reset()
        grouped = NeighborSampler(dt, [15, 10, 5], seed=4).sample_group(seeds, [7, 8, 9])
        assert [g.index for g in grouped] == [7, 8, 9]
        assert all(a.equals(g) for a, g in zip(alone, grouped))
        assert grouped[0].edge_src.dtype == np.int32
        assert 0 < dt.file.counters.bytes_read < read_alone
        with pytest.raises(ValueError, match="indices has 2 entries for 3 seed arrays"):
            one.sample_group(seeds, [1, 2])
    finally:
        dt.close()


def test_pipelined_groups_train_the_same_batches(ds, pre):
    _, cfg, budget, _, seeds = workload("ci", "sage", 4, budget_fraction=2.0, presample_batches=2)
    losses = {}
    for group in (1, 3):
        b = MemoryBudget(budget)
        s = open_system("caliex", ds, b, cfg, pre=pre, group=group)
        try:
            assert s.group == group and s.info["group"] == group
            r = s.run(seeds)
            losses[group] = r.losses
            # Every batch of a group has its sampling span; the group's time is counted once.
            assert sorted(i for st, i, _, _ in r.timeline if st == "sample") == list(range(4))
            assert b.peak <= b.total
        finally:
            s.close()
        assert b.used == 0
    np.testing.assert_allclose(losses[3], losses[1], rtol=1e-5)


def test_tuner_prices_grouped_topology_reads_lower(ds):
    _, cfg, budget, pseeds, _ = workload("ci", "sage", 1, budget_fraction=2.0, presample_batches=4)
    pre4 = presample(ds, cfg, pseeds, MemoryBudget(budget))
    from labkit.disk.system import group_choices, holdout_tuner
    assert group_choices(pre4) == [1, 2]
    ip = ds.array("indptr")
    io = [holdout_tuner(pre4, ip, 512, 1 << 20, group=g).predict(0.0)["sample"] for g in (1, 2)]
    assert io[1] < io[0]
    with pytest.raises(ValueError, match="group=3 is not accepted"):
        holdout_tuner(pre4, ip, 512, 1 << 20, group=3)


def test_sampled_entries_equal_memory_and_spare_hub_pages(ds):
    """The sampler fetches only sampled entries: equal to RAM's, cached or not; a hub costs few pages."""
    from labkit.disk.store import lists_ptr
    b = MemoryBudget("64MiB")
    mt = MemoryTopology.from_dataset(ds)
    dt = DiskTopology(ds, b, policy=IOPolicy("random"))
    try:
        deg = np.diff(mt.indptr)
        nodes = np.argsort(deg)[-40:][::-1].astype(np.int64)  # hubs first
        dt.set_cache(nodes[::3])
        ptr = lists_ptr(mt.indptr, nodes)
        pos = np.sort(np.random.default_rng(0).choice(int(ptr[-1]), 300, replace=False))
        assert np.array_equal(dt.entries(nodes, ptr, pos), mt.entries(nodes, ptr, pos))
        dt.set_cache(None)
        dt.file.counters.reset()
        hub = nodes[:1]
        hptr = lists_ptr(mt.indptr, hub)
        assert np.array_equal(dt.entries(hub, hptr, np.array([0, 5], np.int64)),
                              mt.indices[mt.indptr[hub[0]] + np.array([0, 5])])
        assert dt.file.counters.bytes_read <= 2 * 4096 < deg[hub[0]] * 4
    finally:
        dt.close()


def test_cgroups_left_by_dead_benches_are_swept(tmp_path):
    """A memory group whose bench was killed before its clean-up goes; a live process's group stays."""
    import subprocess
    import sys

    from labkit.disk.pygmmap import sweep_cgroups
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"labkit-pyg-mmap-{dead.pid}-abcd1234"
    kept = tmp_path / f"labkit-pyg-mmap-{os.getpid()}-abcd1234"
    other = tmp_path / "someone-elses-group"
    for d in (gone, kept, other):
        d.mkdir()
    assert sweep_cgroups(tmp_path) == [gone]
    assert not gone.exists() and kept.exists() and other.exists()


def test_ginex_cache_under_a_budget_far_above_the_graph_holds_at_most_the_graphs_rows(ds):
    """Reproduction: Ginex sized its cache from the budget, not the graph (41M rows for 32,768 nodes)."""
    from labkit.core.memory import machine_limit
    from labkit.disk.system import dataset_bytes
    from labkit.disk.train import ModelConfig

    cfg = ModelConfig.paper("sage")
    big = machine_limit()[0] // 2
    assert big > 10 * dataset_bytes(ds)
    s = open_system("ginex", ds, big, cfg)
    try:
        n = int(ds.meta["num_nodes"])
        cache = s.features.cache
        assert cache.capacity == n and cache.rows.shape[0] == n and cache.owner_of.shape[0] == n
        assert s.topology.cache is None or int((s.topology.cache.slot >= 0).sum()) <= n
        assert s.budget.used < 4 * dataset_bytes(ds)  # what the caches reserved: the graph's size, not the budget's
    finally:
        s.close()
    assert s.budget.used == 0
