"""labkit.core.cluster (issue 31 item 1): hosts as network namespaces behind shaped links.

The shaped tests need root (or CAP_NET_ADMIN) and skip with the reason otherwise. Every wait is
on an event (a line of output, a process ending) with a generous deadline for a loaded machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from labkit.core import cluster as C
from labkit.core.errors import LabkitError

OK, WHY = C.can_shape() if os.environ.get("LABKIT_NO_NETNS", "") in ("", "0") else (False, "LABKIT_NO_NETNS set")
shaped_only = pytest.mark.skipif(not OK, reason=f"no shaped cluster here: {WHY}")

# A receiver that reports (bytes, seconds from its first byte to the sender's close) and a sender
# of N MiB: plain TCP through the kernel, across the two hosts' shaped links and the switch.
RECV = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5001)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print(n, time.monotonic() - t0, flush=True)
"""
SEND = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], 5001)); buf = b"x" * (1 << 20)
for _ in range(int(sys.argv[2])):
    c.sendall(buf)
c.close()
"""


def bulk_rate(cl, src: int, dst: int, mib: int) -> tuple[float, int]:
    """(bits/s, bytes) of one bulk TCP transfer of `mib` MiB from host `src` to host `dst`."""
    r = cl.popen(dst, [sys.executable, "-c", RECV, cl.hosts[dst].addr], stdout=subprocess.PIPE, text=True)
    assert r.stdout.readline().strip() == "ready"
    s = cl.popen(src, [sys.executable, "-c", SEND, cl.hosts[dst].addr, str(mib)])
    assert s.wait(timeout=120) == 0
    n, dt = r.stdout.readline().split()
    assert r.wait(timeout=30) == 0
    assert int(n) == mib << 20
    return int(n) * 8 / float(dt), int(n)


def ours(prefix: str) -> tuple[list[str], list[str]]:
    """(namespaces, root links) whose names start with `prefix`."""
    return ([n for n in C._netns_list() if n.startswith(prefix)],
            [n for n in C._root_links() if n.startswith(prefix)])


def test_parse_and_format_rates():
    assert C.parse_rate("10gbit") == 10**10
    assert C.parse_rate("1gbit") == 10**9
    assert C.parse_rate("200mbit") == 2 * 10**8
    assert C.parse_rate("25gbit") == 25 * 10**9
    assert C.parse_rate("2.5 Gbit/s") == 25 * 10**8
    assert C.parse_rate(10**9) == 10**9
    assert C.fmt_rate(10**10) == "10 Gbit/s"
    assert C.fmt_rate(2 * 10**8) == "200 Mbit/s"
    assert C.fmt_rate(25 * 10**8) == "2.5 Gbit/s"


@pytest.mark.parametrize("kw, arg", [({"n_hosts": 0}, "n_hosts"), ({"n_hosts": 17}, "n_hosts"),
                                     ({"n_hosts": 2.5}, "n_hosts"), ({"n_hosts": 2, "rate": "fast"}, "rate"),
                                     ({"n_hosts": 2, "rate": "10gbps"}, "rate"), ({"n_hosts": 2, "rate": 0}, "rate"),
                                     ({"n_hosts": 2, "rate": True}, "rate")])
def test_bad_input_is_one_line_naming_the_argument(kw, arg):
    with pytest.raises(LabkitError) as e:
        C.start_cluster(**kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{arg}=") and "expected" in msg


def test_loopback_fallback_says_why(monkeypatch):
    monkeypatch.setenv("LABKIT_NO_NETNS", "1")
    assert C.can_shape() == (False, "LABKIT_NO_NETNS is set")
    before = C._netns_list()
    with C.start_cluster(3, "1gbit") as cl:
        assert not cl.shaped and "LABKIT_NO_NETNS" in cl.reason
        assert [h.addr for h in cl.hosts] == ["127.0.0.1"] * 3 and cl.client_addr == "127.0.0.1"
        assert all(h.netns is None for h in cl.hosts) and cl.rate_bit_s == 10**9
        assert cl.link_bytes() == {}
        p = cl.popen(1, [sys.executable, "-c", "print('hi')"], stdout=subprocess.PIPE, text=True)
        assert p.communicate(timeout=60)[0] == "hi\n"
        with pytest.raises(LabkitError, match=r"^host_index=3 is not accepted"):
            cl.popen(3, ["true"])
        with pytest.raises(LabkitError, match=r"^argv="):
            cl.popen(0, "true")
    assert cl.closed and C._netns_list() == before
    with pytest.raises(LabkitError) as e:
        C.start_cluster(2, fallback=False)
    assert "\n" not in str(e.value) and "LABKIT_NO_NETNS" in str(e.value)


@shaped_only
def test_four_hosts_shaped_rate_and_nothing_left_behind():
    cl = C.start_cluster(4, "1gbit")
    prefix = cl.prefix
    try:
        assert cl.shaped and cl.reason == "" and len(cl.hosts) == 4
        assert len({h.addr for h in cl.hosts} | {cl.client_addr}) == 5
        nss, links = ours(prefix)
        assert sorted(nss) == sorted([h.netns for h in cl.hosts] + [cl.switch_netns]) and links == [prefix]
        rates = {}
        before = cl.link_bytes()
        rates["1gbit"], sent = bulk_rate(cl, 0, 2, 40)
        after = cl.link_bytes()
        # the sender's link carried the payload out, the receiver's carried it in
        assert after["h0"][0] - before["h0"][0] >= sent and after["h2"][1] - before["h2"][1] >= sent
        assert after["h1"][0] - before["h1"][0] < sent // 100  # a bystander's link stays quiet
        cl.set_rate("200mbit")
        assert cl.rate_bit_s == 2 * 10**8
        rates["200mbit"], _ = bulk_rate(cl, 3, 1, 10)
        for rate, got in rates.items():
            want = C.parse_rate(rate)
            assert 0.8 * want <= got <= 1.2 * want, f"{rate}: measured {C.fmt_rate(got)}"
        sleeper = cl.popen(3, [sys.executable, "-c", "import time; time.sleep(600)"])
    finally:
        cl.close()
    cl.close()  # twice is fine
    assert ours(prefix) == ([], [])
    assert sleeper.poll() is not None and all(p.poll() is not None for p in cl._procs)
    with pytest.raises(LabkitError, match="closed"):
        cl.popen(0, ["true"])


def _where_am_i(client_addr):
    """Run in a Dask task: the worker's address and the source address this host reaches the client from."""
    import socket

    from distributed import get_worker
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((client_addr, 9))
        return get_worker().address, s.getsockname()[0]


@shaped_only
@pytest.mark.dask
def test_dask_workers_sit_on_their_hosts():
    with C.start_cluster(2, "1gbit") as cl:
        client = cl.dask_client()
        assert client.scheduler.address.startswith(f"tls://{cl.client_addr}:")
        assert client.direct_to_workers  # actor calls and gathers cross the host's link, not the scheduler
        placed = cl.workers_by_host(client)
        assert sorted(placed) == [0, 1] and all(len(v) == 1 for v in placed.values())
        for i, (addr,) in placed.items():
            w, src = client.submit(_where_am_i, cl.client_addr, workers=[addr], allow_other_workers=False,
                                   pure=False).result(timeout=120)
            assert w == addr and w.split("://")[1].rsplit(":", 1)[0] == cl.hosts[i].addr
            assert src == cl.hosts[i].addr  # the task runs inside host i's namespace
        procs = list(cl._procs)
    assert all(p.poll() is not None for p in procs) and ours(cl.prefix) == ([], [])


CHILD = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, even if our parent ignores SIGINT
from labkit.core.cluster import start_cluster
cl = start_cluster(2, "1gbit")
p = cl.popen(1, [sys.executable, "-c", "import time; time.sleep(600)"])
client = cl.dask_client()  # Dask workers in the namespaces, the scheduler in this process
print(cl.prefix, p.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int, timeout: float = 60) -> bool:
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    try:
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    return True


@shaped_only
@pytest.mark.dask
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_a_stopped_driver_leaves_nothing_behind(sig):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        assert len(line) == 2, child.stderr.read()
        prefix, sleeper = line[0], int(line[1])
        assert prefix.startswith(f"lk{child.pid}c") and ours(prefix)[0]
        started = [p.pid for p in psutil.Process(child.pid).children(recursive=True)]
        assert sleeper in started and len(started) >= 3  # the sleeper and two Dask workers at least
        reapers = [p for p in map(psutil.Process, started) if p.cmdline()[-1:] == [prefix]]
        assert len(reapers) == 1  # the cluster's watchdog
        child.send_signal(sig)
        child.wait(timeout=60)
        # Whatever ended the driver, its watchdog (which saw the pipe close) has removed everything,
        # without waiting for another start's sweep.
        _, alive = psutil.wait_procs(reapers, timeout=60)
        assert not alive
        assert ours(prefix) == ([], [])
        assert all(_gone(pid) for pid in started)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@shaped_only
def test_sweep_leaves_live_clusters_alone():
    with C.start_cluster(1, "1gbit") as cl:
        C.sweep_leftovers()
        assert sorted(ours(cl.prefix)[0]) == sorted([cl.hosts[0].netns, cl.switch_netns])
