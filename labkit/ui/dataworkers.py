"""GoldMiner widgets: the program cut as a graph, the data-worker control panel, simulator plots."""

from __future__ import annotations

from typing import Any


def cut_graph(cut: Any) -> Any:
    """Return a plotly figure of the traced program: nodes moved to data workers vs kept in the trainer."""
    import plotly.graph_objects as go

    if cut.graph is None:
        fig = go.Figure()
        fig.update_layout(title=f"{cut.program}: Dataset + collate_fn only (no model graph traced)", height=200)
        return fig
    nodes = [n for n in cut.graph.graph.nodes]
    xs = {n.name: i for i, n in enumerate(nodes)}
    moved = set(cut.prefix_nodes) | {n.name for n in nodes if n.op == "placeholder"}
    frontier = set(cut.frontier)
    ys = {n.name: (0.0 if n.name in moved else (1.0 if n.op == "get_attr" else 0.5)) for n in nodes}
    ex, ey = [], []
    for a, b in cut.edges():
        ex += [xs[a], xs[b], None]
        ey += [ys[a], ys[b], None]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#bbb", "width": 1}, hoverinfo="skip",
                             showlegend=False))
    for label, pick, color in (("data workers (stateless)", lambda n: n.name in moved, "#2a9d8f"),
                               ("trainer", lambda n: n.name not in moved, "#e76f51")):
        sel = [n for n in nodes if pick(n)]
        fig.add_trace(go.Scatter(
            x=[xs[n.name] for n in sel], y=[ys[n.name] for n in sel], mode="markers+text", name=label,
            text=[n.name for n in sel], textposition="top center",
            marker={"size": [16 if n.name in frontier else 11 for n in sel], "color": color,
                    "line": {"width": [3 if n.name in frontier else 0 for n in sel], "color": "black"}},
            hovertext=[f"{n.op}: {n.target}" + (f"<br>stops the cut: {cut.stopped[n.name]}"
                                                if n.name in cut.stopped else "") for n in sel]))
    last = max((xs[n] for n in cut.prefix_nodes), default=0)
    fig.add_vline(x=last + 0.5, line_dash="dash", annotation_text="cut")
    fig.update_layout(title=f"{cut.program}: the automatic cut ({cut.kind})", height=320,
                      yaxis={"visible": False, "range": [-0.4, 1.4]}, xaxis={"title": "graph order"})
    return fig


def control_panel(pool: Any, autoscaler: Any | None = None, *, max_cpus: int = 8) -> tuple[Any, Any, Any]:
    """Return ``(view, fig, state)``: a CPU-budget slider, a kill-a-worker button, and the worker log.

    The slider caps the workers (through the autoscaler when there is one); the button SIGKILLs
    the worker holding the most batches. ``state.result`` is the list of actions taken;
    ``state.controls["CPU budget"]`` is the slider and ``state.buttons["kill"]`` the button
    (notebooks and tests call ``.click()`` on it).
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.ui import slider_plot

    actions: list[str] = []
    fig = go.FigureWidget(go.Bar(x=[], y=[], name="batches per worker"))
    fig.update_layout(title="batches made per data worker", height=260, xaxis={"title": "worker id"})

    def update(fig: Any, values: dict) -> list[str]:
        n = int(values["CPU budget"])
        if autoscaler is not None:
            autoscaler.set_budget(n)
        elif pool.target != n:
            pool.set_target(n)
        actions.append(f"budget {n}")
        per = pool.stats.per_worker
        fig.data[0].x = [str(w) for w in per]
        fig.data[0].y = [v["batches"] for v in per.values()]
        return actions

    start = int(getattr(autoscaler, "max_workers", None) or pool.target)
    slider = W.IntSlider(value=min(start, max_cpus), min=1, max=max_cpus, description="CPU budget")
    view, fig, state = slider_plot({"CPU budget": slider}, update, fig)
    button = W.Button(description="kill a worker", button_style="danger")

    def kill(_: Any) -> None:
        try:
            actions.append(f"killed worker {pool.kill_worker()}")
        except Exception as exc:  # noqa: BLE001 - shown, not raised into the widget callback
            actions.append(f"kill failed: {exc}")
        state.refresh()

    button.on_click(kill)
    view.children[0].children = tuple(view.children[0].children) + (button,)
    # Not in state.controls: those are the value widgets a refresh re-reads.
    state.buttons = {"kill": button}
    return view, fig, state


def simulator_explorer(n_jobs: int = 120, *, load: float = 0.4, cpu_servers: int = 4,
                       seed: int = 0) -> tuple[Any, Any, Any]:
    """Return ``(view, fig, state)``: offered-load and CPU-only-server sliders re-running the simulator.

    Each move replays one :func:`labkit.dataworkers.simulator.compare` trace of `n_jobs` jobs on
    the default 64-GPU cluster with that many CPU-only servers; the bars show average JCT (hours)
    and GPU utilisation for static vs elastic, and ``state.result`` is compare's dict (what
    :func:`simulator_plots` draws).
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.core.errors import check_range
    from labkit.dataworkers import simulator
    from labkit.ui import slider_plot

    check_range("n_jobs", n_jobs, 1, integer=True)
    check_range("load", load, 0.2, 0.8)
    check_range("cpu_servers", cpu_servers, 0, 8, integer=True)

    def redraw(fig: Any, v: dict) -> dict:
        r = simulator.compare(n_jobs, cluster=simulator.Cluster(cpu_servers=int(v["CPU servers"])),
                              load=float(v["load"]), seed=seed)
        fig.data[0].y = [r["static"].avg_jct / 3600, r["elastic"].avg_jct / 3600]
        fig.data[1].y = [r["static"].gpu_util, r["elastic"].gpu_util]
        fig.layout.title = (f"JCT {r['jct_improvement']:.2f}x better, "
                            f"GPU utilisation {r['gpu_util_improvement']:.2f}x higher")
        return r

    fig = go.FigureWidget([go.Bar(x=["static", "elastic"], y=[0, 0], name="avg JCT (h)"),
                           go.Bar(x=["static", "elastic"], y=[0, 0], name="GPU utilisation", yaxis="y2")])
    fig.update_layout(barmode="group", height=320, yaxis={"title": "average JCT (h)"},
                      yaxis2={"title": "GPU utilisation", "overlaying": "y", "side": "right", "range": [0, 1.05]})
    controls = {"load": W.FloatSlider(value=load, min=0.2, max=0.8, step=0.1),
                "CPU servers": W.IntSlider(value=cpu_servers, min=0, max=8)}
    return slider_plot(controls, redraw, fig, title=f"Simulated 64-GPU cluster, {n_jobs} jobs")


def simulator_plots(result: dict) -> Any:
    """Return a figure: JCT CDF (static vs elastic) and GPU utilisation of allocated GPUs over time."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("job completion time (CDF)", "utilisation of allocated GPUs"))
    for name, color in (("static", "#e76f51"), ("elastic", "#2a9d8f")):
        r = result[name]
        jct = np.sort(np.array(list(r.jct.values()))) / 3600
        fig.add_trace(go.Scatter(x=jct, y=np.arange(1, len(jct) + 1) / len(jct),
                                 name=f"{name}: avg {r.avg_jct / 3600:.1f} h", line={"color": color}), 1, 1)
        t = np.array([p[0] for p in r.util_timeline]) / 3600
        u = np.array([p[1] for p in r.util_timeline])
        fig.add_trace(go.Scatter(x=t, y=u, name=f"{name}: {r.gpu_util:.0%}",
                                 line={"color": color, "shape": "hv"}), 1, 2)
    fig.update_xaxes(title_text="hours", row=1, col=1)
    fig.update_xaxes(title_text="hours since first arrival", row=1, col=2)
    fig.update_layout(height=340, title=f"static vs elastic: JCT {result['jct_improvement']:.2f}x better, "
                                        f"GPU utilisation {result['gpu_util_improvement']:.2f}x higher")
    return fig
