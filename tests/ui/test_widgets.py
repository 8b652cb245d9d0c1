import threading
import time

import ipywidgets as W
import plotly.graph_objects as go
import pytest

from labkit.core.datasets import DatasetError
from labkit.core.errors import LabkitError
from labkit.core.memory import BudgetExceeded
from labkit.ui import Dashboard, slider_plot


def test_slider_plot_observer_updates_figure():
    fig = go.FigureWidget()
    fig.add_scatter(x=[0, 1], y=[0, 0])
    s = W.IntSlider(value=2, min=1, max=10)

    def update(f, v):
        f.data[0].y = [v["k"], v["k"] ** 2]
        return {"sq": v["k"] ** 2}

    view, fig2, state = slider_plot({"k": s}, update, fig, title="t")
    assert fig2 is fig and state.updates == 1 and tuple(fig.data[0].y) == (2, 4)
    s.value = 7
    assert tuple(fig.data[0].y) == (7, 49) and state.result == {"sq": 49} and state.values == {"k": 7}
    assert isinstance(view, W.VBox)


def test_slider_plot_shows_bad_values_instead_of_raising():
    fig = go.FigureWidget()
    s = W.IntSlider(value=1, min=0, max=3)

    def update(f, v):
        if v["k"] == 0:
            raise ValueError("k=0 is not accepted")

    _, _, state = slider_plot({"k": s}, update, fig)
    s.value = 0
    assert state.error and "k=0" in fig.layout.title.text


@pytest.mark.parametrize("exc, shown", [
    (lambda: BudgetExceeded("budget=3 MiB is too small for caliex"), "budget=3 MiB is too small for caliex"),
    (lambda: DatasetError("manifest.json is missing"), "manifest.json is missing"),
    (lambda: LabkitError("store closed"), "store closed"),
    (lambda: MemoryError(), "MemoryError"),
])
def test_slider_plot_shows_labkit_and_memory_errors(exc, shown):
    fig = go.FigureWidget()
    fig.add_scatter(x=[0], y=[0])
    s = W.IntSlider(value=1, min=0, max=3)

    def update(f, v):
        if v["k"] == 0:
            raise exc()
        f.data[0].y = [v["k"]]
        return v["k"]

    _, _, state = slider_plot({"k": s}, update, fig)
    s.value = 0  # raised inside the widget callback: shown, not propagated
    assert state.error == shown and fig.layout.title.text == f"error: {shown}" and state.updates == 2
    s.value = 2  # a good value afterwards clears the error and redraws
    assert state.error is None and tuple(fig.data[0].y) == (2,) and state.result == 2


@pytest.mark.parametrize("bug", [TypeError("bug"), KeyError("bug"), IndexError("bug")])
def test_slider_plot_still_raises_programming_errors(bug):
    fig = go.FigureWidget()
    s = W.IntSlider(value=1, min=0, max=3)

    def update(f, v):
        if v["k"] == 0:
            raise bug

    _, _, state = slider_plot({"k": s}, update, fig)
    with pytest.raises(type(bug), match="bug"):
        state.controls["k"].value = 0


def test_slider_plot_rejects_non_widgets():
    with pytest.raises(ValueError, match="controls"):
        slider_plot({"k": 3}, lambda f, v: None, go.FigureWidget())


def test_dashboard_samples_and_stops_cleanly():
    before = {t.name for t in threading.enumerate()}
    calls = []
    with Dashboard(interval=0.1, extra={"queue depth": lambda: len(calls) or calls.append(1) or 1.0}) as d:
        sum(i * i for i in range(300_000))
        deadline = time.monotonic() + 30  # wait for three samples, however busy the machine is
        while len(d.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.running
    assert not d.running
    assert "labkit-dashboard" not in {t.name for t in threading.enumerate()} - before
    assert len(d.samples) >= 3
    s = d.samples[-1]
    assert len(s["cpu"]) >= 1 and 0 <= s["mem"] <= 100 and s["queue depth"] == 1.0
    # the figure holds the sampled window
    assert len(d.fig.data[0].x) == min(len(d.samples), d.window)
    assert d.summary()["samples"] == len(d.samples)


def test_dashboard_survives_broken_probe():
    def bad():
        raise RuntimeError("probe broke")
    with Dashboard(interval=0.05, extra={"bad": bad}) as d:
        deadline = time.monotonic() + 60  # wait for two samples, however busy the machine is
        while len(d.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.running  # the broken probe did not stop the sampling
    # It kept sampling past the failure: every sample has the probe's slot, empty.
    assert len(d.samples) >= 2 and all(s["bad"] is None for s in d.samples)
    assert "probe broke" in d.errors[0]


def test_dashboard_stop_that_times_out_keeps_the_thread_and_start_refuses():
    entered, release = threading.Event(), threading.Event()

    def stuck():  # a probe that blocks (a hung NFS mount, say)
        entered.set()
        release.wait(30)
        return 1.0

    def ours():
        return [t for t in threading.enumerate() if t.name == "labkit-dashboard"]

    before = ours()
    d = Dashboard(interval=0.05, extra={"stuck": stuck}, figure=False).start()
    try:
        assert entered.wait(30)
        with pytest.warns(RuntimeWarning, match=r"sampling thread did not stop within 0.1 s"):
            d.stop(timeout=0.1)
        # The thread is still sampling: it is kept (NVML stays up for it), and no second one starts.
        assert d.running and d._thread is not None and d._gpu is not None
        with pytest.raises(RuntimeError, match="previous sampling thread has not ended yet"):
            d.start()
        assert len(ours()) == len(before) + 1
    finally:
        release.set()
    d.stop()
    assert not d.running and d._thread is None and d._gpu is None and ours() == before
    d.start()  # and it starts again once the old thread has ended
    d.stop()
    assert not d.running


def test_dashboard_bad_interval():
    with pytest.raises(ValueError, match="interval=0"):
        Dashboard(interval=0)
