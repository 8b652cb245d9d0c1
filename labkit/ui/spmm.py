"""Flash-LLM widgets: the machine's roofline, sparsity and N sliders driving live SpMM timings, a tile picture."""

from __future__ import annotations

import math

import numpy as np

from labkit.core.errors import bad_value, check_range
from labkit.spmm import lab
from labkit.spmm.tiled_csl import TiledCSL


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


def sparsity_explorer(shape: tuple[int, int], n: int = 1, repeats: int = 3, seed: int = 0):
    """Return ``(view, fig, state)``: a sparsity slider re-timing dense bf16 vs Tiled-CSL at N = n.

    Left bars: milliseconds per product; right bars: MiB of weights each one reads.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.ui.widgets import slider_plot

    fig = go.FigureWidget(make_subplots(rows=1, cols=2, subplot_titles=("time per product (ms)",
                                                                          "weight bytes read (MiB)")))
    fig.add_bar(x=["dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile"], y=[0, 0, 0], row=1, col=1,
                name="ms")
    fig.add_bar(x=["dense_bf16", "tiled_csl"], y=[0, 0], row=1, col=2, name="MiB")
    fig.update_yaxes(title_text="ms per product", row=1, col=1)
    fig.update_yaxes(title_text="MiB of weights", row=1, col=2)
    fig.update_xaxes(title_text="kernel", row=1, col=1)
    fig.update_xaxes(title_text="format", row=1, col=2)
    fig.update_layout(height=340, showlegend=False)
    slider = W.FloatSlider(value=0.8, min=0.5, max=0.95, step=0.05, description="sparsity")

    def update(f, v):
        s = round(v["sparsity"], 2)
        w, enc = lab.sparse_case(shape, s, seed=seed)
        c = lab.compare_once(w, enc, n, repeats=repeats)
        out = lab.summary(c, enc, s)
        f.data[0].y = [out["dense_ms"], out["tiled_csl_sparse_ms"], out["tiled_csl_dense_tile_ms"]]
        f.data[1].y = [out["dense_MB"], out["tiled_csl_MB"]]
        f.layout.title = (f"{shape[0]}x{shape[1]}, N={n}, {s:.0%} sparse: {out['speedup']:.2f}x dense "
                          f"({out['roofline_fraction']:.0%} of the {out['bound']:.2f}x byte bound)")
        return out

    return slider_plot({"sparsity": slider}, update, fig, title="Sparsity vs SpMM time and bytes")


def n_explorer(shape: tuple[int, int], sparsity: float = 0.8, max_log2_n: int = 5, repeats: int = 3,
               seed: int = 0):
    """Return ``(view, fig, state)``: an N slider adding points to speedup-over-dense vs N.

    Each move times dense bf16 and both kernels at that N; the curve crossing 1 is the N where
    dense (compute-bound by then) overtakes the sparse kernels on this CPU.
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.ui.widgets import slider_plot

    # The slider runs over N = 1 .. 2**max_log2_n, and compare_once times N up to 64.
    check_range("max_log2_n", max_log2_n, 0, 6, integer=True)
    max_log2_n = int(max_log2_n)
    w, enc = lab.sparse_case(shape, sparsity, seed=seed)
    fig = go.FigureWidget(layout=dict(height=340, xaxis=dict(title="N (batch)", type="log"),
                                      yaxis=dict(title="speedup over dense bf16"),
                                      title=f"{shape[0]}x{shape[1]}, {sparsity:.0%} sparse"))
    fig.add_scatter(x=[], y=[], mode="lines+markers", name="tiled_csl_sparse")
    fig.add_scatter(x=[], y=[], mode="lines+markers", name="tiled_csl_dense_tile")
    fig.add_scatter(x=[1, 2 ** max_log2_n], y=[1, 1], mode="lines", name="dense", line=dict(dash="dot"))
    seen: dict[int, tuple[float, float]] = {}
    slider = W.IntSlider(value=0, min=0, max=max_log2_n, description="log2 N")

    def update(f, v):
        n = 2 ** v["log2 N"]
        c = lab.compare_once(w, enc, n, repeats=repeats)
        seen[n] = (c.ratio("dense_bf16", "tiled_csl_sparse"), c.ratio("dense_bf16", "tiled_csl_dense_tile"))
        ns = sorted(seen)
        f.data[0].x, f.data[0].y = ns, [seen[k][0] for k in ns]
        f.data[1].x, f.data[1].y = ns, [seen[k][1] for k in ns]
        f.layout.title = f"N={n}: sparse {seen[n][0]:.2f}x, dense-tile {seen[n][1]:.2f}x" + _dense_ahead(seen)
        return {"n": n, "sparse": seen[n][0], "dense_tile": seen[n][1], "points": dict(seen)}

    return slider_plot({"log2 N": slider}, update, fig, title="Batch size N vs speedup (the crossover)")


def _dense_ahead(seen: dict[int, tuple[float, float]]) -> str:
    """The title's note on where dense beat both kernels among the N tried so far ("" if nowhere).

    "from N=k" only when dense is ahead at k and at every larger N tried; otherwise the Ns are listed
    (a noisy or cache-sized case can lose at N=4 and win again at N=16)."""
    ns = sorted(seen)
    losing = [k for k in ns if max(seen[k]) < 1.0]
    if not losing:
        return ""
    if losing == ns[ns.index(losing[0]):]:
        return f"; dense ahead from N={losing[0]} on, among the N tried"
    return f"; dense ahead at N={', '.join(map(str, losing))} only, among the N tried"


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
