"""The shared Dask cluster helper: only its own client can connect, and it serves no HTTP."""

from __future__ import annotations

import operator
import os
import time

import pytest

pytestmark = pytest.mark.dask


def _listening(pids) -> set[tuple[str, int]]:
    import psutil
    out = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections("inet")
        except psutil.NoSuchProcess:
            continue
        out |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return out


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_dask_cluster_accepts_no_other_client_and_serves_no_dashboard():
    """Reproduction: a second process could Client(address).submit(...) into a bench's cluster, and a
    dashboard served on 127.0.0.1:8787 although dashboard_address=None."""
    import psutil
    from distributed import Client
    from distributed.security import Security

    from labkit.core.dask_cluster import secure_client, secure_local_cluster

    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    worker_pids: list[int] = []
    before_listen = _listening([me.pid])
    cluster = secure_local_cluster(1)
    try:
        client = secure_client(cluster, set_as_default=False)
        try:
            assert client.submit(operator.add, 1, 2, pure=False).result(timeout=60) == 3  # its own client computes
            addr = cluster.scheduler_address
            assert addr.startswith("tls://127.0.0.1:")
            clients_before = set(cluster.scheduler.clients)
            # A plain client, one with credentials of its own, and one over plain TCP: none gets in.
            for address, kw in ((addr, {}), (addr, {"security": Security.temporary()}),
                                (addr.replace("tls://", "tcp://"), {})):
                t0 = time.perf_counter()
                with pytest.raises((OSError, TypeError, TimeoutError)):
                    outsider = Client(address, timeout="3s", set_as_default=False, **kw)
                    outsider.close()
                assert time.perf_counter() - t0 < 30
            assert set(cluster.scheduler.clients) == clients_before  # nobody else registered
            assert all(ts.key.startswith("add-") for ts in cluster.scheduler.tasks.values())  # no task of theirs

            # Listening sockets of the cluster's processes: its comm ports on 127.0.0.1, nothing else.
            workers = client.scheduler_info(n_workers=-1)["workers"]
            comm = {_port(addr)} | {_port(w) for w in workers} | {_port(w["nanny"]) for w in workers.values()}
            worker_pids = list(client.run(os.getpid).values())
            pids = [me.pid] + [p.pid for p in me.children(recursive=True) if p.pid not in before_children]
            assert set(worker_pids) <= set(pids)
            listening = _listening(pids) - before_listen
            assert {ip for ip, _ in listening} == {"127.0.0.1"}
            assert {port for _, port in listening} == comm, listening
            assert 8787 not in {port for _, port in listening}
        finally:
            client.close()
    finally:
        cluster.close()
    assert cluster.status.name == "closed"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in worker_pids):
        time.sleep(0.1)
    assert not [p for p in worker_pids if psutil.pid_exists(p)]  # the worker processes are gone


def test_secure_local_cluster_refuses_settings_that_would_undo_it():
    from labkit.core.dask_cluster import secure_local_cluster
    from labkit.core.errors import LabkitError

    for key, value in (("host", "0.0.0.0"), ("security", None), ("dashboard_address", ":8787"),
                       ("protocol", "tcp://")):
        with pytest.raises(LabkitError, match=rf"^{key}=.* is not accepted by secure_local_cluster"):
            secure_local_cluster(1, **{key: value})
    with pytest.raises(LabkitError, match=r"n_workers=-1 is not accepted"):
        secure_local_cluster(-1)
