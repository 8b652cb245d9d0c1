"""PICASSO exercises: packing lookups, micro-batches for interleaving, hot rows and their hit rate.

Each exercise is one piece of :mod:`labkit.recsys`: the id shift that lets one gather on a packed
table serve every field (:mod:`~labkit.recsys.packing`), the split of a batch into micro-batches
that the interleaved step overlaps (:func:`~labkit.recsys.interleave.micro_batch_edges`), the
choice of hot rows under a Zipf law (:func:`~labkit.core.cacheplan.hot_rows`), and the hit rate a
plan earns (the counters of the packed stage's hot-row cache).
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable

import numpy as np

from labkit.course.exercise import Case, Exercise, register
from labkit.course.exercises._checks import best_time as _timed
from labkit.course.exercises._checks import case as _case
from labkit.course.exercises._checks import compile_reference as _compile
from labkit.course.exercises._checks import short as _short


def _first_failure(name: str, cases) -> Case:
    """One case for a property tested on many random inputs: the first failure, or a pass."""
    for i, c in enumerate(cases):
        if not c.passed:
            return Case(name, False, f"input {i}: {c.detail}")
    return Case(name, True, "")


# =====================================================================================
# 1. Packing per-field lookups into one
# =====================================================================================

_PACK_STUB = '''import numpy as np


def pack_ids(cardinalities, ids):
    """Pack per-field lookups into one: return (row_offsets, packed_ids), both int64 numpy arrays.

    Field f's table has cardinalities[f] rows; the tables are stacked into one packed table,
    table 0 first, so table f's rows start at row_offsets[f] (the rows of all tables before it).
    ids[f] are field f's ids (0 <= id < cardinalities[f], any integer dtype); packed_ids
    concatenates every field's ids shifted by its table's offset, field 0 first, so one gather
    on the packed table serves every field. Tables can be large: offsets may pass 2**31.

    >>> pack_ids([3, 5, 2], [np.array([0, 2]), np.array([4]), np.array([1, 1])])
    (array([0, 3, 8]), array([0, 2, 7, 9, 9]))
    """
'''

_PACK_SOLUTION = '''    cards = np.asarray(cardinalities, dtype=np.int64)
    offsets = np.zeros(len(cards), dtype=np.int64)
    if len(cards) > 1:
        offsets[1:] = np.cumsum(cards[:-1])
    parts = [np.asarray(v, dtype=np.int64) + off for v, off in zip(ids, offsets)]
    packed = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return offsets, packed
'''

_pack_ref = _compile(_PACK_STUB, _PACK_SOLUTION, "pack_ids")


def _pack_ok(expected: tuple) -> Callable[[Any], Any]:
    off_e, ids_e = expected

    def ok(got):
        off, ids = got
        off, ids = np.asarray(off), np.asarray(ids)
        if off.shape != off_e.shape or not np.array_equal(off, off_e):
            return f"row_offsets should be {_short(off_e.tolist())}"
        if ids.shape != ids_e.shape or not np.array_equal(ids.astype(np.int64), ids_e):
            return f"packed_ids should be {_short(ids_e.tolist())}"
        if ids.dtype != np.int64 or off.dtype != np.int64:
            return f"both arrays should be int64 (got {off.dtype}, {ids.dtype})"
        return True
    return ok


def _pack_case(fn: Callable, name: str, cards, ids) -> Case:
    want = _pack_ref(cards, ids)
    c, i = copy.deepcopy(cards), copy.deepcopy(ids)
    return _case(name, lambda: fn(c, i), _pack_ok(want))


def _labkit_packed(cards: list[int], dim: int = 4):
    from labkit.recsys.packing import PackedEmbeddings
    from labkit.recsys.tables import Table
    tables = [Table(f"t{f}", f, c, dim, "sum") for f, c in enumerate(cards)]
    return PackedEmbeddings(tables, optimizer="sgd")


def _pack_check(fn: Callable):
    from labkit.recsys.tables import Table, init_table

    yield _pack_case(fn, "the docstring's example", [3, 5, 2], [np.array([0, 2]), np.array([4]), np.array([1, 1])])
    yield _pack_case(fn, "no fields", [], [])
    yield _pack_case(fn, "one field", [10], [np.array([9, 0, 3])])
    yield _pack_case(fn, "a field with no ids", [4, 6, 3], [np.array([1]), np.zeros(0, np.int64), np.array([2, 0])])
    yield _pack_case(fn, "tables of one row", [1, 1, 1], [np.array([0]), np.array([0, 0]), np.array([0])])
    yield _pack_case(fn, "offsets past 2**31 (int32 ids)", [2**31, 2**31, 5],
                     [np.array([2**31 - 1], np.int32), np.array([7], np.int32), np.array([4], np.int32)])
    rng = np.random.default_rng(21)
    inputs = []
    for _ in range(30):
        cards = [int(x) for x in rng.integers(1, 1000, int(rng.integers(1, 12)))]
        inputs.append((cards, [rng.integers(0, c, int(rng.integers(0, 20))) for c in cards]))
    yield _first_failure("random fields", (_pack_case(fn, "random fields", c, i) for c, i in inputs))
    # labkit's packed table: the same offsets, and one gather equals every field's own lookup.
    cards = [7, 1, 30, 12]
    stage = _labkit_packed(cards)
    g = stage.groups[0]
    yield _case("row offsets match labkit's packed table", lambda: fn(list(cards), [np.zeros(0, np.int64)] * 4),
                lambda got: np.array_equal(np.asarray(got[0]), g.row_off) or "labkit's PackedEmbeddings",
                g.row_off.tolist())
    ids = [rng.integers(0, c, 9) for c in cards]
    want = np.concatenate([init_table(f, Table(f"t{f}", f, c, 4, "sum"))[v] for f, (c, v) in
                           enumerate(zip(cards, ids))])
    yield _case("one gather on labkit's packed table equals the per-field lookups",
                lambda: g.weights[np.asarray(fn(list(cards), copy.deepcopy(ids))[1])],
                lambda got: (got.shape == want.shape and np.array_equal(got, want)) or "rows differ")


def _pack_measure(fn: Callable) -> dict:
    import torch

    from labkit.recsys.data import SyntheticCTR, criteo_like_cardinalities, make_fields
    from labkit.recsys.layers import PerFieldEmbeddings
    from labkit.recsys.tables import tables_for

    n_f, batch = 26, 4096
    specs = make_fields(n_f, cardinality=criteo_like_cardinalities(n_f, max_rows=200_000), dims=16)
    b = SyntheticCTR(specs, seed=4).batch(batch, 0)
    tables = tables_for(specs)
    cards = [t.cardinality for t in tables]
    ids = [b.values[b.offsets[f * batch]:b.offsets[(f + 1) * batch]] for f in range(n_f)]
    from labkit.recsys.packing import PackedEmbeddings
    packed = PackedEmbeddings(tables, optimizer="sgd")
    per_field = PerFieldEmbeddings(tables, optimizer="sgd")
    w = packed.groups[0].weights
    per_w = [per_field.table_weights(f) for f in range(n_f)]

    def student():
        return np.take(w, np.asarray(fn(cards, ids)[1]), axis=0)

    def reference():
        return np.take(w, _pack_ref(cards, ids)[1], axis=0)

    def per_field_numpy():
        return np.concatenate([np.take(t, v, axis=0) for t, v in zip(per_w, ids)])

    rows = student()
    labkit_out = packed.lookup(b).numpy()  # [B, F * dim], fields side by side
    same = rows.shape == (n_f * batch, 16) and np.array_equal(
        rows.reshape(n_f, batch, 16).transpose(1, 0, 2).reshape(batch, -1), labkit_out)
    with torch.no_grad():
        t_torch = _timed(per_field.lookup, b)
    return {"student_s": _timed(student), "reference_s": _timed(reference),
            "per_field_numpy_s": _timed(per_field_numpy), "per_field_torch_s": t_torch,
            "labkit_packed_lookup_s": _timed(packed.lookup, b), "matches_labkit_lookup": bool(same),
            "fields": n_f, "batch": batch,
            "note": "one Criteo-like batch (26 fields, 4096 samples): the student's id shift + one gather on "
                    "labkit's packed table, beside 26 gathers (numpy; torch EmbeddingBags) and labkit's "
                    "packed kernel"}


register(Exercise(
    id="recsys.pack_ids", system="recsys", title="Pack per-field lookups into one",
    func="pack_ids", stub=_PACK_STUB, solution=_PACK_SOLUTION, check=_pack_check, measure=_pack_measure,
    goal="Packing is an id shift: stack the tables, add each table's row offset to its ids, and one gather "
         "(one kernel call) replaces one per field.",
    reference="labkit.recsys.packing:PackedEmbeddings",
    forbid=("labkit.recsys.packing", "labkit.recsys.tables", "labkit.recsys"), minutes=15,
    tags=("picasso", "packing")))


# =====================================================================================
# 2. Micro-batch sizes for interleaving
# =====================================================================================

_MICRO_STUB = '''def micro_batch_sizes(batch_size, m):
    """Split a batch of `batch_size` samples into `m` near-equal micro-batches; return their sizes.

    The sizes (a list of ints) differ by at most one, larger ones first, and sum to batch_size.
    No micro-batch is empty: with fewer samples than m, return batch_size micro-batches of one
    sample (none for an empty batch). m < 1 raises ValueError.

    >>> micro_batch_sizes(10, 4)
    [3, 3, 2, 2]
    """
'''

_MICRO_SOLUTION = '''    if m < 1:
        raise ValueError(f"m={m!r} is not accepted; expected an integer >= 1")
    n = min(m, batch_size)
    q, r = divmod(batch_size, n) if n else (0, 0)
    return [q + 1] * r + [q] * (n - r)
'''

_micro_ref = _compile(_MICRO_STUB, _MICRO_SOLUTION, "micro_batch_sizes")


def _micro_case(fn: Callable, name: str, b: int, m: int) -> Case:
    want = _micro_ref(b, m)
    return _case(name, lambda: fn(b, m), lambda got: [int(x) for x in got] == want, want)


def _raises_value_error(fn: Callable, name: str, *args) -> Case:
    try:
        got = fn(*args)
    except ValueError:
        return Case(name, True, "")
    except Exception as e:  # noqa: BLE001
        return Case(name, False, f"expected ValueError, raised {type(e).__name__}: {e}")
    return Case(name, False, f"expected ValueError, got {_short(got)}")


def _micro_check(fn: Callable):
    from labkit.recsys.interleave import micro_batch_edges

    yield _micro_case(fn, "the docstring's example", 10, 4)
    yield _micro_case(fn, "batch divides evenly", 2048, 4)
    yield _micro_case(fn, "remainder goes to the first micro-batches", 11, 4)
    yield _micro_case(fn, "one micro-batch", 37, 1)
    yield _micro_case(fn, "batch smaller than m", 3, 8)
    yield _micro_case(fn, "batch equal to m", 5, 5)
    yield _micro_case(fn, "empty batch", 0, 4)
    yield _raises_value_error(fn, "m = 0 raises ValueError", 16, 0)
    rng = np.random.default_rng(5)
    sizes = [(int(rng.integers(0, 5000)), int(rng.integers(1, 40))) for _ in range(60)]
    yield _first_failure("random batches", (_micro_case(fn, "random batches", b, m) for b, m in sizes))
    # labkit's interleaver splits two micro-batches equally (its uneven shares start at three).
    def same_as_labkit(got, b):
        want = sorted(np.diff(micro_batch_edges(b, 2)).tolist(), reverse=True)
        return [int(x) for x in got] == want or f"labkit's micro_batch_edges({b}, 2) gives sizes {want}"
    yield _first_failure("two micro-batches as labkit splits them",
                         (_case("two micro-batches as labkit splits them", lambda b=b: fn(b, 2),
                                lambda got, b=b: same_as_labkit(got, b)) for b in (2, 3, 7, 1000, 2049)))


def _micro_measure(fn: Callable) -> dict:
    import labkit.recsys.interleave as il
    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.recsys.model import RecModel

    specs = make_fields(8, cardinality=20_000, dims=16, zipf=1.05)
    gen = SyntheticCTR(specs, seed=6)
    batches = [gen.batch(2048, i) for i in range(10)]
    m = 4
    sizes = [int(x) for x in fn(2048, m)]
    if sum(sizes) != 2048 or min(sizes, default=0) < 1:
        raise ValueError(f"micro_batch_sizes(2048, {m}) = {sizes} is not a split of the batch; fix the checks first")
    student_edges = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    labkit_edges = il.micro_batch_edges(2048, m)

    def run(edges) -> tuple[float, float]:
        original = il.micro_batch_edges
        il.micro_batch_edges = lambda batch_size, n: edges
        try:
            with RecModel("wide_deep", specs, packing=True, interleave=m, hidden=(256, 128), seed=0) as model:
                model.train_step(batches[0])  # warm-up: numba compiles, buffers are allocated
                times, loss = [], 0.0
                for b in batches[1:]:
                    t0 = time.perf_counter()
                    loss = model.train_step(b)
                    times.append(time.perf_counter() - t0)
            return float(np.median(times)), loss
        finally:
            il.micro_batch_edges = original

    s_t, s_loss = run(student_edges)
    r_t, r_loss = run(labkit_edges)
    return {"student_step_s": s_t, "reference_step_s": r_t,
            "student_sizes": ", ".join(map(str, sizes)),
            "labkit_sizes": ", ".join(map(str, np.diff(labkit_edges).tolist())),
            "student_loss": s_loss, "reference_loss": r_loss,
            "note": "median interleaved Wide & Deep step (packed, 8 fields, 2048 samples, 4 micro-batches) with the "
                    "student's sizes and with labkit's (smaller first and last), 9 steps each"}


register(Exercise(
    id="recsys.micro_batches", system="recsys", title="Micro-batch sizes for interleaving",
    func="micro_batch_sizes", stub=_MICRO_STUB, solution=_MICRO_SOLUTION, check=_micro_check,
    measure=_micro_measure,
    goal="Interleaving overlaps one micro-batch's memory-bound lookup with another's compute-bound MLP; "
         "the split must cover the batch exactly and never leave a micro-batch empty.",
    reference="labkit.recsys.interleave:micro_batch_edges",
    forbid=("labkit.recsys.interleave", "labkit.recsys"), minutes=10, tags=("picasso", "interleaving")))


# =====================================================================================
# 3. Hot rows under a Zipf law
# =====================================================================================

_HOT_STUB = '''import numpy as np


def hot_rows(counts, row_bytes, budget):
    """Choose the rows to cache: the most looked-up rows of all tables that fit in `budget` bytes.

    counts[t][r] is how often row r of table t was looked up (numpy integer arrays); every row
    costs `row_bytes` bytes. Rank the rows of all tables together by count (a small, hot table
    may be cached whole while a huge, flat one gets only its head), keep the best
    budget // row_bytes of them, and never cache a row nobody looked up. Ties may go either way.
    Return one sorted int64 array of cached row ids per table.

    >>> hot_rows([np.array([5, 0, 9]), np.array([1, 7])], row_bytes=64, budget=200)
    [array([0, 2]), array([1])]
    """
'''

_HOT_SOLUTION = '''    k = int(budget // row_bytes)
    sizes = [len(c) for c in counts]
    if not counts:
        return []
    flat = np.concatenate([np.asarray(c, dtype=np.int64) for c in counts])
    k = min(k, int((flat > 0).sum()))
    top = np.argsort(-flat, kind="stable")[:k]
    edges = np.cumsum([0] + sizes)
    return [np.sort(top[(top >= a) & (top < b)] - a).astype(np.int64) for a, b in zip(edges[:-1], edges[1:])]
'''

_hot_ref = _compile(_HOT_STUB, _HOT_SOLUTION, "hot_rows")


def _hot_ok(counts, row_bytes, budget) -> Callable[[Any], Any]:
    """A plan is right when it is valid, fits, and caches as many lookups as labkit's hot_rows plan."""
    from labkit.core.cacheplan import hot_rows as labkit_hot_rows
    total = sum(len(c) for c in counts)
    cap = min(int(budget // row_bytes), total)
    ref_rows = labkit_hot_rows([np.asarray(c, np.int64) for c in counts], cap).rows if counts else []
    ref_hits = sum(int(np.asarray(c, np.int64)[r].sum()) for c, r in zip(counts, ref_rows))
    ref_n = sum(len(r) for r in ref_rows)

    def ok(got):
        got = list(got)
        if len(got) != len(counts):
            return f"one array per table: {len(counts)} arrays"
        hits = n = 0
        for t, (c, r) in enumerate(zip(counts, got)):
            r = np.asarray(r)
            if r.size and (r.dtype.kind not in "iu" or r.min() < 0 or r.max() >= len(c)):
                return f"table {t}: row ids must be integers in [0, {len(c)})"
            if r.size != np.unique(r).size or not np.all(np.diff(r) > 0):
                return f"table {t}: row ids must be sorted and distinct"
            if r.size and (np.asarray(c)[r] == 0).any():
                return f"table {t}: caches a row nobody looked up"
            hits += int(np.asarray(c, np.int64)[r].sum())
            n += r.size
        if n * row_bytes > budget:
            return f"{n} rows of {row_bytes} B do not fit in {budget} B"
        if hits != ref_hits or n != ref_n:
            return f"labkit's plan caches {ref_n} rows serving {ref_hits} lookups; this one {n} rows, {hits} lookups"
        return True
    return ok


def _hot_case(fn: Callable, name: str, counts, row_bytes: int, budget: int) -> Case:
    c = copy.deepcopy(counts)
    return _case(name, lambda: fn(c, row_bytes, budget), _hot_ok(counts, row_bytes, budget))


def _zipf_counts(rng: np.random.Generator, sizes, lookups: int, s: float = 1.05) -> list[np.ndarray]:
    from labkit.recsys.data import ZipfSampler
    out = []
    for i, n in enumerate(sizes):
        z = ZipfSampler(int(n), s, [int(rng.integers(1 << 30)), i])
        out.append(np.bincount(z.sample(rng, lookups), minlength=int(n)).astype(np.int64))
    return out


def _hot_check(fn: Callable):
    a = np.array([5, 0, 9])
    b = np.array([1, 7])
    yield _hot_case(fn, "the docstring's example", [a, b], 64, 200)
    yield _hot_case(fn, "budget 0", [a, b], 64, 0)
    yield _hot_case(fn, "budget below one row", [a, b], 64, 63)
    yield _hot_case(fn, "no tables", [], 64, 1 << 20)
    yield _hot_case(fn, "one table", [np.array([3, 1, 4, 1, 5, 9, 2, 6])], 16, 48)
    yield _hot_case(fn, "rows never looked up are not cached", [np.array([0, 4, 0, 0]), np.array([0, 0, 2])], 8,
                    1 << 20)
    yield _hot_case(fn, "a small hot table is cached whole",
                    [np.array([100, 90, 80, 70]), np.ones(1000, np.int64) * 3], 64, 4 * 64)
    yield _hot_case(fn, "budget larger than every row", [a, b, np.array([2, 2])], 4, 10_000)
    yield _hot_case(fn, "an empty table", [np.zeros(0, np.int64), b], 8, 8)
    rng = np.random.default_rng(13)
    inputs = [(_zipf_counts(rng, rng.integers(1, 3000, int(rng.integers(1, 6))), int(rng.integers(1, 20_000))),
               int(rng.choice([4, 64, 128])), int(rng.integers(0, 200_000))) for _ in range(15)]
    yield _first_failure("Zipf counts, as labkit's hot_rows plans",
                         (_hot_case(fn, "Zipf counts", c, rb, bud) for c, rb, bud in inputs))


def _plan(rows: list[np.ndarray], sizes: list[int]):
    """A labkit CachePlan naming `rows` (one array per packed table)."""
    from labkit.core.cacheplan import CachePlan
    edges = np.cumsum([0] + list(sizes))
    order = np.concatenate([np.asarray(r, np.int64) + e for r, e in zip(rows, edges[:-1])] or [np.zeros(0, np.int64)])
    return CachePlan("student", order, np.broadcast_to(np.int64(1), (int(edges[-1]),)), "rows", groups=edges)


def _cached_model(specs):
    from labkit.recsys.cache import SlowTier
    from labkit.recsys.packing import PackedEmbeddings
    from labkit.recsys.tables import tables_for
    return PackedEmbeddings(tables_for(specs), optimizer="sgd", slow_tier=SlowTier.create())


def _hot_measure(fn: Callable) -> dict:
    from labkit.core.cacheplan import hot_rows as labkit_hot_rows
    from labkit.recsys.data import SyntheticCTR, criteo_like_cardinalities, make_fields

    specs = make_fields(12, cardinality=criteo_like_cardinalities(12, max_rows=100_000), dims=16, zipf=1.05)
    gen = SyntheticCTR(specs, seed=8)
    warm = [gen.batch(2048, i) for i in range(8)]
    held_out = [gen.batch(2048, 100 + i) for i in range(8)]
    stage = _cached_model(specs)
    try:
        counts = stage.count_ids(warm)
        sizes = [len(c) for c in counts]
        row_bytes = 16 * 4
        out: dict[str, Any] = {}
        for pct in (1, 5):
            budget = int(sum(sizes) * pct / 100) * row_bytes
            t0 = time.perf_counter()
            rows = fn([c.copy() for c in counts], row_bytes, budget)
            out[f"student_plan_s_{pct}pct"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = labkit_hot_rows(counts, budget // row_bytes)
            out[f"reference_plan_s_{pct}pct"] = time.perf_counter() - t0
            for who, plan in (("student", _plan(list(rows), sizes)), ("reference", ref)):
                stage.plan_cache(plan)
                for b in held_out:
                    stage.lookup(b)
                out[f"{who}_hit_rate_{pct}pct"] = float(stage.hit_rate)
        out["note"] = ("12 Criteo-like fields, Zipf 1.05: plans from 8 warm-up batches filled into labkit's hot-row "
                       "cache; hit rates measured by the cache on 8 held-out batches, at 1% and 5% of all rows")
        return out
    finally:
        stage.close()


register(Exercise(
    id="recsys.hot_rows", system="recsys", title="Hot rows under a Zipf law",
    func="hot_rows", stub=_HOT_STUB, solution=_HOT_SOLUTION, check=_hot_check, measure=_hot_measure,
    goal="Under a Zipf law a small head of rows serves most lookups; one global ranking across tables puts "
         "a byte budget where the hits are.",
    reference="labkit.core.cacheplan:hot_rows",
    forbid=("labkit.core.cacheplan", "labkit.recsys"), minutes=20, tags=("picasso", "cache")))


# =====================================================================================
# 4. The hit rate of a plan
# =====================================================================================

_RATE_STUB = '''import numpy as np


def plan_hit_rate(cached, lookups):
    """Return the share of lookups a cache plan serves.

    cached[t] holds the row ids of table t that the cache keeps; lookups[t] the ids table t was
    asked for over some batches (a row asked for twice counts twice). Return hits / lookups
    over all tables together (a float), or 0.0 when nothing was looked up.

    >>> plan_hit_rate([np.array([0, 2]), np.array([1])], [np.array([0, 0, 1, 2]), np.array([1, 3])])
    0.6666666666666666
    """
'''

_RATE_SOLUTION = '''    hits = total = 0
    for rows, ids in zip(cached, lookups):
        ids = np.asarray(ids)
        hits += int(np.isin(ids, np.asarray(rows)).sum())
        total += ids.size
    return hits / total if total else 0.0
'''

_rate_ref = _compile(_RATE_STUB, _RATE_SOLUTION, "plan_hit_rate")


def _rate_case(fn: Callable, name: str, cached, lookups, want: float | None = None) -> Case:
    want = _rate_ref(cached, lookups) if want is None else want
    c, lk = copy.deepcopy(cached), copy.deepcopy(lookups)
    return _case(name, lambda: fn(c, lk), lambda got: math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-12),
                 want)


def _lookups_per_table(stage, batches) -> list[np.ndarray]:
    """The packed row ids each packed table was asked for over `batches` (row offsets added)."""
    out = []
    for g in stage.groups:
        ids = []
        for b in batches:
            for f, off in zip(g.feature, g.row_off):
                ids.append(b.field_ids(int(f))[0] + off)
        out.append(np.concatenate(ids) if ids else np.zeros(0, np.int64))
    return out


def _rate_check(fn: Callable):
    from labkit.core.cacheplan import hot_fraction
    from labkit.recsys.data import SyntheticCTR, make_fields

    a = [np.array([0, 2]), np.array([1])]
    yield _rate_case(fn, "the docstring's example", a, [np.array([0, 0, 1, 2]), np.array([1, 3])], 4 / 6)
    yield _rate_case(fn, "nothing looked up", a, [np.zeros(0, np.int64), np.zeros(0, np.int64)], 0.0)
    yield _rate_case(fn, "no tables", [], [], 0.0)
    yield _rate_case(fn, "empty cache", [np.zeros(0, np.int64)], [np.array([1, 2, 3])], 0.0)
    yield _rate_case(fn, "everything cached", [np.arange(5)], [np.array([4, 0, 0, 3])], 1.0)
    yield _rate_case(fn, "repeated lookups count each time", [np.array([7])], [np.array([7, 7, 7, 1])], 0.75)
    yield _rate_case(fn, "tables weigh by their lookups",
                     [np.array([0]), np.zeros(0, np.int64)], [np.array([0]), np.array([1, 2, 3, 4, 5, 6, 7])], 1 / 8)
    yield _rate_case(fn, "a table with no lookups", [np.array([0, 1]), np.array([3])],
                     [np.zeros(0, np.int64), np.array([3, 4])], 0.5)
    rng = np.random.default_rng(17)
    inputs = []
    for _ in range(20):
        n_t = int(rng.integers(1, 5))
        sizes = rng.integers(1, 500, n_t)
        inputs.append(([np.unique(rng.integers(0, s, int(rng.integers(0, s + 1)))) for s in sizes],
                       [rng.integers(0, s, int(rng.integers(0, 300))) for s in sizes]))
    yield _first_failure("random plans", (_rate_case(fn, "random plans", c, lk) for c, lk in inputs))
    # labkit's hot-row cache counts its own hits: the student's estimate must match them.
    specs = make_fields(4, cardinality=[500, 3000, 50, 8000], dims=[8, 8, 16, 16], hotness=[1, 2, 1, 3])
    gen = SyntheticCTR(specs, seed=2)
    stage = _cached_model(specs)
    try:
        plan = hot_fraction(stage.count_ids([gen.batch(256, i) for i in range(4)]), 0.05)
        stage.plan_cache(plan)
        held = [gen.batch(256, 50 + i) for i in range(3)]
        for b in held:
            stage.lookup(b)
        want = float(stage.hit_rate)
        yield _rate_case(fn, "agrees with labkit's hot-row cache counters", plan.rows,
                         _lookups_per_table(stage, held), want)
    finally:
        stage.close()


def _rate_measure(fn: Callable) -> dict:
    from labkit.core.cacheplan import hot_fraction
    from labkit.recsys.data import SyntheticCTR, criteo_like_cardinalities, make_fields

    specs = make_fields(12, cardinality=criteo_like_cardinalities(12, max_rows=100_000), dims=16, zipf=1.05)
    gen = SyntheticCTR(specs, seed=9)
    stage = _cached_model(specs)
    try:
        plan = hot_fraction(stage.count_ids([gen.batch(2048, i) for i in range(8)]), 0.02)
        stage.plan_cache(plan)
        held = [gen.batch(2048, 100 + i) for i in range(8)]
        t0 = time.perf_counter()
        for b in held:
            stage.lookup(b)
        t_cache = time.perf_counter() - t0
        lookups = _lookups_per_table(stage, held)
        t0 = time.perf_counter()
        got = float(fn(plan.rows, lookups))
        t1 = time.perf_counter()
        ref = _rate_ref(plan.rows, lookups)
        t2 = time.perf_counter()
        return {"student_hit_rate": got, "reference_hit_rate": ref, "labkit_cache_hit_rate": float(stage.hit_rate),
                "student_s": t1 - t0, "reference_s": t2 - t1, "labkit_lookups_s": t_cache,
                "lookups": int(sum(x.size for x in lookups)),
                "note": "a 2% hot-row plan from 8 warm-up batches, judged on 8 held-out batches (12 Criteo-like "
                        "fields): the student's estimate beside the counters of labkit's cache while it served them"}
    finally:
        stage.close()


register(Exercise(
    id="recsys.plan_hit_rate", system="recsys", title="The hit rate of a cache plan",
    func="plan_hit_rate", stub=_RATE_STUB, solution=_RATE_SOLUTION, check=_rate_check, measure=_rate_measure,
    goal="A plan is judged on lookups it did not see: count hits per lookup (repeats included) over all tables, "
         "so busy tables weigh more.",
    reference="labkit.recsys.cache:hit_rate",
    forbid=("labkit.recsys.cache", "labkit.recsys"), minutes=10, tags=("picasso", "cache")))
