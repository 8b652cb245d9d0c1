"""GoldMiner widgets: the program cut as a graph, the data-worker control panel and live job, simulator plots."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any


def cut_graph(cut: Any) -> Any:
    """Return a plotly figure of the traced program: nodes moved to data workers vs kept in the trainer."""
    import plotly.graph_objects as go

    if cut.graph is None:
        fig = go.Figure()
        fig.update_layout(title=f"{cut.program}: Dataset + collate_fn only (no model graph traced)", height=200)
        return fig
    nodes = [n for n in cut.graph.graph.nodes]
    xs = {n.name: i for i, n in enumerate(nodes)}
    moved = set(cut.prefix_nodes) | {n.name for n in nodes if n.op == "placeholder"}
    frontier = set(cut.frontier)
    ys = {n.name: (0.0 if n.name in moved else (1.0 if n.op == "get_attr" else 0.5)) for n in nodes}
    ex, ey = [], []
    for a, b in cut.edges():
        ex += [xs[a], xs[b], None]
        ey += [ys[a], ys[b], None]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#bbb", "width": 1}, hoverinfo="skip",
                             showlegend=False))
    for label, pick, color in (("data workers (stateless)", lambda n: n.name in moved, "#2a9d8f"),
                               ("trainer", lambda n: n.name not in moved, "#e76f51")):
        sel = [n for n in nodes if pick(n)]
        fig.add_trace(go.Scatter(
            x=[xs[n.name] for n in sel], y=[ys[n.name] for n in sel], mode="markers+text", name=label,
            text=[n.name for n in sel], textposition="top center",
            marker={"size": [16 if n.name in frontier else 11 for n in sel], "color": color,
                    "line": {"width": [3 if n.name in frontier else 0 for n in sel], "color": "black"}},
            hovertext=[f"{n.op}: {n.target}" + (f"<br>stops the cut: {cut.stopped[n.name]}"
                                                if n.name in cut.stopped else "") for n in sel]))
    last = max((xs[n] for n in cut.prefix_nodes), default=0)
    fig.add_vline(x=last + 0.5, line_dash="dash", annotation_text="cut")
    fig.update_layout(title=f"{cut.program}: the automatic cut ({cut.kind})", height=320,
                      yaxis={"visible": False, "range": [-0.4, 1.4]}, xaxis={"title": "graph order"})
    return fig


def control_panel(pool: Any, autoscaler: Any | None = None, *, max_cpus: int = 8) -> tuple[Any, Any, Any]:
    """Return ``(view, fig, state)``: a CPU-budget slider, a kill-a-worker button, and the worker log.

    The slider is the job's CPU budget: it caps the data workers (through the autoscaler when
    there is one, which then scales only below the cap); the button SIGKILLs the worker holding
    the most batches. The bars show the batches each worker has made: they are redrawn on every
    slider move and kill, and by ``state.redraw()`` (call it from a dashboard
    probe to follow a running job). ``state.result`` is the list of actions taken; ``state.controls["CPU budget"]``
    is the slider and ``state.buttons["kill"]`` the button (notebooks and tests call ``.click()`` on it).
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.core.errors import check_range
    from labkit.ui import slider_plot

    check_range("max_cpus", max_cpus, 1, integer=True)
    max_cpus = int(max_cpus)

    actions: list[str] = []
    fig = go.FigureWidget(go.Bar(x=[], y=[], name="batches per worker"))
    fig.update_layout(title="batches made per data worker", height=260, xaxis={"title": "worker id"},
                      yaxis={"title": "batches"})

    def draw(fig: Any) -> None:
        per = dict(pool.stats.per_worker)  # a copy: the pool's thread adds workers meanwhile
        fig.data[0].x = [str(w) for w in per]
        fig.data[0].y = [v["batches"] for v in per.values()]

    def update(fig: Any, values: dict) -> list[str]:
        n = int(values["CPU budget"])
        if autoscaler is not None:
            autoscaler.set_budget(n)
        elif pool.target != n:
            pool.set_target(n)
        actions.append(f"budget {n}")
        draw(fig)
        return actions

    start = int(getattr(autoscaler, "max_workers", None) or pool.target)
    slider = W.IntSlider(value=min(start, max_cpus), min=1, max=max_cpus, description="CPU budget")
    view, fig, state = slider_plot({"CPU budget": slider}, update, fig)
    button = W.Button(description="kill a worker", button_style="danger")

    def kill(_: Any) -> None:
        try:
            actions.append(f"killed worker {pool.kill_worker()}")
        except Exception as exc:  # noqa: BLE001 - shown, not raised into the widget callback
            actions.append(f"kill failed: {exc}")
        redraw()  # not state.refresh(): that re-applies the budget and logs a budget change that was not made

    def redraw() -> None:
        with fig.batch_update():
            draw(fig)

    button.on_click(kill)
    view.children[0].children = tuple(view.children[0].children) + (button,)
    # Not in state.controls: those are the value widgets a refresh re-reads.
    state.buttons = {"kill": button}
    state.redraw = redraw
    return view, fig, state


#: What each notebook profile means for 04_goldminer. "lab" (the default) builds the ci JPEG set and
#: times whole short jobs interleaved over 7 rounds; the live panel's scripted session runs for
#: `demo_s` seconds. The model step is an emulated accelerator step (a sleep that uses no CPU, as a
#: GPU step leaves the host's CPUs free; this machine has no GPU) of `step_share` times the measured
#: preprocessing time of a batch: shorter than the preprocessing, which is then the bottleneck.
LAB_SETTINGS = {
    "lab": {"dataset": "ci", "batch_size": 32, "step_share": 0.75, "job_batches": 16, "rounds": 7,
            "workers": (1, 2), "demo_s": 12.0, "max_live_s": 300.0, "sim_jobs": 120},
    "ci": {"dataset": "ci", "batch_size": 16, "step_share": 0.75, "job_batches": 6, "rounds": 3,
           "workers": (1, 2), "demo_s": 5.0, "max_live_s": 60.0, "sim_jobs": 80},
    "small": {"dataset": "small", "batch_size": 32, "step_share": 0.75, "job_batches": 32, "rounds": 7,
              "workers": (1, 2, 3), "demo_s": 30.0, "max_live_s": 600.0, "sim_jobs": 400},
}


def lab_settings(profile: str) -> dict:
    """Return the notebook sizes for `profile` ("lab", "ci" or "small"; "large" runs as "small")."""
    from labkit.core.profiles import check_notebook_profile

    check_notebook_profile(profile)
    return dict(LAB_SETTINGS.get(profile, LAB_SETTINGS["small"]))


def _job_keys(program: Any, batches: int, start: int) -> list[list[int]]:
    """`batches` key lists of the job starting at epoch `start` (epochs chained as a long job does)."""
    out: list[list[int]] = []
    e = start
    while len(out) < batches:
        out += program.batches(e)
        e += 1
    return out[:batches]


def preprocess_ms(program: Any, batches: int = 8) -> float:
    """Median milliseconds to preprocess one batch in this process (decode, crop, flip, collate)."""
    import statistics

    keys = _job_keys(program, batches, 900)
    times = []
    for k in keys:
        t0 = time.perf_counter()
        program.load(k)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


@dataclass
class JobComparison:
    """The headline: the same job, monolithic vs data workers, timed interleaved (from :func:`compare_jobs`)."""

    comp: Any
    workers: tuple
    step_ms: float
    batches: int

    @property
    def names(self) -> list[str]:
        return ["monolithic"] + [_dw_name(n) for n in self.workers]

    def speedup(self, workers: int | None = None) -> Any:
        """Spread of the speedup of `workers` data workers (default: the most) over the monolithic job."""
        n = max(self.workers) if workers is None else workers
        return self.comp.spread("monolithic", _dw_name(n))

    def table(self) -> Any:
        """A formatted table: time per job and batches per second with intervals, speedup and verdict."""
        from labkit.core.metrics import ResultTable

        t = ResultTable(title=f"{self.batches} batches per job, {self.comp_rounds} rounds interleaved "
                              "(median [95% interval])")
        for name in self.names:
            ts = self.comp.time_spread(name)
            row = {"job": name, "time per job": f"{ts.median:.2f} s [{ts.lo:.2f}, {ts.hi:.2f}]",
                   "batches/s": f"{self.batches / ts.median:.0f}"}
            if name == "monolithic":
                row.update({"speedup": "1 (baseline)", "reading": ""})
            else:
                sp = self.comp.spread("monolithic", name)
                row.update({"speedup": str(sp), "reading": sp.verdict()})
            t.add(**row)
        return t

    @property
    def comp_rounds(self) -> int:
        return len(self.comp.times["monolithic"])

    def figure(self) -> Any:
        """Bars of the speedup over the monolithic job with their 95% intervals; 1.0x marked."""
        import plotly.graph_objects as go

        names = self.names[1:]
        sp = [self.comp.spread("monolithic", n) for n in names]
        labels = [f"{n}<br>({s.verdict()})" for n, s in zip(names, sp)]
        fig = go.Figure(go.Bar(x=labels, y=[s.median for s in sp], marker_color="#2a9d8f",
                               text=[f"{s.median:.2f}x" for s in sp], textposition="inside",
                               error_y={"type": "data", "symmetric": False,
                                        "array": [s.hi - s.median for s in sp],
                                        "arrayminus": [s.median - s.lo for s in sp]}))
        fig.add_hline(y=1.0, line_dash="dash", annotation_text="monolithic (1.0x)",
                      annotation_position="bottom right")
        fig.update_layout(title="Speedup over the monolithic job", height=320,
                          yaxis={"title": "speedup (x), 95% interval", "rangemode": "tozero"},
                          margin={"l": 60, "r": 20, "t": 60, "b": 60})
        return fig


def _dw_name(n: int) -> str:
    return f"{n} data worker{'s' if n != 1 else ''}"


def compare_jobs(program: Any, split: Any, *, step_ms: float, batches: int, rounds: int = 7,
                 workers: tuple = (1, 2)) -> JobComparison:
    """Time the same job monolithic and with each count of data workers, interleaved over `rounds`.

    Every contender trains `batches` batches (a fresh stretch of the job each round) with the same
    emulated accelerator step of `step_ms` ms (a sleep: no CPU, as a GPU step leaves the CPUs
    free). The monolithic job preprocesses a batch, then steps; the data workers preprocess ahead
    while the trainer steps. Pools are persistent across rounds and always closed.
    """
    import itertools

    from labkit.core.bench import interleave
    from labkit.core.errors import check_range
    from labkit.dataworkers.trainer import Trainer, run
    from labkit.dataworkers.workers import ProcessWorkerPool

    check_range("step_ms", step_ms, 0)
    check_range("batches", batches, 1, integer=True)
    check_range("rounds", rounds, 1, integer=True)
    workers = tuple(int(n) for n in workers)
    for n in workers:
        check_range("workers", n, 1, 16, integer=True)
    epochs = itertools.count(1, 50)

    def trainer(model: Any) -> Any:
        return Trainer(model, program.loss_fn, program.lr, mode="emulated", emulated_step_s=step_ms / 1e3)

    mono = trainer(program.model)
    pools: dict[int, Any] = {}
    try:
        contenders = {"monolithic": lambda: run(mono, (program.load(k) for k in
                                                       _job_keys(program, batches, next(epochs))))}
        for n in workers:
            pools[n] = ProcessWorkerPool(split.stateless, workers=n, max_workers=n)
            tr = trainer(split.trainer_model)
            contenders[_dw_name(n)] = (lambda p=pools[n], tr=tr:
                                       run(tr, p.stream(_job_keys(program, batches, next(epochs)))))
        comp = interleave(contenders, rounds=rounds, warmup=1, case="image job")
    finally:
        for p in pools.values():
            p.close()
    return JobComparison(comp, workers, float(step_ms), int(batches))


class LivePanel:
    """A data-worker job you start, resize, break and stop from widgets; built before the job starts.

    ``view`` holds a start and a stop button, the data-worker slider (the job's CPU budget: one
    worker per CPU), a kill-a-worker button, a status line, the live dashboard (CPU per core,
    workers, batches per second) and the batches each worker made. The job trains
    on a background thread with the emulated accelerator step; it stops by itself after
    `max_seconds`. Every control is plain Python: ``start()``, ``stop()``, ``kill()``,
    ``slider.value = n``; ``events`` lists (seconds since start, what happened).
    """

    def __init__(self, program: Any, split: Any, *, step_ms: float, workers: int = 2, max_workers: int = 4,
                 max_seconds: float = 300.0, interval: float = 0.25) -> None:
        import ipywidgets as W

        from labkit.core.errors import check_range
        from labkit.ui.dashboard import Dashboard

        check_range("step_ms", step_ms, 0)
        check_range("max_workers", max_workers, 1, 16, integer=True)
        check_range("workers", workers, 1, max_workers, integer=True)
        check_range("max_seconds", max_seconds, 0, lo_open=True)
        self.program, self.split, self.step_ms = program, split, float(step_ms)
        self.max_workers, self.max_seconds = int(max_workers), float(max_seconds)
        self.pool: Any = None
        self.job: Any = None
        self.stats: Any = None
        self.pool_stats: dict | None = None
        self.events: list[tuple[float, str]] = []
        self.error: str | None = None
        self._t0 = 0.0
        self._lock = threading.RLock()
        self._watch: threading.Thread | None = None
        style = {"description_width": "initial"}
        self.start_button = W.Button(description="start job", button_style="success", icon="play")
        self.stop_button = W.Button(description="stop job", icon="stop", disabled=True)
        self.slider = W.IntSlider(value=int(workers), min=1, max=self.max_workers, continuous_update=False,
                                  description="data workers (CPU budget)", style=style)
        self.kill_button = W.Button(description="kill a worker", button_style="danger", disabled=True)
        self.status = W.HTML("Not started. Press <b>start job</b>.")
        self.dash = Dashboard(interval=interval, title="live job", extra_unit="workers or batches/s",
                              extra={"workers": self._workers, "batches/s": self._rate})
        import plotly.graph_objects as go

        self.bars = go.FigureWidget(go.Bar(x=[], y=[], name="batches per worker", marker_color="#2a9d8f"))
        self.bars.update_layout(title="batches made per data worker", height=240, xaxis={"title": "worker id"},
                                yaxis={"title": "batches"}, margin={"l": 60, "r": 20, "t": 50, "b": 40})
        self.view = W.VBox([W.HBox([self.start_button, self.stop_button, self.slider, self.kill_button],
                                   layout=W.Layout(flex_flow="row wrap")),
                            self.status, self.dash.view, self.bars])
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.kill_button.on_click(lambda _: self.kill())
        self.slider.observe(lambda ch: self._resize(int(ch["new"])), names="value")

    # probes the dashboard samples (0 while no job runs) --------------------------------------
    def _workers(self) -> float:
        with contextlib.suppress(Exception):  # a closed widget must not stop the dashboard's series
            self.redraw_bars()
        return float(self.pool.num_workers) if self.running else 0.0

    def _rate(self) -> float:
        return float(self.job.metrics()["throughput"]) if self.job is not None and self.running else 0.0

    def redraw_bars(self) -> None:
        """Redraw the batches each worker of the current (or last) pool has made."""
        per = dict(self.pool.stats.per_worker) if self.pool is not None else {}
        with self.bars.batch_update():
            self.bars.data[0].x = [str(w) for w in per]
            self.bars.data[0].y = [v["batches"] for v in per.values()]

    @property
    def running(self) -> bool:
        return self.job is not None and self.job.running

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._t0 if self._t0 else 0.0

    def _note(self, what: str) -> None:
        t = self.dash.samples[-1]["t"] if self.dash.samples and self.dash.running else self.elapsed
        self.events.append((round(t, 1), what))
        with contextlib.suppress(Exception):
            self.dash.fig.add_vline(x=t, line_dash="dot", line_color="black")

    def start(self) -> None:
        """Start the job (no-op while it runs): a fresh pool of `slider.value` workers, dashboard on."""
        import itertools

        from labkit.dataworkers.trainer import LiveJob, Trainer
        from labkit.dataworkers.workers import ProcessWorkerPool

        with self._lock:
            if self.running:
                return
            self.stats = self.pool_stats = self.error = None
            self.pool = ProcessWorkerPool(self.split.stateless, workers=self.slider.value,
                                          max_workers=self.max_workers)
            trainer = Trainer(self.split.trainer_model, self.program.loss_fn, self.program.lr, mode="emulated",
                              emulated_step_s=self.step_ms / 1e3)
            keys = (k for e in itertools.count(2000) for k in self.program.batches(e))
            self.job = LiveJob(trainer, self.pool.stream(keys), time_limit=self.max_seconds, window_s=1.0)
            self._t0 = time.monotonic()
            self.dash.start()
            self.job.start()
            self._note(f"start, {self.slider.value} workers")
            self.start_button.disabled, self.stop_button.disabled, self.kill_button.disabled = True, False, False
            self.status.value = (f"Running (stops by itself after {self.max_seconds:.0f} s): move the slider, "
                                 "kill a worker, then press <b>stop job</b>.")
            self._watch = threading.Thread(target=self._wait_end, name="labkit-dw-panel", daemon=True)
            self._watch.start()

    def _wait_end(self) -> None:
        job = self.job
        with contextlib.suppress(Exception):
            job.join()
        with self._lock:
            if self.job is job:  # not a later run started meanwhile
                self.stop()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the job has ended by itself (after `max_seconds`) and the pool is closed."""
        if self._watch is not None:
            self._watch.join(timeout)

    def _resize(self, n: int) -> None:
        with self._lock:
            if self.running:
                self.pool.set_target(n)
                self._note(f"budget {n} workers")
                self.status.value = (f"Data workers set to {n}: the job keeps training while workers start or "
                                     "retire (watch <i>workers</i> and <i>batches/s</i>).")

    def kill(self) -> int | None:
        """SIGKILL the worker holding the most batches; returns its id (None when no job runs)."""
        with self._lock:
            if not self.running:
                return None
            wid = self.pool.kill_worker()
            self._note(f"killed worker {wid}")
            self.status.value = (f"Killed worker {wid}: its batches are re-issued to the others and a new worker "
                                 "replaces it. Batches/s dips, then recovers; no batch is lost or trained twice.")
            return wid

    def stop(self) -> Any:
        """Stop the job, the dashboard and the pool (idempotent); return :meth:`summary`."""
        with self._lock:
            if self.job is not None and self.pool is not None and self.pool_stats is None:
                try:
                    self.job.stop(timeout=30.0)
                    self.stats = self.job.join(timeout=1.0)
                except Exception as exc:  # noqa: BLE001 - shown in the panel, not raised into a callback
                    self.error = f"{type(exc).__name__}: {exc}"
                finally:
                    self._note("stop")
                    self.dash.stop()
                    self.pool_stats = self.pool.metrics()
                    self.pool.close()
                    self.redraw_bars()
                s = self.summary_dict()
                self.status.value = ("Stopped. " + (f"<b>error:</b> {self.error}. " if self.error else "")
                                     + f"{s['batches trained']} batches trained; "
                                     f"{s['worker deaths']} worker(s) killed, {s['batches re-issued']} batches "
                                     f"re-issued, {s['batches lost']} lost. Press <b>start job</b> to run again.")
                self.start_button.disabled, self.stop_button.disabled, self.kill_button.disabled = False, True, True
            return self.summary()

    def summary_dict(self) -> dict:
        st, ps = self.stats, self.pool_stats or {}
        trained = st.batches if st is not None else 0
        return {"batches trained": trained, "seconds": st.wall_s if st is not None else 0.0,
                "batches/s": st.throughput if st is not None else 0.0,
                "worker deaths": ps.get("worker_deaths", 0), "batches re-issued": ps.get("reissued", 0),
                "batches lost": ps.get("delivered", 0) - trained if st is not None else 0,
                "delivered": ps.get("delivered", 0)}

    def summary(self) -> Any:
        """A formatted table of the last run (batches, rate, kills, re-issued and lost batches)."""
        from labkit.core.metrics import ResultTable

        s = self.summary_dict()
        t = ResultTable(title="the live job")
        t.add(measure="batches trained", value=f"{s['batches trained']}")
        t.add(measure="time trained", value=f"{s['seconds']:.1f} s")
        t.add(measure="throughput", value=f"{s['batches/s']:.1f} batches/s")
        t.add(measure="workers killed", value=f"{s['worker deaths']}")
        t.add(measure="batches re-issued after kills", value=f"{s['batches re-issued']}")
        t.add(measure="batches lost", value=f"{s['batches lost']}")
        return t

    def demo(self, seconds: float) -> Any:
        """A scripted session for a headless run: start, raise the budget by one, kill a worker, stop.

        Blocks for about `seconds` (the job itself runs on its thread); returns :meth:`summary`.
        A job already running is used as it is.
        """
        from labkit.core.errors import check_range

        check_range("seconds", seconds, 0, lo_open=True)
        try:
            self.start()
            t0 = time.monotonic()

            def at(frac: float) -> None:
                time.sleep(max(0.0, t0 + frac * seconds - time.monotonic()))
            at(0.3)
            self.slider.value = min(self.max_workers, self.slider.value + 1)
            at(0.55)
            self.kill()
            at(1.0)
        finally:
            result = self.stop()
        return result


def history_table(scaler: Any) -> Any:
    """Return a ResultTable of the autoscaler's windows: time, workers after the window's action, rate, stall,
    the job's busy CPUs and the action."""
    from labkit.core.metrics import ResultTable

    return ResultTable([{"t (s)": round(h.t, 1), "workers after action": h.workers,
                         "batches/s": round(h.throughput, 1), "stall": round(h.stall, 2),
                         "job CPUs busy": None if h.cpu is None else round(h.cpu, 2), "action": h.action}
                        for h in scaler.history], title="autoscaler windows")


def simulator_explorer(n_jobs: int = 120, *, load: float = 0.4, cpu_servers: int = 4,
                       seed: int = 0) -> tuple[Any, Any, Any]:
    """Return ``(view, fig, state)``: offered-load and CPU-only-server sliders re-running the simulator.

    Each move replays one :func:`labkit.dataworkers.simulator.compare` trace of `n_jobs` jobs on
    the default 64-GPU cluster with that many CPU-only servers. `fig` has one axis per panel: the
    average JCT (hours, left) and the GPU utilisation (% of allocated GPU time busy, right) for
    static vs elastic; under it ``state.plots`` (the figure of :func:`simulator_plots`: the JCT CDF
    and GPU utilisation over time) is redrawn for the same run. ``state.result`` is compare's dict.
    The figures are modelled by the simulator, not measured.
    """
    import ipywidgets as W
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from labkit.core.errors import check_range, check_seed
    from labkit.dataworkers import simulator
    from labkit.ui import slider_plot

    check_range("n_jobs", n_jobs, 1, integer=True)
    check_range("load", load, 0.2, 0.8)
    check_range("cpu_servers", cpu_servers, 0, 8, integer=True)
    check_seed(seed)
    detail = go.FigureWidget()  # simulator_plots' figure, redrawn by every run

    def redraw(fig: Any, v: dict) -> dict:
        r = simulator.compare(n_jobs, cluster=simulator.Cluster(cpu_servers=int(v["CPU-only servers"])),
                              load=float(v["offered load"]), seed=seed)
        jct = [r["static"].avg_jct / 3600, r["elastic"].avg_jct / 3600]
        util = [100 * r["static"].gpu_util, 100 * r["elastic"].gpu_util]
        fig.data[0].y, fig.data[0].text = jct, [f"{x:.1f} h" for x in jct]
        fig.data[1].y, fig.data[1].text = util, [f"{x:.0f} %" for x in util]
        fig.layout.title = (f"Modelled: JCT {r['jct_improvement']:.2f}x shorter, "
                            f"GPU use {r['gpu_util_improvement']:.2f}x higher")
        new = simulator_plots(r)
        with detail.batch_update():
            if not detail.data:
                detail.add_traces(list(new.data))
                detail.layout = new.layout
            for tr, t in zip(detail.data, new.data):
                tr.x, tr.y, tr.name = t.x, t.y, t.name
            detail.layout.title = new.layout.title
        return r

    base = make_subplots(rows=1, cols=2, subplot_titles=("average job completion time", "GPU utilisation"),
                         horizontal_spacing=0.15)
    fig = go.FigureWidget(base)
    colors = ["#e76f51", "#2a9d8f"]
    fig.add_bar(x=["static", "elastic"], y=[0, 0], name="average JCT (h)", marker_color=colors,
                textposition="auto", showlegend=False, row=1, col=1)
    fig.add_bar(x=["static", "elastic"], y=[0, 0], name="GPU utilisation (%)", marker_color=colors,
                textposition="auto", showlegend=False, row=1, col=2)
    fig.update_yaxes(title_text="hours", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="% of allocated GPU time busy", range=[0, 100], row=1, col=2)
    fig.update_layout(height=330, margin={"l": 60, "r": 20, "t": 70, "b": 40})
    style = {"description_width": "initial"}
    controls = {"offered load": W.FloatSlider(value=load, min=0.2, max=0.8, step=0.1, style=style,
                                              description="offered load (share of GPUs)"),
                "CPU-only servers": W.IntSlider(value=cpu_servers, min=0, max=8, style=style,
                                                description="CPU-only servers")}
    view, fig, state = slider_plot(controls, redraw, fig, title=f"Simulated 64-GPU cluster, {n_jobs} jobs (modelled)")
    state.plots = detail
    view.children = tuple(view.children) + (detail,)
    return view, fig, state


def simulator_plots(result: dict) -> Any:
    """Return a figure: JCT CDF (static vs elastic) and GPU utilisation of allocated GPUs over time."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("job completion time (CDF)", "utilisation of allocated GPUs"))
    for name, color in (("static", "#e76f51"), ("elastic", "#2a9d8f")):
        r = result[name]
        jct = np.sort(np.array(list(r.jct.values()))) / 3600
        fig.add_trace(go.Scatter(x=jct, y=np.arange(1, len(jct) + 1) / len(jct),
                                 name=f"{name}: avg {r.avg_jct / 3600:.1f} h", line={"color": color}), 1, 1)
        t = np.array([p[0] for p in r.util_timeline]) / 3600
        u = np.array([p[1] for p in r.util_timeline])
        fig.add_trace(go.Scatter(x=t, y=u, name=f"{name}: {r.gpu_util:.0%}",
                                 line={"color": color, "shape": "hv"}), 1, 2)
    fig.update_xaxes(title_text="hours", row=1, col=1)
    fig.update_xaxes(title_text="hours since first arrival", row=1, col=2)
    fig.update_yaxes(title_text="share of jobs finished", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title_text="share of allocated GPUs busy", range=[0, 1.02], row=1, col=2)
    fig.update_layout(height=340, margin={"l": 60, "r": 20, "t": 80, "b": 40},
                      title=f"Modelled: JCT {result['jct_improvement']:.2f}x shorter, "
                            f"GPU use {result['gpu_util_improvement']:.2f}x higher")
    return fig


def sensitivity_figure(table: Any) -> Any:
    """Return a plotly figure of :func:`labkit.dataworkers.simulator.sensitivity`'s table (modelled).

    The JCT gain (static / elastic average JCT) and the GPU-utilisation gain against the trace's
    mean CPU-per-GPU demand; 1.0x, the GPUs' own vCPUs per GPU and the cluster's pooled vCPUs per
    GPU are marked, and so is the unscaled trace (the one the bench's modelled claims come from).
    """
    import plotly.graph_objects as go

    from labkit.core.errors import bad_value

    need = {"demand", "jct_gain", "gpu_util_gain", "base"}
    if not hasattr(table, "columns") or not need <= set(table.columns) or len(table) == 0:
        raise bad_value("table", type(table).__name__, "the non-empty DataFrame simulator.sensitivity() returns")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=table["demand"], y=table["jct_gain"], mode="lines+markers", name="JCT gain",
                             line={"color": "#2a9d8f"},
                             hovertemplate="mean demand %{x:.1f} vCPUs/GPU<br>JCT %{y:.2f}x shorter<extra></extra>"))
    fig.add_trace(go.Scatter(x=table["demand"], y=table["gpu_util_gain"], mode="lines+markers",
                             name="GPU utilisation gain", line={"color": "#e9c46a", "dash": "dash"},
                             hovertemplate="mean demand %{x:.1f} vCPUs/GPU<br>GPU use %{y:.2f}x higher<extra></extra>"))
    base = table[table["base"]]
    if len(base):
        fig.add_trace(go.Scatter(x=base["demand"], y=base["jct_gain"], mode="markers", name="the trace as drawn",
                                 marker={"size": 13, "color": "#e76f51", "symbol": "diamond"}))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="no gain (1.0x)", annotation_position="bottom right")
    attrs = getattr(table, "attrs", {})
    for key, label in (("cpus_per_gpu", "GPUs' own vCPUs"), ("pooled_cpus_per_gpu", "pooled vCPUs")):
        if key in attrs:
            fig.add_vline(x=attrs[key], line_dash="dash", line_color="#888", annotation_text=label,
                          annotation_position="top left")
    fig.update_layout(title="Modelled: how the gain depends on the jobs' CPU-per-GPU demand", height=400,
                      xaxis={"title": "mean CPU-per-GPU demand of the trace (vCPUs per GPU)", "type": "log"},
                      yaxis={"title": "gain (x), static vs elastic", "rangemode": "tozero"},
                      margin={"l": 60, "r": 20, "t": 70, "b": 110}, legend={"orientation": "h", "y": -0.3})
    return fig
