"""Graph core: R-MAT generator, CSR/CSC builder (in memory and chunked), sampling kernels."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.graph.csr import build_csc, build_csr, build_csr_chunked
from labkit.graph.rmat import RMatParams, rmat_edge_chunks, rmat_edges, rmat_features, rmat_labels
from labkit.graph.sampling import (AliasTable, NeighborSampler, sample_multihop, sample_neighbors,
                                   sample_weighted, topk_neighbors)

P = RMatParams(scale=10, seed=3)


@pytest.fixture(scope="module")
def edges():
    return rmat_edges(P)


@pytest.fixture(scope="module")
def csr(edges):
    return build_csr(*edges, P.num_nodes, dedup=True)


def test_rmat_streams_the_same_edges_in_any_chunking(edges):
    for chunk in (1, 777, 1 << 20):
        got = list(rmat_edge_chunks(P, chunk)) if chunk > 1 else list(rmat_edge_chunks(P, 1, stop=50))
        s = np.concatenate([c[0] for c in got])
        d = np.concatenate([c[1] for c in got])
        assert np.array_equal(s, edges[0][:len(s)]) and np.array_equal(d, edges[1][:len(d)])
    part = list(rmat_edge_chunks(P, 100, start=500, stop=900))
    assert np.array_equal(np.concatenate([c[0] for c in part]), edges[0][500:900])


def test_rmat_is_seeded_skewed_and_has_learnable_communities(edges):
    s, d = edges
    s2, _ = rmat_edges(RMatParams(scale=10, seed=4))
    assert not np.array_equal(s, s2)
    assert np.array_equal(s, rmat_edges(P)[0])
    deg = np.bincount(s, minlength=P.num_nodes)
    assert deg.max() > 20 * deg.mean()  # power-law hubs
    labels = rmat_labels(P)
    assert np.bincount(labels).tolist() == [P.num_nodes // 16] * 16  # balanced classes
    assert (labels[s] == labels[d]).mean() > 0.75  # p_intra = 0.8 plus chance
    x = rmat_features(P, 8, 0.5, labels)
    cent = np.stack([x[labels == c].mean(0) for c in range(16)])
    assert (np.argmin(((x[:, None] - cent[None]) ** 2).sum(-1), 1) == labels).mean() > 0.9


def test_split_roles_decorrelates_in_and_out_degree():
    def corr(p):
        s, d = rmat_edges(p)
        a, b = np.bincount(s, minlength=p.num_nodes), np.bincount(d, minlength=p.num_nodes)
        return np.corrcoef(np.log1p(a), np.log1p(b))[0, 1]
    assert corr(RMatParams(scale=12)) > 0.8
    assert corr(RMatParams(scale=12, split_roles=True)) < 0.4
    labels = rmat_labels(RMatParams(scale=12, split_roles=True))
    s, d = rmat_edges(RMatParams(scale=12, split_roles=True))
    assert (labels[s] == labels[d]).mean() > 0.75


def test_build_matches_scipy_canonical_csr(edges, csr):
    s, d = edges
    ref = sp.coo_matrix((np.ones(len(s)), (s, d)), shape=(P.num_nodes,) * 2).tocsr()
    ref.sort_indices()
    assert np.array_equal(csr.indptr, ref.indptr) and np.array_equal(csr.indices, ref.indices)


def test_build_keeps_input_order_and_eids(edges):
    s, d = edges
    c = build_csr(s, d, P.num_nodes, return_eid=True)
    for v in (0, 5, int(np.argmax(np.bincount(s)))):
        assert np.array_equal(c.neighbors(v), d[s == v])
        assert np.array_equal(c.eid[c.indptr[v]:c.indptr[v + 1]], np.flatnonzero(s == v))


def test_chunked_build_equals_in_memory(edges):
    for kw in ({}, {"dedup": True, "drop_self_loops": True}, {"return_eid": True}):
        a = build_csr(*edges, P.num_nodes, **kw)
        b = build_csr_chunked(lambda: rmat_edge_chunks(P, 3001), P.num_nodes, **kw)
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        if kw.get("return_eid"):
            assert np.array_equal(a.eid, b.eid)


def _reference_csr(s, d, n, drop_self_loops=False, dedup=False, sort=False, return_eid=False):
    """The CSR build_csr documents, from NumPy's stable sorts: (indptr, indices, eid)."""
    order = np.flatnonzero(s != d) if drop_self_loops else np.arange(len(s))
    order = order[np.argsort(s[order], kind="stable")]  # rows keep input order
    if sort or dedup:
        order = order[np.lexsort((d[order], s[order]))]  # stable: equal ids keep input order
    if dedup:  # the first copy of each (src, dst) pair
        keep = np.ones(len(order), bool)
        keep[1:] = (s[order][1:] != s[order][:-1]) | (d[order][1:] != d[order][:-1])
        order = order[keep]
    return np.concatenate([[0], np.cumsum(np.bincount(s[order], minlength=n))]), d[order], order


@pytest.mark.parametrize("bucket_edges", [1, 64, 1 << 16])
def test_bucketed_builds_match_a_numpy_reference(edges, monkeypatch, bucket_edges):
    # Both builders sort edges into buckets of rows first. Few edges per bucket: many buckets over 2 threads.
    import labkit.graph.csr as csr_mod
    monkeypatch.setattr(csr_mod, "BUCKET_EDGES", bucket_edges)
    s, d = edges
    for kw in ({}, {"sort": True}, {"dedup": True}, {"return_eid": True}, {"dedup": True, "return_eid": True},
               {"sort": True, "return_eid": True}, {"dedup": True, "drop_self_loops": True},
               {"drop_self_loops": True, "return_eid": True}):
        ptr, idx, eid = _reference_csr(s, d, P.num_nodes, **kw)
        for c in (build_csr(s, d, P.num_nodes, **kw),
                  build_csr_chunked(lambda: rmat_edge_chunks(P, 3001), P.num_nodes, **kw)):
            assert np.array_equal(c.indptr, ptr) and np.array_equal(c.indices, idx), kw
            assert (c.eid is None) != bool(kw.get("return_eid")) and (c.eid is None or np.array_equal(c.eid, eid)), kw


def test_bucketed_build_of_a_star_sorts_the_hub_in_one_threads_scratch():
    # Nearly every edge leaves node 0: one bucket holds almost all of them; each thread's scratch
    # is sized by its own largest bucket, so the hub's thread needs the big one.
    rng = np.random.default_rng(1)
    n = 200_000
    src = np.concatenate([np.zeros(300_000, np.int64), rng.integers(1, n, 1000)])
    dst = rng.integers(0, n, len(src))
    for kw in ({"dedup": True}, {"sort": True}, {"sort": True, "return_eid": True}):
        ptr, idx, eid = _reference_csr(src, dst, n, **kw)
        c = build_csr(src, dst, n, **kw)
        assert np.array_equal(c.indptr, ptr) and np.array_equal(c.indices, idx), kw
        assert c.eid is None or np.array_equal(c.eid, eid)


def test_bucketed_build_rows_at_the_uint16_boundary():
    # 3 * 2**16 + 5 nodes and few edges: buckets span the most rows a uint16 offset holds (2**16),
    # and edges sit on each bucket's first and last row.
    n = 3 * (1 << 16) + 5
    rows = np.array([0, 65535, 65536, 131071, 131072, 196607, 196608, n - 1, 65535, 0])
    rng = np.random.default_rng(0)
    src = np.concatenate([rows, rng.integers(0, n, 5000)])
    dst = rng.integers(0, n, len(src))
    for kw, c in [(kw, c) for kw in ({"return_eid": True}, {"dedup": True})
                  for c in (build_csr(src, dst, n, **kw), build_csr_chunked(lambda: iter([(src, dst)]), n, **kw))]:
        if kw.get("dedup"):
            ref = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()  # duplicates summed
            assert np.array_equal(c.indptr, ref.indptr) and np.array_equal(c.indices, ref.indices)
        else:
            order = np.argsort(src, kind="stable")
            assert np.array_equal(c.indptr, np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]))
            assert np.array_equal(c.eid, order) and np.array_equal(c.indices, dst[order])


def test_drop_self_loops_and_weights_follow_their_edges():
    s = np.array([0, 0, 1, 2, 2, 0])
    d = np.array([1, 0, 2, 0, 0, 1])
    w = np.array([1., 2., 3., 4., 5., 6.], np.float32)
    c = build_csr(s, d, 3, weights=w, drop_self_loops=True, dedup=True)
    assert c.indptr.tolist() == [0, 1, 2, 3] and c.indices.tolist() == [1, 2, 0]
    assert c.weights.tolist() == [1., 3., 4.]  # first copy of a duplicate keeps its weight
    r = c.reverse()
    assert r.indices.tolist() == [2, 0, 1] and r.weights.tolist() == [4., 1., 3.]


@pytest.mark.parametrize("bad", [
    (np.array([0, -1]), np.array([1, 1]), None, "src\\[1\\]=-1"),
    (np.array([0, 1]), np.array([1, 9]), 5, "dst\\[1\\]=9"),
    (np.array([0.5]), np.array([1]), None, "src"),
])
def test_build_rejects_bad_ids(bad):
    s, d, n, msg = bad
    with pytest.raises(ValueError, match=msg):
        build_csr(s, d, n)


def test_chunked_build_refuses_a_stream_that_changes():
    calls = {"n": 0}

    def chunks():
        calls["n"] += 1
        yield np.array([0, calls["n"] % 2]), np.array([1, 1])
    with pytest.raises(ValueError, match="second pass"):
        build_csr_chunked(chunks, 2)


def _rows_ok(csr, rows, ptr, eid, k, replace):
    for i, v in enumerate(rows):
        got = eid[ptr[i]:ptr[i + 1]]
        lo, hi = csr.indptr[v], csr.indptr[v + 1]
        assert ((got >= lo) & (got < hi)).all()  # real neighbours
        d = hi - lo
        if replace:
            assert len(got) == (k if d else 0)
        else:
            assert len(got) == min(d, k) and len(set(got.tolist())) == len(got)  # no repeats


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 40), replace=st.booleans(), seed=st.integers(0, 2**31))
def test_sample_neighbors_properties(csr, k, replace, seed):
    rows = np.random.default_rng(seed).integers(0, P.num_nodes, 60)
    ptr, eid = sample_neighbors(csr.indptr, csr.indices, rows, k, replace=replace, seed=seed)
    _rows_ok(csr, rows, ptr, eid, k, replace)
    again = sample_neighbors(csr.indptr, csr.indices, rows, k, replace=replace, seed=seed)
    assert np.array_equal(again[1], eid)  # deterministic per seed


def test_without_replacement_is_uniform_on_a_hub():
    d = 50_000  # a hub: O(k) Floyd draws, every position equally likely
    indptr = np.array([0, d])
    indices = np.arange(d, dtype=np.int32)
    hits = np.zeros(d)
    for sd in range(400):
        _, eid = sample_neighbors(indptr, indices, np.zeros(50, np.int64), 10, seed=sd)
        assert all(len(set(eid[i * 10:(i + 1) * 10])) == 10 for i in range(50))
        np.add.at(hits, eid, 1)
    per_bin = hits.reshape(50, -1).sum(1)  # 50 bins of 1000 positions, 4000 draws each expected
    assert abs(per_bin - 4000).max() < 6 * np.sqrt(4000)


def test_sample_full_and_bad_fanouts(csr):
    ptr, eid = sample_neighbors(csr.indptr, csr.indices, np.array([3, 7]), -1)
    assert np.array_equal(csr.indices[eid], np.concatenate([csr.neighbors(3), csr.neighbors(7)]))
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="fanout"):
            sample_neighbors(csr.indptr, csr.indices, np.array([1]), bad)
    with pytest.raises(ValueError, match=r"rows\[1\]=5000"):
        sample_neighbors(csr.indptr, csr.indices, np.array([1, 5000]), 3)


def test_kernels_take_neighbour_lists_from_any_source(csr):
    rows = np.array([5, 9, 11])
    sub_ptr = np.concatenate([[0], np.cumsum(np.diff(csr.indptr)[rows])])
    sub_idx = np.concatenate([csr.neighbors(v) for v in rows])
    ptr, eid = sample_neighbors(sub_ptr, sub_idx, np.arange(3), 4, seed=1)
    ref_ptr, ref_eid = sample_neighbors(csr.indptr, csr.indices, rows, 4, seed=1)
    assert np.array_equal(sub_idx[eid], csr.indices[ref_eid])


@pytest.mark.parametrize("frontier", ["new", "all"])
def test_multihop_matches_k_hop_subgraph(csr, frontier):
    import torch
    from torch_geometric.utils import k_hop_subgraph
    seeds = np.array([1, 2, 3, 100])
    s = sample_multihop(csr.indptr, csr.indices, seeds, [-1, -1], frontier=frontier)
    assert np.array_equal(s.nodes[:4], seeds) and len(np.unique(s.nodes)) == len(s.nodes)
    for rows, cols, eids in zip(s.rows, s.cols, s.eids):
        assert np.array_equal(s.nodes[cols], csr.indices[eids])  # sampled = real neighbours
        assert all(csr.indptr[s.nodes[r]] <= e < csr.indptr[s.nodes[r] + 1] for r, e in zip(rows[:200], eids[:200]))
    # Full fanouts over out-edges reach exactly the 2-hop set PyG finds (flow target_to_source = out-edges).
    src = np.repeat(np.arange(P.num_nodes), csr.degree())
    ei = torch.from_numpy(np.stack([src, csr.indices.astype(np.int64)]))
    subset, *_ = k_hop_subgraph(torch.from_numpy(seeds), 2, ei, num_nodes=P.num_nodes, flow="target_to_source")
    assert set(s.nodes.tolist()) == set(subset.tolist())


def test_multihop_deterministic_and_workspace_reset(csr):
    sm = NeighborSampler(csr.indptr, csr.indices)
    a = sm.sample(np.arange(20), [5, 3], seed=9)
    sm.sample(np.arange(50, 90), [4, 4], seed=1)
    b = sm.sample(np.arange(20), [5, 3], seed=9)
    assert np.array_equal(a.nodes, b.nodes) and all(np.array_equal(x, y) for x, y in zip(a.cols, b.cols))
    assert (sm._local == -1).all()
    with pytest.raises(ValueError, match="fanouts"):
        sm.sample(np.arange(3), [])
    with pytest.raises(ValueError, match="distinct"):
        sm.sample(np.array([1, 1]), [2])


def test_edge_weight_sampling_matches_weights_chi_square():
    from scipy.stats import chisquare
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 10.0])
    indptr = np.array([0, 6])
    table = AliasTable.build(indptr, w)
    _, eid = sample_weighted(indptr, table, np.zeros(2000, np.int64), 10, seed=5)
    counts = np.bincount(eid, minlength=6)
    assert counts[4] == 0
    keep = w > 0
    assert chisquare(counts[keep], w[keep] / w.sum() * counts.sum()).pvalue > 1e-3
    with pytest.raises(ValueError, match=r"weights\[1\]=-1"):
        AliasTable.build(np.array([0, 2]), np.array([1.0, -1.0]))


def test_topk_takes_heaviest():
    indptr = np.array([0, 4, 5])
    w = np.array([0.1, 5.0, 3.0, 4.0, 1.0])
    ptr, eid = topk_neighbors(indptr, w, np.array([0, 1]), 2)
    assert eid[:2].tolist() == [1, 3] and eid[2:].tolist() == [4]


def _columns(indptr, rows, *extra, mult=None):
    """Return (col, row, *extra) of every stored entry, sorted column by column (then by row, extras).

    `mult` repeats entry i mult[i] times (scipy's summed duplicates back into a multiset).
    """
    col = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    if mult is not None:
        col, rows = np.repeat(col, mult), np.repeat(rows, mult)
    order = np.lexsort(tuple(reversed((col, rows) + extra)))
    return [np.asarray(a)[order] for a in (col, rows) + extra]


def _scipy_csc(s, d, data):
    ref = sp.coo_matrix((data, (s, d)), shape=(P.num_nodes,) * 2).tocsc()
    ref.sum_duplicates()  # one entry per (row, col), data summed
    ref.sort_indices()
    return ref.indptr, ref.indices, ref.data


def test_csc_is_the_transpose(edges):
    s, d = edges
    # Multiset per column: scipy sums duplicate (src, dst) pairs, so data = multiplicity.
    ref_ptr, ref_rows, ref_mult = _scipy_csc(s, d, np.ones(len(s)))
    ref = _columns(ref_ptr, ref_rows, mult=ref_mult.astype(np.int64))
    for got in (build_csc(s, d, P.num_nodes), build_csr(s, d, P.num_nodes).reverse()):
        assert np.array_equal(got.indptr, np.concatenate([[0], np.cumsum(np.bincount(d, minlength=P.num_nodes))]))
        for a, b in zip(_columns(got.indptr, got.indices), ref):
            assert np.array_equal(a, b)
    # dedup: each column holds exactly scipy's set of row ids, ascending (build_csr documents the order).
    c = build_csc(s, d, P.num_nodes, dedup=True)
    assert np.array_equal(c.indptr, ref_ptr) and np.array_equal(c.indices, ref_rows)
    r = build_csr(s, d, P.num_nodes, dedup=True).reverse()  # reverse() keeps source order: compare as sets
    assert np.array_equal(r.indptr, ref_ptr) and np.array_equal(_columns(r.indptr, r.indices)[1], ref_rows)
    # Edge ids and weights carried: on distinct edges, column v holds exactly the (row, eid, weight)
    # triples scipy's CSC of the same edges has (scipy carries eid + 1 and the weight as data).
    pairs = np.unique(np.stack([s, d], 1), axis=0)
    perm = np.random.default_rng(0).permutation(len(pairs))
    us, ud = pairs[perm, 0], pairs[perm, 1]
    w = np.random.default_rng(1).random(len(us)).astype(np.float32)
    eid = np.arange(len(us))
    ref_ptr, ref_rows, ref_eid = _scipy_csc(us, ud, eid + 1.0)
    _, _, ref_w = _scipy_csc(us, ud, w.astype(np.float64))
    ref = _columns(ref_ptr, ref_rows, ref_eid.astype(np.int64) - 1, ref_w)
    c = build_csc(us, ud, P.num_nodes, weights=w)
    r = build_csr(us, ud, P.num_nodes, weights=w).reverse()
    for got in (c, r):
        assert np.array_equal(got.indptr, ref_ptr)
        assert np.array_equal(got.weights, w[got.eid])  # weights follow their edge ids
        for a, b in zip(_columns(got.indptr, got.indices, got.eid, got.weights.astype(np.float64)), ref):
            assert np.array_equal(a, b)


def test_build_from_csv_and_parquet(tmp_path, edges):
    import pandas as pd

    from labkit.graph.build import build_from_file, csv_edge_chunks
    s, d = edges
    df = pd.DataFrame({"src": s[:5000], "dst": d[:5000]})
    df.to_csv(tmp_path / "e.csv", index=False)
    df.to_parquet(tmp_path / "e.parquet")
    ref = build_csr(s[:5000], d[:5000], P.num_nodes, dedup=True)
    for name in ("e.csv", "e.parquet"):
        got = build_from_file(tmp_path / name, P.num_nodes, dedup=True)
        assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    csc = build_from_file(tmp_path / "e.csv", P.num_nodes, reverse=True)
    assert csc.num_edges == 5000 and np.array_equal(np.sort(csc.neighbors(int(d[0]))), np.sort(s[:5000][d[:5000] == d[0]]))
    (tmp_path / "bad.csv").write_text("src,dst\n0,1\n2,3\n4,x\n")
    with pytest.raises(ValueError, match=r"bad.csv row 3: dst='x'"):
        build_from_file(tmp_path / "bad.csv", 10)
    (tmp_path / "neg.csv").write_text("src,dst\n0,1\n-2,3\n")
    with pytest.raises(ValueError, match=r"neg.csv row 2: src='-2'"):
        build_from_file(tmp_path / "neg.csv", 10)
    with pytest.raises(ValueError, match="columns"):
        csv_edge_chunks(tmp_path / "e.csv", src="from")


def test_parallel_sampling_draws_what_serial_draws_on_any_thread_count(csr, monkeypatch):
    """Work >= PARALLEL_MIN_WORK takes the prange kernel; it must give the serial kernel's draws."""
    import numba

    from labkit.graph import sampling
    rows = np.random.default_rng(7).integers(0, P.num_nodes, 30_000)
    calls = []
    parallel = sampling._sample_hop_parallel

    def spy(*a):
        calls.append(len(a[1]))
        return parallel(*a)
    monkeypatch.setattr(sampling, "_sample_hop_parallel", spy)
    before = numba.get_num_threads()
    try:
        for k, replace in ((5, False), (5, True), (-1, False), (40, False)):
            assert len(rows) * (k if k > 0 else 16) >= sampling.PARALLEL_MIN_WORK
            ref = sampling._sample_hop_serial(csr.indptr, rows, k, replace, 11, 3)
            for threads in sorted({1, 2, before}):
                numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
                ptr, eid = sample_neighbors(csr.indptr, csr.indices, rows, k, replace=replace, seed=11, stream=3)
                assert calls and calls.pop() == len(rows)  # the parallel kernel ran
                assert np.array_equal(ptr, ref[0]) and np.array_equal(eid, ref[1])
            _rows_ok(csr, rows, ref[0], ref[1], k if k > 0 else 10**9, replace)
        # Multi-hop too: hop 1 of 1000 seeds at fanout 70 is 70,000 >= 65,536 units of work.
        numba.set_num_threads(1)
        one = sample_multihop(csr.indptr, csr.indices, np.arange(1000), [70, 5], seed=5)
        assert calls.pop(0) == 1000  # hop 1 took the parallel path
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = sample_multihop(csr.indptr, csr.indices, np.arange(1000), [70, 5], seed=5)
        assert calls.pop(0) == 1000
        assert np.array_equal(one.nodes, two.nodes)
        assert all(np.array_equal(a, b) for a, b in zip(one.eids + one.cols, two.eids + two.cols))
    finally:
        numba.set_num_threads(before)


def test_with_replacement_is_uniform_over_a_neighbour_list_chi_square():
    from scipy.stats import chisquare
    for d in (37, 1000):  # a small odd list and a long one
        indptr = np.array([0, d])
        indices = np.arange(d, dtype=np.int32)
        ptr, eid = sample_neighbors(indptr, indices, np.zeros(20_000, np.int64), 10, replace=True, seed=d)
        assert len(eid) == 200_000 and ptr[-1] == 200_000
        counts = np.bincount(eid, minlength=d)
        assert chisquare(counts).pvalue > 1e-4  # uniform expected counts
        # and each row's own draws are not one repeated neighbour (draws within a row differ)
        per_row = eid.reshape(-1, 10)
        assert (per_row != per_row[:, :1]).any(1).mean() > 0.99
