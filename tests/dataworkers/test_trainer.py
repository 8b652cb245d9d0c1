"""The trainer: labelled step modes, stall accounting, background runs, and the CUDA path."""

from __future__ import annotations

import math
import time

import pytest
import torch

from labkit.dataworkers.baselines import dataloader, monolithic_batches
from labkit.dataworkers.trainer import LiveJob, Trainer, run


def test_real_cpu_step_learns_and_accounts_time(image_prog):
    tr = Trainer(image_prog.model, image_prog.loss_fn, image_prog.lr)
    assert tr.label == "real model step on CPU (1 thread)"
    stats = run(tr, monolithic_batches(image_prog, 0))
    assert stats.batches == len(image_prog.batches(0)) == len(stats.timeline)
    assert all(math.isfinite(x) for x in stats.losses)
    # It learns: the last batches' loss is below the first batches' (seeded model and data).
    assert sum(stats.losses[-4:]) < sum(stats.losses[:4])
    assert stats.stall_s > 0 and stats.step_s > 0
    assert stats.stall_s + stats.step_s <= stats.wall_s + 1e-6
    assert 0 < stats.stall_fraction < 1


def test_emulated_step_is_labelled_everywhere(image_prog):
    tr = Trainer(image_prog.model, image_prog.loss_fn, mode="emulated", emulated_step_s=0.01)
    assert tr.label.startswith("EMULATED accelerator step")
    stats = run(tr, monolithic_batches(image_prog, 0), max_batches=2)
    assert stats.label == tr.label and math.isnan(stats.losses[0]) and stats.step_s >= 0.02


def test_bad_modes_are_named(image_prog):
    with pytest.raises(ValueError, match="mode='tpu' is not accepted"):
        Trainer(image_prog.model, image_prog.loss_fn, mode="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="mode='cuda' is not accepted on this machine"):
            Trainer(image_prog.model, image_prog.loss_fn, mode="cuda")


def test_dataloader_baseline_yields_the_monolithic_batches(image_prog):
    dl, smp = dataloader(image_prog, 0)
    smp.epoch = 1
    got, want = list(dl), list(monolithic_batches(image_prog, 1))
    assert len(got) == len(want) == len(image_prog.batches(1)) > 0
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_live_job_runs_in_the_background_and_stops(image_prog):
    import itertools
    keys = (image_prog.load(k) for e in itertools.count() for k in image_prog.batches(e))
    job = LiveJob(Trainer(image_prog.model, image_prog.loss_fn), keys).start()
    deadline = time.monotonic() + 60  # it trains until stopped: wait for two steps, however busy the machine
    while job.metrics()["batches"] < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    job.stop()
    stats = job.join(10)
    assert stats.batches >= 2 and job.metrics()["step_s"] > 0 and not job.running


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (none found)")
def test_cuda_step(image_prog):
    tr = Trainer(image_prog.model, image_prog.loss_fn, mode="cuda")
    stats = run(tr, monolithic_batches(image_prog, 0), max_batches=2)
    assert tr.label == "real model step on CUDA" and all(math.isfinite(x) for x in stats.losses)


def _slow_batches(closed, gate=None, waiting=None):
    """Endless batches, each after 0.2 s (or once `gate` is set); records when it is closed.

    `waiting` (an Event) is set once the run is inside the iterator, waiting on `gate`.
    """
    try:
        while True:
            if gate is not None:
                if waiting is not None:
                    waiting.set()
                gate.wait()
            time.sleep(0.2)
            yield (torch.zeros(1, 1), torch.zeros(1, 1))
    finally:
        closed.append(True)


def test_live_job_stop_waits_until_the_run_has_ended(image_prog):
    closed = []
    tr = Trainer(torch.nn.Linear(1, 1), torch.nn.functional.mse_loss, mode="emulated", emulated_step_s=0.01)
    job = LiveJob(tr, _slow_batches(closed))
    job.stop()  # before start: nothing to wait for
    job = LiveJob(tr, _slow_batches(closed)).start()
    while job.metrics()["batches"] < 1:
        time.sleep(0.01)
    job.stop()  # called while the run waits for its next batch
    # Once stop() returns the run is over and its batch iterator (a pool's stream) is closed:
    # the pool can be closed safely.
    assert not job.running and closed == [True]
    assert job.join(0).batches >= 1


def test_live_job_stop_that_times_out_says_so(image_prog):
    import threading
    closed, gate, waiting = [], threading.Event(), threading.Event()
    tr = Trainer(torch.nn.Linear(1, 1), torch.nn.functional.mse_loss, mode="emulated", emulated_step_s=0.01)
    job = LiveJob(tr, _slow_batches(closed, gate, waiting)).start()
    # Stop only once the run is stuck waiting for a batch: a stop set before its first batch
    # would end it at once (as it should), and there would be no timeout to report.
    assert waiting.wait(60)
    with pytest.raises(TimeoutError, match=r"timeout=0.2: the live job did not stop within 0.2 s"):
        job.stop(timeout=0.2)
    assert job.running
    gate.set()
    job.stop()
    assert not job.running and closed == [True]


def test_overlapping_torch_thread_blocks_restore_the_count_from_before_the_first():
    from labkit.dataworkers.trainer import torch_threads
    saved = torch.get_num_threads()
    torch.set_num_threads(3)  # neither block's count, so a wrong restore shows on any machine
    try:
        a, b = torch_threads(1), torch_threads(2)
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)  # two live jobs' threads, ending out of order
        assert torch.get_num_threads() == 2  # b's block is still open
        b.__exit__(None, None, None)
        assert torch.get_num_threads() == 3  # not a's 1, which b saw when it started
    finally:
        torch.set_num_threads(saved)
