"""Multi-hop sampling on a bipartite CSR and partition quality of foreign owners are refused by name."""

import numpy as np
import pytest

from labkit.graph.csr import build_csr
from labkit.graph.partition import partition, partition_quality
from labkit.graph.sampling import NeighborSampler, sample_multihop


def test_a_second_hop_over_a_bipartite_csr_is_refused_not_read_past_indptr():
    # 4 users -> items 4..7: a second hop would look up items' rows, which this CSR does not have.
    indptr, indices = np.array([0, 2, 4, 6, 8]), np.array([4, 5, 6, 7] * 2)
    with pytest.raises(ValueError, match=r"fanouts=\[2, 2\] is not accepted; expected one hop for this CSR: its "
                                         r"neighbour ids reach 7 but it has rows only for ids < 4"):
        sample_multihop(indptr, indices, np.array([0, 1]), [2, 2])
    one = NeighborSampler(indptr, indices).sample(np.array([0, 1]), [2])  # one hop is fine
    assert set(one.nodes[2:].tolist()) <= {4, 5, 6, 7}


def test_partition_quality_refuses_owners_outside_the_parts_and_takes_whole_floats():
    csr = build_csr(np.array([0, 1, 2]), np.array([1, 2, 3]), 4)
    with pytest.raises(ValueError, match=r"owner='an owner id 4' is not accepted; expected partition ids in \[0, 2\)"):
        partition_quality(csr, np.array([0, 1, 4, 1]), 2)
    with pytest.raises(ValueError, match=r"owner='an owner id -1'"):
        partition_quality(csr, np.array([0, -1, 1, 1]), 2)
    with pytest.raises(ValueError, match=r"owner=dtype\('float64'\) is not accepted"):
        partition_quality(csr, np.array([0.0, 1.0, 0.0, 1.0]), 2)
    assert partition(csr, 2.0).num_parts == 2 == partition(csr, np.int64(2)).num_parts
    with pytest.raises(ValueError, match=r"num_parts=2.5 is not accepted"):
        partition(csr, 2.5)


def test_streams_that_multi_hop_sampling_would_overflow_are_refused():
    from labkit.graph.datasets import user_item_graph
    from labkit.core.errors import SEED_MAX
    indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    top = SEED_MAX // 64 - 1  # hop h draws stream * 64 + h: the largest stream whose hops fit
    assert len(sample_multihop(indptr, indices, np.array([0]), [1, 1]).nodes) == 2
    NeighborSampler(indptr, indices).sample(np.array([0]), [1, 1], stream=top)
    with pytest.raises(ValueError, match=rf"stream={top + 1} is not accepted; expected an integer in \[0, {top}\]"):
        NeighborSampler(indptr, indices).sample(np.array([0]), [1, 1], stream=top + 1)
    ui = user_item_graph(8)
    with pytest.raises(ValueError, match=r"epoch=\d+ is not accepted"):
        ui.V("user").batch(4).outV("u2i").sample(2).values(epoch=SEED_MAX // 64)
    ui.V("user").batch(4).outV("u2i").sample(2).values(epoch=10**7).next()  # large but fits (epochs < 2**25)
