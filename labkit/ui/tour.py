"""The tour's slider: table size against measured gather throughput, random vs sorted ids."""

from __future__ import annotations

import math

from labkit import tour
from labkit.core.errors import check_range
from labkit.core.machine import memory_bytes


def gather_explorer(max_log2_rows: int = 22, dim: int = 16, repeats: int = 5):
    """Return ``(view, fig, state)``: a rows slider driving a live bench of random vs sorted gathers.

    Each move gathers a quarter of the table's rows in random and in sorted id order, `repeats`
    interleaved rounds; the bars show the median throughput with its interval (error bars) and the
    title sorted order's speedup with its interval and verdict ("within noise" when it holds 1.0x).
    The slider runs from 2**13 rows to 2**max_log2_rows, which must be at least 13 and give a
    table (rows x dim float32) that fits in this machine's RAM.
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.ui.widgets import slider_plot

    check_range("dim", dim, 1, 4096, integer=True)
    check_range("repeats", repeats, 1, integer=True)
    dim, repeats = int(dim), int(repeats)
    # The slider's top must be a table (2**v rows x dim float32) this machine can hold.
    top = max(13, int(math.log2(max(1, memory_bytes() // (4 * dim)))))
    check_range("max_log2_rows", max_log2_rows, 13, top, integer=True)
    max_log2_rows = int(max_log2_rows)
    fig = go.FigureWidget(layout=dict(title="gather throughput (GB/s)", yaxis_title="throughput (GB/s)",
                                      xaxis_title="id order", height=340, margin=dict(l=60, r=20, t=60, b=50)))
    fig.add_bar(x=["random order", "sorted order"], y=[0, 0], error_y=dict(type="data", symmetric=False))
    rows = W.IntSlider(value=min(20, max_log2_rows), min=13, max=max_log2_rows, description="table rows (log2)",
                       style={"description_width": "initial"})

    def update(f, v):
        n = 2 ** v["log2 rows"]
        c, _ = tour.gather_bench(n, n // 4, dim, repeats)
        gbps, up, down = [], [], []
        for k in ("random order", "sorted order"):
            t = c.time_spread(k)
            y = c.work / t.median / 1e9
            gbps.append(y)
            up.append(c.work / t.lo / 1e9 - y)
            down.append(y - c.work / t.hi / 1e9)
        f.data[0].y = gbps
        f.data[0].error_y.array, f.data[0].error_y.arrayminus = up, down
        sp = c.spread("random order", "sorted order")
        f.layout.title = f"{n:,} rows ({n * dim * 4 / 2**20:.0f} MiB): sorted is {sp} {sp.verdict()}"
        return {"rows": n, "gbps": gbps, "speedup": sp.median, "spread": sp}

    return slider_plot({"log2 rows": rows}, update, fig, title="Table size vs gather locality")
