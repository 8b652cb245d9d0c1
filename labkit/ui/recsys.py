"""PICASSO widgets and the notebook's helpers: technique toggles with live throughput, op counts and hit
rate; the cache curve; operator counts, same-loss training and a watched training run."""

from __future__ import annotations

import time
from typing import Any

from labkit.core.errors import check_choice, check_range
from labkit.ui.widgets import slider_range

#: One colour per panel of :func:`technique_explorer` (the per-field baseline's bars are grey).
TECH_COLORS = {"samples/s": "#1f77b4", "ops/step": "#ff7f0e", "hit rate": "#2ca02c"}
BASELINE_COLOR = "#999999"


def technique_explorer(*, fields: tuple[int, int, int] = (8, 200, 26), batch: tuple[int, int, int] = (64, 4096, 512),
                       rows: int = 5_000, cache_pct: tuple[int, int, int] = (0, 50, 5), steps: int = 5,
                       kind: str = "wide_deep", seed: int = 0):
    """Return ``(view, fig, state)``: sliders for fields, batch size and cache size (% of rows) and
    toggles for packing, interleaving and caching. Each change builds that model and the per-field
    baseline, trains both `steps` timed steps on fresh synthetic batches, alternating step by step,
    and shows three panels, coloured by :data:`TECH_COLORS`: samples/s (at the median step time)
    and operators per step (log scale) of the per-field baseline and this setting, and this
    setting's cache hit rate (0 with caching off). ``state.result`` holds the last run's numbers;
    its ``speedup`` is the median of the per-step time ratios.

    `fields`, `batch` and `cache_pct` are each ``(min, max, value)`` of a slider."""
    import numpy as np

    from labkit.core.errors import check_seed
    from labkit.recsys.models import MODELS

    slider_range("fields", fields, 1, 100_000)
    slider_range("batch", batch, 1, 10_000_000)
    slider_range("cache_pct", cache_pct, 0, 100)
    check_range("rows", rows, 1, integer=True)
    check_range("steps", steps, 1, 10_000, integer=True)
    check_choice("kind", kind, MODELS)
    seed = check_seed(seed, bits=64)
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

    def run(base, model, batches) -> tuple[list[float], list[float]]:
        """Seconds per step of `base` and of `model`: one untimed warm step each (the first call
        allocates state), then the steps alternate, order swapped each round, so that both see the
        same machine state (a burst of load elsewhere hits both, not one side's whole run)."""
        base.train_step(batches[0])
        model.train_step(batches[0])
        times: dict[int, list[float]] = {id(base): [], id(model): []}
        for i, b in enumerate(batches[1:]):
            for m in ((base, model) if i % 2 == 0 else (model, base)):
                t0 = time.perf_counter()
                m.train_step(b)
                times[id(m)].append(time.perf_counter() - t0)
        return times[id(base)], times[id(model)]

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
            t_base, t_model = run(base, model, batches)
            out["baseline_samples_s"] = bsz / float(np.median(t_base))
            out["samples_s"] = bsz / float(np.median(t_model))
            out["speedup"] = float(np.median(np.array(t_base) / np.array(t_model)))
            out["hit_rate"] = model.hit_rate if frac else None
            b0 = batches[0]
            out["baseline_ops"] = count_ops(lambda: base.train_step(b0))["ops"]
            out["ops"] = count_ops(lambda: model.train_step(b0))["ops"]
            out["lookups_per_step"] = int(model.embeddings.n_lookups)
        label = model.techniques.label
        fig.data[0].y = [out["baseline_samples_s"], out["samples_s"]]
        fig.data[1].y = [out["baseline_ops"], out["ops"]]
        fig.data[0].x = fig.data[1].x = ["per-field baseline", label]
        fig.data[2].y = [out["hit_rate"] or 0.0]
        fig.data[2].x = [label if frac else f"{label} (no cache)"]
        hr = "" if out["hit_rate"] is None else f", hit rate {out['hit_rate']:.0%}"
        fig.layout.title = (f"{out['speedup']:.2f}x the per-field step (median of {steps} side-by-side steps); "
                            f"ops/step {out['baseline_ops']:.0f} -> {out['ops']:.0f}; "
                            f"{out['lookups_per_step']} lookups/step{hr}")
        return out

    def cache_slider_follows_caching(change=None) -> None:
        # With caching off the cache size changes nothing: grey the slider out rather than re-run
        # the same setting when it moves.
        controls["cache %"].disabled = not controls["caching"].value

    controls["caching"].observe(cache_slider_follows_caching, names="value")
    cache_slider_follows_caching()
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


def ops_vs_fields(fields=(4, 8, 16, 32), *, cardinality: int = 1_000, dim: int = 16, batch: int = 256,
                  kind: str = "wide_deep") -> Any:
    """Return a ResultTable: operators per training step of the per-field and the packed model, per field count.

    Each row builds both models on `fields` fields of `cardinality` rows and `dim` columns and
    counts one training step on the same synthetic batch with :func:`labkit.recsys.model.count_ops`.
    """
    from labkit.core.errors import bad_value
    from labkit.core.metrics import ResultTable
    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.recsys.model import RecModel, count_ops

    if not isinstance(fields, (tuple, list)) or not fields:
        raise bad_value("fields", fields, "a non-empty tuple of field counts")
    table = ResultTable(title=f"operators per {({'wide_deep': 'Wide & Deep'}).get(kind, kind)} training step")
    for n_fields in fields:
        specs = make_fields(int(n_fields), cardinality=cardinality, dims=dim)
        b = SyntheticCTR(specs).batch(batch, 0)
        row: dict[str, Any] = {"fields": int(n_fields)}
        for packing in (False, True):
            with RecModel(kind, specs, packing=packing) as m:
                row["packed" if packing else "per-field"] = count_ops(lambda: m.train_step(b))["ops"]
        row["ratio"] = row["per-field"] / row["packed"]
        table.add(**row)
    return table


#: The settings :func:`same_loss` trains by default: the baseline, packing, and all three techniques.
LOSS_SETTINGS = {"per-field": {}, "packed": {"packing": True},
                 "all three": {"packing": True, "interleave": 4, "cache": 0.05}}


def same_loss(specs, batches, settings: dict | None = None, *, kind: str = "wide_deep", rtol: float = 1e-4,
              warm_batches: int = 2) -> tuple[Any, dict, bool]:
    """Train one model per setting on the same `batches` from the same seed; return (table, losses, match).

    `settings` maps a name to :class:`labkit.recsys.model.RecModel` keyword arguments (default
    :data:`LOSS_SETTINGS`; the first is the reference). A setting with a cache warms it on the
    first `warm_batches` batches first. ``losses`` maps each name to its loss per step; ``match`` is
    whether every setting's losses equal the reference's within `rtol`; the table has one row per step.
    """
    import numpy as np

    from labkit.core.errors import bad_value
    from labkit.core.metrics import ResultTable
    from labkit.recsys.model import RecModel

    settings = dict(LOSS_SETTINGS if settings is None else settings)
    batches = list(batches)
    if not settings or not batches:
        raise bad_value("settings" if not settings else "batches", settings if not settings else batches,
                        "at least one setting and one batch")
    losses: dict[str, list[float]] = {}
    for name, kw in settings.items():
        with RecModel(kind, specs, **kw) as m:
            if kw.get("cache"):
                m.warm_cache(batches[:warm_batches])
            losses[name] = [m.train_step(b) for b in batches]
    ref = next(iter(losses.values()))
    match = all(np.allclose(v, ref, rtol=rtol) for v in losses.values())
    rows = [{"step": i, **{k: v[i] for k, v in losses.items()}} for i in range(len(batches))]
    return ResultTable(rows, title=f"loss per step; match: {match}"), losses, bool(match)


def cache_demo(fields: int, rows: int, batch: int, *, dim: int = 4, seed: int = 3, count_batches: int = 10,
               measure_batches: int = 3, value_pct: int = 5):
    """Return ``(view, fig, state)`` of :func:`cache_curve_explorer` over its own tiered packed stage.

    `fields` fields with Criteo-like table sizes (log-uniform, up to 20 x `rows` rows) and `dim`
    columns live in a memory-mapped slow tier; the cache plan is counted on `count_batches`
    synthetic batches of `batch` samples and the hit rate measured on `measure_batches` others.
    The explorer owns the stage (``state.stage``): its files are removed when the explorer is
    garbage-collected or the kernel exits, so the slider keeps working until then (``state.close()``
    removes them now; the slider then shows an error).
    """
    import weakref

    from labkit.recsys.cache import SlowTier
    from labkit.recsys.data import SyntheticCTR, criteo_like_cardinalities, make_fields
    from labkit.recsys.packing import PackedEmbeddings
    from labkit.recsys.tables import tables_for

    specs = make_fields(fields, cardinality=criteo_like_cardinalities(fields, max_rows=20 * rows), dims=dim)
    gen = SyntheticCTR(specs, seed=seed)
    stage = PackedEmbeddings(tables_for(specs), slow_tier=SlowTier.create())
    try:
        counts = stage.count_ids(gen.batch(batch, i) for i in range(count_batches))
        view, fig, state = cache_curve_explorer(stage, counts, [gen.batch(batch, 100 + i)
                                                                for i in range(measure_batches)],
                                                value_pct=value_pct)
    except BaseException:
        stage.close()
        raise
    state.stage = stage
    state.close = weakref.finalize(state, stage.close)  # runs once: close(), garbage collection or exit
    return view, fig, state


class SampleRate:
    """A dashboard probe: training samples per second since its previous reading (0.0 at the first)."""

    def __init__(self) -> None:
        self.total = 0
        self._last: tuple[float, int] | None = None

    def add(self, n: int) -> None:
        self.total += int(n)

    def __call__(self) -> float:
        now, total = time.monotonic(), self.total
        last, self._last = self._last, (now, total)
        if last is None or now <= last[0]:
            return 0.0
        return (total - last[1]) / (now - last[0])


def train_watched(specs, batches, seconds: float, *, interval: float = 0.2, show=None, kind: str = "wide_deep",
                  **model_kw) -> tuple[Any, dict]:
    """Train a model for `seconds` (cycling through `batches`) under a utilisation dashboard.

    The dashboard's extra series is the training throughput (samples per second between two
    samples). `model_kw` go to :class:`labkit.recsys.model.RecModel` (default: packing on).
    `show(view)` is called with the dashboard's view before training (pass IPython's ``display``).
    Returns ``(dashboard, {"steps", "samples", "seconds"})``.
    """
    from labkit.core.errors import bad_value, check_range
    from labkit.recsys.model import RecModel
    from labkit.ui.dashboard import Dashboard

    check_range("seconds", seconds, 0, lo_open=True)
    batches = list(batches)
    if not batches:
        raise bad_value("batches", batches, "at least one batch")
    rate = SampleRate()
    steps = 0
    with RecModel(kind, specs, **{"packing": True, **model_kw}) as m, \
            Dashboard(interval=interval, extra={"samples/s": rate}) as dash:
        if show is not None:
            show(dash.view)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            b = batches[steps % len(batches)]
            m.train_step(b)
            rate.add(b.batch_size)
            steps += 1
        took = time.perf_counter() - t0
    return dash, {"steps": steps, "samples": rate.total, "seconds": took}
