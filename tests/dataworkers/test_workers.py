"""Data worker pools: exactly-once in-order delivery, crashes, stragglers, early stop, cleanup."""

from __future__ import annotations

import os
import time

import pytest
import torch

from labkit.dataworkers.extract import extract
from labkit.dataworkers.workers import DaskWorkerPool, ProcessWorkerPool, WorkerError


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture
def split(image_prog):
    return extract(image_prog)


def reference(split, keys):
    return [split.stateless(k) for k in keys]


def test_in_order_exactly_once(image_prog, split, no_leaks):
    keys = image_prog.batches(0) + image_prog.batches(1)
    ref = reference(split, keys)
    with ProcessWorkerPool(split.stateless, workers=2) as pool:
        got = list(pool.stream(keys))
        assert len(got) == len(ref) and all(same(a, b) for a, b in zip(ref, got))
        assert pool.stats.delivered == len(keys)
        assert pool.metrics()["per_worker_batches_per_s"] > 0
        cpu = pool.cpu_seconds()  # what the autoscaler's CPU gate reads
        assert set(cpu) == set(pool.pids().values()) and sum(cpu.values()) > 0
        if hasattr(os, "sched_getscheduler"):
            assert all(os.sched_getscheduler(pid) == os.SCHED_OTHER for pid in pool.pids().values())


def test_sched_batch_workers(image_prog, split, no_leaks):
    keys = image_prog.batches(0)[:4]
    with ProcessWorkerPool(split.stateless, workers=1, sched_batch=True) as pool:
        got = list(pool.stream(keys))
        assert all(same(a, b) for a, b in zip(reference(split, keys), got))
        if hasattr(os, "sched_getscheduler"):
            assert all(os.sched_getscheduler(pid) == os.SCHED_BATCH for pid in pool.pids().values())


def test_killed_worker_batches_are_reissued(image_prog, split, no_leaks):
    keys = image_prog.batches(0) * 3
    ref = reference(split, keys)
    got = []
    with ProcessWorkerPool(split.stateless, workers=2, depth=3) as pool:
        for i, b in enumerate(pool.stream(keys)):
            if i in (2, 9):
                pool.kill_worker()
            got.append(b)
        # A death noticed on the last batch is replaced on the next stream, not this one.
        assert pool.stats.worker_deaths == 2 and pool.stats.respawned + pool._owed_respawns == 2
    assert len(got) == len(ref) and all(same(a, b) for a, b in zip(ref, got))


def test_slow_worker_is_worked_around(image_prog, split, no_leaks):
    keys = image_prog.batches(0) * 2
    ref = reference(split, keys)
    with ProcessWorkerPool(split.stateless, workers=2, straggler_factor=3.0) as pool:
        pool.slow_down(0, 0.4)
        got = list(pool.stream(keys))
        assert pool.stats.speculative >= 1
    assert all(same(a, b) for a, b in zip(ref, got)) and len(got) == len(ref)


class Boom:
    def __init__(self, part):
        self.part = part

    def __call__(self, keys):
        if 5 in keys:
            raise RuntimeError("corrupt sample 5")
        return self.part(keys)


def test_worker_exception_names_the_batch(image_prog, split, no_leaks):
    keys = [[1, 2], [3, 4], [5, 6]]
    with ProcessWorkerPool(Boom(split.stateless), workers=2) as pool:
        with pytest.raises(WorkerError, match=r"failed on batch 2 \(keys \[5, 6\]\): RuntimeError: corrupt sample 5"):
            list(pool.stream(keys))


def test_trainer_stopping_early_cleans_up(image_prog, split, no_leaks):
    pool = ProcessWorkerPool(split.stateless, workers=2)
    it = pool.stream(image_prog.batches(0) * 5)
    next(it)
    next(it)
    it.close()  # the trainer stops early
    # The pool is still usable, and late results of the abandoned stream are dropped: the new
    # stream yields exactly its own batches, in order (no_leaks checks the processes went away).
    keys = image_prog.batches(0)[3:6]
    got = list(pool.stream(keys))
    assert len(got) == 3 and all(same(a, b) for a, b in zip(reference(split, keys), got))
    pool.close()
    assert pool.num_workers == 0


def test_all_workers_dead_without_respawn_is_an_error(image_prog, split, no_leaks):
    with ProcessWorkerPool(split.stateless, workers=1, respawn=False, batch_timeout=20) as pool:
        with pytest.raises(WorkerError, match="every data worker has died"):
            for i, _ in enumerate(pool.stream(image_prog.batches(0) * 4)):
                if i == 1:
                    pool.kill_worker()


def test_scaling_up_and_down(image_prog, split, no_leaks):
    with ProcessWorkerPool(split.stateless, workers=1, max_workers=3) as pool:
        got = []
        for i, b in enumerate(pool.stream(image_prog.batches(0) * 3)):
            if i == 1:
                pool.set_target(3)
            if i == 6:
                assert pool.num_workers == 3
                pool.set_target(1)
            got.append(b)
        assert pool.num_workers == 1 and len(got) == 3 * len(image_prog.batches(0))


def test_bad_arguments_are_named(split):
    with pytest.raises(ValueError, match=r"workers=0 is not accepted"):
        ProcessWorkerPool(split.stateless, workers=0)
    with pytest.raises(ValueError, match=r"start_method='thread' is not accepted"):
        ProcessWorkerPool(split.stateless, start_method="thread")


@pytest.mark.dask
@pytest.mark.slow
def test_dask_backend_in_order_and_scheduler_loss(image_prog, split):
    keys = image_prog.batches(0)
    ref = reference(split, keys)
    pool = DaskWorkerPool.local(split.stateless, workers=1, batch_timeout=30)
    try:
        assert all(same(a, b) for a, b in zip(ref, pool.stream(keys)))
        got = []
        for i, b in enumerate(pool.stream(keys * 3)):
            if i == 2:
                pool.kill_worker()  # Dask recomputes what it held; we still get each batch once
            got.append(b)
        assert len(got) == 3 * len(ref) and all(same(a, b) for a, b in zip(ref * 3, got))
        it = pool.stream(keys * 50)
        next(it)
        pool._cluster.close()  # the scheduler goes away mid-epoch
        # It fails with a named error rather than hanging (pytest-timeout would catch a hang).
        with pytest.raises(WorkerError, match="Dask"):
            for _ in it:
                pass
    finally:
        pool.close()


def test_dask_needs_exactly_one_target(split):
    with pytest.raises(ValueError, match="address=None is not accepted"):
        DaskWorkerPool(split.stateless)


ORPHAN = r"""
import os, sys, time
from labkit.dataworkers.workloads import image_program
from labkit.dataworkers.extract import extract
from labkit.dataworkers.workers import ProcessWorkerPool
p = image_program("ci", batch_size=8, root=sys.argv[1])
pool = ProcessWorkerPool(extract(p).stateless, workers=2)
it = pool.stream(p.batches(0) * 10)
next(it); next(it)
print(" ".join(map(str, pool.pids().values())), flush=True)
print(pool.slots.prefix, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_killed_trainer_leaves_no_workers_or_shared_memory(dw_root):
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN, dw_root], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        prefix = proc.stdout.readline().strip()
        assert len(pids) == 2 and prefix.startswith("lkdw")
        os.kill(proc.pid, signal.SIGKILL)  # the trainer dies without cleaning up
        proc.wait(10)
        deadline = time.time() + 15
        while time.time() < deadline:
            alive = [p for p in pids if _running(p)]
            shm = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
            if not alive and not shm:
                break
            time.sleep(0.2)
        assert not alive, f"orphaned data workers: {alive}"
        assert not shm, f"leaked shared memory: {shm}"
    finally:
        if proc.poll() is None:
            proc.kill()
