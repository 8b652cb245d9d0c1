"""The trainer side: a model step per batch, with the time it waits for data (stall) measured.

On a machine with a GPU the step runs the real model there. On a CPU-only machine it runs the
same real model on the CPU with one intra-op thread (a light step, as a GPU job's single host
thread would drive), or, only when asked with ``mode="emulated"``, an *emulated accelerator
step* that sleeps for a fixed time and uses no CPU; every report carries :attr:`Trainer.label`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import nn

from labkit.core.errors import check_choice, check_range


class Trainer:
    """Runs forward, backward and an SGD step of `model` on each batch ``(*inputs, target)``."""

    def __init__(self, model: nn.Module, loss_fn: Callable, lr: float = 0.05, *, mode: str = "auto",
                 emulated_step_s: float = 0.02, threads: int = 1) -> None:
        check_choice("mode", mode, ("auto", "cpu", "cuda", "emulated"))
        check_range("lr", lr, 0, lo_open=True)
        check_range("threads", threads, 1, 256, integer=True)
        check_range("emulated_step_s", emulated_step_s, 0)
        if mode == "auto":
            mode = "cuda" if torch.cuda.is_available() else "cpu"
        if mode == "cuda" and not torch.cuda.is_available():
            raise ValueError("mode='cuda' is not accepted on this machine; expected one of auto, cpu, emulated "
                             "(torch sees no CUDA device)")
        self.mode, self.model, self.loss_fn = mode, model, loss_fn
        self.emulated_step_s, self.threads = float(emulated_step_s), int(threads)
        self.device = torch.device("cuda" if mode == "cuda" else "cpu")
        if mode == "cuda":
            self.model.to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)

    @property
    def label(self) -> str:
        """What the step is, for every table and plot that reports it."""
        return {"cuda": "real model step on CUDA",
                "cpu": f"real model step on CPU ({self.threads} thread)",
                "emulated": f"EMULATED accelerator step (sleep {self.emulated_step_s * 1e3:.0f} ms, no CPU)"}[self.mode]

    def step(self, batch: tuple) -> float:
        """Train on one batch; return its loss (nan for the emulated step)."""
        if self.mode == "emulated":
            time.sleep(self.emulated_step_s)
            return float("nan")
        if self.mode == "cuda":
            batch = tuple(b.to(self.device, non_blocking=True) if isinstance(b, torch.Tensor) else b for b in batch)
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(*batch[:-1]), batch[-1])
        loss.backward()
        self.opt.step()
        if self.mode == "cuda":
            torch.cuda.synchronize()
        return float(loss.detach())


@dataclass
class RunStats:
    """One training run: batches, wall time, time stalled waiting for data, time in model steps."""

    label: str
    batches: int = 0
    wall_s: float = 0.0
    stall_s: float = 0.0
    step_s: float = 0.0
    losses: list[float] = field(default_factory=list)
    timeline: list[tuple[float, float, float]] = field(default_factory=list)  # (t_end, wait_s, step_s)

    @property
    def throughput(self) -> float:
        """Batches per second over the whole run."""
        return self.batches / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def stall_fraction(self) -> float:
        """Share of wall time the trainer waited for data."""
        return self.stall_s / self.wall_s if self.wall_s > 0 else 0.0

    def throughput_between(self, t0: float, t1: float) -> float:
        """Batches per second finished in [t0, t1) seconds after the start."""
        n = sum(1 for t, _, _ in self.timeline if t0 <= t < t1)
        return n / (t1 - t0) if t1 > t0 else 0.0


_THREADS_LOCK = threading.Lock()
_THREADS = {"blocks": 0, "before": 0}


@contextlib.contextmanager
def torch_threads(n: int):
    """Set torch's intra-op thread count for the duration of a block.

    The count is process-wide, and live jobs run their blocks in threads that overlap: the count
    from before the first open block comes back when the last one closes (each block restoring
    what it saw would leave one job's count behind when they end out of order).
    """
    with _THREADS_LOCK:
        if _THREADS["blocks"] == 0:
            _THREADS["before"] = torch.get_num_threads()
        _THREADS["blocks"] += 1
        torch.set_num_threads(n)
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS["blocks"] -= 1
            if _THREADS["blocks"] == 0:
                torch.set_num_threads(_THREADS["before"])


def run(trainer: Trainer, batches: Iterable[Any], *, max_batches: int | None = None,
        time_limit: float | None = None, on_step: Callable[[float, float], None] | None = None,
        stop: threading.Event | None = None) -> RunStats:
    """Train on `batches` until exhausted, `max_batches` or `time_limit` s; return the measured RunStats.

    `on_step(wait_s, step_s)` is called after each step (autoscalers and dashboards listen here).
    Closing the batch iterator early is the "trainer stops early" path: pools must clean up.
    """
    stats = RunStats(trainer.label)
    it = iter(batches)
    t0 = time.perf_counter()
    with torch_threads(trainer.threads):
        try:
            while max_batches is None or stats.batches < max_batches:
                if time_limit is not None and time.perf_counter() - t0 >= time_limit:
                    break
                if stop is not None and stop.is_set():
                    break
                tw = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                ts = time.perf_counter()
                loss = trainer.step(batch)
                te = time.perf_counter()
                stats.batches += 1
                stats.stall_s += ts - tw
                stats.step_s += te - ts
                stats.losses.append(loss)
                stats.timeline.append((te - t0, ts - tw, te - ts))
                if on_step is not None:
                    on_step(ts - tw, te - ts)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
    stats.wall_s = time.perf_counter() - t0
    return stats


class LiveJob:
    """A training run on a background thread, so widgets (kill a worker, CPU budget) stay live.

    ``metrics()`` gives the last `window_s` seconds' throughput and stall for dashboards.
    """

    def __init__(self, trainer: Trainer, batches: Iterable[Any], *, time_limit: float | None = None,
                 max_batches: int | None = None, on_step: Callable[[float, float], None] | None = None,
                 window_s: float = 2.0) -> None:
        self.trainer, self.batches = trainer, batches
        self.time_limit, self.max_batches, self.on_step, self.window_s = time_limit, max_batches, on_step, window_s
        self.stats: RunStats | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._events: list[tuple[float, float, float]] = []  # (monotonic end time, wait_s, step_s)
        self._thread = threading.Thread(target=self._main, name="labkit-dw-livejob", daemon=True)

    def _main(self) -> None:
        def step(wait_s: float, step_s: float) -> None:
            self._events.append((time.monotonic(), wait_s, step_s))
            if self.on_step is not None:
                self.on_step(wait_s, step_s)
        try:
            self.stats = run(self.trainer, self.batches, max_batches=self.max_batches, time_limit=self.time_limit,
                             on_step=step, stop=self._stop)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def start(self) -> "LiveJob":
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask the run to end after its current step and wait (up to `timeout` s) until it has.

        When this returns the thread has ended and the batch iterator is closed (a pool's stream
        has cleaned up), so the pool can be closed. A run still going after `timeout` (a step or
        a wait for a batch that takes longer) raises TimeoutError; it still ends on its own later.
        """
        self._stop.set()
        if self._thread.ident is None or self._thread is threading.current_thread():
            return  # never started, or asked from the run itself (on_step): it ends after this step
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"timeout={timeout!r}: the live job did not stop within {timeout} s (its current "
                               "step or wait for a batch is still running); it stops after that, call join() to wait")

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> RunStats:
        """Wait for the run to end; re-raise its error; return its RunStats."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"timeout={timeout!r}: the live job is still running; call stop() first")
        if self.error is not None:
            raise self.error
        assert self.stats is not None
        return self.stats

    def metrics(self) -> dict:
        """Throughput (batches/s) and stall fraction over the last `window_s` seconds."""
        now = time.monotonic()
        recent = [e for e in list(self._events) if e[0] >= now - self.window_s]
        steps = [s for _, _, s in recent] or [s for _, _, s in self._events[-8:]]
        return {"throughput": len(recent) / self.window_s,
                "stall": min(1.0, sum(w for _, w, _ in recent) / self.window_s),
                "step_s": (sum(steps) / len(steps)) if steps else 0.0,
                "batches": len(self._events)}
