"""PyG's NodeLoader sampling through labkit stores: in memory, partitioned, and across Dask processes."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from labkit.graph.csr import build_csr
from labkit.graph.partition import partition
from labkit.graph.pyg import LabkitNeighborSampler, train_sage_nodeloader
from labkit.graph.store import LocalStore, PartitionedStore
from torch_geometric.sampler import NodeSamplerInput

from tests.graph.conftest import P


@pytest.fixture(scope="module")
def data(g):
    """conftest's graph with its splits, as train_sage_nodeloader takes it."""
    csr, csc, labels, x = g
    return SimpleNamespace(csr=csr, csc=csc, labels=labels, features=x, num_classes=16,
                           train=np.arange(0, P.num_nodes, 2), test=np.arange(1, P.num_nodes, 2))


def _edges(out):
    """The sample's edges as (source id, target id) pairs of global ids, sorted."""
    n = out.node.numpy()
    return sorted(zip(n[out.row.numpy()].tolist(), n[out.col.numpy()].tolist()))


def test_store_sampler_draws_what_the_csc_sampler_draws(data):
    seeds = NodeSamplerInput(input_id=None, node=torch.arange(0, 400, 3))
    a = LabkitNeighborSampler(data.csc, [5, 3], seed=7).sample_from_nodes(seeds)
    for store in (LocalStore(data.csc), PartitionedStore(data.csc, partition(data.csc, 3, "hash"))):
        b = LabkitNeighborSampler(store, [5, 3], seed=7).sample_from_nodes(seeds)
        assert b.node.tolist() == a.node.tolist() and _edges(b) == _edges(a)
        assert b.num_sampled_nodes == a.num_sampled_nodes
        # A store reports the edges' positions in its CSC's order: the CSC's edge ids are one gather away.
        ids = b.edge if data.csc.eid is None else torch.from_numpy(data.csc.eid[b.edge.numpy()])
        assert ids.tolist() == a.edge.tolist()
    # every sampled edge is a real in-edge: source is an in-neighbour of its target
    for src, dst in _edges(a):
        assert src in set(data.csc.neighbors(dst).tolist())


def test_bad_graph_is_named():
    with pytest.raises(ValueError, match=r"graph='ndarray' is not accepted; expected a labkit CSR"):
        LabkitNeighborSampler(np.zeros(3), [2])


def test_train_sage_through_a_partitioned_store_and_refuses_a_mismatched_one(data):
    store = PartitionedStore(data.csc, partition(data.csc, 4, "hash"), data.features)
    run = train_sage_nodeloader(data, 2, fanouts=[10, 5], batch_size=256, hidden=32, lr=0.02, store=store)
    assert run.accuracy > 0.6  # 16 balanced classes: chance is 0.0625
    assert store.stats.remote_calls > 0  # neighbour lists and features came through the partitions
    small = LocalStore(build_csr(np.array([0]), np.array([1]), 2))
    with pytest.raises(ValueError, match=r"store='LocalStore' is not accepted; expected None or a labkit store"):
        train_sage_nodeloader(data, 1, store=small)


@pytest.mark.dask
@pytest.mark.slow
def test_node_loader_samples_across_dask_worker_processes(data):
    from labkit.graph.store import close_cluster, local_cluster
    client = local_cluster(2)
    try:
        store = PartitionedStore(data.csc, partition(data.csc, 2, "hash"), data.features, backend="dask", client=client)
        seeds = NodeSamplerInput(input_id=None, node=torch.arange(0, 300, 2))
        a = LabkitNeighborSampler(data.csc, [5, 3], seed=3).sample_from_nodes(seeds)
        b = LabkitNeighborSampler(store, [5, 3], seed=3).sample_from_nodes(seeds)
        assert b.node.tolist() == a.node.tolist() and _edges(b) == _edges(a)
        assert store.stats.remote_calls > 0 and store.stats.remote_bytes > 0
    finally:
        close_cluster(client)


def test_graph_and_feature_stores_answer_pygs_own_calls():
    from torch_geometric.data import EdgeAttr

    from labkit.graph.pyg import CSRGraphStore, StoreFeatureStore
    gs = CSRGraphStore()
    ei = torch.tensor([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]])
    assert gs.put_edge_index(ei, edge_type=None, layout="coo", size=(4, 4))
    assert gs.get_all_edge_attrs() == [EdgeAttr(edge_type=None, layout="coo", is_sorted=False, size=(4, 4))]
    assert gs.csc.neighbors(1).tolist() == [0, 2, 3]  # kept as in-edges: row 1 lists the sources into 1
    row, col = gs.get_edge_index(edge_type=None, layout="coo")
    assert sorted(zip(row.tolist(), col.tolist())) == sorted(zip(*ei.tolist()))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    fs = StoreFeatureStore(LocalStore(gs.csc, x), np.array([3, 1, 2, 0]))
    assert fs.get_tensor(attr_name="x", group_name=None, index=torch.tensor([2, 0])).tolist() == [x[2].tolist(),
                                                                                                  x[0].tolist()]
    assert fs.get_tensor(attr_name="x", group_name=None, index=slice(1, 3)).tolist() == x[1:3].tolist()
    assert fs.get_tensor(attr_name="y", group_name=None, index=None).tolist() == [3, 1, 2, 0]
    assert tuple(fs.get_tensor_size(attr_name="x", group_name=None)) == (4, 3)
    with pytest.raises(ValueError, match="attr_name='z'"):
        fs.get_tensor(attr_name="z", group_name=None, index=None)
