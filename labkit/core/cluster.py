"""A cluster network on one machine: N hosts as network namespaces, each behind a shaped link.

Each host is a network namespace (``lk<pid>c<k>h<i>``) joined by a veth pair to a bridge that
lives in one more namespace, the switch (``lk<pid>c<k>sw``). Both ends of every host link are
shaped with ``tc ... tbf`` (egress of the host end: what the host sends; egress of the switch end:
what it receives), so traffic between hosts is real TCP through the kernel at the stated rate.
The process that drives the cluster stays in the root namespace and gets one veth of its own into
the switch (``lk<pid>c<k>``, address ``client_addr``, not shaped): a Dask scheduler or a torch
master can listen there. Addresses come from a private /24 (``10.x.y.0/24``) that no route of
the root namespace covers. Only bandwidth is shaped: ``netem`` (added latency) is not in every
kernel and is not used.

Everything is removed by :meth:`Cluster.close`, at exit (Ctrl-C included: Python's default
SIGINT handler raises KeyboardInterrupt, and the exit runs the atexit hook), and, for a driver
that was killed outright (a notebook kernel stopped at once, say), by the cluster's watchdog, a
small process that waits for the driver's end of a pipe to close. Should the watchdog die too,
:func:`sweep_leftovers`, which every :func:`start_cluster` runs first, deletes the namespaces and
veths of processes that are gone and kills what still ran in them. A process holds an exclusive ``flock`` on ``lk<pid>.lock`` while its clusters live, so a
dead one is told apart from a live one even if its pid was reused.

Without the privilege (not root, no CAP_NET_ADMIN, ``ip netns add`` refused) or with
``LABKIT_NO_NETNS=1``, :func:`start_cluster` falls back to loopback: ``shaped=False``, every host
``127.0.0.1``, a ``reason`` saying why, so benches can mark shaped figures "not measured".
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import ipaddress
import json
import logging
import numbers
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from labkit.core.errors import LabkitError, bad_value, check_range

MAX_HOSTS = 16
MIN_RATE = 10**6  # 1 Mbit/s: slower links make every test crawl
MAX_RATE = 100 * 10**9  # tbf takes 64-bit rates; beyond 100 Gbit/s the CPU, not the shaper, is the limit
_RATE_ACCEPTED = ("a rate such as '10gbit', '1gbit', '200mbit' (also kbit, bit, 'Gbit/s') or bits per second "
                  "as an int, between 1 Mbit/s and 100 Gbit/s")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}

# Names of our namespaces and of the one veth in the root namespace; group 1 is the owner's pid.
_NS_RE = re.compile(r"^lk(\d+)(?:c\d+(?:h\d+|sw)|probe)$")
_LINK_RE = re.compile(r"^lk(\d+)c\d+$")
_SWITCH_IF = "br0"
_HOST_IF = "eth0"  # the host end of its link, inside the host's namespace
_CLIENT_PEER = "client"  # the switch end of the client's veth
log = logging.getLogger(__name__)


def parse_rate(rate: Any) -> int:
    """Return `rate` in bits/s: ``"10gbit"``, ``"200mbit"``, ``"2.5 Gbit/s"``, or an int of bits/s."""
    if isinstance(rate, bool):
        raise bad_value("rate", rate, _RATE_ACCEPTED)
    if isinstance(rate, numbers.Real):
        if isinstance(rate, numbers.Integral) or float(rate).is_integer():
            bits = int(rate)
        else:
            raise bad_value("rate", rate, _RATE_ACCEPTED)
    elif isinstance(rate, str):
        # tc's words: "mbit" is megabits; its "mbps" means megaBYTES, so no "bps" here
        m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([kmgt]?)(?:bit(?:/s)?)?", rate.strip().lower().replace(" ", ""))
        if not m or (m.group(2) and "bit" not in rate.lower()):
            raise bad_value("rate", rate, _RATE_ACCEPTED)
        bits = round(float(m.group(1)) * _UNITS[m.group(2)])
    else:
        raise bad_value("rate", rate, _RATE_ACCEPTED)
    if not MIN_RATE <= bits <= MAX_RATE:
        raise bad_value("rate", rate, _RATE_ACCEPTED)
    return bits


def fmt_rate(bits: float) -> str:
    """Return a rate in bits/s as people write it: ``10 Gbit/s``, ``200 Mbit/s``, ``2.5 Gbit/s``."""
    for unit, name in ((10**12, "Tbit/s"), (10**9, "Gbit/s"), (10**6, "Mbit/s"), (10**3, "kbit/s")):
        if bits >= unit:
            return f"{bits / unit:.3g} {name}"
    return f"{bits:.3g} bit/s"


@dataclass(frozen=True)
class Host:
    """One host: `name` (``h0``), `addr` (its IP), `netns` (its namespace, None on loopback), `ifname`."""

    index: int
    name: str
    addr: str
    netns: str | None
    ifname: str


# --- running ip / tc ------------------------------------------------------------------------------

def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `argv` (ip or tc); with `check`, a failure raises LabkitError with the tool's first error line."""
    p = subprocess.run(list(argv), input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        first = next((ln.strip() for ln in (p.stderr or p.stdout).splitlines() if ln.strip()), f"exit {p.returncode}")
        raise LabkitError(f"`{' '.join(argv[:4])} ...` failed: {first}")
    return p


def _batch(tool: str, lines: Sequence[str], netns: str | None = None, *, force: bool = False) -> None:
    """Run `lines` through one ``ip -batch`` / ``tc -batch`` (in `netns`): one process, not one per line."""
    argv = [tool] + (["-n", netns] if netns else []) + (["-force"] if force else []) + ["-batch", "-"]
    _run(argv, stdin="\n".join(lines) + "\n", check=not force)


def _tbf(dev: str, bits: int, verb: str = "add") -> str:
    # Burst: a millisecond of traffic (so the shaper's timer keeps up at 10 Gbit/s), at least two
    # full-size frames. Not more at low rates: a bucket of 128 KiB let a 10 Mbit/s link pass a small
    # fetch at memory speed after each idle gap. tbf cuts GSO packets larger than the burst into
    # frames itself, so none is dropped.
    burst = max(2 * 1514, bits // 8 // 1000)
    return f"qdisc {verb} dev {dev} root tbf rate {bits}bit burst {burst} latency 20ms"


def _netns_list() -> list[str]:
    p = _run(["ip", "-j", "netns", "list"], check=False)
    with contextlib.suppress(ValueError):
        return [d["name"] for d in json.loads(p.stdout or "[]")]
    return [ln.split()[0] for ln in p.stdout.splitlines() if ln.strip()]


def _root_links() -> list[str]:
    p = _run(["ip", "-j", "link", "show"], check=False)
    with contextlib.suppress(ValueError):
        return [d["ifname"] for d in json.loads(p.stdout or "[]")]
    return []


def _netns_pids(ns: str) -> list[int]:
    p = _run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def _kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _delete(namespaces: Sequence[str], links: Sequence[str]) -> None:
    """Kill what runs in `namespaces`, delete them (their veths go with them) and the root `links`."""
    for ns in namespaces:
        _kill_pids(_netns_pids(ns))
    lines = [f"netns del {ns}" for ns in namespaces] + [f"link del {ln}" for ln in links]
    if lines:
        _batch("ip", lines, force=True)  # -force: one already gone must not keep the rest


#: A watchdog per shaped cluster: a small process holding the read end of a pipe whose write end only
#: the driver holds. EOF means the driver closed the cluster or died (even by SIGKILL, as a notebook
#: kernel stopped "now" is): it then kills what runs in the cluster's namespaces and deletes them and
#: the driver's veth at once, instead of at the next start's sweep. Plain Python and `ip`, no labkit
#: import, so it starts in milliseconds.
_REAPER = r"""
import json, os, re, signal, subprocess, sys
prefix = sys.argv[1]
sys.stdin.buffer.read()
def ip(*a):
    return subprocess.run(("ip",) + a, capture_output=True, text=True)
try:
    names = [d["name"] for d in json.loads(ip("-j", "netns", "list").stdout or "[]")]
except ValueError:
    names = []
mine = [n for n in names if n == prefix + "sw" or re.fullmatch(re.escape(prefix) + r"h[0-9]+", n)]
for n in mine:
    for pid in ip("netns", "pids", n).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass
for n in mine:
    ip("netns", "del", n)
if ip("link", "show", prefix).returncode == 0:
    ip("link", "del", prefix)
"""


def _start_reaper(prefix: str) -> tuple[subprocess.Popen, int]:
    """Start the watchdog of the cluster named `prefix`; return it and the pipe end to close on teardown."""
    r, w = os.pipe()  # not inheritable: no child of the driver keeps the watchdog waiting
    try:
        proc = subprocess.Popen([sys.executable, "-c", _REAPER, prefix], stdin=r, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # Ctrl-C is not its signal
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return proc, w


# --- who is alive: a lock file per driving process --------------------------------------------------

@functools.lru_cache(maxsize=1)
def _lock_dir() -> Path:
    for d in (Path("/run/labkit"), Path(tempfile.gettempdir()) / "labkit-netns"):
        with contextlib.suppress(OSError):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
    return Path(tempfile.gettempdir())


_OWN_LOCK: tuple[int, int] | None = None  # (pid, fd) of our held lock


def _hold_own_lock() -> None:
    """Hold ``lk<pid>.lock`` exclusively for this process's lifetime; the kernel drops it when we die."""
    global _OWN_LOCK
    pid = os.getpid()
    if _OWN_LOCK and _OWN_LOCK[0] == pid:
        return
    path = _lock_dir() / f"lk{pid}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweeper clears a dead namesake's leftovers
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the sweeper unlinked it under us: lock the new file
    _OWN_LOCK = (pid, fd)


def _owner_dead(pid: int) -> tuple[bool, int | None]:
    """(dead?, fd of its lock now held by us, to release after the sweep) for the owner `pid`."""
    if pid == os.getpid():
        return False, None
    path = _lock_dir() / f"lk{pid}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True, None
        except PermissionError:
            pass
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False, None
        raise
    return True, fd


def sweep_leftovers() -> list[str]:
    """Remove the namespaces and veths (``lk<pid>...``) of driving processes that are gone; return their names.

    What still runs inside them (orphaned Dask workers, ranks) is killed first. Clusters of live
    processes, this one's included, are left alone.
    """
    if shutil.which("ip") is None:
        return []
    by_pid: dict[int, tuple[list[str], list[str]]] = {}
    for ns in _netns_list():
        m = _NS_RE.match(ns)
        if m:
            by_pid.setdefault(int(m.group(1)), ([], []))[0].append(ns)
    for link in _root_links():
        m = _LINK_RE.match(link)
        if m:
            by_pid.setdefault(int(m.group(1)), ([], []))[1].append(link)
    for lock in _lock_dir().glob("lk*.lock"):  # a dead driver's lock file goes, leftovers or not
        m = re.fullmatch(r"lk(\d+)\.lock", lock.name)
        if m:
            by_pid.setdefault(int(m.group(1)), ([], []))
    removed: list[str] = []
    for pid, (namespaces, links) in sorted(by_pid.items()):
        dead, fd = _owner_dead(pid)
        if not dead:
            continue
        try:
            _delete(namespaces, links)
            removed += namespaces + links
            with contextlib.suppress(FileNotFoundError):
                (_lock_dir() / f"lk{pid}.lock").unlink()
        finally:
            if fd is not None:
                os.close(fd)
    if removed:
        log.info("removed leftovers of dead labkit clusters: %s", ", ".join(removed))
    return removed


# --- can this process shape links? ----------------------------------------------------------------

def _cap_net_admin() -> bool:
    if os.geteuid() == 0:
        return True
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 12))
    return False


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces are Linux only (this is {sys.platform})"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` is not installed (iproute2)"
    if not _cap_net_admin():
        return False, "not root and no CAP_NET_ADMIN"
    ns = f"lk{os.getpid()}probe"
    try:
        _run(["ip", "netns", "add", ns])
    except LabkitError as exc:
        return False, str(exc)
    try:
        _batch("ip", [f"link add name {_SWITCH_IF} type bridge", "link add name pa type veth peer name pb",
                      "link set pa master br0"], ns)
        _batch("tc", [_tbf("pa", 10**9)], ns)
    except LabkitError as exc:
        return False, str(exc)
    finally:
        _run(["ip", "netns", "del", ns], check=False)
    return True, "root: network namespaces, veth pairs, a bridge and tc tbf work"


def can_shape() -> tuple[bool, str]:
    """(True, what works) if this process can build a shaped cluster, else (False, why not), in one line."""
    if os.environ.get("LABKIT_NO_NETNS", "").strip() not in ("", "0"):
        return False, "LABKIT_NO_NETNS is set"
    return _probe()


# --- the cluster ----------------------------------------------------------------------------------

_LIVE: list["Cluster"] = []
_LIVE_LOCK = threading.Lock()
_COUNTER = [0]
_ATEXIT = [False]


def _close_all() -> None:
    global _OWN_LOCK
    for cl in list(_LIVE):
        if cl._owner == os.getpid():  # a forked child must not tear down its parent's cluster
            with contextlib.suppress(Exception):
                cl.close()
    if _OWN_LOCK and _OWN_LOCK[0] == os.getpid() and not _LIVE:
        with contextlib.suppress(OSError):
            (_lock_dir() / f"lk{_OWN_LOCK[0]}.lock").unlink()
            os.close(_OWN_LOCK[1])
        _OWN_LOCK = None


def _pick_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 in 10.64.0.0-10.254.255.0 that overlaps no route or address of the root namespace."""
    used: list[ipaddress.IPv4Network] = []
    for cmd in (["ip", "-j", "-4", "route", "show", "table", "all"], ["ip", "-j", "-4", "addr", "show"]):
        p = _run(cmd, check=False)
        try:
            rows = json.loads(p.stdout or "[]")
        except ValueError:
            rows = []
        for r in rows:
            cands = [r.get("dst")] + [f"{a.get('local')}/{a.get('prefixlen')}" for a in r.get("addr_info", [])]
            for c in cands:
                if c and c != "default":
                    with contextlib.suppress(ValueError):
                        net = ipaddress.ip_network(c, strict=False)
                        if net.prefixlen > 0:
                            used.append(net)
    span = (255 - 64) * 256
    for step in range(span):
        k = (seed * 7919 + step) % span
        net = ipaddress.ip_network(f"10.{64 + k // 256}.{k % 256}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise LabkitError("no free private /24 in 10.64.0.0/10-10.254.255.0 for a cluster: every one overlaps a route")


class Cluster:
    """N hosts, each behind a link shaped to `rate_bit_s` (or all on loopback when not `shaped`).

    ``hosts[i]`` is a :class:`Host`; :meth:`popen` runs a command on one; :meth:`dask_client` starts
    Dask workers on them; :meth:`link_bytes` reads each link's counters; :meth:`set_rate` reshapes
    every link live; :meth:`close` removes it all (also on exit; the object is a context manager).
    """

    def __init__(self, n_hosts: int, rate_bit_s: int, shaped: bool, reason: str) -> None:
        self.shaped, self.reason, self.rate_bit_s = shaped, reason, rate_bit_s
        self._owner = os.getpid()
        self._lock = threading.RLock()
        self._closed = False
        self._procs: list[subprocess.Popen] = []
        self._dask: list[tuple[Any, Any]] = []  # (client, scheduler cluster)
        self._tmp: list[str] = []
        self._reaper: tuple[subprocess.Popen, int] | None = None
        if shaped:
            with _LIVE_LOCK:
                k = _COUNTER[0]
                _COUNTER[0] += 1
            self.prefix = f"lk{os.getpid()}c{k}"
            self.switch_netns: str | None = f"{self.prefix}sw"
            self.client_ifname: str | None = self.prefix  # the root end of the client's veth
            self.subnet = _pick_subnet(os.getpid() + k)
            base = self.subnet.network_address
            self.client_addr = str(base + 1)
            self.hosts = [Host(i, f"h{i}", str(base + 100 + i), f"{self.prefix}h{i}", _HOST_IF)
                          for i in range(n_hosts)]
        else:
            self.prefix, self.switch_netns, self.client_ifname, self.subnet = "", None, None, None
            self.client_addr = "127.0.0.1"
            self.hosts = [Host(i, f"h{i}", "127.0.0.1", None, "lo") for i in range(n_hosts)]

    def __repr__(self) -> str:
        how = fmt_rate(self.rate_bit_s) if self.shaped else f"loopback, not shaped: {self.reason}"
        return f"<Cluster {len(self.hosts)} hosts, {how}{', closed' if self._closed else ''}>"

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # building ---------------------------------------------------------------------------------
    def _build(self) -> None:
        sw, bits = self.switch_netns, self.rate_bit_s
        _batch("ip", [f"netns add {sw}"] + [f"netns add {h.netns}" for h in self.hosts])
        _batch("ip", [f"link add name {self.client_ifname} type veth peer name {_CLIENT_PEER} netns {sw}",
                      f"addr add {self.client_addr}/24 dev {self.client_ifname}",
                      f"link set {self.client_ifname} up"])
        lines = ["link set lo up", f"link add name {_SWITCH_IF} type bridge forward_delay 0",
                 f"link set {_SWITCH_IF} up",
                 f"link set {_CLIENT_PEER} master {_SWITCH_IF}", f"link set {_CLIENT_PEER} up"]
        for h in self.hosts:
            lines += [f"link add name {h.name} type veth peer name {h.ifname} netns {h.netns}",
                      f"link set {h.name} master {_SWITCH_IF}", f"link set {h.name} up"]
        _batch("ip", lines, sw)
        _batch("tc", [_tbf(h.name, bits) for h in self.hosts], sw)  # what each host receives
        for h in self.hosts:
            _batch("ip", ["link set lo up", f"addr add {h.addr}/24 dev {h.ifname}", f"link set {h.ifname} up"],
                   h.netns)
            _batch("tc", [_tbf(h.ifname, bits)], h.netns)  # what each host sends

    def set_rate(self, rate: Any) -> None:
        """Reshape every link (both directions) to `rate` now; open connections keep running."""
        bits = parse_rate(rate)
        self._check_open()
        if self.shaped:
            _batch("tc", [_tbf(h.name, bits, "replace") for h in self.hosts], self.switch_netns)
            for h in self.hosts:
                _batch("tc", [_tbf(h.ifname, bits, "replace")], h.netns)
        self.rate_bit_s = bits

    def _check_open(self) -> None:
        if self._closed:
            raise LabkitError("this cluster is closed; start another with start_cluster()")

    def _host(self, host_index: Any) -> Host:
        check_range("host_index", host_index, 0, len(self.hosts) - 1, integer=True)
        return self.hosts[int(host_index)]

    # processes --------------------------------------------------------------------------------
    def popen(self, host_index: int, argv: Sequence[str], **kw: Any) -> subprocess.Popen:
        """Start `argv` on host `host_index` (inside its namespace) and return the Popen; `kw` go to Popen.

        The process gets its own session (a Ctrl-C at the terminal reaches the driver alone, which
        then stops it), and :meth:`close` kills it if it still runs.
        """
        h = self._host(host_index)
        if isinstance(argv, (str, bytes)) or not argv:
            raise bad_value("argv", argv, "a non-empty list of program arguments, e.g. [sys.executable, '-c', code]")
        with self._lock:
            self._check_open()
            kw.setdefault("start_new_session", True)
            cmd = ["ip", "netns", "exec", h.netns, *map(str, argv)] if self.shaped else list(map(str, argv))
            p = subprocess.Popen(cmd, **kw)
            self._procs.append(p)
            return p

    def _stop_procs(self, procs: Sequence[subprocess.Popen], grace: float = 1.0) -> None:
        # SIGTERM, then SIGKILL after `grace`: a Dask worker that has run a task can sit on SIGTERM for
        # seconds once its scheduler is gone, and nothing of it needs saving (its folder is ours).
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)  # its children too, when it leads its own session
                    except (ProcessLookupError, PermissionError):
                        with contextlib.suppress(ProcessLookupError):
                            p.send_signal(sig)
            end = time.monotonic() + grace
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(max(0.0, end - time.monotonic()))
            if all(p.poll() is not None for p in procs):
                return

    # Dask -------------------------------------------------------------------------------------
    def dask_client(self, workers_per_host: int = 1, nthreads: int = 1, *, timeout: float = 120.0):
        """Start a scheduler on `client_addr` and `workers_per_host` Dask workers on every host; return a Client.

        Each worker listens on its host's address (``worker.host == hosts[i].addr`` when shaped) and
        is named ``h<i>-<j>`` (:meth:`workers_by_host` maps hosts to worker addresses, on loopback
        too). TLS with credentials made for this run, as ``core.dask_cluster`` does; the workers
        serve no HTTP. The client, scheduler and workers are closed by :meth:`close`.
        """
        check_range("workers_per_host", workers_per_host, 1, 64, integer=True)
        check_range("nthreads", nthreads, 1, 256, integer=True)
        check_range("timeout", timeout, 1)
        self._check_open()
        import distributed
        from labkit.core.dask_cluster import _cluster_class, temporary_security

        sec = temporary_security()
        sched = _cluster_class(distributed.LocalCluster)(
            labkit_dashboard=False, security=sec, host=self.client_addr, protocol="tls://", n_workers=0,
            processes=True, dashboard_address=None, silence_logs=logging.WARN)
        # Straight to the workers, as every labkit Dask client: relaying actor calls and gathers through
        # the scheduler doubled the cost of a round.
        client = distributed.Client(sched, security=sec, direct_to_workers=True)
        with self._lock:
            self._dask.append((client, sched))
        # The CLI worker takes its credentials only as files: written 0600 into a 0700 folder of
        # this run, read by the workers we start, removed by close().
        tmp = tempfile.mkdtemp(prefix=f"labkit-{self.prefix or 'lo'}-dask-")
        self._tmp.append(tmp)
        files = {}
        for name, pem in (("ca.pem", sec.tls_ca_file), ("worker.pem", sec.tls_worker_cert),
                          ("worker.key", sec.tls_worker_key)):
            path = os.path.join(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(pem)
            files[name] = path
        procs, logs = [], []
        for h in self.hosts:
            for j in range(int(workers_per_host)):
                wname = f"{h.name}-{j}"
                logf = os.path.join(tmp, f"{wname}.log")
                logs.append(logf)
                argv = [sys.executable, "-m", "distributed.cli.dask_worker", sched.scheduler_address,
                        "--host", h.addr, "--nthreads", str(int(nthreads)), "--no-dashboard", "--no-nanny",
                        "--name", wname, "--worker-class", "labkit.core.dask_cluster.QuietWorker",
                        "--tls-ca-file", files["ca.pem"], "--tls-cert", files["worker.pem"],
                        "--tls-key", files["worker.key"], "--local-directory", os.path.join(tmp, wname),
                        "--death-timeout", "60"]
                with open(logf, "wb") as out:
                    procs.append(self.popen(h.index, argv, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL))
        n = len(procs)
        end = time.monotonic() + timeout
        while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
            dead = [i for i, p in enumerate(procs) if p.poll() is not None]
            if dead or time.monotonic() > end:
                i = dead[0] if dead else 0
                tail = Path(logs[i]).read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                why = f"worker {i} exited ({tail[0]})" if dead else f"only some workers joined in {timeout:g} s"
                raise LabkitError(f"dask_client: {why}")
            with contextlib.suppress(distributed.TimeoutError, TimeoutError, OSError):
                client.wait_for_workers(n, timeout=0.5)
        return client

    def workers_by_host(self, client: Any) -> dict[int, list[str]]:
        """{host index: [worker address, ...]} for `client`'s workers started by :meth:`dask_client`."""
        out: dict[int, list[str]] = {h.index: [] for h in self.hosts}
        for addr, w in client.scheduler_info(n_workers=-1)["workers"].items():
            m = re.fullmatch(r"h(\d+)-\d+", str(w.get("name", "")))
            if m and int(m.group(1)) in out:
                out[int(m.group(1))].append(addr)
        return {k: sorted(v) for k, v in out.items()}

    # counters ---------------------------------------------------------------------------------
    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """{host name: (bytes the host sent, bytes it received)} on its link, since the cluster started.

        Read in one go from the switch ends (a veth pair's two ends count the same packets: what
        one end sends the other receives). Empty for a loopback cluster: its hosts share ``lo``.
        """
        if not self.shaped or self._closed:
            return {}
        p = _run(["ip", "-n", self.switch_netns, "-s", "-j", "link", "show"])
        stats = {d["ifname"]: d.get("stats64", {}) for d in json.loads(p.stdout or "[]")}
        out = {}
        for h in self.hosts:
            s = stats.get(h.name, {})
            out[h.name] = (int(s.get("rx", {}).get("bytes", 0)), int(s.get("tx", {}).get("bytes", 0)))
        return out

    # teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every process and Dask worker, delete the namespaces and veths. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for client, sched in self._dask:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
            with contextlib.suppress(Exception):
                sched.close(timeout=5)
        self._stop_procs(self._procs)
        if self.shaped:
            _delete([self.switch_netns] + [h.netns for h in self.hosts],
                    [self.client_ifname] if self.client_ifname in _root_links() else [])
        if self._reaper is not None:  # nothing left to reap: let the watchdog go
            proc, w = self._reaper
            self._reaper = None
            with contextlib.suppress(OSError):
                os.close(w)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for d in self._tmp:
            shutil.rmtree(d, ignore_errors=True)
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)


def start_cluster(n_hosts: int, rate: Any = "10gbit", *, fallback: bool = True) -> Cluster:
    """Start `n_hosts` (1-16) hosts, each behind a link shaped to `rate` (default 10 Gbit/s); see the module doc.

    Without the privilege (or with ``LABKIT_NO_NETNS=1``) return a loopback cluster
    (``shaped=False``, ``reason`` set) when `fallback`, else raise a one-line LabkitError.
    """
    check_range("n_hosts", n_hosts, 1, MAX_HOSTS, integer=True)
    bits = parse_rate(rate)
    ok, reason = can_shape()
    if not ok:
        if not fallback:
            how = ("unset LABKIT_NO_NETNS" if "LABKIT_NO_NETNS" in reason else "run as root or with CAP_NET_ADMIN")
            raise LabkitError(f"a shaped cluster needs network namespaces, which this process cannot make: {reason} "
                              f"({how}, or pass fallback=True for loopback)")
        cl = Cluster(int(n_hosts), bits, False, reason)
    else:
        sweep_leftovers()
        _hold_own_lock()
        cl = Cluster(int(n_hosts), bits, True, "")
    with _LIVE_LOCK:
        _LIVE.append(cl)
        if not _ATEXIT[0]:
            atexit.register(_close_all)
            _ATEXIT[0] = True
    if cl.shaped:
        try:
            cl._reaper = _start_reaper(cl.prefix)
            cl._build()
        except BaseException:
            cl.close()
            raise
    return cl
