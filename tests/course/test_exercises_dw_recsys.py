"""The GoldMiner and PICASSO exercises: reference solutions pass, blanks and wrong answers fail.

Every exercise's reference body (stub + solution, as the source notebook holds it) must pass every
case; a blank (raising NotImplementedError, as the student release does) and a function returning
nonsense must fail every case without the check itself raising; each deliberately wrong body below
must be caught by the case named beside it; and the measurement must run with the reference and
return finite figures.
"""

from __future__ import annotations

import math

import pytest

from labkit.course.exercise import Case
from labkit.course.exercises import exercises, get
from tests.course.candidates import from_source, reference

SYSTEMS = ("dataworkers", "recsys")


def _ours():
    return [e for s in SYSTEMS for e in exercises(s)]


_reference, _from_source = reference, from_source


# (exercise, wrong body, the case that must catch it)
WRONG = [
    ("dataworkers.stateless_cut", '''    out = []
    for s in steps:  # treats any randomness as state
        if s.get("params") or s.get("inplace") or s.get("side_effect") or s.get("rng") is not None:
            break
        out.append(s["name"])
    return out
''', "seeded random crop is stateless"),
    ("dataworkers.stateless_cut", '''    out = []
    for s in steps:  # a straight line: ignores what each step reads
        if s.get("params") or s.get("inplace") or s.get("side_effect") or s.get("rng") == "global":
            break
        out.append(s["name"])
    return out
''', "a branch off the input still moves"),
    ("dataworkers.autoscale_step", '''    if not rates:
        return 0
    n = 1
    while n < len(rates) and rates[n] >= rates[n - 1] * (1 + gain):
        n += 1
    return n
''', "gain exactly at the threshold does not pay"),
    ("dataworkers.autoscale_step", '''    if not rates:
        return 0
    return max(range(len(rates)), key=lambda i: rates[i]) + 1  # the best seen, with look-ahead
''', "a step that does not pay stops the climb"),
    ("dataworkers.exactly_once", '''    held, out = {}, []
    for ev in events:  # forgets which batches came back
        if ev[0] == "send":
            held.setdefault(ev[2], set()).add(ev[1])
        elif ev[0] == "die":
            out.extend(sorted(held.pop(ev[1], set())))
    return out
''', "a returned batch is not re-issued"),
    ("dataworkers.exactly_once", '''    held, returned, out = {}, set(), []
    for ev in events:  # re-issues in the order the batches were sent
        if ev[0] == "send":
            held.setdefault(ev[2], []).append(ev[1])
        elif ev[0] == "result":
            returned.add(ev[1])
        elif ev[0] == "die":
            out.extend(s for s in held.pop(ev[1], []) if s not in returned)
    return out
''', "lowest seq first"),
    ("dataworkers.share_cpus", '''    out = [0] * len(jobs)
    for k in range(cpus):  # round robin: every job gets its turn, useful or not
        if jobs:
            out[k % len(jobs)] += 1
    return out
''', "the largest marginal gain wins"),
    ("dataworkers.share_cpus", '''    out = [j["min_cpus"] for j in jobs]
    left = cpus - sum(out)
    while left > 0 and jobs:  # never stops at saturation: hands out every CPU
        rate = [j["gpus"] * j["worker_rate"] / j["gpu_rate"] if j["gpu_rate"] else 0.0 for j in jobs]
        out[max(range(len(jobs)), key=lambda i: rate[i])] += 1
        left -= 1
    return out
''', "CPUs that add nothing stay free"),
    ("recsys.pack_ids", '''    # offsets include each table's own rows
    offsets = np.cumsum(np.asarray(cardinalities, dtype=np.int64))
    parts = [np.asarray(v, dtype=np.int64) + o for v, o in zip(ids, offsets)]
    return offsets, (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
''', "one field"),
    ("recsys.pack_ids", '''    offsets = np.zeros(len(cardinalities), dtype=np.int64)
    if len(cardinalities) > 1:
        offsets[1:] = np.cumsum(cardinalities[:-1])
    parts = [np.asarray(v) + np.asarray(o).astype(np.asarray(v).dtype) for v, o in zip(ids, offsets)]
    packed = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    return offsets, packed  # shifted in the ids' own dtype: int32 wraps
''', "offsets past 2**31 (int32 ids)"),
    ("recsys.micro_batches", '''    if m < 1:
        raise ValueError("m")
    n = min(m, batch_size)
    return [batch_size // n] * n if n else []  # drops the remainder
''', "remainder goes to the first micro-batches"),
    ("recsys.micro_batches", '''    if m < 1:
        raise ValueError("m")
    q, r = divmod(batch_size, m)
    return [q + 1] * r + [q] * (m - r)  # empty micro-batches when the batch is small
''', "batch smaller than m"),
    ("recsys.hot_rows", '''    if not counts:
        return []
    k = int(budget // row_bytes)
    out = []
    for t, c in enumerate(counts):  # an equal share per table, not one global ranking
        share = k // len(counts) + (t < k % len(counts))
        top = np.argsort(-np.asarray(c), kind="stable")[:share]
        out.append(np.sort(top[np.asarray(c)[top] > 0]).astype(np.int64))
    return out
''', "a small hot table is cached whole"),
    ("recsys.hot_rows", '''    if not counts:
        return []
    k = int(budget // row_bytes)
    flat = np.concatenate([np.asarray(c, dtype=np.int64) for c in counts])
    top = np.argsort(-flat, kind="stable")[:k]  # keeps rows nobody asked for
    edges = np.cumsum([0] + [len(c) for c in counts])
    return [np.sort(top[(top >= a) & (top < b)] - a).astype(np.int64) for a, b in zip(edges[:-1], edges[1:])]
''', "rows never looked up are not cached"),
    ("recsys.plan_hit_rate", '''    hits = total = 0
    for rows, ids in zip(cached, lookups):
        ids = np.unique(np.asarray(ids))  # counts each row once
        hits += int(np.isin(ids, rows).sum())
        total += ids.size
    return hits / total if total else 0.0
''', "repeated lookups count each time"),
    ("recsys.plan_hit_rate", '''    rates = [float(np.isin(np.asarray(i), r).mean())
             for r, i in zip(cached, lookups) if len(i)]
    return sum(rates) / len(rates) if rates else 0.0  # every table weighs the same
''', "tables weigh by their lookups"),
]


def test_three_or_more_exercises_per_system():
    for s in SYSTEMS:
        exs = exercises(s)
        assert len(exs) >= 3, s
        for e in exs:
            assert e.id.startswith(s + ".") and e.reference and e.goal and e.title and e.minutes > 0
            # A submission may not import the module its answer is checked against.
            assert any(e.reference.split(":")[0].startswith(f) for f in e.forbid), (e.id, e.forbid)
            assert "### BEGIN SOLUTION" not in e.stub and e.solution.startswith("    ")
            assert f"def {e.func}(" in e.stub and '"""' in e.stub and ">>>" in e.stub


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_reference_passes_every_case(ex_id):
    ex = get(ex_id)
    cases = list(ex.check(_reference(ex)))
    assert len(cases) >= 8
    assert all(isinstance(c, Case) for c in cases)
    assert len({c.name for c in cases}) == len(cases), "case names must be distinct"
    failed = [c for c in cases if not c.passed]
    assert not failed, failed


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_blank_and_nonsense_fail_every_case_without_raising(ex_id):
    ex = get(ex_id)

    def blank(*args, **kwargs):
        raise NotImplementedError()

    def nonsense(*args, **kwargs):
        return None

    for fn, why in ((blank, "raised NotImplementedError"), (nonsense, "")):
        cases = list(ex.check(fn))
        assert cases and all(not c.passed for c in cases), [c for c in cases if c.passed]
        assert all(why in c.detail for c in cases)
        assert all(c.detail and "Traceback" not in c.detail for c in cases)


def test_every_exercise_has_a_wrong_answer_caught():
    assert {w[0] for w in WRONG} == {e.id for e in _ours()}


@pytest.mark.parametrize("ex_id,body,case", WRONG, ids=[f"{w[0]}:{w[2]}" for w in WRONG])
def test_wrong_answer_is_caught_by_the_named_case(ex_id, body, case):
    ex = get(ex_id)
    cases = {c.name: c for c in ex.check(_from_source(ex, body))}
    assert case in cases, sorted(cases)
    assert not cases[case].passed, cases[case]
    assert cases[case].detail


@pytest.mark.parametrize("ex_id", [e.id for e in _ours()])
def test_measure_runs_and_returns_finite_figures(ex_id):
    ex = get(ex_id)
    out = ex.measure(_reference(ex))
    nums = {k: v for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert nums and all(math.isfinite(v) for v in nums.values()), out
    assert isinstance(out.get("note"), str) and out["note"]
    # the reference's figures sit beside the student's
    assert any(k.startswith("student") for k in out) and any(k.startswith("reference") for k in out), out
