"""PICASSO widgets and the notebook's helpers: what the "lab" profile means for this notebook; the
packing headline (per-field vs packed, interleaved rounds, median and interval); technique toggles
with live throughput, op counts and hit rate; the cache curve; operator counts, same-loss training
and a watched training run; and the hybrid-parallel trainer on a shaped cluster (its ranks started,
per-field vs packed all-to-all measured at a link rate a slider sets, its links on the dashboard)."""

from __future__ import annotations

import time
from typing import Any

from labkit.core.errors import check_choice, check_range
from labkit.ui.widgets import slider_range

#: What each notebook profile means here: which ``recsys-ctr`` dataset profile the loss check and
#: the watched run read, the sizes of the packing headline (embedding stage, interleaved `rounds`),
#: of the technique explorer (`steps` side-by-side steps per change) and of the cache curve, how
#: long the watched run trains, and the hybrid-parallel model of the network section (`rounds` per
#: rate, `watch_s` under the dashboard). "lab" (the notebook's default) is sized so that Run All takes
#: about a minute on 2 busy cores and packing's speedup stands clear of its interval there.
SETTINGS = {
    "lab": {"dataset": "ci", "steps": 4, "watch_s": 3.0,
            "headline": {"fields": 50, "rows": 20_000, "batch": 1024, "rounds": 9},
            "explorer": {"fields": 26, "batch": 512, "rows": 5_000, "steps": 7},
            "cache": {"fields": 26, "rows": 5_000, "batch": 512},
            "network": {"fields": 50, "rows": 2_000, "batch": 512, "rounds": 3, "watch_s": 3.0}},
    "ci": {"dataset": "ci", "steps": 3, "watch_s": 2.0,
           "headline": {"fields": 16, "rows": 2_000, "batch": 256, "rounds": 5},
           "explorer": {"fields": 16, "batch": 256, "rows": 2_000, "steps": 5},
           "cache": {"fields": 16, "rows": 2_000, "batch": 256},
           "network": {"fields": 16, "rows": 1_000, "batch": 256, "rounds": 3, "watch_s": 2.0}},
    "small": {"dataset": "small", "steps": 8, "watch_s": 10.0,
              "headline": {"fields": 100, "rows": 100_000, "batch": 2048, "rounds": 9},
              "explorer": {"fields": 100, "batch": 1024, "rows": 20_000, "steps": 7},
              "cache": {"fields": 100, "rows": 100_000, "batch": 2048},
              "network": {"fields": 100, "rows": 10_000, "batch": 1024, "rounds": 5, "watch_s": 5.0}},
}


def lab_settings(profile: str) -> dict:
    """Return the notebook's sizes at `profile` ("lab", "ci" or "small"; see :data:`SETTINGS`)."""
    import copy
    return copy.deepcopy(SETTINGS[check_choice("PROFILE", profile, tuple(SETTINGS))])


def keep_synced(fig, controls: dict) -> None:
    """Make the state a browser draws `fig` from hold its current traces, now and after each change.

    A FigureWidget's front end draws a new view from the synced ``_widget_data`` / ``_widget_layout``
    traits, which plotly refreshes only at construction and when the figure itself is displayed, not
    when it is a child of a VBox. Edits made before the view exists (slider_plot's first draw) travel
    as one-off restyle messages that a front end still loading plotly's bundle drops, so the view
    came up with the placeholder traces: blank panels, in one browser run out of three. Call after
    ``slider_plot`` (observers run in the order registered, so this one runs after each redraw).
    """
    from copy import deepcopy

    def sync(change=None) -> None:
        fig._widget_data = deepcopy(fig._data)
        fig._widget_layout = deepcopy(fig._layout_obj._props)

    for w in controls.values():
        w.observe(sync, names="value")
    sync()


def packing_headline(fields: int, rows: int, batch: int, *, rounds: int = 9, threads: int = 1, seed: int = 1):
    """Time the embedding stage (lookup + backward + SGD update) per-field and packed, interleaved.

    Both stages hold the same `fields` tables of `rows` x 16 floats and train on the same Zipf
    batches of `batch` samples; they alternate for `rounds` rounds (order rotated, one warm-up), each
    at `threads` torch and numba threads, so a burst of load elsewhere hits both. Returns ``(table,
    speedup)``: a ResultTable with one row per stage (lookups per step, median and interval in ms,
    thousand samples/s) and the packed stage's speedup as a :class:`labkit.core.spread.Spread`.
    """
    import torch

    from labkit.core.bench import interleave
    from labkit.core.metrics import ResultTable
    from labkit.recsys.bench import _emb_step, set_threads
    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.recsys.layers import PerFieldEmbeddings
    from labkit.recsys.packing import PackedEmbeddings
    from labkit.recsys.tables import tables_for

    check_range("fields", fields, 1, 100_000, integer=True)
    check_range("rows", rows, 1, integer=True)
    check_range("batch", batch, 1, 10_000_000, integer=True)
    check_range("rounds", rounds, 1, 1_000, integer=True)
    check_range("threads", threads, 1, 1_024, integer=True)
    specs = make_fields(int(fields), cardinality=int(rows), dims=16, zipf=1.05)
    tables = tables_for(specs)
    gen = SyntheticCTR(specs, seed=seed)
    batches = [gen.batch(int(batch), i) for i in range(3)]
    grad = torch.randn(int(batch), 16 * int(fields), generator=torch.Generator().manual_seed(0)) * 0.01
    stages = {"per-field tables": PerFieldEmbeddings(tables, optimizer="sgd"),
              "one packed table": PackedEmbeddings(tables, optimizer="sgd")}
    try:
        set_threads(threads)
        comp = interleave({n: _emb_step(s, batches, grad) for n, s in stages.items()}, rounds=rounds, warmup=1)
        lookups = {n: int(s.n_lookups) for n, s in stages.items()}
    finally:
        set_threads()
        for s in stages.values():
            s.close()
    base, new = list(stages)
    speedup = comp.spread(base, new)
    table = ResultTable(title=f"embedding stage, {fields} fields, batch {batch}: packed {speedup} "
                              f"({speedup.verdict()}, {rounds} rounds)")
    for n in stages:
        t = comp.time_spread(n)
        table.add(**{"stage": n, "lookups/step": lookups[n], "median ms": round(t.median * 1e3, 2),
                     "interval ms": f"{t.lo * 1e3:.3g} to {t.hi * 1e3:.3g}",
                     "k samples/s": round(batch / t.median / 1e3, 1)})
    return table, speedup


#: One colour per panel of :func:`technique_explorer` (the per-field baseline's bars are grey).
TECH_COLORS = {"samples/s": "#1f77b4", "ops/step": "#ff7f0e", "hit rate": "#2ca02c"}
BASELINE_COLOR = "#999999"


def technique_explorer(*, fields: tuple[int, int, int] = (8, 200, 26), batch: tuple[int, int, int] = (64, 4096, 512),
                       rows: int = 5_000, cache_pct: tuple[int, int, int] = (0, 50, 5), steps: int = 5,
                       kind: str = "wide_deep", seed: int = 0):
    """Return ``(view, fig, state)``: sliders for fields, batch size and cache size (% of rows) and
    toggles for packing, interleaving and caching. Each change builds that model and the per-field
    baseline, trains both `steps` timed steps on fresh synthetic batches, alternating step by step
    (order rotated), and shows three panels, coloured by :data:`TECH_COLORS`: samples/s at the
    median step time with its 95% interval as error bars, operators per step (log scale) of the
    per-field baseline and this setting, and this setting's cache hit rate (0 with caching off).
    The title gives the speedup, the median of the per-step time ratios with its interval, and
    says "within noise" when the interval holds 1.0x. ``state.result`` holds the last run's numbers
    (``speedup``, ``speedup_lo``, ``speedup_hi``, ``within_noise``, ...); :func:`explorer_table`
    shows them as a table.

    `fields`, `batch` and `cache_pct` are each ``(min, max, value)`` of a slider."""
    import numpy as np

    from labkit.core.errors import check_seed
    from labkit.recsys.layers import MODELS

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

    from labkit.core.spread import ratio_spread, spread
    from labkit.recsys.data import SyntheticCTR, make_fields
    from labkit.recsys.model import RecModel, count_ops
    from labkit.ui import slider_plot

    wide = {"description_width": "initial"}
    controls = {
        "fields": W.IntSlider(value=fields[2], min=fields[0], max=fields[1], step=2, style=wide),
        "batch": W.IntSlider(value=batch[2], min=batch[0], max=batch[1], step=64, style=wide),
        "cache %": W.IntSlider(value=cache_pct[2], min=cache_pct[0], max=cache_pct[1], step=1,
                               description="cache (% rows)", style=wide),
        "packing": W.Checkbox(value=True, style=wide),
        "interleave": W.Checkbox(value=False, style=wide),
        "caching": W.Checkbox(value=False, style=wide),
    }
    panels = make_subplots(rows=1, cols=3, subplot_titles=list(TECH_COLORS), horizontal_spacing=0.1)
    for col, (metric, color) in enumerate(TECH_COLORS.items(), 1):
        both = metric != "hit rate"  # the baseline has no cache
        # Placeholders: the first update, run before anything is shown, replaces them.
        panels.add_bar(x=["per-field", "this setting"] if both else ["this setting"], y=[1, 1] if both else [0],
                       marker_color=[BASELINE_COLOR, color] if both else [color], name=metric, showlegend=False,
                       texttemplate="%{y:.3s}" if both else "%{y:.0%}", textposition="auto", row=1, col=col)
    panels.update_yaxes(type="log", row=1, col=2)
    panels.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=3)
    panels.update_layout(height=360, margin=dict(t=90, l=50, r=20, b=50), title_font_size=14)
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
            sp = ratio_spread(t_base, t_model)
            tb, tm = spread(t_base, unit="s"), spread(t_model, unit="s")
            out["label"] = model.techniques.label
            out["baseline_samples_s"] = bsz / float(np.median(t_base))
            out["samples_s"] = bsz / float(np.median(t_model))
            out["speedup"], out["speedup_lo"], out["speedup_hi"] = sp.median, sp.lo, sp.hi
            out["within_noise"] = sp.within_noise
            out["steps"] = len(t_base)
            out["hit_rate"] = model.hit_rate if frac else None
            b0 = batches[0]
            out["baseline_ops"] = count_ops(lambda: base.train_step(b0))["ops"]
            out["ops"] = count_ops(lambda: model.train_step(b0))["ops"]
            out["lookups_per_step"] = int(model.embeddings.n_lookups)
        label = out["label"]
        # samples/s error bars: the batch over the step-time interval (a slow step is few samples/s).
        fig.data[0].y = [out["baseline_samples_s"], out["samples_s"]]
        fig.data[0].error_y = dict(type="data", symmetric=False,
                                   array=[bsz / tb.lo - out["baseline_samples_s"], bsz / tm.lo - out["samples_s"]],
                                   arrayminus=[out["baseline_samples_s"] - bsz / tb.hi,
                                               out["samples_s"] - bsz / tm.hi])
        fig.data[1].y = [out["baseline_ops"], out["ops"]]
        fig.data[0].x = fig.data[1].x = ["per-field", label]
        fig.data[2].y = [out["hit_rate"] or 0.0]
        fig.data[2].x = [label if frac else "no cache"]
        verdict = "within noise" if sp.within_noise else ("faster" if sp.lo > 1 else "slower")
        fig.layout.title = f"{label} vs per-field: {sp} per step, {verdict}<br>" \
                           f"<sup>median and 95% interval of {len(t_base)} side-by-side steps</sup>"
        return out

    def cache_slider_follows_caching(change=None) -> None:
        # With caching off the cache size changes nothing: grey the slider out rather than re-run
        # the same setting when it moves.
        controls["cache %"].disabled = not controls["caching"].value

    controls["caching"].observe(cache_slider_follows_caching, names="value")
    cache_slider_follows_caching()
    view, fig, state = slider_plot(controls, update, fig, title="PICASSO: switch the techniques on and off")
    keep_synced(fig, controls)
    return view, fig, state


def explorer_table(result: dict) -> Any:
    """Return a ResultTable of one :func:`technique_explorer` run (its ``state.result``), with units."""
    from labkit.core.metrics import ResultTable
    from labkit.core.spread import Spread

    sp = Spread(result["speedup"], result["speedup_lo"], result["speedup_hi"], result["steps"])
    rows = [{"model": "per-field", "samples/s": round(result["baseline_samples_s"]),
             "ops/step": result["baseline_ops"], "speedup": "1x", "cache hit rate": "-"},
            {"model": result["label"], "samples/s": round(result["samples_s"]), "ops/step": result["ops"],
             "speedup": f"{sp} ({sp.verdict()})",
             "cache hit rate": "-" if result["hit_rate"] is None else f"{result['hit_rate']:.0%}"}]
    return ResultTable(rows, title=f"one training step, median of {result['steps']} side-by-side steps")


def cache_curve_explorer(stage, counts, batches, *, fractions=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4),
                         value_pct: int = 5):
    """Return ``(view, fig, state)``: the hit-rate vs. cache-size curve of a tiered packed `stage`
    (planned from `counts`, measured on `batches`) with a slider marking one cache size."""
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.core.cacheplan import hot_fraction
    from labkit.ui import slider_plot

    def measure(frac: float) -> float:
        stage.plan_cache(hot_fraction(counts, frac))
        for b in batches:
            stage.lookup(b)
        return stage.hit_rate

    curve = [(f, measure(f)) for f in fractions]
    controls = {"cache %": W.IntSlider(value=value_pct, min=1, max=50, step=1, description="cache (% rows)",
                                       style={"description_width": "initial"})}
    # The traces go in at construction: traces added to an empty FigureWidget reach the browser only
    # as messages, which a front end still loading drops (see keep_synced).
    fig = go.FigureWidget(data=[
        go.Scatter(x=[100 * f for f, _ in curve], y=[h for _, h in curve], mode="lines+markers", name="hit rate"),
        go.Scatter(x=[value_pct], y=[0], mode="markers", marker=dict(size=14, color="#d62728"), name="slider")])
    fig.update_layout(height=340, xaxis_title="rows cached (% of all rows)", yaxis_title="hit rate",
                      yaxis_range=[0, 1.02], yaxis_tickformat=".0%", margin=dict(t=60, l=60, r=20, b=50),
                      title_font_size=14)

    def update(fig, values) -> dict:
        pct = int(values["cache %"])
        hr = measure(pct / 100)
        fig.data[1].x, fig.data[1].y = [pct], [hr]
        fig.layout.title = f"{pct}% of rows cached ({stage.cached_rows:,} rows): hit rate {hr:.1%}"
        return {"cache_pct": pct, "hit_rate": hr, "curve": curve}

    view, fig, state = slider_plot(controls, update, fig, title="Hot-row cache: hit rate against cache size")
    keep_synced(fig, controls)
    return view, fig, state


def curve_table(curve) -> Any:
    """Return a ResultTable of a cache curve's ``(fraction, hit rate)`` points, in percent."""
    from labkit.core.metrics import ResultTable
    return ResultTable([{"rows cached": f"{100 * f:g}%", "hit rate": f"{h:.1%}"} for f, h in curve],
                       title="measured hit rate against cache size (Zipf 1.05 ids)")


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


#: The hybrid-parallel contenders of the network section: name -> (all-to-all mode, micro-batches).
NETWORK_CONTENDERS = {"per-field": ("per_field", 1), "packed": ("packed", 1), "packed + interleave": ("packed", 4)}
#: Link rates (Gbit/s) the network section's slider offers.
NETWORK_RATES = (1, 10, 25)


def network_lab(fields: int, rows: int, batch: int, *, ranks: int = 2, rate: str = "10gbit"):
    """Start a cluster of `ranks` hosts (links shaped to `rate`; loopback where this process may not
    shape, see ``cluster.reason``) and a hybrid-parallel rank on each, with the
    :data:`NETWORK_CONTENDERS` built over `fields` fields of `rows` rows and a global batch of `batch`.
    Returns ``(cluster, group)``; both end when the kernel exits (or call ``group.close()``,
    ``cluster.close()``)."""
    from labkit.core.cluster import start_cluster
    from labkit.recsys.hybrid import HybridConfig, RankGroup

    cfg = HybridConfig(fields=fields, rows=rows, dim=16, batch=batch)
    check_range("ranks", ranks, 2, 16, integer=True)
    cl = start_cluster(int(ranks), rate, fallback=True)
    try:
        group = RankGroup(int(ranks), cluster=cl, timeout=120)
        group.setup(cfg, list(NETWORK_CONTENDERS))
    except BaseException:
        cl.close()
        raise
    return cl, group


def network_compare(group, *, rounds: int = 3) -> dict:
    """Train each of :data:`NETWORK_CONTENDERS` one step at a time, taking turns for `rounds` rounds
    (one warm-up); return ``{"ms": {name: median ms}, "interval_ms": {name: (lo, hi)}, "packing":
    Spread of packed over per-field, "interleave": Spread of interleaved over packed}``."""
    from labkit.core.bench import interleave

    check_range("rounds", rounds, 1, 1_000, integer=True)

    def step(name):
        mode, micro = NETWORK_CONTENDERS[name]
        return lambda: group.run(name, mode, micro, 1)
    comp = interleave({n: step(n) for n in NETWORK_CONTENDERS}, rounds=int(rounds), warmup=1)
    spans = {n: comp.time_spread(n) for n in NETWORK_CONTENDERS}
    return {"ms": {n: t.median * 1e3 for n, t in spans.items()},
            "interval_ms": {n: (t.lo * 1e3, t.hi * 1e3) for n, t in spans.items()},
            "packing": comp.spread("per-field", "packed"),
            "interleave": comp.spread("packed", "packed + interleave"), "rounds": int(rounds)}


def rate_explorer(cluster, group, *, rates: tuple = NETWORK_RATES, value: int = 10, rounds: int = 3):
    """Return ``(view, fig, state)``: a slider for the links' rate (Gbit/s) over a bar chart of the
    hybrid-parallel step time (median, interval as error bars) of each of :data:`NETWORK_CONTENDERS`.
    Each move reshapes every link (``cluster.set_rate``) and reruns :func:`network_compare`;
    ``state.result`` holds ``rate_gbit``, ``shaped`` and network_compare's numbers. On a loopback
    cluster the rate is recorded but not applied (the title says so)."""
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.core.errors import bad_value
    from labkit.ui import slider_plot

    rates = tuple(rates)
    if not rates or value not in rates:
        raise bad_value("value", value, f"one of the rates {rates}")
    names = list(NETWORK_CONTENDERS)
    controls = {"link Gbit/s": W.SelectionSlider(options=list(rates), value=value, style={"description_width": "initial"})}
    fig = go.FigureWidget(data=[go.Bar(x=names, y=[0.0] * len(names), marker_color=[BASELINE_COLOR, "#1f77b4", "#2ca02c"],
                                       texttemplate="%{y:.3s} ms", textposition="auto")])
    fig.update_layout(height=340, yaxis_title="ms per training step", margin=dict(t=80, l=60, r=20, b=50),
                      title_font_size=14)

    def update(fig, values) -> dict:
        gbit = values["link Gbit/s"]
        cluster.set_rate(f"{gbit}gbit")
        res = network_compare(group, rounds=rounds)
        ms = [res["ms"][n] for n in names]
        fig.data[0].y = ms
        fig.data[0].error_y = dict(type="data", symmetric=False,
                                   array=[res["interval_ms"][n][1] - res["ms"][n] for n in names],
                                   arrayminus=[res["ms"][n] - res["interval_ms"][n][0] for n in names])
        where = f"{gbit} Gbit/s links" if cluster.shaped else f"loopback, rate not applied ({cluster.reason})"
        fig.layout.title = (f"{where}: packing {res['packing']} over per-field, interleaving {res['interleave']} "
                            f"over packed<br><sup>median and 95% interval of {res['rounds']} side-by-side steps</sup>")
        return {"rate_gbit": gbit, "shaped": bool(cluster.shaped), **res}

    view, fig, state = slider_plot(controls, update, fig, title="Hybrid-parallel step against link rate")
    keep_synced(fig, controls)
    return view, fig, state


def watch_network(cluster, group, seconds: float, *, show=None, interval: float = 0.2, name: str = "packed"):
    """Train contender `name` of the group for `seconds` under a dashboard whose extra series are the
    cluster's links (Gbit/s each way, :func:`labkit.ui.network.link_probes`). `show(view)` is called
    with the dashboard's view first. Returns ``(dashboard, {"steps", "seconds"})``."""
    from labkit.ui.dashboard import Dashboard
    from labkit.ui.network import link_probes

    check_range("seconds", seconds, 0, lo_open=True)
    mode, micro = NETWORK_CONTENDERS[check_choice("name", name, tuple(NETWORK_CONTENDERS))]
    steps = 0
    with Dashboard(interval=interval, extra=link_probes(cluster), extra_unit="Gbit/s") as dash:
        if show is not None:
            show(dash.view)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            group.run(name, mode, micro, 1)
            steps += 1
        took = time.perf_counter() - t0
    return dash, {"steps": steps, "seconds": took}
