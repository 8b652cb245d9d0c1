"""GoldMiner widgets driven without a browser: the cut graph, the control panel, simulator plots."""

from __future__ import annotations

import pytest

from labkit.dataworkers.autoscale import Autoscaler
from labkit.dataworkers.extract import extract
from labkit.dataworkers.simulator import Cluster, compare
from labkit.dataworkers.workers import ProcessWorkerPool
from labkit.ui.dataworkers import control_panel, cut_graph, simulator_explorer, simulator_plots


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
        state.buttons["kill"].click()
        assert got == len(image_prog.batches(0)) and state.result[-2].startswith("killed worker")
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


@pytest.mark.parametrize("kw, match", [({"n_jobs": 0}, r"n_jobs=0"), ({"load": 0.9}, r"load=0.9"),
                                       ({"cpu_servers": 9}, r"cpu_servers=9")])
def test_simulator_explorer_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        simulator_explorer(**{"n_jobs": 10, **kw})
