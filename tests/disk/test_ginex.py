"""Ginex's real shape: the sampled superbatch lives on disk, and its inspection drives the Belady cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

from labkit.core.memory import MemoryBudget
from labkit.disk.iocache import BeladyFeatureCache
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.baselines.spill import NEVER, SampleSpill
from labkit.disk.store import MemoryTopology
from labkit.disk.system import dataset_bytes, open_system, presample
from labkit.disk.train import ModelConfig


@pytest.fixture(scope="module")
def batches(ds):
    sampler = NeighborSampler(MemoryTopology.from_dataset(ds), [5, 5], seed=0)
    return [sampler.sample(s, i) for i, s in enumerate(batch_seeds(ds.array("train"), 256, 5, seed=2))]


def test_spilled_superbatch_reads_back_bit_for_bit_with_its_next_uses(ds, batches, tmp_path):
    b = MemoryBudget("64MiB")
    n = int(ds.meta["num_nodes"])
    sp = SampleSpill(tmp_path, b, n, buffer_bytes=4096)
    try:
        for bt in batches:
            sp.write(bt)
        first = sp.inspect()
        assert os.path.getsize(sp.path) >= sum(r.nbytes for r in sp.records)
        for k, bt in enumerate(batches):
            got, nxt = sp.read(k)
            assert got.equals(bt) and got.index == bt.index and got.batch_size == bt.batch_size
            assert np.array_equal(got.node_hops, bt.node_hops) and np.array_equal(got.edge_hops, bt.edge_hops)
            want = [next((j for j in range(k + 1, len(batches)) if v in set(batches[j].n_id.tolist())), NEVER)
                    for v in bt.n_id[:200].tolist()]
            assert nxt[:200].tolist() == want
        for v in np.concatenate([bt.n_id[:50] for bt in batches]).tolist():
            assert first[v] == next(j for j, bt in enumerate(batches) if v in set(bt.n_id.tolist()))
        # Everything came back from the file, through a buffer the budget pays for (grown to the largest record).
        assert sp.bytes_read >= sum(r.nbytes for r in sp.records) and sp.reads >= 2 * len(batches)
        assert b.used >= max(r.nbytes for r in sp.records) + n * 4
        folder = sp.folder
    finally:
        sp.close()
    assert b.used == 0 and not os.path.exists(folder)


def test_belady_fed_by_the_inspection_matches_the_in_memory_oracle(batches, tmp_path):
    """The same hits, row for row, whether next uses come from RAM or from the spilled inspection."""
    n = max(int(bt.n_id.max()) for bt in batches) + 1
    b = MemoryBudget("256MiB")
    mem = BeladyFeatureCache(3000, n, 2, np.float32, b)
    disk = BeladyFeatureCache(3000, n, 2, np.float32, b)
    sp = SampleSpill(tmp_path, b, n)
    try:
        for half in (batches[:3], batches[3:]):  # two superbatches: the cache carries over
            mem.start_superbatch([bt.n_id for bt in half])
            sp.reset()
            for bt in half:
                sp.write(bt)
            disk.begin_superbatch(sp.inspect())
            for k, bt in enumerate(half):
                got, nxt = sp.read(k)
                rows = np.stack([bt.n_id, bt.n_id], 1).astype(np.float32)
                assert np.array_equal(mem.lookup(bt.n_id) >= 0, disk.lookup(got.n_id) >= 0)
                mem.update(bt.n_id, rows)
                disk.update(got.n_id, rows, nxt)
                assert np.array_equal(np.sort(mem.owner_of), np.sort(disk.owner_of))
    finally:
        sp.close()


def test_ginex_keeps_no_superbatch_in_ram_whatever_its_size(ds):
    """Reproduction: the Ginex contender held its sampled superbatch in RAM; now it reads it back from disk.

    A superbatch of every mini-batch of the run (the epoch's worth, at this size) costs the budget
    no more than a superbatch of one, and each mini-batch trained was read back from the spill file.
    """
    cfg = ModelConfig("sage", (5, 5), hidden=16, batch_size=256)
    seeds = batch_seeds(ds.array("train"), cfg.batch_size, 8, seed=4)
    budget = int(0.5 * dataset_bytes(ds))
    pre = presample(ds, cfg, seeds[:2], MemoryBudget(budget))
    peaks, losses = {}, {}
    for sb in (1, 6):
        b = MemoryBudget(budget)
        s = open_system("ginex", ds, b, cfg, pre=pre, superbatch=sb)
        try:
            assert os.path.dirname(s.spill.folder) == str(ds.path("features").parent)
            s.reset_counters()
            r = s.run(seeds[2:])
            m = s.metrics()
            assert r.busy["inspect"] > 0 and r.batches == 6
            assert m["spill_bytes_read"] >= m["spill_bytes_written"] > 0 and m["spill_reads"] >= 2 * 6
            assert 0 < m["hit_rate_features"] < 1
            peaks[sb], losses[sb] = b.peak, r.losses
        finally:
            s.close()
        assert b.used == 0
    assert peaks[6] <= peaks[1]
    assert np.allclose(losses[1], losses[6])  # the same mini-batches, the same model
