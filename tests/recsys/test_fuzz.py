"""Issue 33: a bounded, seeded fuzz pass over PICASSO's entry points that take user data.

Readers get random, truncated and corrupted files; batches random shapes, lengths and dtypes;
the embedding modules ids out of range; the hot-row cache random budgets. Each call either
returns a result, which is checked, or is refused with a one-line LabkitError (see tests/fuzz.py).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from labkit.core.cacheplan import hot_fraction, hot_rows
from labkit.recsys.cache import HotRowCache
from labkit.recsys.data import (BadBatch, FieldSpec, JaggedBatch, TooManyBadRows, category_key, check_ids,
                                criteo_field_specs, hash_ids, read_criteo_parquet, read_criteo_tsv)
from labkit.recsys.layers import PerFieldEmbeddings
from labkit.recsys.packing import PackedEmbeddings
from labkit.recsys.tables import tables_for
from tests.fuzz import FUZZ_SETTINGS, Refused, fuzz_call

pytestmark = pytest.mark.filterwarnings("ignore::labkit.recsys.data.SkippedRowsWarning")

CARD = 1000
SPECS = criteo_field_specs(CARD)

# ---- cells and rows --------------------------------------------------------------------------

_words = st.sampled_from(["M", "technician", "x y", "é", "0x", "7_0", "--1", "ghost"])
_hex = st.integers(-2**70, 2**80).map(lambda v: ("-" if v < 0 else "") + format(abs(v), "x"))
_cat = st.one_of(st.just(""), _hex, _words, st.integers(0, CARD - 1).map(lambda v: format(v, "x")))
_dense_ok = st.one_of(st.just(""), st.integers(-10**6, 10**12).map(str))
_dense_bad = st.sampled_from(["nan", "inf", "-inf", "1.5", "x", "9" * 400])
_label_bad = st.sampled_from(["2", "-1", "", "nan", "1.0", "label"])


@st.composite
def _tsv_rows(draw):
    """A list of (good, label, cells): good rows and rows with one known defect each."""
    rows = []
    for _ in range(draw(st.integers(0, 25))):
        label = draw(st.sampled_from(["0", "1"]))
        dense = draw(st.lists(_dense_ok, min_size=13, max_size=13))
        cats = draw(st.lists(_cat, min_size=26, max_size=26))
        cells, good = [label] + dense + cats, True
        defect = draw(st.sampled_from(["none"] * 15 + ["columns", "label", "dense"]))
        if defect == "columns":
            cut = draw(st.integers(1, 39))
            cells = cells[:cut] if draw(st.booleans()) else cells + cells[:cut]
            good = False
        elif defect == "label":
            cells[0], good = draw(_label_bad), False
        elif defect == "dense":
            cells[1 + draw(st.integers(0, 12))], good = draw(_dense_bad), False
        rows.append((good, int(label), cells))
    return rows


def _expected_row(tok, card: int = CARD) -> int:
    """The row of category cell `tok`: the rule of category_key, worked out independently."""
    key = category_key(tok)
    if key is None:
        return -1
    if isinstance(tok, str):  # the documented rule: optional sign, optional 0x, hex digits
        v = int(tok.strip(), 16) if re.fullmatch(r"[+-]?(0[xX])?[0-9a-fA-F]+", tok.strip()) else None
    else:
        v = int(tok)
    if v is not None and 0 <= v < card:
        return v
    return int(hash_ids(np.array([key], np.int64), card)[0])


def _samples(batches):
    """Per sample: (label, dense row, rows of C1..C26 with -1 for an empty bag)."""
    out = []
    for b in batches:
        lens = b.lengths.reshape(b.n_fields, b.batch_size)
        for i in range(b.batch_size):
            cats = []
            for f in range(b.n_fields):
                ids, off = b.field_ids(f)
                assert lens[f, i] in (0, 1)
                cats.append(int(ids[off[i]]) if lens[f, i] else -1)
            out.append((int(b.labels[i]), b.dense[i].tolist(), cats))
    return out


def _check_ok(batches, card: int = CARD):
    for b in batches:
        assert b.values.size == 0 or (b.values.min() >= 0 and b.values.max() < card)
        assert set(np.unique(b.labels).tolist()) <= {0.0, 1.0} and np.isfinite(b.dense).all()


# ---- the TSV reader --------------------------------------------------------------------------

@settings(parent=FUZZ_SETTINGS, max_examples=30)
@given(rows=_tsv_rows(), share=st.sampled_from([0.0, 0.01, 0.2, 0.5, 1.0, 1.0]), batch_size=st.integers(1, 9),
       crlf=st.booleans())
def test_fuzz_tsv_reader_rows(tmp_path_factory, rows, share, batch_size, crlf):
    p = tmp_path_factory.mktemp("tsv") / "d.tsv"
    p.write_bytes("".join("\t".join(c) + ("\r\n" if crlf else "\n") for _, _, c in rows).encode())
    n_bad = sum(not g for g, _, _ in rows)
    try:
        got = fuzz_call("recsys.read_criteo_tsv", lambda: list(read_criteo_tsv(p, SPECS, batch_size=batch_size,
                                                                               max_bad_share=share,
                                                                               progress=False, stats=None)))
    except Refused as r:
        if not rows:
            assert "holds no rows" in str(r)
        else:  # refused only for too many bad rows, naming the first one
            assert isinstance(r.error, TooManyBadRows) and (n_bad > share * len(rows) or n_bad == len(rows))
            first = next(i for i, (g, _, _) in enumerate(rows) if not g)
            assert f"the first: d.tsv line {first + 1}: " in str(r)
        return
    assert rows and n_bad <= share * len(rows) and n_bad < len(rows)
    _check_ok(got)
    assert all(b.batch_size <= batch_size for b in got)
    samples = _samples(got)
    good = [(lab, c) for g, lab, c in rows if g]
    assert len(samples) == len(good)  # every good row yields exactly one sample, in order
    for (lab, dense, cats), (want_lab, cells) in zip(samples, good):
        assert lab == want_lab
        want_dense = [math.log1p(int(t)) if t and int(t) > 0 else 0.0 for t in cells[1:14]]
        assert np.allclose(dense, want_dense, rtol=1e-6)
        assert cats == [_expected_row(t) for t in cells[14:]]


@settings(parent=FUZZ_SETTINGS, max_examples=25)
@given(rows=_tsv_rows(), cut=st.floats(0, 1), noise=st.binary(max_size=200), flip=st.integers(0, 10**6))
def test_fuzz_tsv_reader_truncated_and_corrupted(tmp_path_factory, rows, cut, noise, flip):
    d = tmp_path_factory.mktemp("tsvbad")
    text = "".join("\t".join(c) + "\n" for _, _, c in rows).encode()
    data = bytearray(text[:int(len(text) * cut)] + noise)
    if data:
        data[flip % len(data)] ^= 0xFF
    p = d / "cut.tsv"
    p.write_bytes(bytes(data))
    lines = [ln for ln in bytes(data).split(b"\n") if ln.decode("utf-8", "replace").strip()]
    stats_rows = []
    try:
        got = fuzz_call("recsys.read_criteo_tsv", lambda: list(read_criteo_tsv(p, SPECS, batch_size=4,
                                                                               max_bad_share=1.0, progress=False,
                                                                               stats=None)))
    except Refused as r:
        assert "holds no rows" in str(r) or isinstance(r.error, TooManyBadRows)
        return
    _check_ok(got)
    stats_rows = sum(b.batch_size for b in got)
    assert 0 < stats_rows <= len(lines)


# ---- the Parquet reader ----------------------------------------------------------------------

_pq_label = st.sampled_from([0, 1] * 8 + [None, 7, -1])
_pq_dense = st.sampled_from([None, 1.0, 0.0, -3.0, 1e300] * 4 + [2.5, math.nan, math.inf])
_pq_cat = {
    "int": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(0, CARD - 1)),
    "str": st.one_of(st.none(), _cat),
    "float": st.sampled_from([None, 3.0, 3.5, math.nan, -2.0, 1e30, float(CARD + 5)]),
}


@settings(parent=FUZZ_SETTINGS, max_examples=40)
@given(data=st.data(), n=st.integers(0, 20), kind=st.sampled_from(sorted(_pq_cat)),
       share=st.sampled_from([0.01, 0.3, 1.0]))
def test_fuzz_parquet_reader(tmp_path_factory, data, n, kind, share):
    labels = data.draw(st.lists(_pq_label, min_size=n, max_size=n))
    dense = data.draw(st.lists(_pq_dense, min_size=n, max_size=n))
    cats = data.draw(st.lists(_pq_cat[kind], min_size=n, max_size=n))
    cols = {"label": pa.array(labels, pa.int64())}
    cols.update({f"I{i + 1}": pa.array(dense, pa.float64()) for i in range(13)})
    typ = {"int": pa.int64(), "str": pa.string(), "float": pa.float64()}[kind]
    cols.update({f"C{i + 1}": pa.array(cats, typ) for i in range(26)})
    p = tmp_path_factory.mktemp("pq") / "d.parquet"
    pq.write_table(pa.table(cols), p)

    def good(i):
        d, c = dense[i], cats[i]
        return (labels[i] in (0, 1) and (d is None or (math.isfinite(d) and d == int(d)))
                and (c is None or not isinstance(c, float) or (math.isfinite(c) and c == int(c))))
    want = [i for i in range(n) if good(i)]
    try:
        got = fuzz_call("recsys.read_criteo_parquet",
                        lambda: list(read_criteo_parquet(p, SPECS, batch_size=7, max_bad_share=share,
                                                         progress=False, stats=None)))
    except Refused as r:
        n_bad = n - len(want)
        assert n == 0 and "holds no rows" in str(r) or (n_bad > share * n or not want)
        return
    _check_ok(got)
    samples = _samples(got)
    assert [s[0] for s in samples] == [labels[i] for i in want]
    for s, i in zip(samples, want):
        c = cats[i]
        assert s[2] == [_expected_row(int(c) if isinstance(c, float) else c)] * 26
        d = dense[i]
        assert np.allclose(s[1], [math.log1p(d) if d and d > 0 else 0.0] * 13, rtol=1e-6)


@settings(parent=FUZZ_SETTINGS, max_examples=30)
@given(n=st.integers(1, 30), cut=st.floats(0, 1), flips=st.lists(st.integers(0, 10**6), max_size=4))
def test_fuzz_parquet_reader_corrupted_file(tmp_path_factory, n, cut, flips):
    cols = {"label": [i % 2 for i in range(n)]}
    cols.update({f"I{i + 1}": list(range(n)) for i in range(13)})
    cols.update({f"C{i + 1}": [format(j * 977, "x") for j in range(n)] for i in range(26)})
    d = tmp_path_factory.mktemp("pqbad")
    pq.write_table(pa.table(cols), d / "ok.parquet")
    data = bytearray((d / "ok.parquet").read_bytes())
    data = data[:max(1, int(len(data) * cut))] if cut < 0.98 else data
    for f in flips:
        data[f % len(data)] ^= 0x5A
    p = d / "bad.parquet"
    p.write_bytes(bytes(data))
    try:
        got = fuzz_call("recsys.read_criteo_parquet",
                        lambda: list(read_criteo_parquet(p, SPECS, max_bad_share=1.0, progress=False, stats=None)))
    except Refused:
        return
    _check_ok(got)
    assert sum(b.batch_size for b in got) <= n


# ---- batches ---------------------------------------------------------------------------------

_arrays = st.one_of(
    st.lists(st.integers(-5, 2**40), max_size=12),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=12),
    st.lists(st.booleans(), max_size=6),
    st.lists(st.text(max_size=3), max_size=4),
    st.just([[1, 2], [3, 4]]),
    st.just(None),
    st.just("abc"),
)


@given(n_keys=st.integers(0, 3), b=st.integers(0, 4), lengths=_arrays, values=_arrays,
       dense_shape=st.sampled_from([None, (0,), (4, 2), (3, 2), (2, 2), (1, 0), (4,)]), labels=_arrays,
       coherent=st.booleans(), data=st.data())
@settings(parent=FUZZ_SETTINGS, max_examples=80)
def test_fuzz_jagged_batch(n_keys, b, lengths, values, dense_shape, labels, coherent, data):
    keys = [f"C{i}" for i in range(n_keys)]
    if coherent:  # mostly-consistent batches, with random lengths and a random dtype
        lengths = data.draw(st.lists(st.integers(0, 3), min_size=n_keys * b, max_size=n_keys * b))
        dtype = data.draw(st.sampled_from([np.int64, np.int32, np.uint16, np.float64]))
        values = (np.arange(sum(lengths)) * data.draw(st.sampled_from([1, -1]))).astype(dtype)  # uint: wrapped
        labels = data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, math.nan, 3.0]), min_size=b, max_size=b))
        dense = np.zeros((b, 2), np.float32)
    else:
        dense = None if dense_shape is None else np.ones(dense_shape)
    try:
        batch = fuzz_call("recsys.JaggedBatch", JaggedBatch, keys, values, lengths, dense, labels)
    except Refused:
        return
    assert batch.offsets[-1] == batch.values.size and batch.lengths.size == n_keys * batch.batch_size
    assert (batch.lengths >= 0).all() and batch.values.dtype == np.int64
    if batch.batch_size:
        halves = fuzz_call("recsys.JaggedBatch.split", batch.split, min(2, batch.batch_size))
        assert sum(h.batch_size for h in halves) == batch.batch_size
        assert np.array_equal(np.concatenate([h.labels for h in halves]), batch.labels, equal_nan=True)
    specs = [FieldSpec(k, 5, out_of_range=data.draw(st.sampled_from(["hash", "refuse"]))) for k in keys]
    try:
        checked = fuzz_call("recsys.check_ids", check_ids, specs, batch)
    except Refused:
        return
    assert checked.values.size == 0 or (checked.values.min() >= 0 and checked.values.max() < 5)


# ---- embeddings with ids out of range --------------------------------------------------------

_EMB_SPECS = [FieldSpec("A", 7, dim=4), FieldSpec("B", 3, dim=4, pooling="mean"), FieldSpec("C", 11, dim=8)]
_EMBS = {}


def _emb(kind):
    if kind not in _EMBS:
        tables = tables_for(_EMB_SPECS)
        _EMBS[kind] = (PerFieldEmbeddings(tables) if kind == "per_field"
                       else PackedEmbeddings(tables, group_by="dim" if kind == "packed" else "field"))
    return _EMBS[kind]


@given(kind=st.sampled_from(["per_field", "packed", "field"]), b=st.integers(1, 5), data=st.data(),
       n_fields=st.sampled_from([3, 3, 3, 2]))
@settings(parent=FUZZ_SETTINGS, max_examples=60)
def test_fuzz_embedding_lookup_with_ids_out_of_range(kind, b, data, n_fields):
    lengths = data.draw(st.lists(st.integers(0, 3), min_size=n_fields * b, max_size=n_fields * b))
    ids = st.integers(0, 2)  # in range for every table: looked up
    if data.draw(st.booleans()):
        ids = st.one_of(ids, st.integers(-2**63, 2**63 - 1), st.sampled_from([-1, 7, 3, 11, 2**62]))
    values = np.array(data.draw(st.lists(ids, min_size=sum(lengths), max_size=sum(lengths))), np.int64)
    batch = JaggedBatch(["A", "B", "C"][:n_fields], values, lengths, np.zeros((b, 13)), np.zeros(b))
    emb = _emb(kind)
    try:
        out = fuzz_call(f"recsys.{type(emb).__name__}.lookup", emb.lookup, batch)
    except Refused as r:
        assert isinstance(r.error, BadBatch)
        fits = n_fields == 3 and all(((batch.field_ids(f)[0] >= 0) & (batch.field_ids(f)[0] < s.cardinality)).all()
                                     for f, s in enumerate(_EMB_SPECS))
        assert not fits, str(r)
        return
    assert tuple(out.shape) == (b, 16) and bool(out.isfinite().all())
    # the same batch, hashed into range by check_ids, is looked up fine
    hashed = check_ids([FieldSpec(s.name, s.cardinality, out_of_range="hash") for s in _EMB_SPECS], batch)
    assert tuple(emb.lookup(hashed).shape) == (b, 16)


# ---- the hot-row cache -----------------------------------------------------------------------

@given(counts=st.lists(st.lists(st.integers(0, 50), max_size=12), min_size=1, max_size=4),
       capacity=st.one_of(st.integers(-3, 60), st.floats(allow_nan=True), st.sampled_from([2.0, 1.5, True, "3"])),
       fraction=st.one_of(st.floats(-1, 2), st.just(math.nan)))
@settings(parent=FUZZ_SETTINGS, max_examples=80)
def test_fuzz_cache_plan_budgets(counts, capacity, fraction):
    counts = [np.array(c, np.int64) for c in counts]
    total = sum(c.size for c in counts)
    for name, fn, arg in (("core.cacheplan.hot_rows", hot_rows, capacity),
                          ("core.cacheplan.hot_fraction", hot_fraction, fraction)):
        try:
            plan = fuzz_call(name, fn, counts, arg)
        except Refused:
            continue
        budget = int(arg) if name.endswith("rows") else int(round(arg * total))
        assert plan.num_ids == total and plan.size == sum(r.size for r in plan.rows) <= budget
        picked = np.concatenate([c[r] for c, r in zip(counts, plan.rows)]) if total else np.zeros(0)
        rest = np.concatenate([np.delete(c, r) for c, r in zip(counts, plan.rows)]) if total else np.zeros(0)
        assert (picked > 0).all()
        for c, r in zip(counts, plan.rows):
            assert (np.diff(r) > 0).all() and (r.size == 0 or (r.min() >= 0 and r.max() < c.size))
        if picked.size and rest.size:
            assert picked.min() >= rest.max() or plan.size == (np.concatenate(counts) > 0).sum()


@settings(parent=FUZZ_SETTINGS, max_examples=25)
@given(rows=st.lists(st.integers(-3, 12), max_size=12), fraction=st.floats(0, 1))
def test_fuzz_hot_row_cache_fill_and_packed_cache(rows, fraction):
    slow = np.arange(20, dtype=np.float32).reshape(10, 2)
    cache = HotRowCache(10, 2, 1)
    try:
        fuzz_call("recsys.HotRowCache.fill", cache.fill, np.array(rows, np.int64), slow, np.zeros((10, 1), np.float32))
    except Refused:
        assert any(r < 0 or r >= 10 for r in rows)
    else:
        u = np.array(rows, np.int64)
        assert np.array_equal(cache.weights[:u.size], slow[u]) if u.size else cache.size == 0
    # a packed table with a random cache budget looks up what it looks up without one
    emb = _emb("field")
    batch = JaggedBatch(["A", "B", "C"], [1, 2, 0, 1, 10, 3], np.full(6, 1), np.zeros((2, 13)), np.zeros(2))
    before = emb.lookup(batch).clone()
    plan = fuzz_call("core.cacheplan.hot_fraction", hot_fraction, emb.count_ids([batch]), fraction)
    emb.plan_cache(plan)
    try:
        assert np.array_equal(emb.lookup(batch).numpy(), before.numpy())
    finally:
        emb.drop_cache()


def teardown_module():
    for e in _EMBS.values():
        e.close()
