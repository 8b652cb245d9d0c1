"""The Flash-LLM, AliGraph and CaliEX exercises: reference solutions pass, blanks and wrong answers fail.

Every exercise's reference body (stub + solution, as the source notebook holds it) must pass every
case; a blank (raising NotImplementedError, as the student release does) must fail every case
without the check itself raising; each deliberately wrong implementation below must be caught by
the case named beside it; and the measurement must run with the reference and return finite figures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from labkit.course.exercise import Case
from labkit.course.exercises import exercises, get
from tests.course.candidates import from_source, reference

SYSTEMS = ("spmm", "graph", "disk")


def _ours():
    return [e for s in SYSTEMS for e in exercises(s)]


_reference, _from_source = reference, from_source


def test_at_least_three_exercises_per_system():
    for s in SYSTEMS:
        exs = exercises(s)
        assert len(exs) >= 3, s
        for e in exs:
            assert e.id.startswith(s + ".") and e.reference and e.goal and e.forbid
            # A submission may not import the module its answer is checked against.
            assert any(e.reference.split(":")[0].startswith(f) for f in e.forbid), (e.id, e.forbid)
            assert "### BEGIN SOLUTION" not in e.stub and e.solution.startswith("    ")


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_reference_passes_every_case(ex_id):
    ex = get(ex_id)
    cases = list(ex.check(_reference(ex)))
    assert len(cases) >= 5
    assert all(isinstance(c, Case) for c in cases)
    assert len({c.name for c in cases}) == len(cases), "case names must be distinct"
    failed = [c for c in cases if not c.passed]
    assert not failed, failed


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_blank_fails_every_case_without_raising(ex_id):
    ex = get(ex_id)
    blank = _from_source(ex, "    raise NotImplementedError()\n")
    cases = list(ex.check(blank))
    assert cases and not any(c.passed for c in cases)
    assert all("NotImplementedError" in c.detail for c in cases)


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_docstring_example_holds(ex_id):
    import doctest
    ex = get(ex_id)
    fn = _reference(ex)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for t in doctest.DocTestFinder().find(fn, ex.func, globs=dict(fn.__globals__)):
        runner.run(t)
    assert runner.summarize(verbose=False).attempted > 0
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_measure_runs_with_the_reference(ex_id):
    ex = get(ex_id)
    m = ex.measure(_reference(ex))
    assert "student_s" in m and "reference_s" in m
    nums = {k: v for k, v in m.items() if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
    assert nums and all(math.isfinite(float(v)) for v in nums.values()), m


# --- deliberately wrong answers, each caught by a named case -------------------------------------

WRONG = {
    "spmm.encode_tile": [
        ("no padding", '''    bits = np.asarray(bits, np.uint16)
    rows, cols = bits.shape
    col_bits = (cols - 1).bit_length()
    r, c = np.nonzero(bits & 0x7FFF)
    words = (bits[r, c].astype(np.uint32) << 16) | (r.astype(np.uint32) << col_bits) | c.astype(np.uint32)
    return words, np.bincount(r, minlength=rows).astype(np.uint16)
''', "one non-zero per row (padding words)"),
        ("-0.0 kept", '''    bits = np.asarray(bits, np.uint16)
    rows, cols = bits.shape
    col_bits = (cols - 1).bit_length()
    runs, row_nnz = [], np.zeros(rows, np.uint16)
    for r in range(rows):
        c = np.flatnonzero(bits[r])
        padded = -(-c.size // pad) * pad
        run = np.full(padded, r << col_bits, np.uint32)
        run[:c.size] = (bits[r, c].astype(np.uint32) << 16) | np.uint32(r << col_bits) | c.astype(np.uint32)
        runs.append(run)
        row_nnz[r] = padded
    return np.concatenate(runs), row_nnz
''', "-0.0 is a zero"),
    ],
    "spmm.tile_dot": [
        ("eight column bits hard-coded", '''    words = np.asarray(words, np.uint32)
    vals = (words & np.uint32(0xFFFF0000)).view(np.float32)
    cols = (words & np.uint32(0xFF)).astype(np.int64)
    rows = np.repeat(np.arange(len(row_nnz)), np.asarray(row_nnz, np.int64))
    return np.bincount(rows, weights=vals * x[cols], minlength=len(row_nnz)).astype(np.float32)
''', "tile width not a power of two"),
        ("value read as an integer", '''    words = np.asarray(words, np.uint32)
    vals = (words >> 16).astype(np.float32)
    cols = (words & np.uint32((1 << col_bits) - 1)).astype(np.int64)
    rows = np.repeat(np.arange(len(row_nnz)), np.asarray(row_nnz, np.int64))
    return np.bincount(rows, weights=vals * x[cols], minlength=len(row_nnz)).astype(np.float32)
''', "values decode from the high 16 bits"),
    ],
    "spmm.nbytes": [
        ("padding forgotten", '''    bits = np.asarray(bits, np.uint16)
    m, k = bits.shape
    tiles = -(-m // tile[0]) * -(-k // tile[1])
    return 4 * int(np.count_nonzero(bits & 0x7FFF)) + 8 * (tiles + 1) + 2 * tiles * tile[0]
''', "rows padded to a multiple of pad"),
    ],
    "graph.importance": [
        ("sinks divided by one", '''    d_out = np.bincount(src, minlength=num_nodes)
    d_in = np.bincount(dst, minlength=num_nodes)
    return d_in / np.maximum(d_out, 1)
''', "sinks (no out-edges) score inf"),
        ("0/0 left as nan", '''    d_out = np.bincount(src, minlength=num_nodes).astype(float)
    d_in = np.bincount(dst, minlength=num_nodes).astype(float)
    with np.errstate(all="ignore"):
        return d_in / d_out
''', "degree-0 vertices score 0"),
    ],
    "graph.cache_plan": [
        ("skips a list that does not fit", '''    deg = np.asarray(out_degree, np.int64)
    cand = np.flatnonzero(deg > 0)
    order = cand[np.argsort(-np.asarray(imp, float)[cand], kind="stable")]
    out, used = [], 0
    for v in order:
        if used + 4 * deg[v] + 8 <= budget_bytes:
            out.append(v)
            used += 4 * deg[v] + 8
    return np.array(out, np.int64)
''', "stops at the first list that does not fit"),
        ("caches empty lists", '''    deg = np.asarray(out_degree, np.int64)
    order = np.argsort(-np.asarray(imp, float), kind="stable")
    k = int(np.searchsorted(np.cumsum(deg[order] * 4 + 8), budget_bytes, side="right"))
    return order[:k]
''', "degree-0 vertices are never cached"),
    ],
    "graph.sample_k": [
        ("a random window (uniform marginals, not subsets)", '''    if k >= n:
        return np.arange(n)
    return (int(rng.integers(0, n)) + np.arange(k)) % n
''', "every k-subset equally likely"),
        ("with replacement", '''    if k >= n:
        return np.arange(n)
    return rng.integers(0, n, k)
''', "distinct positions in range"),
        ("shuffles the whole list", '''    return rng.permutation(n)[:k]
''', "huge n (O(k): no range(n))"),
        ("global random state", '''    if k >= n:
        return np.arange(n)
    out = set()
    while len(out) < k:
        out.add(int(np.random.randint(0, n)))
    return np.array(sorted(out))
''', "draws only from rng (same seed, same sample)"),
    ],
    "graph.build_csr": [
        ("duplicates kept", '''    order = np.lexsort((dst, src))
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return indptr, np.asarray(dst)[order]
''', "duplicate edges kept once"),
        ("rows in input order", '''    seen, rows = set(), [[] for _ in range(num_nodes)]
    for s, d in zip(src.tolist(), dst.tolist()):
        if (s, d) not in seen:
            seen.add((s, d))
            rows[s].append(d)
    indptr = np.cumsum([0] + [len(r) for r in rows])
    return indptr, np.array([d for r in rows for d in r], np.int64)
''', "rows sorted by neighbour id"),
    ],
    "disk.belady_misses": [
        ("least recently used", '''    from collections import OrderedDict
    held, misses = OrderedDict(), 0
    for b in batches:
        for v in np.asarray(b).tolist():
            if v in held:
                held.move_to_end(v)
            else:
                misses += 1
                held[v] = True
                if len(held) > capacity:
                    held.popitem(last=False)
    return misses
''', "evicts the row needed latest (LRU would not)"),
        ("keeps the first rows it sees", '''    held, misses = set(), 0
    for b in batches:
        for v in np.asarray(b).tolist():
            if v not in held:
                misses += 1
                if len(held) < capacity:
                    held.add(v)
    return misses
''', "a fresh row can displace a held one"),
    ],
    "disk.best_split": [
        ("strict argmin", '''    if not curve:
        raise ValueError("empty")
    return min(curve, key=lambda p: p["total"])["f"]
''', "flat curve: least disk and CPU wins"),
        ("larger f on ties", '''    if not curve:
        raise ValueError("empty")
    lowest = min(p["total"] for p in curve)
    near = [p for p in curve if p["total"] <= lowest * (1 + tolerance)]
    return min(near, key=lambda p: (p["sample"] + p["gather"] + p["cpu_other"], -p["f"]))["f"]
''', "ties on everything: smaller f wins"),
    ],
    "disk.plan_reads": [
        ("a hole of gap_pages splits the read", '''    pages = np.unique(np.asarray(pages, np.int64)).tolist()
    firsts, counts = [], []
    for p in pages:
        if firsts and p - (firsts[-1] + counts[-1]) < gap_pages and p - firsts[-1] + 1 <= max_run_pages:
            counts[-1] = p - firsts[-1] + 1
        else:
            firsts.append(p)
            counts.append(1)
    return np.array(firsts, np.int64), np.array(counts, np.int64)
''', "a hole of exactly gap_pages is read through"),
        ("no cap on a request", '''    pages = np.unique(np.asarray(pages, np.int64)).tolist()
    firsts, counts = [], []
    for p in pages:
        if firsts and p - (firsts[-1] + counts[-1]) <= gap_pages:
            counts[-1] = p - firsts[-1] + 1
        else:
            firsts.append(p)
            counts.append(1)
    return np.array(firsts, np.int64), np.array(counts, np.int64)
''', "requests capped at max_run_pages"),
        ("pages left in input order", '''    pages = list(dict.fromkeys(np.asarray(pages, np.int64).tolist()))
    firsts, counts = [], []
    for p in pages:
        if firsts and 0 <= p - (firsts[-1] + counts[-1]) <= gap_pages and p - firsts[-1] + 1 <= max_run_pages:
            counts[-1] = p - firsts[-1] + 1
        else:
            firsts.append(p)
            counts.append(1)
    return np.array(firsts, np.int64), np.array(counts, np.int64)
''', "unsorted pages"),
    ],
}


def _wrong_params():
    return [pytest.param(i, label, body, case, id=f"{i}-{label}")
            for i, wrongs in WRONG.items() for label, body, case in wrongs]


@pytest.mark.parametrize("ex_id,label,body,case", _wrong_params())
def test_wrong_answer_is_caught_by_its_case(ex_id, label, body, case):
    ex = get(ex_id)
    cases = {c.name: c for c in ex.check(_from_source(ex, body))}
    assert case in cases, f"no case named {case!r}; cases: {list(cases)}"
    assert not cases[case].passed, f"{label}: case {case!r} passed"
    assert cases[case].detail


def test_every_exercise_has_a_wrong_answer():
    assert {e.id for e in _ours()} <= set(WRONG)
