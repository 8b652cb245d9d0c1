"""TorchRec anchors keep torch's one-off is_fx_tracing notice out of notebooks (skipped without torchrec)."""

import logging

import pytest
import torch

from labkit.recsys.baselines import torchrec as trec
from labkit.recsys.data import SyntheticCTR, make_fields
from labkit.recsys.tables import tables_for

pytestmark = pytest.mark.skipif(not trec.available(), reason="torchrec not installed (requirements-nodeps.txt)")


def test_fx_tracing_notice_is_dropped_and_other_records_pass(caplog):
    from torch.fx import _symbolic_trace
    _symbolic_trace.is_fx_tracing_warning.cache_clear()  # torch logs it once per process
    specs = make_fields(3, cardinality=50)
    tr = trec.TorchRecEmbeddings(tables_for(specs), kind="fused")
    b = SyntheticCTR(specs, seed=1).batch(8, 0)
    with caplog.at_level(logging.WARNING, logger="torch.fx._symbolic_trace"):
        e = tr.lookup(b)
        tr.apply(b, e, torch.ones_like(e))
        _symbolic_trace.is_fx_tracing_warning.cache_clear()
        _symbolic_trace.is_fx_tracing_warning()  # the notice itself: filtered
        logging.getLogger("torch.fx._symbolic_trace").warning("another message")  # passes
    trec.TorchRecEmbeddings(tables_for(specs), kind="fused")  # a second stage adds no second filter
    assert logging.getLogger("torch.fx._symbolic_trace").filters.count(trec._not_fx_tracing_notice) == 1
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if "is_fx_tracing" in m]
    assert "another message" in msgs
