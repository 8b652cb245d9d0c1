"""CaliEX exercises: Belady's feature cache, the tuner's split of memory, and read plans.

A student counts the misses of Belady's replacement over a superbatch of pre-sampled mini-batches
(Ginex's feature cache, CaliEX's baseline), picks the split of the cache budget between topology
and features from the tuner's predicted cost curve, and plans the disk reads a batch's pages need
(sorted, deduplicated, gaps read through up to a limit, requests capped). The checks compare
against :mod:`labkit.disk` and the direct-I/O planner of :mod:`labkit.core.directio`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np

from labkit.course.exercise import Exercise, register
# The case runner is shared by every system's exercises (it lives with the first of them).
from labkit.course.exercises._checks import best_time as _best_time
from labkit.course.exercises._checks import judged as _case
from labkit.course.exercises._checks import short as _short


def _rmat_batches(scale: int = 15, batches: int = 16, batch_size: int = 256, fanouts=(10, 5)):
    """Pre-sampled mini-batches of an in-memory R-MAT graph, as CaliEX's pre-sampling gives them."""
    from labkit.disk.sampler import NeighborSampler
    from labkit.disk.store import MemoryTopology
    from labkit.graph.csr import build_csr
    from labkit.graph.rmat import RMatParams, rmat_edges
    src, dst = rmat_edges(RMatParams(scale=scale, edge_factor=8))
    n = 1 << scale
    csc = build_csr(dst, src, n)
    sampler = NeighborSampler(MemoryTopology(csc.indptr, csc.indices), list(fanouts), seed=0)
    seeds = np.random.default_rng(0).permutation(n)
    out = sampler.sample_group([seeds[i * batch_size:(i + 1) * batch_size] for i in range(batches)],
                               list(range(batches)))
    return out, csc, np.bincount(src, minlength=n)


# --- 1. Belady over a superbatch --------------------------------------------------------------------

BELADY_STUB = '''import numpy as np


def belady_misses(batches, capacity):
    """Return how many feature rows a Belady cache of `capacity` rows misses over a superbatch.

    `batches` is the superbatch: a list of mini-batches, each an int array of the distinct node
    ids whose feature rows it gathers, in order. The cache starts empty. For each mini-batch b:
      1. every id of b not in the cache is a miss (its row is read from disk);
      2. then the cache keeps, among the rows it held and the rows b just used, the `capacity`
         whose next use (the first later mini-batch that needs them) is soonest. Rows not
         needed again in the superbatch are kept only while there is room.
    Ties do not change the count. A capacity of 0 caches nothing.

    >>> belady_misses([np.array([1]), np.array([2]), np.array([3]), np.array([1]), np.array([2])], 2)
    3
    """
'''

BELADY_SOLUTION = '''    never = 1 << 62
    ids = [np.asarray(b, np.int64).tolist() for b in batches]
    # The next use of each id of each batch, found by one pass from the end.
    next_use, last = [None] * len(ids), {}
    for b in range(len(ids) - 1, -1, -1):
        next_use[b] = [last.get(v, never) for v in ids[b]]
        for v in ids[b]:
            last[v] = b
    held, misses = {}, 0
    for b, nodes in enumerate(ids):
        misses += sum(1 for v in nodes if v not in held)
        if capacity <= 0:
            continue
        held.update(zip(nodes, next_use[b]))
        if len(held) > capacity:
            keys = np.fromiter(held.keys(), np.int64, len(held))
            when = np.fromiter(held.values(), np.int64, len(held))
            keep = np.argpartition(when, capacity - 1)[:capacity]
            held = dict(zip(keys[keep].tolist(), when[keep].tolist()))
    return misses
'''


def _ref_belady(batches, capacity: int) -> int:
    """Misses of labkit's BeladyFeatureCache over `batches` (one row of one float per node)."""
    from labkit.core.memory import MemoryBudget
    from labkit.disk.iocache import BeladyFeatureCache
    batches = [np.asarray(b, np.int64) for b in batches]
    n = 1 + max((int(b.max()) for b in batches if b.size), default=0)
    cache = BeladyFeatureCache(capacity, n, 1, np.float32, MemoryBudget(1 << 30))
    try:
        cache.start_superbatch(batches)
        misses = 0
        for b in batches:
            misses += int(np.count_nonzero(cache.lookup(b) < 0))
            cache.update(b, np.zeros((b.size, 1), np.float32))
        return misses
    finally:
        cache.release()


def _judge_count(want: int, what: str):
    def judge(got):
        if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
            return f"expected an int ({want} {what}), got {_short(got)}"
        return None if int(got) == want else f"expected {want} {what}, got {int(got)}"
    return judge


def _zipf_batches(rng, n: int, batches: int, size: int):
    out = []
    for _ in range(batches):
        ids = np.unique(np.minimum(rng.zipf(1.3, size) - 1, n - 1))
        out.append(rng.permutation(ids))
    return out


def check_belady(fn):
    rng = np.random.default_rng(17)
    a = lambda *v: np.array(v, np.int64)  # noqa: E731
    seq = lambda *v: [a(x) for x in v]  # noqa: E731
    cases = [("docstring example", seq(1, 2, 3, 1, 2), 2),
             ("no batches", [], 4),
             ("empty mini-batches", [a(), a(1, 2), a(), a(1)], 2),
             ("cache size 0: every row misses", [a(1, 2), a(1, 2), a(2, 3)], 0),
             ("cache holds everything: each row misses once", [a(5, 1), a(1, 2), a(2, 5), a(9)], 100),
             ("evicts the row needed latest (LRU would not)", seq(1, 2, 3, 1, 2, 3), 2),
             ("rows never needed again leave first", [a(1, 2), a(3), a(1), a(2)], 2),
             ("a fresh row can displace a held one", [a(1), a(2), a(2), a(2), a(1)], 1),
             ("batches larger than the cache", [a(0, 1, 2, 3), a(2, 3, 4, 5), a(0, 5, 6)], 2)]
    for i, (n, cap) in enumerate(((50, 10), (200, 40), (1000, 100))):
        cases.append((f"random superbatch {i + 1} (Zipf ids, {cap} rows)", _zipf_batches(rng, n, 12, 60), cap))
    for name, batches, cap in cases:
        want = _ref_belady(batches, cap)
        yield _case(name, fn, ([b.copy() for b in batches], cap), _judge_count(want, "misses"))


def measure_belady(fn) -> dict:
    batches, _, _ = _rmat_batches()
    ids = [b.n_id.astype(np.int64) for b in batches]
    accesses = sum(b.size for b in ids)
    distinct = np.unique(np.concatenate(ids)).size
    cap = distinct // 5  # a fifth of the rows the superbatch touches
    t0 = time.perf_counter()
    got = int(fn(ids, cap))
    ts = time.perf_counter() - t0
    t0 = time.perf_counter()
    want = _ref_belady(ids, cap)
    tr = time.perf_counter() - t0
    # A static cache of the same size holding the rows this superbatch gathers most often (an oracle's
    # static plan), for comparison: what replacement buys over the best fixed set.
    counts = np.bincount(np.concatenate(ids))
    static = np.argsort(-counts, kind="stable")[:cap]
    held = np.zeros(counts.size, bool)
    held[static] = True
    static_miss = int(sum(np.count_nonzero(~held[b]) for b in ids))
    # And least-recently-used replacement of the same size, row by row in batch order.
    lru, lru_miss = OrderedDict(), 0
    for b in ids:
        for v in b.tolist():
            if v in lru:
                lru.move_to_end(v)
            else:
                lru_miss += 1
                lru[v] = True
                if len(lru) > cap:
                    lru.popitem(last=False)
    return {"student_s": ts, "reference_s": tr, "student_misses": got, "reference_misses": want,
            "accesses": int(accesses), "capacity_rows": int(cap),
            "belady_hit_rate": 1 - want / accesses, "static_hit_rate": 1 - static_miss / accesses,
            "lru_hit_rate": 1 - lru_miss / accesses,
            "note": "16 pre-sampled 2-hop mini-batches (256 seeds, fanouts 10, 5) of an R-MAT graph of 2^15 "
                    "nodes; a cache of a fifth of the rows they touch, beside LRU and the best static set"}


# --- 2. the split of memory between topology and features -------------------------------------------

SPLIT_STUB = '''def best_split(curve, tolerance=0.01):
    """Return the topology share f CaliEX's tuner picks from its predicted cost curve.

    `curve` is a list of predictions, one per share f of the cache given to topology (the rest
    to features), each a dict with at least "f", "total" (predicted seconds per mini-batch),
    "sample", "gather" and "cpu_other" (seconds the sampling and gathering stages and their
    CPU take). Shares whose total is within `tolerance` of the lowest (total <= lowest *
    (1 + tolerance)) are equal as far as the model can tell; among them pick the one with the
    least sample + gather + cpu_other, and among those the smallest f. An empty curve is an
    error: raise ValueError.

    >>> best_split([{"f": 0.0, "total": 2.0, "sample": 1, "gather": 1, "cpu_other": 0},
    ...             {"f": 0.5, "total": 1.0, "sample": 1, "gather": 0, "cpu_other": 0}])
    0.5
    """
'''

SPLIT_SOLUTION = '''    if not curve:
        raise ValueError("curve is empty; expected at least one prediction")
    lowest = min(p["total"] for p in curve)
    near = [p for p in curve if p["total"] <= lowest * (1 + tolerance)]
    pick = min(near, key=lambda p: (p["sample"] + p["gather"] + p["cpu_other"], p["f"]))
    return pick["f"]
'''


def _ref_split(curve, tolerance: float):
    from labkit.disk.tuner import Tuner
    return Tuner.best(SimpleNamespace(curve=lambda fs: curve), None, tolerance)[0]


def _point(f, total, sample=0.0, gather=0.0, cpu=0.0):
    return {"f": f, "total": total, "sample": sample, "gather": gather, "cpu_other": cpu}


def _raises_value_error(fn, *args):
    try:
        got = fn(*args)
    except ValueError:
        return "ValueError"
    return got


def check_split(fn):
    rng = np.random.default_rng(23)
    P = _point
    cases = [("docstring example", [P(0.0, 2.0, 1, 1), P(0.5, 1.0, 1, 0)], 0.01),
             ("a single point", [P(0.3, 5.0, 1, 1, 1)], 0.01),
             ("a clear minimum in the middle", [P(f / 4, t, 1, 1) for f, t in enumerate((5, 3, 1, 2, 4))], 0.01),
             ("flat curve: least disk and CPU wins", [P(0.0, 1.0, 3, 3, 1), P(0.5, 1.005, 1, 1, 1),
                                                      P(1.0, 1.0, 2, 2, 2)], 0.01),
             ("ties on everything: smaller f wins", [P(0.75, 1.0, 1, 1), P(0.25, 1.0, 1, 1), P(0.5, 1.0, 1, 1)], 0.01),
             ("tolerance 0: the strict minimum", [P(0.0, 1.0, 3, 3), P(0.5, 1.001, 0, 0)], 0.0),
             ("just outside the tolerance", [P(0.0, 1.0, 3, 3), P(0.5, 1.02, 0, 0)], 0.01),
             ("unsorted shares", [P(1.0, 2.0, 1, 1), P(0.0, 3.0, 1, 1), P(0.5, 1.5, 1, 1)], 0.01)]
    for i in range(3):
        fs = np.linspace(0, 1, 21)
        total = 1 + (fs - rng.uniform(0.2, 0.8)) ** 2 + rng.uniform(0, 0.02, fs.size)
        curve = [P(float(f), float(t), *map(float, rng.uniform(0, 1, 3))) for f, t in zip(fs, total)]
        cases.append((f"random U-shaped curve {i + 1}", curve, 0.01))
    for name, curve, tol in cases:
        want = _ref_split(curve, tol)
        yield _case(name, fn, ([dict(p) for p in curve], tol),
                    lambda got, want=want: None if isinstance(got, (int, float)) and not isinstance(got, bool)
                    and abs(got - want) < 1e-12 else f"expected f = {want}, got {_short(got)}")
    yield _case("an empty curve raises ValueError", lambda: _raises_value_error(fn, [], 0.01), (),
                lambda got: None if got == "ValueError" else f"expected ValueError, returned {_short(got)}")


def measure_split(fn) -> dict:
    from labkit.core import cacheplan
    from labkit.disk.costmodel import DiskModel
    from labkit.disk.tuner import StageProfile, Tuner
    batches, csc, out_deg = _rmat_batches()
    row_bytes = 128
    topo = cacheplan.lists_by_degree(out_deg, csc.indptr)
    feat = cacheplan.rows_by_degree(out_deg, row_bytes)
    disk = DiskModel(seconds_per_request=100e-6, bytes_per_second=1e9)
    profile = StageProfile(sample_cpu=1e-3, gather_cpu_per_row=2e-7, train=2e-3, topology_disk=disk,
                           feature_disk=disk)
    cache = int(0.3 * (csc.indices.size * 4 + out_deg.size * row_bytes))
    tuner = Tuner(batches, csc.indptr, row_bytes, topo, feat, profile, cache)
    f_ref, curve = tuner.best()
    t0 = time.perf_counter()
    f_got = float(fn([dict(p) for p in curve], 0.01))
    ts = time.perf_counter() - t0
    t0 = time.perf_counter()
    _ref_split(curve, 0.01)
    tr = time.perf_counter() - t0
    at = {round(p["f"], 6): p["total"] for p in curve}
    return {"student_s": ts, "reference_s": tr, "student_f": f_got, "reference_f": float(f_ref),
            "student_predicted_ms": at.get(round(f_got, 6), float("nan")) * 1e3,
            "reference_predicted_ms": at[round(float(f_ref), 6)] * 1e3,
            "all_features_ms": curve[0]["total"] * 1e3, "all_topology_ms": curve[-1]["total"] * 1e3,
            "note": "labkit's tuner over 16 pre-sampled batches of an R-MAT graph of 2^15 nodes, a cache of 30% "
                    "of topology + features; predicted ms per mini-batch at each choice"}


# --- 3. a read plan ----------------------------------------------------------------------------------

PLAN_STUB = '''import numpy as np


def plan_reads(pages, gap_pages, max_run_pages):
    """Return (first_page, num_pages) of each disk request that reads every page in `pages`.

    `pages` (int array) are the page numbers a batch needs, unsorted, possibly repeated.
    Walk the distinct pages in increasing order. The first page starts a request. A later
    page p joins the current request (which then ends at p, reading the pages between) when
    p - end - 1 <= gap_pages (`end` being the request's last page so far) and the request
    would span at most max_run_pages pages (p - first + 1 <= max_run_pages); otherwise p
    starts a new request. Return two int64 arrays of equal length, in page order.

    >>> plan_reads(np.array([9, 2, 3, 3, 5, 20]), 1, 8)
    (array([ 2,  9, 20]), array([4, 1, 1]))
    """
'''

PLAN_SOLUTION = '''    pages = np.unique(np.asarray(pages, np.int64))
    firsts, counts = [], []
    first = end = None
    for p in pages.tolist():
        if first is not None and p - end - 1 <= gap_pages and p - first + 1 <= max_run_pages:
            end = p
            continue
        if first is not None:
            firsts.append(first)
            counts.append(end - first + 1)
        first = end = p
    if first is not None:
        firsts.append(first)
        counts.append(end - first + 1)
    return np.array(firsts, np.int64), np.array(counts, np.int64)
'''


def _ref_reads(pages, gap: int, cap: int):
    from labkit.core.directio.planning import PAGE, _plan
    pages = np.asarray(pages, np.int64)
    starts = pages * PAGE
    lengths = np.full(pages.size, PAGE, np.int64)
    run_page, run_pages, _, _ = _plan(starts, lengths, np.argsort(starts, kind="stable"), PAGE, gap, cap)
    return run_page.astype(np.int64), run_pages.astype(np.int64)


def _judge_reads(want):
    wf, wn = want

    def judge(got):
        if not (isinstance(got, tuple) and len(got) == 2):
            return f"expected a tuple (first_page, num_pages), got {_short(got)}"
        f, n = (np.asarray(x).astype(np.int64).ravel() for x in got)
        if f.size != wf.size or n.size != wn.size:
            return f"expected {wf.size} requests, got {f.size} first pages and {n.size} lengths"
        bad = np.flatnonzero((f != wf) | (n != wn))
        if bad.size:
            i = int(bad[0])
            return f"request {i}: expected pages {int(wf[i])}..{int(wf[i] + wn[i] - 1)}, got {int(f[i])}..{int(f[i] + n[i] - 1)}"
        return None
    return judge


def check_reads(fn):
    rng = np.random.default_rng(29)
    a = lambda *v: np.array(v, np.int64)  # noqa: E731
    cases = [("docstring example", a(9, 2, 3, 3, 5, 20), 1, 8),
             ("no pages", a(), 4, 64),
             ("duplicates read once", a(7, 7, 7, 8, 8), 0, 64),
             ("unsorted pages", a(30, 10, 20, 11), 0, 64),
             ("gap 0: only adjacent pages merge", a(1, 2, 4, 5, 6, 9), 0, 64),
             ("a hole of exactly gap_pages is read through", a(10, 13, 17), 2, 64),
             ("a hole one page wider than gap_pages is not", a(10, 14), 2, 64),
             ("requests capped at max_run_pages", np.arange(0, 40), 0, 16),
             ("max_run_pages 1: one request per page", a(3, 4, 5, 9), 8, 1),
             ("a sweep (huge gap) reads first to last page", a(5, 1000, 300, 2), 1 << 40, 1 << 30)]
    for i, (n, gap, cap) in enumerate(((2000, 0, 64), (2000, 3, 64), (5000, 25, 256))):
        pages = rng.integers(0, n * 4, n)
        cases.append((f"random pages {i + 1} (gap {gap}, cap {cap})", pages, gap, cap))
    for name, pages, gap, cap in cases:
        yield _case(name, fn, (pages.copy(), gap, cap), _judge_reads(_ref_reads(pages, gap, cap)))


def measure_reads(fn) -> dict:
    from labkit.core.directio.planning import PAGE, SWEEP
    from labkit.disk.costmodel import DiskModel
    rng = np.random.default_rng(0)
    # The pages a batch's feature misses touch: 50k rows of 512 bytes in a file of 2M rows.
    rows = rng.choice(2_000_000, 50_000, replace=False)
    pages = rows * 512 // PAGE
    model = DiskModel(seconds_per_request=80e-6, bytes_per_second=2e9)
    out = {}
    for label, gap, cap in (("random", 0, 64), ("coalesced", max(1, model.break_even_gap), 64), ("sweep", SWEEP, 256)):
        f, n = fn(pages, gap, cap)
        wf, wn = _ref_reads(pages, gap, cap)
        n = np.asarray(n, np.int64)
        out[f"{label}_requests_student"] = int(n.size)
        out[f"{label}_requests_reference"] = int(wn.size)
        out[f"{label}_predicted_ms"] = model.cost(int(n.size), int(n.sum()) * PAGE) * 1e3
    out["student_s"] = _best_time(lambda: fn(pages, 0, 64), repeat=2)
    out["reference_s"] = _best_time(lambda: _ref_reads(pages, 0, 64), repeat=2)
    out["note"] = ("50k feature rows of 512 B out of 2M, three plans (page-sharing only, gaps up to the "
                   "break-even gap read through, one sweep); predicted ms from an 80 us, 2 GB/s disk model")
    return out


register(Exercise(
    id="disk.belady_misses", system="disk", title="Belady's cache over a superbatch", func="belady_misses",
    stub=BELADY_STUB, solution=BELADY_SOLUTION, check=check_belady, measure=measure_belady,
    goal="Simulate optimal replacement from pre-sampled batches and compare it with a static cache.",
    reference="labkit.disk.iocache:BeladyFeatureCache", forbid=("labkit.disk", "labkit.core.cacheplan"),
    minutes=25, tags=("cache", "caliex")))

register(Exercise(
    id="disk.best_split", system="disk", title="Split the cache between topology and features", func="best_split",
    stub=SPLIT_STUB, solution=SPLIT_SOLUTION, check=check_split, measure=measure_split,
    goal="Pick the memory split from a predicted cost curve, preferring the cheapest plan among near-ties.",
    reference="labkit.disk.tuner:Tuner.best", forbid=("labkit.disk",), minutes=10,
    tags=("tuner", "caliex")))

register(Exercise(
    id="disk.plan_reads", system="disk", title="Merge page requests into sorted reads", func="plan_reads",
    stub=PLAN_STUB, solution=PLAN_SOLUTION, check=check_reads, measure=measure_reads,
    goal="Turn the pages a batch needs into few large reads, and see requests trade against bytes.",
    reference="labkit.core.directio.planning:_plan", forbid=("labkit.disk", "labkit.core.directio"), minutes=15,
    tags=("io", "caliex")))
