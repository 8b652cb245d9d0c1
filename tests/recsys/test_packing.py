"""Packed and per-field stages agree: outputs, weight gradients and updates, for every optimizer."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.recsys.data import SyntheticCTR, make_fields
from labkit.recsys.layers import PerFieldEmbeddings
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import plan_groups, tables_for


def _setup(n_fields=6, dims=(4, 8, 8), hotness=(1, 3), pooling="sum", wide=True, seed=0):
    specs = make_fields(n_fields, cardinality=[30, 200, 1000], dims=list(dims), hotness=list(hotness),
                        pooling=pooling)
    tables = tables_for(specs, wide=wide)
    return specs, tables, SyntheticCTR(specs, seed=seed)


def test_groups_pack_by_dim_with_wide_first():
    _, tables, _ = _setup()
    groups = plan_groups(tables, "dim")
    keys = [tables[g[0]].key for g in groups]
    assert keys == sorted(keys) and len(groups) == 3  # wide dim 1, deep dim 4, deep dim 8
    assert all(tables[i].wide for i in groups[0])
    assert len(plan_groups(tables, "field")) == len(tables)
    with pytest.raises(ValueError, match="group_by='rows'"):
        plan_groups(tables, "rows")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 1000), pooling=st.sampled_from(["sum", "mean"]), batch=st.integers(1, 48))
def test_packed_outputs_and_gradients_equal_per_field(seed, pooling, batch):
    _, tables, gen = _setup(pooling=pooling, seed=seed)
    base, packed = PerFieldEmbeddings(tables, seed=seed), PackedEmbeddings(tables, seed=seed)
    b = gen.batch(batch, 0)
    eb, ep = base.lookup(b), packed.lookup(b)
    assert torch.allclose(eb, ep, atol=1e-6)
    grad = torch.randn(eb.shape, generator=torch.Generator().manual_seed(seed))
    eb.backward(grad)
    gp = packed.weight_gradients(b, grad)
    for i, bag in enumerate(base.bags):
        dense = bag.weight.grad.to_dense().numpy()
        np.testing.assert_allclose(gp[i], dense, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise_adagrad"])
def test_fused_update_matches_torch_optimizer(optimizer):
    _, tables, gen = _setup()
    base = PerFieldEmbeddings(tables, optimizer=optimizer, lr=0.1)
    packed = PackedEmbeddings(tables, optimizer=optimizer, lr=0.1)
    for step in range(4):
        b = gen.batch(32, step)
        grad = torch.randn(32, base.width, generator=torch.Generator().manual_seed(step))
        base.apply(b, base.lookup(b), grad)
        packed.apply(b, None, grad)
    for i in range(len(tables)):
        np.testing.assert_allclose(packed.table_weights(i), base.table_weights(i), atol=2e-5)


@pytest.mark.parametrize("hotness", [(1,), (1, 3)])
def test_a_batch_longer_than_a_tile_matches_per_field(hotness):
    # The kernels walk the batch in tiles of TILE samples: a batch of more than one tile (and a
    # partial last tile) must give the per-field stage's outputs and SGD updates.
    from labkit.recsys.kernels import TILE
    _, tables, gen = _setup(n_fields=3, hotness=hotness)
    base = PerFieldEmbeddings(tables, optimizer="sgd", lr=0.1)
    packed = PackedEmbeddings(tables, optimizer="sgd", lr=0.1)
    n = TILE + 37
    b = gen.batch(n, 0)
    assert torch.allclose(base.lookup(b), packed.lookup(b), atol=1e-6)
    grad = torch.randn(n, base.width, generator=torch.Generator().manual_seed(0))
    base.apply(b, base.lookup(b), grad)
    packed.apply(b, None, grad)
    for i in range(len(tables)):
        np.testing.assert_allclose(packed.table_weights(i), base.table_weights(i), atol=2e-5)


def test_cached_stage_reads_and_updates_through_the_cache(tmp_path):
    from labkit.core.cacheplan import hot_fraction
    from labkit.recsys.cache import SlowTier
    _, tables, gen = _setup()
    ram = PackedEmbeddings(tables, optimizer="adagrad")
    tier = SlowTier.create(tmp_path)
    tiered = PackedEmbeddings(tables, optimizer="adagrad", slow_tier=tier)
    counts = tiered.count_ids(gen.batches(64, 3))
    tiered.plan_cache(hot_fraction(counts, 0.2))
    assert tiered.cached_rows > 0
    for step in range(3):
        b = gen.batch(64, 10 + step)
        assert torch.allclose(ram.lookup(b), tiered.lookup(b), atol=1e-6)
        grad = torch.randn(64, ram.width, generator=torch.Generator().manual_seed(step))
        ram.apply(b, None, grad)
        tiered.apply(b, None, grad)
    assert 0 < tiered.hit_rate <= 1
    for i in range(len(tables)):
        np.testing.assert_allclose(tiered.table_weights(i), ram.table_weights(i), atol=1e-6)
    tiered.close()
    assert not tier.dir.exists()


def test_bad_grad_shape_is_refused():
    _, tables, gen = _setup()
    packed = PackedEmbeddings(tables)
    b = gen.batch(8, 0)
    with pytest.raises(ValueError, match=r"grad='shape \(8, 3\)' is not accepted"):
        packed.apply(b, None, torch.zeros(8, 3))
    with pytest.raises(ValueError, match="optimizer='adam'"):
        PackedEmbeddings(tables, optimizer="adam")


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_empty_and_mixed_bags_match_per_field(pooling):
    from labkit.recsys.data import JaggedBatch
    _, tables, _ = _setup(n_fields=3, dims=(4,), hotness=(1,), pooling=pooling, wide=False)
    base, packed = PerFieldEmbeddings(tables, optimizer="adagrad"), PackedEmbeddings(tables, optimizer="adagrad")
    lengths = np.array([1, 0, 3, 1, 2, 0, 0, 1, 4], np.int64)  # 3 fields x 3 samples, some bags empty
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.integers(0, t.cardinality, n) for t, n in
                             zip(tables, lengths.reshape(3, 3).sum(1))])
    b = JaggedBatch([f"C{i + 1}" for i in range(3)], values, lengths, np.zeros((3, 13)), np.zeros(3))
    assert not b.single_hot
    eb, ep = base.lookup(b), packed.lookup(b)
    assert torch.allclose(eb, ep, atol=1e-6)
    grad = torch.randn(eb.shape, generator=torch.Generator().manual_seed(1))
    base.apply(b, eb, grad)
    packed.apply(b, None, grad)
    for i in range(len(tables)):
        np.testing.assert_allclose(packed.table_weights(i), base.table_weights(i), atol=2e-5)


def test_lookup_never_overwrites_an_output_still_held():
    _, tables, gen = _setup()
    packed = PackedEmbeddings(tables)
    b0, b1 = gen.batch(16, 0), gen.batch(16, 1)
    first = packed.lookup(b0)
    kept = first.detach()[2:]  # a view keeps the buffer alive too
    expect, held = kept.clone(), first.data_ptr()
    del first
    second = packed.lookup(b1)
    assert torch.equal(kept, expect) and second.data_ptr() != held
    ptr = second.data_ptr()
    del second
    assert packed.lookup(b1).data_ptr() == ptr  # a buffer nobody holds is reused


@pytest.mark.parametrize("name", ["../escape", "a/b", "/abs", ".hidden", "..", "", "a\\b", "x\n", 3])
def test_slow_tier_refuses_names_that_are_not_plain_file_names(tmp_path, name):
    from labkit.recsys.cache import SlowTier
    tier = SlowTier.create(tmp_path / "scratch")
    with pytest.raises(ValueError, match=r"name=.* is not accepted; expected a plain file name"):
        tier.array(name, (2, 2))
    assert list(tmp_path.iterdir()) == [tmp_path / "scratch"]  # nothing written beside the scratch folder
    assert not list(tier.dir.iterdir()) and tier.files == []
    ok = tier.array("group0_weights.v-1", np.ones((2, 2), np.float32))
    assert ok.sum() == 4 and tier.files[0].parent == tier.dir
    tier.close()
    assert not tier.dir.exists()


def test_unclosed_slow_tier_is_removed_when_collected_and_close_is_idempotent(tmp_path):
    import gc

    from labkit.recsys.cache import SlowTier
    tier = SlowTier.create(tmp_path)
    tier.array("w", np.ones((4, 2), np.float32))
    d = tier.dir
    del tier
    gc.collect()
    assert not d.exists()
    tier = SlowTier.create(tmp_path)
    tier.close()
    tier.close()
    assert not tier.dir.exists() and not list(tmp_path.iterdir())


def test_unclosed_slow_tier_is_removed_at_exit(tmp_path):
    import subprocess
    import sys
    code = ("import sys; from labkit.recsys.cache import SlowTier\n"
            "keep = SlowTier.create(sys.argv[1]); keep.array('w', (4, 2)); print(keep.dir, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(str(tmp_path)) and not list(tmp_path.iterdir())


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise_adagrad"])
def test_cache_replans_and_drop_write_every_update_back_to_the_slow_tier(tmp_path, optimizer):
    """Re-planning flushes the old cache and drop_cache flushes the last one: afterwards the raw
    slow-tier files hold exactly what a RAM-only stage trained on the same batches holds."""
    from labkit.core.cacheplan import hot_fraction
    from labkit.recsys.cache import SlowTier
    _, tables, gen = _setup()
    ram = PackedEmbeddings(tables, optimizer=optimizer, lr=0.1)
    tier = SlowTier.create(tmp_path)
    tiered = PackedEmbeddings(tables, optimizer=optimizer, lr=0.1, slow_tier=tier)
    fractions = [0.1, 0.5, 0.0, 1.0, 0.3, 0.05]
    stale = 0
    for step, fraction in enumerate(fractions):
        batches = [gen.batch(64, 100 * step + j) for j in range(2)]
        tiered.plan_cache(hot_fraction(tiered.count_ids(batches), fraction))
        assert (tiered.cached_rows > 0) == (fraction > 0)
        for j, b in enumerate(batches):
            assert torch.equal(ram.lookup(b), tiered.lookup(b))
            grad = torch.randn(64, ram.width, generator=torch.Generator().manual_seed(10 * step + j))
            ram.apply(b, None, grad)
            tiered.apply(b, None, grad)
        assert (tiered.hit_rate > 0) == (fraction > 0)
        # Updates of cached rows live only in the cache until it is flushed.
        stale += sum(not np.array_equal(np.asarray(g.weights), r.weights) for g, r in zip(tiered.groups, ram.groups))
    assert stale > 0  # so the comparison below depends on the write-back
    tiered.drop_cache()
    assert tiered.cached_rows == 0
    names = {p.name for p in tier.files}
    for gi, (g, r) in enumerate(zip(tiered.groups, ram.groups)):
        # Read the files back (not the stage's mapping): what the slow tier itself holds.
        w = np.load(tier.dir / f"group{gi}_weights.f32", mmap_mode="r")
        np.testing.assert_array_equal(w, r.weights)
        if optimizer == "sgd":
            assert f"group{gi}_state.f32" not in names
        else:
            st = np.load(tier.dir / f"group{gi}_state.f32", mmap_mode="r")
            assert st.shape == r.state.shape and st.any()
            np.testing.assert_array_equal(st, r.state)
    for i in range(len(tables)):
        np.testing.assert_array_equal(tiered.table_weights(i), ram.table_weights(i))
    tiered.close()
    assert not tier.dir.exists()


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwise_adagrad"])
@pytest.mark.parametrize("hotness", [1, 3])
@pytest.mark.parametrize("cached", [False, True])
def test_every_row_width_path_matches_per_field(optimizer, hotness, cached):
    """The kernels have literal-width copies of their row loops (8, 16, 32, 64) and a generic one
    (any other width); single-hot bags take their own path. All must look up and update alike."""
    from labkit.core.cacheplan import hot_fraction
    specs = make_fields(6, cardinality=[50, 400], dims=[4, 8, 12, 16, 32, 64], hotness=hotness,
                        pooling=["sum", "mean"])
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=3)
    base = PerFieldEmbeddings(tables, optimizer=optimizer, lr=0.1)
    packed = PackedEmbeddings(tables, optimizer=optimizer, lr=0.1)
    assert sorted({g.dim for g in packed.groups}) == [4, 8, 12, 16, 32, 64]
    if cached:
        packed.plan_cache(hot_fraction(packed.count_ids(gen.batches(64, 2)), 0.3))
        assert packed.cached_rows > 0
    for step in range(3):
        b = gen.batch(64, 10 + step)
        assert b.single_hot == (hotness == 1)
        eb, ep = base.lookup(b), packed.lookup(b)
        assert torch.allclose(eb, ep, atol=1e-6)
        grad = torch.randn(eb.shape, generator=torch.Generator().manual_seed(step))
        base.apply(b, eb, grad)
        packed.apply(b, ep, grad)
    if cached:
        assert packed.hit_rate > 0
    for i in range(len(tables)):
        np.testing.assert_allclose(packed.table_weights(i), base.table_weights(i), atol=2e-5)


@pytest.mark.parametrize("cached", [False, True])
def test_single_hot_lookups_stream_whole_lines_and_match_per_field(monkeypatch, cached):
    """Groups whose rows fill whole aligned 64-byte lines of the output (dims 16, 32, 64 here) are
    written with non-temporal stores; the outputs must be the per-field ones all the same. With
    dims 8 and 16 the rows are 288 bytes and the dim-16 group starts at column 24, off the line
    boundaries: every group must take the plain path."""
    from labkit.recsys import kernels
    from labkit.core.cacheplan import hot_fraction
    streamed = []
    real = kernels.pooled_lookup

    def spy(*args):
        streamed.append(bool(args[-1]))
        return real(*args)
    monkeypatch.setattr(kernels, "pooled_lookup", spy)
    for dims, expect in (([16, 32, 64], [True, True, True]), ([8, 16], [False, False])):
        specs = make_fields(6, cardinality=[50, 400], dims=dims, hotness=1)
        tables = tables_for(specs)
        gen = SyntheticCTR(specs, seed=5)
        base, packed = PerFieldEmbeddings(tables, optimizer="sgd"), PackedEmbeddings(tables, optimizer="sgd")
        if cached:
            packed.plan_cache(hot_fraction(packed.count_ids(gen.batches(64, 2)), 0.3))
        for step in range(2):
            b = gen.batch(33, step)
            streamed.clear()
            assert torch.equal(base.lookup(b), packed.lookup(b))
            assert streamed == expect
