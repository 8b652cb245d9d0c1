"""Field specs, jagged batches, the Zipf generator, the Criteo readers and the dataset."""

import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from labkit.recsys.data import (BadBatch, FieldSpec, JaggedBatch, MalformedRow, ReadStats, SkippedRowsWarning,
                                SyntheticCTR, ZipfSampler, check_ids, criteo_field_specs, load_field_specs, make_fields, read_criteo_parquet,
                                read_criteo_tsv, save_field_specs, write_criteo_tsv)


def test_field_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="C1.cardinality=0"):
        FieldSpec("C1", 0)
    with pytest.raises(ValueError, match="C1.pooling='max'"):
        FieldSpec("C1", 10, pooling="max")
    with pytest.raises(ValueError, match="out_of_range='wrap'"):
        FieldSpec("C1", 10, out_of_range="wrap")


def test_field_spec_file_round_trip(tmp_path):
    specs = make_fields(4, cardinality=[10, 20], dims=[4, 8], hotness=[1, 3])
    p = tmp_path / "fields.json"
    save_field_specs(specs, p)
    assert load_field_specs(p) == specs
    with pytest.raises(FileExistsError):
        save_field_specs(specs, p)
    p.write_text(json.dumps({"fields": [{"name": "C1", "cardinality": 5, "colour": 1}]}))
    with pytest.raises(ValueError, match="colour"):
        load_field_specs(p)


def test_zipf_sampler_is_skewed_and_seeded():
    s = ZipfSampler(10_000, 1.05, seed=3)
    rng = np.random.default_rng(0)
    ids = s.sample(rng, 200_000)
    assert ids.min() >= 0 and ids.max() < 10_000
    counts = np.bincount(ids, minlength=10_000)
    top = np.sort(counts)[::-1]
    # empirical mass of the 100 hottest ids matches the analytic inverse-CDF mass
    assert abs(top[:100].sum() / ids.size - s.top_mass(100)) < 0.02
    assert counts[s.perm[0]] == top[0]  # rank 0 is the hottest id
    assert np.array_equal(ZipfSampler(10_000, 1.05, seed=3).sample(np.random.default_rng(0), 50), ids[:50])


def test_generator_batches_are_deterministic_and_jagged():
    specs = make_fields(5, cardinality=100, hotness=[1, 3])
    g1, g2 = SyntheticCTR(specs, seed=7), SyntheticCTR(specs, seed=7)
    a, b = g1.batch(64, 5), g2.batch(64, 5)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.labels, b.labels)
    assert a.lengths.shape == (5 * 64,)
    lens = a.lengths.reshape(5, 64)
    assert (lens[0] == 1).all() and lens[1].max() > 1
    assert 0 < a.labels.mean() < 1


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 10_000))
def test_split_and_slice_preserve_ids(batch, n, seed):
    specs = make_fields(3, cardinality=50, hotness=[1, 2, 4])
    b = SyntheticCTR(specs, seed=seed).batch(batch, 0)
    n = min(n, batch)
    parts = b.split(n)
    assert sum(p.batch_size for p in parts) == batch
    for f in range(3):
        ids = np.concatenate([p.field_ids(f)[0] for p in parts])
        assert np.array_equal(ids, b.field_ids(f)[0])


def test_check_ids_refuses_or_hashes_and_names_the_field():
    specs = [FieldSpec("C1", 10), FieldSpec("C2", 10, out_of_range="hash")]
    b = JaggedBatch(["C1", "C2"], np.array([3, 11, 4, 25]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    with pytest.raises(ValueError, match=r"field 'C1': id=11 is not accepted"):
        check_ids(specs, b)
    ok = JaggedBatch(["C1", "C2"], np.array([3, 1, 4, 25]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    out = check_ids(specs, ok)
    assert out.values[3] < 10 and out.values[2] == 4
    other = JaggedBatch(["C1", "C3"], np.array([3, 1, 4, 5]), np.ones(4, np.int64), np.zeros((2, 13)), np.zeros(2))
    with pytest.raises(ValueError, match="field 'C2' is missing"):
        check_ids(specs, other)


def _criteo_batches():
    specs = make_fields(26, cardinality=1000)
    return specs, list(SyntheticCTR(specs, seed=1).batches(50, 2))


def test_criteo_tsv_round_trip_and_malformed_rows(tmp_path):
    specs, batches = _criteo_batches()
    p = tmp_path / "day_0.tsv"
    assert write_criteo_tsv(batches, p, round_dense=True) == 100
    with pytest.raises(FileExistsError):
        write_criteo_tsv(batches, p, round_dense=True)
    lines = p.read_text().splitlines()
    lines[4] = "1\tx" + lines[4][3:]  # bad integer column on line 5
    lines[9] = "\t".join(lines[9].split("\t")[:20])  # too few columns on line 10
    p.write_text("\n".join(lines) + "\n")
    cspecs = criteo_field_specs(1000, out_of_range="refuse")
    stats = ReadStats()
    got = list(read_criteo_tsv(p, cspecs, batch_size=32, progress=False, stats=stats, max_bad_share=0.05))
    assert stats.rows == 98 and stats.skipped == 2
    assert "line 5" in stats.problems[0] and "line 10" in stats.problems[1]
    assert sum(g.batch_size for g in got) == 98
    assert np.array_equal(got[0].field_ids(0)[0][:4], batches[0].field_ids(0)[0][:4])
    with pytest.raises(MalformedRow, match="line 5"):
        list(read_criteo_tsv(p, cspecs, progress=False, on_error="raise"))
    with pytest.raises(ValueError, match="on_error='ignore'"):
        list(read_criteo_tsv(p, cspecs, on_error="ignore"))


def test_criteo_tsv_out_of_range_ids_refused_or_hashed(tmp_path):
    p = tmp_path / "d.tsv"
    row = ["1"] + ["3"] * 13 + ["ff"] * 26
    p.write_text("\t".join(row) + "\n" + "\t".join(["0"] + [""] * 13 + [""] * 26) + "\n")
    small = criteo_field_specs(100, out_of_range="refuse")
    with pytest.raises(MalformedRow, match=r"field 'C1': id=255"):
        list(read_criteo_tsv(p, small, progress=False, on_error="raise"))
    got = list(read_criteo_tsv(p, criteo_field_specs(100), progress=False))[0]
    assert got.batch_size == 2 and got.values.max() < 100
    assert got.lengths.reshape(26, 2)[:, 1].sum() == 0  # missing categories are empty bags


def test_criteo_parquet_reader(tmp_path):
    specs, batches = _criteo_batches()
    b = batches[0]
    cols = {"label": b.labels.astype(np.int64).tolist()}
    cols.update({f"I{i + 1}": [1] * b.batch_size for i in range(13)})
    for f in range(26):
        ids = b.field_ids(f)[0].tolist()
        cols[f"C{f + 1}"] = [format(v, "x") for v in ids]
    cols["label"][3] = 7
    pq.write_table(pa.table(cols), tmp_path / "d.parquet")
    stats = ReadStats()
    got = list(read_criteo_parquet(tmp_path / "d.parquet", criteo_field_specs(1000, out_of_range="refuse"),
                                   progress=False, stats=stats, max_bad_share=0.05))
    assert stats.skipped == 1 and "row 4" in stats.problems[0]
    assert got[0].batch_size == 49
    assert np.array_equal(got[0].field_ids(2)[0][:3], b.field_ids(2)[0][:3])
    with pytest.raises(ValueError, match="column 'C27' is missing"):
        list(read_criteo_parquet(tmp_path / "d.parquet", make_fields(27, cardinality=1000), progress=False))


def test_dataset_builds_and_streams_back(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_DATA", str(tmp_path))
    from labkit.recsys.datasets import PROFILES, load_batches, specs_for
    specs, it = load_batches("ci")
    got = list(it)
    p = PROFILES["ci"]
    assert specs == specs_for(p)
    assert len(got) == p["batches"]
    ref = SyntheticCTR(specs, seed=0).batch(p["batch"], 3)
    assert np.array_equal(got[3].values, ref.values) and np.array_equal(got[3].labels, ref.labels)
    # batches own writable arrays (torch.from_numpy warns on the read-only memory map)
    assert all(a.flags.writeable for a in (got[0].values, got[0].lengths, got[0].dense, got[0].labels))
    _, it2 = load_batches("ci", batch_size=300)
    re = list(it2)
    assert sum(r.batch_size for r in re) == p["batch"] * p["batches"]
    assert np.array_equal(re[1].field_ids(5)[0], np.concatenate([got[0].field_ids(5)[0][300:], got[1].field_ids(5)[0][:88]]))


def _criteo_batch(dense, lengths=None, values=None, labels=(1.0, 0.0)):
    b = len(labels)
    lengths = np.ones(26 * b, np.int64) if lengths is None else np.asarray(lengths)
    values = np.arange(int(lengths.sum())) % 7 if values is None else np.asarray(values)
    return JaggedBatch([f"C{i + 1}" for i in range(26)], values, lengths, np.asarray(dense, np.float32),
                       np.asarray(labels, np.float32))


def test_criteo_tsv_writer_keeps_negative_integers_and_refuses_lossy_batches(tmp_path):
    dense = np.tile(np.arange(13, dtype=np.float32) - 3, (2, 1))  # -3..9: negative counts, as in Criteo's I2
    lengths = np.ones(52, np.int64)
    lengths[3] = 0  # field C2, sample 1: a missing value
    p = tmp_path / "ok.tsv"
    assert write_criteo_tsv([_criteo_batch(dense, lengths)], p) == 2
    rows = [line.split("\t") for line in p.read_text().splitlines()]
    assert rows[0][1:14] == [str(v) for v in range(-3, 10)]  # written as they are, not clipped to 0
    assert rows[1][15] == ""  # the empty bag stays a missing value
    multi = lengths.copy()
    multi[4] = 2  # field C3, sample 0 holds two ids
    bad = {
        "multi-hot": (_criteo_batch(dense, multi), r"batches\[1\]=\"field 'C3' sample 0 with 2 ids\".*single-hot"),
        "fraction": (_criteo_batch(dense + 0.25), r"batches\[1\]\.dense\[0, 0\]=-2.75 .*round_dense=True"),
        "nan": (_criteo_batch(np.where(dense == 0, np.nan, dense)), r"dense=nan .*finite"),
        "label": (_criteo_batch(dense, labels=(0.5, 1.0)), r"labels=0.5 .*0 or 1"),
        "negative id": (_criteo_batch(dense, values=-np.arange(52) - 1), r"values=-52 .*ids >= 0"),
        "dense width": (_criteo_batch(dense[:, :5]), r"dense='shape \(2, 5\)'"),
    }
    for what, (batch, msg) in bad.items():
        out = tmp_path / f"{what}.tsv"
        with pytest.raises(ValueError, match=msg):
            write_criteo_tsv([_criteo_batch(dense), batch], out)  # the error names batch 1's problem
        assert not out.exists() and not list(tmp_path.glob(f".{what}.tsv.*")), what  # nothing half-written
    # Rounding is an explicit choice, and then the rounded values are what is written.
    assert write_criteo_tsv([_criteo_batch(dense + 0.25)], tmp_path / "r.tsv", round_dense=True) == 2
    assert (tmp_path / "r.tsv").read_text().split("\t")[1:4] == ["-3", "-2", "-1"]


def test_readers_warn_about_skipped_rows_without_stats(tmp_path):
    good = "\t".join(["1"] + ["3"] * 13 + ["a"] * 26)
    p = tmp_path / "d.tsv"
    p.write_text("\n".join([good, "2" + good[1:], good, "x"]) + "\n")  # lines 2 and 4 are bad
    with pytest.warns(SkippedRowsWarning, match=r"d.tsv: skipped 2 malformed row\(s\) of 4 read \(50.00%, within "
                      r"max_bad_share=0.5\), the first: d.tsv line 2: label='2'"):
        got = list(read_criteo_tsv(p, progress=False, max_bad_share=0.5))
    assert sum(g.batch_size for g in got) == 2
    stats = ReadStats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with stats the caller has the record: no warning
        list(read_criteo_tsv(p, progress=False, stats=stats, max_bad_share=0.5))
        clean = tmp_path / "clean.tsv"
        clean.write_text(good + "\n")
        assert len(list(read_criteo_tsv(clean, progress=False))) == 1
    assert stats.skipped == 2
    it = read_criteo_tsv(p, batch_size=1, progress=False, max_bad_share=0.5)
    next(it)
    with pytest.warns(SkippedRowsWarning, match="skipped 1"):  # stopped early: what was skipped so far
        next(it)
        it.close()
    cols = {"label": [1, 5, 0]}
    cols.update({f"I{i + 1}": [1, 1, 1] for i in range(13)})
    cols.update({f"C{i + 1}": ["a", "b", "c"] for i in range(26)})
    pq.write_table(pa.table(cols), tmp_path / "d.parquet")
    with pytest.warns(SkippedRowsWarning, match="skipped 1 malformed row.*d.parquet row 2"):
        got = list(read_criteo_parquet(tmp_path / "d.parquet", progress=False, max_bad_share=0.5))
    assert got[0].batch_size == 2
    with pytest.raises(ValueError, match="batch_size=0"):
        list(read_criteo_parquet(tmp_path / "d.parquet", batch_size=0, progress=False))


def test_check_ids_raises_named_one_line_errors():
    specs = [FieldSpec("C1", 10), FieldSpec("C2", 10)]
    short = JaggedBatch(["C1"], np.array([1, 2]), np.ones(2, np.int64), np.zeros((2, 13)), np.zeros(2))
    with pytest.raises(BadBatch, match="field 'C2' is missing from the data") as e:
        check_ids(specs, short)
    assert "\n" not in str(e.value) and isinstance(e.value, ValueError)
    with pytest.raises(BadBatch, match="batch='dict' is not accepted; expected a JaggedBatch"):
        check_ids(specs, {"C1": [1]})


@pytest.mark.parametrize("bad", [0, -5, 2.5, "64"])
def test_load_batches_refuses_bad_batch_size(tmp_path, monkeypatch, bad):
    monkeypatch.setenv("LABKIT_DATA", str(tmp_path))
    from labkit.recsys.datasets import load_batches
    with pytest.raises(ValueError, match=f"batch_size={bad!r} is not accepted; expected an integer in \\[1, inf\\]"):
        load_batches("ci", batch_size=bad)
    assert not list(tmp_path.iterdir())  # refused before the dataset is built
