import json
import time

import pytest

from labkit.core.bench import Bench, BenchReport, Claim, claims_markdown, write_json
from labkit.records import update_benchmarks_md


def test_compare_interleaves_and_ratios(monkeypatch):
    import labkit.core.bench as bench_mod
    calls, clock = [], [0.0]
    # A fake clock the contenders advance: the ratios are exact, whatever the machine is doing.
    monkeypatch.setattr(bench_mod.time, "perf_counter", lambda: clock[0])

    def slow():
        calls.append("slow")
        clock[0] += 4.0

    def fast():
        calls.append("fast")
        clock[0] += 1.0

    b = Bench("toy", "ci", progress=False)
    c = b.compare("case", {"slow": slow, "fast": fast}, repeats=4, warmup=1)
    # warm-up runs both once, then rounds alternate with rotated order
    assert calls[2:] == ["slow", "fast", "fast", "slow", "slow", "fast", "fast", "slow"]
    assert c.times["slow"] == [4.0] * 4 and c.times["fast"] == [1.0] * 4
    assert c.ratio("slow", "fast") == 4.0
    assert c.median("slow") == 4.0 and c.median("fast") == 1.0
    assert c.best_ratio(["slow", "fast"], "fast") == pytest.approx(1.0)


def test_ratio_is_pairwise_median():
    from labkit.core.bench import Comparison
    c = Comparison("x", {"a": [1.0, 10.0, 2.0], "b": [0.5, 10.0, 4.0]})
    assert c.ratio("a", "b") == pytest.approx(1.0)  # ratios 2, 1, 0.5 -> median 1


def _touch_fresh_pages(nbytes: int) -> None:
    # An anonymous mapping, written: pages the kernel must hand over now. (A malloc'd array may reuse
    # freed pages that are still resident after earlier tests, which raises no peak at all.)
    import mmap
    m = mmap.mmap(-1, nbytes)
    try:
        for off in range(0, nbytes, mmap.PAGESIZE):
            m[off] = 1
    finally:
        m.close()


def test_memory_records_peak_growth():
    b = Bench("toy", "ci", progress=False)
    c = b.compare("alloc", {"big": lambda: _touch_fresh_pages(50_000_000),
                            "none": lambda: None}, repeats=2, memory=True)
    from labkit.core.machine import reset_peak_rss
    if not reset_peak_rss():
        pytest.skip("peak RSS cannot be reset here (/proc/self/clear_refs)")
    assert c.peak_mem["big"] > 30e6
    assert c.peak_mem["none"] < c.peak_mem["big"]


def test_claims_measure_verdict_and_json(tmp_path):
    claims = [Claim("toy.speed", "toy is fast", "2x", 1.5), Claim("toy.err", "low error", "0", 0.1, "", "<=")]
    b = Bench("toy", "ci", claims, progress=False)
    b.measure("toy.speed", 2.0)
    b.record("toy.extra", 3)
    with pytest.raises(KeyError, match="toy.nope"):
        b.measure("toy.nope", 1)
    rep = b.report()
    verdicts = {c.id: c.verdict for c in rep.claims}
    assert verdicts == {"toy.speed": "pass", "toy.err": "not measured"}
    j = tmp_path / "r.json"
    write_json(rep, str(j))
    d = json.loads(j.read_text())
    assert set(d) >= {"system", "profile", "machine", "results", "claims"}
    assert set(d["machine"]) >= {"cpu", "cpu_detail", "cores", "memory", "gpu"}
    assert d["results"]["toy.speed"] == 2.0 and d["results"]["toy.extra"] == 3.0
    assert {"id", "claim", "paper", "measured", "target", "unit"} <= set(d["claims"][0])
    md = rep.to_markdown()
    assert "toy.speed" in md and "pass" in md
    # The header names the CPU precisely enough to tell two "AMD EPYC" runs apart, and leaves the
    # detail out (no stray separator) where /proc/cpuinfo gave none.
    machine = {"cpu": "AMD EPYC", "cores": 2, "memory": 24 << 30, "gpu": None}
    rep.machine = dict(machine, cpu_detail="family 23 model 1, AVX2")
    assert "on AMD EPYC (family 23 model 1, AVX2; 2 cores, 24 GiB, GPU: none)." in rep.to_markdown()
    rep.machine = dict(machine, cpu_detail="")
    assert "on AMD EPYC (2 cores, 24 GiB, GPU: none)." in rep.to_markdown()


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 {flags}

processor\t: 1
cpu family\t: 99
model\t\t: 99
flags\t\t: fpu
"""


@pytest.mark.parametrize("family, model, flags, want", [
    (25, 17, "avx avx2 avx512f avx512_bf16", "family 25 model 17, AVX-512"),
    (23, 1, "avx avx2 fma", "family 23 model 1, AVX2"),
    (6, 45, "avx", "family 6 model 45, AVX"),
    (6, 15, "ssse3", "family 6 model 15, SSE"),
])
def test_cpu_detail_tells_cpus_of_one_name_apart(family, model, flags, want):
    from labkit.core.machine import cpu_detail
    assert cpu_detail(CPUINFO.format(family=family, model=model, flags=flags)) == want
    assert cpu_detail("") == ""  # no /proc/cpuinfo text: nothing claimed


def test_claim_rejects_bad_op():
    with pytest.raises(ValueError, match="op="):
        Claim("a", "b", "c", 1.0, op=">")


def test_miss_is_reported():
    c = Claim("x", "y", "z", 2.0, measured=1.2)
    assert c.passed is False and c.verdict == "miss"
    assert "miss" in claims_markdown([c])


def test_bad_profile_and_repeats():
    with pytest.raises(ValueError, match="profile='huge'.*ci, small, large"):
        Bench("toy", "huge")
    b = Bench("toy", "ci", progress=False)
    with pytest.raises(ValueError, match="repeats=0"):
        b.compare("c", {"a": lambda: None}, repeats=0)


def test_update_benchmarks_md_replaces_only_its_section(tmp_path):
    p = tmp_path / "B.md"
    update_benchmarks_md(str(p), "a:ci", "table A1")
    update_benchmarks_md(str(p), "b:ci", "table B1")
    update_benchmarks_md(str(p), "a:ci", "table A2")
    text = p.read_text()
    assert "table A2" in text and "table B1" in text and "table A1" not in text
    assert text.count("labkit-bench:a:ci begin") == 1


def test_rounding_never_makes_a_miss_read_like_a_pass():
    md = claims_markdown([Claim("x", "y", "z", 1.7, measured=1.69587)])
    assert "1.6959" in md and "miss" in md


def test_claims_section_goes_to_the_top(tmp_path):
    p = tmp_path / "B.md"
    update_benchmarks_md(str(p), "sys:small", "system table")
    update_benchmarks_md(str(p), "claims:small", "claims table", top=True)
    text = p.read_text()
    assert text.index("claims table") < text.index("system table")


def test_recorded_reads_back_what_the_harness_wrote(tmp_path):
    """A notebook's "recorded" table is the harness's own section of BENCHMARKS.md, misses explained."""
    from labkit.records import recorded
    claims = [Claim("spmm.fast", "fast enough", "2x", 1.5), Claim("spmm.slow", "also fast", "3x", 3.0),
              Claim("spmm.gpu", "on a GPU", "1.7x", 1.5)]
    b = Bench("spmm", "small", claims, progress=False)
    b.measure("spmm.fast", 2.0)
    b.measure("spmm.slow", 2.5)
    b.note("it needs 0.1 s per batch and training alone takes 0.12 s", claim="spmm.slow")
    b.note("an unrelated note about the machine")
    with pytest.raises(KeyError, match=r"claim='spmm\.nope' is not declared for spmm"):
        b.note("about nothing", claim="spmm.nope")
    md = tmp_path / "B.md"
    from labkit.records import record
    record(b.report(), str(md))
    r = recorded("spmm", "small", path=str(md))
    assert [(c["id"], c["measured"], c["verdict"]) for c in r.claims] == [
        ("spmm.fast", "2", "pass"), ("spmm.slow", "2.5", "miss"), ("spmm.gpu", "-", "not measured")]
    assert r.run.startswith("Run ") and len(r.notes) == 2
    assert r.notes_for("spmm.slow") == ["spmm.slow: it needs 0.1 s per batch and training alone takes 0.12 s"]
    text = r._repr_markdown_()
    assert "**miss**" in text and "training alone takes 0.12 s" in text and "unrelated" not in text
    with pytest.raises(ValueError, match=r"system='graph' has no record for profile small"):
        recorded("graph", "small", path=str(md))
    with pytest.raises(ValueError, match=r"system='nosuch' is not accepted"):
        recorded("nosuch")


def _report():
    b = Bench("toy", "ci", [Claim("toy.speed", "toy is fast", "2x", 1.5)], progress=False)
    b.measure("toy.speed", 2.0)
    return b.report()


def test_write_json_refuses_to_overwrite_without_force(tmp_path):
    j = tmp_path / "r.json"
    j.write_text('{"keep": 1}')
    with pytest.raises(FileExistsError, match="r.json"):
        write_json(_report(), str(j), overwrite=False)
    assert j.read_text() == '{"keep": 1}'
    write_json(_report(), str(j))  # the default (callers that checked, or --force) replaces it
    assert json.loads(j.read_text())["system"] == "toy"


def test_update_benchmarks_md_writes_several_sections_in_one_replacement(tmp_path, monkeypatch):
    import labkit.core.atomic as atomic
    writes = []
    real = atomic.atomic_write_text
    monkeypatch.setattr(atomic, "atomic_write_text", lambda p, t, **kw: (writes.append(t), real(p, t, **kw)))
    p = tmp_path / "B.md"
    update_benchmarks_md(str(p), "old:ci", "old table")
    update_benchmarks_md(str(p), sections=[("claims:ci", "claims table", True), ("a:ci", "table A", False),
                                           ("b:ci", "table B", False)])
    assert len(writes) == 2
    text = p.read_text()
    assert text.startswith("# Benchmarks")
    assert text.index("claims table") < text.index("old table") < text.index("table A") < text.index("table B")
    with pytest.raises(TypeError):
        update_benchmarks_md(str(p), "a:ci", "x", sections=[("b:ci", "y", False)])


def test_concurrent_update_benchmarks_md_keeps_both_sections(tmp_path, monkeypatch):
    """Two --record runs at once: each reads, edits and writes under the lock, neither loses the other's."""
    import threading

    import labkit.core.atomic as atomic
    real = atomic.atomic_write_text

    def slow_write(p, t, **kw):  # widen the read-edit-write window so an unlocked update loses a section
        time.sleep(0.3)
        real(p, t, **kw)

    monkeypatch.setattr(atomic, "atomic_write_text", slow_write)
    p = tmp_path / "B.md"
    update_benchmarks_md(str(p), "first:ci", "table 0")
    errors = []

    def record(key):
        try:
            update_benchmarks_md(str(p), key, f"table of {key}")
        except Exception as exc:  # pragma: no cover - shown by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(k,)) for k in ("a:ci", "b:ci")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    text = p.read_text()
    assert "table 0" in text and "table of a:ci" in text and "table of b:ci" in text


def test_update_benchmarks_md_calls_a_section_function_with_the_recorded_body(tmp_path):
    """A callable section is made from the body as recorded, read under the lock (reproduce --only merges so)."""
    p = tmp_path / "B.md"
    seen = []
    update_benchmarks_md(str(p), sections=[("claims:ci", lambda old: (seen.append(old), "rows v1")[1], True)])
    update_benchmarks_md(str(p), sections=[("claims:ci", lambda old: (seen.append(old), old.strip() + " + v2")[1],
                                            True)])
    assert seen[0] is None and seen[1].strip() == "rows v1"
    assert "rows v1 + v2" in p.read_text()


def test_update_benchmarks_md_refuses_a_file_that_is_not_a_benchmarks_file(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# My project\n\nHand-written prose.\n")
    with pytest.raises(ValueError,
                       match=r"^path='.*README\.md' is not accepted; expected a benchmarks file.*force=True"):
        update_benchmarks_md(str(readme), "a:ci", "table A")
    with pytest.raises(ValueError, match=r"^--record='.*README\.md' is not accepted.*pass --force"):
        update_benchmarks_md(str(readme), sections=[], arg="--record")  # the CLI's check before a bench
    assert readme.read_text() == "# My project\n\nHand-written prose.\n"
    update_benchmarks_md(str(readme), "a:ci", "table A", force=True)
    assert readme.read_text().startswith("# My project") and "table A" in readme.read_text()
    update_benchmarks_md(str(readme), "a:ci", "table A2")  # now it holds a labkit section
    empty, titled = tmp_path / "empty.md", tmp_path / "titled.md"
    empty.write_text("")
    titled.write_text("# Benchmarks\n\nnotes\n")
    update_benchmarks_md(str(empty), "a:ci", "table A")
    update_benchmarks_md(str(titled), "a:ci", "table A")
    assert empty.read_text().startswith("# Benchmarks") and "table A" in titled.read_text()
    update_benchmarks_md(str(tmp_path / "new.md"), sections=[])
    assert not (tmp_path / "new.md").exists()  # a check writes nothing


@pytest.mark.parametrize("broken", [
    "{b_spmm}\nold spmm\n\n{b_graph}\ng\n{e_graph}\n\nMy notes\n",   # spmm never ends
    "{b_graph}\ng\n{e_graph}\n{e_spmm}\n\nMy notes\n",               # an end with no begin
    "{b_spmm}\na\n{e_spmm}\n{b_spmm}\nb\n{e_spmm}\n\nMy notes\n",     # the same section twice
])
def test_record_refuses_a_file_whose_markers_are_broken_and_leaves_it_alone(tmp_path, broken):
    from labkit.records import BEGIN, END
    marks = {f"{x}_{k}": f.format(key=f"{k}:small") for x, f in (("b", BEGIN), ("e", END)) for k in ("spmm", "graph")}
    p = tmp_path / "BENCHMARKS.md"
    text = "# Benchmarks\n\n" + broken.format(**marks)
    p.write_text(text)
    for key in ("spmm:small", "graph:small", "disk:small"):
        with pytest.raises(ValueError, match=r"--record=.*BENCHMARKS.md.*one begin and one end marker.*nothing was written"):
            update_benchmarks_md(str(p), key, "### new", arg="--record")
    assert p.read_text() == text


def test_record_refuses_a_read_only_file_unless_forced(tmp_path):
    import os
    p = tmp_path / "BENCHMARKS.md"
    update_benchmarks_md(str(p), "spmm:small", "### one")
    os.chmod(p, 0o444)
    before = p.read_text()
    with pytest.raises(ValueError, match=r"--record=.* expected a writable file \(this one is read-only"):
        update_benchmarks_md(str(p), "spmm:small", "### two", arg="--record")
    assert p.read_text() == before
    update_benchmarks_md(str(p), "spmm:small", "### two", arg="--record", force=True)
    assert "### two" in p.read_text()


def test_require_memory_refuses_on_one_line_naming_both_sizes():
    from labkit.core.errors import LabkitError
    from labkit.core.machine import require_memory
    require_memory("job", 1 << 30, available=2 << 30)  # fits: nothing raised
    with pytest.raises(LabkitError) as e:
        require_memory("labkit bench x --profile large", 3 << 30, available=1 << 30, hint="run a smaller --profile")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("labkit bench x --profile large needs about 3.0 GiB of memory; "
                          "this machine has 1.0 GiB available (")
    assert msg.endswith("in all): run a smaller --profile")


def test_a_system_whose_profile_needs_more_memory_than_is_available_is_refused_before_its_bench_runs(monkeypatch):
    from labkit.core import machine
    from labkit.core.errors import LabkitError
    from labkit.core.systems import System
    ran, asked = [], []

    def need(profile):
        asked.append(profile)
        return {"ci": 1 << 20, "small": 1 << 50}[profile]
    s = System("toy", "Toy", "a toy", lambda b: ran.append(b.profile), memory=need)
    monkeypatch.setattr(machine, "available_memory_bytes", lambda: 1 << 30)
    with pytest.raises(LabkitError, match=r"^labkit bench toy --profile small needs about 1024\.0 TiB of memory; "
                                          r"this machine has 1\.0 GiB available .*: close other programs"):
        s.run_bench("small", progress=False)
    assert ran == [] and asked == ["small"]
    s.run_bench("ci", progress=False)
    assert ran == ["ci"]
    with pytest.raises(ValueError, match="profile='huge' is not accepted"):
        s.run_bench("huge", progress=False)  # the profile is checked before the estimate is asked
    assert asked == ["small", "ci"]


def test_a_long_comparison_shows_a_progress_bar_over_its_calls_and_a_quick_one_does_not(monkeypatch):
    import io

    from labkit.core import bench as bench_mod
    out = io.StringIO()
    b = Bench("toy", "ci", out=out)
    c = b.compare("quick", {"a": lambda: None, "b": lambda: None}, repeats=2)
    assert out.getvalue().startswith("[toy] quick: a ") and "round" not in out.getvalue()
    monkeypatch.setattr(bench_mod, "PROGRESS_DELAY_S", 0.0)
    out.seek(0), out.truncate()
    c = b.compare("slow", {"a": lambda: time.sleep(0.06), "b": lambda: None}, repeats=3, warmup=1)
    text = out.getvalue()
    assert "[toy] slow:" in text and "/8 [" in text and "round " in text, text  # the bar, with its round
    # The bar is cleared (carriage return, blanks, carriage return) before the log line is printed.
    assert text.count("\n") == 1 and text.endswith("\n") and "\r[toy] slow: a " in text, text
    assert len(c.times["a"]) == 3 and min(c.times["a"]) >= 0.06
    # The bar's updates are outside the timed calls: a bar that takes 50 ms per update leaves a no-op's
    # times well under that.
    real = bench_mod.progress_bar

    def slow_bar(*a, **kw):
        bar = real(*a, **kw)
        update = bar.update
        bar.update = lambda n=1: (time.sleep(0.05), update(n))
        return bar
    monkeypatch.setattr(bench_mod, "progress_bar", slow_bar)
    c = Bench("toy", "ci", out=io.StringIO()).compare("noop", {"a": lambda: None}, repeats=3)
    assert max(c.times["a"]) < 0.05, c.times
    quiet = io.StringIO()
    Bench("toy", "ci", out=quiet, progress=False).compare("slow", {"a": lambda: None}, repeats=2)
    assert quiet.getvalue() == ""


def test_steal_share_from_proc_stat_readings_and_in_the_report_header(monkeypatch):
    import labkit.core.bench as bench_mod
    import labkit.core.machine as machine_mod
    from labkit.core.machine import cpu_ticks, steal_share
    assert steal_share((10, 1000), (60, 2000)) == pytest.approx(0.05)
    assert steal_share(None, (1, 2)) is None and steal_share((5, 100), (5, 100)) is None
    now = cpu_ticks()  # the real reading: (steal, total) ints, or None where /proc/stat is unreadable
    assert now is None or (isinstance(now[0], int) and 0 <= now[0] <= now[1])
    # a run whose readings are 20 steal ticks out of 400
    readings = iter([(100, 1000), (120, 1400)])
    monkeypatch.setattr(bench_mod, "cpu_ticks", lambda: next(readings))
    monkeypatch.setattr(machine_mod, "cpu_ticks", lambda: next(readings))
    b = Bench("demo", "ci")
    b.record("x", 1.0)
    r = b.report()
    assert r.machine["cpu_steal"] == pytest.approx(0.05)
    assert "the hypervisor stole 5.0% of the machine's CPU time during the run" in r.to_markdown()
    assert BenchReport.from_json(r.to_json()).machine["cpu_steal"] == r.machine["cpu_steal"]
    # a run too short for a tick to pass, or a machine without /proc/stat: no clause
    for pair in ([(5, 100), (5, 100)], [None, None]):
        readings = iter(pair)
        b = Bench("demo", "ci")
        b.record("x", 1.0)
        r = b.report()
        assert r.machine["cpu_steal"] is None and "stole" not in r.to_markdown()
