"""The seeded R-MAT graph the AliGraph system tests share."""

import pytest

from labkit.graph.csr import build_csr
from labkit.graph.rmat import RMatParams, rmat_edges, rmat_features, rmat_labels

P = RMatParams(scale=11, seed=1, split_roles=True)


@pytest.fixture(scope="module")
def g():
    """(csr, csc, labels, 16-d features) of R-MAT scale 11 with planted communities, deduplicated."""
    s, d = rmat_edges(P)
    csr = build_csr(s, d, P.num_nodes, dedup=True, drop_self_loops=True)
    labels = rmat_labels(P)
    return csr, csr.reverse(), labels, rmat_features(P, 16, 1.0, labels)
