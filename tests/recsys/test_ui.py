"""The PICASSO widgets and the notebook's side-by-side table, driven without a browser."""

import pytest

from labkit.core.bench import Comparison
from labkit.recsys.bench import comparison_table, embedding_side_by_side


def test_technique_explorer_shows_live_numbers_in_coloured_panels():
    pytest.importorskip("ipywidgets")
    from labkit.ui.recsys import BASELINE_COLOR, TECH_COLORS, explorer_table, technique_explorer
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=200, steps=1)
    assert len(fig.data) == len(TECH_COLORS) == 3
    for tr, (metric, color) in zip(fig.data, TECH_COLORS.items()):
        assert tr.name == metric and color in tuple(tr.marker.color)
    r = state.result
    assert list(fig.data[0].y) == [r["baseline_samples_s"], r["samples_s"]]
    assert list(fig.data[1].y) == [r["baseline_ops"], r["ops"]] and r["baseline_ops"] > r["ops"]
    assert tuple(fig.data[1].marker.color)[0] == BASELINE_COLOR
    assert list(fig.data[2].y) == [0.0] and "no cache" in fig.data[2].x[0]  # caching off
    state.controls["caching"].value = True
    assert state.error is None
    assert list(fig.data[2].y) == [state.result["hit_rate"]] and 0 < state.result["hit_rate"] <= 1
    assert fig.data[0].x[1] == "packing+cache" and "packing+cache vs per-field" in fig.layout.title.text
    r = state.result
    assert r["speedup_lo"] <= r["speedup"] <= r["speedup_hi"] and r["steps"] == 1
    table = explorer_table(r)
    assert [row["model"] for row in table.rows] == ["per-field", "packing+cache"]
    assert table.rows[1]["cache hit rate"].endswith("%") and "x [" in table.rows[1]["speedup"]


def test_packing_headline_times_both_stages_interleaved():
    from labkit.ui.recsys import packing_headline
    table, sp = packing_headline(4, 300, 64, rounds=3)
    assert [r["stage"] for r in table.rows] == ["per-field tables", "one packed table"]
    assert [r["lookups/step"] for r in table.rows] == [4, 1]
    assert sp.n == 3 and sp.lo <= sp.median <= sp.hi and str(sp) in table.title
    with pytest.raises(ValueError, match="fields=0"):
        packing_headline(0, 300, 64)


def test_lab_settings_name_each_profile():
    from labkit.ui.recsys import lab_settings
    lab = lab_settings("lab")
    assert lab["dataset"] == "ci" and lab["headline"]["rounds"] >= 5
    assert lab_settings("small")["dataset"] == "small"
    lab["headline"]["rounds"] = 1
    assert lab_settings("lab")["headline"]["rounds"] >= 5  # a copy: the notebook cannot change the table
    with pytest.raises(ValueError, match="PROFILE='huge'"):
        lab_settings("huge")


def test_comparison_table_rows_are_readable():
    c = Comparison("case x", {"per_field@1": [0.02, 0.03, 0.02], "packed@2": [0.005, 0.006, 0.004]},
                   work=1000, work_unit="samples")
    t = comparison_table(c, "per_field@1")
    assert t.title == "case x"
    assert [r["contender"] for r in t.rows] == ["per_field", "packed"] and [r["threads"] for r in t.rows] == [1, 2]
    pk = t.rows[1]
    assert pk["median ms"] == pytest.approx(5.0) and pk["ksamples/s"] == pytest.approx(200.0)
    assert pk["speedup vs per_field@1"] == pytest.approx(5.0)  # median of per-round ratios 4, 5, 5
    assert t.rows[0]["speedup vs per_field@1"] == 1.0


def test_embedding_side_by_side_runs_the_bench_case():
    table, ratios = embedding_side_by_side("ci", fields=4, rows=300, batch=64, repeats=1, torchrec=False)
    names = {(r["contender"]) for r in table.rows}
    assert names == {"per_field", "packed"} and ratios["packed_vs_per_field"] > 0
    assert all(r["median ms"] > 0 for r in table.rows)
    with pytest.raises(ValueError, match="fields=0"):
        embedding_side_by_side("ci", fields=0, rows=300, batch=64)
    with pytest.raises(ValueError, match="profile='huge'"):
        embedding_side_by_side("huge", fields=4, rows=300, batch=64)


def test_ops_vs_fields_counts_flat_packed_ops():
    from labkit.ui.recsys import ops_vs_fields
    t = ops_vs_fields((2, 8), cardinality=50, dim=4, batch=16)
    assert [r["fields"] for r in t.rows] == [2, 8] and "Wide & Deep" in t.title
    few, many = t.rows
    assert many["per-field"] > few["per-field"] and many["packed"] == few["packed"]  # packing adds rows, not ops
    assert all(r["ratio"] == r["per-field"] / r["packed"] for r in t.rows)
    with pytest.raises(ValueError, match="fields"):
        ops_vs_fields(())


def test_same_loss_trains_every_setting_on_the_same_batches():
    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.ui.recsys import LOSS_SETTINGS, same_loss
    specs = make_fields(4, cardinality=200, dims=8)
    gen = SyntheticCTR(specs, seed=1)
    batches = [gen.batch(64, i) for i in range(3)]
    table, losses, match = same_loss(specs, batches)
    assert list(losses) == list(LOSS_SETTINGS) and all(len(v) == 3 for v in losses.values())
    assert match is True and "match: True" in table.title and [r["step"] for r in table.rows] == [0, 1, 2]
    assert table.rows[1]["packed"] == losses["packed"][1]
    # A different model (another seed) does not match: the check is real.
    _, _, differs = same_loss(specs, batches, {"a": {}, "b": {"seed": 7}})
    assert differs is False


def test_cache_demo_owns_its_stage_until_the_explorer_goes():
    import gc

    from labkit.ui.recsys import cache_demo
    view, fig, state = cache_demo(6, 500, 64, count_batches=3, measure_batches=2)
    tier_dir = state.stage.slow_tier.dir
    assert tier_dir.exists() and 0 < state.result["hit_rate"] <= 1
    state.controls["cache %"].value = 20
    assert state.error is None and state.result["cache_pct"] == 20  # the slider still works: nothing closed

    def close_widgets(w):  # what closing the notebook does: the widget registry lets the explorer go
        for c in getattr(w, "children", ()):
            close_widgets(c)
        w.close()
    close_widgets(view)
    del view, fig, state
    gc.collect()
    assert not tier_dir.exists()  # files removed with the explorer (or at exit)
    _, _, state = cache_demo(6, 500, 64, count_batches=3, measure_batches=2)
    tier_dir = state.stage.slow_tier.dir
    state.close()
    assert not tier_dir.exists() and not state.close.alive


def test_sample_rate_probe_reads_samples_per_second_between_readings(monkeypatch):
    from labkit.ui import recsys as ui
    clock = iter([10.0, 12.0, 12.0, 13.0])
    monkeypatch.setattr(ui.time, "monotonic", lambda: next(clock))
    r = ui.SampleRate()
    assert r() == 0.0  # first reading: nothing to compare with
    r.add(100)
    assert r() == 50.0  # 100 samples in 2 s
    assert r() == 0.0   # no time passed
    r.add(30)
    assert r() == 30.0 and r.total == 130


def test_train_watched_trains_for_its_seconds_with_a_throughput_series(monkeypatch):
    import time

    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.ui import dashboard
    from labkit.ui.recsys import train_watched

    def wait_for(cond):  # however busy the machine is, the sampling thread gets its turn
        deadline = time.monotonic() + 60
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.02)

    made = []

    class Dashboard(dashboard.Dashboard):
        """train_watched's dashboard; stopping waits for a tick that read the training's throughput."""

        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            made.append(self)

        def stop(self, timeout=None):
            wait_for(lambda: any(s["samples/s"] for s in self.samples))
            super().stop(timeout)

    monkeypatch.setattr(dashboard, "Dashboard", Dashboard)
    specs = make_fields(3, cardinality=100, dims=4)
    batches = [SyntheticCTR(specs).batch(32, i) for i in range(2)]
    shown = []

    def show(view):  # called before training: let the first reading happen first
        shown.append(view)
        wait_for(lambda: made[-1].samples)

    dash, out = train_watched(specs, batches, 0.6, interval=0.1, show=show)
    assert made == [dash] and shown == [dash.view] and not dash.running
    # It trains until its seconds are up: how many steps fit in them depends on the machine's load
    # (a first step has measured over 2 s on the loaded 2-core machine).
    assert out["seconds"] >= 0.6 and out["steps"] >= 1 and out["samples"] == 32 * out["steps"]
    rates = [s["samples/s"] for s in dash.samples]
    # The first reading (before training) has nothing to compare with; a later one saw the training.
    assert len(rates) >= 2 and rates[0] == 0.0 and max(rates) > 0
    with pytest.raises(ValueError, match="seconds"):
        train_watched(specs, batches, 0)
