"""Issue 33, PICASSO's CTR readers: nothing crashes and nothing is silently lost.

One test per reproduction in the issue; each fails on the code before the fix.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labkit.recsys.data import (BAD_SHARE_WINDOW, FieldSpec, MalformedRow, ReadStats, SkippedRowsWarning,
                                TooManyBadRows, category_key, criteo_field_specs, hash_ids, read_criteo_parquet,
                                read_criteo_tsv)


def _tsv(path, rows):
    """Write Criteo TSV rows (each: label, 13 dense tokens, 26 category tokens) to `path`."""
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    return path


def _row(label=1, cat="a", dense="3"):
    return [label] + [dense] * 13 + ([cat] * 26 if not isinstance(cat, list) else cat)


def _parquet(path, labels, cats, dense=None):
    """Write a Criteo-shaped Parquet file: `cats` is one column's values, used for C1..C26."""
    n = len(labels)
    cols = {"label": labels}
    cols.update({f"I{i + 1}": dense if dense is not None else [1] * n for i in range(13)})
    cols.update({f"C{i + 1}": cats for i in range(26)})
    pq.write_table(pa.table(cols), path)
    return path


def _read(reader, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean read warns about nothing
        return list(reader(path, progress=False, **kw))


def _rows_of_c1(batches):
    return np.concatenate([b.field_ids(0)[0] for b in batches]).tolist()


# ---- 1. categories as strings ------------------------------------------------------------------

def test_parquet_string_categories_are_hashed_not_dropped(tmp_path):
    p = _parquet(tmp_path / "users.parquet", [1, 0, 1, 0], ["M", "technician", "F", "M"])
    got = _read(read_criteo_parquet, p)  # used to yield 0 batches and warn that every row was skipped
    assert sum(b.batch_size for b in got) == 4
    c1 = _rows_of_c1(got)
    assert c1[0] == c1[3] != c1[1]  # one category, one row
    assert all(0 <= r < 1_000_000 for r in c1)
    assert c1[0] == int(hash_ids(np.array([category_key("M")]), 1_000_000)[0])  # the documented hash


def test_parquet_string_categories_in_a_refusing_field_name_the_column(tmp_path):
    p = _parquet(tmp_path / "users.parquet", [1, 0], ["M", "technician"])
    with pytest.raises(MalformedRow, match=r"users.parquet row 1: C1='M' is not accepted; expected a hex id"):
        list(read_criteo_parquet(p, criteo_field_specs(100, out_of_range="refuse"), progress=False, on_error="raise"))
    with pytest.raises(TooManyBadRows, match=r"users.parquet: all 2 rows in the file are malformed; the first: "
                                             r"users.parquet row 1: C1='M'") as e:
        list(read_criteo_parquet(p, criteo_field_specs(100, out_of_range="refuse"), progress=False))
    assert "\n" not in str(e.value)


def test_category_key_is_stable_across_processes():
    # Fixed values: a salted hash (Python's hash() of a str) would change from run to run.
    assert category_key("M") == 7628883895790891574
    assert category_key("technician") == category_key(b"technician") == category_key(" technician ")


@pytest.mark.parametrize("card, out_of_range", [(1_000_000, "hash"), (100, "hash"), (2**40, "refuse")])
def test_one_category_lands_on_one_row_however_it_is_stored(tmp_path, card, out_of_range):
    # 7, "7", "0x7" and "07" are id 7; 0x68fd1e64 as an int, a hex string and a TSV cell are one id.
    specs = criteo_field_specs(card, out_of_range=out_of_range)
    forms = {"int": pa.array([7, 0x68fd1e64, 2**64 - 1], pa.uint64()), "hex": ["7", "68fd1e64", "ffffffffffffffff"],
             "prefixed": ["0x7", "0x68FD1E64", "0xFFFFFFFFFFFFFFFF"]}
    if out_of_range == "refuse":
        forms = {k: v[:2] for k, v in forms.items()}
    rows = {}
    for kind, cats in forms.items():
        rows[kind] = _rows_of_c1(_read(read_criteo_parquet, _parquet(tmp_path / f"{kind}.parquet", [1] * len(cats),
                                                                     cats), specs=specs))
    tsv = _tsv(tmp_path / "d.tsv", [_row(cat=c) for c in forms["hex"]])
    rows["tsv"] = _rows_of_c1(_read(read_criteo_tsv, tsv, specs=specs))
    assert rows["int"] == rows["hex"] == rows["prefixed"] == rows["tsv"], rows
    assert all(0 <= r < card for r in rows["tsv"])
    if card > 7:
        assert rows["tsv"][0] == 7  # an id in range is its own row (in every reader)


# ---- 2. a reader that would drop more than a stated share --------------------------------------

def test_tsv_with_many_bad_rows_stops_naming_the_first_bad_row_and_column(tmp_path):
    rows = [_row() for _ in range(50)]
    rows[6][3] = "x"  # line 7, column I3
    rows[20][0] = 5
    p = _tsv(tmp_path / "d.tsv", rows)
    with pytest.raises(TooManyBadRows, match=r"^d.tsv: 2 of 50 rows in the file are malformed \(4.0%\), more than "
                                             r"max_bad_share=0.01 allows; the first: d.tsv line 7: I3='x' is not an "
                                             r"integer") as e:
        list(read_criteo_tsv(p, progress=False))  # used to drop both rows with a warning
    assert "\n" not in str(e.value)
    # Below the share skipping stays, and the count and the first bad row are reported.
    with pytest.warns(SkippedRowsWarning, match=r"d.tsv: skipped 2 malformed row\(s\) of 50 read \(4.00%, within "
                                                r"max_bad_share=0.05\), the first: d.tsv line 7: I3='x'"):
        got = list(read_criteo_tsv(p, progress=False, max_bad_share=0.05))
    assert sum(b.batch_size for b in got) == 48


def test_parquet_with_many_bad_rows_stops_naming_the_first_bad_row(tmp_path):
    p = _parquet(tmp_path / "d.parquet", [1, 0, 7, 1], ["a", "b", "c", "d"])
    with pytest.raises(TooManyBadRows, match=r"d.parquet: 1 of 4 rows .* the first: d.parquet row 3: label=7"):
        list(read_criteo_parquet(p, progress=False))
    stats = ReadStats()
    got = list(read_criteo_parquet(p, progress=False, max_bad_share=0.25, stats=stats))
    assert stats.rows == 3 and stats.skipped == 1 and sum(b.batch_size for b in got) == 3


def test_a_file_of_bad_rows_fails_in_its_first_window_not_at_its_end(tmp_path):
    p = tmp_path / "wrong_delimiter.tsv"
    p.write_text((",".join(map(str, _row())) + "\n") * 20_000)
    with pytest.raises(TooManyBadRows, match=rf"all {BAD_SHARE_WINDOW} rows in the first {BAD_SHARE_WINDOW} "
                                             r"read are malformed; the first: wrong_delimiter.tsv line 1: 1 columns"):
        list(read_criteo_tsv(p, batch_size=16, progress=False))


def test_max_bad_share_is_checked_at_the_call(tmp_path):
    p = _tsv(tmp_path / "d.tsv", [_row()])
    for bad in (-0.1, 1.5, float("nan"), "1%"):
        with pytest.raises(ValueError, match=r"max_bad_share=.* is not accepted; expected a number in \[0.0, 1.0\]"):
            read_criteo_tsv(p, max_bad_share=bad, progress=False)


def test_a_file_with_no_good_row_fails_whatever_the_share(tmp_path):
    p = _tsv(tmp_path / "header_only.tsv", [["label"] + [f"I{i + 1}" for i in range(13)]
                                            + [f"C{i + 1}" for i in range(26)]])
    with pytest.raises(TooManyBadRows, match=r"header_only.tsv: all 1 rows in the file are malformed; the first: "
                                             r"header_only.tsv line 1: label='label'"):
        list(read_criteo_tsv(p, progress=False, max_bad_share=1.0))


# ---- 3. readers yielding nothing; hex ids over 64 bits -----------------------------------------

def test_empty_files_are_refused_naming_the_file(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"path='.*empty.tsv' is not accepted; expected a Criteo TSV file holding "
                                         r"at least one row \(empty.tsv holds no rows\)$"):
        read_criteo_tsv(empty, progress=False)  # at the call
    blank = tmp_path / "blank.tsv"
    blank.write_text("\n\n  \n")
    with pytest.raises(ValueError, match=r"blank.tsv holds no rows"):
        list(read_criteo_tsv(blank, progress=False))
    schema_only = _parquet(tmp_path / "schema_only.parquet", pa.array([], pa.int64()), pa.array([], pa.string()))
    with pytest.raises(ValueError, match=r"path='.*schema_only.parquet' is not accepted; expected a Parquet file "
                                         r"holding at least one row \(schema_only.parquet holds no rows\)$"):
        read_criteo_parquet(schema_only, progress=False)


def test_hex_ids_wider_than_64_bits_are_hashed_whole_not_truncated(tmp_path):
    wide = "1" + "0" * 16  # 2**64, which used to be cut to 0
    p = _tsv(tmp_path / "d.tsv", [_row(cat=wide), _row(cat="0"), _row(cat="1" + "0" * 20), _row(cat="0x" + wide)])
    c1 = _rows_of_c1(_read(read_criteo_tsv, p))
    assert c1[0] != c1[1] and c1[0] != c1[2] and c1[0] == c1[3]
    assert category_key(wide) == category_key(2**64) == category_key("000" + wide.upper())
    # and the same row from Parquet, as an integer too big for int64 is stored as a string there
    pq_rows = _rows_of_c1(_read(read_criteo_parquet, _parquet(tmp_path / "d.parquet", [1, 1], [wide, "0"])))
    assert pq_rows == c1[:2]
    with pytest.raises(MalformedRow, match=r"d.tsv line 1: field 'C1': id=0x10000000000000000... \(65 bits\) is not "
                                           r"accepted; expected 0 <= id < 100"):
        list(read_criteo_tsv(p, criteo_field_specs(100, out_of_range="refuse"), progress=False, on_error="raise"))


def test_a_non_hex_tsv_cell_is_hashed_like_the_same_parquet_string(tmp_path):
    p = _tsv(tmp_path / "d.tsv", [_row(cat="technician"), _row(cat="M")])
    tsv_rows = _rows_of_c1(_read(read_criteo_tsv, p))
    pq_rows = _rows_of_c1(_read(read_criteo_parquet, _parquet(tmp_path / "d.parquet", [1, 1], ["technician", "M"])))
    assert tsv_rows == pq_rows and tsv_rows[0] != tsv_rows[1]


def test_spec_without_hashing_keeps_in_range_ids_in_both_readers(tmp_path):
    specs = [FieldSpec(f"C{i + 1}", 50, out_of_range="hash") for i in range(26)]
    p = _tsv(tmp_path / "d.tsv", [_row(cat="1f"), _row(cat="32")])  # 31 in range, 50 out of range
    c1 = _rows_of_c1(_read(read_criteo_tsv, p, specs=specs))
    assert c1[0] == 31 and c1[1] == int(hash_ids(np.array([50]), 50)[0])
