"""GoldMiner widgets driven without a browser: the cut graph, the control panel, simulator plots."""

from __future__ import annotations

import pytest

from labkit.dataworkers.autoscale import Autoscaler
from labkit.dataworkers.extract import extract
from labkit.dataworkers.simulator import Cluster, compare
from labkit.dataworkers.workers import ProcessWorkerPool
from labkit.ui.dataworkers import (control_panel, cut_graph, history_table, live_job, simulator_explorer,
                                  simulator_plots)


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
    assert list(fig.data[1].y) == [first["static"].gpu_util, first["elastic"].gpu_util]
    state.controls["CPU servers"].value = 4
    assert state.updates == 2 and state.error is None
    # More CPU-only servers give the elastic policy more CPUs; the static policy cannot use them.
    assert state.result["static"].avg_jct == first["static"].avg_jct
    assert state.result["elastic"].avg_jct <= first["elastic"].avg_jct
    assert "better" in fig.layout.title.text
    assert len(simulator_plots(state.result).data) == 4
    # The CDF and utilisation plots under the bars follow the sliders (same run as the bars).
    assert state.plots in view.children and len(state.plots.data) == 4
    assert [t.name for t in state.plots.data] == [t.name for t in simulator_plots(state.result).data]
    assert list(state.plots.data[0].x) == list(simulator_plots(state.result).data[0].x)
    state.controls["load"].value = 0.8
    assert state.plots.layout.title.text == simulator_plots(state.result).layout.title.text
    assert list(state.plots.data[2].y) == list(simulator_plots(state.result).data[2].y)


@pytest.mark.parametrize("kw, match", [({"n_jobs": 0}, r"n_jobs=0"), ({"load": 0.9}, r"load=0.9"),
                                       ({"cpu_servers": 9}, r"cpu_servers=9")])
def test_simulator_explorer_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        simulator_explorer(**{"n_jobs": 10, **kw})


def test_live_job_runs_in_the_background_and_always_closes_its_pool(image_prog, no_leaks):
    import time
    split = extract(image_prog)
    live = live_job(image_prog, split, seconds=3.0, max_workers=2, max_cpus=2, window_s=0.3, interval=0.2)
    redraws, redraw = [], live.panel.redraw

    def counted():  # the dashboard's ticks call this; note the bars' total each one drew
        redraw()
        redraws.append(sum(live.panel.fig.data[0].y))
    live.panel.redraw = counted
    try:
        assert live.job.running and live.dash.running  # started, and live_job returned at once
        assert live.view.children[0].children[-1] is live.panel.buttons["kill"]
        assert not live.killed
        assert live.kill_once(at_s=1.0) and live.killed
        assert not live.kill_once(at_s=1.5)  # once only
        time.sleep(0.5)
        # The dashboard ticks until finish(), after the job's time too: wait (however busy the
        # machine is) for ticks to have redrawn the bars more than once, once with batches on them.
        deadline = time.monotonic() + 60
        while (len(redraws) < 2 or max(redraws) < 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = live.finish()
    finally:
        live.close()  # idempotent
    assert stats.batches > 0 and not live.job.running and not live.dash.running
    assert live.pool_stats["worker_deaths"] == 1 and live.pool_stats["delivered"] == stats.batches
    # The dashboard's ticks redrew the per-worker bars (not only the kill and slider did).
    assert len(redraws) >= 2 and max(redraws) >= 1 and sum(live.panel.fig.data[0].y) >= 1
    assert any(s.get("workers") for s in live.dash.samples)
    t = history_table(live.scaler)
    assert t.title == "autoscaler windows" and len(t.rows) == len(live.scaler.history) >= 1
    assert list(t.rows[0]) == ["t (s)", "workers after action", "batches/s", "stall", "job CPUs busy", "action"]
    assert [r["workers after action"] for r in t.rows] == [h.workers for h in live.scaler.history]


def test_live_job_kill_once_does_nothing_after_the_job_ended(image_prog, no_leaks):
    split = extract(image_prog)
    live = live_job(image_prog, split, seconds=0.5, max_workers=1, max_cpus=1)
    try:
        live.job.join()
        assert not live.kill_once(at_s=0.1) and not live.killed
    finally:
        live.finish()
    assert live.pool_stats["worker_deaths"] == 0


def test_control_panel_redraw_counts_batches_per_worker(image_prog, no_leaks):
    split = extract(image_prog)
    with ProcessWorkerPool(split.stateless, workers=1, max_workers=2) as pool:
        view, fig, state = control_panel(pool, None, max_cpus=2)
        got = len(list(pool.stream(image_prog.batches(0))))
        assert sum(fig.data[0].y or ()) == 0  # drawn before any batch
        state.redraw()
        assert sum(fig.data[0].y) == got and state.updates == 1  # a redraw is not a budget change
