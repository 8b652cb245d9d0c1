"""Fuzz pass (issue 33) over the graph entry points that take user data: each returns a right result or a
one-line LabkitError naming the argument (tests/fuzz.py). Results are checked, not just survived."""

import collections

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.graph.build import build_from_file, csv_edge_chunks
from labkit.graph.csr import CSR, build_csr, build_csr_chunked
from labkit.graph.importance import importance, khop_degrees, plan_cache
from labkit.graph.negative import negative_sample
from labkit.graph.partition import partition
from labkit.graph.query import HOP_STRATEGIES, Graph, Ragged
from labkit.graph.sampling import sample_multihop, sample_neighbors, topk_neighbors
from labkit.graph.store import LocalStore, PartitionedStore
from labkit.graph.traverse import node_batches
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call

DTYPES = [np.int64, np.int32, np.float64]
#: A bounded number of cases per entry point: the whole file runs in well under a minute.
FEW = settings(parent=FUZZ_SETTINGS, max_examples=30)
MORE = settings(parent=FUZZ_SETTINGS, max_examples=80)
#: Ids mostly in range (so results come back to be checked), some out of range or negative.
IDS = st.one_of(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.integers(-2, 40))


@st.composite
def edge_lists(draw, max_nodes=12, max_edges=40):
    """(src, dst, num_nodes or None): ids mostly in range, some out of range or negative, of several dtypes."""
    n = draw(st.integers(0, max_nodes))
    m = draw(st.integers(0, max_edges))
    hi = draw(st.sampled_from([max(n, 1), n + 2]))
    lo = draw(st.sampled_from([0, 0, 0, -2]))
    dt = draw(st.sampled_from(DTYPES))
    ints = st.lists(st.integers(lo, hi - 1), min_size=m, max_size=m)
    src = np.array(draw(ints)).astype(dt) if m else np.array([], dt)
    dst = np.array(draw(ints)).astype(dt) if m else np.array([], dt)
    if draw(st.integers(0, 9)) == 0:
        dst = dst[:max(0, m - 1)]  # lengths that differ
    return src, dst, draw(st.sampled_from([n, None]))


def _rows(csr: CSR) -> list[list[int]]:
    return [csr.indices[csr.indptr[v]:csr.indptr[v + 1]].tolist() for v in range(csr.num_nodes)]


def _check_csr(csr: CSR, src, dst, *, dedup=False, drop_self_loops=False, sort=False):
    """Assert `csr` holds exactly the edges src -> dst (as the builder's flags say)."""
    want = collections.defaultdict(list)
    for s, d in zip(np.asarray(src).tolist(), np.asarray(dst).tolist()):
        if not (drop_self_loops and s == d):
            want[int(s)].append(int(d))
    assert csr.indptr[0] == 0 and (np.diff(csr.indptr) >= 0).all()
    assert csr.num_nodes >= (max(want) + 1 if want else 0)
    for v, row in enumerate(_rows(csr)):
        exp = want.get(v, [])
        if dedup:
            exp = sorted(set(exp))
        elif sort:
            exp = sorted(exp)
        assert row == exp, (v, row, exp)


@FEW
@given(edge_lists(), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([None, "ok", "nan", "neg", "inf"]))
def test_fuzz_build_csr(edges, dedup, sort, loops, weights):
    src, dst, n = edges
    w = None
    if weights is not None:
        w = np.arange(len(src), dtype=np.float64)
        if weights != "ok" and len(w):
            w[len(w) // 2] = {"nan": np.nan, "neg": -1.0, "inf": np.inf}[weights]
    try:
        csr = fuzz_call("graph.build_csr", build_csr, src, dst, n, weights=w, dedup=dedup, sort=sort,
                        drop_self_loops=loops)
    except Refused:
        return
    _check_csr(csr, src, dst, dedup=dedup, drop_self_loops=loops, sort=sort)
    if w is not None:
        assert np.array_equal(csr.weights, w[csr.eid])
        assert np.array_equal(np.asarray(src)[csr.eid], np.repeat(np.arange(csr.num_nodes), csr.degree()))


@FEW
@given(edge_lists(), st.integers(1, 5), st.booleans())
def test_fuzz_build_csr_chunked(edges, pieces, dedup):
    src, dst, n = edges
    cuts = np.linspace(0, len(src), pieces + 1).astype(int)
    chunks = lambda: ((src[a:b], dst[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))  # noqa: E731
    try:
        csr = fuzz_call("graph.build_csr_chunked", build_csr_chunked, chunks, n if n is not None else 5, dedup=dedup)
    except Refused:
        return
    _check_csr(csr, src, dst, dedup=dedup)


LINES = st.one_of(
    st.tuples(st.integers(0, 9), st.integers(0, 9)).map(lambda t: f"{t[0]},{t[1]}"),
    st.sampled_from(["", "1", "1,2,3", "a,b", "-1,2", "1.5,2", "1e30,1", " 3 , 4 ", '"5",6', "\u00e9,1",
                     "9999999999999999999999,1", "nan,1"]),
)


@FEW
@given(st.lists(LINES, max_size=12), st.sampled_from(["none", "truncate", "flip", "bytes"]), st.integers(0, 10**6),
       st.sampled_from([None, 10]))
def test_fuzz_csv_edge_files(tmp_path_factory, lines, damage, at, num_nodes):
    path = tmp_path_factory.mktemp("csv") / "edges.csv"
    data = ("src,dst\n" + "\n".join(lines)).encode()
    if damage == "truncate":
        data = data[:at % (len(data) + 1)]
    elif damage == "flip" and data:
        i = at % len(data)
        data = data[:i] + bytes([data[i] ^ 0xA5]) + data[i + 1:]
    elif damage == "bytes":
        data = np.random.default_rng(at).integers(0, 256, at % 64, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    try:
        csr = fuzz_call("graph.build_from_file(csv)", build_from_file, path, num_nodes)
    except Refused:
        return
    # What came back is exactly what the file's rows say (pandas skips blank lines only).
    chunks = list(csv_edge_chunks(path)())
    s = np.concatenate([c[0] for c in chunks] + [np.empty(0, np.int64)])
    d = np.concatenate([c[1] for c in chunks] + [np.empty(0, np.int64)])
    _check_csr(csr, s, d)
    if num_nodes is not None:
        assert csr.num_nodes == num_nodes


@FEW
@given(edge_lists(max_nodes=8, max_edges=20), st.sampled_from(["none", "truncate", "flip"]), st.integers(0, 10**6),
       st.booleans())
def test_fuzz_parquet_edge_files(tmp_path_factory, edges, damage, at, weighted):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src, dst, _ = edges
    if len(src) != len(dst):
        return
    path = tmp_path_factory.mktemp("pq") / "edges.parquet"
    cols = {"src": src, "dst": dst}
    if weighted:
        cols["w"] = np.linspace(-1, 2, len(src))
    pq.write_table(pa.table(cols), path)
    data = path.read_bytes()
    if damage == "truncate":
        data = data[:at % len(data)]
    elif damage == "flip":
        i = at % len(data)
        data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    path.write_bytes(data)
    try:
        csr = fuzz_call("graph.build_from_file(parquet)", build_from_file, path, weight="w" if weighted else None)
    except Refused:
        return
    if damage == "none":
        _check_csr(csr, src, dst)
    else:  # a flipped byte may land where pyarrow does not look: the result is still a sound CSR
        assert (np.diff(csr.indptr) >= 0).all() and csr.indptr[-1] == len(csr.indices)
        assert not len(csr.indices) or csr.indices.max() < csr.num_nodes


@pytest.fixture(scope="module")
def typed():
    """Users (30) and items (12): weighted u2i edges (user 0 linked to every item), i2i edges."""
    rng = np.random.default_rng(5)
    src = np.concatenate([np.zeros(12, np.int64), rng.integers(1, 30, 60)])
    dst = np.concatenate([np.arange(12), rng.integers(0, 12, 60)])
    g = Graph().add_nodes("user", 30).add_nodes("item", 12)
    g.add_edges("u2i", "user", "item", src, dst, weights=rng.random(len(src)))
    g.add_edges("i2i", "item", "item", rng.integers(0, 12, 40), rng.integers(0, 12, 40))
    return g


STEP = st.tuples(st.sampled_from(["outV", "outV", "inV", "outNeg"]), st.sampled_from(["fits", "fits", "fits", "u2i", "i2i", "zzz"]),
                 st.sampled_from([1, 2, 3, 5, 0, -1]),
                 st.sampled_from(list(HOP_STRATEGIES) + ["random", "random", "in_degree", "bogus"]))


def _nbrs(topo: CSR, v: int) -> list[int]:
    return topo.indices[topo.indptr[v]:topo.indptr[v + 1]].tolist()


@MORE
@given(st.sampled_from(["user", "item", "item"]), st.lists(STEP, max_size=3), st.lists(IDS, max_size=6),
       st.integers(0, 3))
def test_fuzz_gsl_queries(typed, start, steps, seeds, seed):
    def build():
        q = typed.V(start)
        for i, (kind, et, k, by) in enumerate(steps):
            if et == "fits":  # an edge type this step can take from the current node type
                cur = q._current_type()
                fits = [n for n, e in typed.edge_types.items() if (e.dst_type if kind == "inV" else e.src_type) == cur]
                et = fits[(seed + i) % len(fits)]
                steps[i] = (kind, et, k, by)
            getattr(q, kind)(et).sample(k).by(by)
        return q.run(np.array(seeds, np.int64), seed=seed)

    try:
        res = fuzz_call("graph.query", build)
    except Refused:
        return
    assert len(res.ids) == len(steps) + 1 and res[0].tolist() == seeds
    capped = 0
    for (kind, et, k, by), prev, out, t in zip(steps, res.ids, res.ids[1:], res.types[1:]):
        e = typed.edge_type(et)
        flat = prev.values if isinstance(prev, Ragged) else prev.reshape(-1)
        assert t == (e.src_type if kind == "inV" else e.dst_type)
        topo = e.csc if kind == "inV" else e.csr
        if by == "full" and kind != "outNeg":
            assert isinstance(out, Ragged) and len(out) == len(flat)
            for v, row in zip(flat.tolist(), out.lists()):
                assert row.tolist() == (_nbrs(topo, v) if v >= 0 else [])
            continue
        assert out.shape == (len(flat), k)
        for v, row in zip(flat.tolist(), out.tolist()):
            got = [x for x in row if x >= 0]
            if v < 0:
                assert got == []
                continue
            nb = _nbrs(topo, v)
            if kind == "outNeg":
                assert not set(got) & set(nb) and all(x < typed.node_types[e.dst_type] for x in got)
                capped += k - len(got)
                continue
            assert set(got) <= set(nb) and row[:len(got)] == got  # real ids first, then -1 padding
            if by in ("random", "edge_weight", "in_degree"):
                assert len(got) == (k if nb else 0)
            else:  # without replacement and topk: min(d, k) of the row's edges, none twice
                assert len(got) == min(len(nb), k)
                assert all(got.count(x) <= nb.count(x) for x in got)
    assert res.capped_negatives == capped


@st.composite
def csrs(draw):
    n = draw(st.integers(1, 10))
    m = draw(st.integers(0, 30))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=m, max_size=m))
    s = np.array([p[0] for p in pairs], np.int64)
    d = np.array([p[1] for p in pairs], np.int64)
    return build_csr(s, d, n)


@FEW
@given(csrs(), st.lists(IDS, max_size=8), st.sampled_from([1, 2, 4, -1, 0, -2]), st.booleans(),
       st.sampled_from([np.int64, np.int64, np.int32, np.float64]))
def test_fuzz_sample_neighbors(csr, rows, fanout, replace, dt):
    try:
        ptr, eid = fuzz_call("graph.sample_neighbors", sample_neighbors, csr.indptr, csr.indices,
                             np.array(rows, dt), fanout, replace=replace)
    except Refused:
        return
    assert len(ptr) == len(rows) + 1
    for i, v in enumerate(rows):
        got = eid[ptr[i]:ptr[i + 1]]
        lo, hi = csr.indptr[v], csr.indptr[v + 1]
        assert ((got >= lo) & (got < hi)).all()  # positions in v's own row: true neighbours
        d = hi - lo
        want = d if fanout == -1 else (fanout if d else 0) if replace else min(d, fanout)
        assert len(got) == want
        if not replace:
            assert len(set(got.tolist())) == len(got)


@FEW
@given(csrs(), st.lists(IDS, max_size=6, unique=True), st.lists(st.sampled_from([1, 2, 3, -1, 0]), max_size=3),
       st.booleans())
def test_fuzz_sample_multihop(csr, seeds, fanouts, replace):
    try:
        s = fuzz_call("graph.sample_multihop", sample_multihop, csr.indptr, csr.indices, np.array(seeds, np.int64),
                      fanouts, replace=replace)
    except Refused:
        return
    assert s.nodes[:len(seeds)].tolist() == seeds and len(set(s.nodes.tolist())) == len(s.nodes)
    for r, c in zip(s.rows, s.cols):
        for a, b in zip(s.nodes[r].tolist(), s.nodes[c].tolist()):
            assert b in _nbrs(csr, a)


@FEW
@given(csrs(), st.lists(IDS, max_size=6), st.sampled_from([1, 2, 3, -1, 0]),
       st.sampled_from(["ok", "ok", "nan", "neg", "int"]))
def test_fuzz_topk(csr, rows, k, weights):
    w = np.random.default_rng(len(rows)).random(csr.num_edges)
    if weights == "nan" and len(w):
        w[0] = np.nan
    elif weights == "neg":
        w = -w
    elif weights == "int":
        w = (w * 5).astype(np.int64)
    try:
        ptr, eid = fuzz_call("graph.topk_neighbors", topk_neighbors, csr.indptr, w, rows, k)
    except Refused:
        return
    for i, v in enumerate(rows):
        got = eid[ptr[i]:ptr[i + 1]]
        lo, hi = csr.indptr[v], csr.indptr[v + 1]
        assert ((got >= lo) & (got < hi)).all()
        assert len(got) == (hi - lo if k == -1 else min(hi - lo, k))
        if hi - lo > len(got):
            assert sorted(w[lo:hi], reverse=True)[:len(got)] == sorted(w[got], reverse=True)


@FEW
@given(csrs(), st.lists(IDS, max_size=6), st.sampled_from([1, 2, 4, 0, -1]),
       st.sampled_from(["random", "in_degree", "x"]), st.sampled_from([-1, -1, 1, 3, 12]), st.sampled_from([0, 2, 10, -1]))
def test_fuzz_negative_sample(csr, src, k, by, num_dst, retries):
    try:
        neg = fuzz_call("graph.negative_sample", negative_sample, csr, np.array(src, np.int64), k, by=by,
                        num_dst=None if num_dst == -1 else num_dst, max_retries=retries)
    except Refused:
        return
    top = csr.num_nodes if num_dst == -1 else num_dst
    assert neg.dst.shape == (len(src) * k,) and neg.capped == int((neg.dst == -1).sum())
    for u, v in zip(neg.src.tolist(), neg.dst.tolist()):
        assert v == -1 or (0 <= v < max(top, csr.num_nodes) and v not in _nbrs(csr, u))
        if by == "random" and v == -1:  # uniform draws give up only when no candidate is left
            assert set(range(top)) <= set(_nbrs(csr, u))


@FEW
@given(st.lists(st.integers(-3, 40), max_size=30), st.integers(-1, 12), st.booleans(), st.integers(-1, 3),
       st.sampled_from([np.int64, np.float64, np.uint8]))
def test_fuzz_node_batches(ids, size, shuffle, seed, dt):
    try:
        batches = list(fuzz_call("graph.node_batches", node_batches, np.array(ids).astype(dt) if ids else
                                 np.array([], dt), size, shuffle=shuffle, seed=seed))
    except Refused:
        return
    got = np.concatenate(batches).tolist() if batches else []
    assert sorted(got) == sorted(np.array(ids).astype(dt).tolist()) and all(len(b) <= size for b in batches)


FEATURE_KINDS = ["ok", "nan", "inf", "1d", "object", "str", "int", "bool", "short", "3d", "complex", "list"]
LABEL_KINDS = [None, "ok", "minus1", "big", "float", "short", "2d"]


@MORE
@given(st.sampled_from(FEATURE_KINDS + ["ok", "ok", "int"]), st.sampled_from(LABEL_KINDS), st.integers(0, 10**6), st.booleans())
def test_fuzz_store_features_and_labels(fkind, lkind, at, partitioned):
    n = 12
    csr = build_csr(np.arange(n), (np.arange(n) + 1) % n, n)
    rng = np.random.default_rng(at)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    if fkind in ("nan", "inf"):
        x[at % n, at % 3] = np.nan if fkind == "nan" else -np.inf
    x = {"1d": x[:, 0], "object": x.astype(object), "str": x.astype(str), "int": (x * 4).astype(np.int32),
         "bool": x > 0, "short": x[:-1], "3d": x[:, :, None], "complex": x.astype(np.complex64),
         "list": [[1.0] * (i % 3) for i in range(n)]}.get(fkind, x)
    y = rng.integers(0, 4, n)
    y = {None: None, "minus1": np.where(np.arange(n) == at % n, -1, y), "big": np.where(np.arange(n) == 3, 4, y),
         "float": y.astype(np.float64), "short": y[:5], "2d": y[:, None]}.get(lkind, y)
    if partitioned:
        make = lambda: PartitionedStore(csr, partition(csr, 2), x, labels=y, num_classes=4)  # noqa: E731
    else:
        make = lambda: LocalStore(csr, x, y, num_classes=4)  # noqa: E731
    try:
        store = fuzz_call("graph.LocalStore/PartitionedStore", make)
    except Refused as r:
        assert "is not accepted" in str(r)
        return
    assert fkind in ("ok", "int", "bool") and lkind in (None, "ok")
    got = store.features(np.arange(n))
    assert got.dtype.kind == "f" and np.isfinite(got).all() and np.array_equal(got, np.asarray(x, np.float32))


@FEW
@given(csrs(), st.sampled_from([1, 2, 3, 0, 5]), st.one_of(st.floats(0, 4), st.floats(), st.integers(-2, 5)),
       st.one_of(st.floats(0, 1), st.floats(-0.5, 1.5), st.just(float("nan"))))
def test_fuzz_importance_and_cache_plan(csr, k, threshold, max_fraction):
    csc = csr.reverse()
    try:
        d_in, d_out = fuzz_call("graph.khop_degrees", khop_degrees, csr, csc, k)
    except Refused:
        return
    assert (d_in >= 0).all() and (d_out >= 0).all()
    if k == 1:
        assert np.array_equal(d_in, csc.degree()) and np.array_equal(d_out, csr.degree())
    imp = importance(csr, csc, k)
    try:
        plan = fuzz_call("graph.plan_cache", plan_cache, csr, imp, threshold, max_fraction=max_fraction, k=k)
    except Refused:
        return
    v = plan.vertices
    assert np.array_equal(v, np.unique(v)) and (imp[v] >= threshold).all() and (csr.degree()[v] > 0).all()
    assert len(v) <= int(max_fraction * csr.num_nodes)
    if not plan.capped:  # every vertex that qualifies is planned
        assert len(v) == int(((imp >= threshold) & (csr.degree() > 0)).sum())
