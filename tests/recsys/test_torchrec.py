"""TorchRec anchors take the same batch and seeded rows and train the same tables (skipped without torchrec)."""

import numpy as np
import pytest
import torch

from labkit.recsys.baselines import torchrec as trec
from labkit.recsys.data import SyntheticCTR, make_fields
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import init_table, tables_for

pytestmark = pytest.mark.skipif(not trec.available(), reason="torchrec not installed (requirements-nodeps.txt)")


@pytest.mark.parametrize("kind", ["fused", "ebc"])
def test_torchrec_stage_matches_packed(kind):
    specs = make_fields(4, cardinality=[50, 400], dims=[4, 8], hotness=[1, 2])
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=2)
    tr = trec.TorchRecEmbeddings(tables, kind=kind, optimizer="sgd", lr=0.1)
    pk = PackedEmbeddings(tables, optimizer="sgd", lr=0.1)
    for step in range(3):
        b = gen.batch(16, step)
        e = tr.lookup(b)
        assert torch.allclose(e, pk.lookup(b), atol=1e-6)
        g = torch.randn(e.shape, generator=torch.Generator().manual_seed(step))
        tr.apply(b, e, g)
        pk.apply(b, None, g)
    for i in range(len(tables)):
        np.testing.assert_allclose(tr.table_weights(i), pk.table_weights(i), atol=1e-5)
    assert tr.n_lookups == (1 if kind == "fused" else len(tables))


def test_torchrec_refuses_shared_features():
    specs = make_fields(2, cardinality=10)
    with pytest.raises(ValueError, match="one table per feature"):
        trec.TorchRecEmbeddings(tables_for(specs, wide=True))


def test_ebc_refuses_rowwise_adagrad_rather_than_swapping_it():
    # TorchRec has row-wise Adagrad only fused into the backward; the plain collection must not
    # quietly train with full Adagrad under that name.
    tables = tables_for(make_fields(2, cardinality=10))
    with pytest.raises(ValueError, match=r"optimizer='rowwise_adagrad' is not accepted.*kind='fused'"):
        trec.TorchRecEmbeddings(tables, kind="ebc", optimizer="rowwise_adagrad")
    trec.TorchRecEmbeddings(tables, kind="fused", optimizer="rowwise_adagrad")  # the fused one has it


#: Both sides compute in fp32 and differ only in the order they add: pooled rows (<= 3 per bag),
#: per-row gradient sums over a batch's repeated ids, 5 steps of updates. Measured: at most ~8 ulps
#: (2**-24) of the largest magnitude; 64 leaves room (~4e-6 relative). A different optimizer rule
#: (eps inside the sqrt instead of outside, sum instead of mean of a row's squared gradients, another
#: eps) moves weights by 1e-3 to 1e-1, hundreds of times more.
ULPS = 64 * 2.0**-24


@pytest.mark.parametrize("kind,optimizer", [("fused", "sgd"), ("fused", "adagrad"), ("fused", "rowwise_adagrad"),
                                            ("ebc", "sgd"), ("ebc", "adagrad")])  # ebc has no row-wise Adagrad
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_torchrec_stage_matches_packed_for_every_optimizer(kind, optimizer, pooling):
    # Same rows, batches, gradients, lr and eps. Multi-hot bags and skewed ids repeat rows within a
    # batch, so the Adagrad state must see one summed gradient per row per step on both sides.
    specs = make_fields(4, cardinality=[50, 400], dims=[4, 8], hotness=[1, 3], pooling=pooling)
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=5)
    # eps is large enough that where it sits matters: with G ~ g^2 ~ 1, 1 / (sqrt(G) + eps) and
    # 1 / sqrt(G + eps) differ by ~2.5%, i.e. ~2.5e-3 per update at lr 0.1.
    tr = trec.TorchRecEmbeddings(tables, kind=kind, optimizer=optimizer, lr=0.1, eps=0.05)
    pk = PackedEmbeddings(tables, optimizer=optimizer, lr=0.1, eps=0.05)
    for step in range(5):
        b = gen.batch(32, step)
        e = tr.lookup(b)
        ref = pk.lookup(b).numpy()
        np.testing.assert_allclose(e.detach().numpy(), ref, rtol=0, atol=ULPS * np.abs(ref).max())
        g = torch.randn(e.shape, generator=torch.Generator().manual_seed(step))
        tr.apply(b, e, g)
        pk.apply(b, None, g)
    moved = 0
    for i in range(len(tables)):
        w_tr, w_pk = tr.table_weights(i), pk.table_weights(i)
        np.testing.assert_allclose(w_tr, w_pk, rtol=0, atol=ULPS * np.abs(w_pk).max(),
                                   err_msg=f"{kind} {optimizer} table {i}")
        moved += int((np.abs(w_pk - init_table(i, tables[i], 0)) > 1e-3).any(axis=1).sum())
    assert moved > 0


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_the_plain_collection_trains_with_sparse_gradients_as_its_users_do(optimizer):
    # A dense gradient would make the anchor write every row of every table each step (issue 29, item 8):
    # the collection's bags must hand the optimizer sparse gradients holding only the looked-up rows.
    specs = make_fields(3, cardinality=1000, dims=4)
    tables = tables_for(specs)
    tr = trec.TorchRecEmbeddings(tables, kind="ebc", optimizer=optimizer, lr=0.1)
    b = SyntheticCTR(specs, seed=0).batch(8, 0)
    e = tr.lookup(b)
    e.backward(torch.ones_like(e))
    weights = [tr.module.embedding_bags[t.name].weight for t in tables]
    for w in weights:
        assert w.grad is not None and w.grad.is_sparse
        assert w.grad.coalesce().indices().shape[1] <= 8  # at most a row per sample, of 1000
    tr.opt.step()  # the optimizer takes them (SGD and Adagrad both accept sparse gradients)
    tr.opt.zero_grad(set_to_none=True)
    assert isinstance(tr.opt, torch.optim.SGD if optimizer == "sgd" else torch.optim.Adagrad)


def test_the_fused_collection_keeps_no_gradient_its_optimizer_runs_in_the_backward():
    specs = make_fields(2, cardinality=100, dims=4)
    tables = tables_for(specs)
    tr = trec.TorchRecEmbeddings(tables, kind="fused", optimizer="sgd", lr=0.1)
    b = SyntheticCTR(specs, seed=0).batch(8, 0)
    before = tr.table_weights(0)
    tr.apply(b, tr.lookup(b), torch.ones(8, tr.width))
    assert all(p.grad is None for p in tr.module.parameters())
    assert not np.allclose(tr.table_weights(0), before)  # and yet it trained
