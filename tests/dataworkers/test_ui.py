"""GoldMiner widgets driven without a browser: the cut graph, the control panel, simulator plots."""

from __future__ import annotations

import pytest

from labkit.dataworkers.autoscale import Autoscaler
from labkit.dataworkers.extract import extract
from labkit.dataworkers.simulator import Cluster, compare
from labkit.dataworkers.workers import ProcessWorkerPool
from labkit.ui.dataworkers import (LivePanel, compare_jobs, control_panel, cut_graph, lab_settings,
                                  simulator_explorer, simulator_plots)


def test_cut_graph_colours_moved_nodes(image_prog):
    split = extract(image_prog)
    fig = cut_graph(split.cut)
    moved = next(t for t in fig.data if t.name == "data workers (stateless)")
    assert set(split.cut.prefix_nodes) <= set(moved.text) and "body_0" not in moved.text
    assert "traced prefix" in fig.layout.title.text
    assert "Dataset + collate_fn only" in cut_graph(extract(image_prog, model_cut=False).cut).layout.title.text


def test_control_panel_budget_and_kill(image_prog, no_leaks):
    split = extract(image_prog)
    with ProcessWorkerPool(split.stateless, workers=1, max_workers=3) as pool:
        scaler = Autoscaler(pool, max_workers=3)
        view, fig, state = control_panel(pool, scaler, max_cpus=3)
        state.controls["CPU budget"].value = 2
        assert scaler.max_workers == 2
        got = len(list(pool.stream(image_prog.batches(0))))
        assert state.buttons["kill"] is view.children[0].children[-1]
        assert state.buttons["kill"].description == "kill a worker"
        updates = state.updates
        state.buttons["kill"].click()
        # The kill is the last action: the budget was not touched, so no "budget" line follows it.
        assert got == len(image_prog.batches(0)) and state.result[-1].startswith("killed worker"), state.result
        assert state.result[:-1] == ["budget 3", "budget 2"] and state.updates == updates
        assert list(fig.data[0].y) and sum(fig.data[0].y) == got


def test_simulator_plots_show_both_policies():
    fig = simulator_plots(compare(40, cluster=Cluster(gpu_servers=2, cpu_servers=1)))
    assert {t.name.split(":")[0] for t in fig.data} == {"static", "elastic"} and len(fig.data) == 4


def test_simulator_explorer_sliders_rerun_the_simulator():
    view, fig, state = simulator_explorer(30, load=0.4, cpu_servers=0)
    first = state.result
    assert set(first) >= {"static", "elastic", "jct_improvement", "gpu_util_improvement"}
    assert list(fig.data[0].y) == [first["static"].avg_jct / 3600, first["elastic"].avg_jct / 3600]
    assert list(fig.data[1].y) == [100 * first["static"].gpu_util, 100 * first["elastic"].gpu_util]
    # One axis per panel, each with its unit: JCT in hours on the left, utilisation in % on the right.
    assert fig.data[0].yaxis == "y" and fig.data[1].yaxis == "y2" and fig.layout.yaxis2.overlaying is None
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text) == ("hours", "% of allocated GPU time busy")
    assert fig.layout.title.text.startswith("Modelled")
    state.controls["CPU-only servers"].value = 4
    assert state.updates == 2 and state.error is None
    # More CPU-only servers give the elastic policy more CPUs; the static policy cannot use them.
    assert state.result["static"].avg_jct == first["static"].avg_jct
    assert state.result["elastic"].avg_jct <= first["elastic"].avg_jct
    assert "shorter" in fig.layout.title.text
    assert len(simulator_plots(state.result).data) == 4
    # The CDF and utilisation plots under the bars follow the sliders (same run as the bars).
    assert state.plots in view.children and len(state.plots.data) == 4
    assert [t.name for t in state.plots.data] == [t.name for t in simulator_plots(state.result).data]
    assert list(state.plots.data[0].x) == list(simulator_plots(state.result).data[0].x)
    state.controls["offered load"].value = 0.8
    assert state.plots.layout.title.text == simulator_plots(state.result).layout.title.text
    assert list(state.plots.data[2].y) == list(simulator_plots(state.result).data[2].y)


@pytest.mark.parametrize("kw, match", [({"n_jobs": 0}, r"n_jobs=0"), ({"load": 0.9}, r"load=0.9"),
                                       ({"cpu_servers": 9}, r"cpu_servers=9")])
def test_simulator_explorer_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        simulator_explorer(**{"n_jobs": 10, **kw})


def test_lab_settings_name_each_profile():
    lab = lab_settings("lab")
    assert lab["dataset"] == "ci" and 0 < lab["step_share"] < 1 and lab["rounds"] >= 5
    assert lab_settings("large") == lab_settings("small")
    with pytest.raises(ValueError, match="PROFILE="):
        lab_settings("huge")


def test_compare_jobs_times_every_contender_interleaved(image_prog, no_leaks):
    split = extract(image_prog)
    jc = compare_jobs(image_prog, split, step_ms=2.0, batches=3, rounds=2, workers=(1, 2))
    assert jc.names == ["monolithic", "1 data worker", "2 data workers"]
    assert all(len(jc.comp.times[n]) == 2 for n in jc.names)
    sp = jc.speedup()
    assert sp.lo <= sp.median <= sp.hi and sp.n == 2
    t = jc.table()
    assert [r["job"] for r in t.rows] == jc.names and t.rows[0]["speedup"] == "1 (baseline)"
    assert t.rows[2]["reading"] in ("faster", "slower", "within noise") and " s [" in t.rows[1]["time per job"]
    fig = jc.figure()
    assert len(fig.data[0].y) == 2 and fig.layout.yaxis.title.text.startswith("speedup (x)")


def test_live_panel_shows_before_start_and_every_control_works(image_prog, no_leaks):
    import time
    split = extract(image_prog)
    panel = LivePanel(image_prog, split, step_ms=2.0, workers=1, max_workers=3, max_seconds=60, interval=0.1)
    try:
        assert not panel.running and panel.kill_button.disabled and not panel.start_button.disabled
        assert "Not started" in panel.status.value and panel.dash.view in panel.view.children
        assert panel.kill() is None  # nothing to kill yet
        panel.start_button.click()
        assert panel.running and panel.start_button.disabled and not panel.kill_button.disabled

        def wait(cond, limit=60.0):
            deadline = time.monotonic() + limit
            while not cond() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert cond()
        wait(lambda: panel.job.metrics()["batches"] >= 3)
        panel.slider.value = 3  # the budget resizes the running job's pool
        assert panel.pool.target == 3 and panel.events[-1][1] == "budget 3 workers"
        wait(lambda: panel.pool.num_workers == 3)
        wait(lambda: any(s.get("workers") == 3 for s in panel.dash.samples))  # visible in the dashboard
        panel.kill_button.click()
        assert panel.events[-1][1].startswith("killed worker") and "no batch is lost" in panel.status.value
        n = panel.job.metrics()["batches"]
        wait(lambda: panel.job.metrics()["batches"] >= n + 3)  # it recovers: training goes on
        panel.stop_button.click()
        assert not panel.running and not panel.dash.running and not panel.start_button.disabled
        s = panel.summary_dict()
        assert s["worker deaths"] == 1 and s["batches lost"] == 0 and s["batches trained"] >= n + 3
        # The bars count batches made, some of them ahead of use.
        assert "Stopped" in panel.status.value and sum(panel.bars.data[0].y) >= s["delivered"]
        assert [r["measure"] for r in panel.summary().rows][-1] == "batches lost"
        shapes = len(panel.dash.fig.layout.shapes)
        assert shapes >= 4  # start, budget, kill and stop marked on the dashboard
        assert panel.stop().rows  # idempotent
    finally:
        panel.stop()


def test_live_panel_demo_is_bounded_and_stops_itself(image_prog, no_leaks):
    split = extract(image_prog)
    panel = LivePanel(image_prog, split, step_ms=2.0, workers=1, max_workers=2, max_seconds=60, interval=0.1)
    panel.demo(2.0)
    assert not panel.running and [e[1].split()[0] for e in panel.events] == ["start,", "budget", "killed", "stop"]
    assert panel.summary_dict()["worker deaths"] == 1 and panel.summary_dict()["batches lost"] == 0


def test_live_panel_job_ends_by_itself_after_max_seconds(image_prog, no_leaks):
    split = extract(image_prog)
    panel = LivePanel(image_prog, split, step_ms=2.0, workers=1, max_workers=1, max_seconds=0.5, interval=0.1)
    panel.start()
    panel.wait(60)
    assert panel.pool_stats is not None and not panel.running and not panel.dash.running
    assert panel.summary_dict()["batches trained"] >= 1


def test_control_panel_redraw_counts_batches_per_worker(image_prog, no_leaks):
    split = extract(image_prog)
    with ProcessWorkerPool(split.stateless, workers=1, max_workers=2) as pool:
        view, fig, state = control_panel(pool, None, max_cpus=2)
        got = len(list(pool.stream(image_prog.batches(0))))
        assert sum(fig.data[0].y or ()) == 0  # drawn before any batch
        state.redraw()
        assert sum(fig.data[0].y) == got and state.updates == 1  # a redraw is not a budget change


def test_sensitivity_figure_draws_the_gain_per_demand_level():
    from labkit.dataworkers.simulator import sensitivity
    from labkit.ui.dataworkers import sensitivity_figure

    t = sensitivity((2.0, 8.0, 24.0), n_jobs=30, cluster=Cluster(gpu_servers=2, cpu_servers=1))
    fig = sensitivity_figure(t)
    assert [tr.name for tr in fig.data] == ["JCT gain", "GPU utilisation gain", "the trace as drawn"]
    assert list(fig.data[0].x) == list(t["demand"]) and list(fig.data[0].y) == list(t["jct_gain"])
    assert list(fig.data[2].x) == list(t.loc[t["base"], "demand"])
    assert fig.layout.title.text.startswith("Modelled")
    assert fig.layout.xaxis.title.text == "mean CPU-per-GPU demand of the trace (vCPUs per GPU)"
    assert fig.layout.yaxis.title.text == "gain (x), static vs elastic"
    marks = sorted(s.x0 for s in fig.layout.shapes if s.x0 == s.x1)
    assert marks == [t.attrs["cpus_per_gpu"], t.attrs["pooled_cpus_per_gpu"]]
    with pytest.raises(ValueError, match=r"table='dict' is not accepted; expected the non-empty DataFrame"):
        sensitivity_figure({})
