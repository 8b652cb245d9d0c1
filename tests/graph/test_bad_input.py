"""Bad input to the AliGraph API: every case fails with one named error, never garbage or a raw traceback."""

import numpy as np
import pytest

from labkit.graph.build import build_from_file, csv_edge_chunks, parquet_edge_chunks
from labkit.graph.csr import build_csr
from labkit.graph.importance import NeighborCache, importance, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import Partitioning, fennel_partition, ldg_partition, partition
from labkit.graph.query import Graph
from labkit.graph.rmat import RMatParams, rmat_edges
from labkit.graph.sampling import AliasTable, sample_multihop, sample_weighted, topk_neighbors
from labkit.graph.store import LocalStore, PartitionedStore

P = RMatParams(scale=9, seed=3)


@pytest.fixture(scope="module")
def csr():
    return build_csr(*rmat_edges(P), P.num_nodes, dedup=True)


@pytest.fixture(scope="module")
def other():
    """A different, smaller graph: its tables, plans and partitionings must not be used on `csr`."""
    q = RMatParams(scale=7, seed=4)
    return build_csr(*rmat_edges(q), q.num_nodes, dedup=True)


def test_sample_weighted_refuses_a_table_of_another_graph(csr, other):
    table = AliasTable.build(other.indptr, np.ones(other.num_edges))
    with pytest.raises(ValueError, match=r"table=.*AliasTable of \d+ edges.*one built for this indptr"):
        sample_weighted(csr.indptr, table, np.arange(4), 3)
    ok = AliasTable.build(csr.indptr, np.ones(csr.num_edges))
    ptr, eid = sample_weighted(csr.indptr, ok, np.arange(4), 3)
    assert eid.max() < csr.num_edges and len(ptr) == 5


def test_alias_table_refuses_2d_weights(csr):
    with pytest.raises(ValueError, match=r"weights=.*shape \(2, \d+\).*1-d"):
        AliasTable.build(csr.indptr, np.ones((2, csr.num_edges // 2)))


def test_topk_checks_weight_length_and_refuses_nan_it_would_rank(csr):
    rows = np.arange(8)
    with pytest.raises(ValueError, match=rf"weights=.*expected a 1-d array of {csr.num_edges} weights"):
        topk_neighbors(csr.indptr, np.ones(csr.num_edges - 1), rows, 2)
    deg = np.diff(csr.indptr)
    v = int(np.flatnonzero(deg >= 3)[0])
    pos = int(csr.indptr[v]) + 1
    w = np.ones(csr.num_edges)
    w[pos] = np.nan
    with pytest.raises(ValueError, match=rf"weights\[{pos}\]=nan is not accepted; .*row {v}"):
        topk_neighbors(csr.indptr, w, [v], 1)
    # A row that keeps all its edges ranks nothing, so its weights are not looked at.
    ptr, eid = topk_neighbors(csr.indptr, w, [v], int(deg[v]))
    assert eid.tolist() == list(range(int(csr.indptr[v]), int(csr.indptr[v + 1])))
    w[pos] = 7.0  # a finite heavy weight ranks first
    ptr, eid = topk_neighbors(csr.indptr, w, [v], 1)
    assert eid.tolist() == [pos]


def test_multihop_refuses_indices_shorter_than_indptr(csr):
    with pytest.raises(ValueError, match=rf"indices=.*at least indptr\[-1\]={csr.num_edges}"):
        sample_multihop(csr.indptr, csr.indices[:10], np.arange(4), [3, 2])


@pytest.fixture(scope="module")
def bipartite():
    """Many users, few items: uniform negatives must still be item ids."""
    rng = np.random.default_rng(1)
    g = Graph().add_nodes("user", 500).add_nodes("item", 20)
    g.add_edges("u2i", "user", "item", rng.integers(0, 500, 2000), rng.integers(0, 20, 2000))
    return g


def test_out_neg_draws_destination_type_ids(bipartite):
    res = bipartite.V("user").batch(500).outNeg("u2i").sample(20).by("random").values().next()
    assert res.types == ["user", "item"] and res[1].shape == (500, 20)
    assert res[1].min() >= 0 and res[1].max() < 20  # items only (users go up to 499)
    assert len(np.unique(res[1])) == 20  # and all of them can be drawn
    with pytest.raises(ValueError, match=r"num_dst=0 is not accepted"):
        negative_sample(bipartite.edge_type("u2i").csr, [0], 2, num_dst=0)


def test_query_run_validates_seeds(bipartite):
    q = bipartite.V("user").outV("u2i").sample(2)
    assert q.run(np.array([0, 499])).ids[1].shape == (2, 2)
    with pytest.raises(ValueError, match=r"seeds\[1\]=500 is not accepted; expected node ids in \[0, 500\)"):
        q.run(np.array([0, 500]))
    with pytest.raises(ValueError, match=r"seeds\[0\]=-1 is not accepted"):
        q.run(np.array([-1, 3]))
    with pytest.raises(ValueError, match=r"seeds=dtype\('float64'\).*integer"):
        q.run(np.array([1.7, 2.0]))
    with pytest.raises(ValueError, match=r"seeds=.*shape \(2, 1\).*1-d"):
        q.run(np.array([[1], [2]]))


def test_stores_check_features_partitioning_and_cache(csr, other):
    x = np.zeros((csr.num_nodes, 4), np.float32)
    with pytest.raises(ValueError, match=rf"features=.*shape \(3, 4\).*{csr.num_nodes} rows"):
        LocalStore(csr, x[:3])
    part = partition(csr, 2)
    with pytest.raises(ValueError, match=rf"features=.*{csr.num_nodes} rows"):
        PartitionedStore(csr, part, x[:-1])
    with pytest.raises(ValueError, match=rf"partitioning=.*{other.num_nodes} vertices.*{csr.num_nodes}"):
        PartitionedStore(csr, partition(other, 2), x)
    bad_owner = Partitioning(np.full(csr.num_nodes, 5, np.int32), 2, "hash", 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"partitioning=.*owner id 5.*\[0, 2\)"):
        PartitionedStore(csr, bad_owner, x)
    other_plan = plan_cache(other, importance(other, other.reverse()), 0.0)
    with pytest.raises(ValueError, match=rf"cache=.*{other.num_nodes} nodes.*{csr.num_nodes} nodes"):
        PartitionedStore(csr, part, x, cache=NeighborCache.build(other, other_plan))
    plan = plan_cache(csr, importance(csr, csr.reverse()), 0.0)
    with pytest.raises(ValueError, match=rf"plan=.*vertex \d+.*\[0, {other.num_nodes}\)"):
        NeighborCache.build(other, plan)
    with pytest.raises(ValueError, match=rf"features=.*{csr.num_nodes} rows"):
        NeighborCache.build(csr, plan, x[:5])
    store = PartitionedStore(csr, part, x, cache=NeighborCache.build(csr, plan, x))
    assert store.features(np.arange(3)).shape == (3, 4)


def test_dask_client_without_workers_is_refused(csr):
    class NoWorkers:  # what scheduler_info() says before any worker has joined
        def scheduler_info(self):
            return {"workers": {}}

    with pytest.raises(ValueError, match=r"client=.*0 workers.*at least one worker"):
        PartitionedStore(csr, partition(csr, 2), backend="dask", client=NoWorkers())


def test_streaming_partitioners_refuse_a_csc_of_another_graph(csr, other):
    for f in (ldg_partition, fennel_partition):
        with pytest.raises(ValueError, match=rf"csc=.*{other.num_nodes} nodes.*in-edges of csr"):
            f(csr, 2, csc=other.reverse())
    with pytest.raises(ValueError, match=r"csc="):
        partition(csr, 2, "ldg", csc=other.reverse())
    assert ldg_partition(csr, 2, csc=csr.reverse()).shape == (csr.num_nodes,)


def test_build_csr_num_nodes_is_checked():
    empty = np.empty(0, np.int64)
    with pytest.raises(ValueError, match=r"num_nodes=-1 is not accepted; expected an integer in \[0, inf\]"):
        build_csr(empty, empty, -1)
    with pytest.raises(ValueError, match=r"num_nodes='5' is not accepted"):
        build_csr(np.array([0]), np.array([1]), "5")
    assert build_csr(empty, empty, 0).num_nodes == 0
    assert build_csr(np.array([0]), np.array([1]), np.int64(4)).num_nodes == 4


def test_csv_reader_reports_overflowing_ids_and_bad_paths(tmp_path):
    f = tmp_path / "edges.csv"
    f.write_text("src,dst\n0,1\n1,2\n2,1e20\n")
    with pytest.raises(ValueError, match=r"edges.csv row 3: dst='1e20' is not accepted; expected an integer id"):
        list(csv_edge_chunks(f)())
    with pytest.raises(ValueError, match=r"edges.csv row 3"):
        build_from_file(f)
    with pytest.raises(ValueError, match=r"num_nodes=0 is not accepted"):
        build_from_file(f, 0)
    with pytest.raises(ValueError, match=r"num_nodes=-3 is not accepted"):
        csv_edge_chunks(f, num_nodes=-3)
    folder = tmp_path / "dir.csv"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"path=.*dir.csv.*not a folder"):
        build_from_file(folder)
    with pytest.raises(ValueError, match=r"path=.*not a folder"):
        parquet_edge_chunks(tmp_path)
    good = tmp_path / "good.csv"
    good.write_text("src,dst\n0,1\n1,2\n")
    assert build_from_file(good).num_edges == 2
