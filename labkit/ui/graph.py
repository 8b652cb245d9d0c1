"""AliGraph widgets: a partition explorer and an importance-cache explorer (observe labkit.graph)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from labkit.core.errors import bad_value, check_range
from labkit.ui.widgets import slider_plot


def partition_explorer(csr, csc=None, *, max_parts: int = 16, seed: int = 0):
    """Return (view, fig, state): sliders for partition count and method; bars of vertices and edges per part.

    ``state.result`` is {"edge_cut", "balance", "edge_balance"} for the current setting.
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.graph.partition import partition

    check_range("max_parts", max_parts, 1, 1024, integer=True)
    csc = csr.reverse() if csc is None else csc
    fig = go.FigureWidget(data=[go.Bar(name="vertices", x=[], y=[]), go.Bar(name="out-edges", x=[], y=[])],
                          layout=go.Layout(barmode="group", height=320, yaxis_title="share of total",
                                           xaxis_title="partition", margin=dict(t=50, b=40)))

    def update(fig, v):
        p = partition(csr, int(v["partitions"]), v["method"], csc=csc, seed=seed)
        parts = np.arange(p.num_parts)
        sizes = np.bincount(p.owner, minlength=p.num_parts) / csr.num_nodes
        edges = np.bincount(p.owner, weights=csr.degree(), minlength=p.num_parts) / max(1, csr.num_edges)
        fig.data[0].x, fig.data[0].y = parts, sizes
        fig.data[1].x, fig.data[1].y = parts, edges
        fig.layout.title = (f"{p.method}: edge cut {p.edge_cut:.1%}, vertex balance {p.balance:.2f}, "
                            f"edge balance {p.edge_balance:.2f}")
        return {"edge_cut": p.edge_cut, "balance": p.balance, "edge_balance": p.edge_balance}

    controls = {"partitions": W.IntSlider(value=min(4, int(max_parts)), min=1, max=int(max_parts),
                                         description="partitions"),
                "method": W.Dropdown(options=["hash", "ldg", "fennel"], value="hash", description="method")}
    return slider_plot(controls, update, fig, title="Partitioning: edge cut vs balance")


def _setting(threshold: float) -> str:
    return "cache off" if not np.isfinite(threshold) else f"Imp>={threshold:g}"


def cache_explorer(measure: Callable[[float], dict], *, thresholds=(0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
                   off: bool = True, value: float | None = None, epoch_title: str = "epoch time"):
    """Return (view, fig, state): an importance-threshold slider over `measure(threshold) -> dict`.

    `measure` returns cached_fraction, cache_bytes_fraction, hit_rate, feature_hit_rate and
    epoch_s (e.g. :func:`labkit.graph.experiments.cache_point`); every point seen is kept in
    ``state.result["history"]`` and drawn as epoch time against hit rate. With `off` the
    slider starts at an "off" setting (threshold inf: no cache), the baseline the cached
    epochs are compared with; `value` picks another starting threshold. `epoch_title` names
    what the epoch time measures (e.g. that an in-process store has no network cost).
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    try:
        finite = [float(t) for t in thresholds if np.isfinite(float(t))]
    except (TypeError, ValueError):
        finite = []
    if not finite or any(t < 0 for t in finite):
        raise bad_value("thresholds", thresholds, "one or more importance thresholds >= 0 (numbers)")
    options = ([("off", float("inf"))] if off else []) + [(f"{t:g}", t) for t in finite]
    values = [v for _, v in options]
    if value is None:
        value = values[0] if off else values[min(1, len(values) - 1)]
    if float(value) not in values:
        raise bad_value("value", value, "one of the slider's thresholds: " + ", ".join(lab for lab, _ in options))

    base = go.Figure(make_subplots(rows=1, cols=2, subplot_titles=("cache size and hits", epoch_title)))
    base.add_trace(go.Bar(x=["vertices cached", "list bytes cached", "list hit rate", "attribute hit rate"],
                          y=[0, 0, 0, 0], name="share"), row=1, col=1)
    base.add_trace(go.Scatter(x=[], y=[], mode="markers+text", textposition="top center", name="epoch"),
                   row=1, col=2)
    base.update_layout(height=340, showlegend=False, margin=dict(t=60, b=40))
    base.update_yaxes(range=[0, 1], title_text="share (0-1)", row=1, col=1)
    base.update_xaxes(title_text="list hit rate", row=1, col=2)
    base.update_yaxes(title_text="seconds per epoch", row=1, col=2)
    fig = go.FigureWidget(base)
    history: list[dict] = []

    def update(fig, v):
        r = measure(float(v["threshold"]))
        history.append(r)
        fig.data[0].y = [r["cached_fraction"], r["cache_bytes_fraction"], r["hit_rate"], r["feature_hit_rate"]]
        fig.data[1].x = [h["hit_rate"] for h in history]
        fig.data[1].y = [h["epoch_s"] for h in history]
        fig.data[1].text = [_setting(h["threshold"]) for h in history]
        base_s = [h["epoch_s"] for h in history if not np.isfinite(h["threshold"])]
        vs = f" (cache off: {base_s[-1]:.3f} s)" if base_s and np.isfinite(r["threshold"]) else ""
        fig.layout.title = (f"{_setting(r['threshold'])}: epoch {r['epoch_s']:.3f} s{vs}, "
                            f"list hit rate {r['hit_rate']:.0%}")
        return {"current": r, "history": list(history)}

    controls = {"threshold": W.SelectionSlider(options=options, value=float(value), description="Imp threshold")}
    return slider_plot(controls, update, fig, title="Importance cache: size vs hit rate vs epoch time")
