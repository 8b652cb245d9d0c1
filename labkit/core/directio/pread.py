"""The threads engine: a pool of ``queue_depth`` threads, each streaming its share of the runs
through one staging slot with a compiled loop of libc ``pread(2)`` calls (numba, no GIL)."""

from __future__ import annotations

import ctypes
from concurrent.futures import wait as wait_futures

import numba

from labkit.core.directio.planning import _copy_run


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


def run_workers(pool, worker, qd: int) -> None:
    """Run ``worker(0..qd-1)``, on this thread when qd is 1, else on `pool`; if one fails, the others
    are cancelled or waited for (:func:`_settle`) before the error is raised."""
    if qd == 1:
        worker(0)
        return
    futures = []
    try:
        for w in range(qd):
            futures.append(pool.submit(worker, w))
        for f in futures:
            f.result()
    except BaseException:
        _settle(futures)
        raise


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

