"""AliGraph notebook helpers: what "lab" means, a partition explorer and a cache-size explorer."""

from __future__ import annotations

from typing import Callable

import numpy as np

from labkit.core.errors import bad_value, check_range
from labkit.core.profiles import check_notebook_profile
from labkit.ui.widgets import slider_plot

#: Live-run sizes per notebook profile. "lab" (the notebook's default) keeps Run All near a minute
#: on 2 shared cores and makes each effect show: at R-MAT scale 18 (4M edges) a build takes long
#: enough to time against scipy (one thread each) above the noise (1M edges do not), sampling at scale 17 is far
#: above torch, and hit rates need a graph (scale 16, 65k vertices) that one batch does not cover.
#: `dataset` is the "rmat" dataset profile the partition and training sections load.
SETTINGS = {
    "lab": dict(dataset="ci", build_scale=18, build_rounds=5, sample_scale=17, sample_rounds=7,
                cache_scale=16, cache_rounds=5, cache_batches=8, op_rounds=5, epochs=2,
                net_batches=8, net_rounds=5),
    "ci": dict(dataset="ci", build_scale=14, build_rounds=3, sample_scale=14, sample_rounds=3,
               cache_scale=12, cache_rounds=3, cache_batches=3, op_rounds=3, epochs=2,
               net_batches=3, net_rounds=2),
    "small": dict(dataset="small", build_scale=20, build_rounds=5, sample_scale=20, sample_rounds=7,
                  cache_scale=18, cache_rounds=5, cache_batches=16, op_rounds=5, epochs=3,
                  net_batches=8, net_rounds=5),
    "large": dict(dataset="large", build_scale=22, build_rounds=5, sample_scale=22, sample_rounds=7,
                  cache_scale=20, cache_rounds=5, cache_batches=32, op_rounds=5, epochs=5,
                  net_batches=16, net_rounds=3),
}

#: Cache sizes the explorer offers, as a share of the graph's neighbour-list bytes.
CACHE_SIZES = (0.025, 0.05, 0.1, 0.2, 0.4)


def lab_settings(profile: str) -> dict:
    """Return the notebook's live-run sizes at `profile` ("lab", "ci", "small" or "large")."""
    return dict(SETTINGS[check_notebook_profile(profile)])


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
                                           xaxis_title="partition", margin=dict(t=60, b=40, l=60, r=20),
                                           legend=dict(orientation="h", y=-0.25)))

    def update(fig, v):
        p = partition(csr, int(v["partitions"]), v["method"], csc=csc, seed=seed)
        parts = np.arange(p.num_parts)
        sizes = np.bincount(p.owner, minlength=p.num_parts) / csr.num_nodes
        edges = np.bincount(p.owner, weights=csr.degree(), minlength=p.num_parts) / max(1, csr.num_edges)
        fig.data[0].x, fig.data[0].y = parts, sizes
        fig.data[1].x, fig.data[1].y = parts, edges
        fig.layout.title = f"{p.method}, {p.num_parts} parts: {p.edge_cut:.0%} of edges cut"
        return {"edge_cut": p.edge_cut, "balance": p.balance, "edge_balance": p.edge_balance}

    controls = {"partitions": W.IntSlider(value=min(4, int(max_parts)), min=1, max=int(max_parts),
                                         description="partitions", style={"description_width": "initial"}),
                "method": W.Dropdown(options=["hash", "ldg", "fennel"], value="hash", description="method",
                                     style={"description_width": "initial"})}
    return slider_plot(controls, update, fig, title="Partitioning: edge cut vs balance")




def cache_explorer(measure: Callable[[float], dict], *, sizes=CACHE_SIZES, value: float = 0.1,
                   policies=("importance", "in-degree", "degree", "random")):
    """Return (view, fig, state): a cache-size slider over `measure(size) -> {policy: Spread of hit rate in %}`.

    `measure` is e.g. :meth:`labkit.graph.experiments.HitRateLab.measure` (size: share of the
    graph's neighbour-list bytes). The left panel shows each plan's hit rate at the current size
    (median, bars for the 95% interval); the right one every size seen so far, one line per plan.
    ``state.result`` is {"current": measure(size) + {"size"}, "history": {size: that dict}}.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    try:
        sizes = [float(x) for x in sizes]
    except (TypeError, ValueError):
        sizes = []
    if not sizes or any(not 0 < x <= 1 for x in sizes):
        raise bad_value("sizes", sizes, "one or more cache sizes in (0, 1] (shares of the list bytes)")
    if float(value) not in sizes:
        raise bad_value("value", value, "one of sizes: " + ", ".join(f"{x:g}" for x in sizes))
    policies = list(policies)
    base = go.Figure(make_subplots(rows=1, cols=2, subplot_titles=("this cache size", "every size tried")))
    base.add_trace(go.Bar(x=policies, y=[0] * len(policies), name="hit rate",
                          error_y=dict(type="data", symmetric=False, array=[0] * len(policies),
                                       arrayminus=[0] * len(policies))), row=1, col=1)
    for p in policies:
        base.add_trace(go.Scatter(x=[], y=[], mode="lines+markers", name=p), row=1, col=2)
    base.update_layout(height=360, margin=dict(t=70, b=50, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    base.update_yaxes(range=[0, 100], title_text="hit rate (%)")
    base.update_xaxes(title_text="cache size (% of list bytes)", row=1, col=2)
    fig = go.FigureWidget(base)
    history: dict[float, dict] = {}

    def update(fig, v):
        size = float(v["size"])
        r = dict(measure(size), size=size)
        history[size] = r
        s = [r[p] for p in policies]
        bar = fig.data[0]
        bar.y = [x.median for x in s]
        bar.error_y.array = [x.hi - x.median for x in s]
        bar.error_y.arrayminus = [x.median - x.lo for x in s]
        seen = sorted(history)
        for i, p in enumerate(policies):
            fig.data[1 + i].x = [100 * x for x in seen]
            fig.data[1 + i].y = [history[x][p].median for x in seen]
        fig.layout.title = f"cache = {100 * size:g}% of list bytes: {policies[0]} serves {s[0].median:.0f}% of lookups"
        return {"current": r, "history": dict(history)}

    controls = {"size": W.SelectionSlider(options=[(f"{100 * x:g}%", x) for x in sizes], value=float(value),
                                          description="cache size (share of list bytes)",
                                          style={"description_width": "initial"},
                                          layout=W.Layout(width="520px"))}
    return slider_plot(controls, update, fig, title="Which lists to cache: hit rate by plan")


def rate_explorer(measure: Callable[[str], dict], rates, *, value=None, points=()):
    """Return (view, fig, state): a link-rate slider over `measure(rate) -> point` (NetworkCacheLab.measure).

    A point is {"rate": label, "speedup": Spread, "ms_per_batch_off", "ms_per_batch_on", ...}. The
    left panel shows the epoch time per batch with the cache off and on at the current rate; the
    right one the speedup (median, bars for the 95% interval) at every rate measured so far, in the
    slider's order, starting from `points` (e.g. a sweep already run). ``state.result`` is
    {"current": point, "history": {rate: point}}.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rates = list(rates)
    if not rates:
        raise bad_value("rates", rates, "one or more link rates (e.g. NETWORK_RATES)")
    value = rates[0] if value is None else value
    if value not in rates:
        raise bad_value("value", value, "one of rates: " + ", ".join(map(str, rates)))
    from labkit.graph.experiments import rate_label
    labels = {r: rate_label(r) for r in rates}
    order = [labels[r] for r in rates]
    history: dict[str, dict] = {p["rate"]: p for p in points}
    base = go.Figure(make_subplots(rows=1, cols=2, subplot_titles=("this link: ms per batch",
                                                                   "every link tried: epoch speedup")))
    base.add_trace(go.Bar(x=["cache off", "cache on"], y=[0, 0], name="ms per batch"), row=1, col=1)
    base.add_trace(go.Scatter(x=[], y=[], mode="markers+lines", name="speedup (cache on)",
                              error_y=dict(type="data", symmetric=False, array=[], arrayminus=[])), row=1, col=2)
    base.add_trace(go.Scatter(x=order, y=[1.4] * len(order), mode="lines", name="AliGraph's 1.4x",
                              line=dict(dash="dot")), row=1, col=2)
    base.update_layout(height=360, margin=dict(t=70, b=50, l=60, r=20), legend=dict(orientation="h", y=-0.2))
    base.update_xaxes(categoryorder="array", categoryarray=order, row=1, col=2)
    base.update_yaxes(title_text="ms per batch", row=1, col=1)
    base.update_yaxes(title_text="epoch time off / on", row=1, col=2)
    fig = go.FigureWidget(base)

    def update(fig, v):
        p = measure(v["rate"])
        history[p["rate"]] = p
        fig.data[0].y = [p["ms_per_batch_off"], p["ms_per_batch_on"]]
        seen = [lab for lab in order if lab in history]
        sp = [history[lab]["speedup"] for lab in seen]
        line = fig.data[1]
        line.x, line.y = seen, [x.median for x in sp]
        line.error_y.array = [x.hi - x.median for x in sp]
        line.error_y.arrayminus = [x.median - x.lo for x in sp]
        fig.layout.title = f"link {p['rate']}: the cache makes an epoch {p['speedup']} as fast"
        return {"current": p, "history": dict(history)}

    controls = {"rate": W.SelectionSlider(options=[(labels[r], r) for r in rates], value=value,
                                          description="link rate", style={"description_width": "initial"},
                                          layout=W.Layout(width="520px"))}
    return slider_plot(controls, update, fig, title="The importance cache over a shaped network")
