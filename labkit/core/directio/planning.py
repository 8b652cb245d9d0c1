"""Read plans: which pages a set of byte extents touches, how they coalesce into requests, and the
copy of each request's extents from the staging buffer to the caller's output.

Pure page math and compiled copy loops; no file descriptors. Both engines (:mod:`.pread`,
:mod:`.io_uring`) and :class:`~labkit.core.directio.file.DirectFile` share them.
"""

from __future__ import annotations

import numba
import numpy as np

from labkit.core.arrays import unique

PAGE = 4096
#: A gap this large means "read everything between the first and the last needed page".
SWEEP = 1 << 40


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

