"""Every plot a lab notebook draws says on its axes what is measured and in which unit."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("ipywidgets")


def _titles(fig, *axes):
    return tuple(fig.layout[a].title.text for a in axes)


def test_cache_explorer_share_axis():
    from labkit.core.spread import Spread
    from labkit.ui.graph import cache_explorer

    def measure(size):
        return {p: Spread(30.0, 29.0, 31.0, 5, "%") for p in ("importance", "in-degree", "degree", "random")}
    view, fig, state = cache_explorer(measure)
    assert _titles(fig, "yaxis", "xaxis2", "yaxis2") == ("hit rate (%)", "cache size (% of list bytes)",
                                                         "hit rate (%)")


def test_tuner_figure_and_stage_timeline_are_titled():
    from labkit.ui.disk import stage_timeline, tuner_figure
    curve = [{"f": f / 4, "total": 1.0 - f / 10, "sample": 0.2, "gather": 0.3} for f in range(5)]
    fig = tuner_figure(curve, {0.0: 1.1, 1.0: 0.7}, tuned=0.75)
    assert fig.layout.title.text == "Tuner: predicted vs measured (tuned split 0.75)"
    assert _titles(fig, "xaxis", "yaxis") == ("share of cache budget given to topology", "seconds per mini-batch")
    stats = types.SimpleNamespace(timeline=[("sample", 0, 0.0, 0.1), ("gather", 0, 0.1, 0.2), ("train", 0, 0.2, 0.5)],
                                  schedule="serial")
    tl = stage_timeline(stats)
    assert _titles(tl, "xaxis", "yaxis") == ("seconds since the run started", "stage")


def test_simulator_plots_and_control_panel_axes():
    from labkit.dataworkers.simulator import Cluster, compare
    from labkit.ui.dataworkers import control_panel, simulator_plots
    fig = simulator_plots(compare(20, cluster=Cluster(gpu_servers=2, cpu_servers=1)))
    assert _titles(fig, "xaxis", "yaxis") == ("hours", "share of jobs finished")
    assert _titles(fig, "xaxis2", "yaxis2") == ("hours since first arrival", "share of allocated GPUs busy")

    class Pool:
        target = 2
        stats = types.SimpleNamespace(per_worker={0: {"batches": 3}, 1: {"batches": 5}})

        def set_target(self, n):
            self.target = n
    view, panel, state = control_panel(Pool(), None, max_cpus=2)
    assert _titles(panel, "xaxis", "yaxis") == ("worker id", "batches") and list(panel.data[0].y) == [3, 5]


def test_dashboard_time_axis():
    from labkit.ui.dashboard import Dashboard
    dash = Dashboard(interval=0.5, extra={"queue": lambda: 1})
    bottom = sorted(k for k in dash.fig.layout if k.startswith("xaxis"))[-1]
    assert dash.fig.layout[bottom].title.text == "seconds since the dashboard started"
    # The last panel is named after the series it draws, not "extra".
    assert [a.text for a in dash.fig.layout.annotations][-1] == "queue"
