"""CaliEX widgets: budget/split sliders with live stage times, the tuner curve, the stage timeline, the tables."""

from __future__ import annotations

from typing import Any

STAGE_COLORS = {"sample": "#1f77b4", "gather": "#ff7f0e", "train": "#2ca02c"}
HIT_COLORS = {"topology": "#9467bd", "features": "#8c564b"}
READ_COLORS = {"topology": "#9467bd", "features": "#8c564b", "needed": "#7f7f7f"}

#: What each notebook profile means for this lab. "lab" (the notebook's default) trains on the
#: small graph (1.1 GiB on disk) under a budget of 15% of its bytes, so both caches are far too
#: small for it and every miss is an O_DIRECT read; ci's tiny graph needs a budget of 2x its bytes
#: (one mini-batch touches a third of it, and CaliEX's queues alone would not fit in less).
#: per_call: mini-batches per timed call; rounds/warmup: interleaved rounds (bench.interleave);
#: group: CaliEX's sampling group (1 at lab: a group of 4 would fill for 4 batches of a 3-batch
#: call; None lets the tuner pick); sweep: the topology shares measured under the tuner's curve.
LAB_SETTINGS = {
    "lab": {"dataset": "small", "fraction": 0.15, "per_call": 3, "rounds": 5, "warmup": 1, "group": 1,
            "sweep": (0.0, 0.5, 1.0), "sweep_rounds": 3, "explorer_repeats": 2},
    "ci": {"dataset": "ci", "fraction": 2.0, "per_call": 1, "rounds": 2, "warmup": 1, "group": None,
           "sweep": (0.0, 1.0), "sweep_rounds": 2, "explorer_repeats": 1},
    "small": {"dataset": "small", "fraction": 0.15, "per_call": 8, "rounds": 5, "warmup": 1, "group": None,
              "sweep": (0.0, 0.25, 0.5, 0.75, 1.0), "sweep_rounds": 3, "explorer_repeats": 3},
}


def lab_settings(profile: str) -> dict:
    """Return the live-run sizes for a notebook profile ("lab", "ci" or "small"): see LAB_SETTINGS."""
    from labkit.core.errors import check_choice
    return dict(LAB_SETTINGS[check_choice("PROFILE", profile, tuple(LAB_SETTINGS))])


def compare_systems(systems: dict, groups: list, *, rounds: int, warmup: int = 1, progress: bool = True):
    """Train every system in `systems` on the same groups of mini-batches, interleaved round by round.

    Round k gives each system `groups[k]` (the warm-up round included), order rotated each round.
    Return ``(comparison, runs)``: a :class:`labkit.core.bench.Comparison` of seconds per call and,
    per system, the RunStats of its timed calls (stage busy times, losses, timeline).
    """
    from labkit.core.bench import interleave
    from labkit.core.errors import bad_value
    from labkit.core.progress import progress_bar

    if len(groups) < rounds + warmup:
        raise bad_value("groups", f"{len(groups)} groups", f"at least rounds + warmup = {rounds + warmup}")
    bar = progress_bar(len(systems) * (rounds + warmup), "training, interleaved", progress)
    runs: dict = {n: [] for n in systems}
    calls = {n: 0 for n in systems}

    def runner(name):
        def call():
            k = calls[name]
            calls[name] += 1
            r = systems[name].run(groups[k], first_index=10_000 * (k + 1))
            if k >= warmup:
                runs[name].append(r)
            bar.update(1)
            return r
        return call

    try:
        comp = interleave({n: runner(n) for n in systems}, rounds=rounds, warmup=warmup)
    finally:
        bar.close()
    return comp, runs


def speedup_table(comp, runs: dict, new: str = "caliex", epoch_batches: int | None = None) -> Any:
    """Return a ResultTable: per system, s per mini-batch (median [interval]), busy s per stage, `new`'s speedup.

    Busy seconds are each stage's median over the timed calls, per mini-batch; in a pipelined
    system they overlap, so they can add up to more than its wall time.
    """
    import numpy as np

    from labkit.core.metrics import ResultTable
    from labkit.core.spread import spread

    table = ResultTable(title="seconds per mini-batch, median [95% interval] over interleaved rounds")
    for name, rs in runs.items():
        per = [r.per_batch for r in rs]
        row = {"system": name, "s per mini-batch": str(spread(per, unit="s"))}
        for st in STAGE_COLORS:
            row[f"{st} s"] = f"{float(np.median([r.busy[st] / r.batches for r in rs])):.3f}"
        if epoch_batches:
            row[f"epoch ({epoch_batches} batches)"] = f"{float(np.median(per)) * epoch_batches / 60:.1f} min"
        row[f"{new} speedup"] = "-" if name == new else str(comp.spread(name, new))
        table.add(**row)
    return table


def stage_figure(runs: dict) -> Any:
    """Return stacked bars of each system's busy seconds per mini-batch by stage, with its wall time marked."""
    import numpy as np
    import plotly.graph_objects as go

    names = list(runs)
    fig = go.Figure()
    for st, color in STAGE_COLORS.items():
        fig.add_bar(x=names, y=[float(np.median([r.busy[st] / r.batches for r in runs[n]])) for n in names],
                    name=f"{st} (busy)", marker_color=color)
    wall = [float(np.median([r.per_batch for r in runs[n]])) for n in names]
    fig.add_scatter(x=names, y=wall, mode="markers", name="wall clock", marker=dict(symbol="line-ew-open",
                    size=40, line=dict(width=3, color="black")))
    fig.update_layout(barmode="stack", height=340, margin=dict(t=60, l=60, r=20, b=40),
                      title="Where a mini-batch's time goes", yaxis_title="seconds per mini-batch",
                      legend=dict(orientation="h", y=-0.15))
    return fig


def measure_splits(ds, budget, cfg, pre, groups: list, splits, *, rounds: int, group: int | None = None,
                   progress: bool = True) -> dict:
    """Return {topology share: Spread of measured seconds per mini-batch} for CaliEX at each share.

    One CaliEX system per share, all trained on the same groups of mini-batches, interleaved
    (one warm-up call each, then `rounds` timed calls): the points drawn under the tuner's curve.
    """
    from labkit.core.spread import spread
    from labkit.disk.system import open_system

    systems = {}
    try:
        for f in splits:
            systems[f"{f:g}"] = open_system("caliex", ds, budget, cfg, pre=pre, split=float(f), group=group)
        _, runs = compare_systems(systems, groups, rounds=rounds, warmup=1, progress=progress)
    finally:
        for s in systems.values():
            s.close()
    return {float(k): spread([r.per_batch for r in rs], unit="s") for k, rs in runs.items()}



def split_explorer(ds, cfg, pre, seeds, *, budget_mib: tuple[int, int, int], split: float = 0.5,
                   group: int | None = None, repeats: int = 2):
    """Return ``(view, fig, state)``: sliders for the budget (MiB) and topology share.

    Each change builds a CaliEX system with that budget and split (sampling group `group`; None:
    the tuner's pick), trains one warm-up mini-batch and then `repeats` more, one per call, and
    shows side by side the median busy seconds per stage, the two caches' hit rates, and the MiB
    read from disk per mini-batch (per cache, against the MiB its misses needed). The title gives
    the seconds per mini-batch as median [range]. ``state.result`` holds the last run's metrics.
    """
    import ipywidgets as W
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.core.errors import check_range
    from labkit.core.memory import MemoryBudget
    from labkit.core.spread import spread
    from labkit.disk.system import open_system
    from labkit.ui import slider_plot
    from labkit.ui.widgets import slider_range

    lo, hi, value = slider_range("budget_mib", budget_mib, 0, unit="integer MiB", clamp=True)
    check_range("split", split, 0.0, 1.0)
    check_range("repeats", repeats, 1, integer=True)
    style = {"description_width": "initial"}
    controls = {"budget MiB": W.IntSlider(value=value, min=lo, max=hi, step=max(1, (hi - lo) // 20),
                                          description="budget (MiB)", style=style),
                "topology share": W.FloatSlider(value=split, min=0.0, max=1.0, step=0.05,
                                                description="topology share of cache", style=style)}
    base = make_subplots(rows=1, cols=3, column_widths=[0.4, 0.3, 0.3], horizontal_spacing=0.1,
                         subplot_titles=("busy s per batch", "cache hit rate", "MiB read per batch"))
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
    fig.update_layout(height=360, showlegend=False, margin=dict(t=90, l=60, r=20, b=40))
    calls = {"n": 0}

    def update(fig, values) -> dict:
        # A budget too small (BudgetExceeded) is shown on the figure by slider_plot, not raised.
        s = open_system("caliex", ds, MemoryBudget(int(values["budget MiB"]) << 20), cfg, pre=pre,
                        split=float(values["topology share"]), group=group)
        try:
            rs = []
            for i in range(repeats + 1):  # the first call warms the new trainer up: not timed
                k = calls["n"] % len(seeds)
                calls["n"] += 1
                rs.append(s.run([seeds[k]], first_index=70_000 + calls["n"]))
                if i == 0:
                    s.reset_counters()
            rs = rs[1:]
            m = s.metrics()
        finally:
            s.close()
        nb = sum(r.batches for r in rs)
        busy = {st: float(np.median([r.busy[st] / r.batches for r in rs])) for st in STAGE_COLORS}
        per = spread([r.per_batch for r in rs], unit="s")
        fig.data[0].y = [busy[st] for st in STAGE_COLORS]
        fig.data[1].y = [m["hit_rate_topology"], m["hit_rate_features"]]
        fig.data[2].y = [m.get("bytes_read_topology", 0) / 2**20 / nb, m.get("bytes_read_features", 0) / 2**20 / nb,
                         m["bytes_needed"] / 2**20 / nb]
        fig.layout.title = (f"{per.median:.2f} s per batch [{per.lo:.2f}, {per.hi:.2f}]; "
                            f"read {m['read_amplification']:.1f}x what misses needed")
        return {**{k: v for k, v in m.items() if k != "budget"}, "per_batch_s": per.median,
                "per_batch": per, "batches": nb, **{f"{st}_s": busy[st] for st in STAGE_COLORS}}

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


def tuner_figure(curve: list[dict], measured: dict | None = None, tuned: float | None = None) -> Any:
    """Return the tuner's predicted seconds per mini-batch vs. topology share, with measured points.

    `measured` maps a share to a :class:`labkit.core.spread.Spread` (drawn at its median with its
    interval as an error bar) or to plain seconds; both axes are seconds per mini-batch.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_scatter(x=[c["f"] for c in curve], y=[c["total"] for c in curve], name="predicted", mode="lines")
    for st in ("sample", "gather"):
        fig.add_scatter(x=[c["f"] for c in curve], y=[c[st] for c in curve], name=f"predicted {st}",
                        mode="lines", line=dict(dash="dot", color=STAGE_COLORS[st]))
    if measured:
        fs = sorted(measured)
        med = [getattr(measured[f], "median", measured[f]) for f in fs]
        err = None
        if all(hasattr(measured[f], "lo") for f in fs):
            err = dict(type="data", symmetric=False, array=[measured[f].hi - m for f, m in zip(fs, med)],
                       arrayminus=[m - measured[f].lo for f, m in zip(fs, med)])
        fig.add_scatter(x=fs, y=med, error_y=err, name="measured (median, interval)", mode="markers",
                        marker=dict(size=10, color="black"))
    if tuned is not None:
        fig.add_vline(x=tuned, line_dash="dash", annotation_text=f"tuned {tuned:g}")
    fig.update_layout(xaxis_title="share of cache budget given to topology",
                      yaxis_title="seconds per mini-batch", yaxis_rangemode="tozero", height=360,
                      margin=dict(t=60, l=60, r=20, b=50),
                      title="Tuner: predicted vs measured" + (f" (tuned split {tuned:g})" if tuned is not None else ""))
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
