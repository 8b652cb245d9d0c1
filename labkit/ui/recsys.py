"""PICASSO widgets: technique toggles with live throughput, op counts and hit rate; the cache curve."""

from __future__ import annotations

import time
from typing import Any

#: One colour per panel of :func:`technique_explorer` (the per-field baseline's bars are grey).
TECH_COLORS = {"samples/s": "#1f77b4", "ops/step": "#ff7f0e", "hit rate": "#2ca02c"}
BASELINE_COLOR = "#999999"


def technique_explorer(*, fields: tuple[int, int, int] = (8, 200, 26), batch: tuple[int, int, int] = (64, 4096, 512),
                       rows: int = 5_000, cache_pct: tuple[int, int, int] = (0, 50, 5), steps: int = 3,
                       kind: str = "wide_deep", seed: int = 0):
    """Return ``(view, fig, state)``: sliders for fields, batch size and cache size (% of rows) and
    toggles for packing, interleaving and caching. Each change builds that model, trains `steps`
    steps on fresh synthetic batches and shows three panels, coloured by :data:`TECH_COLORS`:
    samples/s and operators per step (log scale) of the per-field baseline and this setting, and
    this setting's cache hit rate (0 with caching off). ``state.result`` holds the last run's numbers."""
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.recsys.model import RecModel, count_ops
    from labkit.ui import slider_plot

    controls = {
        "fields": W.IntSlider(value=fields[2], min=fields[0], max=fields[1], step=2),
        "batch": W.IntSlider(value=batch[2], min=batch[0], max=batch[1], step=64),
        "cache %": W.IntSlider(value=cache_pct[2], min=cache_pct[0], max=cache_pct[1], step=1),
        "packing": W.Checkbox(value=True),
        "interleave": W.Checkbox(value=False),
        "caching": W.Checkbox(value=False),
    }
    panels = make_subplots(rows=1, cols=3, subplot_titles=list(TECH_COLORS), horizontal_spacing=0.1)
    for col, (metric, color) in enumerate(TECH_COLORS.items(), 1):
        both = metric != "hit rate"  # the baseline has no cache
        panels.add_bar(x=["per-field baseline", "this setting"] if both else ["this setting"], y=[0, 0] if both else [0],
                       marker_color=[BASELINE_COLOR, color] if both else [color], name=metric, showlegend=False,
                       texttemplate="%{y:.3s}" if both else "%{y:.0%}", textposition="auto", row=1, col=col)
    panels.update_yaxes(type="log", row=1, col=2)
    panels.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=3)
    panels.update_layout(height=340, margin=dict(t=80))
    fig = go.FigureWidget(panels)

    def run(model, batches) -> float:
        model.train_step(batches[0])  # warm (first call allocates state)
        t0 = time.perf_counter()
        for b in batches[1:]:
            model.train_step(b)
        return sum(b.batch_size for b in batches[1:]) / (time.perf_counter() - t0)

    def update(fig, values) -> dict:
        specs = make_fields(int(values["fields"]), cardinality=rows, dims=16)
        gen = SyntheticCTR(specs, seed=seed)
        bsz = int(values["batch"])
        batches = [gen.batch(bsz, i) for i in range(steps + 1)]
        frac = values["cache %"] / 100 if values["caching"] else 0.0
        if values["caching"] and frac <= 0:
            raise ValueError("cache %=0 is not accepted with caching on; expected 1 or more")
        out: dict[str, Any] = {}
        with RecModel(kind, specs, seed=seed) as base, \
                RecModel(kind, specs, packing=values["packing"], interleave=4 if values["interleave"] else 0,
                         cache=frac, seed=seed) as model:
            if frac:
                model.warm_cache(gen.batches(bsz, 4))
            out["baseline_samples_s"] = run(base, batches)
            out["samples_s"] = run(model, batches)
            out["hit_rate"] = model.hit_rate if frac else None
            b0 = batches[0]
            out["baseline_ops"] = count_ops(lambda: base.train_step(b0))["ops"]
            out["ops"] = count_ops(lambda: model.train_step(b0))["ops"]
            out["lookups_per_step"] = int(model.embeddings.n_lookups)
        out["speedup"] = out["samples_s"] / out["baseline_samples_s"]
        label = model.techniques.label
        fig.data[0].y = [out["baseline_samples_s"], out["samples_s"]]
        fig.data[1].y = [out["baseline_ops"], out["ops"]]
        fig.data[0].x = fig.data[1].x = ["per-field baseline", label]
        fig.data[2].y = [out["hit_rate"] or 0.0]
        fig.data[2].x = [label if frac else f"{label} (no cache)"]
        hr = "" if out["hit_rate"] is None else f", hit rate {out['hit_rate']:.0%}"
        fig.layout.title = (f"{out['speedup']:.2f}x; ops/step {out['baseline_ops']:.0f} -> {out['ops']:.0f}; "
                            f"{out['lookups_per_step']} lookups/step{hr}")
        return out

    return slider_plot(controls, update, fig, title="PICASSO: switch the techniques on and off")


def cache_curve_explorer(stage, counts, batches, *, fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4),
                         value_pct: int = 5):
    """Return ``(view, fig, state)``: the hit-rate vs. cache-size curve of a tiered packed `stage`
    (planned from `counts`, measured on `batches`) with a slider marking one cache size."""
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.recsys.cache import CachePlan
    from labkit.ui import slider_plot

    def measure(frac: float) -> float:
        stage.plan_cache(CachePlan.from_fraction(counts, frac))
        for b in batches:
            stage.lookup(b)
        return stage.hit_rate

    curve = [(f, measure(f)) for f in fractions]
    controls = {"cache %": W.IntSlider(value=value_pct, min=1, max=50, step=1)}
    fig = go.FigureWidget()
    fig.add_scatter(x=[100 * f for f, _ in curve], y=[h for _, h in curve], mode="lines+markers", name="hit rate")
    fig.add_scatter(x=[value_pct], y=[0], mode="markers", marker=dict(size=14, color="#d62728"), name="slider")
    fig.update_layout(height=320, xaxis_title="rows cached (% of all rows)", yaxis_title="hit rate",
                      yaxis_range=[0, 1.02], margin=dict(t=60))

    def update(fig, values) -> dict:
        pct = int(values["cache %"])
        hr = measure(pct / 100)
        fig.data[1].x, fig.data[1].y = [pct], [hr]
        fig.layout.title = f"{pct}% of rows cached ({stage.cached_rows:,} rows): hit rate {hr:.1%}"
        return {"cache_pct": pct, "hit_rate": hr, "curve": curve}

    return slider_plot(controls, update, fig, title="Hot-row cache: hit rate against cache size")
