"""DirectFile: one file opened for O_DIRECT extent reads, and what decides how to open it (does the
filesystem take O_DIRECT, which engine runs)."""

from __future__ import annotations

import errno
import mmap
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from labkit.core.directio.io_uring import _Ring
from labkit.core.directio.planning import PAGE, SWEEP, _copy_out, _copy_run, _extents_by_run, _plan
from labkit.core.directio.pread import _pread_copy, run_workers
from labkit.core.errors import LabkitError, bad_value, check_choice, check_range
from labkit.core.machine import mounts
from labkit.core.memory import BudgetExceeded, MemoryBudget, Reservation

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

        run_workers(self._pool, worker, qd)

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

        run_workers(self._pool, worker, qd)

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

