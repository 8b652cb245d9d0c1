"""Issue 29: every verdict carries a 95% interval; straddling ones are rerun, then called inconclusive;
modelled claims stand apart; each bench writes a JSON record and BENCHMARKS.md is rendered from them."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import labkit.core.bench as bench_mod
import labkit.records as records_mod
from labkit.core.bench import Bench, Claim, claims_markdown, claims_summary
from labkit.records import record, recorded, render_benchmarks
from labkit.core.spread import geomean_spread, spread


@pytest.mark.parametrize("op, lo, hi, want", [
    (">=", 1.6, 2.1, "pass"), (">=", 1.2, 1.4, "miss"), (">=", 1.4, 1.6, "inconclusive"),
    ("<=", 1.2, 1.4, "pass"), ("<=", 1.6, 2.0, "miss"), ("<=", 1.4, 1.6, "inconclusive")])
def test_a_verdict_is_read_from_the_whole_interval(op, lo, hi, want):
    c = Claim("x", "y", "z", 1.5, op=op, measured=(lo + hi) / 2, low=lo, high=hi)
    assert c.status == want and c.verdict == want
    assert c.passed is {"pass": True, "miss": False, "inconclusive": None}[want]


def test_a_point_value_straddling_nothing_is_judged_as_before():
    # the old code would call 1.55 >= 1.5 a pass although its interval [1.4, 1.7] holds the target
    assert Claim("x", "y", "z", 1.5, measured=1.55).status == "pass"
    assert Claim("x", "y", "z", 1.5, measured=1.55, low=1.4, high=1.7).status == "inconclusive"
    assert Claim("x", "y", "z", 0, op="==", measured=0, low=0, high=1).status == "pass"  # exact counts


def test_tables_print_the_interval_and_modelled_claims_apart():
    cs = [Claim("a.m", "measured one", "2x", 1.5, measured=1.94, low=1.81, high=2.07),
          Claim("a.s", "simulated", "2.5x", 2.0, measured=2.3, kind="modelled"),
          Claim("a.i", "close", "2x", 1.5, measured=1.55, low=1.4, high=1.7)]
    md = claims_markdown(cs)
    assert "| 1.94 [1.81, 2.07] |" in md and "| inconclusive |" in md
    measured_part, modelled_part = md.split("**Modelled**")
    assert "a.s" in modelled_part and "a.s" not in measured_part and "a.m" in measured_part
    assert claims_summary(cs).startswith("1 pass, 0 miss, 1 inconclusive, 0 not measured (measured claims)")
    assert "1 modelled" in claims_summary(cs)
    with pytest.raises(ValueError, match="kind='guessed'"):
        Claim("a", "b", "c", 1.0, kind="guessed")


def _scripted(monkeypatch, ratios_by_round):
    """Make Bench._time return base=1 and new=1/ratio for the new contender's k-th call (exact and
    machine-independent, whatever order the interleaving runs them in)."""
    it = iter(ratios_by_round)

    def fake(fn, number):
        return fn()
    monkeypatch.setattr(Bench, "_time", staticmethod(fake))
    return {"base": lambda: 1.0, "new": lambda: 1.0 / next(it)}


def test_a_straddling_interval_gets_more_rounds_then_reads_inconclusive(monkeypatch):
    # per-round speedups swing around the 1.5 target for ever: the harness must rerun, bounded, then say so
    swing = [1.3, 1.7] * 40
    b = Bench("toy", "ci", [Claim("toy.s", "s", "2x", 1.5)], progress=False)
    c = b.compare("c", _scripted(monkeypatch, swing), repeats=5, warmup=0)
    sp = b.measure_ratio("toy.s", c, "base", "new")
    assert len(c.times["base"]) == 15 and sp.n == 15  # 3x the 5 rounds, the default bound
    cl = b.claims["toy.s"]
    assert cl.status == "inconclusive" and cl.low < 1.5 < cl.high and cl.rounds == 15


def test_a_clear_result_is_not_rerun(monkeypatch):
    b = Bench("toy", "ci", [Claim("toy.s", "s", "2x", 1.5)], progress=False)
    c = b.compare("c", _scripted(monkeypatch, [2.0, 2.1, 1.9, 2.0, 2.05] + [9.9] * 10), repeats=5, warmup=0)
    sp = b.measure_ratio("toy.s", c, "base", "new")
    assert len(c.times["base"]) == 5 and sp.median == pytest.approx(2.0) and b.claims["toy.s"].status == "pass"
    assert b.report().claims[0].low == pytest.approx(sp.lo)


def test_more_rounds_can_settle_a_verdict(monkeypatch):
    # five noisy rounds straddle; the next ones are steady above the target, so the verdict settles as a pass
    b = Bench("toy", "ci", [Claim("toy.s", "s", "2x", 1.5)], progress=False)
    c = b.compare("c", _scripted(monkeypatch, [1.2, 2.0, 1.4, 2.0, 1.45] + [2.0] * 20), repeats=5, warmup=0)
    b.measure_ratio("toy.s", c, "base", "new")
    assert 5 < len(c.times["base"]) <= 15 and b.claims["toy.s"].status == "pass"


def test_geomean_claim_resamples_every_case_jointly(monkeypatch):
    b = Bench("toy", "ci", [Claim("toy.g", "g", "2x", 1.0)], progress=False)
    c1 = b.compare("c1", _scripted(monkeypatch, [2.0, 2.2, 1.8, 2.1, 1.9]), repeats=5, warmup=0)
    c2 = b.compare("c2", _scripted(monkeypatch, [8.0, 8.8, 7.2, 8.4, 7.6]), repeats=5, warmup=0)
    sp = b.measure_geomean("toy.g", [(c1, "base", "new"), (c2, "base", "new")])
    assert sp.median == pytest.approx(4.0) and sp.lo < 4.0 < sp.hi and b.claims["toy.g"].status == "pass"
    direct = geomean_spread([(c1.times["base"], c1.times["new"]), (c2.times["base"], c2.times["new"])])
    assert (direct.lo, direct.hi) == (sp.lo, sp.hi)


def test_measure_samples_adds_rounds_from_more_until_the_bound():
    vals = iter([0.0, 0.2] * 20)
    b = Bench("toy", "ci", [Claim("toy.gap", "gap", "0", 0.05, "", "<=")], progress=False)
    sp = b.measure_samples("toy.gap", [0.0, 0.1, 0.02, 0.08, 0.04], more=lambda: next(vals), max_rounds=9)
    assert sp.n == 9 and b.claims["toy.gap"].status == "inconclusive"


def test_spread_uses_scipy_bootstrap_and_is_seeded():
    v = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3]
    a, b = spread(v), spread(v)
    assert a == b and a.lo <= a.median <= a.hi and a.method == "bootstrap 95%"
    from scipy import stats
    res = stats.bootstrap((np.asarray(v),), np.median, n_resamples=2000, method="percentile",
                          rng=np.random.default_rng(0))
    assert (a.lo, a.hi) == pytest.approx((res.confidence_interval.low, res.confidence_interval.high))


def _bench(system, value, interval=None, profile="small"):
    b = Bench(system, profile, [Claim(f"{system}.x", "x", "2x", 1.5)], progress=False)
    b.measure(f"{system}.x", value, interval=interval)
    b.note("why it went so", claim=f"{system}.x")
    return b.report()


def test_record_writes_json_with_commit_and_renders_the_file_from_records(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    [p] = record(_bench("graph", 1.2, (1.1, 1.3)), str(md))
    assert p == str(tmp_path / "records" / "graph.small.json")
    d = json.loads(open(p).read())
    assert set(d["source"]) == {"commit", "dirty"} and d["profile"] == "small"
    assert d["claims"][0]["low"] == 1.1 and d["claims"][0]["verdict"] == "miss" and d["machine"]["cores"]
    record(_bench("spmm", 2.0, (1.8, 2.2)), str(md))
    text = md.read_text()
    assert text.index("labkit-bench:claims:small begin") < text.index("labkit-bench:graph:small begin")
    assert "| Flash-LLM | `spmm.x` |" in text and "| AliGraph | `graph.x` |" in text
    assert "1.2 [1.1, 1.3]" in text and "Not recorded at this profile: CaliEX, GoldMiner, PICASSO." in text
    # the file is a rendering: a hand edit is gone the next time, and rendering twice changes nothing
    md.write_text(text.replace("why it went so", "typed by hand"))
    assert render_benchmarks(str(md)) == text and md.read_text() == text
    r = recorded("graph", "small", path=str(md))
    assert r.claim("graph.x")["measured"] == "1.2 [1.1, 1.3]" and r.claim("graph.x")["low"] == 1.1
    assert r.notes_for("graph.x") == ["graph.x: why it went so"] and r.path == p


def test_a_refused_benchmarks_file_leaves_the_records_alone(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# My project\n")
    with pytest.raises(ValueError, match="README.md"):
        record(_bench("graph", 2.0), str(readme))
    assert not (tmp_path / "records").exists() and readme.read_text() == "# My project\n"


def test_a_broken_record_is_named_not_skipped(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    record(_bench("graph", 2.0), str(md))
    (tmp_path / "records" / "spmm.small.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"record=.*spmm\.small\.json"):
        render_benchmarks(str(md))


def test_source_info_names_the_commit_and_ignores_records(monkeypatch):
    src = bench_mod.source_info()
    if src["commit"] is None:
        pytest.skip("not a git clone")
    assert len(src["commit"]) == 40 and isinstance(src["dirty"], bool)
    # Recording writes records/ and BENCHMARKS.md: those alone must not mark the next bench's code dirty.
    import subprocess
    seen = []
    real = subprocess.run

    def spy(cmd, *a, **kw):
        seen.append(cmd)
        if "status" in cmd:
            ignored = {x for x in cmd if x.startswith(":!")}
            out = "" if ignored >= {f":!{bench_mod.RECORDS_DIR}", ":!BENCHMARKS.md"} else " M records/x.json\n"
            return subprocess.CompletedProcess(cmd, 0, out, "")
        return real(cmd, *a, **kw)
    monkeypatch.setattr(subprocess, "run", spy)
    assert bench_mod.source_info()["dirty"] is False and any("status" in c for c in seen)


def test_the_committed_benchmarks_file_is_the_rendering_of_the_committed_records(tmp_path):
    """BENCHMARKS.md is never typed: rendering the committed records reproduces it byte for byte."""
    import shutil
    root = os.path.dirname(records_mod._benchmarks_path())
    shutil.copytree(os.path.join(root, "records"), tmp_path / "records")
    shutil.copy(os.path.join(root, "BENCHMARKS.md"), tmp_path / "BENCHMARKS.md")
    want = (tmp_path / "BENCHMARKS.md").read_text()
    assert render_benchmarks(str(tmp_path / "BENCHMARKS.md")) == want


def test_an_inconclusive_claim_says_why_beside_it():
    b = Bench("toy", "ci", [Claim("toy.x", "x", "p", 1.5)], progress=False)
    b.measure("toy.x", 1.55, interval=(1.4, 1.7))
    [note] = b.report().notes
    assert note.startswith("toy.x: its 95% interval [1.4, 1.7] still holds the target >= 1.5")


def test_every_committed_miss_and_inconclusive_claim_has_its_reason():
    """The claims table explains each miss in one sentence: a note that names the claim, from the bench."""
    from labkit.records import load_records
    recs = load_records()
    if not recs:
        pytest.skip("no records committed yet")
    for (system, profile), rep in recs.items():
        for c in rep.claims:
            if c.status in ("miss", "inconclusive"):
                assert any(n.startswith(f"{c.id}:") for n in rep.notes), f"{system}.{profile}: {c.id} has no reason"


def test_release_lets_go_of_a_cases_contenders():
    import gc
    import weakref

    class Table:
        pass
    t = Table()
    ref = weakref.ref(t)
    b = Bench("toy", "ci", progress=False)
    c = b.compare("c", {"a": (lambda t=t: t and None)}, repeats=1, warmup=0)
    del t
    gc.collect()
    assert ref() is not None  # kept: more rounds may be needed
    b.release(c)
    gc.collect()
    assert ref() is None and c.times["a"]
    with pytest.raises(ValueError, match="comp="):
        b.more_rounds(c, 1)
