"""Typed node and edge attributes, stored apart from topology: read from CSV / Parquet, looked up by id."""

import numpy as np
import pandas as pd
import pytest

from labkit.graph.build import build_from_file, read_edge_attributes
from labkit.graph.query import Graph

KINDS = {"kind": "str", "ts": "int64", "score": "float32"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(0)
    m = 300
    df = pd.DataFrame({"src": rng.integers(0, 40, m), "dst": rng.integers(0, 30, m),
                       "kind": rng.choice(["buy", "click", "view"], m), "ts": rng.integers(0, 2**62, m),
                       "score": rng.integers(0, 1000, m) / 8})
    root = tmp_path_factory.mktemp("attrs")
    df.to_csv(root / "e.csv", index=False)
    df.to_parquet(root / "e.parquet")
    return root, df


@pytest.mark.parametrize("name", ["e.csv", "e.parquet"])
def test_typed_edge_attributes_are_read_in_edge_id_order(files, name):
    root, df = files
    a = read_edge_attributes(root / name, KINDS)
    assert a["kind"].dtype.kind == "U" and a["ts"].dtype == np.int64 and a["score"].dtype == np.float32
    assert a["kind"].tolist() == df["kind"].tolist()
    assert np.array_equal(a["ts"], df["ts"].to_numpy())  # exact past 2**53: not via float64
    assert np.array_equal(a["score"], df["score"].to_numpy(np.float32))
    # The topology built from the same file numbers its edges as the attribute rows: eid looks them up.
    csr = build_from_file(root / name, 40, return_eid=True)
    v = int(np.argmax(csr.degree()))
    lo, hi = csr.indptr[v], csr.indptr[v + 1]
    rows = df.iloc[csr.eid[lo:hi]]
    assert (rows["src"] == v).all() and np.array_equal(rows["dst"].to_numpy(), csr.indices[lo:hi])


def test_graph_keeps_typed_attributes_apart_and_e_queries_return_them(files):
    root, df = files
    attrs = read_edge_attributes(root / "e.parquet", KINDS)
    ages = np.arange(40, dtype=np.int16) + 18
    g = Graph().add_nodes("user", 40, attrs={"age": ages, "city": np.array(["x", "y"] * 20)}) \
        .add_nodes("item", 30)
    g.add_edges("u2i", "user", "item", df["src"].to_numpy(), df["dst"].to_numpy(), attrs=attrs)
    got = g.node_attributes("user", np.array([3, 0]))
    assert got["age"].dtype == np.int16 and got["age"].tolist() == [21, 18] and got["city"].tolist() == ["y", "x"]
    assert g.node_attributes("item", np.array([1])) == {}
    assert g.edge_attributes("u2i", np.array([5]), ["kind"])["kind"].tolist() == [df["kind"][5]]
    seen = 0
    for res in g.E("u2i").batch(64).shuffle(1).values():
        e = res.edge_ids
        assert res.edge_attrs["kind"].tolist() == df["kind"].to_numpy()[e].tolist()
        assert np.array_equal(res.edge_attrs["ts"], df["ts"].to_numpy()[e])
        assert np.array_equal(res[0], df["src"].to_numpy()[e])  # the attributes belong to these edges
        seen += len(e)
    assert seen == len(df)


def test_bad_attributes_are_named(files, tmp_path):
    root, df = files
    g = Graph().add_nodes("user", 3).add_nodes("item", 2)
    with pytest.raises(ValueError, match=r"attrs\['age'\]=.*shape \(2,\).*3 rows \(one per 'user' node\)"):
        Graph().add_nodes("user", 3, attrs={"age": [1, 2]})
    with pytest.raises(ValueError, match=r"attrs\['w'\]=.*shape \(1,\).*2 rows \(one per 'u2i' edge\)"):
        g.add_edges("u2i", "user", "item", [0, 1], [1, 0], attrs={"w": [1.0]})
    g.add_edges("u2i", "user", "item", [0, 1], [1, 0], attrs={"w": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"names=\['x'\] is not accepted; expected attributes of 'u2i' edges: w"):
        g.edge_attributes("u2i", [0], ["x"])
    with pytest.raises(ValueError, match=r"edge_ids\[0\]=2 is not accepted; expected 'u2i' edge ids in \[0, 2\)"):
        g.edge_attributes("u2i", [2])
    with pytest.raises(ValueError, match=r"ids\[1\]=-1 is not accepted; expected 'user' node ids in \[0, 3\)"):
        g.node_attributes("user", [0, -1])
    (tmp_path / "bad.csv").write_text("src,dst,ts\n0,1,5\n1,2,2.5\n")
    with pytest.raises(ValueError, match=r"bad.csv row 2: ts='2.5' is not accepted; expected a value of type int32"):
        read_edge_attributes(tmp_path / "bad.csv", {"ts": "int32"})
    (tmp_path / "big.csv").write_text("src,dst,ts\n0,1,5\n1,2,3000000000\n")
    with pytest.raises(ValueError, match=r"big.csv row 2: ts='3000000000' is not accepted; expected a value of type "
                                         r"int32"):
        read_edge_attributes(tmp_path / "big.csv", {"ts": "int32"})
    assert read_edge_attributes(tmp_path / "big.csv", {"ts": "int64"})["ts"].tolist() == [5, 3000000000]
    with pytest.raises(ValueError, match=r"columns\['ts'\]='int8' is not accepted"):
        read_edge_attributes(root / "e.csv", {"ts": "int8"})
    with pytest.raises(ValueError, match=r"kind=.*dtype object.*numeric column for type int32"):
        read_edge_attributes(root / "e.parquet", {"kind": "int32"})
    with pytest.raises(ValueError, match=r"columns=\['nope'\]"):
        read_edge_attributes(root / "e.parquet", {"nope": "str"})
