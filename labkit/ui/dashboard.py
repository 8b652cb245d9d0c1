"""Live utilisation dashboard: CPU per core, memory, disk I/O, GPU, plus any extra series."""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from typing import Any, Callable


class _Gpu:
    """GPU utilisation via nvidia-ml-py, imported lazily; absent GPUs read as None."""

    def __init__(self) -> None:
        self.h = None
        try:
            import pynvml
            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() > 0:
                self.nvml = pynvml
                self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.h = None

    def read(self) -> tuple[float | None, float | None]:
        if self.h is None:
            return None, None
        try:
            u = self.nvml.nvmlDeviceGetUtilizationRates(self.h)
            m = self.nvml.nvmlDeviceGetMemoryInfo(self.h)
            return float(u.gpu), 100.0 * m.used / m.total
        except Exception:
            return None, None

    def close(self) -> None:
        if self.h is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass


def gpu_present() -> bool:
    """True when NVML (nvidia-ml-py) sees at least one GPU: the dashboard then draws GPU series."""
    g = _Gpu()
    try:
        return g.h is not None
    finally:
        g.close()


#: The shortest step between two samples (the dashboard's cost stays bounded: about 10 samples/s).
MIN_STEP = 0.1
#: While a run is young the dashboard samples faster, so that its first seconds hold about this many points.
RAMP_POINTS = 20


def sample_step(elapsed: float, interval: float) -> float:
    """Seconds to wait before the next sample, `elapsed` s after the start.

    About RAMP_POINTS samples cover the time so far (never closer than MIN_STEP apart), growing to
    `interval`: a 1-second job still draws a line of about 10 points, a long one samples every `interval`.
    """
    return min(interval, max(MIN_STEP, elapsed / RAMP_POINTS))


class Dashboard:
    """Samples the machine into a plotly FigureWidget from a background thread, and draws it live.

    Use as a context manager around a workload (``with Dashboard() as d: display(d.view); work()``)
    or call start()/stop(). Samples come every `interval` seconds (default 0.5), faster while the run
    is young (see :func:`sample_step`), so a short job still draws a line. `extra` maps a series name
    to a zero-argument callable (queue depth, workers, hit rate...) sampled alongside, drawn in one
    panel whose y axis reads `extra_unit`. Series the machine does not have are not drawn: no GPU
    series without a GPU NVML can see (`gpu=None` detects; True/False forces), no disk series where
    the OS gives no disk counters. `samples` keeps every sample as a dict.
    """

    def __init__(self, interval: float = 0.5, window: int = 240, extra: dict[str, Callable[[], float]] | None = None,
                 *, figure: bool = True, title: str = "utilisation", extra_unit: str | None = None,
                 gpu: bool | None = None) -> None:
        from labkit.core.errors import check_range
        check_range("interval", interval, 0.05, 60)
        check_range("window", window, 2, integer=True)
        import psutil
        self.interval, self.window = float(interval), int(window)
        self.extra = dict(extra or {})
        self.extra_unit = extra_unit
        self.has_gpu = gpu_present() if gpu is None else bool(gpu)
        self.has_disk = psutil.disk_io_counters() is not None
        self._ncpu = psutil.cpu_count() or 1
        self.samples: list[dict] = []
        self._buf: deque = deque(maxlen=self.window)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu: _Gpu | None = None
        self._series = self._make_series()
        self.fig = self._make_fig(title) if figure else None
        self.view = self._make_view() if figure else None
        self.errors: list[str] = []

    # figure -----------------------------------------------------------------------------
    def _make_series(self) -> list[tuple[int, str, Callable[[dict], Any]]]:
        """(panel row, name, sample -> y) for every series drawn, in trace order."""
        def cpu(i: int) -> Callable[[dict], Any]:
            return lambda s: s["cpu"][i] if i < len(s["cpu"]) else None

        def mb(key: str) -> Callable[[dict], Any]:
            return lambda s: s[key] / 1e6

        def get(key: str) -> Callable[[dict], Any]:
            return lambda s: s.get(key)

        series = [(1, f"cpu{i}", cpu(i)) for i in range(self._ncpu)]
        series.append((2, "memory %", get("mem")))
        if self.has_gpu:
            series += [(2, "GPU util %", get("gpu_util")), (2, "GPU mem %", get("gpu_mem"))]
        row = 3
        if self.has_disk:
            series += [(row, "read MB/s", mb("disk_read_Bps")), (row, "write MB/s", mb("disk_write_Bps"))]
            row += 1
        series += [(row, name, get(name)) for name in self.extra]
        return series

    @property
    def series(self) -> list[str]:
        """The names of the series drawn, in trace order."""
        return [name for _, name, _ in self._series]

    def _make_fig(self, title: str) -> Any:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        panels = [("CPU per core", "CPU %"), ("memory and GPU" if self.has_gpu else "memory", "% of total")]
        if self.has_disk:
            panels.append(("disk I/O", "MB/s"))
        if self.extra:
            panels.append((", ".join(self.extra), self.extra_unit or ""))
        rows = len(panels)
        base = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=[t for t, _ in panels],
                             vertical_spacing=0.08)
        fig = go.FigureWidget(base)
        for row, name, _ in self._series:
            fig.add_scatter(x=[], y=[], name=name, mode="lines+markers", marker=dict(size=3), row=row, col=1)
        for row, (_, unit) in enumerate(panels, 1):
            fig.update_yaxes(title_text=unit or None, row=row, col=1)
        fig.update_yaxes(range=[0, 100], row=1, col=1)
        fig.update_yaxes(range=[0, 100], row=2, col=1)
        fig.update_xaxes(title_text="seconds since the dashboard started", row=rows, col=1)
        fig.update_layout(height=170 * rows + 70, title=title, margin=dict(l=60, r=10, t=60, b=50))
        return fig

    def _make_view(self) -> Any:
        import ipywidgets as W
        self._status = W.HTML("stopped")
        return W.VBox([self._status, self.fig])

    # sampling ---------------------------------------------------------------------------
    def sample(self) -> dict:
        """Take one sample now (also used by the thread); returns it."""
        import psutil
        now = time.monotonic()
        cpu = psutil.cpu_percent(percpu=True)
        mem = psutil.virtual_memory().percent
        io = psutil.disk_io_counters()
        rd, wr = (io.read_bytes, io.write_bytes) if io else (0, 0)
        if self._last_io is not None and now > self._last_io[0]:
            dt = now - self._last_io[0]
            rbps, wbps = (rd - self._last_io[1]) / dt, (wr - self._last_io[2]) / dt
        else:
            rbps = wbps = 0.0
        self._last_io = (now, rd, wr)
        gu, gm = self._gpu.read() if self._gpu else (None, None)
        s = {"t": now - self._t0, "cpu": cpu, "mem": mem, "disk_read_Bps": rbps, "disk_write_Bps": wbps,
             "gpu_util": gu, "gpu_mem": gm}
        for name, fn in self.extra.items():
            try:
                s[name] = float(fn())
            except Exception as exc:  # a broken probe must not kill the dashboard
                s[name] = None
                if len(self.errors) < 10:
                    self.errors.append(f"{name}: {exc}")
        self.samples.append(s)
        self._buf.append(s)
        return s

    def _draw(self) -> None:
        if self.fig is None or not self._buf:
            return
        buf = list(self._buf)
        t = [s["t"] for s in buf]
        with self.fig.batch_update():
            for tr, (_, _, y) in zip(self.fig.data, self._series):
                tr.x, tr.y = t, [y(s) for s in buf]

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            try:
                self._draw()
            except Exception as exc:  # pragma: no cover - a closed comm, say
                if len(self.errors) < 10:
                    self.errors.append(f"draw: {exc}")
            self._stop.wait(sample_step(time.monotonic() - self._t0, self.interval))

    def start(self) -> "Dashboard":
        """Start sampling in a daemon thread (idempotent).

        Raises RuntimeError while the thread of an earlier :meth:`stop` that timed out is still
        finishing a sample: two threads would sample (and draw) at once.
        """
        if self._thread is not None:
            if self._thread.is_alive() and not self._stop.is_set():
                return self
            self._thread.join(0.1)
            if self._thread.is_alive():
                raise RuntimeError("the dashboard's previous sampling thread has not ended yet (stop() timed out "
                                   "while it was taking a sample); call stop() again, then start()")
            self._release()  # it ended after stop() gave up on it
        import psutil
        psutil.cpu_percent(percpu=True)  # prime: the first call measures since the last one
        self._t0 = time.monotonic()
        self._last_io = None
        self._gpu = _Gpu()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="labkit-dashboard", daemon=True)
        self._thread.start()
        if self.view is not None:
            self._status.value = "<span style='color:green'>sampling</span>"
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread and wait for it (`timeout` s, default 5 intervals + 5 s); the figure keeps the last window.

        A thread still sampling after `timeout` (a slow `extra` probe, say) is kept, with a
        warning: NVML stays up for it, and :meth:`start` refuses until it has ended.
        """
        self._stop.set()
        if self._thread is not None:
            wait = 5 * self.interval + 5 if timeout is None else timeout
            self._thread.join(timeout=wait)
            if self._thread.is_alive():
                warnings.warn(f"the dashboard's sampling thread did not stop within {wait:g} s (a sample or an "
                              "extra probe is still running); it ends after that sample. Call stop() again to "
                              "wait for it", RuntimeWarning, stacklevel=2)
                if self.view is not None:
                    self._status.value = "stopping (a sample is still running)"
                return
        self._release()
        if self.view is not None:
            self._status.value = f"stopped after {len(self.samples)} samples"

    def _release(self) -> None:
        """Forget the ended thread and shut NVML down (only once no thread can read the GPU)."""
        self._thread = None
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Dashboard":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def summary(self) -> dict:
        """Mean CPU %, peak memory %, peak disk read MB/s over all samples."""
        if not self.samples:
            return {"samples": 0}
        cpu = [sum(s["cpu"]) / max(1, len(s["cpu"])) for s in self.samples]
        return {"samples": len(self.samples), "cpu_mean": sum(cpu) / len(cpu),
                "mem_peak": max(s["mem"] for s in self.samples),
                "disk_read_peak_MBps": max(s["disk_read_Bps"] for s in self.samples) / 1e6}

    def summary_table(self) -> Any:
        """:meth:`summary` as a formatted table with units (what a notebook shows)."""
        from labkit.core.metrics import ResultTable
        s = self.summary()
        t = ResultTable(title="utilisation while the work ran")
        t.add(measure="samples", value=f"{s['samples']}")
        if s["samples"]:
            span = self.samples[-1]["t"] - self.samples[0]["t"]
            t.add(measure="time sampled", value=f"{span:.1f} s")
            t.add(measure="mean CPU (all cores)", value=f"{s['cpu_mean']:.0f} %")
            t.add(measure="peak memory", value=f"{s['mem_peak']:.0f} % of RAM")
            if self.has_disk:
                t.add(measure="peak disk read", value=f"{s['disk_read_peak_MBps']:.1f} MB/s")
            gpu = [x["gpu_util"] for x in self.samples if x.get("gpu_util") is not None]
            if self.has_gpu and gpu:
                t.add(measure="peak GPU utilisation", value=f"{max(gpu):.0f} %")
        return t
