"""AliGraph exercises: the importance cache, O(k) neighbour sampling and the CSR they run on.

A student computes AliGraph's importance Imp(v) = D_in(v) / D_out(v) (k = 1), fills a cache of
neighbour lists from it under a byte budget, draws k of n neighbours without replacement in O(k)
(Floyd's algorithm, what labkit's sampler does), and builds the deduplicated, sorted CSR every
operator reads. The checks compare against :mod:`labkit.graph`.
"""

from __future__ import annotations

import itertools

import numpy as np

from labkit.course.exercise import Exercise, register
# The case runner is shared by every system's exercises (it lives with the first of them).
from labkit.course.exercises._checks import best_time as _best_time
from labkit.course.exercises._checks import judged as _case
from labkit.course.exercises._checks import short as _short


def _rmat(scale: int, edge_factor: int = 8, seed: int = 0):
    from labkit.graph.rmat import RMatParams, rmat_edges
    src, dst = rmat_edges(RMatParams(scale=scale, edge_factor=edge_factor, seed=seed))
    return src.astype(np.int64), dst.astype(np.int64), 1 << scale


def _random_edges(rng: np.random.Generator, n: int, m: int):
    # Skewed ids, so some vertices get many edges and some none.
    return (np.minimum(rng.zipf(1.5, m) - 1, n - 1).astype(np.int64),
            rng.integers(0, n, m).astype(np.int64))


# --- 1. importance ------------------------------------------------------------------------------

IMP_STUB = '''import numpy as np


def importance(src, dst, num_nodes):
    """Return AliGraph's importance Imp(v) = D_in(v) / D_out(v) of every vertex (float64).

    Edges are src[i] -> dst[i] (int arrays; parallel edges and self-loops count like any other
    edge). A vertex's out-neighbour list is read about as often as it is reached (its
    in-degree) and costs memory in proportion to its out-degree. Where D_out(v) = 0 < D_in(v)
    the importance is inf; where D_in(v) = 0 it is 0.

    >>> importance(np.array([0, 0, 1]), np.array([1, 2, 2]), 4)
    array([ 0.,  1., inf,  0.])
    """
'''

IMP_SOLUTION = '''    d_out = np.bincount(np.asarray(src, np.int64), minlength=num_nodes).astype(np.float64)
    d_in = np.bincount(np.asarray(dst, np.int64), minlength=num_nodes).astype(np.float64)
    imp = np.zeros(num_nodes, np.float64)
    has_out = d_out > 0
    imp[has_out] = d_in[has_out] / d_out[has_out]
    imp[~has_out & (d_in > 0)] = np.inf
    return imp
'''


def _ref_importance(src, dst, n):
    from labkit.graph.csr import build_csc, build_csr
    from labkit.graph.importance import importance
    return importance(build_csr(src, dst, n), build_csc(src, dst, n), 1)


def _judge_array(want: np.ndarray, what: str = "vertex"):
    def judge(got):
        g = np.asarray(got, np.float64)
        if g.shape != want.shape:
            return f"expected shape {want.shape} (one value per {what}), got {g.shape}"
        bad = np.flatnonzero(~np.isclose(g, want, rtol=1e-9, atol=0.0))
        if bad.size:
            i = int(bad[0])
            return f"{what} {i}: expected {want[i]!r}, got {g[i]!r}"
        return None
    return judge


def check_importance(fn):
    rng = np.random.default_rng(3)
    e = lambda *a: np.array(a, np.int64)  # noqa: E731
    cases = [("docstring example", e(0, 0, 1), e(1, 2, 2), 4),
             ("empty edge list", e(), e(), 5),
             ("degree-0 vertices score 0", e(1, 2), e(2, 1), 6),
             ("sinks (no out-edges) score inf", e(0, 1, 2), e(3, 3, 3), 4),
             ("sources (no in-edges) score 0", e(0, 0, 0, 1), e(1, 2, 3, 0), 4),
             ("parallel edges count twice", e(0, 0, 0, 1), e(1, 1, 1, 0), 2),
             ("self-loops count both ways", e(0, 0, 1), e(0, 1, 1), 3)]
    for i in range(3):
        s, d = _random_edges(rng, 200, 1000)
        cases.append((f"random skewed graph {i + 1}", s, d, 200))
    for name, s, d, n in cases:
        yield _case(name, fn, (s.copy(), d.copy(), n), _judge_array(_ref_importance(s, d, n)))


def measure_importance(fn) -> dict:
    from labkit.graph.csr import build_csc, build_csr
    from labkit.graph.importance import importance
    src, dst, n = _rmat(16)
    csr, csc = build_csr(src, dst, n), build_csc(src, dst, n)
    want = importance(csr, csc, 1)
    got = np.asarray(fn(src, dst, n), np.float64)
    ts = _best_time(lambda: fn(src, dst, n))
    tr = _best_time(lambda: importance(csr, csc, 1))
    top = max(1, n // 100)
    # Compare the 1% each ranks highest: what the cache would hold.
    agree = np.intersect1d(np.argsort(-got, kind="stable")[:top], np.argsort(-want, kind="stable")[:top]).size
    return {"student_s": ts, "reference_s": tr, "top1pct_agreement": agree / top, "vertices": n,
            "edges": int(src.size), "note": "an R-MAT graph of 2^16 vertices; the reference reads prebuilt CSR/CSC"}


# --- 2. a cache plan under a byte budget ----------------------------------------------------------

PLAN_STUB = '''import numpy as np


def cache_plan(imp, out_degree, budget_bytes):
    """Return the vertices whose out-neighbour lists AliGraph caches, best first (int64 array).

    Rank the vertices that have an out-list (out_degree > 0) by importance `imp`, highest
    first, ties by lower vertex id. A cached list costs 4 bytes per neighbour plus 8 bytes
    of offset. Take vertices in rank order while the running total stays <= budget_bytes;
    stop at the first one that does not fit (a prefix of the ranking, as a plan cut to a
    capacity is).

    >>> cache_plan(np.array([1.0, 3.0, 3.0, 9.0]), np.array([2, 1, 1, 0]), 30)
    array([1, 2])
    """
'''

PLAN_SOLUTION = '''    imp = np.asarray(imp, np.float64)
    deg = np.asarray(out_degree, np.int64)
    cand = np.flatnonzero(deg > 0)
    order = cand[np.argsort(-imp[cand], kind="stable")]
    total = np.cumsum(deg[order] * 4 + 8)
    k = int(np.searchsorted(total, budget_bytes, side="right"))
    return order[:k].astype(np.int64)
'''


def _ref_plan(imp, deg, budget):
    from labkit.graph.csr import CSR
    from labkit.graph.importance import plan_cache
    indptr = np.zeros(deg.size + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    csr = CSR(indptr, np.zeros(int(indptr[-1]), np.int32))
    return plan_cache(csr, imp, 0.0, max_fraction=1.0).cut(budget).order.astype(np.int64)


def _judge_ids(want: np.ndarray, what: str = "vertices"):
    def judge(got):
        g = np.asarray(got)
        if g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
            return f"expected a 1-d integer array of {what}, got {_short(g)}"
        g = g.astype(np.int64)
        if g.size != want.size:
            return f"expected {want.size} {what} ({_short(want)}), got {g.size} ({_short(g)})"
        bad = np.flatnonzero(g != want)
        if bad.size:
            i = int(bad[0])
            return f"position {i}: expected {int(want[i])}, got {int(g[i])}"
        return None
    return judge


def check_plan(fn):
    rng = np.random.default_rng(9)
    a = lambda *v: np.array(v, np.float64)  # noqa: E731
    d = lambda *v: np.array(v, np.int64)  # noqa: E731
    cases = [("docstring example", a(1.0, 3.0, 3.0, 9.0), d(2, 1, 1, 0), 30),
             ("budget 0 caches nothing", a(1, 2, 3), d(1, 1, 1), 0),
             ("no vertices", a(), d(), 100),
             ("budget fits every list", a(0.5, 2, 1), d(3, 1, 2), 10**6),
             ("degree-0 vertices are never cached", a(9, 0, 9, 1), d(0, 1, 0, 1), 10**6),
             ("ties broken by lower id", a(2, 2, 2, 2, 1), d(1, 1, 1, 1, 1), 36),
             ("inf importance first", a(5, np.inf, 0, np.inf), d(1, 1, 1, 1), 24),
             ("stops at the first list that does not fit", a(3, 2, 1), d(1, 100, 1), 300),
             ("a list exactly filling the budget is taken", a(3, 2), d(1, 3), 12 + 20)]
    for i in range(3):
        n = 500
        imp = np.round(rng.exponential(1.0, n), 1)  # rounded: many ties
        imp[rng.random(n) < 0.05] = np.inf
        deg = rng.zipf(1.8, n).clip(0, 300) * (rng.random(n) > 0.1)
        cases.append((f"random graph {i + 1}", imp, deg.astype(np.int64), int(rng.integers(1000, 20000))))
    for name, imp, deg, budget in cases:
        yield _case(name, fn, (imp.copy(), deg.copy(), budget), _judge_ids(_ref_plan(imp, deg, budget)))


def measure_plan(fn) -> dict:
    from labkit.graph.csr import build_csc, build_csr
    from labkit.graph.importance import importance
    from labkit.graph.sampling import sample_neighbors
    src, dst, n = _rmat(16)
    csr, csc = build_csr(src, dst, n), build_csc(src, dst, n)
    imp = importance(csr, csc, 1)
    deg = csr.degree().astype(np.int64)
    budget = int(0.1 * (csr.indices.size * 4 + 8 * n))  # a tenth of the topology's bytes
    ts = _best_time(lambda: fn(imp, deg, budget))
    tr = _best_time(lambda: _ref_plan(imp, deg, budget))
    # The lists a 2-hop sample (fanouts 10, 5) reads, and how many of them each plan would serve.
    rng = np.random.default_rng(0)
    seeds = rng.choice(np.flatnonzero(csc.degree() > 0), 1000, replace=False)
    ptr, eid = sample_neighbors(csc.indptr, csc.indices, seeds, 10, seed=1)
    hop1 = csc.indices[eid]
    ptr2, eid2 = sample_neighbors(csc.indptr, csc.indices, hop1, 5, seed=2)
    reads = np.concatenate([hop1, csc.indices[eid2]])  # each reached vertex's out-list is read
    out = {"student_s": ts, "reference_s": tr, "budget_bytes": budget}
    for who, plan in (("student", fn(imp, deg, budget)), ("reference", _ref_plan(imp, deg, budget))):
        held = np.zeros(n, bool)
        held[np.asarray(plan, np.int64)] = True
        out[f"{who}_hit_rate"] = float(held[reads].mean())
        out[f"{who}_cached_vertices"] = int(np.count_nonzero(held))
    out["note"] = ("an R-MAT graph of 2^16 vertices, a cache of a tenth of its topology bytes; "
                   "hit rate over the lists a 2-hop in-neighbour sample reaches")
    return out


# --- 3. k of n without replacement in O(k) -------------------------------------------------------

SAMPLE_STUB = '''import numpy as np


def sample_k(n, k, rng):
    """Return k distinct neighbour positions drawn uniformly from range(n), in O(k) time and memory.

    Every k-subset must be equally likely. If k >= n return all n positions (any order); a
    vertex with no neighbours (n == 0) gets none. Draw only from `rng`, a numpy Generator
    (e.g. rng.integers(0, j + 1)), so the same seed gives the same sample. n can be huge (a hub
    with billions of edges): do not build range(n). Floyd's algorithm or a partial
    Fisher-Yates shuffle over a dict both work.

    >>> s = sample_k(10, 3, np.random.default_rng(0))
    >>> len(s), len(set(s.tolist())), all(0 <= v < 10 for v in s)
    (3, 3, True)
    """
'''

SAMPLE_SOLUTION = '''    if k >= n:
        return np.arange(n, dtype=np.int64)
    chosen = set()
    out = np.empty(k, np.int64)
    for i, j in enumerate(range(n - k, n)):
        t = int(rng.integers(0, j + 1))
        if t in chosen:
            t = j
        chosen.add(t)
        out[i] = t
    return out
'''


def _judge_sample(n: int, k: int):
    want = min(n, k)

    def judge(got):
        g = np.asarray(got)
        if g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
            return f"expected a 1-d integer array, got {_short(g)}"
        if g.size != want:
            return f"n={n}, k={k}: expected {want} positions, got {g.size}"
        if np.unique(g).size != g.size:
            return f"n={n}, k={k}: positions repeat: {_short(np.sort(g))}"
        if g.size and (int(g.min()) < 0 or int(g.max()) >= n):
            return f"n={n}, k={k}: a position outside range({n}): {_short(g)}"
        return None
    return judge


def _chi_square(counts: np.ndarray) -> float:
    e = counts.sum() / counts.size
    return float(((counts - e) ** 2 / e).sum())


def check_sample(fn):
    for name, n, k in (("k larger than n returns all n", 5, 7), ("k equal to n returns all n", 6, 6),
                       ("degree-0 vertex returns nothing", 0, 3), ("k = 0 returns nothing", 10, 0),
                       ("huge n (O(k): no range(n))", 2**62, 8)):
        yield _case(name, fn, (n, k, np.random.default_rng(1)), _judge_sample(n, k))
    rng = np.random.default_rng(2)

    def many():
        for n, k in ((10, 3), (1000, 50), (7, 6), (100_000, 2), (2, 1)):
            for _ in range(20):
                bad = _judge_sample(n, k)(fn(n, k, rng))
                if bad:
                    return bad
        return None
    yield _case("distinct positions in range", many, (), lambda bad: bad)

    def same_seed():
        a = np.asarray(fn(1000, 10, np.random.default_rng(42)))
        b = np.asarray(fn(1000, 10, np.random.default_rng(42)))
        return None if np.array_equal(a, b) else f"two draws with seed 42 differ: {_short(a)} vs {_short(b)}"
    yield _case("draws only from rng (same seed, same sample)", same_seed, (), lambda bad: bad)

    # Uniformity with a fixed seed. For df = 9 the 99.99th percentile of chi-square is ~33.7;
    # the bound of 45 leaves room, while a biased sampler scores in the hundreds.
    def marginals():
        r = np.random.default_rng(3)
        counts = np.zeros(10)
        for _ in range(4000):
            counts[np.asarray(fn(10, 3, r), np.int64)] += 1
        x2 = _chi_square(counts)
        return None if x2 < 45 else f"n=10, k=3 over 4000 draws: counts {counts.astype(int).tolist()} (chi-square {x2:.0f} >= 45)"
    yield _case("each neighbour equally likely", marginals, (), lambda bad: bad)

    def subsets():
        r = np.random.default_rng(4)
        index = {s: i for i, s in enumerate(itertools.combinations(range(5), 2))}
        counts = np.zeros(len(index))
        for _ in range(4000):
            counts[index[tuple(sorted(np.asarray(fn(5, 2, r), np.int64).tolist()))]] += 1
        x2 = _chi_square(counts)
        return None if x2 < 45 else f"n=5, k=2 over 4000 draws: pair counts {counts.astype(int).tolist()} (chi-square {x2:.0f} >= 45)"
    yield _case("every k-subset equally likely", subsets, (), lambda bad: bad)


def measure_sample(fn) -> dict:
    from labkit.graph.csr import build_csr
    from labkit.graph.sampling import sample_neighbors
    src, dst, n = _rmat(14)
    csr = build_csr(src, dst, n)
    rows = np.random.default_rng(0).integers(0, n, 2000)
    fanout = 10
    ptr, eid = sample_neighbors(csr.indptr, csr.indices, rows, fanout, seed=1)  # compiled before it is timed

    def student():
        r = np.random.default_rng(1)
        out = []
        for v in rows:
            lo, hi = csr.indptr[v], csr.indptr[v + 1]
            out.append(lo + np.asarray(fn(int(hi - lo), fanout, r), np.int64))
        return np.concatenate(out)
    got = student()
    ts = _best_time(student, repeat=2)
    tr = _best_time(lambda: sample_neighbors(csr.indptr, csr.indices, rows, fanout, seed=1))
    return {"student_s": ts, "reference_s": tr, "student_edges": int(got.size), "reference_edges": int(eid.size),
            "student_us_per_row": ts / rows.size * 1e6, "reference_us_per_row": tr / rows.size * 1e6,
            "max_degree": int(csr.degree()[rows].max()),
            "note": "one hop, fanout 10, over 2000 rows of an R-MAT graph of 2^14 vertices (hubs included); "
                    "the reference is labkit's numba Floyd sampler"}


# --- 4. CSR from an edge list --------------------------------------------------------------------

CSR_STUB = '''import numpy as np


def build_csr(src, dst, num_nodes):
    """Return (indptr, indices), both int64: the out-neighbour lists of edges src[i] -> dst[i].

    Row v's neighbours are indices[indptr[v]:indptr[v + 1]], in increasing id order, each
    neighbour once (duplicate edges are kept once; self-loops are kept). Vertices with no
    out-edges have empty rows; `num_nodes` may exceed the largest id.

    >>> build_csr(np.array([1, 0, 1, 1]), np.array([2, 1, 0, 2]), 4)
    (array([0, 1, 3, 3, 3]), array([1, 0, 2]))
    """
'''

CSR_SOLUTION = '''    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    key = np.unique(src * num_nodes + dst)
    rows, cols = key // num_nodes, key % num_nodes
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
    return indptr, cols
'''


def _judge_csr(src, dst, n):
    from labkit.graph.csr import build_csr
    ref = build_csr(src, dst, n, dedup=True)
    want_p, want_i = ref.indptr.astype(np.int64), ref.indices.astype(np.int64)

    def judge(got):
        if not (isinstance(got, tuple) and len(got) == 2):
            return f"expected a tuple (indptr, indices), got {_short(got)}"
        p, i = (np.asarray(a).astype(np.int64) for a in got)
        if p.shape != want_p.shape:
            return f"indptr: expected {want_p.size} offsets (num_nodes + 1), got {p.size}"
        bad = np.flatnonzero(p != want_p)
        if bad.size:
            v = int(bad[0])
            return f"indptr[{v}]: expected {int(want_p[v])}, got {int(p[v])}"
        if i.shape != want_i.shape:
            return f"indices: expected {want_i.size} entries, got {i.size}"
        bad = np.flatnonzero(i != want_i)
        if bad.size:
            q = int(bad[0])
            v = int(np.searchsorted(want_p, q, side="right") - 1)
            return f"row {v}: expected {_short(want_i[want_p[v]:want_p[v + 1]])}, got {_short(i[want_p[v]:want_p[v + 1]])}"
        return None
    return judge


def check_csr(fn):
    rng = np.random.default_rng(13)
    e = lambda *a: np.array(a, np.int64)  # noqa: E731
    cases = [("docstring example", e(1, 0, 1, 1), e(2, 1, 0, 2), 4),
             ("empty edge list", e(), e(), 4),
             ("duplicate edges kept once", e(0, 0, 0, 1, 0), e(1, 1, 2, 0, 1), 3),
             ("rows sorted by neighbour id", e(0, 0, 0, 0), e(3, 1, 2, 0), 4),
             ("self-loops kept", e(0, 1, 1), e(0, 1, 0), 2),
             ("degree-0 vertices at the end", e(0, 1), e(1, 0), 6),
             ("degree-0 vertices in the middle", e(4, 0, 4), e(0, 4, 2), 5)]
    for i in range(3):
        s, d = _random_edges(rng, 300, 3000)
        cases.append((f"random skewed graph {i + 1}", s, d, 300))
    for name, s, d, n in cases:
        yield _case(name, fn, (s.copy(), d.copy(), n), _judge_csr(s, d, n))


def measure_csr(fn) -> dict:
    from labkit.graph.csr import build_csr
    src, dst, n = _rmat(16)
    ref = build_csr(src, dst, n, dedup=True)  # compiled before it is timed
    p, i = fn(src, dst, n)
    ts = _best_time(lambda: fn(src, dst, n), repeat=2)
    tr = _best_time(lambda: build_csr(src, dst, n, dedup=True), repeat=2)
    return {"student_s": ts, "reference_s": tr, "edges_in": int(src.size), "edges_kept": int(np.asarray(i).size),
            "reference_edges_kept": int(ref.indices.size), "student_medges_per_s": src.size / ts / 1e6,
            "reference_medges_per_s": src.size / tr / 1e6,
            "note": "an R-MAT edge list of 2^16 vertices (512K edges, duplicates included); the reference is "
                    "labkit's parallel bucket build"}


register(Exercise(
    id="graph.importance", system="graph", title="Importance: in-degree over out-degree", func="importance",
    stub=IMP_STUB, solution=IMP_SOLUTION, check=check_importance, measure=measure_importance,
    goal="Rank vertices by how often their list is read per byte it costs (AliGraph's Imp_1 = D_in / D_out).",
    reference="labkit.graph.importance:importance", forbid=("labkit.graph",), minutes=10,
    tags=("cache", "aligraph")))

register(Exercise(
    id="graph.cache_plan", system="graph", title="A cache plan that fills a byte budget", func="cache_plan",
    stub=PLAN_STUB, solution=PLAN_SOLUTION, check=check_plan, measure=measure_plan,
    goal="Turn a score into what to cache under a byte budget, and see the hit rate it buys on a sampled workload.",
    reference="labkit.graph.importance:plan_cache", forbid=("labkit.graph", "labkit.core.cacheplan"), minutes=15,
    tags=("cache", "aligraph")))

register(Exercise(
    id="graph.sample_k", system="graph", title="k of n neighbours without replacement in O(k)", func="sample_k",
    stub=SAMPLE_STUB, solution=SAMPLE_SOLUTION, check=check_sample, measure=measure_sample,
    goal="Sample a hub's neighbours uniformly without touching its whole list (Floyd's algorithm).",
    reference="labkit.graph.sampling:sample_neighbors", forbid=("labkit.graph",), minutes=20,
    tags=("sampling", "aligraph")))

register(Exercise(
    id="graph.build_csr", system="graph", title="CSR from an edge list (dedup, sorted rows)", func="build_csr",
    stub=CSR_STUB, solution=CSR_SOLUTION, check=check_csr, measure=measure_csr,
    goal="Build the storage every graph operator reads: offsets per vertex, sorted unique neighbour ids.",
    reference="labkit.graph.csr:build_csr", forbid=("labkit.graph",), minutes=15,
    tags=("storage", "aligraph")))
