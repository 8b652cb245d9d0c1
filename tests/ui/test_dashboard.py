"""The dashboard draws only the series this machine has, a line even for a short job, with units."""

from __future__ import annotations

import time

import pytest

from labkit.ui import dashboard
from labkit.ui.dashboard import Dashboard, sample_step


def _names(d):
    return [tr.name for tr in d.fig.data]


def test_no_gpu_series_without_a_gpu():
    d = Dashboard(gpu=False, extra={"queue": lambda: 1})
    assert not any("GPU" in n for n in _names(d)) and _names(d) == d.series
    assert "GPU" not in " ".join(a.text for a in d.fig.layout.annotations)
    assert _names(d)[-1] == "queue"


def test_gpu_series_when_there_is_one():
    d = Dashboard(gpu=True)
    assert {"GPU util %", "GPU mem %"} <= set(_names(d))
    assert "memory and GPU" in [a.text for a in d.fig.layout.annotations]


def test_gpu_detection_follows_nvml(monkeypatch):
    class NoNvml(dashboard._Gpu):
        def __init__(self):
            self.h = None
    monkeypatch.setattr(dashboard, "_Gpu", NoNvml)
    assert dashboard.gpu_present() is False
    assert not any("GPU" in n for n in _names(Dashboard()))


def test_no_disk_panel_where_the_os_gives_no_disk_counters(monkeypatch):
    import psutil
    monkeypatch.setattr(psutil, "disk_io_counters", lambda *a, **k: None)
    d = Dashboard(gpu=False)
    assert not any("MB/s" in n for n in _names(d))
    assert [a.text for a in d.fig.layout.annotations] == ["CPU per core", "memory"]
    with d:
        deadline = time.monotonic() + 30
        while len(d.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(d.samples) >= 2 and len(d.fig.data[-1].x) >= 2


def test_every_panel_names_its_unit():
    d = Dashboard(gpu=False, extra={"batches": lambda: 1}, extra_unit="batches")
    ytitles = [d.fig.layout[k].title.text for k in sorted(d.fig.layout) if k.startswith("yaxis")]
    assert ytitles == ["CPU %", "% of total", "MB/s", "batches"]
    bottom = sorted(k for k in d.fig.layout if k.startswith("xaxis"))[-1]
    assert "seconds" in d.fig.layout[bottom].title.text


def test_sample_step_ramps_up_to_the_interval():
    assert sample_step(0.0, 0.5) == dashboard.MIN_STEP
    assert sample_step(1.0, 0.5) == dashboard.MIN_STEP
    assert sample_step(5.0, 0.5) == pytest.approx(0.25)
    assert sample_step(60.0, 0.5) == 0.5
    assert sample_step(0.0, 0.05) == 0.05  # a shorter interval than the ramp's floor is kept
    # A 1-second job gets about 10 samples, a 2-second one about 20, whatever the interval asked.
    for span, want in ((1.0, 10), (2.0, 20)):
        t, n = 0.0, 0
        while t < span:
            t += sample_step(t, 0.5)
            n += 1
        assert n >= want - 1


def test_a_short_job_draws_a_line():
    with Dashboard(interval=0.5, gpu=False) as d:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            sum(i * i for i in range(20_000))
    # at least ~10 points in 1.5 s at 0.5 s asked (a busy machine may delay a few)
    assert len(d.samples) >= 6
    assert len(d.fig.data[0].x) == len(d.samples)


def test_summary_table_has_units():
    with Dashboard(gpu=False, figure=False) as d:
        deadline = time.monotonic() + 30
        while len(d.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    text = repr(d.summary_table())
    assert "% of RAM" in text and " s" in text and "GPU" not in text
    assert "samples" in repr(Dashboard(gpu=False, figure=False).summary_table())
