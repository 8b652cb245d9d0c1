"""Ginex's superbatch on disk: sampled mini-batches written to a file, read back with direct I/O.

Ginex samples a whole superbatch (hundreds to thousands of mini-batches) before it gathers any
features, so it can plan its feature cache with Belady's rule over them. The sampled superbatch
does not fit in RAM, so Ginex writes each sampled mini-batch to the SSD, runs an *inspection*
pass over them (each node's next use, which drives the cache's evictions), and reads each
mini-batch back when it trains it. :class:`SampleSpill` is that file:

- :meth:`write` appends one :class:`~labkit.disk.sampler.SampledBatch` (its arrays, page
  aligned) and :meth:`flush` makes the superbatch durable and drops it from the page cache
  (``fdatasync`` + ``POSIX_FADV_DONTNEED``), so no copy of it stays in RAM;
- :meth:`inspect` reads the superbatch's node ids back from disk, newest first, and writes,
  per mini-batch, each node's next use in the superbatch (Ginex's inspection pass); it returns
  each node's first use, which the cache needs for the rows it already holds;
- :meth:`read` returns mini-batch ``k`` and its next-use array, read from disk.

Reads go through ``O_DIRECT`` into one page-aligned buffer reserved from the memory budget
(where the filesystem refuses ``O_DIRECT``, through the page cache with the range dropped
after each read, as the stores' fallback does). The file lives in a temporary folder beside
the dataset (the disk under test) and is removed on :meth:`close`.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass

import numpy as np

from labkit.core.cacheplan import NEVER  # a node with no next use in the superbatch
from labkit.core.directio import PAGE, probe_direct
from labkit.core.memory import MemoryBudget
from labkit.disk.sampler import SampledBatch


def _pages(nbytes: int) -> int:
    return -(-int(nbytes) // PAGE) * PAGE


@dataclass
class _Record:
    index: int
    batch_size: int
    offset: int
    sizes: tuple[int, int, int, int, int]  # elements of n_id, edge_src, edge_dst, node_hops, edge_hops
    nbytes: int                            # page-rounded bytes of the record
    next_offset: int = -1                  # where its next-use array lies (after inspection)


_FIELDS = ((np.int64, "n_id"), (np.int32, "edge_src"), (np.int32, "edge_dst"), (np.int64, "node_hops"),
           (np.int64, "edge_hops"))


def _cleanup(fds: list[int], folder: str) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


class SampleSpill:
    """One superbatch of sampled mini-batches on disk (see the module doc)."""

    def __init__(self, directory: str | os.PathLike, budget: MemoryBudget, num_nodes: int, *,
                 buffer_bytes: int = 1 << 20, owner: str = "superbatch spill") -> None:
        self.budget, self.num_nodes = budget, int(num_nodes)
        # Reserve first (the read buffer and the inspection's first-use map): a refused reservation opens nothing.
        self._res = budget.reserve(owner + " (read buffer)", _pages(buffer_bytes))
        try:
            self._map_res = budget.reserve(owner + " (inspection: first use per node)", self.num_nodes * 4)
        except BaseException:
            self._res.release()
            raise
        self.folder = tempfile.mkdtemp(prefix="labkit-superbatch-", dir=str(directory))
        self.path = os.path.join(self.folder, "superbatch.bin")
        self._fds: list[int] = []
        self._finalizer = weakref.finalize(self, _cleanup, self._fds, self.folder)
        try:
            self._w = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            self._fds.append(self._w)
            self.direct = probe_direct(self.path)
            self._r = os.open(self.path, os.O_RDONLY | (os.O_DIRECT if self.direct else 0))
            self._fds.append(self._r)
            if not self.direct:
                os.posix_fadvise(self._r, 0, 0, os.POSIX_FADV_RANDOM)
            self._mm = mmap.mmap(-1, self._res.nbytes)  # page aligned, as O_DIRECT needs
        except BaseException:
            self.close()
            raise
        self.records: list[_Record] = []
        self._end = 0
        #: Bytes written and read, and requests, since the spill opened (or counters were reset).
        self.bytes_written = self.bytes_read = self.reads = 0

    # -- writing ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Start a new superbatch: forget the records (the file's space is reused)."""
        self.records.clear()
        self._end = 0

    def write(self, b: SampledBatch) -> None:
        """Append mini-batch `b` to the superbatch on disk."""
        arrays = [np.ascontiguousarray(getattr(b, name), dt) for dt, name in _FIELDS]
        raw = sum(a.nbytes for a in arrays)
        nbytes = _pages(raw)
        pad = np.zeros(nbytes - raw, np.uint8)
        rec = _Record(int(b.index), int(b.batch_size), self._end, tuple(a.size for a in arrays), nbytes)
        self._pwrite([*arrays, pad], rec.offset)
        self.records.append(rec)
        self._end += nbytes

    def _pwrite(self, buffers: list, offset: int) -> None:
        views = [memoryview(a).cast("B") for a in buffers if a.nbytes]
        total = sum(v.nbytes for v in views)
        done = 0
        while done < total:  # a short write continues where it stopped
            n = os.pwritev(self._w, views, offset + done)
            done += n
            if done < total:
                flat = b"".join(bytes(v) for v in views)[done:]
                views = [memoryview(flat)]
                total, offset, done = len(flat), offset + done, 0
        self.bytes_written += total

    def flush(self) -> None:
        """Make what was written durable and drop it from the page cache: from here it lives on disk only."""
        os.fdatasync(self._w)
        os.posix_fadvise(self._w, 0, 0, os.POSIX_FADV_DONTNEED)

    # -- reading ----------------------------------------------------------------------------
    def _read(self, offset: int, nbytes: int) -> memoryview:
        """Read `nbytes` (page-rounded) at `offset` from disk into the aligned buffer; return the bytes."""
        n = _pages(nbytes)
        if n > self._res.nbytes:  # a larger record than any so far: grow the buffer within the budget
            self._res.resize(n)
            self._mm = mmap.mmap(-1, n)  # the old one closes once no array still views it
        view = memoryview(self._mm)[:n]
        got = os.preadv(self._r, [view], offset)
        if got < nbytes:
            raise OSError(f"short read of the superbatch file: {got} of {nbytes} bytes at offset {offset}")
        if not self.direct:  # read through the page cache: do not keep what was read
            os.posix_fadvise(self._r, offset, n, os.POSIX_FADV_DONTNEED)
        self.bytes_read += n
        self.reads += 1
        return view[:nbytes]

    def inspect(self) -> np.ndarray:
        """Ginex's inspection pass: write each mini-batch's next-use array; return each node's first use.

        The node ids are read back from disk newest first; ``next[k][i]`` is the position in the
        superbatch of the next mini-batch that needs node ``n_id[i]`` of mini-batch ``k`` (NEVER
        if none). The returned first-use map (int32 over all nodes, NEVER where unused) is the
        one array over the nodes inspection holds (reserved from the budget at opening).
        """
        self.flush()
        last = np.full(self.num_nodes, NEVER, np.int32)
        for k in range(len(self.records) - 1, -1, -1):
            rec = self.records[k]
            n = rec.sizes[0]
            n_id = np.frombuffer(self._read(rec.offset, n * 8), np.int64, n)
            nxt = last[n_id]
            last[n_id] = k
            del n_id
            rec.next_offset = self._end
            self._pwrite([nxt, np.zeros(_pages(nxt.nbytes) - nxt.nbytes, np.uint8)], self._end)
            self._end += _pages(nxt.nbytes)
        self.flush()
        return last

    def read(self, k: int) -> tuple[SampledBatch, np.ndarray]:
        """Return mini-batch `k` of the superbatch and its next-use array, read back from disk."""
        rec = self.records[k]
        raw = self._read(rec.offset, rec.nbytes)
        out, at = [], 0
        for (dt, _), size in zip(_FIELDS, rec.sizes):
            a = np.frombuffer(raw, dt, size, at).copy()
            at += a.nbytes
            out.append(a)
        n = rec.sizes[0]
        nxt = np.frombuffer(self._read(rec.next_offset, n * 4), np.int32, n).copy() if rec.next_offset >= 0 \
            else np.full(n, NEVER, np.int32)
        return SampledBatch(rec.index, *out, rec.batch_size), nxt

    def close(self) -> None:
        """Remove the file and its folder and release the budget's reservations."""
        mm = getattr(self, "_mm", None)
        if mm is not None:
            mm.close()
            self._mm = None
        self._finalizer()
        self._res.release()
        self._map_res.release()
