"""GoldMiner widgets: the program cut as a graph, the data-worker control panel and live job, simulator plots."""

from __future__ import annotations

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
    slider move and kill, and by ``state.redraw()`` (which :func:`live_job` calls on each
    dashboard tick). ``state.result`` is the list of actions taken; ``state.controls["CPU budget"]``
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


@dataclass
class LiveRun:
    """A data-worker job training on a background thread (from :func:`live_job`), with its widgets.

    ``view`` is the control panel (CPU budget slider, kill button, batches per worker) and
    ``dash.view`` the utilisation dashboard; display both, interact while the job runs, then call
    :meth:`finish`, which waits only for the job's remaining time and always closes the pool.
    """

    job: Any
    pool: Any
    scaler: Any
    dash: Any
    panel: Any
    view: Any
    seconds: float
    started: float = field(default_factory=time.monotonic)
    pool_stats: dict | None = None

    @property
    def killed(self) -> bool:
        """Whether a worker was killed from the panel (by you, or by :meth:`kill_once`)."""
        return any(a.startswith("killed worker") for a in self.panel.result)

    def kill_once(self, at_s: float) -> bool:
        """Press "kill a worker" `at_s` seconds into the job, unless it was pressed already or the job has
        ended; returns whether it pressed. Waits (blocking) only until that moment."""
        if self.killed or not self.job.running:
            return False
        time.sleep(max(0.0, self.started + at_s - time.monotonic()))
        if not self.job.running:
            return False
        self.panel.buttons["kill"].click()
        return True

    def finish(self) -> Any:
        """Wait for the job's remaining time and return its RunStats; the dashboard is stopped and the
        pool closed (its final metrics kept in ``pool_stats``) even if the job failed or the wait was
        interrupted."""
        try:
            return self.job.join()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the job, the dashboard and the pool (idempotent)."""
        try:
            if self.job.running:
                self.job.stop(timeout=30.0)
        finally:
            self.dash.stop()
            if self.pool_stats is None:
                self.pool_stats = self.pool.metrics()
            self.pool.close()


def live_job(program: Any, split: Any, *, seconds: float, max_workers: int = 4, max_cpus: int = 4,
             window_s: float = 1.0, interval: float = 0.25) -> LiveRun:
    """Start `split`'s trainer on a background thread, fed by a data-worker pool under an autoscaler.

    The pool starts with one worker (at most `max_workers`); the autoscaler judges windows of
    `window_s` seconds; the job trains for `seconds` over as many epochs of `program` as that takes.
    The control panel's CPU budget slider goes up to `max_cpus`. A dashboard (sampled every
    `interval` s) draws CPU, workers, queue depth, throughput and trainer stall, and redraws the
    panel's batches-per-worker bars on each tick. Returns the running :class:`LiveRun`.
    """
    from labkit.core.errors import check_range
    from labkit.dataworkers.autoscale import Autoscaler
    from labkit.dataworkers.trainer import LiveJob, Trainer
    from labkit.dataworkers.workers import ProcessWorkerPool
    from labkit.ui.dashboard import Dashboard

    check_range("seconds", seconds, 0, lo_open=True)
    check_range("max_cpus", max_cpus, 1, integer=True)
    pool = ProcessWorkerPool(split.stateless, workers=1, max_workers=max_workers)
    dash = None
    try:
        scaler = Autoscaler(pool, max_workers=max_workers, window_s=window_s)
        trainer = Trainer(split.trainer_model, program.loss_fn, program.lr)
        epochs = (keys for e in range(1, 1_000_000) for keys in program.batches(e))
        job = LiveJob(trainer, pool.stream(epochs), time_limit=float(seconds), on_step=scaler.on_step)
        view, _, panel = control_panel(pool, scaler, max_cpus=max_cpus)

        def workers() -> int:
            try:
                panel.redraw()
            except Exception:  # noqa: BLE001 - a closed widget must not stop the dashboard's series
                pass
            return pool.num_workers
        dash = Dashboard(interval=interval, extra={"workers": workers, "queue depth": lambda: pool.ready_depth,
                                                   "throughput": lambda: job.metrics()["throughput"],
                                                   "trainer stall": lambda: job.metrics()["stall"]})
        live = LiveRun(job, pool, scaler, dash, panel, view, float(seconds))
        dash.start()
        live.started = time.monotonic()
        job.start()
        return live
    except BaseException:
        if dash is not None:
            dash.stop()
        pool.close()
        raise


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
    the default 64-GPU cluster with that many CPU-only servers; the bars show average JCT (hours)
    and GPU utilisation for static vs elastic, and under them ``state.plots`` (the figure of
    :func:`simulator_plots`: the JCT CDF and GPU utilisation over time) is redrawn for the same run.
    ``state.result`` is compare's dict.
    """
    import ipywidgets as W
    import plotly.graph_objects as go

    from labkit.core.errors import check_range, check_seed
    from labkit.dataworkers import simulator
    from labkit.ui import slider_plot

    check_range("n_jobs", n_jobs, 1, integer=True)
    check_range("load", load, 0.2, 0.8)
    check_range("cpu_servers", cpu_servers, 0, 8, integer=True)
    check_seed(seed)
    detail = go.FigureWidget()  # simulator_plots' figure, redrawn by every run

    def redraw(fig: Any, v: dict) -> dict:
        r = simulator.compare(n_jobs, cluster=simulator.Cluster(cpu_servers=int(v["CPU servers"])),
                              load=float(v["load"]), seed=seed)
        fig.data[0].y = [r["static"].avg_jct / 3600, r["elastic"].avg_jct / 3600]
        fig.data[1].y = [r["static"].gpu_util, r["elastic"].gpu_util]
        fig.layout.title = (f"JCT {r['jct_improvement']:.2f}x better, "
                            f"GPU utilisation {r['gpu_util_improvement']:.2f}x higher")
        new = simulator_plots(r)
        with detail.batch_update():
            if not detail.data:
                detail.add_traces(list(new.data))
                detail.layout = new.layout
            for tr, t in zip(detail.data, new.data):
                tr.x, tr.y, tr.name = t.x, t.y, t.name
            detail.layout.title = new.layout.title
        return r

    fig = go.FigureWidget([go.Bar(x=["static", "elastic"], y=[0, 0], name="avg JCT (h)"),
                           go.Bar(x=["static", "elastic"], y=[0, 0], name="GPU utilisation", yaxis="y2")])
    fig.update_layout(barmode="group", height=320, yaxis={"title": "average JCT (h)"},
                      yaxis2={"title": "GPU utilisation", "overlaying": "y", "side": "right", "range": [0, 1.05]})
    controls = {"load": W.FloatSlider(value=load, min=0.2, max=0.8, step=0.1),
                "CPU servers": W.IntSlider(value=cpu_servers, min=0, max=8)}
    view, fig, state = slider_plot(controls, redraw, fig, title=f"Simulated 64-GPU cluster, {n_jobs} jobs")
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
    fig.update_layout(height=340, title=f"static vs elastic: JCT {result['jct_improvement']:.2f}x better, "
                                        f"GPU utilisation {result['gpu_util_improvement']:.2f}x higher")
    return fig
