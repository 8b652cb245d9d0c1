"""Issue 7's clauses that other tests touched only in passing: per-field skew from a spec file,
grouping by dim *and* pooling over dims 4..64, 1000 fields, what each model computes, exact
cache hit counting against cache size, and the readers' progress bars."""

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from labkit.recsys.data import readers as rdata
from labkit.core.cacheplan import hot_fraction
from labkit.recsys.cache import SlowTier
from labkit.recsys.data import (FieldSpec, SyntheticCTR, load_field_specs, make_fields, read_criteo_parquet,
                                read_criteo_tsv, save_field_specs)
from labkit.recsys.layers import DenseArch, PerFieldEmbeddings
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import plan_groups, tables_for


def test_make_fields_sets_zipf_and_pooling_per_field():
    specs = make_fields(4, cardinality=[10, 20], zipf=[0.0, 1.5, 2.0], pooling=["sum", "mean"])
    assert [s.zipf for s in specs] == [0.0, 1.5, 2.0, 0.0]
    assert [s.pooling for s in specs] == ["sum", "mean", "sum", "mean"]
    assert [s.cardinality for s in specs] == [10, 20, 10, 20]
    with pytest.raises(ValueError, match=r"zipf=\[\] is not accepted"):
        make_fields(2, zipf=[])
    with pytest.raises(ValueError, match="C2.zipf=-1"):
        make_fields(2, zipf=[1.0, -1])


def test_generator_follows_each_fields_own_skew_and_cardinality_from_a_spec_file(tmp_path):
    # Skew and table size per field, written to and read from a field spec file, drive the ids.
    p = tmp_path / "fields.json"
    save_field_specs([FieldSpec("flat", 50, zipf=0.0), FieldSpec("steep", 5000, zipf=1.5),
                      FieldSpec("mild", 300, zipf=0.8, hotness=3)], p)
    specs = load_field_specs(p)
    gen = SyntheticCTR(specs, seed=0)
    b = gen.batch(20_000, 0)
    for f, s in enumerate(specs):
        ids = b.field_ids(f)[0]
        assert ids.min() >= 0 and ids.max() < s.cardinality, s.name
        top = np.sort(np.bincount(ids, minlength=s.cardinality))[::-1]
        # the empirical mass of the 10 hottest ids is the inverse-CDF mass of this field's own skew
        assert abs(top[:10].sum() / ids.size - gen.samplers[f].top_mass(10)) < 0.03, s.name
    assert gen.samplers[0].top_mass(10) == pytest.approx(10 / 50)  # zipf 0: uniform
    assert gen.samplers[1].top_mass(10) > 0.6  # zipf 1.5: a steep head
    assert b.lengths.reshape(3, -1)[2].mean() == pytest.approx(3, abs=0.1)  # hotness 3: multi-hot


def _mixed_specs():
    # dims 4..64; same dim with different poolings; one key shared by non-adjacent fields
    return make_fields(8, cardinality=[20, 300, 80, 1000], dims=[4, 64, 64, 16, 32, 64, 8, 64],
                       pooling=["sum", "mean", "sum", "mean"], hotness=[1, 3, 2])


def test_packing_groups_by_dim_and_pooling_and_matches_per_field_for_dims_4_to_64():
    specs = _mixed_specs()
    tables = tables_for(specs, wide=True)
    groups = plan_groups(tables, "dim")
    keys = [{tables[i].key for i in g} for g in groups]
    assert all(len(k) == 1 for k in keys)  # one dim and one pooling per packed table
    all_keys = {t.key for t in tables}
    assert len(groups) == len(all_keys)  # and one packed table per (dim, pooling)
    dim64 = [[tables[i].name for i in g] for g in groups if tables[g[0]].dim == 64]
    assert sorted(map(sorted, dim64)) == [["C2", "C6", "C8"], ["C3"]]  # mean apart from sum
    gen = SyntheticCTR(specs, seed=3)
    base = PerFieldEmbeddings(tables, optimizer="rowwise_adagrad", lr=0.1)
    packed = PackedEmbeddings(tables, optimizer="rowwise_adagrad", lr=0.1)
    assert packed.n_lookups == len(groups)
    for step in range(3):
        b = gen.batch(40, step)
        eb, ep = base.lookup(b), packed.lookup(b)
        assert eb.shape == (40, sum(t.dim for t in tables))
        torch.testing.assert_close(ep, eb, atol=1e-6, rtol=0)
        grad = torch.randn(eb.shape, generator=torch.Generator().manual_seed(step))
        if step == 0:  # gradients for the same weights, before any update
            gp = packed.weight_gradients(b, grad)
            eb2 = base.lookup(b)
            eb2.backward(grad)
            for i, bag in enumerate(base.bags):
                np.testing.assert_allclose(gp[i], bag.weight.grad.to_dense().numpy(), atol=1e-5, err_msg=tables[i].name)
            base.opt.zero_grad(set_to_none=True)
        base.apply(b, eb, grad)
        packed.apply(b, None, grad)
    for i, t in enumerate(tables):
        np.testing.assert_allclose(packed.table_weights(i), base.table_weights(i), atol=2e-5, err_msg=t.name)


@pytest.mark.slow
def test_a_thousand_fields_pack_into_a_few_tables_and_train_like_per_field():
    specs = make_fields(1000, cardinality=[7, 50, 300], dims=[4, 8, 16, 64], hotness=[1, 2])
    tables = tables_for(specs)
    b = SyntheticCTR(specs, seed=1).batch(8, 0)
    base = PerFieldEmbeddings(tables, optimizer="rowwise_adagrad")
    packed = PackedEmbeddings(tables, optimizer="rowwise_adagrad")
    assert base.n_lookups == 1000 and packed.n_lookups == 4
    eb = base.lookup(b)
    torch.testing.assert_close(packed.lookup(b), eb, atol=1e-6, rtol=0)
    grad = torch.randn(eb.shape, generator=torch.Generator().manual_seed(0))
    base.apply(b, eb, grad)
    packed.apply(b, None, grad)
    diff = max(float(np.abs(packed.table_weights(i) - base.table_weights(i)).max()) for i in range(len(tables)))
    assert diff < 2e-5


def _check_named_model(kind, arch, emb, dense):
    """The logit model `kind` is named for, written out field by field from `arch`'s own layers."""
    B, F, D = emb.shape[0], arch.n_fields, arch.dim
    if kind == "dlrm":
        x = arch.bottom(dense)
        z = [x] + [emb[:, f * D:(f + 1) * D] for f in range(F)]
        dots = [(z[i] * z[j]).sum(1) for i in range(F + 1) for j in range(i + 1, F + 1)]
        return arch.top(torch.cat([x, torch.stack(dots, 1)], 1)).squeeze(1)
    wide, deep = emb[:, :F], emb[:, F:]
    h = torch.relu(arch.deep_in(deep) + arch.dense_in(dense))  # == Linear on [deep, dense]
    logit = wide.sum(1) + arch.wide_dense(dense).squeeze(1) + arch.deep(h).squeeze(1)
    if kind == "deepfm":  # factorisation machine: every pair of fields' embeddings, dotted
        e = [deep[:, f * D:(f + 1) * D] for f in range(F)]
        logit = logit + sum((e[i] * e[j]).sum(1) for i in range(F) for j in range(i + 1, F))
    return logit


@pytest.mark.parametrize("kind", ["wide_deep", "dlrm", "deepfm"])
def test_models_compute_what_they_are_named(kind):
    specs = make_fields(5, cardinality=10, dims=8)
    arch = DenseArch(kind, specs, n_dense=13, hidden=(16, 8), seed=1)
    g = torch.Generator().manual_seed(0)
    width = (5 if kind != "dlrm" else 0) + 5 * 8
    emb, dense = torch.randn(7, width, generator=g), torch.randn(7, 13, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(arch(emb, dense), _check_named_model(kind, arch, emb, dense), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("hotness", [[1], [1, 2]], ids=["single-hot", "multi-hot"])  # two kernel paths
def test_hit_rate_counts_exactly_the_ids_served_by_the_cache_and_grows_with_cache_size(tmp_path, hotness):
    specs = make_fields(6, cardinality=[50, 2000, 400], dims=[4, 8], hotness=hotness, zipf=[1.05, 0.6, 1.3])
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=5)
    tier = SlowTier.create(tmp_path)
    stage = PackedEmbeddings(tables, slow_tier=tier)
    try:
        warm = [gen.batch(128, i) for i in range(4)]
        assert warm[0].single_hot == (hotness == [1])
        counts = stage.count_ids(warm)
        # observed id statistics: every looked-up id counted once, at its packed row
        for g, c in zip(stage.groups, counts):
            want = np.zeros(g.n_rows, np.int64)
            for i, r0 in zip(g.tables, g.row_off):
                for b in warm:
                    np.add.at(want, r0 + b.field_ids(tables[i].feature)[0], 1)
            np.testing.assert_array_equal(c, want)
        test = [gen.batch(128, 100 + i) for i in range(3)]
        rates = []
        for frac in (0.0, 0.01, 0.05, 0.2, 1.0):
            plan = hot_fraction(counts, frac)
            stage.plan_cache(plan)
            hits = ids = 0
            for b in test:
                stage.lookup(b)
                for g, rows in zip(stage.groups, plan.rows):
                    for i, r0 in zip(g.tables, g.row_off):
                        r = r0 + b.field_ids(tables[i].feature)[0]
                        hits += int(np.isin(r, rows).sum())
                        ids += r.size
            assert stage.lookups.sum() == ids
            assert stage.hits.sum() == hits, frac
            assert stage.hit_rate == pytest.approx(hits / ids)
            rates.append(stage.hit_rate)
        assert rates[0] == 0 and all(a <= b for a, b in zip(rates, rates[1:])) and rates[2] < rates[3]
        # with every seen row cached, the warm-up batches themselves are served from the cache alone
        stage.reset_hits()
        for b in warm:
            stage.lookup(b)
        assert stage.hit_rate == 1.0
    finally:
        stage.close()
        tier.close()


class _Bar:
    def __init__(self, total, desc, enabled=True, **kw):
        self.total, self.desc, self.enabled, self.n, self.closed = total, desc, enabled, 0, False
        _Bar.made.append(self)

    def update(self, n):
        self.n += n

    def close(self):
        self.closed = True


def test_readers_drive_a_progress_bar_over_the_whole_input(tmp_path, monkeypatch, capfd):
    good = "\t".join(["1"] + ["3"] * 13 + ["a"] * 26)
    p = tmp_path / "day.tsv"
    p.write_text("\n".join([good, "x", good, good]) + "\n")
    cols = {"label": [1, 0, 1]}
    cols.update({f"I{i + 1}": [1, 2, 3] for i in range(13)})
    cols.update({f"C{i + 1}": ["a", "b", "c"] for i in range(26)})
    pq.write_table(pa.table(cols), tmp_path / "day.parquet")
    # a real bar, on stderr, named after the file
    with pytest.warns(rdata.SkippedRowsWarning):
        list(read_criteo_tsv(p, batch_size=2, progress=True, max_bad_share=0.5))
    assert "day.tsv" in capfd.readouterr().err
    _Bar.made = []
    monkeypatch.setattr(rdata, "progress_bar", _Bar)
    with pytest.warns(rdata.SkippedRowsWarning):
        assert sum(b.batch_size for b in read_criteo_tsv(p, batch_size=2, progress=True, max_bad_share=0.5)) == 3
    bar = _Bar.made[-1]
    assert bar.enabled and bar.total == p.stat().st_size and bar.n == bar.total and bar.closed
    assert sum(b.batch_size for b in read_criteo_parquet(tmp_path / "day.parquet", batch_size=2, progress=True)) == 3
    bar = _Bar.made[-1]
    assert bar.enabled and bar.desc == "day.parquet" and bar.total == 3 and bar.n == 3 and bar.closed
    list(read_criteo_parquet(tmp_path / "day.parquet", progress=False))
    assert not _Bar.made[-1].enabled


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wide_deep", "deepfm"])
def test_every_combination_trains_like_the_baseline_with_rowwise_adagrad(kind):
    # The sparse optimizer (row-wise Adagrad) and dense Adagrad, over mixed dims and poolings:
    # all eight switch settings train the per-field baseline's model, step by step.
    from labkit.recsys.model import RecModel
    specs = (make_fields(5, cardinality=[40, 300], dims=8, hotness=[1, 3]) if kind == "deepfm" else
             make_fields(5, cardinality=[40, 300, 2000], dims=[4, 64], hotness=[1, 2], pooling=["sum", "mean"]))

    def run(**kw):
        gen = SyntheticCTR(specs, seed=4)
        with RecModel(kind, specs, optimizer="rowwise_adagrad", dense_optimizer="adagrad", **kw) as m:
            if kw.get("cache"):
                m.warm_cache(gen.batches(64, 2))
            losses = [m.train_step(gen.batch(64, i)) for i in range(5)]
            return losses + [m.eval_loss(gen.batch(128, 99))], m.hit_rate
    ref, _ = run()
    for packing, interleave, cache in itertools.product([False, True], [0, 3], [0.0, 0.1]):
        got, hr = run(packing=packing, interleave=interleave, cache=cache)
        np.testing.assert_allclose(got, ref, rtol=1e-5, err_msg=f"{packing=} {interleave=} {cache=}")
        assert (hr > 0) == (cache > 0)
