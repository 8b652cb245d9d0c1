"""TorchRec anchors take the same batch and seeded rows and train the same tables (skipped without torchrec)."""

import numpy as np
import pytest
import torch

from labkit.recsys.baselines import torchrec as trec
from labkit.recsys.data import SyntheticCTR, make_fields
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import tables_for

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
