"""The embedded pool: local worker processes that return batches through shared-memory slots."""

from __future__ import annotations

import atexit
import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
import weakref
from multiprocessing.connection import wait
from typing import Any, Callable, Iterable, Iterator

from labkit.core.errors import check_choice, check_range
from labkit.dataworkers.transport import SlotMapper, SlotPool, flatten, pack, packed_size, unflatten, unpack
from labkit.dataworkers.workers.common import MAX_WORKERS, PoolStats, WorkerError, process_cpu_seconds


def _worker_main(wid: int, conn: Any, part: Callable[[list[int]], Any], sched_batch: bool = False) -> None:
    """A data worker's loop: receive (seq, keys, slot, slot_bytes, delay), compute, reply."""
    import torch
    torch.set_num_threads(1)  # one core per worker; the pool's size is the parallelism
    if sched_batch and hasattr(os, "sched_setscheduler"):
        # Linux's class for CPU-bound throughput work: same share of the CPUs as before, but a
        # worker woken by a new request does not preempt the trainer mid-step.
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the notebook stops the trainer, which stops us
    mapper = SlotMapper()
    parent = os.getppid()
    try:
        while True:
            try:
                # Forked siblings hold copies of our pipe's far end, so EOF alone cannot tell us the
                # trainer died; a changed parent pid can (no orphaned workers).
                if not conn.poll(1.0):
                    if os.getppid() != parent:
                        break
                    continue
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg is None:
                break
            seq, keys, slot, slot_bytes, delay = msg
            t0 = time.perf_counter()
            try:
                if delay:
                    time.sleep(delay)
                layout, arrays = flatten(part(keys))
                need = packed_size(arrays)
                if slot is not None and need <= slot_bytes:
                    specs = pack(mapper.buffer(slot), arrays)
                    conn.send(("ok", seq, slot, (layout, specs), time.perf_counter() - t0))
                else:
                    conn.send(("inline", seq, slot, (layout, arrays, need), time.perf_counter() - t0))
            except Exception:  # noqa: BLE001 - the trainer decides; we report the traceback
                conn.send(("err", seq, slot, traceback.format_exc(), time.perf_counter() - t0))
    finally:
        mapper.close()
        with contextlib.suppress(OSError):
            conn.close()


class _Worker:
    def __init__(self, wid: int, proc: Any, conn: Any) -> None:
        self.wid, self.proc, self.conn = wid, proc, conn
        self.inflight: dict[int, tuple[str | None, float]] = {}  # seq -> (slot, issued at)
        self.retiring = False
        self.stop_sent = False
        self.last_reply = time.perf_counter()


_LIVE_POOLS: "weakref.WeakSet[ProcessWorkerPool]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for p in list(_LIVE_POOLS):
        p.close()


class ProcessWorkerPool:
    """Local data worker processes with shared-memory transport and exactly-once, in-order delivery.

    `part` maps a list of sample keys to a batch (a :class:`~labkit.dataworkers.extract.StatelessPart`).
    `depth` batches may be in flight per worker. `respawn` replaces a worker that dies. A batch
    in flight for more than `straggler_factor` times the typical batch time is issued again to
    another worker (the first copy to arrive wins). `batch_timeout` bounds any wait. With
    `sched_batch` (Linux; off by default) workers run in the SCHED_BATCH class: the same CPU weight,
    but a woken worker does not preempt the trainer's step. On the shared 2-core bench machine it
    measured anywhere from slightly better to clearly worse than the default, so it stays opt-in.
    """

    def __init__(self, part: Callable[[list[int]], Any], workers: int = 1, *, max_workers: int | None = None,
                 depth: int = 2, respawn: bool = True, straggler_factor: float = 4.0, batch_timeout: float = 120.0,
                 start_method: str = "fork", sched_batch: bool = False) -> None:
        # max_workers (when given) is checked as passed, before workers is compared with it: 2.5
        # must not become 2, and workers=1000 must be blamed on workers, not on a derived default.
        if max_workers is None:
            check_range("workers", workers, 1, MAX_WORKERS, integer=True)
            self.max_workers = min(MAX_WORKERS, max(int(workers), 2 * (os.cpu_count() or 1)))
        else:
            self.max_workers = int(check_range("max_workers", max_workers, 1, MAX_WORKERS, integer=True))
            check_range("workers", workers, 1, self.max_workers, integer=True)
        check_range("depth", depth, 1, 64, integer=True)
        check_range("straggler_factor", straggler_factor, 1.0, lo_open=True)
        check_range("batch_timeout", batch_timeout, 0, lo_open=True)
        check_choice("start_method", start_method, ("fork", "forkserver", "spawn"))
        self.part, self.depth, self.respawn, self.sched_batch = part, int(depth), bool(respawn), bool(sched_batch)
        self.straggler_factor, self.batch_timeout = float(straggler_factor), float(batch_timeout)
        self._ctx = mp.get_context(start_method)
        self._target = int(workers)
        self._workers: dict[int, _Worker] = {}
        self._next_wid = 0
        self._seq = 0  # next sequence number to hand out, across streams
        self._delay: dict[int, float] = {}
        self._owed_respawns = 0
        self.slots = SlotPool(0, self.max_workers * self.depth + 2)
        self.stats = PoolStats()
        self._ewma_task_s: float | None = None
        self._closed = False  # set by close(): no new work
        self._torn_down = False  # set once close() has stopped every worker and unlinked every slot
        self._lock = threading.Lock()
        self.ready_depth = 0
        self.consumer_alive = False
        _LIVE_POOLS.add(self)
        for _ in range(self._target):
            self._spawn()

    # -- public controls (safe from other threads) ---------------------------------------------
    @property
    def num_workers(self) -> int:
        """Workers running and taking new batches."""
        return sum(1 for w in self._workers.values() if not w.retiring)

    @property
    def target(self) -> int:
        return self._target

    def set_target(self, n: int) -> None:
        """Ask for `n` workers; the consuming thread starts or retires workers to match."""
        check_range("n", n, 1, self.max_workers, integer=True)
        self._target = int(n)
        if not self.consumer_alive:
            self._maintain()

    def pids(self) -> dict[int, int]:
        """Worker id -> process id of every running worker."""
        return {w.wid: w.proc.pid for w in list(self._workers.values()) if w.proc.pid}

    def kill_worker(self, wid: int | None = None) -> int:
        """SIGKILL worker `wid` (default: the active one holding most batches); returns the id killed.

        The default never picks a worker being retired (one that may already have handed back all
        its work, whose death would then count as a retirement, not a crash).
        """
        live = [w for w in list(self._workers.values()) if w.proc.is_alive()]
        if not live:
            raise WorkerError("kill_worker: no live data worker to kill")
        active = [w for w in live if not w.retiring] or live
        w = max(active, key=lambda x: len(x.inflight)) if wid is None else self._workers.get(wid)
        if w is None:
            raise ValueError(f"wid={wid!r} is not accepted; expected one of {', '.join(map(str, self._workers))}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(w.proc.pid, signal.SIGKILL)
        return w.wid

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds (user + system) used so far by each live worker, by process id ({} off Linux)."""
        return {pid: t for pid in self.pids().values() if (t := process_cpu_seconds(pid)) is not None}

    def slow_down(self, wid: int, seconds: float) -> None:
        """Fault injection: make worker `wid` sleep `seconds` before each batch (0 to undo)."""
        check_range("seconds", seconds, 0)
        self._delay[wid] = float(seconds)

    def metrics(self) -> dict:
        """Snapshot for autoscalers and dashboards: workers, queue depth, per-worker throughput."""
        # A copy first: the stream's thread adds a worker's entry on its first reply, while an
        # autoscaler or scheduler thread reads this.
        per = {wid: dict(v) for wid, v in dict(self.stats.per_worker).items()}
        rates = [v["batches"] / v["busy_s"] for v in per.values() if v["busy_s"] > 0]
        return {"workers": self.num_workers, "target": self._target,
                "in_flight": sum(len(w.inflight) for w in list(self._workers.values())),
                "queue_depth": self.ready_depth,
                "per_worker_batches_per_s": (sum(rates) / len(rates)) if rates else 0.0,
                **self.stats.as_dict()}

    # -- the stream -----------------------------------------------------------------------------
    def stream(self, batches: Iterable[list[int]], on_batch: Callable[[], None] | None = None) -> Iterator[Any]:
        """Yield the batch of each key list in `batches`, in order, exactly once.

        `on_batch` is called before each delivery (the autoscaler hooks in here).
        """
        if self._closed:
            raise WorkerError("the pool is closed; create a new ProcessWorkerPool")
        it = iter(batches)
        base = self._seq
        keys: dict[int, list[int]] = {}
        todo: collections.deque[int] = collections.deque()
        ready: dict[int, Any] = {}
        st = {"next": base, "end": None, "issued_fresh": base}
        speculated: set[int] = set()
        self.consumer_alive = True

        def fresh() -> int | None:
            if st["end"] is not None:
                return None
            # Never run further ahead than there are slots: results must have somewhere to land.
            if st["issued_fresh"] - st["next"] >= max(self.slots.max_slots, 1):
                return None
            try:
                k = next(it)
            except StopIteration:
                st["end"] = st["issued_fresh"]
                return None
            seq = st["issued_fresh"]
            st["issued_fresh"] += 1
            self._seq = max(self._seq, st["issued_fresh"])
            keys[seq] = list(k)
            return seq

        def issue() -> None:
            for w in sorted(self._workers.values(), key=lambda x: len(x.inflight)):
                while not w.retiring and len(w.inflight) < self.depth and w.proc.is_alive():
                    if self.slots.slot_bytes == 0 and any(x.inflight for x in self._workers.values()):
                        return  # first batch still sizing the slots
                    seq = todo.popleft() if todo else fresh()
                    if seq is None:
                        return
                    if not self._send(w, seq, keys[seq]):
                        todo.appendleft(seq)
                        return

        def on_message(w: _Worker, msg: tuple) -> None:
            kind, seq, slot, payload, dt = msg
            w.inflight.pop(seq, None)
            w.last_reply = time.perf_counter()
            pw = self.stats.per_worker.setdefault(w.wid, {"batches": 0, "busy_s": 0.0})
            pw["batches"] += 1
            pw["busy_s"] += dt
            self._ewma_task_s = dt if self._ewma_task_s is None else 0.9 * self._ewma_task_s + 0.1 * dt
            if kind == "err":
                if slot is not None:
                    self.slots.release(slot)
                if seq in keys:
                    k = keys[seq]
                    last = payload.strip().splitlines()[-1]
                    err = WorkerError(f"data worker {w.wid} failed on batch {seq - base} (keys {k[:4]}"
                                      f"{'...' if len(k) > 4 else ''}): {last}")
                    # The message stays one line; the worker's traceback is shown under it as a note.
                    err.add_note(f"the data worker's traceback:\n{payload.rstrip()}")
                    raise err
                return
            dup = seq < st["next"] or seq in ready or seq not in keys
            if kind == "ok":
                layout, specs = payload
                if not dup:
                    batch = unflatten(layout, unpack(self.slots.buffer(slot), specs))
                self.slots.release(slot)
            else:
                layout, arrays, need = payload
                if slot is not None:
                    self.slots.release(slot)
                self.stats.inline += 1
                self.slots.grow(need)
                batch = unflatten(layout, arrays) if not dup else None
            if dup and seq < base:
                self.stats.stale_dropped += 1  # left over from a stream the trainer closed early
            elif dup:
                self.stats.duplicates_dropped += 1
            else:
                ready[seq] = batch

        def poll(timeout: float) -> bool:
            conns = {w.conn: w for w in self._workers.values()}
            sentinels = {w.proc.sentinel: w for w in self._workers.values()}
            if not conns:
                time.sleep(min(timeout, 0.01))
                return False
            got = False
            for r in wait(list(conns) + list(sentinels), timeout):
                w = conns.get(r)
                if w is not None:
                    try:
                        while w.conn.poll():
                            on_message(w, w.conn.recv())
                            got = True
                    except (EOFError, OSError, ConnectionError):
                        pass  # the sentinel reports the death below
            for w in list(self._workers.values()):
                if not w.proc.is_alive():
                    # Drain what it sent before dying; anything it held goes back in the queue.
                    with contextlib.suppress(EOFError, OSError, ConnectionError):
                        while w.conn.poll():
                            on_message(w, w.conn.recv())
                            got = True
                    self._bury(w, todo, ready, st["next"], keys)
            return got

        def stragglers() -> None:
            head = st["next"]
            if head in ready or head in speculated or self._ewma_task_s is None:
                return
            holder = next((w for w in self._workers.values() if head in w.inflight), None)
            if holder is None:
                return
            # Judge the worker, not the batch: a batch queued behind others on a healthy worker is
            # old but not late; a worker that has not replied for several batch times is slow.
            silent = time.perf_counter() - max(holder.last_reply, holder.inflight[head][1])
            if silent < max(0.05, self.straggler_factor * self._ewma_task_s):
                return
            others = [w for w in self._workers.values() if w is not holder and not w.retiring
                      and w.proc.is_alive() and len(w.inflight) <= self.depth]
            if others and self._send(min(others, key=lambda x: len(x.inflight)), head, keys[head]):
                speculated.add(head)
                self.stats.speculative += 1

        try:
            last_progress = time.perf_counter()
            while st["end"] is None or st["next"] < st["end"]:
                self._maintain()
                issue()
                poll(0)
                self.ready_depth = len(ready)
                if st["next"] in ready:
                    if on_batch is not None:
                        on_batch()
                    batch = ready.pop(st["next"])
                    keys.pop(st["next"], None)
                    st["next"] += 1
                    self.stats.delivered += 1
                    last_progress = time.perf_counter()
                    yield batch
                    continue
                if st["end"] is not None and st["next"] >= st["end"]:
                    break
                if poll(0.05):
                    last_progress = time.perf_counter()
                stragglers()
                if not any(w.proc.is_alive() for w in self._workers.values()) and not self.respawn:
                    raise WorkerError(f"every data worker has died ({self.stats.worker_deaths} deaths) and "
                                      "respawn=False; batches cannot be produced")
                if time.perf_counter() - last_progress > self.batch_timeout:
                    raise WorkerError(f"no batch from any data worker for {self.batch_timeout:.0f} s "
                                      f"(waiting for batch {st['next'] - base}; {self.num_workers} workers alive)")
        finally:
            self.consumer_alive = False
            self.ready_depth = 0

    # -- internals --------------------------------------------------------------------------------
    def _send(self, w: _Worker, seq: int, k: list[int]) -> bool:
        slot = None
        if self.slots.slot_bytes:
            slot = self.slots.acquire()
            if slot is None:
                return False
        try:
            w.conn.send((seq, k, slot, self.slots.slot_bytes, self._delay.get(w.wid, 0.0)))
        except (OSError, BrokenPipeError):
            if slot is not None:
                self.slots.release(slot)
            return False
        w.inflight[seq] = (slot, time.perf_counter())
        return True

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        wid = self._next_wid
        self._next_wid += 1
        proc = self._ctx.Process(target=_worker_main, args=(wid, child, self.part, self.sched_batch), daemon=True,
                                 name=f"labkit-dataworker-{wid}")
        proc.start()
        child.close()
        w = _Worker(wid, proc, parent)
        self._workers[wid] = w
        self.stats.spawned += 1
        return w

    def _bury(self, w: _Worker, todo: collections.deque, ready: dict, next_seq: int, keys: dict) -> None:
        """Forget dead worker `w`; re-issue the batches it held that are still owed."""
        self._workers.pop(w.wid, None)
        with contextlib.suppress(OSError):
            w.conn.close()
        w.proc.join(timeout=0.1)
        owed = sorted(s for s in w.inflight if s >= next_seq and s not in ready and s in keys)
        for slot, _ in w.inflight.values():
            if slot is not None:
                self.slots.release(slot)
        if w.retiring and not w.inflight:
            self.stats.retired += 1
            return
        self.stats.worker_deaths += 1
        self.stats.reissued += len(owed)
        if self.respawn and not w.retiring:
            self._owed_respawns += 1
        for s in reversed(owed):
            todo.appendleft(s)

    def _maintain(self) -> None:
        """Start or retire workers to meet the target; stop retired workers once they are idle."""
        with self._lock:
            if self._closed:
                return
            active = [w for w in self._workers.values() if not w.retiring]
            alive_active = [w for w in active if w.proc.is_alive()]
            if not self.respawn and self.stats.worker_deaths:
                return  # with respawn off, the dead stay dead (the stream reports it)
            # A worker that died but is not yet buried still counts: the stream buries it (re-issuing
            # its batches, counting the death) and only then may it be replaced, if respawn allows.
            for _ in range(self._target - len(active)):
                if len(self._workers) >= self.max_workers + 4:
                    break
                self._spawn()
                if self._owed_respawns:
                    self._owed_respawns -= 1
                    self.stats.respawned += 1
            if len(alive_active) > self._target:
                for w in sorted(alive_active, key=lambda x: len(x.inflight))[:len(alive_active) - self._target]:
                    w.retiring = True
            for w in list(self._workers.values()):
                if w.retiring and not w.inflight and not w.stop_sent and w.proc.is_alive():
                    w.stop_sent = True
                    with contextlib.suppress(OSError, BrokenPipeError):
                        w.conn.send(None)

    def close(self, timeout: float = 2.0) -> None:
        """Stop every worker (politely, then SIGKILL) and unlink every slot. Idempotent.

        The pool takes no new work from the first call on; it counts as closed only once the
        teardown has finished, so a close interrupted part way (Ctrl-C during the joins, say) is
        finished by the next call (yours, ``__del__`` or the one at exit).
        """
        # The lock is held throughout: _maintain cannot spawn meanwhile, and a second close()
        # waits for this one, then returns or (if this one failed) finishes the job.
        with self._lock:
            if self._torn_down:
                return
            self._closed = True  # no stream, no spawning from here on
            for w in list(self._workers.values()):
                with contextlib.suppress(OSError, BrokenPipeError):
                    w.conn.send(None)
            deadline = time.perf_counter() + timeout
            for w in list(self._workers.values()):
                w.proc.join(max(0.0, deadline - time.perf_counter()))
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(1.0)
                with contextlib.suppress(OSError):
                    w.conn.close()
                self._workers.pop(w.wid, None)
            self.slots.close()
            _LIVE_POOLS.discard(self)
            self._torn_down = True

    def __enter__(self) -> "ProcessWorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
