"""Edge files with weights, malformed CSV lines, and the GSL E() edge traversal."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labkit.graph.build import _csv_field_checks, build_from_file, csv_edge_chunks, parquet_edge_chunks
from labkit.graph.csr import build_csr, build_csr_chunked
from labkit.graph.query import Graph

N = 20


@pytest.fixture(scope="module")
def weighted():
    """Edges with many duplicates and self loops, and weights CSV text round-trips exactly."""
    rng = np.random.default_rng(5)
    m = 400
    s, d = rng.integers(0, N, m), rng.integers(0, N, m)
    s[::40] = d[::40]
    return s, d, rng.integers(1, 10**6, m) / 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory, weighted):
    s, d, w = weighted
    root = tmp_path_factory.mktemp("edges")
    df = pd.DataFrame({"src": s, "dst": d, "w": w})
    df.to_csv(root / "e.csv", index=False)
    df.to_parquet(root / "e.parquet")
    return root


def same(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("indptr", "indices", "eid", "weights"))


OPTIONS = [{}, {"dedup": True}, {"drop_self_loops": True}, {"dedup": True, "drop_self_loops": True}, {"sort": True}]


@pytest.mark.parametrize("kw", OPTIONS)
def test_weighted_files_build_what_build_csr_builds(files, weighted, kw):
    s, d, w = weighted
    ref = build_csr(s, d, N, weights=w, **kw)
    for rows in (29, 101, 10**6):
        csv = build_csr_chunked(csv_edge_chunks(files / "e.csv", chunk_rows=rows, weight="w"), N, weighted=True, **kw)
        par = build_csr_chunked(parquet_edge_chunks(files / "e.parquet", batch_rows=rows, weight="w"), N,
                                weighted=True, **kw)
        assert same(csv, ref) and same(par, ref), rows
    for name in ("e.csv", "e.parquet"):
        assert same(build_from_file(files / name, N, weight="w", **kw), ref)
        # reverse: the CSC, every weight following its edge
        assert same(build_from_file(files / name, weight="w", reverse=True, **kw), build_csr(d, s, N, weights=w, **kw))
    assert build_from_file(files / "e.csv", N, **kw).weights is None  # no weight column asked: unweighted


def test_parquet_float32_weights_keep_their_type(tmp_path, weighted):
    s, d, w = weighted
    w32 = w.astype(np.float32)
    pd.DataFrame({"src": s, "dst": d, "w": w32}).to_parquet(tmp_path / "e.parquet")
    got = build_from_file(tmp_path / "e.parquet", N, weight="w", dedup=True)
    assert got.weights.dtype == np.float32 and same(got, build_csr(s, d, N, weights=w32, dedup=True))


def test_weights_that_are_not_finite_name_the_row(tmp_path):
    for text, bad in (("nan", "'nan'"), ("inf", "'inf'"), ("", "''"), ("x", "'x'")):
        f = tmp_path / "w.csv"
        f.write_text(f"src,dst,w\n0,1,0.5\n1,2,2\n2,3,{text}\n")
        with pytest.raises(ValueError, match=rf"^w.csv row 3: w={bad} is not accepted; expected a finite number$"):
            build_from_file(f, weight="w")
    for w, row, bad in (([0.5, np.nan, 1.0], 2, "nan"), ([0.5, 1.0, -np.inf], 3, "-inf")):
        # written by pyarrow, as pandas would store NaN as null
        pq.write_table(pa.table({"src": [0, 1, 2], "dst": [1, 2, 3], "w": w}), tmp_path / "w.parquet")
        msg = rf"^w.parquet row {row}: w={bad} is not accepted; expected a finite number$"
        with pytest.raises(ValueError, match=msg):
            build_from_file(tmp_path / "w.parquet", weight="w")
    pd.DataFrame({"src": [0, 1, 2], "dst": [1, 2, 3], "w": [0.5, None, 1.0]}).to_parquet(tmp_path / "n.parquet")
    with pytest.raises(ValueError, match=r"^n.parquet row 2: w is null; expected a number"):
        list(parquet_edge_chunks(tmp_path / "n.parquet", weight="w")())
    pd.DataFrame({"src": [0], "dst": [1], "w": ["heavy"]}).to_parquet(tmp_path / "s.parquet")
    with pytest.raises(ValueError, match=r"w=dtype\('O'\) is not accepted; expected a numeric column"):
        list(parquet_edge_chunks(tmp_path / "s.parquet", weight="w")())
    with pytest.raises(ValueError, match=r"columns=\['weight'\] is not accepted"):
        csv_edge_chunks(tmp_path / "w.csv", weight="weight")
    with pytest.raises(ValueError, match=r"weight='src' is not accepted; expected a column other than src and dst"):
        parquet_edge_chunks(tmp_path / "s.parquet", weight="src")


def test_chunked_weighted_build_checks_its_chunks():
    s, d, w = np.array([0, 1]), np.array([1, 0]), np.array([1.0, 2.0])
    with pytest.raises(ValueError, match=r"weights='shape \(1,\)' is not accepted; expected shape \(2,\)"):
        build_csr_chunked(lambda: iter([(s, d, w[:1])]), 2, weighted=True)
    with pytest.raises(ValueError, match=r"chunks='a chunk of 2 arrays' is not accepted"):
        build_csr_chunked(lambda: iter([(s, d)]), 2, weighted=True)
    empty = build_csr_chunked(lambda: iter([]), 3, weighted=True)
    assert empty.num_edges == 0 and len(empty.weights) == 0


def write(tmp_path, text, name="edges.csv"):
    f = tmp_path / name
    f.write_bytes(text.encode())
    return f


@pytest.mark.parametrize("text, line, row, fields", [
    ("src,dst\n0,1\n2,3,4\n5,6\n", 3, 2, 3),          # the audit's case: 2,3,4 is not the edge 2->3
    ("src,dst\n0,1,9\n2,3\n", 2, 1, 3),               # extra field on the first data row
    ("src,dst\n0,1\n2\n5,6\n", 3, 2, 1),              # too few fields
    ("src,dst\n0,1\n2,3,\n", 3, 2, 3),                # trailing separator
    ("src,dst\n0,1\n\n \t\n5,6\n7\n", 6, 3, 1),       # blank lines count as lines, not rows
    ("src,dst\r\n0,1\r\n\r\n2,3\r\n4,5,6\r\n", 5, 3, 3),  # CRLF
    ("src,dst\r0,1\r2,3\r4,5,6\r", 4, 3, 3),          # old Mac line ends
    ('src,dst\n0,"1\n"\n2,3,4\n', 4, 2, 3),           # a quoted newline is not a new row
    ("src,dst\n0,1\n2,3,4", 3, 2, 3),                 # no final newline
])
def test_csv_lines_with_the_wrong_field_count_name_the_line(tmp_path, text, line, row, fields):
    f = write(tmp_path, text)
    msg = rf"^edges.csv line {line} \(row {row}\): {fields} fields? is not accepted; expected 2 fields"
    for rows in (1, 2, 100):
        with pytest.raises(ValueError, match=msg):
            list(csv_edge_chunks(f, chunk_rows=rows)())
    with pytest.raises(ValueError, match=msg):
        build_from_file(f, 10)


def test_csv_errors_come_in_row_order(tmp_path):
    f = write(tmp_path, "src,dst,w\n0,1,1\n2,x,1\n3,4,5,6\n")
    with pytest.raises(ValueError, match=r"^edges.csv row 2: dst='x'"):
        list(csv_edge_chunks(f, weight="w")())
    f = write(tmp_path, "src,dst,w\n0,1,1\n2,3\n3,x,1\n")
    with pytest.raises(ValueError, match=r"^edges.csv line 3 \(row 2\): 2 fields is not accepted; expected 3"):
        list(csv_edge_chunks(f, weight="w")())
    # quoted commas are inside a field, so the count is right and the value is what is wrong
    f = write(tmp_path, 'src,dst\n0,1\n"2,3",4\n')
    with pytest.raises(ValueError, match=r"^edges.csv row 2: src='2,3'"):
        list(csv_edge_chunks(f)())


def test_csv_field_check_across_blocks(tmp_path):
    lines = ["src,dst"] + [f"{i},{i + 1}" for i in range(300)]
    lines.insert(150, "")
    lines[250] = "7,8,9"
    f = write(tmp_path, "\r\n".join(lines) + "\r\n")
    for block in (1, 3, 64, 1 << 20):
        *_, last = _csv_field_checks(f, block)
        assert last == (249, (249, 251, 3, 2)), block
    lines[250] = "7,8"
    f = write(tmp_path, "\n".join(lines))
    assert [x for x in _csv_field_checks(f, 7)][-1] == (300, None)
    got = np.concatenate([c[0] for c in csv_edge_chunks(f, chunk_rows=17)()])
    assert len(got) == 300 and got[-1] == 299


def test_parquet_errors_name_the_row(tmp_path):
    pd.DataFrame({"src": [0, 1, -2, 3], "dst": [1, 2, 3, 4]}).to_parquet(tmp_path / "e.parquet")
    msg = r"^e.parquet row 3: src=-2 is not accepted; expected an integer id >= 0"
    for rows in (1, 2, 10):
        with pytest.raises(ValueError, match=msg):
            list(parquet_edge_chunks(tmp_path / "e.parquet", batch_rows=rows)())
    with pytest.raises(ValueError, match=msg):
        build_from_file(tmp_path / "e.parquet", 10)
    pd.DataFrame({"src": [0, 1, 2], "dst": [1, 12, 3]}).to_parquet(tmp_path / "big.parquet")
    with pytest.raises(ValueError, match=r"^big.parquet row 2: dst=12 is not accepted; expected an integer id >= 0 "
                                         r"and < 10$"):
        build_from_file(tmp_path / "big.parquet", 10)
    assert build_from_file(tmp_path / "big.parquet").num_nodes == 13


@pytest.fixture(scope="module")
def hetero():
    rng = np.random.default_rng(0)
    g = Graph().add_nodes("user", 300).add_nodes("item", 200)
    s, d, w = rng.integers(0, 300, 1000), rng.integers(0, 200, 1000), rng.random(1000).astype(np.float32)
    g.add_edges("u2i", "user", "item", s, d, weights=w)
    g.add_edges("i2i", "item", "item", rng.integers(0, 200, 700), rng.integers(0, 200, 700))
    return g, s, d, w


def epoch(g, *, batch=64, seed=None, n=0, edge_type="u2i"):
    q = g.E(edge_type).batch(batch)
    return list((q.shuffle(seed) if seed is not None else q).values(n))


def test_edge_traversal_covers_every_edge_once_per_epoch(hetero):
    g, s, d, w = hetero
    for seed in (None, 0, 3):
        got = epoch(g, seed=seed)
        assert [len(r.edge_ids) for r in got] == [64] * 15 + [1000 - 15 * 64]  # the last batch is partial, as V()'s
        eids = np.concatenate([r.edge_ids for r in got])
        assert np.array_equal(np.sort(eids), np.arange(1000))
        for r in got:
            assert r.types == ["user", "item"] and r[0].shape == r[1].shape == (len(r.edge_ids),)
            assert np.array_equal(r[0], s[r.edge_ids]) and np.array_equal(r[1], d[r.edge_ids])
            assert np.array_equal(r.weights, w[r.edge_ids])
    assert np.array_equal(epoch(g, batch=1000)[0].edge_ids, g.edge_type("u2i").csr.eid)  # unshuffled: CSR order
    i2i = epoch(g, edge_type="i2i", batch=700)
    assert len(i2i) == 1 and i2i[0].weights is None and np.array_equal(np.sort(i2i[0].edge_ids), np.arange(700))


def test_edge_traversal_is_deterministic_per_seed_and_epoch(hetero):
    g = hetero[0]
    ids = lambda **kw: np.concatenate([r.edge_ids for r in epoch(g, **kw)])  # noqa: E731
    assert np.array_equal(ids(seed=1), ids(seed=1))
    assert not np.array_equal(ids(seed=1), ids(seed=2))
    assert not np.array_equal(ids(seed=1, n=0), ids(seed=1, n=1))
    assert np.array_equal(ids(), ids(n=1))  # unshuffled: the same CSR order every epoch
    a, b = epoch(g, seed=4)[0], epoch(g, seed=4)[0]
    assert all(np.array_equal(x, y) for x, y in zip(a.ids + [a.weights], b.ids + [b.weights]))


def test_edge_query_walks_on_from_the_destinations(hetero):
    g, s, d, w = hetero
    i2i, u2i = g.edge_type("i2i").csr, g.edge_type("u2i").csr
    res = g.E("u2i").batch(32).shuffle(2).outV("i2i").sample(3).by("random").inV("u2i").sample(2).values().next()
    assert res.types == ["user", "item", "item", "user"]
    assert res[2].shape == (32, 3) and res[3].shape == (96, 2)
    for item, row in zip(res[1], res[2]):
        assert set(row[row >= 0].tolist()) <= set(i2i.neighbors(item).tolist())
        assert (row >= 0).any() == (i2i.degree()[item] > 0)
    # run() on an E() query takes edge ids
    again = g.E("u2i").outV("i2i").sample(3).run(res.edge_ids, seed=2)
    assert np.array_equal(again[0], res[0]) and np.array_equal(again[1], res[1])
    assert np.array_equal(again.weights, w[res.edge_ids]) and again.edge_ids is not res.edge_ids
    assert np.array_equal(u2i.indices[g.edge_type("u2i").positions(res.edge_ids)], res[1])
    with pytest.raises(ValueError, match=r"seeds\[1\]=1000 is not accepted; expected edge ids in \[0, 1000\)"):
        g.E("u2i").run(np.array([0, 1000]))
    with pytest.raises(ValueError, match=r"seeds=.*shape \(1, 1\).*1-d array of 'u2i' edge ids"):
        g.E("u2i").run(np.array([[0]]))


def test_edge_query_errors_match_the_vertex_chain(hetero):
    g = hetero[0]
    with pytest.raises(ValueError, match=r"^edge_type='u2x' is not accepted; expected one of u2i, i2i$"):
        g.E("u2x")
    with pytest.raises(ValueError, match=r"edge_type='u2i'.*starts at 'item'"):
        g.E("u2i").outV("u2i")  # destinations are items
    with pytest.raises(ValueError, match=r"sample=3 is not accepted; expected a call after outV"):
        g.E("u2i").sample(3)
    with pytest.raises(ValueError, match=r"batch=0 is not accepted"):
        g.E("u2i").batch(0)
