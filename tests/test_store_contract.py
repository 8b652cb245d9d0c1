"""One contract over every store: in memory, partitioned (in-process and on Dask workers), on disk.

Each store holds the same graph (CaliEX's ci dataset) and must answer degrees, neighbour lists,
sampled entries and feature rows identically; the one sampler must draw the same MultiHopSample
for a seed through any of them (with and without replacement, both frontiers, alone or in a
group), PyG's NodeLoader must yield the same batches, and bad input must get the same one-line
error from every store.
"""

import numpy as np
import pytest
import torch

from labkit.core.datasets import open_dataset
from labkit.core.errors import BadInput
from labkit.core.memory import MemoryBudget
from labkit.disk.sampler import NeighborSampler as DiskSampler
from labkit.disk.sampler import batch_key, to_batch
from labkit.disk.store import DiskFeatures, DiskTopology, MemoryFeatures, MemoryTopology
from labkit.graph.csr import CSR
from labkit.graph.partition import partition
from labkit.graph.sampling import NeighborSampler
from labkit.graph.storage import FeatureStore, GraphStore
from labkit.graph.store import LocalStore, PartitionedStore

STORES = ["memory", "partitioned", "disk_memory", "disk", "disk_cached",
          pytest.param("partitioned_dask", marks=[pytest.mark.dask, pytest.mark.slow])]  # ~50 s on 2 shared cores


@pytest.fixture(scope="module")
def ds():
    return open_dataset("caliex", "ci")


@pytest.fixture(scope="module")
def graph(ds):
    """(CSR, features, labels) of the dataset, in RAM: the reference every store is held to."""
    csr = CSR(ds.array("indptr", mmap=False), ds.array("indices", mmap=False))
    return csr, ds.array("features", mmap=False), ds.array("labels", mmap=False).astype(np.int64)


@pytest.fixture(scope="module", params=STORES)
def store(request, ds, graph):
    """(GraphStore, FeatureStore) of one kind over the same graph."""
    csr, x, _ = graph
    kind, closers, client = request.param, [], None
    if kind == "memory":
        gs = fs = LocalStore(csr, x)
    elif kind in ("partitioned", "partitioned_dask"):
        if kind == "partitioned_dask":
            from labkit.graph.store import close_cluster, local_cluster
            client = local_cluster(2)
        gs = fs = PartitionedStore(csr, partition(csr, 3, "hash"), x, client=client,
                                   backend="dask" if client is not None else "embedded")
    elif kind == "disk_memory":
        gs, fs = MemoryTopology.from_dataset(ds), MemoryFeatures.from_dataset(ds)
    else:
        budget = MemoryBudget(256 << 20)
        gs, fs = DiskTopology(ds, budget, fallback=True), DiskFeatures(ds, budget, fallback=True)
        if kind == "disk_cached":  # half the lists and rows served from the caches, half from the files
            hot = np.arange(0, csr.num_nodes, 2)
            gs.set_cache(hot)
            fs.set_cache(hot)
    closers += [gs, fs]
    yield gs, fs
    for c in closers:
        c.close()
    if client is not None:
        close_cluster(client)


def _same_sample(a, b) -> None:
    assert np.array_equal(a.nodes, b.nodes)
    assert a.num_nodes_per_hop == b.num_nodes_per_hop
    for name in ("rows", "cols", "eids"):
        for x, y in zip(getattr(a, name), getattr(b, name)):
            assert np.array_equal(x, y), name


def test_every_store_implements_the_protocols(store):
    gs, fs = store
    assert isinstance(gs, GraphStore) and isinstance(fs, FeatureStore)


def test_degrees_lists_entries_and_features_agree(store, graph):
    gs, fs = store
    csr, x, _ = graph
    ids = np.random.default_rng(0).choice(csr.num_nodes, 300, replace=False)
    deg = np.diff(csr.indptr)[ids]
    assert np.array_equal(gs.degree(ids), deg)
    ptr, nbrs = gs.neighbors(ids)
    assert np.array_equal(np.diff(ptr), deg)
    assert np.array_equal(nbrs, np.concatenate([csr.indices[csr.indptr[v]:csr.indptr[v + 1]] for v in ids]))
    pos = np.arange(0, int(ptr[-1]), 7)
    assert np.array_equal(gs.entries(ids, ptr, pos), nbrs[pos])
    assert gs.num_nodes == fs.num_nodes == csr.num_nodes and fs.dim == x.shape[1]
    assert np.array_equal(fs.features(ids), x[ids])


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("frontier", ["new", "all"])
def test_the_one_sampler_draws_the_same_sample_from_every_store(store, graph, replace, frontier):
    gs, _ = store
    csr, _, _ = graph
    seeds = np.random.default_rng(1).choice(csr.num_nodes, 64, replace=False)
    ref = NeighborSampler(csr.indptr, csr.indices, frontier=frontier).sample(seeds, [5, 3], replace=replace,
                                                                             seed=4, stream=2)
    got = NeighborSampler(gs, frontier=frontier).sample(seeds, [5, 3], replace=replace, seed=4, stream=2)
    _same_sample(ref, got)
    # The relabel workspace is an implementation choice: a hash table sized by the sample gives the same ids.
    _same_sample(ref, NeighborSampler(gs, frontier=frontier, workspace="sample").sample(
        seeds, [5, 3], replace=replace, seed=4, stream=2))
    # A group reads each hop's entries once for all its seed sets; each set's sample is as if alone.
    sets = [seeds, np.random.default_rng(2).choice(csr.num_nodes, 48, replace=False)]
    keys = [(4, 2), (9, 5)]
    group = NeighborSampler(gs, frontier=frontier).sample_group(sets, [5, 3], replace=replace, keys=keys)
    for s, (k, t), g in zip(sets, keys, group):
        _same_sample(NeighborSampler(csr.indptr, csr.indices, frontier=frontier).sample(
            s, [5, 3], replace=replace, seed=k, stream=t), g)


def test_caliex_batches_are_the_one_samplers_samples(store, graph):
    """The disk system's sampler is the one sampler under CaliEX's key (seed, batch index), alone or grouped."""
    gs, _ = store
    csr, _, _ = graph
    sets = [np.sort(np.random.default_rng(k).choice(csr.num_nodes, 32, replace=False)) for k in range(3)]
    disk = DiskSampler(gs, [4, 3], seed=6)
    grouped = disk.sample_group(sets, [10, 11, 12])
    for s, i, b in zip(sets, [10, 11, 12], grouped):
        ref = to_batch(NeighborSampler(csr.indptr, csr.indices).sample(s, [4, 3], seed=batch_key(6, i)), i)
        assert b.equals(ref) and b.equals(disk.sample(s, i))
        assert np.array_equal(b.node_hops, ref.node_hops) and np.array_equal(b.edge_hops, ref.edge_hops)


def _batches(gs, fs, labels, seeds):
    from torch_geometric.loader import NodeLoader

    from labkit.graph.pyg import CSRGraphStore, LabkitNeighborSampler, StoreFeatureStore
    loader = NodeLoader((StoreFeatureStore(fs, labels), CSRGraphStore(gs)),
                        node_sampler=LabkitNeighborSampler(gs, [4, 3], seed=3),
                        input_nodes=torch.from_numpy(seeds), batch_size=50)
    return [(b.n_id, b.edge_index, b.x, b.y, b.batch_size) for b in loader]


def test_pyg_nodeloader_yields_the_same_batches_from_every_store(store, graph):
    gs, fs = store
    csr, x, labels = graph
    seeds = np.arange(0, 400, 3)
    ref = _batches(CSR(csr.indptr, csr.indices), LocalStore(csr, x), labels, seeds)
    got = _batches(gs, fs, labels, seeds)
    assert len(got) == len(ref) == 3
    for a, b in zip(ref, got):
        assert a[4] == b[4] and all(torch.equal(u, v) for u, v in zip(a[:4], b[:4]))


@pytest.mark.parametrize("call, message", [
    (lambda gs, fs: NeighborSampler(gs).sample([1, 40000], [3]),
     "seeds[1]=40000 is not accepted; expected ids in [0, 32768)"),
    (lambda gs, fs: NeighborSampler(gs).sample([5, 7, 5], [3]),
     "seeds='an array with repeated ids' is not accepted; expected distinct seed ids"),
    (lambda gs, fs: NeighborSampler(gs).sample([1, 2], [0]),
     "fanouts[0]=0 is not accepted; expected a positive integer, or -1 for all neighbours"),
    (lambda gs, fs: gs.degree(np.array([3, -1])), "ids[1]=-1 is not accepted; expected node ids in [0, 32768)"),
    (lambda gs, fs: gs.neighbors(np.array([32768])), "ids[0]=32768 is not accepted; expected node ids in [0, 32768)"),
    (lambda gs, fs: fs.features(np.array([0, 1, 99999])),
     "ids[2]=99999 is not accepted; expected node ids in [0, 32768)"),
])
def test_bad_input_gets_the_same_one_line_error_from_every_store(store, call, message):
    gs, fs = store
    with pytest.raises(BadInput) as e:
        call(gs, fs)
    assert str(e.value) == message


@pytest.mark.parametrize("by", ["random", "in_degree"])
def test_negatives_from_every_store_match_the_csr(store, graph, by):
    """In RAM or not, a store gives the negatives of its CSR for a seed (true neighbours excluded alike)."""
    from labkit.graph.negative import negative_sample
    gs, _ = store
    csr, _, _ = graph
    src = np.concatenate([np.arange(0, 2000, 7), [7, 7]])  # a repeated source keeps its own draws
    # max_retries=0 sends in-degree draws that hit a neighbour to the store for more draws.
    for retries in (10, 0):
        a = negative_sample(csr, src, 3, by=by, seed=5, stream=1, max_retries=retries)
        b = negative_sample(gs, src, 3, by=by, seed=5, stream=1, max_retries=retries)
        assert np.array_equal(a.dst, b.dst) and a.capped == b.capped and np.array_equal(a.src, b.src)
    with pytest.raises(BadInput, match="csr='list' is not accepted; expected a labkit CSR or a GraphStore"):
        negative_sample([gs], src, 3)
