"""The io_uring engine: a ring of our own, set up and driven with raw system calls from one compiled
loop (numba, no GIL) that keeps ``queue_depth`` reads in flight and copies each run out as it lands."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from labkit.core.directio.planning import PAGE, _copy_run
from labkit.core.directio.pread import _libc_fn
from labkit.core.intrinsics import item_pointer
from labkit.core.memory import Reservation


# -- memory ordering on the shared ring indices ----------------------------------------------------
# The rings are memory the kernel writes while we read them: completions land (CQEs, then the CQ
# tail) from whatever context finishes the I/O, on any CPU. liburing's rule, kept here: the kernel's
# indices (SQ head, CQ tail) are read with acquire, so the CQEs (and the staging bytes they report)
# read after a tail are the ones it published; ours (SQ tail, CQ head) are written with release, so
# the SQEs are complete before the kernel sees the tail move past them, and a CQE has been read
# before the kernel sees its slot free. Plain numpy loads and stores give no such promise: LLVM may
# reorder or cache them. These two are LLVM atomics (``load atomic ... acquire``, ``store atomic
# ... release`` on an aligned 32-bit index): on x86-64 (TSO) a plain ``mov`` the compiler keeps in
# order, on aarch64 ``ldar``/``stlr``, on any other target what LLVM emits for C11 atomics. Every
# access to a ring's head or tail goes through them, our own indices' reads included (one rule,
# free on x86-64, cheap beside a system call elsewhere).

@intrinsic
def load_acquire(typingctx, arr, i):
    """arr[i] of a 1-d uint32 array, loaded with acquire ordering (io_uring_smp_load_acquire)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32
            and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = item_pointer(context, builder, sig.args[0], ary, [context.cast(builder, args[1], sig.args[1], types.intp)])
        return builder.load_atomic(ptr, "acquire", 4)
    return types.uint32(arr, i), codegen


@intrinsic
def store_release(typingctx, arr, i, v):
    """Set arr[i] of a 1-d uint32 array to v with release ordering (io_uring_smp_store_release)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.uint32
            and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = item_pointer(context, builder, sig.args[0], ary, [context.cast(builder, args[1], sig.args[1], types.intp)])
        builder.store_atomic(context.cast(builder, args[2], sig.args[2], types.uint32), ptr, "release", 4)
        return context.get_dummy_value()
    return types.void(arr, i, v), codegen


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
        head = np.int64(load_acquire(cq, cqh))
        tail = np.int64(load_acquire(cq, cqt))  # the CQEs up to it are read after it
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
        store_release(cq, cqh, head)  # every CQE taken is read before the kernel may reuse its slot
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
        head0 = np.int64(load_acquire(sq, sqh))
        while done < n:
            tail = np.int64(load_acquire(sq, sqt))
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
            store_release(sq, sqt, tail)  # the SQEs and array slots above are whole before the kernel sees it
            # Submit what the kernel has not taken yet and wait for at least one completion.
            pending = (tail - np.int64(load_acquire(sq, sqh))) & 0xFFFFFFFF
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
        head = np.int64(load_acquire(sq, sqh))
        store_release(sq, sqt, head)
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

