"""fp16 features: built, aligned for direct I/O, and gathered bit for bit through every feature store."""

from __future__ import annotations

import os

import numpy as np
import pytest

from labkit.core.datasets import make_dataset
from labkit.core.memory import MemoryBudget
from labkit.disk.sampler import NeighborSampler, batch_seeds
from labkit.disk.store import DiskFeatures, IOPolicy, MemoryFeatures, MemoryTopology
from labkit.disk.train import ModelConfig, Trainer


@pytest.fixture(scope="module")
def ds16(tmp_path_factory):
    return make_dataset("caliex", "ci", root=tmp_path_factory.mktemp("fp16"), params={"dtype": "float16"})


def test_fp16_dataset_is_the_fp32_one_rounded_and_page_aligned(ds16, ds):
    info = ds16.info("features")
    assert np.dtype(info["dtype"]) == np.float16 and info["align"] == 4096
    assert os.path.getsize(ds16.path("features")) % 4096 == 0
    assert ds16.meta["feature_dtype"] == "float16"
    x16 = ds16.array("features")
    assert np.array_equal(x16, ds.array("features").astype(np.float16))
    assert np.array_equal(ds16.array("indices"), ds.array("indices"))  # only the features differ


@pytest.mark.parametrize("cache", ["none", "static", "belady"])
def test_fp16_rows_gathered_bit_for_bit(ds16, cache):
    x = ds16.array("features", mmap=False)
    b = MemoryBudget("64MiB")
    mf = MemoryFeatures(x)
    df = DiskFeatures(ds16, b, policy=IOPolicy("auto"), fallback=True)
    try:
        assert df.row_bytes == 256 and df.dtype == np.float16
        rng = np.random.default_rng(0)
        if cache == "static":
            df.set_cache(rng.choice(x.shape[0], 2000, replace=False))
        elif cache == "belady":
            df.set_cache(belady_rows=2000)
            batches = [np.sort(rng.choice(x.shape[0], 3000, replace=False)) for _ in range(3)]
            df.cache.start_superbatch(batches)
        for k in range(3):
            nodes = batches[k] if cache == "belady" else rng.choice(x.shape[0], 3000, replace=False)
            want = x[nodes]
            got_m, got_d = mf.gather(nodes), df.gather(nodes)
            assert got_m.dtype == got_d.dtype == np.float16
            assert np.array_equal(got_m.view(np.uint16), want.view(np.uint16))
            assert np.array_equal(got_d.view(np.uint16), want.view(np.uint16))
        if cache != "none":
            assert df.stats.hits > 0
    finally:
        df.close()
    assert b.used == 0


def test_fp16_batch_trains(ds16):
    mt = MemoryTopology.from_dataset(ds16)
    mf = MemoryFeatures.from_dataset(ds16)
    s = batch_seeds(ds16.array("train"), 64, 1)[0]
    bt = NeighborSampler(mt, [5, 5], seed=0).sample(s, 0)
    t = Trainer(ModelConfig("sage", (5, 5), hidden=16, batch_size=64), mf.dim, int(ds16.meta["num_classes"]))
    loss, acc = t.step(bt, mf.gather(bt.n_id), ds16.array("labels", mmap=False))
    assert np.isfinite(loss) and 0.0 <= acc <= 1.0
