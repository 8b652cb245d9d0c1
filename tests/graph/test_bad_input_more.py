"""More bad input to the graph API: absurd ids, unreadable files, wrong chunks, seeds, typed-graph misuse."""

import numpy as np
import pandas as pd
import pytest

from labkit.core.machine import memory_bytes
from labkit.graph.build import build_from_file, csv_edge_chunks, parquet_edge_chunks
from labkit.graph.csr import build_bytes, build_csr, build_csr_chunked, max_buildable_nodes
from labkit.graph.negative import negative_sample
from labkit.graph.partition import fennel_partition, ldg_partition, partition
from labkit.graph.query import Graph
from labkit.graph.sampling import AliasTable, NeighborSampler, sample_multihop, sample_neighbors, sample_weighted
from labkit.graph.traverse import edge_batches, node_batches

SRC, DST = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])


@pytest.fixture(scope="module")
def ring():
    return build_csr(SRC, DST)


# ---- ids that imply an absurd node count --------------------------------------------------------------

def test_an_id_too_large_for_memory_is_refused_by_name_not_by_a_memory_error():
    big = 2**44
    with pytest.raises(ValueError, match=rf"dst\[1\]={big} is not accepted; expected node ids a CSR can hold "
                                         rf"in memory: that id implies num_nodes={big + 1} needs .* of RAM, so at most "
                                         rf"{max_buildable_nodes()} nodes"):
        build_csr(np.array([0, 1]), np.array([1, big]))
    with pytest.raises(ValueError, match=r"src\[0\]=9223372036854775808 is not accepted; expected node ids a CSR"):
        build_csr(np.array([2**63], np.uint64), np.array([0], np.uint64))
    with pytest.raises(ValueError, match=rf"num_nodes={big} is not accepted; expected a node count whose CSR fits "
                                         r"in memory"):
        build_csr(SRC, DST, big)
    with pytest.raises(ValueError, match=rf"num_nodes={big} is not accepted"):
        build_csr_chunked(lambda: iter([(SRC, DST)]), big)


def test_the_memory_rule_only_refuses_what_cannot_fit():
    n = max_buildable_nodes()
    assert build_bytes(n) <= memory_bytes() < build_bytes(n + 1)
    # A large id that fits is built as before (and its arrays really are small enough).
    g = build_csr(np.array([0]), np.array([1 << 20]))
    assert g.num_nodes == (1 << 20) + 1 and g.num_edges == 1


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_file_whose_id_implies_an_absurd_node_count_names_the_file_and_id(tmp_path, suffix):
    df = pd.DataFrame({"src": [0, 1], "dst": [1, 99_999_999_999]})
    path = tmp_path / f"bigid.{suffix}"
    df.to_csv(path, index=False) if suffix == "csv" else df.to_parquet(path)
    with pytest.raises(ValueError, match=r"bigid\.\w+: node id 99999999999 is not accepted; .*implies "
                                         r"num_nodes=100000000000 needs .* of RAM"):
        build_from_file(path)


# ---- unreadable files -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, msg, chunks", [
    ("bin.csv", b"\xff\xfe\x00garbage\x00\n\x01\x02",
     r"path='.*bin\.csv' is not accepted; expected a UTF-8 CSV .*bin\.csv is not a UTF-8 CSV", csv_edge_chunks),
    ("fake.parquet", b"hello", r"path='.*fake\.parquet' is not accepted; expected a readable Parquet "
                               r"file \(pyarrow cannot read fake\.parquet: .*\)", parquet_edge_chunks),
])
def test_an_unreadable_edge_file_is_named(tmp_path, name, content, msg, chunks):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=msg):
        build_from_file(path)
    with pytest.raises(ValueError, match=msg):  # the reader itself, before a chunk is asked for
        chunks(path)


def test_a_csv_that_turns_binary_after_its_header_is_named_too(tmp_path):
    path = tmp_path / "late.csv"
    path.write_bytes(b"src,dst\n0,1\n" + b"1,\xff\xfe\n" * 10)
    with pytest.raises(ValueError, match=r"late\.csv is not a UTF-8 CSV"):
        list(csv_edge_chunks(path)())


# ---- chunks of the wrong shape ----------------------------------------------------------------------------

def test_weighted_chunks_without_weighted_say_so():
    chunks = lambda: iter([(SRC, DST, np.ones(4))])  # noqa: E731
    with pytest.raises(ValueError, match=r"chunks='a chunk of 3 arrays' is not accepted; expected \(src, dst\) "
                                         r"chunks; \(src, dst, weights\) chunks need weighted=True"):
        build_csr_chunked(chunks, 4)
    assert build_csr_chunked(chunks, 4, weighted=True).weights.tolist() == [1.0] * 4
    with pytest.raises(ValueError, match=r"chunks='a chunk of type int' is not accepted"):
        build_csr_chunked(lambda: iter([5]), 4)
    # A (2, m) array is still a (src, dst) pair.
    assert build_csr_chunked(lambda: iter([np.stack([SRC, DST])]), 4).num_edges == 4


# ---- seeds ---------------------------------------------------------------------------------------------

BAD_SEEDS = [(-1, r"-1"), (1.5, r"1\.5"), ("a", r"'a'")]


@pytest.mark.parametrize("seed,shown", BAD_SEEDS)
def test_every_public_graph_function_names_a_bad_seed(ring, seed, shown):
    msg = rf"seed={shown} is not accepted; expected an integer in \[0, 2\*\*63\)"
    calls = [
        lambda: node_batches(np.arange(4), 2, seed=seed),  # refused when called, not at the first batch
        lambda: edge_batches(ring, 2, seed=seed),
        lambda: ldg_partition(ring, 2, seed=seed),
        lambda: fennel_partition(ring, 2, seed=seed),
        lambda: partition(ring, 2, "hash", seed=seed),
        lambda: sample_neighbors(ring.indptr, ring.indices, [0], 2, seed=seed),
        lambda: sample_multihop(ring.indptr, ring.indices, [0], [2], seed=seed),
        lambda: NeighborSampler(ring.indptr, ring.indices).sample([0], [2], seed=seed),
        lambda: sample_weighted(ring.indptr, AliasTable.build(ring.indptr, np.ones(4)), [0], 2, seed=seed),
        lambda: negative_sample(ring, [0], 2, seed=seed),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=msg):
            call()


def test_epochs_and_streams_are_checked_like_seeds(ring):
    with pytest.raises(ValueError, match=r"epoch=-1 is not accepted"):
        node_batches(np.arange(4), 2, epoch=-1)
    with pytest.raises(ValueError, match=r"stream=-2 is not accepted"):
        sample_neighbors(ring.indptr, ring.indices, [0], 2, stream=-2)
    with pytest.raises(ValueError, match=r"stream=-2 is not accepted"):
        negative_sample(ring, [0], 2, stream=-2)


def test_good_seeds_still_work_including_numpy_ints_and_whole_floats(ring):
    a = np.concatenate(list(node_batches(np.arange(10), 3, seed=np.int64(5), epoch=2.0)))
    b = np.concatenate(list(node_batches(np.arange(10), 3, seed=5, epoch=2)))
    assert a.tolist() == b.tolist() and sorted(a.tolist()) == list(range(10))
    assert ldg_partition(ring, 2, seed=np.uint32(3)).tolist() == ldg_partition(ring, 2, seed=3).tolist()


def test_node_batches_refuses_float_ids_instead_of_truncating_them():
    with pytest.raises(ValueError, match=r"ids='array of shape \(2,\) and dtype float64' is not accepted; "
                                         r"expected a 1-d integer array of ids"):
        node_batches(np.array([0.5, 1.7]), 1, shuffle=False)
    assert list(node_batches([], 2)) == []


# ---- the typed-graph query API -------------------------------------------------------------------------

@pytest.fixture
def typed():
    g = Graph().add_nodes("user", 10).add_nodes("item", 5)
    g.add_edges("u2i", "user", "item", np.arange(10), np.arange(10) % 5)
    return g


def test_add_edges_refuses_non_integer_ids_by_name(typed):
    with pytest.raises(ValueError, match=r"src='array of shape \(1,\) and dtype <U1' is not accepted; expected a 1-d "
                                         r"integer array of 'user' node ids"):
        typed.add_edges("e", "user", "item", ["0"], ["1"])
    with pytest.raises(ValueError, match=r"dst='array of shape \(1,\) and dtype float64' .*'item' node ids"):
        typed.add_edges("e", "user", "item", [0], [1.0])
    with pytest.raises(ValueError, match=r"src='array of shape \(1, 2\) and dtype int64'"):
        typed.add_edges("e", "user", "item", [[0, 1]], [[1, 2]])
    assert "e" not in typed.edge_types


def test_in_degree_names_an_unknown_type(typed):
    with pytest.raises(ValueError, match=r"node_type='x' is not accepted; expected one of user, item"):
        typed.in_degree("x")
    assert typed.in_degree("item").sum() == 10


def test_add_nodes_refuses_to_redeclare_a_type(typed):
    with pytest.raises(ValueError, match=r"node_type='user' is not accepted; expected a node type not declared yet "
                                         r"\('user' already has 10 nodes; build a new Graph to change it\)"):
        typed.add_nodes("user", 3)
    assert typed.node_types["user"] == 10
    with pytest.raises(ValueError, match=r"features='int' is not accepted"):
        Graph().add_nodes("u", 5, 3)


def test_query_shuffle_and_epoch_name_bad_values(typed):
    with pytest.raises(ValueError, match=r"seed=-1 is not accepted"):
        typed.V("user").shuffle(-1)
    with pytest.raises(ValueError, match=r"seed=1\.7 is not accepted"):
        typed.V("user").shuffle(1.7)
    with pytest.raises(ValueError, match=r"epoch=-1 is not accepted"):
        typed.V("user").shuffle().values(epoch=-1)
    with pytest.raises(ValueError, match=r"epoch='x' is not accepted"):
        typed.E("u2i").values(epoch="x")
    with pytest.raises(ValueError, match=r"seed=-1 is not accepted"):
        typed.V("user").outV("u2i").run(np.array([1]), seed=-1)
    res = typed.V("user").shuffle(3).batch(4).outV("u2i").sample(2).values(epoch=1).next()
    assert res[1].shape == (4, 2)


def test_batch_streams_never_repeat_across_epochs():
    from labkit.graph.traverse import EPOCH_STREAMS, batch_stream
    # An epoch of more than 100003 batches used to draw epoch 1's first batch again (stream 100003).
    assert batch_stream(0, 100003) != batch_stream(1, 0)
    pairs = [(e, b) for e in (0, 1, 2) for b in (0, 1, 100003, EPOCH_STREAMS - 1)]
    assert len({batch_stream(e, b) for e, b in pairs}) == len(pairs)
    with pytest.raises(ValueError, match=r"batch=4294967296 is not accepted"):
        batch_stream(0, EPOCH_STREAMS)


# ---- edge weights checked where the graph is built ----------------------------------------------------

@pytest.mark.parametrize("weights, pos, shown", [
    (["a", "b", "c"], 0, r"'a'"),
    ([1.0, np.nan, 2.0], 1, r"nan"),
    ([1.0, 2.0, -3.0], 2, r"-3\.0"),
    ([1.0, np.inf, 2.0], 1, r"inf"),
    (np.array([1, -2, 3]), 1, r"-2"),
    (np.array([1.0, None, 2.0], dtype=object), 1, r"None"),
    ([True, False, True], 0, r"True"),
])
def test_edge_weights_that_are_not_finite_numbers_ge_0_are_refused_at_build(weights, pos, shown):
    msg = rf"^weights\[{pos}\]={shown} is not accepted; expected finite numbers >= 0$"
    s, d = np.array([0, 0, 1]), np.array([0, 1, 2])
    with pytest.raises(ValueError, match=msg):
        Graph().add_nodes("u", 3).add_nodes("i", 3).add_edges("ws", "u", "i", s, d, weights=weights)
    with pytest.raises(ValueError, match=msg):
        build_csr(s, d, 3, weights=weights)
    with pytest.raises(ValueError, match=msg):
        AliasTable.build(np.array([0, 3]), weights)
    # The chunked builder counts positions over the whole stream: the same weights as a second chunk.
    chunked = rf"^weights\[{pos + 3}\]={shown} is not accepted; expected finite numbers >= 0$"
    with pytest.raises(ValueError, match=chunked):
        build_csr_chunked(lambda: iter([(s, d, np.ones(3)), (s, d, weights)]), 3, weighted=True)


def test_good_weights_still_build_and_keep_their_type():
    s, d = np.array([0, 0, 1]), np.array([0, 1, 2])
    w32 = np.array([0.0, 1.5, 2.0], np.float32)
    assert build_csr(s, d, 3, weights=w32).weights.dtype == np.float32
    assert build_csr(s, d, 3, weights=[1, 0, 2]).weights.tolist() == [1, 0, 2]
    assert build_csr(s, d, 3, weights=np.array([1.0, 2, 3], dtype=object)).weights.tolist() == [1.0, 2.0, 3.0]
    g = Graph().add_nodes("u", 3).add_nodes("i", 3).add_edges("ws", "u", "i", s, d, weights=w32)
    assert g.V("u").batch(3).outV("ws").sample(2).by("edge_weight").values().next()[1].shape == (3, 2)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_negative_weight_in_a_file_names_the_file_and_row(tmp_path, suffix):
    df = pd.DataFrame({"src": [0, 1, 2], "dst": [1, 2, 0], "w": [0.5, 1.0, -2.0]})
    path = tmp_path / f"neg.{suffix}"
    df.to_csv(path, index=False) if suffix == "csv" else df.to_parquet(path)
    with pytest.raises(ValueError, match=rf"^neg\.{suffix} row 3: w=.*-2.* is not accepted; "
                                         r"expected a finite number >= 0$"):
        build_from_file(path, weight="w")


# ---- indptr / indices handed to the sampling functions ---------------------------------------------------

def test_sample_neighbors_refuses_an_indptr_that_does_not_fit_its_indices():
    idx = np.array([1, 2, 0, 3])
    with pytest.raises(ValueError, match=r"^indptr\[1\]=5 is not accepted; expected row offsets in \[0, 4\] "
                                         r"\(len\(indices\)=4; rows\[0\]=0 reads it\)$"):
        sample_neighbors(np.array([0, 5, 3, 4]), idx, [0, 1], 2)
    with pytest.raises(ValueError, match=r"^indptr\[2\]=1 is not accepted; expected non-decreasing row offsets "
                                         r"\(indptr\[1\]=3 before it; rows\[0\]=1 reads them\)$"):
        sample_neighbors(np.array([0, 3, 1, 4]), idx, [1], 2)
    with pytest.raises(ValueError, match=r"^indptr='array of shape \(3,\) and dtype float64' is not accepted; "
                                         r"expected a non-empty 1-d integer array of row offsets$"):
        sample_neighbors(np.array([0.0, 2.0, 4.0]), idx, [0, 1], 2)
    with pytest.raises(ValueError, match=r"^indptr\[0\]=1 is not accepted; expected 0 \(row offsets start at 0\)$"):
        sample_neighbors(np.array([1, 2, 4]), idx, [0, 1], 2)
    with pytest.raises(ValueError, match=r"indices='an array of 3 entries' is not accepted; expected at least "
                                         r"indptr\[-1\]=4 entries"):
        sample_neighbors(np.array([0, 2, 4]), idx[:3], [0], 2)
    # Lengths alone (indices=None, as the disk sampler passes) are checked against indptr[-1].
    with pytest.raises(ValueError, match=r"^indptr\[2\]=9 is not accepted; expected row offsets in \[0, 4\] "
                                         r"\(indptr\[-1\]=4; rows\[0\]=1 reads it\)$"):
        sample_neighbors(np.array([0, 2, 9, 4]), None, [1], 2)
    ptr, eid = sample_neighbors(np.array([0, 2, 4]), idx, [0, 1], -1)  # a good topology still samples
    assert ptr.tolist() == [0, 2, 4] and eid.tolist() == [0, 1, 2, 3]


def test_weighted_and_topk_sampling_check_the_rows_they_read():
    from labkit.graph.sampling import topk_neighbors
    table = AliasTable.build(np.array([0, 2, 4]), np.ones(4))
    with pytest.raises(ValueError, match=r"^indptr\[2\]=1 is not accepted; expected non-decreasing row offsets"):
        sample_weighted(np.array([0, 3, 1, 4]), AliasTable.build(np.array([0, 4]), np.ones(4)), [1], 2)
    with pytest.raises(ValueError, match=r"^indptr\[2\]=1 is not accepted; expected non-decreasing row offsets "
                                         r"\(indptr\[1\]=3 before it\)$"):
        AliasTable.build(np.array([0, 3, 1, 4]), np.ones(4))
    with pytest.raises(ValueError, match=r"^indptr\[2\]=1 is not accepted; expected non-decreasing row offsets "
                                         r"\(indptr\[1\]=3 before it; rows\[1\]=1 reads them\)$"):
        topk_neighbors(np.array([0, 3, 1, 4]), np.ones(4), [0, 1], 1)
    with pytest.raises(ValueError, match=r"^weights='array of dtype <U1' is not accepted; expected an array of "
                                         r"numbers"):
        topk_neighbors(np.array([0, 2, 4]), ["a", "b", "c", "d"], [0], 1)
    assert sample_weighted(np.array([0, 2, 4]), table, [0, 1], 3)[0].tolist() == [0, 3, 6]


def test_multihop_refuses_negative_and_non_integer_neighbour_ids():
    indptr = np.array([0, 1, 2, 4])
    with pytest.raises(ValueError, match=r"^indices\[3\]=-5 is not accepted; expected neighbour ids >= 0$"):
        sample_multihop(indptr, np.array([1, 2, 2, -5]), [2], [2, 2])
    with pytest.raises(ValueError, match=r"^indices\[3\]=-5 is not accepted"):
        NeighborSampler(indptr, np.array([1, 2, 2, -5]))
    with pytest.raises(ValueError, match=r"^indices='array of dtype float64' is not accepted; expected an integer "
                                         r"array of neighbour ids$"):
        sample_multihop(indptr, np.array([1.0, 2.0, 2.0, 0.0]), [2], [2, 2])
    with pytest.raises(ValueError, match=r"^indptr\[2\]=1 is not accepted; expected non-decreasing row offsets "
                                         r"\(indptr\[1\]=3 before it\)$"):
        sample_multihop(np.array([0, 3, 1, 4]), np.array([1, 2, 0, 1]), [0], [2])
    s = sample_multihop(indptr, np.array([1, 2, 2, 0]), [2], [2, 2])
    assert set(s.nodes.tolist()) == {0, 1, 2}


def test_no_rows_is_an_empty_list_too(ring):
    from labkit.graph.sampling import topk_neighbors
    for rows in ([], (), np.array([], np.int64)):
        ptr, eid = sample_neighbors(ring.indptr, ring.indices, rows, 2)
        assert ptr.tolist() == [0] and eid.dtype == np.int64 and len(eid) == 0
        assert sample_weighted(ring.indptr, AliasTable.build(ring.indptr, np.ones(4)), rows, 2)[0].tolist() == [0]
        assert topk_neighbors(ring.indptr, np.ones(4), rows, 2)[0].tolist() == [0]
        assert len(NeighborSampler(ring.indptr, ring.indices).sample(rows, [2]).nodes) == 0
    res = Graph().add_nodes("u", 4).add_edges("e", "u", "u", SRC, DST).V("u").outV("e").sample(2).run([])
    assert res[0].shape == (0,) and res[1].shape == (0, 2)
    with pytest.raises(ValueError, match=r"rows='array of shape \(2,\) and dtype float64' is not accepted"):
        sample_neighbors(ring.indptr, ring.indices, [0.0, 1.0], 2)


# ---- CSV headers as people write them ---------------------------------------------------------------------

@pytest.mark.parametrize("name, text", [
    ("spaced.csv", "src, dst\n0, 1\n1, 2\n"),
    ("padded.csv", " src , dst \n0,1\n1,2\n"),
    ("excel.csv", "\ufeffsrc,dst\r\n0,1\r\n1,2\r\n"),  # Excel's UTF-8 CSV: a BOM, CRLF lines
    ("quoted.csv", '"src","dst"\n0,1\n1,2\n'),
])
def test_csv_headers_with_spaces_a_bom_or_quotes_are_read(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    csr = build_from_file(path)
    assert csr.indptr.tolist() == [0, 1, 2, 2] and csr.indices.tolist() == [1, 2]


def test_csv_weight_column_with_a_spaced_header_is_read(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("src, dst, w\n0, 1, 0.5\n1, 2, 2\n")
    assert build_from_file(path, weight="w").weights.tolist() == [0.5, 2.0]


def test_a_csv_header_naming_a_read_column_twice_is_refused_by_file_and_column(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("src,src,dst\n0,5,1\n1,6,2\n")
    with pytest.raises(ValueError, match=r"^path='.*dup\.csv' is not accepted; expected a CSV whose header names "
                                         r"each column once \(dup\.csv's header \['src', 'src', 'dst'\] names 'src' "
                                         r"2 times\)$"):
        build_from_file(path)
    with pytest.raises(ValueError, match=r"dup\.csv's header .* names 'src' 2 times"):
        csv_edge_chunks(path)
    # A repeated column that is not read is no ambiguity.
    other = tmp_path / "other.csv"
    other.write_text("note,note,src,dst\nx,y,0,1\nx,y,1,2\n")
    assert build_from_file(other).indices.tolist() == [1, 2]


# ---- cache plans and partitions ---------------------------------------------------------------------------

def test_plan_cache_names_an_importance_array_of_the_wrong_length():
    from labkit.graph.importance import importance, plan_cache
    from labkit.graph.rmat import RMatParams, rmat_edges
    p = RMatParams(scale=12)
    csr = build_csr(*rmat_edges(p), p.num_nodes, dedup=True)
    imp = importance(csr, csr.reverse())
    with pytest.raises(ValueError, match=r"^imp='an array of length 5' is not accepted; expected length 4096, one "
                                         r"importance per vertex of csr"):
        plan_cache(csr, imp[:5], 1.0)
    with pytest.raises(ValueError, match=r"^imp='an array of shape \(2, 2048\)' is not accepted; expected length 4096"):
        plan_cache(csr, imp.reshape(2, -1), 1.0)
    with pytest.raises(ValueError, match=r"^imp='an array of dtype <U1' is not accepted"):
        plan_cache(csr, np.full(4096, "a"), 1.0)
    assert len(plan_cache(csr, imp, 1.0).vertices) > 0


def test_partition_refuses_more_parts_than_vertices():
    from labkit.graph.partition import hash_partition
    from labkit.graph.rmat import RMatParams, rmat_edges
    p = RMatParams(scale=12)
    csr = build_csr(*rmat_edges(p), p.num_nodes, dedup=True)
    msg = r"^num_parts=1000000 is not accepted; expected an integer in \[1, 4096\]: at most one part per vertex"
    for call in (lambda: partition(csr, 10**6), lambda: partition(csr, 10**6, "ldg"),
                 lambda: ldg_partition(csr, 10**6), lambda: fennel_partition(csr, 10**6),
                 lambda: hash_partition(4096, 10**6)):
        with pytest.raises(ValueError, match=msg):
            call()
    assert partition(csr, 4096).num_parts == 4096
    ring4 = build_csr(SRC, DST)
    with pytest.raises(ValueError, match=r"^num_parts=5 is not accepted; expected an integer in \[1, 4\]"):
        partition(ring4, 5, "fennel")
