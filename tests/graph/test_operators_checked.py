"""Issue 4 clauses checked against independent references: GSL strategies' distributions, O(k) on a
hub too large to scan, exact k-hop importance, edge cut by hand, negatives' distributions and cap counts."""

import time

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import chisquare

from labkit.graph import importance as importance_mod
from labkit.graph import negative as negative_mod
from labkit.graph import sampling as sampling_mod
from labkit.graph import storage as storage_mod
from labkit.graph.csr import build_csr
from labkit.graph.importance import importance, khop_degrees
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.query import Graph
from labkit.graph.rmat import RMatParams, rmat_edges
from labkit.graph.sampling import sample_neighbors

from tests.graph.conftest import P

DRAWS = 20_000


@pytest.fixture(scope="module")
def skewed():
    """User 0 links to items 0..19 (input order shuffled, weights 1..20); item i has in-degree i + 1 in u2i.

    i2i: item 0 has in-edges from items 1..19, and item s has in-degree from u2i and i2i together.
    """
    rng = np.random.default_rng(0)
    src, dst, w = [], [], []
    for i in range(20):  # users 1..i give item i i in-edges (weight 1), listed before user 0's edges
        src.append(np.arange(1, i + 1))
        dst.append(np.full(i, i))
        w.append(np.ones(i, np.float32))
    items = rng.permutation(20)  # user 0's edges come last, shuffled: CSR positions are not input positions
    src.append(np.zeros(20, np.int64))
    dst.append(items)
    w.append((items + 1.0).astype(np.float32))  # edge 0 -> i weighs i + 1
    g = Graph().add_nodes("user", 21).add_nodes("item", 20)
    g.add_edges("u2i", "user", "item", np.concatenate(src), np.concatenate(dst), weights=np.concatenate(w))
    g.add_edges("i2i", "item", "item", np.arange(1, 20), np.zeros(19, np.int64))
    return g


def _counts(row, n):
    return np.bincount(row[row >= 0], minlength=n)


def test_gsl_edge_weight_draws_follow_each_edges_own_weight(skewed):
    res = skewed.V("user").outV("u2i").sample(DRAWS).by("edge_weight").run(np.array([0]), seed=1)
    got = _counts(res[1][0], 20)
    expect = np.arange(1, 21) / np.arange(1, 21).sum() * DRAWS  # item i weighs i + 1
    assert chisquare(got, expect).pvalue > 1e-4
    assert chisquare(got).pvalue < 1e-6  # and not uniform (as input-order weights, all 1 there, would give)


def test_gsl_in_degree_neighbourhood_follows_the_neighbours_in_degree(skewed):
    indeg = skewed.in_degree("item")
    assert indeg.tolist() == [1 + i + (19 if i == 0 else 0) for i in range(20)]  # u2i plus i2i
    res = skewed.V("user").outV("u2i").sample(DRAWS).by("in_degree").run(np.array([0]), seed=2)
    got = _counts(res[1][0], 20)
    assert got.sum() == DRAWS and chisquare(got, indeg / indeg.sum() * DRAWS).pvalue > 1e-4
    assert chisquare(got).pvalue < 1e-6  # and not uniform
    # inV: item 0's in-neighbours are items 1..19 (i2i), drawn by their own in-degree
    res = skewed.V("item").inV("i2i").sample(DRAWS).by("in_degree").run(np.array([0]), seed=3)
    got = _counts(res[1][0], 20)
    assert got[0] == 0 and chisquare(got[1:], indeg[1:] / indeg[1:].sum() * DRAWS).pvalue > 1e-4


def test_gsl_random_with_and_without_replacement():
    rng = np.random.default_rng(4)
    pairs = np.unique(np.stack([rng.integers(0, 50, 600), rng.integers(0, 80, 600)], 1), axis=0)
    g = Graph().add_nodes("user", 50).add_nodes("item", 80)
    g.add_edges("u2i", "user", "item", pairs[:, 0], pairs[:, 1])  # no duplicate edges: ids tell positions apart
    csr = g.edge_type("u2i").csr
    for k in (3, 40):
        no = g.V("user").batch(50).outV("u2i").sample(k).by("random_without_replacement").values().next()
        yes = g.V("user").batch(50).outV("u2i").sample(k).by("random").values().next()
        for u, a, b in zip(no[0], no[1], yes[1]):
            nb, d = set(csr.neighbors(u).tolist()), csr.degree()[u]
            got = a[a >= 0].tolist()
            assert len(got) == min(d, k) and len(set(got)) == len(got) and set(got) <= nb  # no repeats
            got = b[b >= 0].tolist()
            assert len(got) == (k if d else 0) and set(got) <= nb  # exactly k, repeats allowed
    # with replacement at k > d repeats must occur; without, a row is its whole list
    u = int(np.argmin(np.where(csr.degree()[:50] > 1, csr.degree()[:50], 10**9)))
    row = g.V("user").outV("u2i").sample(40).by("random").run(np.array([u]))[1][0]
    assert len(set(row.tolist())) < 40


def test_gsl_queries_are_deterministic_for_a_seed(skewed):
    def run(seed, epoch=0):
        q = skewed.V("user").batch(7).shuffle(seed).outV("u2i").sample(4).by("edge_weight") \
            .outV("i2i").sample(2).by("random")
        neg = skewed.V("user").batch(7).shuffle(seed).outNeg("u2i").sample(3).by("random")
        return [np.concatenate([r.ids[i].ravel() for r in q.values(epoch)]) for i in range(3)] + \
            [np.concatenate([r[1].ravel() for r in neg.values(epoch)])]
    a, b, c, e = run(5), run(5), run(6), run(5, epoch=1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[0], e[0])


def test_without_replacement_costs_o_k_on_a_hub_too_long_to_scan():
    # One row of 2**32 - 1 neighbours (never materialised: the draws read only indptr). Any O(d) step
    # (a permutation, a scan, a d-sized mask) would take seconds and gigabytes; O(k) takes microseconds.
    d = 2**32 - 1
    indptr = np.array([0, d], np.int64)
    rows = np.zeros(2000, np.int64)
    sample_neighbors(indptr, None, rows[:1], 15, seed=0)  # compiled already; warm anyway
    for replace in (False, True):
        t = time.perf_counter()
        ptr, eid = sample_neighbors(indptr, None, rows, 15, replace=replace, seed=1)
        assert time.perf_counter() - t < 0.5
        assert np.array_equal(np.diff(ptr), np.full(2000, 15)) and eid.min() >= 0 and eid.max() < d
        if not replace:
            assert all(len(np.unique(r)) == 15 for r in eid.reshape(-1, 15))
        assert abs((eid >= d // 2).mean() - 0.5) < 0.02  # the whole list is reached, not a prefix


def test_kernels_release_the_gil():
    # numba compiles nogil=True kernels to release the GIL: sampling overlaps with Python threads.
    for f in (sampling_mod._sample_hop_serial, sampling_mod._sample_hop_parallel, sampling_mod._sample_weighted,
              sampling_mod._topk, negative_mod._negatives, storage_mod._gather_lists_parallel):
        assert f.targetoptions.get("nogil") is True, f.py_func.__name__


def test_khop_importance_matches_matrix_powers():
    s, d = rmat_edges(RMatParams(scale=9, seed=2, split_roles=True))
    csr = build_csr(s, d, 512)  # duplicates kept: D^k counts paths with multiplicity
    csc = csr.reverse()
    a = sp.csr_matrix((np.ones(len(s)), (s, d)), shape=(512, 512))  # a[u, v] = edges u -> v
    one = np.ones(512)
    for k in (1, 2, 3):
        d_in, d_out = khop_degrees(csr, csc, k)
        ref_out, ref_in = one, one
        for _ in range(k):
            ref_out, ref_in = a @ ref_out, a.T @ ref_in
        assert np.array_equal(d_in, ref_in) and np.array_equal(d_out, ref_out), k
        imp = importance(csr, csc, k)
        both = (ref_in > 0) & (ref_out > 0)
        assert np.allclose(imp[both], ref_in[both] / ref_out[both])
        assert (imp[(ref_in > 0) & (ref_out == 0)] == np.inf).all() and (imp[ref_in == 0] == 0).all()
    assert (khop_degrees(csr, csc, 2)[0] != khop_degrees(csr, csc, 1)[0]).any()  # k really changes it


def test_edge_cut_and_balance_match_a_count_by_hand(g):
    csr, csc, *_ = g
    src = np.repeat(np.arange(P.num_nodes), csr.degree())
    for method in ("hash", "ldg", "fennel"):
        p = partition(csr, 4, method, csc=csc, seed=1)
        own = p.owner
        assert p.edge_cut == pytest.approx(np.mean(own[src] != own[csr.indices]))
        sizes = np.bincount(own, minlength=4)
        assert p.balance == pytest.approx(sizes.max() / sizes.mean())
        assert p.edge_balance == pytest.approx(np.bincount(own[src], minlength=4).max() / (csr.num_edges / 4))
        assert sizes.min() > 0
        assert np.array_equal(np.sort(np.concatenate([p.members(i) for i in range(4)])), np.arange(P.num_nodes))


def test_negative_distributions_uniform_and_by_in_degree():
    # 3 sources with no out-edges among 40 nodes; in-degree of node v is v % 8 (edges from nodes 3..39)
    s = np.concatenate([np.full(v % 8, 3 + (v % 37)) for v in range(40)])
    dst = np.concatenate([np.full(v % 8, v) for v in range(40)])
    csr = build_csr(s, dst, 40)
    indeg = np.bincount(dst, minlength=40)
    src = np.zeros(4000, np.int64)  # node 0 has no out-edges: nothing to reject
    uni = negative_sample(csr, src, 5, by="random", seed=1)
    assert chisquare(np.bincount(uni.dst, minlength=40)).pvalue > 1e-4
    deg = negative_sample(csr, src, 5, by="in_degree", seed=1)
    got = np.bincount(deg.dst, minlength=40)
    assert (got[indeg == 0] == 0).all()
    assert chisquare(got[indeg > 0], indeg[indeg > 0] / indeg.sum() * len(deg.dst)).pvalue > 1e-4
    uni10 = negative_sample(csr, src, 5, by="random", seed=1, num_dst=10)
    assert uni10.dst.max() < 10 and chisquare(np.bincount(uni10.dst, minlength=10)).pvalue > 1e-4


@pytest.mark.parametrize("by", ["in_degree", "random"])
def test_a_negative_is_never_a_true_neighbour_and_a_slot_without_one_is_marked_and_counted(by):
    # Source 0 links to 45 of 50 nodes (and node 49 has the most in-edges): few retries often run out.
    rng = np.random.default_rng(3)
    nb = rng.permutation(50)[:45]
    s = np.concatenate([np.zeros(45, np.int64), rng.integers(1, 50, 200)])
    d = np.concatenate([nb, rng.integers(0, 50, 200)])
    csr = build_csr(s, d, 50)
    near = set(csr.neighbors(0).tolist())
    for retries in (0, 1, 3, 30):
        neg = negative_sample(csr, np.zeros(500, np.int64), 4, by=by, max_retries=retries, seed=retries)
        assert not near & set(neg.dst.tolist()), retries
        assert neg.capped == int((neg.dst == -1).sum()) and np.array_equal(neg.found, neg.dst >= 0)
        if by == "random":  # the exact fallback draws from the 5 non-neighbours, uniformly
            assert neg.capped == 0 and set(neg.dst.tolist()) == set(range(50)) - near
        elif retries == 1:
            assert neg.capped > 0  # the cap is really reached at this setting
    # with rejection off nothing is checked nor counted, whatever comes back
    loose = negative_sample(csr, np.zeros(500, np.int64), 4, by=by, reject_neighbors=False)
    assert loose.capped == 0 and near & set(loose.dst.tolist())


def test_chunked_build_holds_one_chunk_and_the_csr_not_the_edge_list():
    import tracemalloc

    from labkit.graph.csr import build_csr_chunked
    n, chunk, count = 1000, 50_000, 64  # 3.2M edges: 51 MB as int64 pairs, 12.8 MB as the final CSR

    def chunks():
        for i in range(count):
            r = np.random.default_rng(i)
            yield r.integers(0, n, chunk), r.integers(0, n, chunk)
    build_csr_chunked(chunks, n)  # kernels compiled outside the measurement
    tracemalloc.start()  # NumPy reports its buffers to tracemalloc
    try:
        csr = build_csr_chunked(chunks, n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert csr.num_edges == chunk * count
    edge_list = 16 * chunk * count
    assert peak < csr.nbytes + 6 * 16 * chunk < edge_list / 2, (peak, csr.nbytes)


def test_rows_longer_than_the_32_bit_draws_are_refused():
    """The kernels draw 32-bit offsets into a row: a row of 2**33 neighbours was sampled only in its first
    2**32 entries, silently; now such a row is refused, per call and where a sampler checks its topology."""
    from labkit.graph.sampling import MAX_DEGREE, NeighborSampler, sample_neighbors
    big = np.array([0, 2**33], np.int64)
    with pytest.raises(ValueError, match=r"indptr\[1\]=8589934592 is not accepted; expected at most 4,294,967,295"):
        sample_neighbors(big, None, [0], 5)
    ok = np.array([0, MAX_DEGREE], np.int64)
    assert len(sample_neighbors(ok, None, [0], 5)[1]) == 5
    with pytest.raises(ValueError, match=r"indptr\[2\]=.* neighbours in row 1"):
        NeighborSampler(np.array([0, 3, 3 + 2**33], np.int64), np.broadcast_to(np.int32(0), (3 + 2**33,)))
