"""Data worker pools: exactly-once in-order delivery, crashes, stragglers, early stop, cleanup."""

from __future__ import annotations

import os
import time

import pytest
import torch

from labkit.dataworkers.extract import extract
from labkit.dataworkers.workers import DaskWorkerPool, ProcessWorkerPool, WorkerError


def same(a, b):
    """Batches `a` and `b` hold the same tensors (and at least one)."""
    return len(a) == len(b) > 0 and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


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
        assert len(got) == len(ref) > 0 and all(same(a, b) for a, b in zip(ref, got, strict=True))
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
        assert len(got) == len(keys) == 4
        assert all(same(a, b) for a, b in zip(reference(split, keys), got, strict=True))
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
    assert len(got) == len(ref) > 0 and all(same(a, b) for a, b in zip(ref, got, strict=True))


def test_slow_worker_is_worked_around(image_prog, split, no_leaks):
    keys = image_prog.batches(0) * 2
    ref = reference(split, keys)
    with ProcessWorkerPool(split.stateless, workers=1, max_workers=2, straggler_factor=3.0) as pool:
        # Worker 0 alone measures the typical batch time (the straggler threshold is a multiple of
        # it) and ends its stream holding nothing; then a second worker joins.
        assert len(list(pool.stream(keys[:4]))) == 4 and pool.stats.speculative == 0
        before = pool.stats.per_worker[0]["batches"]
        pool.set_target(2)
        # Worker 0 now stalls far longer than any batch takes (it is first in line, so it holds the
        # stream's first batch). Every batch it holds must be issued again to worker 1; it never
        # replies during the stream, so its stall never enters the typical batch time.
        pool.slow_down(0, 600.0)
        got = list(pool.stream(keys))
        assert pool.stats.speculative >= 1
        assert pool.stats.per_worker[0]["batches"] == before  # every batch came from worker 1
        pool.kill_worker(0)  # rather than have close() wait for its sleep
    assert len(got) == len(ref) > 0 and all(same(a, b) for a, b in zip(ref, got, strict=True))


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
    try:
        it = pool.stream(image_prog.batches(0) * 5)
        next(it)
        next(it)
        it.close()  # the trainer stops early
        # The pool is still usable, and late results of the abandoned stream are dropped: the new
        # stream yields exactly its own batches, in order (no_leaks checks the processes went away).
        keys = image_prog.batches(0)[3:6]
        got = list(pool.stream(keys))
        assert len(got) == 3 and all(same(a, b) for a, b in zip(reference(split, keys), got, strict=True))
    finally:
        pool.close()
    assert pool.num_workers == 0


def test_close_interrupted_part_way_is_finished_by_the_next_close(image_prog, split, no_leaks):
    from labkit.dataworkers.workers import process_pool as workers
    from labkit.dataworkers.transport import slots_of
    pool = ProcessWorkerPool(split.stateless, workers=2)
    try:
        assert len(list(pool.stream(image_prog.batches(0)[:3]))) == 3
        assert slots_of(os.getpid())  # the shared-memory slots exist now
        proc = next(iter(pool._workers.values())).proc
        join = proc.join

        def interrupted(*a, **k):
            proc.join = join
            raise KeyboardInterrupt  # Ctrl-C while close() waits for the workers

        proc.join = interrupted
        with pytest.raises(KeyboardInterrupt):
            pool.close()
        assert pool in workers._LIVE_POOLS  # not closed yet: the atexit hook would still finish it
        with pytest.raises(WorkerError, match="the pool is closed"):
            next(pool.stream(image_prog.batches(0)))  # but it takes no new work
    finally:
        pool.close()  # finishes the teardown (no_leaks checks processes and shared memory)
    assert not pool.pids() and not slots_of(os.getpid()) and pool not in workers._LIVE_POOLS


def test_all_workers_dead_without_respawn_is_an_error(image_prog, split, no_leaks):
    with ProcessWorkerPool(split.stateless, workers=1, respawn=False, batch_timeout=20) as pool:
        with pytest.raises(WorkerError, match="every data worker has died"):
            for i, _ in enumerate(pool.stream(image_prog.batches(0) * 4)):
                if i == 1:
                    # Wait for the death, so the pool sees the dead process before it buries it
                    # (the order in which a replacement used to slip past respawn=False).
                    pool._workers[pool.kill_worker()].proc.join(10)
    assert pool.stats.spawned == 1 and pool.stats.worker_deaths == 1


def test_a_dead_worker_is_replaced_once_buried_and_counted(image_prog, split, no_leaks):
    keys = image_prog.batches(0) * 2
    ref = reference(split, keys)
    with ProcessWorkerPool(split.stateless, workers=1, respawn=True) as pool:
        got = []
        for i, b in enumerate(pool.stream(keys)):
            if i == 1:
                pool._workers[pool.kill_worker()].proc.join(10)
                pool._maintain()  # not yet buried: no replacement before the death is counted
                assert pool.stats.spawned == 1
            got.append(b)
        assert all(same(a, b) for a, b in zip(ref, got, strict=True))
        assert (pool.stats.spawned, pool.stats.worker_deaths, pool.stats.respawned) == (2, 1, 1)


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
        first = list(pool.stream(keys))
        assert len(first) == len(ref) > 0 and all(same(a, b) for a, b in zip(ref, first, strict=True))
        got = []
        for i, b in enumerate(pool.stream(keys * 3)):
            if i == 2:
                pool.kill_worker()  # Dask recomputes what it held; we still get each batch once
            got.append(b)
        assert len(got) == 3 * len(ref) and all(same(a, b) for a, b in zip(ref * 3, got, strict=True))
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


def _new_children(before, wait_s=10.0):
    """Child processes of this one not in `before`, after giving exiting ones `wait_s` to go.

    multiprocessing's resource tracker is not counted: it lives as long as this process.
    """
    import psutil

    def tracker(p):
        try:
            return any("resource_tracker" in a for a in p.cmdline())
        except psutil.Error:
            return False

    kids = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and not tracker(p)]
    _, alive = psutil.wait_procs(kids, timeout=wait_s)
    return alive


def test_dask_local_with_bad_arguments_starts_no_cluster(split):
    import psutil
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match="window=0 is not accepted"):
        DaskWorkerPool.local(split.stateless, workers=1, window=0)
    with pytest.raises(ValueError, match="batch_timeout=0 is not accepted"):
        DaskWorkerPool.local(split.stateless, workers=1, batch_timeout=0)
    assert not _new_children(before, wait_s=0)


@pytest.mark.dask
@pytest.mark.slow
def test_dask_pool_that_fails_to_start_closes_what_it_opened(split, monkeypatch):
    import psutil
    from distributed import Client, LocalCluster
    opened = []

    def refuse(self, plugin, name=None):
        opened.append(self)
        raise RuntimeError("plugin refused")

    monkeypatch.setattr(Client, "register_plugin", refuse)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="plugin refused"):
        DaskWorkerPool.local(split.stateless, workers=1)
    assert opened[-1].status == "closed" and not _new_children(before)
    # A pool on a scheduler address closes the client it opened (the cluster is not its own).
    cluster = LocalCluster(host="127.0.0.1", n_workers=0, dashboard_address=None)  # a scheduler, no workers
    try:
        with pytest.raises(RuntimeError, match="plugin refused"):
            DaskWorkerPool(split.stateless, address=cluster.scheduler_address)
        assert len(opened) == 2 and opened[-1].status == "closed"
    finally:
        cluster.close()


def test_dask_pool_close_closes_its_cluster_even_if_closing_the_client_fails():
    class Fake:
        def __init__(self, exc=None):
            self.exc, self.closed = exc, False

        def close(self, timeout=None):
            self.closed = True
            if self.exc is not None:
                raise self.exc

    pool = DaskWorkerPool.__new__(DaskWorkerPool)  # just the parts close() uses
    pool.client, pool._cluster, pool._own_client = Fake(KeyboardInterrupt()), Fake(), False
    cluster = pool._cluster
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    assert pool.client.closed and cluster.closed and pool._cluster is None


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
        deadline = time.time() + 60  # a loaded machine may be slow to reap; the loop leaves when clean
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


def test_kill_worker_never_picks_a_worker_being_retired(split, no_leaks):
    with ProcessWorkerPool(split.stateless, workers=2, max_workers=2) as pool:
        pool.set_target(1)  # one of the two is now retiring
        retiring = {w.wid for w in pool._workers.values() if w.retiring}
        assert len(retiring) == 1
        assert pool.kill_worker() not in retiring
