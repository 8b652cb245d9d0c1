"""AliGraph parts: partitioning, importance cache, stores (embedded and Dask), negatives, GSL queries, PyG."""

import os
import signal

import numpy as np
import pytest
import torch

from labkit.graph.csr import build_csr
from labkit.graph.importance import NeighborCache, importance, khop_degrees, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition, partition_quality
from labkit.graph.query import Graph
from labkit.graph.rmat import RMatParams, rmat_edges
from labkit.graph.sampling import NeighborSampler
from labkit.graph.store import LocalStore, PartitionedStore, StoreError
from labkit.graph.traverse import edge_batches, node_batches

from tests.graph.conftest import P  # the fixture `g` comes from conftest.py


def test_partitioners_report_cut_and_balance(g):
    csr, csc, *_ = g
    h = partition(csr, 4, "hash")
    l = partition(csr, 4, "ldg", csc=csc)
    assert np.bincount(h.owner).tolist() == [P.num_nodes // 4] * 4 and h.balance == 1.0
    assert l.balance <= 1.06 and l.owner.min() == 0 and l.owner.max() == 3
    assert 0.6 < h.edge_cut < 0.85  # about 3/4 of edges cross 4 random parts
    assert l.edge_cut < h.edge_cut - 0.1  # locality-aware cuts far fewer
    f = partition(csr, 4, "fennel", csc=csc)
    assert f.balance <= 1.11 and np.bincount(f.owner, minlength=4).min() > 0
    assert f.edge_cut < h.edge_cut - 0.1
    assert partition_quality(csr, np.zeros(P.num_nodes, np.int32), 1)["edge_cut"] == 0.0
    with pytest.raises(ValueError, match="method"):
        partition(csr, 2, "metis")


def test_importance_is_in_over_out_degree(g):
    csr, csc, *_ = g
    imp = importance(csr, csc, 1)
    v = int(np.flatnonzero((csr.degree() > 0) & (csc.degree() > 0))[0])
    assert imp[v] == csc.degree()[v] / csr.degree()[v]
    d_in2, d_out2 = khop_degrees(csr, csc, 2)
    assert d_in2[v] == csc.degree()[csc.neighbors(v)].sum()
    plan = plan_cache(csr, imp, 0.0, max_fraction=0.2)
    assert plan.fraction <= 0.2 and plan.capped
    assert imp[plan.vertices].min() >= np.sort(imp[csr.degree() > 0])[::-1][len(plan.vertices) - 1]


def _check_store(store, csr, x):
    ids = np.random.default_rng(0).choice(P.num_nodes, 500, replace=False)
    ptr, nbrs = store.neighbors(ids)
    ref_ptr, ref = LocalStore(csr).neighbors(ids)
    assert np.array_equal(ptr, ref_ptr) and np.array_equal(nbrs, ref)
    assert np.array_equal(store.features(ids), x[ids])


def test_partitioned_store_embedded_with_cache(g):
    csr, csc, labels, x = g
    part = partition(csr, 4, "hash")
    _check_store(PartitionedStore(csr, part, x), csr, x)
    cache = NeighborCache.build(csr, plan_cache(csr, importance(csr, csc, 1), 1.0))
    st = PartitionedStore(csr, part, x, cache=cache)
    _check_store(st, csr, x)
    assert cache.stats.lookups == 500 and 0 < cache.stats.hits < 500
    s = NeighborSampler(st).sample(np.arange(64), [5, 3], seed=2)
    for rows, cols in zip(s.rows, s.cols):
        for r, c in zip(rows, cols):
            assert s.nodes[c] in csr.neighbors(s.nodes[r])
    with pytest.raises(ValueError, match=r"ids\[1\]=99999"):
        st.neighbors(np.array([1, 99999]))
    # A partition whose requested ids all hit the cache gets no call at all.
    hot = cache.plan.vertices[:40]
    st.stats.reset()
    ptr, nbrs = st.neighbors(hot)
    assert st.stats.remote_calls == 0 and st.stats.rounds == 0
    assert st.stats.calls_skipped == len(np.unique(part.owner[hot]))
    ref_ptr, ref = LocalStore(csr).neighbors(hot)
    assert np.array_equal(ptr, ref_ptr) and np.array_equal(nbrs, ref)
    mixed = np.concatenate([hot[:3], np.flatnonzero(cache.slot < 0)[:5]])
    st.stats.reset()
    st.neighbors(mixed)
    assert st.stats.rounds == 1 and st.stats.remote_ids == 5 and st.stats.wait_s >= 0
    # Attribute rows ride along: cached rows are copied locally, misses fetched, order kept.
    fcache = NeighborCache.build(csr, cache.plan, x)
    fst = PartitionedStore(csr, part, x, cache=fcache)
    _check_store(fst, csr, x)
    assert 0 < fcache.feature_stats.hits < fcache.feature_stats.lookups == 500
    assert np.array_equal(fst.features(hot), x[hot]) and fst.stats.calls_skipped > 0


@pytest.mark.dask
@pytest.mark.slow
def test_dask_store_crosses_processes_and_fails_loudly(g, monkeypatch):
    from labkit.graph.store import close_cluster, local_cluster
    csr, csc, labels, x = g
    client = local_cluster(2)
    try:
        st = PartitionedStore(csr, partition(csr, 2, "hash"), x, backend="dask", client=client)
        assert len(set(st.addresses)) == 2
        _check_store(st, csr, x)
        assert st.stats.remote_calls >= 4 and st.stats.remote_bytes > 0
        # A reply that never comes is named by its partition (not the round's first one).
        import asyncio

        from labkit.graph import store as store_mod

        async def replied():
            return np.empty(0)
        with monkeypatch.context() as m:
            m.setattr(store_mod, "_REPLY_TIMEOUT_S", 0.5)
            with pytest.raises(StoreError, match="partition 1.*no reply within 0.5 s"):
                st._collect("neighbors", {0: np.arange(3), 1: np.arange(3)}, {0: replied(), 1: asyncio.sleep(3600)})
        # A reply owed by a worker that left the cluster fails at once (its actor's reply can wait forever):
        # the message names the departure, not the reply deadline ("no reply within").
        with monkeypatch.context() as m:
            m.setattr(st, "addresses", [st.addresses[0], "tcp://127.0.0.1:9"])  # no such worker
            with pytest.raises(StoreError, match=r"partition 1 .*WorkerGone: its worker tcp://127.0.0.1:9 left"):
                st._collect("neighbors", {0: np.arange(3), 1: np.arange(3)}, {0: replied(), 1: asyncio.sleep(3600)})
        # Kill one worker process: the next fetch must raise, never return a partial answer.
        addr = st.addresses[1]
        pid = client.run(os.getpid, workers=[addr])[addr]
        os.kill(pid, signal.SIGKILL)  # a worker this test started
        with pytest.raises(StoreError, match="partition 1"):
            for _ in range(50):
                st.neighbors(np.arange(0, 200))
    finally:
        close_cluster(client)


class _FakeCluster:
    def __init__(self, *a, **kw):
        self.closed = False
        _FakeCluster.made.append(self)

    def close(self):
        self.closed = True


def test_local_cluster_and_close_cluster_never_leave_the_cluster_running(monkeypatch):
    import dask.distributed

    from labkit.graph.store import close_cluster, local_cluster

    def no_client(*a, **kw):
        raise OSError("scheduler unreachable")

    _FakeCluster.made = []
    monkeypatch.setattr(dask.distributed, "LocalCluster", _FakeCluster)
    monkeypatch.setattr(dask.distributed, "Client", no_client)
    with pytest.raises(OSError, match="scheduler unreachable"):
        local_cluster(2)
    assert _FakeCluster.made[0].closed  # the cluster nobody got back was closed

    class FailingClient:
        cluster = _FakeCluster()

        def close(self):
            raise KeyboardInterrupt  # Ctrl-C (or a dead scheduler) while the client closes

    with pytest.raises(KeyboardInterrupt):
        close_cluster(FailingClient())
    assert FailingClient.cluster.closed


def test_negatives_uniform_and_in_degree(g):
    csr, csc, *_ = g
    src = np.arange(200)
    neg = negative_sample(csr, src, 5, by="in_degree", seed=3)
    assert neg.dst.shape == (1000,) and neg.capped == 0
    for u, v in zip(neg.src, neg.dst):
        assert v not in csr.neighbors(u)
    # In-degree weighting: popular nodes come up far more often than under uniform draws.
    indeg = csc.degree()
    assert indeg[neg.dst].mean() > 3 * indeg[negative_sample(csr, src, 5, by="random").dst].mean()
    # A source linked to every node can only hit the retry cap, and that is counted.
    full = build_csr(np.zeros(4, np.int64), np.arange(4), 4)
    assert negative_sample(full, np.array([0]), 3, by="in_degree", max_retries=2).capped == 3


def test_negatives_from_a_partitioned_store_read_more_draws_when_sources_reject_many():
    """A source linked to most nodes rejects most in-degree draws: its extra draws are read again, same result."""
    n = 64
    src = np.concatenate([np.zeros(n - 3, np.int64), np.arange(1, n)])  # 0 -> all but 3 nodes; a ring
    dst = np.concatenate([np.arange(3, n), (np.arange(1, n) % (n - 1)) + 1])
    csr = build_csr(src, dst, n)
    store = PartitionedStore(csr, partition(csr, 3, "hash"))
    reads = []
    entries = store.entries
    store.entries = lambda ids, ptr, pos: reads.append(len(pos)) or entries(ids, ptr, pos)
    for by in ("in_degree", "random"):
        a = negative_sample(csr, [0, 5, 0, 9], 4, by=by, seed=2, max_retries=6)
        b = negative_sample(store, [0, 5, 0, 9], 4, by=by, seed=2, max_retries=6)
        assert np.array_equal(a.dst, b.dst) and a.capped == b.capped
        assert all(v not in csr.neighbors(u) for u, v in zip(b.src, b.dst) if v >= 0)
    # The first read holds k + 2 = 6 draws a source; the two sources 0 rejected more and were read again.
    assert len(reads) >= 2 and reads[0] == 4 * 6 and reads[1] == 2 * 12


def test_negatives_agree_with_pyg_negative_sampling_density(g):
    from torch_geometric.utils import negative_sampling
    csr, *_ = g
    src = np.repeat(np.arange(P.num_nodes), csr.degree())
    ei = torch.from_numpy(np.stack([src, csr.indices.astype(np.int64)]))
    pyg = negative_sampling(ei, num_nodes=P.num_nodes, num_neg_samples=2000)
    edges = set(zip(src.tolist(), csr.indices.tolist()))
    assert not any((a, b) in edges for a, b in pyg.t().tolist())  # the oracle: never a true edge
    ours = negative_sample(csr, pyg[0].numpy(), 1, by="random", reject_neighbors=True, seed=1)
    assert not any((a, b) in edges for a, b in zip(ours.src.tolist(), ours.dst.tolist()))


def test_traverse_batches_cover_each_epoch_once(g):
    csr, *_ = g
    a = np.concatenate(list(node_batches(np.arange(100), 32, seed=1, epoch=0)))
    b = np.concatenate(list(node_batches(np.arange(100), 32, seed=1, epoch=1)))
    assert sorted(a) == list(range(100)) and not np.array_equal(a, b)
    got = list(edge_batches(csr, 1000, seed=0))
    assert sum(len(x[0]) for x in got) == csr.num_edges
    s, d, pos = got[0]
    assert np.array_equal(csr.indices[pos], d) and all(csr.indptr[u] <= p < csr.indptr[u + 1] for u, p in zip(s, pos))


@pytest.fixture(scope="module")
def hetero():
    rng = np.random.default_rng(0)
    g = Graph().add_nodes("user", 300).add_nodes("item", 200)
    s, d = rng.integers(0, 300, 3000), rng.integers(0, 200, 3000)
    g.add_edges("u2i", "user", "item", s, d, weights=rng.random(3000).astype(np.float32))
    g.add_edges("i2i", "item", "item", rng.integers(0, 200, 1500), rng.integers(0, 200, 1500))
    return g


def test_gsl_query_walks_typed_hops(hetero):
    q = hetero.V("user").batch(64).shuffle().outV("u2i").sample(10).by("edge_weight") \
        .outV("i2i").sample(5).by("random").values()
    res = q.next()
    assert res[0].shape == (64,) and res[1].shape == (64, 10) and res[2].shape == (640, 5)
    assert res.types == ["user", "item", "item"]
    u2i, i2i = hetero.edge_type("u2i").csr, hetero.edge_type("i2i").csr
    for u, row in zip(res[0], res[1]):
        assert set(row[row >= 0]) <= set(u2i.neighbors(u).tolist())
    for i, row in zip(res[1].reshape(-1), res[2]):
        if i >= 0:
            assert set(row[row >= 0]) <= set(i2i.neighbors(i).tolist())
    assert sum(1 for _ in hetero.V("user").batch(64).values()) == 5


def test_gsl_negatives_topk_full_and_errors(hetero):
    u2i = hetero.edge_type("u2i").csr
    # ~10 items of 200 per user: 10 retries cannot all hit a neighbour, so nothing is capped here
    # and every negative of every user of the epoch must be a non-neighbour.
    seen = 0
    for res in hetero.V("user").batch(50).outNeg("u2i").sample(5).by("in_degree").values():
        assert res.capped_negatives == 0 and res[1].shape == (len(res[0]), 5)
        for u, row in zip(res[0], res[1]):
            assert ((row >= 0) & (row < 200)).all()
            assert not set(row.tolist()) & set(u2i.neighbors(u).tolist())
        seen += len(res[0])
    assert seen == 300
    # topk: each row holds exactly its min(d, k) heaviest edges (ties to the lower edge position,
    # topk_neighbors' documented rule) as a multiset, then -1 padding; checked for every user.
    # Rows with d > k also come heaviest first (a row with d <= k comes back in edge order).
    w = hetero.edge_type("u2i").weights
    for k in (2, 12):
        seen = 0
        for top in hetero.V("user").batch(64).outV("u2i").sample(k).by("topk").values():
            for u, row in zip(top[0], top[1]):
                lo, hi = u2i.indptr[u], u2i.indptr[u + 1]
                best = lo + np.argsort(-w[lo:hi].astype(np.float64), kind="stable")[:k]
                expect = u2i.indices[best].tolist()
                got = row[:len(expect)].tolist()
                assert sorted(got) == sorted(expect) and (row[len(expect):] == -1).all(), (k, u)
                if hi - lo > k:
                    assert got == expect, (k, u)
            seen += len(top[0])
        assert seen == 300
    assert (u2i.degree()[:300] < 12).any()  # short rows (-1 padding) were checked too
    tied = Graph().add_nodes("user", 2).add_nodes("item", 5)
    tied.add_edges("u2i", "user", "item", np.zeros(5, np.int64), np.array([3, 1, 4, 2, 0]),
                   weights=np.array([1, 2, 2, 1, 2], np.float32))
    for k, expect in ((2, [1, 4]), (4, [1, 4, 0, 3])):
        got = tied.V("user").batch(2).outV("u2i").sample(k).by("topk").values().next()
        assert got[1][0].tolist() == expect and (got[1][1] == -1).all()
    full = hetero.V("item").batch(4).inV("u2i").sample(1).by("full").values().next()
    csc = hetero.edge_type("u2i").csc
    assert full[1].values.size == sum(csc.degree()[full[0]])  # ragged: the real ids only
    assert [x.tolist() for x in full[1].lists()] == [csc.neighbors(v).tolist() for v in full[0]]
    with pytest.raises(ValueError, match="edge_type='u2x'"):
        hetero.V("user").outV("u2x")
    with pytest.raises(ValueError, match="starts at 'user'"):
        hetero.V("user").outV("i2i")
    with pytest.raises(ValueError, match="by='nope'"):
        hetero.V("user").outV("u2i").sample(3).by("nope")
    with pytest.raises(ValueError, match="k=0"):
        hetero.V("user").outV("u2i").sample(0)
    with pytest.raises(ValueError, match="edge_weight"):
        hetero.V("item").outV("i2i").sample(2).by("edge_weight").values().next()


def test_pyg_node_loader_trains_graphsage(g):
    from torch_geometric.loader import NodeLoader

    from labkit.graph.pyg import CSRGraphStore, LabkitNeighborSampler, StoreFeatureStore
    from labkit.graph.train import SAGE
    csr, csc, labels, x = g
    fs, gs = StoreFeatureStore(LocalStore(csr, x), labels), CSRGraphStore(csc)
    train = np.arange(0, P.num_nodes, 2)
    test = np.arange(1, P.num_nodes, 2)
    loader = NodeLoader((fs, gs), node_sampler=LabkitNeighborSampler(csc, [10, 5]),
                        input_nodes=torch.from_numpy(train), batch_size=256, shuffle=True)
    torch.manual_seed(0)
    model = SAGE(16, 32, 16)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(3):
        for batch in loader:
            assert batch.n_id[:batch.batch_size].tolist() == train[batch.input_id.numpy()].tolist()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                                     batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    model.eval()
    tl = NodeLoader((fs, gs), node_sampler=LabkitNeighborSampler(csc, [10, 5]),
                    input_nodes=torch.from_numpy(test), batch_size=1024)
    with torch.no_grad():
        acc = np.mean([float((model(b.x, b.edge_index)[:b.batch_size].argmax(1) == b.y[:b.batch_size]).float()
                             .mean()) for b in tl])
    assert acc > 0.6  # 16 balanced classes: chance is 0.0625


def test_train_sage_nodeloader_trains_and_reports(g):
    from types import SimpleNamespace

    from labkit.graph.pyg import train_sage_nodeloader
    csr, csc, labels, x = g
    data = SimpleNamespace(csr=csr, csc=csc, labels=labels, features=x, num_classes=16,
                           train=np.arange(0, P.num_nodes, 2), test=np.arange(1, P.num_nodes, 2))
    seen = []
    run = train_sage_nodeloader(data, 3, fanouts=[10, 5], batch_size=256, hidden=32, lr=0.02,
                                on_batch=lambda n, loss: seen.append((n, loss)), progress=True)
    per_epoch = -(-len(data.train) // 256)
    assert run.batches == 3 * per_epoch == len(run.losses) == len(seen)
    assert [n for n, _ in seen] == list(range(1, run.batches + 1)) and seen[-1][1] == run.losses[-1]
    assert np.mean(run.losses[-per_epoch:]) < np.mean(run.losses[:per_epoch])  # it learns
    assert run.accuracy > 0.6  # 16 balanced classes: chance is 0.0625
    with pytest.raises(ValueError, match="epochs=0"):
        train_sage_nodeloader(data, 0)
    with pytest.raises(ValueError, match=r"fanouts\[1\]=0"):
        train_sage_nodeloader(data, 1, fanouts=[5, 0])


def test_build_comparison_uses_the_bench_harness():
    from labkit.graph.experiments import build_comparison
    p = RMatParams(scale=10, seed=2)
    calls = []
    r = build_comparison(p, rounds=2, chunk_edges=1 << 12, progress=calls.append)
    assert sum(calls) == 2 * p.num_edges  # two passes over the stream
    import numba
    t = numba.get_num_threads()
    assert [row["builder"] for row in r.rows] == ["scipy COO->CSR (1 thread)", "labkit in memory (1 thread)",
                                                  f"labkit in memory ({t} thread{'s' * (t > 1)})"]
    assert sorted(r.comparison.times) == ["labkit", "labkit@1", "scipy"]
    assert all(len(t) == 2 for t in r.comparison.times.values())
    # The headline speedup is on equal threads (one each); labkit on every core is its own row.
    assert r.speedup_scipy == r.comparison.ratio("scipy", "labkit@1") > 0 and r.edges_per_s > 0
    assert r.speedup_all_threads.median == r.comparison.ratio("scipy", "labkit")
    ref = build_csr(*rmat_edges(p), p.num_nodes, dedup=True, drop_self_loops=True)
    assert np.array_equal(r.streamed.indptr, ref.indptr) and np.array_equal(r.streamed.indices, ref.indices)
    with pytest.raises(ValueError, match="rounds=0"):
        build_comparison(p, rounds=0)


def test_cache_point_off_and_on():
    from labkit.graph.datasets import load_graph
    from labkit.graph.experiments import cache_point
    data = load_graph("ci")
    off = cache_point(data, float("inf"), batches=2)
    on = cache_point(data, 1.0, batches=2)
    assert off["cache"] == "off" and off["hit_rate"] == 0 and off["cached_fraction"] == 0
    assert on["cache"] == "on" and 0 < on["hit_rate"] < 1 and 0 < on["cached_fraction"] <= 0.2
    assert off["batches"] == on["batches"] == 2 and off["backend"] == "embedded"
    assert on["epoch_s"] >= on["sample_s"] + on["gather_s"] + on["train_s"] > 0  # the split is reported
    assert on["remote_bytes"] < off["remote_bytes"]  # hits are served locally
    with pytest.raises(ValueError, match="threshold=nan"):
        cache_point(data, float("nan"))


@pytest.mark.dask
@pytest.mark.slow
def test_dask_partitions_are_scattered_to_their_workers_not_sent_inside_the_task_graph():
    """A partition bigger than Dask's 10 MiB large-graph threshold reaches its worker without the
    'Sending large graph' warning (its arrays are scattered first), and is served correctly."""
    import warnings

    from labkit.graph.store import close_cluster, local_cluster
    csr = build_csr(np.arange(4000) % 1000, (np.arange(4000) * 7) % 1000, 1000)
    x = np.random.default_rng(0).standard_normal((1000, 6000)).astype(np.float32)  # 12 MiB per partition
    client = local_cluster(2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            st = PartitionedStore(csr, partition(csr, 2, "hash"), x, backend="dask", client=client)
        ids = np.array([0, 1, 998, 999, 500])
        assert np.array_equal(st.features(ids), x[ids])
        for v in ids:
            assert np.array_equal(np.sort(st.neighbors(np.array([v]))[1]), np.sort(csr.neighbors(v)))
    finally:
        close_cluster(client)
