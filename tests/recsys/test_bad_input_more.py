"""Bad input to PICASSO's data, model and widget APIs: one-line errors naming the argument, never a
crash (a segfault in the packed kernels), a raw numpy/torch error or silent nonsense."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from labkit.recsys.data import (BadBatch, FieldSpec, JaggedBatch, MalformedRow, ReadStats, SyntheticCTR,
                                ZipfSampler, check_ids, criteo_field_specs, criteo_like_cardinalities,
                                load_field_specs, make_fields, read_criteo_tsv)
from labkit.recsys.model import RecModel

SPECS = [FieldSpec("C1", 10, 4), FieldSpec("C2", 10, 4)]


def _batch(values=(1, 2, 3, 4), lengths=(1, 1, 1, 1), dense=None, labels=(0.0, 1.0), keys=("C1", "C2")):
    dense = np.zeros((len(labels), 13)) if dense is None else dense
    return JaggedBatch(list(keys), values, lengths, dense, labels)


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ---- 1. JaggedBatch and check_ids --------------------------------------------------------

def test_negative_lengths_segfaulted_the_packed_lookup_now_refused_in_a_subprocess():
    # The audit's reproducer: lengths [50, -49, 0, 0] sum to len(values), so only the sign shows it.
    code = ("import numpy as np\n"
            "from labkit.recsys.data import BadBatch, JaggedBatch, make_fields\n"
            "from labkit.recsys.model import RecModel\n"
            "try:\n"
            "    b = JaggedBatch(['C1', 'C2'], values=[1], lengths=[50, -49, 0, 0], dense=np.zeros((2, 13)),"
            " labels=[0, 1])\n"
            "    RecModel('wide_deep', make_fields(2, cardinality=10, dims=4), packing=True).train_step(b)\n"
            "except BadBatch as e:\n"
            "    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED lengths[1]=-49 is not accepted; expected ids per bag >= 0 (field 'C1', sample 1)" in r.stdout


@pytest.mark.parametrize("lengths", [[2, -1, 0, 0], [0, 0, 3, -2]])
def test_negative_lengths_are_refused_naming_the_bag(lengths):
    with pytest.raises(BadBatch, match=r"lengths\[\d\]=-\d is not accepted; expected ids per bag >= 0") as e:
        _batch(values=[1], lengths=lengths)
    _one_line(e)


def test_dense_rows_must_match_labels():
    with pytest.raises(BadBatch, match=r"dense='shape \(5, 13\)' is not accepted; expected 2 rows"):
        _batch(dense=np.zeros((5, 13)))
    with pytest.raises(BadBatch, match=r"dense='shape \(2,\)' is not accepted; expected a 2-D array"):
        _batch(dense=np.zeros(2))
    with pytest.raises(BadBatch, match=r"labels='shape \(2, 1\)' is not accepted; expected a 1-D array"):
        _batch(labels=np.zeros((2, 1)))


@pytest.mark.parametrize("values, shown", [([1.7, 2.2, 3.0, 4.0], "1.7"), (["a", "b", "c", "d"], "'a'"),
                                           ([True, False, True, True], "True")])
def test_non_integer_ids_are_refused_not_truncated(values, shown):
    with pytest.raises(BadBatch, match=rf"values=.dtype \S+, e.g. {shown}. is not accepted; expected an integer "
                                       "array") as e:
        _batch(values=values)
    _one_line(e)
    with pytest.raises(BadBatch, match="lengths='dtype float64, e.g. 1.5'"):
        _batch(lengths=[1.5, 1, 1, 0.5])


def test_keys_must_be_unique_names():
    with pytest.raises(BadBatch, match="keys='C1' is not accepted; expected unique field names"):
        _batch(keys=("C1", "C1"))
    with pytest.raises(BadBatch, match="keys='C1C2' is not accepted; expected a list of field names"):
        JaggedBatch("C1C2", [1, 2, 3, 4], [1, 1, 1, 1], np.zeros((2, 13)), [0, 1])


def test_slice_and_field_ids_refuse_out_of_range_indices():
    b = _batch()
    with pytest.raises(ValueError, match=r"\(start, stop\)=\(1, 9\) is not accepted; expected 0 <= start"):
        b.slice(1, 9)
    with pytest.raises(ValueError, match=r"f=5 is not accepted; expected a field index in \[0, 2\)"):
        b.field_ids(5)


@pytest.mark.parametrize("labels, shown", [([0.0, 2.0], "batch.labels[1]=2.0"), ([-1.0, 0.0], "batch.labels[0]=-1.0"),
                                           ([0.0, math.nan], "batch.labels[1]=nan"),
                                           ([math.inf, 0.0], "batch.labels[0]=inf")])
def test_check_ids_refuses_labels_outside_0_1(labels, shown):
    with pytest.raises(BadBatch, match=rf"{shown.replace('[', '.').replace(']', '.')} is not accepted; expected a "
                                       r"click label in \[0, 1\]") as e:
        check_ids(SPECS, _batch(labels=labels))
    _one_line(e)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_check_ids_refuses_non_finite_dense_naming_the_column(bad):
    dense = np.zeros((2, 13))
    dense[1, 7] = bad
    with pytest.raises(BadBatch, match=r"batch.dense\[1, 7\]=.* is not accepted; expected finite values "
                                       r"\(dense column 7\)"):
        check_ids(SPECS, _batch(dense=dense))


def test_train_step_refuses_bad_labels_and_dense_instead_of_a_nan_loss():
    specs = make_fields(2, cardinality=10, dims=4)
    b = SyntheticCTR(specs).batch(8)
    bad_lab = JaggedBatch(b.keys, b.values, b.lengths, b.dense, np.full(8, 2.0))
    bad_dense = JaggedBatch(b.keys, b.values, b.lengths, np.full((8, 13), np.nan), b.labels)
    empty = JaggedBatch(b.keys, [], [], np.zeros((0, 13)), [])
    with RecModel("wide_deep", specs, packing=True) as m:
        for bad, msg in ((bad_lab, "batch.labels"), (bad_dense, "batch.dense"), (empty, "batch='0 samples'")):
            with pytest.raises(BadBatch, match=msg):
                m.train_step(bad)
        assert np.isfinite(m.train_step(b))


def test_check_ids_still_finds_and_hashes_out_of_range_ids_in_multi_hot_batches():
    # Guards check_ids' one-pass rewrite (per-field maxima by reduceat), empty fields included.
    specs = [FieldSpec("A", 10), FieldSpec("B", 10), FieldSpec("C", 10, out_of_range="hash"), FieldSpec("D", 10)]
    # B = 2 samples; A has 3 ids, B none (empty field in the middle), C 2 ids (one negative), D 1 id
    lengths = [2, 1, 0, 0, 1, 1, 0, 1]
    vals = np.array([1, 9, 3, 4, -7, 8])
    out = check_ids(specs, JaggedBatch(list("ABCD"), vals, lengths, np.zeros((2, 13)), [0, 1]))
    assert out.values[:3].tolist() == [1, 9, 3] and 0 <= out.values[4] < 10 and out.values[5] == 8
    for pos, v in ((5, 10), (5, -1), (0, 10), (2, 2**62)):
        bad = vals.copy()
        bad[pos] = v
        name = "D" if pos == 5 else "A"
        with pytest.raises(BadBatch, match=rf"field '{name}': id={v} is not accepted; expected 0 <= id < 10"):
            check_ids(specs, JaggedBatch(list("ABCD"), bad, lengths, np.zeros((2, 13)), [0, 1]))
    # trailing empty fields: the last field with ids still reaches the end of the values
    lengths = [1, 1, 0, 0, 0, 0, 0, 0]
    with pytest.raises(BadBatch, match="field 'A': id=10"):
        check_ids(specs, JaggedBatch(list("ABCD"), [1, 10], lengths, np.zeros((2, 13)), [0, 1]))


# ---- 2. Criteo TSV: a negative hex id --------------------------------------------------------

def test_criteo_tsv_negative_hex_id_is_a_malformed_row_not_a_missing_value(tmp_path):
    p = tmp_path / "d.tsv"
    good = ["1"] + ["3"] * 13 + ["a"] * 26
    bad = ["0"] + ["3"] * 13 + ["-5"] + ["a"] * 25
    p.write_text("\t".join(good) + "\n" + "\t".join(bad) + "\n" + "\t".join(good) + "\n")
    specs = criteo_field_specs(100, out_of_range="refuse")
    with pytest.raises(MalformedRow, match=r"d.tsv line 2: field 'C1': id=-5 is not accepted; expected 0 <= id < 100"):
        list(read_criteo_tsv(p, specs, progress=False, on_error="raise"))
    stats = ReadStats()
    got = list(read_criteo_tsv(p, specs, progress=False, stats=stats, max_bad_share=0.5))
    assert stats.rows == 2 and stats.skipped == 1 and "line 2" in stats.problems[0]
    assert sum(g.batch_size for g in got) == 2
    # hashing fields hash it like any other id
    got = list(read_criteo_tsv(p, criteo_field_specs(100), progress=False))[0]
    assert got.batch_size == 3 and got.lengths.min() == 1


def test_criteo_tsv_huge_dense_integer_is_a_malformed_row(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("\t".join(["1", "9" * 400] + ["3"] * 12 + ["a"] * 26) + "\n")
    with pytest.raises(MalformedRow, match="line 1: I1='9999.*too large"):
        list(read_criteo_tsv(p, progress=False, on_error="raise"))


# ---- 3. RecModel arguments -------------------------------------------------------------------

@pytest.mark.parametrize("kw, msg", [
    (dict(interleave=2.5), r"interleave=2.5 is not accepted; expected an integer in \[0, 1024\]"),
    (dict(hidden=[]), r"hidden=\[\] is not accepted; expected a non-empty sequence of layer widths"),
    (dict(hidden=64), "hidden=64 is not accepted; expected a non-empty sequence"),
    (dict(dense_lr=-1), r"dense_lr=-1 is not accepted; expected a number in \(0.0, inf\)"),
    (dict(dense_lr=math.nan), "dense_lr=nan is not accepted"),
    (dict(dense_lr=math.inf), "dense_lr=inf is not accepted"),
    (dict(lr=math.nan), "lr=nan is not accepted"),
    (dict(lr=0), "lr=0 is not accepted"),
    (dict(lr=math.inf, packing=True), "lr=inf is not accepted"),
    (dict(seed=-1), r"seed=-1 is not accepted; expected an integer in \[0, 2\*\*64\)"),
    (dict(packing="no"), "packing='no' is not accepted; expected one of False, True"),
    (dict(cache="0.5"), "cache='0.5' is not accepted"),
    (dict(n_dense=-1), r"n_dense=-1 is not accepted; expected an integer in \[0, 1000\]"),
])
def test_rec_model_refuses_bad_arguments_by_name(kw, msg):
    with pytest.raises(ValueError, match=msg) as e:
        RecModel("wide_deep", SPECS, **kw)
    _one_line(e)


@pytest.mark.parametrize("specs, msg", [([], r"specs=\[\] is not accepted; expected at least one FieldSpec"),
                                        ([SPECS[0], {"name": "C2"}], r"specs\[1\]='dict' is not accepted"),
                                        ([SPECS[0], SPECS[0]], "specs='C1' is not accepted; expected unique")])
def test_rec_model_refuses_bad_specs(specs, msg):
    with pytest.raises(ValueError, match=msg):
        RecModel("wide_deep", specs)


# ---- 4. field spec files and criteo_like_cardinalities ---------------------------------------

def test_load_field_specs_names_the_file_and_row(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"path='.*nope.json' is not accepted; expected a readable field spec file"):
        load_field_specs(missing)
    p = tmp_path / "f.json"
    for text, msg in (("{not json", r"path='.*f.json' is not accepted; expected a JSON field spec file \(line 1"),
                      ('{"fields": [1, 2]}', r"f.json: fields\[0\]=1 is not accepted; expected an object"),
                      ('{"fields": [{"name": "a", "cardinality": 3}, {"name": "b"}]}',
                       r"f.json: fields\[1\]=.* \(missing 'cardinality'\)"),
                      ('{"fields": [{"name": "a", "cardinality": 0}]}',
                       r"f.json: fields\[0\]: a.cardinality=0 is not accepted"),
                      ('{"fields": [{"name": "a", "cardinality": 3}, {"name": "a", "cardinality": 3}]}',
                       r"f.json: fields.name='a' is not accepted; expected unique")):
        p.write_text(text)
        with pytest.raises(ValueError, match=msg) as e:
            load_field_specs(p)
        _one_line(e)
    with pytest.raises(ValueError, match="expected a readable field spec file"):
        load_field_specs(tmp_path)  # a directory


def test_field_specs_keep_ints_and_make_fields_does_not_truncate(tmp_path):
    s = FieldSpec("a", 5, dim=2.0)
    assert type(s.dim) is int and s == FieldSpec("a", 5, dim=2)
    assert json.dumps(make_fields(2, cardinality=np.array([5, 6]))[1].cardinality) == "6"
    with pytest.raises(ValueError, match="C1.cardinality=1.5 is not accepted"):
        make_fields(2, cardinality=[1.5, 2.5])
    with pytest.raises(ValueError, match=r"cardinality=\[\] is not accepted"):
        make_fields(2, cardinality=[])


@pytest.mark.parametrize("kw, msg", [
    (dict(min_rows=0), r"min_rows=0 is not accepted; expected an integer in \[1, inf\]"),
    (dict(min_rows=100, max_rows=10), r"max_rows=10 is not accepted; expected an integer in \[100, inf\]"),
    (dict(n_fields=-1), "n_fields=-1 is not accepted"),
    (dict(seed=-3), "seed=-3 is not accepted"),
])
def test_criteo_like_cardinalities_checks_ranges(kw, msg):
    kw = {"n_fields": 3, **kw}
    with pytest.raises(ValueError, match=msg):
        criteo_like_cardinalities(**kw)


# ---- 5. seeds --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [-1, 1.5, "3", 2**64, True])
def test_seeds_are_checked_by_name(seed):
    specs = make_fields(2, cardinality=10)
    with pytest.raises(ValueError, match=r"seed=.* is not accepted; expected an integer in \[0, 2\*\*64\)"):
        SyntheticCTR(specs, seed=seed)
    with pytest.raises(ValueError, match="seed="):
        ZipfSampler(10, 1.0, seed=seed)
    with pytest.raises(ValueError, match=r"index=-1 is not accepted"):
        SyntheticCTR(specs).batch(4, index=-1)
    assert SyntheticCTR(specs, seed=np.int64(3)).batch(4, 0).batch_size == 4


# ---- 6. technique_explorer -------------------------------------------------------------------

@pytest.mark.parametrize("kw, msg", [
    (dict(fields=(200, 8, 26)), r"fields=\(200, 8, 26\) is not accepted; expected \(min, max, value\) integers"),
    (dict(batch=(64, 256, 1000)), r"batch=\(64, 256, 1000\) is not accepted"),
    (dict(cache_pct=(0, 150, 5)), r"cache_pct=\(0, 150, 5\) is not accepted"),
    (dict(fields=(2, 8)), r"fields=\(2, 8\) is not accepted"),
    (dict(rows=0), r"rows=0 is not accepted"),
    (dict(steps=0), r"steps=0 is not accepted"),
    (dict(kind="dlrm2"), r"kind='dlrm2' is not accepted"),
    (dict(seed=-1), r"seed=-1 is not accepted"),
])
def test_technique_explorer_checks_its_arguments_up_front(kw, msg):
    pytest.importorskip("ipywidgets")
    from labkit.ui.recsys import technique_explorer
    with pytest.raises(ValueError, match=msg) as e:
        technique_explorer(**kw)
    _one_line(e)


# ---- 7. readers: file errors at the call, floats in Parquet ----------------------------------

def _criteo_parquet(path, dense, cat, n=2):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    cols = {"label": [1, 0, 1][:n]}
    cols.update({f"I{i + 1}": dense[:n] for i in range(13)})
    cols.update({f"C{i + 1}": cat[:n] for i in range(26)})
    pq.write_table(pa.table(cols), path)
    return path


def test_criteo_readers_refuse_a_missing_file_or_a_folder_at_the_call(tmp_path):
    from labkit.recsys.data import read_criteo_parquet
    missing = tmp_path / "nope.tsv"
    # Raised by the call itself, not by the first next(): no list() here.
    with pytest.raises(ValueError, match=r"path='.*nope.tsv' is not accepted; expected an existing Criteo TSV "
                                         r"file$") as e:
        read_criteo_tsv(missing, progress=False)
    _one_line(e)
    with pytest.raises(ValueError, match=r"path='.*' is not accepted; expected a Criteo TSV file, not a folder"):
        read_criteo_tsv(tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"path='.*nope.parquet' is not accepted; expected an existing Parquet "
                                         r"file$"):
        read_criteo_parquet(tmp_path / "nope.parquet", progress=False)
    with pytest.raises(ValueError, match=r"path='.*' is not accepted; expected a Parquet file, not a folder"):
        read_criteo_parquet(tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"path=3 is not accepted; expected a path"):
        read_criteo_tsv(3, progress=False)


def test_read_criteo_parquet_names_a_file_that_is_not_parquet(tmp_path):
    from labkit.recsys.data import read_criteo_parquet
    p = tmp_path / "good.tsv"
    p.write_text("\t".join(["1"] + ["3"] * 13 + ["a"] * 26) + "\n")
    with pytest.raises(ValueError, match=r"path='.*good.tsv' is not accepted; expected a readable Parquet file "
                                         r"\(pyarrow cannot read good.tsv: .*magic bytes") as e:
        read_criteo_parquet(p, progress=False)
    _one_line(e)
    assert len(list(read_criteo_tsv(p, progress=False))) == 1  # the same file is fine as TSV


@pytest.mark.parametrize("dense, cat, shown", [([1.7, 2.0], [3.0, 4.0], "I1=1.7"),
                                               ([1.0, 2.0], [3.9, 4.0], "C1=3.9"),
                                               ([math.inf, 2.0], [3.0, 4.0], "I1=inf"),
                                               ([1.0, 2.0], [math.nan, 4.0], "C1=nan")])
def test_read_criteo_parquet_refuses_floats_that_are_not_whole(tmp_path, dense, cat, shown):
    from labkit.recsys.data import read_criteo_parquet
    p = _criteo_parquet(tmp_path / "f.parquet", dense, cat)
    stats = ReadStats()
    got = list(read_criteo_parquet(p, progress=False, stats=stats, max_bad_share=0.5))
    assert stats.rows == 1 and stats.skipped == 1  # row 2 holds whole floats: read as integers
    assert stats.problems[0].startswith(f"f.parquet row 1: {shown} is not accepted; expected an integer")
    assert got[0].batch_size == 1 and np.allclose(got[0].dense, np.log1p(2.0))
    with pytest.raises(MalformedRow, match=rf"f.parquet row 1: {shown} is not accepted"):
        list(read_criteo_parquet(p, progress=False, on_error="raise"))


def test_read_criteo_parquet_float_nulls_are_still_missing_values(tmp_path):
    from labkit.recsys.data import read_criteo_parquet
    p = _criteo_parquet(tmp_path / "f.parquet", [None, 2.0], [None, 4.0])
    stats = ReadStats()
    got = list(read_criteo_parquet(p, progress=False, stats=stats))
    assert stats.skipped == 0 and got[0].batch_size == 2
    assert got[0].dense[0].tolist() == [0.0] * 13 and got[0].lengths.reshape(26, 2)[:, 0].sum() == 0


# ---- 8. RecModel's slow_tier_root ------------------------------------------------------------

def test_rec_model_slow_tier_root_must_be_a_folder(tmp_path):
    f = tmp_path / "t4.py"
    f.write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"slow_tier_root='.*t4.py' is not accepted; expected a folder for the slow "
                                         r"tier's scratch files, not a file") as e:
        RecModel("wide_deep", SPECS, cache=0.5, slow_tier_root=str(f))
    _one_line(e)
    with pytest.raises(ValueError, match="slow_tier_root=3 is not accepted"):
        RecModel("wide_deep", SPECS, cache=0.5, slow_tier_root=3)


def test_rec_model_slow_tier_root_is_not_made_with_its_missing_parents(tmp_path):
    deep = tmp_path / "missing" / "deep" / "dir"
    with pytest.raises(ValueError, match=r"slow_tier_root='.*missing/deep/dir' is not accepted; expected a folder, "
                                         r"or a new folder in an existing one"):
        RecModel("wide_deep", SPECS, cache=0.5, slow_tier_root=deep)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ValueError, match=r"slow_tier_root='.*missing/deep/dir' is not accepted"):
        RecModel("wide_deep", SPECS, slow_tier_root=deep)  # checked whether or not a tier is made
    # The last component itself is made, as before.
    with RecModel("wide_deep", SPECS, cache=0.5, slow_tier_root=tmp_path / "tier") as m:
        assert m.train_step(_batch()) >= 0 and (tmp_path / "tier").is_dir()


def test_slow_tier_create_names_its_root(tmp_path):
    from labkit.recsys.cache import SlowTier
    with pytest.raises(ValueError, match=r"^root='.*gone/x' is not accepted; expected a folder"):
        SlowTier.create(tmp_path / "gone" / "x")
    assert not (tmp_path / "gone").exists()


# ---- 9. which of dense and labels is wrong ---------------------------------------------------

def test_a_label_too_many_is_blamed_on_labels_not_dense():
    with pytest.raises(BadBatch, match=r"^labels='shape \(3,\)' is not accepted; expected 2 labels, one per row of "
                                       r"dense") as e:
        _batch(labels=(0.0, 1.0, 0.0), dense=np.zeros((2, 13)))  # dense and lengths: 2 samples
    _one_line(e)
    with pytest.raises(BadBatch, match=r"^labels='shape \(1,\)' is not accepted; expected 2 labels"):
        _batch(labels=(0.0,), dense=np.zeros((2, 13)))
