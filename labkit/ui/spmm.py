"""Flash-LLM widgets: the machine's roofline, sparsity and N sliders driving live SpMM timings, a tile picture."""

from __future__ import annotations

import math

import numpy as np

from labkit.core.errors import bad_value, check_range
from labkit.core.metrics import ResultTable
from labkit.core.spread import Spread, spread
from labkit.spmm import lab
from labkit.spmm.tiled_csl import TiledCSL, byte_bound_speedup


_ROOF_KEYS = ("bandwidth_GBps", "gemm_bf16_GFLOPs")
_POINT_KEYS = ("kernel", "n", "intensity", "GFLOPs")
_KERNEL_STYLE = {"dense_bf16": ("#264653", "circle"), "tiled_csl_sparse": ("#2a9d8f", "diamond"),
                 "tiled_csl_dense_tile": ("#e76f51", "square")}


def _positive(v) -> bool:
    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0)


def roofline_figure(roof: dict, points: list[dict] | None = None):
    """Return a log-log plotly figure: attainable GFLOP/s vs arithmetic intensity (FLOP/byte).

    `roof` is :func:`labkit.spmm.lab.machine_roofline`'s dict: the memory slope is its measured
    ``bandwidth_GBps`` (attainable = bandwidth x intensity), the roof its measured bf16 GEMM rate
    (the fp32 rate, when present, is a dotted second roof), and the ridge point, where the two
    meet, is marked. `points` (optional, :func:`labkit.spmm.lab.roofline_points`) places each
    measured kernel at each N, labelled with its N.
    """
    import plotly.graph_objects as go

    if not isinstance(roof, dict) or not all(_positive(roof.get(k)) for k in _ROOF_KEYS):
        raise bad_value("roof", roof if not isinstance(roof, dict) else {k: roof.get(k) for k in _ROOF_KEYS},
                        "machine_roofline()'s dict with positive finite 'bandwidth_GBps' and 'gemm_bf16_GFLOPs'")
    points = list(points or [])
    for i, p in enumerate(points):
        if (not isinstance(p, dict) or any(k not in p for k in _POINT_KEYS)
                or not _positive(p["intensity"]) or not _positive(p["GFLOPs"])):
            raise bad_value(f"points[{i}]", p, "a dict with 'kernel', 'n' and positive 'intensity' and "
                                               "'GFLOPs' (labkit.spmm.lab.roofline_points)")
    bw, peak = float(roof["bandwidth_GBps"]), float(roof["gemm_bf16_GFLOPs"])
    ridge = peak / bw
    xs = [p["intensity"] for p in points] + [ridge]
    lo = 10 ** math.floor(math.log10(min(0.25, min(xs) / 2)))
    hi = 10 ** math.ceil(math.log10(max(xs) * 4))

    fig = go.Figure()
    fig.add_scatter(x=[lo, ridge], y=[bw * lo, peak], mode="lines", name=f"memory: {bw:.1f} GB/s",
                    line={"color": "#1d3557", "width": 3})
    fig.add_scatter(x=[ridge, hi], y=[peak, peak], mode="lines", name=f"bf16 GEMM roof: {peak:.0f} GFLOP/s",
                    line={"color": "#e63946", "width": 3})
    fp32 = roof.get("gemm_fp32_GFLOPs")
    if _positive(fp32):
        fig.add_scatter(x=[fp32 / bw, hi], y=[fp32, fp32], mode="lines", name=f"fp32 GEMM roof: {fp32:.0f} GFLOP/s",
                        line={"color": "#e63946", "width": 1, "dash": "dot"})
    fig.add_scatter(x=[ridge], y=[peak], mode="markers+text", name=f"ridge point: {_flop_per_byte(ridge)} FLOP/byte",
                    text=[f"ridge {_flop_per_byte(ridge)} FLOP/B"], textposition="top left",
                    marker={"size": 12, "color": "black", "symbol": "x"})
    fig.add_vline(x=ridge, line_dash="dot", line_color="#999")
    for kernel in dict.fromkeys(p["kernel"] for p in points):
        sel = [p for p in points if p["kernel"] == kernel]
        color, symbol = _KERNEL_STYLE.get(kernel, (None, "circle"))
        fig.add_scatter(x=[p["intensity"] for p in sel], y=[p["GFLOPs"] for p in sel], mode="markers+text",
                        name=kernel, text=[f"N={p['n']}" for p in sel], textposition="bottom right",
                        marker={"size": 10, "color": color, "symbol": symbol},
                        hovertext=[f"{kernel}, N={p['n']}: {p['GFLOPs']:.2f} GFLOP/s at {p['intensity']:.2f} FLOP/B"
                                   for p in sel], hoverinfo="text")
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOP per byte of weights)")
    fig.update_yaxes(type="log", title_text="attainable GFLOP/s")
    title = (f"This machine's roofline: memory-bound below {_flop_per_byte(ridge)} FLOP/byte "
             f"({roof.get('threads', '?')} threads)")
    if _positive(fp32) and fp32 > peak:
        # A CPU without fast bf16 arithmetic: the bf16 roof, not the memory slope, bounds dense bf16.
        title += f"<br>bf16 GEMM runs at {peak / fp32:.2g}x the fp32 rate here"
    fig.update_layout(height=420, title=title)
    return fig


def _flop_per_byte(x: float) -> str:
    """An intensity for a label: one decimal from 1 up, two significant digits below (0.019, not 0.0)."""
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


#: What each notebook PROFILE means for the Flash-LLM lab. "lab" (the notebook's default) takes one
#: OPT-30B attention shape (hidden 7168: 98 MiB of bf16 weights, three times this CPU's L3), so the
#: N = 1 product streams its weights from DRAM and takes tens of milliseconds: memory-bound, the
#: regime the paper is about. "ci" is the tests' size (fits in cache: overheads, not bytes).
SETTINGS = {
    "lab": dict(shape=(7168, 7168), mib=256, roof_ns=(1, 4), rounds=9, min_sample_s=0.15,
                dec=dict(d_model=1024, n_heads=16, ffn_dim=4096, n_layers=2), tokens=8, dec_rounds=5),
    "ci": dict(shape=(1024, 1024), mib=64, roof_ns=(1, 4, 16), rounds=3, min_sample_s=0.0,
               dec=dict(d_model=128, n_heads=4, ffn_dim=512), tokens=8, dec_rounds=3),
    "small": dict(shape=(9216, 9216), mib=512, roof_ns=(1, 4, 16), rounds=7, min_sample_s=0.05,
                  dec=dict(d_model=2048, n_heads=16, ffn_dim=8192), tokens=16, dec_rounds=5),
    "large": dict(shape=(36864, 9216), mib=2048, roof_ns=(1, 4, 16), rounds=9, min_sample_s=0.05,
                  dec=dict(d_model=4096, n_heads=32, ffn_dim=16384), tokens=32, dec_rounds=5),
}


def lab_settings(profile: str) -> dict:
    """Return the live-run sizes of the Flash-LLM notebook at `profile` ("lab", "ci", "small", "large").

    Keys: ``shape`` (M, K) of the timed weight, ``mib`` (bandwidth probe), ``roof_ns`` (N placed on
    the roofline), ``rounds`` and ``min_sample_s`` (interleaved timing), ``dec`` (a DecoderConfig),
    ``tokens`` and ``dec_rounds`` (decoder timing).
    """
    from labkit.core.profiles import check_notebook_profile
    from labkit.spmm.decoder import DecoderConfig

    out = dict(SETTINGS[check_notebook_profile(profile)])
    out["dec"] = DecoderConfig(**out["dec"])
    return out


class LiveTable(ResultTable):
    """A formatted table of one widget's measurements, with the numbers behind it in ``data``.

    The rows are strings with units (what a student reads); ``data`` keeps the Spread objects (what
    a test or the metrics cell reads). Both come from the same update as the figure above them.
    """

    def __init__(self, rows: list[dict], title: str, data: dict) -> None:
        super().__init__(rows, title)
        self.data = data


def _ms(c, name: str) -> Spread:
    return spread([t * 1e3 for t in c.times[name]], unit="ms")


def _mark(sp: Spread) -> str:
    """A point's label on a plot: "within noise" where its interval holds 1.0x, else its median."""
    return "within noise" if sp.within_noise else f"{sp.median:.2f}x"


def _err(sps: list[Spread]) -> dict:
    """Asymmetric plotly error bars from each Spread's interval."""
    return dict(type="data", symmetric=False, array=[sp.hi - sp.median for sp in sps],
                arrayminus=[sp.median - sp.lo for sp in sps])


_LABEL = {"tiled_csl_sparse": "Tiled-CSL", "tiled_csl_dense_tile": "Tiled-CSL dense-tile",
          "dense_bf16": "dense bf16", "dense_fp32": "dense fp32"}


def sparsity_explorer(shape: tuple[int, int], n: int = 1, repeats: int = 7, seed: int = 0, *,
                      min_sample_s: float = 0.0, kernels: tuple[str, ...] = ("sparse", "dense_tile")):
    """Return ``(view, fig, state)``: a sparsity slider timing dense bf16 vs Tiled-CSL at N = n.

    Each position prunes and encodes a matrix and times the contenders over `repeats` interleaved
    rounds. Left: speedup over dense bf16 per sparsity tried (median, 95% interval as error bars,
    "within noise" where the interval holds 1.0x) beside the byte bound 1/(2(1-s)). Right: time
    per product at the current sparsity. ``state.result`` is a :class:`LiveTable` of every sparsity
    tried, from the same timings as the plot.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.ui.widgets import slider_plot

    names = ["dense_bf16"] + [f"tiled_csl_{k}" for k in kernels]
    fig = go.FigureWidget(make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4],
                                        subplot_titles=("speedup over dense bf16", "time per product")))
    for name in names[1:]:
        fig.add_scatter(x=[], y=[], mode="markers+text", name=_LABEL[name], textposition="middle right",
                        marker={"size": 10, "color": _KERNEL_STYLE[name][0], "symbol": _KERNEL_STYLE[name][1]},
                        row=1, col=1)
    ss = [0.5 + 0.05 * i for i in range(10)]
    fig.add_scatter(x=ss, y=[byte_bound_speedup(s) for s in ss], mode="lines", name="byte bound 1/(2(1-s))",
                    line={"dash": "dash", "color": "#999"}, row=1, col=1)
    fig.add_scatter(x=[0.5, 0.95], y=[1, 1], mode="lines", name="dense (1.0x)",
                    line={"dash": "dot", "color": "#264653"}, row=1, col=1)
    fig.add_bar(x=[_LABEL[k] for k in names], y=[0] * len(names), row=1, col=2, name="ms per product",
                marker_color=[_KERNEL_STYLE[k][0] for k in names], showlegend=False)
    fig.update_xaxes(title_text="sparsity", tickformat=".0%", range=[0.47, 0.98], row=1, col=1)
    fig.update_yaxes(title_text="speedup (x)", type="log", row=1, col=1)
    fig.update_yaxes(title_text="ms per product", row=1, col=2)
    fig.update_layout(height=420, margin=dict(t=90, l=60, r=20, b=110),
                      legend=dict(orientation="h", y=-0.3))
    slider = W.FloatSlider(value=0.8, min=0.5, max=0.95, step=0.05, description="sparsity",
                           style={"description_width": "initial"}, readout_format=".0%")
    seen: dict[float, dict] = {}

    def update(f, v):
        s = round(v["sparsity"], 2)
        w, enc = lab.sparse_case(shape, s, seed=seed)
        c = lab.compare_once(w, enc, n, repeats=repeats, kernels=kernels, min_sample_s=min_sample_s)
        seen[s] = {"speedup": {k: c.spread("dense_bf16", k) for k in names[1:]},
                   "ms": {k: _ms(c, k) for k in names}, "MiB": {"dense_bf16": 2 * w.numel() / 2**20,
                                                             "tiled_csl": enc.nbytes / 2**20}}
        xs = sorted(seen)
        for i, k in enumerate(names[1:]):
            sps = [seen[x]["speedup"][k] for x in xs]
            f.data[i].x, f.data[i].y = xs, [sp.median for sp in sps]
            f.data[i].error_y = _err(sps)
            f.data[i].text = [_mark(sp) for sp in sps]
        bar = f.data[-1]
        ms = [seen[s]["ms"][k] for k in names]
        bar.y, bar.error_y = [m.median for m in ms], _err(ms)
        sp = seen[s]["speedup"][names[1]]
        f.layout.title = (f"{s:.0%} sparse, N={n}: {_LABEL[names[1]]} {sp} vs dense"
                          f" ({sp.verdict()})")
        return _sparsity_table(seen, names, n, shape)

    return slider_plot({"sparsity": slider}, update, fig, title="Sparsity vs speedup over dense bf16")


def _sparsity_table(seen: dict, names: list[str], n: int, shape) -> LiveTable:
    rows = []
    for s in sorted(seen):
        r = {"sparsity": f"{s:.0%}", "dense bf16": str(seen[s]["ms"]["dense_bf16"])}
        for k in names[1:]:
            r[_LABEL[k]] = str(seen[s]["ms"][k])
        for k in names[1:]:
            sp = seen[s]["speedup"][k]
            r[f"{_LABEL[k]} speedup"] = f"{sp} ({sp.verdict()})"
        r["byte bound"] = f"{byte_bound_speedup(s):.2f}x"
        r["MiB read (dense / Tiled-CSL)"] = (f"{seen[s]['MiB']['dense_bf16']:.0f} / "
                                             f"{seen[s]['MiB']['tiled_csl']:.0f}")
        rows.append(r)
    return LiveTable(rows, f"{shape[0]}x{shape[1]}, N={n}: time per product and speedup over dense bf16 "
                           "(median [95% interval])", {s: dict(v) for s, v in seen.items()})


def n_explorer(shape: tuple[int, int], sparsity: float = 0.8, max_log2_n: int = 5, repeats: int = 7,
               seed: int = 0, *, roof: dict | None = None, min_sample_s: float = 0.0):
    """Return ``(view, fig, state)``: an N slider (1, 2, 4, .. 2**max_log2_n) adding points to Tiled-CSL's
    speedup over dense vs N (``state.controls["N"]``).

    Each move times the dense baseline (:func:`labkit.spmm.lab.dense_for` N and `roof`: dense bf16,
    or dense fp32 for N >= 2 where the machine's bf16 GEMM is the slower) against the Tiled-CSL
    gather kernel over `repeats` interleaved rounds. Points carry their 95% interval; "within
    noise" marks an interval holding 1.0x. Where the curve falls below 1, dense (compute-bound by
    then) has overtaken the sparse kernel. ``state.result`` is a :class:`LiveTable` of every N tried.
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.ui.widgets import slider_plot

    # The slider runs over N = 1 .. 2**max_log2_n, and compare_once times N up to 64.
    check_range("max_log2_n", max_log2_n, 0, 6, integer=True)
    max_log2_n = int(max_log2_n)
    w, enc = lab.sparse_case(shape, sparsity, seed=seed)
    fig = go.FigureWidget(layout=dict(
        height=360, margin=dict(t=70, l=60, r=20, b=50),
        xaxis=dict(title="N (columns = batch)", type="log", dtick=0.30103),
        yaxis=dict(title="speedup over dense (x)", type="log"),
        title=f"{shape[0]}x{shape[1]}, {sparsity:.0%} sparse"))
    fig.add_scatter(x=[], y=[], mode="lines+markers+text", name="Tiled-CSL", textposition="top right",
                    marker={"size": 10, "color": _KERNEL_STYLE["tiled_csl_sparse"][0]})
    fig.add_scatter(x=[1, 2 ** max_log2_n], y=[1, 1], mode="lines", name="dense (1.0x)", line=dict(dash="dot"))
    seen: dict[int, dict] = {}
    slider = W.SelectionSlider(options=[2 ** i for i in range(max_log2_n + 1)], value=1,
                               description="N (batch)", style={"description_width": "initial"})

    def update(f, v):
        n = int(v["N"])
        dense = lab.dense_for(n, roof)
        c = lab.compare_once(w, enc, n, repeats=repeats, kernels=("sparse",), dense=dense,
                             min_sample_s=min_sample_s)
        seen[n] = {"dense": dense, "speedup": c.spread(dense, "tiled_csl_sparse"),
                   "dense_ms": _ms(c, dense), "sparse_ms": _ms(c, "tiled_csl_sparse")}
        ns = sorted(seen)
        sps = [seen[k]["speedup"] for k in ns]
        f.data[0].x, f.data[0].y = ns, [sp.median for sp in sps]
        f.data[0].error_y = _err(sps)
        f.data[0].text = [_mark(sp) for sp in sps]
        sp = seen[n]["speedup"]
        f.layout.title = f"N={n}: Tiled-CSL {sp} vs {_LABEL[dense]}" + _dense_ahead(
            {k: seen[k]["speedup"] for k in ns})
        rows = [{"N": k, "dense": _LABEL[seen[k]["dense"]], "dense time": str(seen[k]["dense_ms"]),
                 "Tiled-CSL time": str(seen[k]["sparse_ms"]), "speedup": str(seen[k]["speedup"]),
                 "reading": seen[k]["speedup"].verdict("Tiled-CSL faster", "dense faster")} for k in ns]
        return LiveTable(rows, f"{shape[0]}x{shape[1]}, {sparsity:.0%} sparse: Tiled-CSL vs dense by N "
                               "(median [95% interval])", {k: dict(d) for k, d in seen.items()})

    return slider_plot({"N": slider}, update, fig, title="Batch size N vs speedup (the crossover)")


def _dense_ahead(seen: dict[int, Spread]) -> str:
    """The title's note on where dense beat Tiled-CSL (interval below 1.0x) among the N tried ("" if nowhere).

    "from N=k" only when dense is ahead at k and at every larger N tried; otherwise the Ns are listed
    (a noisy or cache-sized case can lose at N=4 and win again at N=16)."""
    ns = sorted(seen)
    losing = [k for k in ns if seen[k].verdict() == "slower"]
    if not losing:
        return ""
    if losing == ns[ns.index(losing[0]):]:
        return f"<br>dense ahead from N={losing[0]} on, among the N tried"
    return f"<br>dense ahead at N={', '.join(map(str, losing))} only, among the N tried"


def tile_picture(enc: TiledCSL, tile_row: int = 0, tile_col: int = 0, max_cols: int = 256):
    """Return a plotly figure: one tile's non-zero pattern (first `max_cols` columns) and the
    histogram of non-zeros per tile over the whole matrix."""
    from plotly.subplots import make_subplots

    t = enc.tile_dense(tile_row, tile_col)[:, :max_cols]
    counts = enc.tile_counts().ravel()
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"tile ({tile_row}, {tile_col}): first {t.shape[1]} of {enc.tile[1]} columns",
        f"non-zeros per tile ({counts.size} tiles)"))
    fig.add_heatmap(z=(t != 0).astype(np.int8), colorscale=[[0, "white"], [1, "black"]], showscale=False,
                    row=1, col=1)
    fig.add_histogram(x=counts, nbinsx=40, row=1, col=2)
    fig.update_xaxes(title_text="column in tile", row=1, col=1)
    fig.update_yaxes(title_text="row in tile", autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="non-zeros in a tile", row=1, col=2)
    fig.update_yaxes(title_text="tiles", row=1, col=2)
    fig.update_layout(height=320, showlegend=False)
    return fig


def roofline_table(roof: dict) -> ResultTable:
    """Return :func:`labkit.spmm.lab.machine_roofline`'s numbers as a table with units."""
    rows = [("memory bandwidth", "bandwidth_GBps", "{:.1f} GB/s"),
            ("fp32 GEMM rate", "gemm_fp32_GFLOPs", "{:.0f} GFLOP/s"),
            ("bf16 GEMM rate", "gemm_bf16_GFLOPs", "{:.1f} GFLOP/s"),
            ("bf16 ridge point", "ridge_flop_per_byte_bf16", "{:.2g} FLOP/byte"),
            ("torch threads", "threads", "{}")]
    return ResultTable([{"quantity": q, "value": f.format(roof[k])} for q, k, f in rows if k in roof],
                       title="This machine")


def decoder_table(comparisons: dict, tokens: int, d_model: int) -> LiveTable:
    """Return a table of tokens/s (dense bf16 vs Tiled-CSL) with the speedup's spread, one row per batch.

    `comparisons` maps batch -> :func:`labkit.spmm.lab.decoder_comparison`'s Comparison.
    """
    rows, data = [], {}
    for batch, c in sorted(comparisons.items()):
        sp = c.spread("dense_bf16", "tiled_csl")
        tps = {k: spread([batch * tokens / t for t in c.times[k]], unit="tok/s") for k in ("dense_bf16", "tiled_csl")}
        rows.append({"batch": batch, "dense bf16": str(tps["dense_bf16"]), "Tiled-CSL": str(tps["tiled_csl"]),
                     "speedup": str(sp), "reading": sp.verdict()})
        data[batch] = sp
    return LiveTable(rows, f"decoder d={d_model}, 90% sparse, {tokens} new tokens: tokens per second "
                           "(median [95% interval])", data)


def roofline_answer(roof: dict, points: list[dict]) -> str:
    """Return one line: how fast dense bf16 and Tiled-CSL read their weights at N = 1, against the bandwidth."""
    bw = float(roof["bandwidth_GBps"])
    at1 = {p["kernel"]: p for p in points if p["n"] == 1}
    parts = []
    for kernel in ("dense_bf16", "tiled_csl_sparse"):
        if kernel in at1:
            p = at1[kernel]
            gbps = p["GFLOPs"] / p["intensity"]   # FLOP/s over FLOP/byte = bytes/s of weights
            parts.append(f"{_LABEL[kernel]} reads its weights at {gbps:.1f} GB/s ({gbps / bw:.0%})")
    return f"At N = 1, measured bandwidth {bw:.1f} GB/s: " + "; ".join(parts) + "."
