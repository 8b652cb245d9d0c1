"""A Dask LocalCluster only the process that started it can use: 127.0.0.1, mutual TLS, no HTTP.

A plain ``LocalCluster`` accepts work from any local user: its scheduler and workers listen on
TCP ports of 127.0.0.1 with no authentication, so another process can ``Client(address)`` and
run code in a worker; and even with ``dashboard_address=None`` the scheduler serves HTTP on
127.0.0.1:8787 (``dashboard_address`` only drops the Bokeh pages, not the server behind them,
which still answers /info, /json, /metrics, /health and a proxy), and every worker serves one
on a random port.

:func:`secure_local_cluster` starts one that

- binds the scheduler, the nannies and the workers to 127.0.0.1;
- speaks TLS only (``require_encryption``) with a key and self-signed certificate made for this
  run and held in memory (``distributed.security.Security.temporary``, which needs the
  ``cryptography`` package): a peer must present that certificate, so a process without it
  cannot connect, let alone submit a task;
- starts no HTTP server at all, in the scheduler or the workers, unless `dashboard` is asked for
  (then the scheduler's, bound to 127.0.0.1 on a free port).

:func:`secure_client` connects a Client to it with the cluster's credentials.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from distributed import Nanny, Scheduler, Worker

from labkit.core.errors import LabkitError, check_range


def _no_http_server(self, routes, dashboard_address, default_port=0, ssl_options=None) -> None:
    """Stand in for ``ServerNode.start_http_server``: set the attributes its callers read, bind no socket."""
    from distributed.http.routing import RoutingApplication
    from tornado.httpserver import HTTPServer

    self.http_application = RoutingApplication([])
    self.http_server = HTTPServer(self.http_application)  # never listens; stop() on close is a no-op


class QuietScheduler(Scheduler):
    """A Scheduler that serves no HTTP (no dashboard, no /info, /json, /metrics, proxy)."""

    start_http_server = _no_http_server


class QuietWorker(Worker):
    """A Worker that serves no HTTP."""

    start_http_server = _no_http_server


class QuietNanny(Nanny):
    """A Nanny whose worker process runs a :class:`QuietWorker`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("worker_class", QuietWorker)
        super().__init__(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _cluster_class(base: type) -> type:
    """`base` (distributed's LocalCluster) with its scheduler swapped for the quiet one before it starts."""

    class SecureLocalCluster(base):
        """A LocalCluster whose scheduler serves no HTTP unless a dashboard was asked for."""

        def __init__(self, *args: Any, labkit_dashboard: bool = False, **kwargs: Any) -> None:
            self._labkit_dashboard = labkit_dashboard  # read by _start, which the constructor runs
            super().__init__(*args, **kwargs)

        async def _start(self) -> None:
            if not self._labkit_dashboard and self.scheduler is None and self.scheduler_spec:
                self.scheduler_spec = {**self.scheduler_spec, "cls": QuietScheduler}
            await super()._start()

    return SecureLocalCluster


def temporary_security():
    """Return a ``distributed.security.Security`` with a key and certificate made for this run (TLS required)."""
    from distributed.security import Security
    try:
        return Security.temporary()  # require_encryption=True is part of it
    except ImportError:
        raise LabkitError("a secured Dask cluster needs the 'cryptography' package: pip install cryptography "
                          "(it is in labkit's dependencies)") from None


def secure_local_cluster(n_workers: int, *, dashboard: bool = False, silence_logs: int = logging.WARN,
                         **kwargs: Any):
    """Return a started LocalCluster of `n_workers` single-thread processes only this process can use.

    Bound to 127.0.0.1, TLS with per-run credentials (``cluster.security``), no HTTP server
    unless `dashboard` (then the scheduler's dashboard on 127.0.0.1, a free port). `kwargs` go to
    LocalCluster (e.g. ``memory_limit``); the address, protocol, security and dashboard settings
    are this helper's and cannot be overridden.
    """
    import dask.distributed  # LocalCluster is looked up at call time, where a caller may stand in for it

    check_range("n_workers", n_workers, 0, 256, integer=True)
    for key in ("host", "ip", "protocol", "security", "dashboard_address", "worker_dashboard_address",
                "worker_class", "scheduler_port"):
        if key in kwargs:
            raise LabkitError(f"{key}={kwargs[key]!r} is not accepted by secure_local_cluster; it binds 127.0.0.1 "
                              "with TLS itself (pass dashboard=True for a dashboard)")
    cls = _cluster_class(dask.distributed.LocalCluster)
    return cls(labkit_dashboard=bool(dashboard), security=temporary_security(), host="127.0.0.1", protocol="tls://", n_workers=int(n_workers),
               threads_per_worker=1, processes=True,
               dashboard_address="127.0.0.1:0" if dashboard else None,
               worker_class=QuietNanny, silence_logs=silence_logs, **kwargs)


def secure_client(cluster, **kwargs: Any):
    """Return a ``distributed.Client`` on `cluster` with its credentials (`kwargs` go to Client)."""
    import dask.distributed

    kwargs.setdefault("security", getattr(cluster, "security", None))
    return dask.distributed.Client(cluster, **kwargs)
