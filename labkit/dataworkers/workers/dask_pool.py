"""The same stateless part run on Dask distributed workers, delivered exactly once and in order."""

from __future__ import annotations

import collections
import contextlib
import os
from typing import Any, Callable, Iterable, Iterator

from labkit.core.errors import check_range
from labkit.dataworkers.workers.common import PoolStats, WorkerError


class DaskWorkerPool:
    """The same stateless part on Dask distributed workers (scale-out backend).

    Pass a scheduler `address` ("tcp://host:port") or a `client`; :meth:`local` starts a
    LocalCluster on 127.0.0.1 that the pool owns and closes (TLS with per-run credentials, no HTTP
    server: :func:`labkit.core.dask_cluster.secure_local_cluster`). Batches come back through Dask
    (pickled); order and exactly-once delivery come from one future per sequence number; Dask
    itself recomputes tasks lost with a worker.
    """

    def __init__(self, part: Callable[[list[int]], Any], address: str | None = None, *, client: Any = None,
                 window: int = 8, batch_timeout: float = 60.0, _cluster: Any = None) -> None:
        from distributed import Client

        check_range("window", window, 1, 1024, integer=True)
        check_range("batch_timeout", batch_timeout, 0, lo_open=True)
        if (address is None) == (client is None):
            raise ValueError(f"address={address!r} is not accepted with client={client!r}; expected exactly one "
                             "of a scheduler address or a distributed.Client")
        self._cluster = _cluster
        self._own_client = client is None
        if client is None:
            try:
                client = Client(address, timeout="10s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise WorkerError(f"address={address!r}: cannot reach the Dask scheduler ({exc})") from None
        self.client, self.window, self.batch_timeout = client, int(window), float(batch_timeout)
        try:
            self.address = client.scheduler.address
            # A worker plugin rather than scattered data: a worker that restarts or joins gets the
            # part too, and losing every holder of a scattered object would lose the job.
            self._name = f"labkit-dw-{os.getpid()}-{id(self):x}"
            from labkit.dataworkers.dask_plugin import PartPlugin
            plugin = PartPlugin(self._name, part)
            register = getattr(client, "register_plugin", None) or client.register_worker_plugin
            register(plugin, name=self._name)
        except BaseException:
            # No pool comes back to close: a client we opened is closed here (a cluster we were
            # given is closed by whoever started it, e.g. local()).
            if self._own_client:
                with contextlib.suppress(Exception):
                    client.close(timeout=5)
            raise
        self.stats = PoolStats()
        self._seq = 0

    @classmethod
    def local(cls, part: Callable[[list[int]], Any], workers: int = 2, **kw: Any) -> "DaskWorkerPool":
        """Start a LocalCluster of `workers` single-threaded processes on 127.0.0.1 and a pool on it."""
        from labkit.core.dask_cluster import secure_client, secure_local_cluster

        check_range("workers", workers, 1, 64, integer=True)
        # The pool's own checks, before any process starts (a bad value must not leave a cluster).
        check_range("window", kw.get("window", 8), 1, 1024, integer=True)
        check_range("batch_timeout", kw.get("batch_timeout", 60.0), 0, lo_open=True)
        # TLS with this run's credentials and no HTTP server: no other local process can submit work.
        cluster = secure_local_cluster(int(workers), silence_logs=40)
        client = None
        try:
            client = secure_client(cluster, set_as_default=False)
            return cls(part, client=client, _cluster=cluster, **kw)
        except BaseException:
            try:
                if client is not None:
                    with contextlib.suppress(Exception):
                        client.close(timeout=5)
            finally:
                with contextlib.suppress(Exception):
                    cluster.close(timeout=10)
            raise

    @property
    def num_workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"]) if self.client.status == "running" else 0

    def set_target(self, n: int) -> None:
        """Scale the owned LocalCluster to `n` workers (a remote cluster is scaled by its operator)."""
        check_range("n", n, 1, 256, integer=True)
        if self._cluster is None:
            raise WorkerError("set_target: this pool uses a remote Dask cluster; scale it where it runs")
        self._cluster.scale(n)

    def metrics(self) -> dict:
        return {"workers": self.num_workers, **self.stats.as_dict()}

    def stream(self, batches: Iterable[list[int]], on_batch: Callable[[], None] | None = None) -> Iterator[Any]:
        """Yield each batch in order, exactly once; a lost scheduler raises WorkerError."""
        from distributed import TimeoutError as DaskTimeout

        it = iter(batches)
        futures: collections.OrderedDict[int, Any] = collections.OrderedDict()
        done = False
        try:
            while True:
                while not done and len(futures) < self.window:
                    try:
                        k = next(it)
                    except StopIteration:
                        done = True
                        break
                    seq = self._seq
                    self._seq += 1
                    futures[seq] = self._submit(seq, list(k))
                if not futures:
                    return
                seq, fut = futures.popitem(last=False)
                try:
                    batch = fut.result(timeout=self.batch_timeout)
                except (DaskTimeout, TimeoutError):
                    raise WorkerError(f"batch {seq} took more than batch_timeout={self.batch_timeout:.0f} s on Dask "
                                      f"({self.client.status}, scheduler {self.address})") from None
                except (OSError, ConnectionError) as exc:
                    raise WorkerError(f"the Dask scheduler at {self.address} went away while batch {seq} was in "
                                      f"flight: {type(exc).__name__}: {exc}") from None
                except Exception as exc:  # noqa: BLE001
                    if self.client.status not in ("running", "connecting"):
                        raise WorkerError(f"the Dask scheduler at {self.address} went away while batch {seq} was "
                                          f"in flight ({type(exc).__name__})") from None
                    if type(exc).__name__ in ("CancelledError", "FutureCancelledError", "CommClosedError"):
                        raise WorkerError(f"the Dask scheduler at {self.address} went away while batch {seq} "
                                          f"was in flight ({type(exc).__name__}: {exc})") from None
                    first = (str(exc).splitlines() or [""])[0]
                    raise WorkerError(f"Dask data worker failed on batch {seq}: {type(exc).__name__}: {first}") from exc
                if on_batch is not None:
                    on_batch()
                self.stats.delivered += 1
                yield batch
        finally:
            for f in futures.values():
                with contextlib.suppress(Exception):
                    f.cancel()

    def _submit(self, seq: int, keys: list[int]) -> Any:
        if self.client.status != "running":
            raise WorkerError(f"the Dask scheduler at {self.address} went away (client {self.client.status})")
        try:
            from labkit.dataworkers.dask_plugin import run_part
            return self.client.submit(run_part, self._name, keys, pure=False, key=f"{self._name}-batch-{seq}")
        except (OSError, ConnectionError) as exc:
            raise WorkerError(f"the Dask scheduler at {self.address} went away: {exc}") from None

    def kill_worker(self) -> str:
        """Fault injection: kill one Dask worker process (its nanny restarts it); returns its address."""
        workers = list(self.client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            raise WorkerError("kill_worker: the Dask cluster has no workers")
        with contextlib.suppress(Exception):
            self.client.run(os._exit, 1, workers=[workers[0]], wait=False)
        return workers[0]

    def close(self) -> None:
        """Close the client (and the LocalCluster this pool started). Idempotent."""
        try:
            with contextlib.suppress(Exception):
                if self._own_client or self._cluster is not None:
                    self.client.close(timeout=5)
        finally:
            # Even when closing the client was interrupted: the cluster's processes must go.
            if self._cluster is not None:
                with contextlib.suppress(Exception):
                    self._cluster.close(timeout=10)
                self._cluster = None

    def __enter__(self) -> "DaskWorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
