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
read amplification is ``bytes_read / bytes_used``. (The disk system's cost model, which says
which gap is cheapest for a given set of pages, is :class:`labkit.disk.costmodel.DiskModel`.)

``O_DIRECT`` keeps the OS page cache out of the way, so a memory budget means what it says.
On a filesystem without it (tmpfs) :class:`DirectFile` raises :class:`DirectIOUnsupported`, or
with ``fallback=True`` reads through the page cache and drops the pages after every request
(``POSIX_FADV_DONTNEED``); ``DirectFile.direct`` says which one is in use.

Two engines issue the requests. ``io_uring`` (the default where the kernel allows it): one
compiled loop (numba, no GIL) on the reading thread keeps ``queue_depth`` reads in flight through
an io_uring ring of its own, set up with raw system calls (no binding needed), with the staging
buffer registered once (``IORING_OP_READ_FIXED``: the kernel pins its pages once, not per
request); it submits and reaps in batches, one ``io_uring_enter`` per round, and touches the ring's
shared heads and tails only through ``io_uring.load_acquire``/``store_release`` (liburing's memory
ordering, as LLVM atomics). ``threads``: a pool
of ``queue_depth`` threads, each running a compiled loop of ``pread(2)`` calls (numba calling
libc). Both stream through slots of the staging buffer and copy each request's extents out as
it lands. Measured on the 2-core VM this lab was built on, 13,783 random 4 KiB reads at queue
depth 16 cost about 60 ms of machine-wide CPU through the ring against about 150 ms through the
threads (a pinned buffer and a wake-up per request), at the same or a higher request rate. The
PyPI bindings were tried first and none fits: ``liburing`` (2026.3.30) dies with SIGILL on CPUs
without AVX-512 (its wheel's ``Ring()`` runs ``vmovups %zmm0``), and ``uring-api`` (0.1.0rc5)
prepares and completes every request in Python, under the GIL (so does any Python-level binding:
the compiled loop cannot call it). Where io_uring is refused
(``kernel.io_uring_disabled``, a seccomp filter, an old kernel), or a test read of the file's
first page through the ring at open does not come back whole, ``engine="auto"`` uses the
threads; ``DirectFile.engine`` says which one runs, and ``LABKIT_IO_ENGINE=threads`` (or
``io_uring``) picks one for a whole process, for side-by-side runs.

The package splits the engine by job: :mod:`.planning` (extents, page math, coalescing, the copy
out of staging), :mod:`.pread` (the threads engine), :mod:`.io_uring` (the ring, raw system calls)
and :mod:`.file` (:class:`DirectFile` and what decides how a file is opened).
"""

from labkit.core.directio.file import (ENGINES, RAM_FILESYSTEMS, DirectFile, DirectIOUnsupported, IOCounters,
                                       filesystem_type, probe_direct)
from labkit.core.directio.planning import PAGE, SWEEP, extent_pages

__all__ = ["ENGINES", "PAGE", "RAM_FILESYSTEMS", "SWEEP", "DirectFile", "DirectIOUnsupported", "IOCounters",
           "extent_pages", "filesystem_type", "probe_direct"]
