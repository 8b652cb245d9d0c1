"""Data worker pools: run a program's stateless part and stream its batches to the trainer.

:class:`ProcessWorkerPool` (the embedded default) runs local worker processes that return
batches through shared-memory slots (:mod:`labkit.dataworkers.transport`).
:class:`DaskWorkerPool` runs the same stateless part on Dask distributed workers.

Both deliver exactly once and in order: every batch has a sequence number, results are
re-ordered in the trainer, a result whose number was already delivered (or is already waiting)
is dropped, and the batches a dead worker held are issued again to the others. All changes to
the set of workers happen on the thread that consumes the stream; other threads (a notebook
slider, the autoscaler, a "kill a worker" button) only set a target or send a signal.

Modules: :mod:`.process_pool`, :mod:`.dask_pool`, and :mod:`.common` (what both share); their public
names are importable from here.
"""

from __future__ import annotations

from labkit.dataworkers.workers.common import MAX_WORKERS, PoolStats, WorkerError, process_cpu_seconds
from labkit.dataworkers.workers.dask_pool import DaskWorkerPool
from labkit.dataworkers.workers.process_pool import ProcessWorkerPool

__all__ = ["MAX_WORKERS", "PoolStats", "WorkerError", "process_cpu_seconds", "DaskWorkerPool", "ProcessWorkerPool"]
