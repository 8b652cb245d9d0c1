"""Widgets for a cluster network (``labkit.core.cluster``): its diagram, link probes, a rate slider."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Sequence

from labkit.core.cluster import Cluster, fmt_rate, parse_rate

SWITCH_COLOR, HOST_COLOR, EDGE_COLOR = "#7f7f7f", "#1f77b4", "#bbbbbb"
RATES = ("200mbit", "1gbit", "10gbit", "25gbit")


def _link_label(cl: Cluster) -> str:
    return fmt_rate(cl.rate_bit_s) if cl.shaped else "loopback (not shaped)"


def cluster_diagram(cl: Cluster, *, height: int = 420) -> Any:
    """Return a plotly Figure of `cl`: the switch in the middle, the hosts around it, each link labelled with its rate.

    One marker per node in the trace named "nodes" (the switch first, then the hosts in order);
    host labels give the name and address. A loopback cluster is drawn the same way, its links
    labelled "loopback (not shaped)".
    """
    import plotly.graph_objects as go

    n = len(cl.hosts)
    # hosts on a circle, the first at the top, clockwise
    pos = [(math.sin(2 * math.pi * i / n), math.cos(2 * math.pi * i / n)) for i in range(n)] if n > 1 else [(0.0, 1.0)]
    label = _link_label(cl)
    fig = go.Figure()
    ex, ey = [], []
    for x, y in pos:
        ex += [0.0, x, None]
        ey += [0.0, y, None]
    fig.add_scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", name="links", showlegend=False,
                    line=dict(color=EDGE_COLOR, width=3, dash="solid" if cl.shaped else "dot"))
    fig.add_scatter(x=[x / 2 for x, _ in pos], y=[y / 2 for _, y in pos], mode="text", text=[label] * n,
                    textfont=dict(size=11), hoverinfo="skip", name="link rates", showlegend=False)
    switch_text = "switch" + (f"<br>driver {cl.client_addr}" if cl.shaped else "")
    switch_hover = (f"bridge in namespace {cl.switch_netns}; the driver's veth {cl.client_ifname} has "
                    f"{cl.client_addr} (not shaped)" if cl.shaped else f"loopback: {cl.reason}")
    host_hover = [f"{h.name} {h.addr}<br>" + (f"namespace {h.netns}, {h.ifname} shaped to {label} each way"
                                               if cl.shaped else "127.0.0.1, no namespace") for h in cl.hosts]
    fig.add_scatter(x=[0.0] + [x for x, _ in pos], y=[0.0] + [y for _, y in pos], mode="markers+text",
                    marker=dict(size=[34] + [26] * n, color=[SWITCH_COLOR] + [HOST_COLOR] * n,
                                symbol=["square"] + ["circle"] * n),
                    text=[switch_text] + [f"{h.name}<br>{h.addr}" for h in cl.hosts],
                    textposition=["bottom center"] + ["top center" if y >= 0 else "bottom center" for _, y in pos],
                    hovertext=[switch_hover] + host_hover, hoverinfo="text", name="nodes", showlegend=False)
    title = (f"{n} host{'s' if n != 1 else ''}, each link shaped to {label}" if cl.shaped
             else f"{n} host{'s' if n != 1 else ''} on loopback, not shaped ({cl.reason})")
    axis = dict(visible=False, range=[-1.6, 1.6])
    fig.update_layout(title=title, height=height, xaxis=axis, yaxis=dict(axis, scaleanchor="x"),
                      margin=dict(l=10, r=10, t=50, b=10), plot_bgcolor="white")
    return fig


class _Meter:
    """One read of every link's counters shared by the probes of a sample (one ``ip`` call, not one per host)."""

    MAX_AGE = 0.05  # seconds: probes called in one dashboard sample share a read

    def __init__(self, cl: Cluster) -> None:
        self.cl = cl
        self._lock = threading.Lock()
        self._at = -math.inf
        self._bytes: dict[str, tuple[int, int]] = {}

    def read(self) -> tuple[float, dict[str, tuple[int, int]]]:
        with self._lock:
            now = time.monotonic()
            if now - self._at > self.MAX_AGE:
                self._bytes = self.cl.link_bytes()
                self._at = time.monotonic()
            return self._at, self._bytes


def link_probes(cl: Cluster) -> dict[str, Callable[[], float]]:
    """{"h<i> Gbit/s": probe} for :class:`~labkit.ui.dashboard.Dashboard`'s `extra` (use ``extra_unit="Gbit/s"``).

    Each probe returns its host link's throughput (sent + received) in Gbit/s since its previous
    call; the first call returns 0.0. A loopback cluster has no per-host links (its hosts share
    ``lo``), so it has no probes: ``{}``.
    """
    if not cl.shaped:
        return {}
    meter = _Meter(cl)

    def probe(name: str) -> Callable[[], float]:
        last: list[tuple[float, int] | None] = [None]

        def gbit_s() -> float:
            t, counters = meter.read()
            total = sum(counters.get(name, (0, 0)))
            prev, last[0] = last[0], (t, total)
            if prev is None or t <= prev[0]:
                return 0.0
            return max(0.0, (total - prev[1]) * 8 / (t - prev[0]) / 1e9)
        return gbit_s

    return {f"{h.name} Gbit/s": probe(h.name) for h in cl.hosts}


def link_dashboard(cl: Cluster, **kwargs: Any) -> Any:
    """A :class:`~labkit.ui.dashboard.Dashboard` that also draws every host link's Gbit/s (`kwargs` go to it)."""
    from labkit.ui.dashboard import Dashboard

    extra = {**kwargs.pop("extra", {}), **link_probes(cl)}
    kwargs.setdefault("title", "utilisation and links")
    return Dashboard(extra=extra, extra_unit=kwargs.pop("extra_unit", "Gbit/s"), **kwargs)


def rate_slider(cl: Cluster, rates: Sequence[Any] = RATES, on_change: Callable[[int], Any] | None = None) -> Any:
    """A slider over `rates` that reshapes every link of `cl` live (then calls ``on_change(bits_per_s)``).

    On a loopback cluster the slider is disabled and says why: there is nothing to shape.
    """
    import ipywidgets as W

    options = [(fmt_rate(parse_rate(r)), parse_rate(r)) for r in rates]
    values = [v for _, v in options]
    value = cl.rate_bit_s if cl.rate_bit_s in values else values[0]
    slider = W.SelectionSlider(options=options, value=value, description="link rate",
                               disabled=not cl.shaped, continuous_update=False)
    note = W.HTML("" if cl.shaped else f"loopback, not shaped: {cl.reason}")

    def changed(change: dict) -> None:
        cl.set_rate(change["new"])
        if on_change is not None:
            on_change(change["new"])
    slider.observe(changed, names="value")
    return W.HBox([slider, note])
