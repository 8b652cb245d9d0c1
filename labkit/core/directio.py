"""Direct I/O engine: O_DIRECT reads of byte extents through aligned staging buffers.

The engine knows nothing about graphs or features. A caller asks for a set of byte extents of
one file (rows of a matrix, neighbour lists of a CSR); the engine

1. maps every extent to the 4 KiB pages it touches, so extents that share a page read it once;
2. coalesces runs of needed pages whose gap is at most ``gap_pages`` into one request (a gap of
   "infinity" is a sequential sweep of the region, cut into ``sweep_request`` sized requests);
3. issues the requests, ``queue_depth`` in flight, from compiled code that holds no GIL (one of
   two engines, below; through ``os.preadv`` from Python a request cost about 20 us of CPU,
   which made small random reads CPU-bound on a 2-core machine), into page-aligned staging
   memory charged to a :class:`~labkit.core.memory.MemoryBudget`;
4. copies each extent out of the staging buffer into the caller's output, in the caller's order.
   On the direct path each request in flight owns a slot of the staging buffer and streams:
   read a request into its slot, copy that request's extents out, issue the next, so the device
   keeps ``queue_depth`` requests in flight to the end (staging need: ``queue_depth`` times the
   largest request, fewer in flight when it is smaller). The page-cache fallback reads in
   waves that fill the staging buffer, then copies. A request that fails (a short read, an OS
   error) is read once more with ``pread``; failing again, the read raises that error. Before
   it raises (or on Ctrl-C), the threads not started are cancelled and the running ones waited
   for, and the io_uring loop returns only with no request in flight, so nothing writes into
   the staging buffer or the caller's output after a read returns.

Counters record requests, bytes read from the device and bytes the caller actually needed, so
read amplification is ``bytes_read / bytes_used``. :class:`DiskModel` fits a two-parameter cost
model (time per request, bytes per second) to the measured device and says which gap is
cheapest for a given set of pages.

``O_DIRECT`` keeps the OS page cache out of the way, so a memory budget means what it says.
On a filesystem without it (tmpfs) :class:`DirectFile` raises :class:`DirectIOUnsupported`, or
with ``fallback=True`` reads through the page cache and drops the pages after every request
(``POSIX_FADV_DONTNEED``); ``DirectFile.direct`` says which one is in use.

Two engines issue the requests. ``io_uring`` (the default where the kernel allows it): one
compiled loop (numba, no GIL) on the reading thread keeps ``queue_depth`` reads in flight through
an io_uring ring of its own, set up with raw system calls (no binding needed), with the staging
buffer registered once (``IORING_OP_READ_FIXED``: the kernel pins its pages once, not per
request); it submits and reaps in batches, one ``io_uring_enter`` per round. ``threads``: a pool
of ``queue_depth`` threads, each running a compiled loop of ``pread(2)`` calls (numba calling
libc). Both stream through slots of the staging buffer and copy each request's extents out as
it lands. Measured on the 2-core VM this lab was built on, 13,783 random 4 KiB reads at queue
depth 16 cost about 60 ms of machine-wide CPU through the ring against about 150 ms through the
threads (a pinned buffer and a wake-up per request), at the same or a higher request rate. The
PyPI bindings were tried first and none fits: ``liburing`` (2026.3.30) dies with SIGILL on CPUs
without AVX-512 (its wheel's ``Ring()`` runs ``vmovups %zmm0``), and ``uring-api`` (0.1.0rc5)
prepares and completes every request in Python, under the GIL. Where io_uring is refused
(``kernel.io_uring_disabled``, a seccomp filter, an old kernel), or a test read of the file's
first page through the ring at open does not come back whole, ``engine="auto"`` uses the
threads; ``DirectFile.engine`` says which one runs, and ``LABKIT_IO_ENGINE=threads`` (or
``io_uring``) picks one for a whole process, for side-by-side runs.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from labkit.core.arrays import unique
from labkit.core.errors import LabkitError, bad_value, check_choice, check_range
from labkit.core.machine import mounts
from labkit.core.memory import BudgetExceeded, MemoryBudget, Reservation

PAGE = 4096
#: A gap this large means "read everything between the first and the last needed page".
SWEEP = 1 << 40
#: How requests are issued: "auto" (io_uring where the kernel allows it, else threads), or one of them.
ENGINES = ("auto", "io_uring", "threads")


class DirectIOUnsupported(LabkitError):
    """The file's filesystem refuses O_DIRECT (tmpfs, some FUSE mounts)."""


@dataclass
class IOCounters:
    """What the engine did: requests issued, bytes read from the device, bytes the caller used."""

    requests: int = 0
    bytes_read: int = 0
    bytes_used: int = 0
    calls: int = 0
    seconds: float = 0.0

    @property
    def read_amplification(self) -> float:
        """Bytes read per byte needed (1.0 is perfect; NaN before any read)."""
        return self.bytes_read / self.bytes_used if self.bytes_used else float("nan")

    def add(self, other: "IOCounters") -> None:
        for k in ("requests", "bytes_read", "bytes_used", "calls", "seconds"):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def reset(self) -> None:
        self.requests = self.bytes_read = self.bytes_used = self.calls = 0
        self.seconds = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["read_amplification"] = self.read_amplification
        return d


@numba.njit(cache=True, nogil=True)
def _plan(starts, lengths, order, page, gap_pages, max_run_pages):
    """Coalesce extents (visited in `order`, sorted by start) into page runs.

    Returns (run_page, run_pages, ext_run, ext_off): each run's first page and page count, and
    for each extent the run it lies in and its byte offset inside that run.
    """
    n = order.shape[0]
    run_page = np.empty(max(n, 1), np.int64)
    run_pages = np.empty(max(n, 1), np.int64)
    ext_run = np.empty(n, np.int64)
    ext_off = np.empty(n, np.int64)
    nr = -1
    cur0 = -1
    cur1 = -1
    for k in range(n):
        i = order[k]
        s = starts[i]
        ln = lengths[i]
        if ln <= 0:
            ext_run[i] = -1
            ext_off[i] = 0
            continue
        p0 = s // page
        p1 = (s + ln - 1) // page
        if nr >= 0 and p0 <= cur1 + 1 + gap_pages and p1 - cur0 + 1 <= max_run_pages:
            if p1 > cur1:
                cur1 = p1
        else:
            if nr >= 0:
                run_pages[nr] = cur1 - cur0 + 1
            nr += 1
            cur0 = p0
            cur1 = p1
            run_page[nr] = p0
        ext_run[i] = nr
        ext_off[i] = s - cur0 * page
    if nr >= 0:
        run_pages[nr] = cur1 - cur0 + 1
    return run_page[:nr + 1], run_pages[:nr + 1], ext_run, ext_off


def _libc_fn(name: str, restype, argtypes):
    """libc's function `name` as a ctypes function numba can call, or None (non-glibc platforms)."""
    try:
        f = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
        return None
    f.restype, f.argtypes = restype, argtypes
    return f


_pread = _libc_fn("pread", ctypes.c_ssize_t, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64])

if _pread is not None:
    @numba.njit(nogil=True)
    def _pread_copy(fd, addr, staging, slot, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, out,
                    first, step):
        """Stream runs first, first + step, ... through one staging slot: pread a run at byte `slot`
        of the staging buffer, copy its extents out, take the next. Return the first short run or -1."""
        for i in range(first, offs.shape[0], step):
            got = _pread(fd, addr + slot, lens[i], offs[i])
            if got < want[i]:
                return i
            _copy_run(staging, slot, i, ext_ptr, ext_list, ext_off, lengths, dst, out)
        return -1
else:  # pragma: no cover
    _pread_copy = None


# -- io_uring, through raw system calls ------------------------------------------------------------
# The syscall numbers are the same on every architecture (asm-generic table, Linux 5.1+).
_SYS_SETUP, _SYS_ENTER, _SYS_REGISTER = 425, 426, 427
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000
_OP_READ_FIXED, _OP_READ = 4, 22  # IORING_OP_READ_FIXED (registered buffer), IORING_OP_READ (5.6+)
_ENTER_GETEVENTS = 1
_REGISTER_BUFFERS = 0
#: io_uring_enter failures in a row (EINTR, EAGAIN, ...) after which a read stops using the ring.
_ENTER_RETRIES = 1000


_syscall = _libc_fn("syscall", ctypes.c_long, [ctypes.c_long] * 7)
_sched_yield = _libc_fn("sched_yield", ctypes.c_int, [])

if _syscall is not None and _sched_yield is not None:
    @numba.njit(nogil=True)
    def _uring_reap(cq, cqh, cqt, cq_mask, cqe0, want, bad, free, nfree, slot_bytes,
                    staging, ext_ptr, ext_list, ext_off, lengths, dst, out):
        """Take every completion in the ring: copy its run's extents out (or mark the run bad), free its
        slot. Return (completions taken, free slots now)."""
        head = np.int64(cq[cqh])
        tail = np.int64(cq[cqt])
        got = 0
        while head != tail:
            j = cqe0 + (head & cq_mask) * 4
            lo, hi = np.int64(cq[j]), np.int64(cq[j + 1])
            i = lo | ((hi & 0xFF) << 32)  # user_data = run | slot << 40
            s = hi >> 8
            res = np.int64(np.int32(cq[j + 2]))
            if res < want[i]:
                bad[i] = 1  # short or failed: the caller redoes it with pread for the error
            else:
                _copy_run(staging, s * slot_bytes, i, ext_ptr, ext_list, ext_off, lengths, dst, out)
            free[nfree] = s
            nfree += 1
            head = (head + 1) & 0xFFFFFFFF
            got += 1
        cq[cqh] = head
        return got, nfree

    @numba.njit(nogil=True)
    def _uring_stream(ring_fd, sq, sqh, sqt, sq_mask, sqa, sqes, cq, cqh, cqt, cq_mask, cqe0,
                      word0, addr, slot_bytes, qd, offs, lens, want, bad,
                      staging, ext_ptr, ext_list, ext_off, lengths, dst, out):
        """Read runs 0..n-1 through the ring, `qd` in flight, each into its own staging slot, and copy
        their extents out as they land. Runs that came back short or failed get bad = 1.

        Returns 0, or -1 if io_uring_enter kept failing: then the runs the kernel never took get
        bad = 2, and every run it did take has completed (no read is in flight on return).
        """
        n = offs.shape[0]
        free = np.arange(qd)
        nfree = qd
        nxt = 0
        done = 0
        fails = 0
        head0 = np.int64(sq[sqh])
        while done < n:
            tail = np.int64(sq[sqt])
            while nfree > 0 and nxt < n:
                nfree -= 1
                s = free[nfree]
                idx = tail & sq_mask
                b = idx * 8  # one 64-byte SQE: opcode, fd | offset | buffer | length | user_data | buf_index
                sqes[b] = word0
                sqes[b + 1] = offs[nxt]
                sqes[b + 2] = addr + s * slot_bytes
                sqes[b + 3] = lens[nxt]
                sqes[b + 4] = nxt | (s << 40)
                sqes[b + 5] = 0
                sqes[b + 6] = 0
                sqes[b + 7] = 0
                sq[sqa + idx] = idx
                tail = (tail + 1) & 0xFFFFFFFF
                nxt += 1
            sq[sqt] = tail
            # Submit what the kernel has not taken yet and wait for at least one completion. The call
            # is opaque to the compiler, so the ring's tails are re-read after it, never cached.
            pending = (tail - np.int64(sq[sqh])) & 0xFFFFFFFF
            if _syscall(_SYS_ENTER, ring_fd, pending, 1, _ENTER_GETEVENTS, 0, 0) < 0:
                fails += 1
                if fails >= _ENTER_RETRIES:
                    break
            else:
                fails = 0
            got, nfree = _uring_reap(cq, cqh, cqt, cq_mask, cqe0, want, bad, free, nfree, slot_bytes,
                                     staging, ext_ptr, ext_list, ext_off, lengths, dst, out)
            done += got
        if done == n:
            return 0
        # Giving up: take back what the kernel has not consumed, wait for what it has.
        head = np.int64(sq[sqh])
        sq[sqt] = head
        taken = (head - head0) & 0xFFFFFFFF
        for i in range(taken, n):
            bad[i] = 2
        while done < taken:
            _sched_yield()
            got, nfree = _uring_reap(cq, cqh, cqt, cq_mask, cqe0, want, bad, free, nfree, slot_bytes,
                                     staging, ext_ptr, ext_list, ext_off, lengths, dst, out)
            done += got
        return -1
else:  # pragma: no cover
    _uring_stream = None


class _Ring:
    """One io_uring instance (submission and completion rings mapped here), `staging` registered."""

    def __init__(self, entries: int, staging: np.ndarray) -> None:
        self.fd = -1
        self.pid = os.getpid()
        self.res: Reservation | None = None  # the budget's share for the mapped rings, set by the owner
        if _syscall is None or _uring_stream is None:
            raise OSError(errno.ENOSYS, "no libc syscall() to reach io_uring")
        params = np.zeros(120, np.uint8)  # struct io_uring_params
        fd = _syscall(_SYS_SETUP, entries, params.ctypes.data, 0, 0, 0, 0)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"io_uring_setup: {os.strerror(e)}")
        self.fd = fd
        try:
            u = params.view(np.uint32)
            sq_entries, cq_entries = int(u[0]), int(u[1])
            so, co = [int(v) for v in u[10:17]], [int(v) for v in u[20:26]]  # io_sqring/io_cqring_offsets
            rw = mmap.PROT_READ | mmap.PROT_WRITE
            self._maps = (mmap.mmap(fd, so[6] + 4 * sq_entries, mmap.MAP_SHARED, rw, offset=_OFF_SQ_RING),
                          mmap.mmap(fd, co[5] + 16 * cq_entries, mmap.MAP_SHARED, rw, offset=_OFF_CQ_RING),
                          mmap.mmap(fd, 64 * sq_entries, mmap.MAP_SHARED, rw, offset=_OFF_SQES))
            self.sq = np.frombuffer(self._maps[0], np.uint32)
            self.cq = np.frombuffer(self._maps[1], np.uint32)
            self.sqes = np.frombuffer(self._maps[2], np.uint64)
            # (head, tail, mask, array) of the SQ and (head, tail, mask, first CQE) of the CQ, in uint32s
            self.sq_at = (so[0] // 4, so[1] // 4, int(self.sq[so[2] // 4]), so[6] // 4)
            self.cq_at = (co[0] // 4, co[1] // 4, int(self.cq[co[2] // 4]), co[5] // 4)
            self.entries = sq_entries
            self.nbytes = sum(-(-len(m) // PAGE) * PAGE for m in self._maps)  # whole pages mapped
            iov = np.array([staging.ctypes.data, staging.size], np.uint64)  # struct iovec
            # A registered buffer is pinned once; refused (RLIMIT_MEMLOCK), plain reads pin per request.
            self.fixed = _syscall(_SYS_REGISTER, fd, _REGISTER_BUFFERS, iov.ctypes.data, 1, 0, 0) == 0
        except BaseException:
            self.close()
            raise

    def read(self, fd: int, addr: int, slot_bytes: int, qd: int, offs, lens, want, bad,
             staging, ext_ptr, ext_list, ext_off, lengths, dst, out) -> int:
        word0 = np.uint64((_OP_READ_FIXED if self.fixed else _OP_READ) | (fd << 32))
        (sqh, sqt, sqm, sqa), (cqh, cqt, cqm, cqe0) = self.sq_at, self.cq_at
        return _uring_stream(self.fd, self.sq, sqh, sqt, sqm, sqa, self.sqes, self.cq, cqh, cqt, cqm, cqe0,
                             word0, np.uint64(addr), slot_bytes, qd, offs, lens, want, bad,
                             staging, ext_ptr, ext_list, ext_off, lengths, dst, out)

    def close(self) -> None:
        """Tear the ring down (nothing is in flight between reads); closing twice does nothing."""
        fd, self.fd = self.fd, -1
        self.sq = self.cq = self.sqes = None
        maps, self._maps = getattr(self, "_maps", ()), ()
        for m in maps:  # each holds a duplicate of the ring's fd until closed
            try:
                m.close()
            except BufferError:  # pragma: no cover - a view escaped; unmapped with it
                pass
        if fd >= 0:
            os.close(fd)
        res, self.res = self.res, None
        if res is not None:
            res.release()


@numba.njit(cache=True, nogil=True)
def _copy_run(staging, slot, i, ext_ptr, ext_list, ext_off, lengths, dst, out):
    """Copy the extents of run `i`, read into the staging buffer at byte `slot`, to their places in out."""
    for k in range(ext_ptr[i], ext_ptr[i + 1]):
        e = ext_list[k]
        src = slot + ext_off[e]
        d = dst[e]
        ln = lengths[e]
        out[d:d + ln] = staging[src:src + ln]


@numba.njit(cache=True, nogil=True)
def _extents_by_run(ext_run, nr):
    """Group extents by the run holding them: extents of run r are ext_list[ext_ptr[r]:ext_ptr[r + 1]]."""
    ptr = np.zeros(nr + 1, np.int64)
    for e in range(ext_run.shape[0]):
        if ext_run[e] >= 0:
            ptr[ext_run[e] + 1] += 1
    for r in range(nr):
        ptr[r + 1] += ptr[r]
    lst = np.empty(ptr[nr], np.int64)
    pos = ptr[:nr].copy()
    for e in range(ext_run.shape[0]):
        r = ext_run[e]
        if r >= 0:
            lst[pos[r]] = e
            pos[r] += 1
    return ptr, lst


@numba.njit(cache=True, nogil=True)
def _copy_out(staging, run_base, ext_run, ext_off, lengths, dst_off, out, r0, r1):
    """Copy every extent whose run lies in [r0, r1) from staging into out."""
    n = ext_run.shape[0]
    for i in range(n):
        r = ext_run[i]
        if r < r0 or r >= r1:
            continue
        src = run_base[r] + ext_off[i]
        d = dst_off[i]
        ln = lengths[i]
        out[d:d + ln] = staging[src:src + ln]


@numba.njit(cache=True, nogil=True)
def _gap_stats(pages):
    """For sorted unique pages return the sorted gaps (unneeded pages) between neighbours."""
    n = pages.shape[0]
    if n <= 1:
        return np.zeros(0, np.int64)
    g = np.empty(n - 1, np.int64)
    for i in range(n - 1):
        g[i] = pages[i + 1] - pages[i] - 1
    g.sort()
    return g


def extent_pages(starts: np.ndarray, lengths: np.ndarray, page: int = PAGE) -> np.ndarray:
    """Return the sorted unique pages touched by the extents (for cost models and tests)."""
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    keep = lengths > 0
    p0 = starts[keep] // page
    p1 = (starts[keep] + lengths[keep] - 1) // page
    if p0.size == 0:
        return np.zeros(0, np.int64)
    if np.all(p0 == p1):
        return unique(p0)
    counts = p1 - p0 + 1
    rep = np.repeat(p0 - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    return unique(rep)


def _aligned(nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
    # Anonymous mmaps are page aligned, which O_DIRECT requires of the buffer.
    m = mmap.mmap(-1, max(nbytes, PAGE))
    return m, np.frombuffer(m, dtype=np.uint8)


#: Filesystems whose files live in RAM: O_DIRECT (where accepted) still reads memory there.
RAM_FILESYSTEMS = ("tmpfs", "ramfs", "devtmpfs")


def filesystem_type(path: str | os.PathLike) -> str:
    """Return the type of the filesystem holding `path` (from /proc/mounts), or "" if unknown."""
    p = os.path.realpath(path)
    best, kind = "", ""
    for _dev, mnt, fstype, _opts in mounts():
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, kind = mnt, fstype
    return kind


def probe_direct(path: str | os.PathLike) -> bool:
    """Return True if `path` is on a disk filesystem that accepts O_DIRECT opens and aligned reads.

    tmpfs accepts O_DIRECT on recent kernels, but its files are RAM, so it counts as False.
    """
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or filesystem_type(path) in RAM_FILESYSTEMS:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return False
        raise
    try:
        m = mmap.mmap(-1, PAGE)
        try:
            os.preadv(fd, [m], 0)
        except OSError as e:
            if e.errno == errno.EINVAL:
                return False
            raise
        finally:
            m.close()
    finally:
        os.close(fd)
    return True


class DirectFile:
    """One file opened for O_DIRECT extent reads through a thread pool and a staging buffer."""

    def __init__(self, path: str | os.PathLike, *, queue_depth: int = 8, staging_bytes: int = 8 << 20,
                 sweep_request: int = 1 << 20, max_request: int = 256 << 10,
                 budget: MemoryBudget | None = None, owner: str = "directio staging",
                 fallback: bool = False, engine: str = "auto") -> None:
        # Everything close() looks at exists before anything can fail, so a half-built file
        # (refused budget, failed open) closes cleanly, from __init__ itself or from __del__.
        self._lock = threading.RLock()  # one staging buffer per file; close() waits for a read
        self._fd = -1
        self._ring: _Ring | None = None
        self._res: Reservation | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._mm: mmap.mmap | None = None
        self._staging: np.ndarray | None = None
        check_range("queue_depth", queue_depth, 1, 256, integer=True)
        check_choice("engine", engine, ENGINES)
        if engine == "auto":
            env = os.environ.get("LABKIT_IO_ENGINE", "auto")
            if env not in ENGINES:
                raise bad_value("LABKIT_IO_ENGINE", env, f"one of {', '.join(ENGINES)} (or unset)")
            engine = env
        for arg, v in (("staging_bytes", staging_bytes), ("sweep_request", sweep_request),
                       ("max_request", max_request)):
            check_range(arg, v, PAGE, integer=True)
            if v % PAGE:
                raise bad_value(arg, v, f"a multiple of {PAGE} bytes")
        check_range("sweep_request", sweep_request, PAGE, staging_bytes, integer=True)
        check_range("max_request", max_request, PAGE, staging_bytes, integer=True)
        self.path = Path(path)
        if not self.path.is_file():
            raise bad_value("path", str(path), "an existing regular file")
        self.size = self.path.stat().st_size
        self.queue_depth = int(queue_depth)
        self.sweep_request = int(sweep_request)
        self.max_request = int(max_request)
        self._staging_bytes = int(staging_bytes)
        self.direct = probe_direct(self.path)
        if not self.direct and not fallback:
            raise DirectIOUnsupported(
                f"path={str(self.path)!r} is on a filesystem without O_DIRECT ({filesystem_type(self.path) or 'unknown'}: "
                "O_DIRECT refused, or the files live in RAM); move the "
                "data to a real disk (LABKIT_DATA) or pass fallback=True to read through the page "
                "cache with POSIX_FADV_DONTNEED after every request")
        flags = os.O_RDONLY | (os.O_DIRECT if self.direct else 0)
        self.counters = IOCounters()
        # Reserve first: a refused reservation then has opened nothing.
        self._res = budget.reserve(owner, staging_bytes) if budget else None
        try:
            self._fd = os.open(self.path, flags)
            self._mm, self._staging = _aligned(staging_bytes)
            self._pool = ThreadPoolExecutor(self.queue_depth, thread_name_prefix="directio")
            if self.direct and engine != "threads":
                self._ring = self._open_ring(engine == "io_uring", budget, owner)
        except BaseException:
            self._release(wait=True)
            raise
        #: Which engine issues the reads: "io_uring", "threads", or "page cache" (the fallback).
        self.engine = "page cache" if not self.direct else "io_uring" if self._ring else "threads"

    def _open_ring(self, required: bool, budget: MemoryBudget | None, owner: str) -> "_Ring | None":
        """An io_uring ring for this file's reads, or None where the kernel refuses one (unless required).

        The ring's mapped pages are reserved from `budget` beside the staging buffer; a budget
        too small for them gets the threads (or, required, the budget's error)."""
        try:
            ring = _Ring(max(2, 1 << (self.queue_depth - 1).bit_length()), self._staging)
            try:
                self._probe_ring(ring)
                ring.res = budget.reserve(f"{owner} io_uring ring", ring.nbytes) if budget else None
            except BudgetExceeded:
                ring.close()
                if required:
                    raise
                return None
            except BaseException:
                ring.close()
                raise
            return ring
        except OSError as e:
            if required:
                raise LabkitError(f"engine='io_uring' is not available here ({e.strerror or e}); "
                                  "expected engine='auto' or 'threads'") from None
            return None

    def _probe_ring(self, ring: "_Ring") -> None:
        """Read the file's first page through `ring` (compiling the loop now, not in a timed read);
        raise OSError if it does not come back whole, as on a filesystem io_uring cannot read."""
        if self.size == 0:
            return
        none = np.zeros(0, np.int64)
        bad = np.zeros(1, np.uint8)
        ok = ring.read(self._fd, self._staging.ctypes.data, PAGE, 1, np.zeros(1, np.int64),
                       np.full(1, PAGE, np.int64), np.full(1, min(PAGE, self.size), np.int64), bad,
                       self._staging, np.zeros(2, np.int64), none, none, none, none, np.zeros(0, np.uint8))
        if ok < 0 or bad[0]:
            raise OSError(errno.EIO, "a test read through the ring failed")

    # -- reads --------------------------------------------------------------------------------
    def read_extents(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray | None = None,
                     *, gap_pages: int = 0) -> np.ndarray:
        """Return the bytes of every extent concatenated in the given order (a uint8 array).

        `gap_pages` is the largest run of unneeded pages a request may span to join two needed
        ones (0: page-sharing only; :data:`SWEEP`: one sequential sweep of the region).
        """
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        if starts.shape != lengths.shape or starts.ndim != 1:
            raise bad_value("starts, lengths", f"shapes {starts.shape} and {lengths.shape}", "two 1-D arrays of equal length")
        check_range("gap_pages", gap_pages, 0, integer=True)
        if starts.size and (starts.min() < 0 or (starts + lengths).max() > self.size or lengths.min() < 0):
            # A damaged index (a dataset opened without full verification) lands here: name the file.
            bad = int(np.flatnonzero((starts < 0) | (lengths < 0) | (starts + lengths > self.size))[0])
            raise bad_value(f"extent {bad} of {self.path.name}", (int(starts[bad]), int(lengths[bad])),
                            f"(start, length) with 0 <= start and start + length <= {self.size} bytes (the file's "
                            "size); a damaged index file reads past its end: rebuild it with --force")
        sweeping = gap_pages >= SWEEP
        cap = (self.sweep_request if sweeping else self.max_request) // PAGE
        piece = (cap - 1) * PAGE if cap > 1 else PAGE
        if starts.size and lengths.max() > piece:
            # Split long extents into consecutive pieces a request can hold; output order is kept.
            n = np.maximum(1, -(-lengths // piece))
            first = np.repeat(np.cumsum(n) - n, n)
            k = np.arange(int(n.sum())) - first
            base, ln = np.repeat(starts, n), np.repeat(lengths, n)
            starts = base + k * piece
            lengths = np.minimum(piece, ln - k * piece)
        dst = np.zeros(starts.size + 1, np.int64)
        np.cumsum(lengths, out=dst[1:])
        total = int(dst[-1])
        if out is None:
            out = np.empty(total, np.uint8)
        elif out.dtype != np.uint8 or out.size < total or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous uint8 array of at least {total} bytes")
        if total == 0:
            return out[:0]
        t0 = time.perf_counter()
        order = np.argsort(starts, kind="stable")
        run_page, run_pages, ext_run, ext_off = _plan(starts, lengths, order, PAGE, int(min(gap_pages, SWEEP)), cap)
        if run_pages.max() * PAGE > self._staging_bytes:
            raise ValueError(f"an extent of {run_pages.max() * PAGE} bytes does not fit the staging "
                             f"buffer ({self._staging_bytes} bytes); raise staging_bytes")
        flat = out.reshape(-1)
        requests = bytes_read = 0
        r = 0
        nrun = run_page.size
        with self._lock:  # one staging buffer per file
            if self._fd < 0:
                raise ValueError(f"read of {self.path} after close()")
            if self.direct and _pread_copy is not None:
                self._stream_runs(run_page, run_pages, ext_run, ext_off, lengths, dst, flat)
                requests, bytes_read = nrun, int(run_pages.sum()) * PAGE
            else:
                while r < nrun:
                    # A wave: consecutive runs that together fit the staging buffer.
                    base = np.cumsum(run_pages[r:] * PAGE)
                    r1 = r + int(np.searchsorted(base, self._staging.size, side="right"))
                    run_base = np.zeros(nrun, np.int64)
                    run_base[r:r1] = np.concatenate(([0], base[:r1 - r - 1]))
                    self._read_runs(run_page[r:r1], run_pages[r:r1], run_base[r:r1])
                    _copy_out(self._staging, run_base, ext_run, ext_off, lengths, dst, flat, r, r1)
                    requests += r1 - r
                    bytes_read += int(base[r1 - r - 1])
                    r = r1
            self.counters.requests += requests
            self.counters.bytes_read += bytes_read
            self.counters.bytes_used += total
            self.counters.calls += 1
            self.counters.seconds += time.perf_counter() - t0
        return flat[:total]

    def read_rows(self, rows: np.ndarray, row_bytes: int, *, offset: int = 0, gap_pages: int = 0,
                  out: np.ndarray | None = None) -> np.ndarray:
        """Return rows (fixed `row_bytes` each, the first at byte `offset`) as a (n, row_bytes) uint8 array."""
        rows = np.asarray(rows, np.int64)
        starts = offset + rows * int(row_bytes)
        lengths = np.full(rows.size, int(row_bytes), np.int64)
        flat = None if out is None else out.reshape(-1).view(np.uint8)
        return self.read_extents(starts, lengths, flat, gap_pages=gap_pages).reshape(rows.size, row_bytes)

    def _stream_runs(self, run_page: np.ndarray, run_pages: np.ndarray, ext_run: np.ndarray, ext_off: np.ndarray,
                     lengths: np.ndarray, dst: np.ndarray, flat: np.ndarray) -> None:
        """Read every run and copy its extents out, each I/O thread streaming through its own staging slot.

        There are no waves: a thread copies a run's extents out as soon as its read lands and
        issues its next read, so the device sees `queue_depth` requests in flight until the last
        few. (Reading waves that fill the whole staging buffer, then copying, left the device
        idle at every wave's tail and copy: measured 46k random 4 KiB reads/s at queue depth 16
        with 8 MiB of staging, against 81k streamed.)
        """
        nrun = run_page.size
        slot_need = int(run_pages.max()) * PAGE
        qd = max(1, min(self.queue_depth, nrun, self._staging.size // slot_need))
        slot_bytes = self._staging.size // qd // PAGE * PAGE
        offs = np.ascontiguousarray(run_page * PAGE, np.int64)
        lens = np.ascontiguousarray(run_pages * PAGE, np.int64)
        want = np.minimum(lens, self.size - offs)
        ext_ptr, ext_list = _extents_by_run(ext_run, nrun)
        fd, addr, staging = self._fd, self._staging.ctypes.data, self._staging
        ring = self._ring
        if ring is not None and ring.pid == os.getpid():  # a forked child must not share its parent's ring
            qd = min(qd, ring.entries)
            bad = np.zeros(nrun, np.uint8)
            if ring.read(fd, addr, slot_bytes, qd, offs, lens, want, bad, staging, ext_ptr, ext_list, ext_off,
                         lengths, dst, flat) < 0:
                # io_uring_enter kept failing (nothing is in flight now): read the rest with the threads.
                self._ring, self.engine = None, "threads"
                ring.close()
            for i in np.flatnonzero(bad):  # short, failed or never taken: pread says why (or reads it)
                self._redo(int(i), 0, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, flat)
            return

        def worker(w: int) -> None:
            slot, first = w * slot_bytes, w
            while True:
                bad = _pread_copy(fd, addr, staging, slot, offs, lens, want, ext_ptr, ext_list, ext_off, lengths,
                                  dst, flat, first, qd)
                if bad < 0:
                    return
                i = int(bad)
                self._redo(i, slot, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, flat)
                first = i + qd

        self._run_workers(worker, qd)

    def _redo(self, i: int, slot: int, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, flat) -> None:
        """Read run `i` again from Python at byte `slot` of the staging buffer and copy its extents out:
        a request that failed or came back short raises the OS error (or says it was short)."""
        mv = memoryview(self._mm)
        try:
            got = os.preadv(self._fd, [mv[slot:slot + int(lens[i])]], int(offs[i]))
        finally:
            mv.release()
        if got < want[i]:
            raise OSError(errno.EIO, f"short read at {int(offs[i])} of {self.path}")
        _copy_run(self._staging, slot, i, ext_ptr, ext_list, ext_off, lengths, dst, flat)

    def _read_runs(self, run_page: np.ndarray, run_pages: np.ndarray, run_base: np.ndarray) -> None:
        """Read one wave of runs into the staging buffer from Python (the page-cache fallback, or no libc pread)."""
        n = run_page.size
        qd = min(self.queue_depth, n)
        offs = np.ascontiguousarray(run_page * PAGE, np.int64)
        lens = np.ascontiguousarray(run_pages * PAGE, np.int64)
        bases = np.ascontiguousarray(run_base, np.int64)
        want = np.minimum(lens, self.size - offs)
        fd, direct = self._fd, self.direct
        mv = memoryview(self._mm)
        offl, lenl, basel, wantl = offs.tolist(), lens.tolist(), bases.tolist(), want.tolist()

        def worker(w: int) -> None:
            for i in range(w, n, qd):
                got = os.preadv(fd, [mv[basel[i]:basel[i] + lenl[i]]], offl[i])
                if got < wantl[i]:
                    raise OSError(errno.EIO, f"short read at {offl[i]} of {self.path}")
                if not direct:
                    os.posix_fadvise(fd, offl[i], lenl[i], os.POSIX_FADV_DONTNEED)

        self._run_workers(worker, qd)

    def _run_workers(self, worker, qd: int) -> None:
        """Run ``worker(0..qd-1)``, on this thread when qd is 1, else on the pool; if one fails,
        the others are cancelled or waited for (:func:`_settle`) before the error is raised."""
        if qd == 1:
            worker(0)
            return
        futures = []
        try:
            for w in range(qd):
                futures.append(self._pool.submit(worker, w))
            for f in futures:
                f.result()
        except BaseException:
            _settle(futures)
            raise

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file, stop the threads and give the staging bytes back to the budget.

        Waits for a read in progress on another thread to finish first (the fd and the staging
        buffer are still in use); calling it from inside a read on the same thread is an error.
        Closing twice, or closing a file whose constructor failed, does nothing.
        """
        lock = self.__dict__.get("_lock")
        if lock is None:  # __init__ never got as far as the lock: nothing is held
            return
        if lock._is_owned():
            raise RuntimeError(f"close() of {self.path} called from inside a read of it on this thread")
        if sys.is_finalizing():
            # Interpreter exit: a daemon thread frozen in a read may hold the lock for good; never wait for it.
            if not lock.acquire(blocking=False):
                return
        else:
            lock.acquire()
        try:
            self._release(wait=True)
        finally:
            lock.release()

    def _release(self, *, wait: bool) -> None:
        """Give back whatever is held (pool, fd, staging, reservation), each once; the caller holds the lock."""
        pool, self._pool = self.__dict__.get("_pool"), None
        ring, self._ring = self.__dict__.get("_ring"), None
        if ring is not None:
            ring.close()  # before the fd and the staging buffer it reads into
        fd, self._fd = self.__dict__.get("_fd", -1), -1
        res, self._res = self.__dict__.get("_res"), None
        # Dropping the last references unmaps the buffer (views may still be alive in callers).
        self._staging = None
        self._mm = None
        try:
            if pool is not None:
                pool.shutdown(wait=wait)
        finally:
            try:
                if fd >= 0:
                    os.close(fd)
            finally:
                if res is not None:
                    res.release()

    def __enter__(self) -> "DirectFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # Best effort and never blocking: no read can be running (it would hold a reference),
        # but at interpreter exit the lock may belong to a frozen daemon thread; and the pool's
        # threads are not joined (this may run on one of them, or after they were joined).
        lock = self.__dict__.get("_lock")
        if lock is None or not lock.acquire(blocking=False):
            return
        try:
            self._release(wait=False)
        except Exception:
            pass
        finally:
            lock.release()


def _settle(futures: list) -> None:
    """After one request of a read failed: cancel the workers not started and wait for the running ones.

    Until they stop they write into the staging buffer and the caller's output, so the read
    must not give up its lock (or return) before. A second Ctrl-C does not cut the wait short;
    the workers finish their share of the read, then the first error is raised.
    """
    for f in futures:
        f.cancel()
    while True:
        try:
            wait_futures(futures)
            return
        except BaseException:  # interrupted again: the threads still run, keep waiting
            continue


@dataclass
class DiskModel:
    """Time of a read plan: ``requests * seconds_per_request + bytes / bytes_per_second``.

    ``seconds_per_request`` is the effective (queue-depth-parallel) cost of one small random
    request; ``bytes_per_second`` the sequential bandwidth. Fit both with :meth:`fit`.
    """

    seconds_per_request: float = 80e-6
    bytes_per_second: float = 1e9

    def cost(self, requests: float, nbytes: float) -> float:
        """Predicted seconds for `requests` requests moving `nbytes` bytes."""
        return requests * self.seconds_per_request + nbytes / self.bytes_per_second

    def scaled(self, factor: float) -> "DiskModel":
        """Return this model with every plan `factor` times slower (calibration to a workload)."""
        factor = max(1e-3, float(factor))
        return DiskModel(self.seconds_per_request * factor, self.bytes_per_second / factor)

    @property
    def break_even_gap(self) -> int:
        """Largest gap (pages) that is cheaper to read through than to skip with a new request."""
        return int(self.seconds_per_request * self.bytes_per_second // PAGE)

    def plan_cost(self, pages: np.ndarray, gap_pages: int, max_run_pages: int = 64) -> tuple[float, int, int]:
        """Return (seconds, requests, bytes) predicted for reading sorted unique `pages` with `gap_pages`."""
        n = int(pages.size)
        if n == 0:
            return 0.0, 0, 0
        gaps = _gap_stats(np.ascontiguousarray(pages, np.int64))
        k = int(np.searchsorted(gaps, min(gap_pages, SWEEP), side="right"))
        read_pages = n + int(gaps[:k].sum())
        runs = 1 + (gaps.size - k)
        runs = max(runs, -(-read_pages // max_run_pages))
        nbytes = read_pages * PAGE
        return self.cost(runs, nbytes), runs, nbytes

    def best_gap(self, pages: np.ndarray, max_request: int = 256 << 10,
                 sweep_request: int = 1 << 20) -> tuple[int, float, str]:
        """Return (gap_pages, predicted seconds, mode) of the cheapest plan for these pages.

        Modes: "random" (page-sharing only), "coalesced" (gaps up to the break-even gap are read
        through) and "sweep" (the whole region, in large sequential requests).
        """
        cands = {"random": (0, max_request // PAGE), "coalesced": (max(1, self.break_even_gap), max_request // PAGE),
                 "sweep": (SWEEP, sweep_request // PAGE)}
        best = None
        for mode, (g, cap) in cands.items():
            t = self.plan_cost(pages, g, cap)[0]
            if best is None or t < best[1]:
                best = (g, t, mode)
        return best  # type: ignore[return-value]

    @classmethod
    def fit(cls, f: DirectFile, *, requests: int = 2000, sweep_bytes: int = 64 << 20, seed: int = 0) -> "DiskModel":
        """Measure `f`'s device: random single-page requests at its queue depth, then a sweep."""
        rng = np.random.default_rng(seed)
        npages = max(1, f.size // PAGE)
        before = IOCounters(**{k: getattr(f.counters, k) for k in ("requests", "bytes_read", "bytes_used", "calls", "seconds")})
        f.read_extents(np.array([0]), np.array([PAGE]))  # first call: compile and fault in
        pages = unique(rng.integers(0, npages, size=min(requests, npages)))
        starts = pages * PAGE
        t0 = time.perf_counter()
        f.read_extents(starts, np.full(starts.size, PAGE, np.int64), gap_pages=0)
        t_req = (time.perf_counter() - t0) / max(1, starts.size)
        span = min(sweep_bytes, npages * PAGE)
        p0 = int(rng.integers(0, max(1, npages - span // PAGE)))
        t0 = time.perf_counter()
        f.read_extents(np.array([p0 * PAGE]), np.array([span]), gap_pages=SWEEP)
        dt = time.perf_counter() - t0
        # The sweep's own request overheads are small but not zero; take them out.
        nreq = -(-span // f.sweep_request)
        bw = span / max(1e-6, dt - nreq * t_req * 0.5)
        f.counters = before  # calibration reads are not the workload's
        return cls(seconds_per_request=t_req, bytes_per_second=bw)
