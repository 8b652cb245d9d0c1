"""CaliEX widgets: budget/split sliders with live stage times, the tuner curve, the stage timeline, the tables."""

from __future__ import annotations

from typing import Any

STAGE_COLORS = {"sample": "#1f77b4", "gather": "#ff7f0e", "train": "#2ca02c"}
HIT_COLORS = {"topology": "#9467bd", "features": "#8c564b"}
READ_COLORS = {"topology": "#9467bd", "features": "#8c564b", "needed": "#7f7f7f"}


def split_explorer(ds, cfg, pre, seeds, *, budget_mib: tuple[int, int, int], split: float = 0.5):
    """Return ``(view, fig, state)``: sliders for the budget (MiB) and topology share; each change
    builds a CaliEX system with that budget and split, trains one mini-batch and shows, side by
    side, its stage times, its cache hit rates and the MiB it read from disk (per cache, against
    the MiB its misses needed). ``state.result`` holds the last run's metrics."""
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.core.errors import check_range
    from labkit.core.memory import MemoryBudget
    from labkit.disk.system import open_system
    from labkit.ui import slider_plot
    from labkit.ui.widgets import slider_range

    lo, hi, value = slider_range("budget_mib", budget_mib, 0, unit="integer MiB", clamp=True)
    check_range("split", split, 0.0, 1.0)
    controls = {"budget MiB": W.IntSlider(value=value, min=lo, max=hi, step=max(1, (hi - lo) // 20)),
                "topology share": W.FloatSlider(value=split, min=0.0, max=1.0, step=0.05)}
    base = make_subplots(rows=1, cols=3, column_widths=[0.4, 0.3, 0.3], horizontal_spacing=0.1,
                         subplot_titles=("busy s per mini-batch", "cache hit rate", "MiB read from disk"))
    fig = go.FigureWidget(base)
    fig.add_bar(x=list(STAGE_COLORS), y=[0, 0, 0], marker_color=list(STAGE_COLORS.values()), name="stages",
                row=1, col=1)
    fig.add_bar(x=list(HIT_COLORS), y=[0, 0], marker_color=list(HIT_COLORS.values()), name="hit rate",
                row=1, col=2)
    fig.add_bar(x=list(READ_COLORS), y=[0, 0, 0], marker_color=list(READ_COLORS.values()), name="MiB read",
                row=1, col=3)
    fig.update_yaxes(title_text="seconds", row=1, col=1)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", title_text="hit rate", row=1, col=2)
    fig.update_yaxes(title_text="MiB", row=1, col=3)
    fig.update_layout(height=340, showlegend=False, margin=dict(t=80))
    calls = {"n": 0}

    def update(fig, values) -> dict:
        # A budget too small (BudgetExceeded) is shown on the figure by slider_plot, not raised.
        s = open_system("caliex", ds, MemoryBudget(int(values["budget MiB"]) << 20), cfg, pre=pre,
                        split=float(values["topology share"]))
        try:
            k = calls["n"] % len(seeds)
            calls["n"] += 1
            r = s.run([seeds[k]], first_index=70_000 + k)
            m = s.metrics()
        finally:
            s.close()
        fig.data[0].y = [r.busy[st] / r.batches for st in STAGE_COLORS]
        fig.data[1].y = [m["hit_rate_topology"], m["hit_rate_features"]]
        fig.data[2].y = [m.get("bytes_read_topology", 0) / 2**20, m.get("bytes_read_features", 0) / 2**20,
                         m["bytes_needed"] / 2**20]
        fig.layout.title = (f"hit rate topology {m['hit_rate_topology']:.0%}, features {m['hit_rate_features']:.0%}; "
                            f"read {m['bytes_read'] / 2**20:.0f} MiB ({m['read_amplification']:.1f}x needed); "
                            f"{r.per_batch:.2f} s/batch")
        return {**{k: v for k, v in m.items() if k != "budget"}, "per_batch_s": r.per_batch, **{
            f"{st}_s": r.busy[st] / r.batches for st in STAGE_COLORS}}

    return slider_plot(controls, update, fig, title="CaliEX: budget and topology/feature split")


def run_system(name: str, ds, budget, cfg, seeds, *, pre=None, split: float | None = None,
               progress: bool = True, label: str | None = None, **kwargs):
    """Build system `name`, train it on `seeds`, close it; return ``(stats, metrics, system)``.

    With `progress` (the default here: this is the notebook's helper) a tqdm.auto bar shows the
    system being opened (for CaliEX: tuning and filling the caches) and then one tick per trained
    mini-batch. The tick rides on the trainer's ``step`` of this one system, so the schedule is the
    one the bench times; the bench itself never calls this. `kwargs` go to
    :func:`labkit.disk.system.open_system` (`budget` may be a MemoryBudget or a byte count).
    """
    from labkit.core.progress import progress_bar
    from labkit.disk.system import open_system

    label = label or (name if split is None else f"{name} split={split:g}")
    bar = progress_bar(len(seeds), f"{label}: opening", progress)
    try:
        s = open_system(name, ds, budget, cfg, pre=pre, split=split, **kwargs)
        try:
            if progress:
                step = s.trainer.step

                def counted(*a, **k):
                    out = step(*a, **k)
                    bar.update(1)
                    return out
                s.trainer.step = counted
            bar.set_description(f"{label}: training")
            r = s.run(seeds)
            bar.set_description(f"{label}: {r.per_batch:.2f} s/batch")
            return r, s.metrics(), s
        finally:
            s.trainer.__dict__.pop("step", None)
            s.close()
    finally:
        bar.close()


def tuner_figure(curve: list[dict], measured: dict[float, float] | None = None, tuned: float | None = None) -> Any:
    """Return a figure of the tuner's predicted time per mini-batch vs. topology share, with measured points."""
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_scatter(x=[c["f"] for c in curve], y=[c["total"] for c in curve], name="predicted", mode="lines")
    for st in ("sample", "gather"):
        fig.add_scatter(x=[c["f"] for c in curve], y=[c[st] for c in curve], name=f"predicted {st}",
                        mode="lines", line=dict(dash="dot", color=STAGE_COLORS[st]))
    if measured:
        fs = sorted(measured)
        fig.add_scatter(x=fs, y=[measured[f] for f in fs], name="measured", mode="markers", marker=dict(size=10))
    if tuned is not None:
        fig.add_vline(x=tuned, line_dash="dash", annotation_text="tuned")
    fig.update_layout(xaxis_title="share of cache budget given to topology", yaxis_title="seconds per mini-batch",
                      height=340, title="The tuner's predicted time per mini-batch against measured runs"
                      + (f" (tuned split {tuned:g})" if tuned is not None else ""))
    return fig


def stage_timeline(stats, title: str = "") -> Any:
    """Return a Gantt-style figure of a run's (stage, batch, start, end) spans."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for st, color in STAGE_COLORS.items():
        spans = [(b, t0, t1) for s, b, t0, t1 in stats.timeline if s == st]
        fig.add_bar(y=[st] * len(spans), x=[t1 - t0 for _, t0, t1 in spans], base=[t0 for _, t0, _ in spans],
                    orientation="h", marker_color=color, name=st, text=[str(b % 1000) for b, _, _ in spans])
    fig.update_layout(barmode="overlay", xaxis_title="seconds since the run started", yaxis_title="stage",
                      height=260, title=title or stats.schedule)
    return fig


def side_by_side_table(runs: dict, title: str = "per mini-batch") -> Any:
    """Return a ResultTable with one row per system: time, busy seconds per stage, hit rates, MiB read, last loss.

    `runs` maps a system's name to the ``(stats, metrics)`` of its run (the first two items
    :func:`run_system` returns); every time is per mini-batch.
    """
    from labkit.core.metrics import ResultTable

    table = ResultTable(title=title)
    for name, (r, m) in runs.items():
        per = max(1, r.batches)
        table.add(system=name, s_per_batch=r.per_batch, **{st: r.busy[st] / per for st in STAGE_COLORS},
                  hit_topology=m["hit_rate_topology"], hit_features=m["hit_rate_features"],
                  MiB_read=m.get("bytes_read", 0) / 2**20, loss=r.losses[-1] if r.losses else float("nan"))
    return table


def group_table(system) -> Any:
    """Return a ResultTable of the tuner's predicted seconds per mini-batch for each sampling group G it scored."""
    from labkit.core.metrics import ResultTable

    chosen = getattr(system, "group", None)
    rows = [{"sampling group G": g, "predicted s per mini-batch": t, "picked": "yes" if g == chosen else ""}
            for g, t in sorted(system.info.get("predicted_by_group", {}).items())]
    return ResultTable(rows, title="sampling group: the tuner's prediction per G")
