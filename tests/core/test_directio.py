"""The direct-I/O engine returns exactly the requested bytes and counts what it read."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.directio import PAGE, SWEEP, DirectFile, DirectIOUnsupported, extent_pages, probe_direct
from labkit.core.directio import file as dfile
from labkit.core.errors import LabkitError
from labkit.core.memory import BudgetExceeded, MemoryBudget

SIZE = 64 * PAGE


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    # pytest's tmp dir may be tmpfs, where O_DIRECT is refused; the data folder (LABKIT_DATA, or
    # the repo's data/) is on the real disk. The blob there gets a fresh unique name (no clash
    # with a user's file or a parallel run) and is always removed.
    root = os.environ.get("LABKIT_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "data")
    if not os.path.isdir(root):
        root = str(tmp_path_factory.mktemp("dio"))
    fh = tempfile.NamedTemporaryFile(dir=root, prefix=".test-directio-", suffix=".bin", delete=False)
    try:
        data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8)
        fh.write(data.tobytes())
        fh.close()
        yield fh.name, data
    finally:
        fh.close()
        os.unlink(fh.name)


def _open(path, **kw):
    return DirectFile(path, fallback=True, staging_bytes=16 * PAGE, max_request=8 * PAGE,
                      sweep_request=8 * PAGE, **kw)


def _ring_available(path) -> bool:
    with _open(path) as f:
        return f.engine == "io_uring"


#: Both engines of the direct path; io_uring is skipped where the kernel refuses it.
ENGINE_PARAMS = [pytest.param("io_uring", id="io_uring"), pytest.param("threads", id="threads")]


def _need(engine, path):
    if engine == "io_uring" and not _ring_available(path):
        pytest.skip("io_uring is refused here (or data/ has no O_DIRECT)")


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, SIZE - 1), st.integers(0, 3 * PAGE)), min_size=0, max_size=40),
       st.sampled_from([0, 1, 3, SWEEP]), st.sampled_from([1, 4]))
def test_extents_match_memory(blob, engine, ext, gap, qd):
    path, data = blob
    _need(engine, path)
    starts = np.array([s for s, _ in ext], np.int64)
    lengths = np.array([min(n, SIZE - s) for s, n in ext], np.int64)
    with _open(path, queue_depth=qd, engine=engine) as f:
        got = f.read_extents(starts, lengths, gap_pages=gap)
        want = np.concatenate([data[s:s + n] for s, n in zip(starts, lengths)] or [np.zeros(0, np.uint8)])
        assert np.array_equal(got, want)
        assert f.counters.bytes_used == int(lengths.sum())
        if lengths.sum():
            assert f.counters.bytes_read >= len(extent_pages(starts, lengths)) * PAGE


def test_rows_share_pages_and_coalesce(blob):
    path, data = blob
    rows = np.array([0, 1, 2, 3, 40, 41, 200], np.int64)  # 512-byte rows: pages 0, 5, 25
    with _open(path) as f:
        got = f.read_rows(rows, 512)
        assert np.array_equal(got, data.reshape(-1, 512)[rows])
        assert f.counters.requests == 3 and f.counters.bytes_read == 3 * PAGE
        f.counters.reset()
        f.read_rows(rows, 512, gap_pages=4)  # pages 0 and 5 join, 25 stays apart
        assert f.counters.requests == 2 and f.counters.bytes_read == (6 + 1) * PAGE
        f.counters.reset()
        # A sweep reads through gaps in requests of at most 8 pages; a gap as long as a
        # whole request is skipped rather than read.
        got = f.read_rows(rows, 512, gap_pages=SWEEP)
        assert np.array_equal(got, data.reshape(-1, 512)[rows])
        assert f.counters.bytes_read == 7 * PAGE and f.counters.requests == 2
        assert f.counters.read_amplification == pytest.approx(7 * PAGE / (7 * 512))
        f.counters.reset()
        f.read_rows(np.arange(0, 8 * 24, 3), 512, gap_pages=SWEEP)  # 24 pages, 3 requests
        assert f.counters.bytes_read == 24 * PAGE and f.counters.requests == 3


def test_direct_really_used_on_data_disk(blob):
    path, _ = blob
    if not probe_direct(path):
        pytest.skip("data/ is not on an O_DIRECT filesystem here")
    with DirectFile(path) as f:
        assert f.direct


def test_tmpfs_refused_or_stated(tmp_path):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix=".labkit-directio-test-", suffix=".bin",
                                     delete=False) as fh:  # a unique name: never someone else's file
        p = fh.name
    try:
        np.zeros(2 * PAGE, np.uint8).tofile(p)
        assert not probe_direct(p)  # refused, or accepted but RAM-backed: either way not a disk
        with pytest.raises(DirectIOUnsupported, match="O_DIRECT"):
            DirectFile(p)
        with DirectFile(p, fallback=True) as f:
            assert not f.direct
            assert f.read_rows(np.array([1]), 512).sum() == 0
    finally:
        os.unlink(p)


def test_staging_is_charged_to_budget(blob):
    path, _ = blob
    b = MemoryBudget(20 * PAGE)
    with _open(path, budget=b) as f:
        ring = f._ring.nbytes if f._ring else 0  # an io_uring ring's pages are charged beside it
        assert b.used == 16 * PAGE + ring
        with pytest.raises(BudgetExceeded):
            _open(path, budget=b)
    assert b.used == 0


def test_bad_input(blob):
    path, _ = blob
    with pytest.raises(ValueError, match="queue_depth=0"):
        DirectFile(path, queue_depth=0, fallback=True)
    with pytest.raises(ValueError, match="staging_bytes=5000"):
        DirectFile(path, staging_bytes=5000, fallback=True)
    with pytest.raises(ValueError, match="path="):
        DirectFile(path + ".missing")
    with _open(path) as f, pytest.raises(LabkitError, match=rf"extent 1 of .*=\({SIZE - 10}, 20\) is not accepted"):
        f.read_extents(np.array([0, SIZE - 10]), np.array([8, 20]))


def test_long_extent_is_split(blob):
    path, data = blob
    with _open(path) as f:  # requests hold at most 8 pages; this extent spans 40
        got = f.read_extents(np.array([100]), np.array([40 * PAGE]), gap_pages=0)
        assert np.array_equal(got, data[100:100 + 40 * PAGE])
        got = f.read_extents(np.array([5, 100]), np.array([3, 20 * PAGE]), gap_pages=SWEEP)
        assert np.array_equal(got, np.concatenate([data[5:8], data[100:100 + 20 * PAGE]]))


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize("qd", [1, 4])
def test_file_truncated_under_a_reader_is_a_clear_error(blob, qd, engine):
    path, data = blob
    _need(engine, path)
    copy = path + ".trunc"
    data.tofile(copy)
    try:
        with _open(copy, queue_depth=qd, engine=engine) as f:
            os.truncate(copy, SIZE // 2)  # shrinks after open: reads past the new end come back short
            with pytest.raises(OSError, match="short read"):
                f.read_extents(np.arange(0, SIZE - PAGE, 2 * PAGE, dtype=np.int64), np.full(32, 100, np.int64))
            got = f.read_extents(np.array([5], np.int64), np.array([100], np.int64))  # the file still works
            assert np.array_equal(got, data[5:105])
    finally:
        os.unlink(copy)


# -- failure paths: nothing leaks, nothing keeps writing ------------------------------------------

def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_refused_reservation_opens_no_fd(blob):
    path, _ = blob
    b = MemoryBudget(20 * PAGE)
    with _open(path, budget=b) as f:
        n0 = _open_fds()
        for _ in range(5):
            with pytest.raises(BudgetExceeded):
                _open(path, budget=b)
        assert _open_fds() == n0  # was one leaked fd per refused call
        assert b.used == 16 * PAGE + (f._ring.nbytes if f._ring else 0)
    assert b.used == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_failed_construction_gives_everything_back(blob, monkeypatch):
    path, _ = blob
    b = MemoryBudget(20 * PAGE)
    n0 = _open_fds()

    def no_pool(*a, **k):
        raise OSError("cannot start threads")

    monkeypatch.setattr(dfile, "ThreadPoolExecutor", no_pool)  # fails after the fd is open
    with pytest.raises(OSError, match="cannot start threads"):
        _open(path, budget=b)
    assert _open_fds() == n0 and b.used == 0
    monkeypatch.undo()
    # A half-built object (as __del__ may see one) closes without error, as does a closed one.
    DirectFile.__new__(DirectFile).close()
    DirectFile.__new__(DirectFile).__del__()
    f = _open(path, budget=b)
    f.close()
    f.close()
    f.__del__()
    assert b.used == 0 and _open_fds() == n0
    with pytest.raises(ValueError, match="after close"):
        f.read_extents(np.array([0]), np.array([10]))


class _Laggards:
    """Records the I/O threads a read started that are still running, and when each stopped."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.started = 0
        self.stopped = []

    def run(self, work, seconds=0.3):
        with self.lock:
            self.running += 1
            self.started += 1
        try:
            time.sleep(seconds)
            work()
        finally:
            with self.lock:
                self.running -= 1
                self.stopped.append(time.perf_counter())

    def wait_started(self, n=3, timeout=60.0):
        """Block until `n` siblings run (so the failing request fails while they are all busy, not
        before a loaded machine got them started: those not started are cancelled, not waited for)."""
        end = time.perf_counter() + timeout
        while self.started < n:
            if time.perf_counter() > end:
                raise AssertionError(f"only {self.started} of {n} sibling reads started within {timeout} s")
            time.sleep(0.001)


# Four single pages far apart: four runs, so four I/O threads, one request each (the first page first).
_PAGES = np.array([0, 20, 40, 60], np.int64) * PAGE


def _assert_nothing_writes_after(f, lag, exc, out):
    with pytest.raises(exc, match="request failed"):
        f.read_extents(_PAGES, np.full(4, 100, np.int64), out)
    returned = time.perf_counter()
    assert lag.running == 0, "I/O threads still running after the failed read returned"
    assert len(lag.stopped) == 3 and max(lag.stopped) <= returned
    snap = out.copy()
    time.sleep(0.5)
    assert np.array_equal(out, snap)  # nothing wrote into the caller's output after the return


@pytest.mark.parametrize("exc", [OSError, KeyboardInterrupt])
def test_failed_streamed_read_stops_its_threads_first(blob, monkeypatch, exc):
    path, data = blob
    lag = _Laggards()

    def pread_copy(fd, addr, staging, slot, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, out,
                   first, step):
        if first == 0:
            lag.wait_started()
            raise exc("request failed")
        lag.run(lambda: out.fill(7))  # a slow sibling: lands late, then copies into the output
        return -1

    with _open(path, queue_depth=4, engine="threads") as f:
        f.direct = True  # the streamed path, whatever the disk here supports (the fd is not used)
        monkeypatch.setattr(dfile, "_pread_copy", pread_copy)
        _assert_nothing_writes_after(f, lag, exc, np.zeros(400, np.uint8))
        monkeypatch.undo()
        f.direct = probe_direct(path)
        assert np.array_equal(f.read_extents(_PAGES, np.full(4, 100, np.int64)),
                              np.concatenate([data[p:p + 100] for p in _PAGES]))


@pytest.mark.parametrize("exc", [OSError, KeyboardInterrupt])
def test_failed_wave_read_stops_its_threads_first(blob, monkeypatch, exc):
    path, data = blob
    lag = _Laggards()
    real = os.preadv

    def preadv(fd, bufs, offset, *a):
        if offset == 0:
            lag.wait_started()
            raise exc("request failed")
        box = []
        lag.run(lambda: box.append(real(fd, bufs, offset, *a)))  # lands late in the staging buffer
        return box[0]

    with _open(path, queue_depth=4) as f:
        f.direct = False  # the page-cache fallback's waves, read from Python
        monkeypatch.setattr(os, "preadv", preadv)
        out = np.zeros(400, np.uint8)
        with pytest.raises(exc, match="request failed"):
            f.read_extents(_PAGES, np.full(4, 100, np.int64), out)
        returned = time.perf_counter()
        assert lag.running == 0, "I/O threads still running after the failed read returned"
        assert len(lag.stopped) == 3 and max(lag.stopped) <= returned
        monkeypatch.undo()
        assert np.array_equal(f.read_extents(_PAGES, np.full(4, 100, np.int64)),
                              np.concatenate([data[p:p + 100] for p in _PAGES]))


def test_close_waits_for_a_read_in_progress(blob, monkeypatch):
    path, data = blob
    events, errors = [], []
    started = threading.Event()

    def pread_copy(fd, addr, staging, slot, offs, lens, want, ext_ptr, ext_list, ext_off, lengths, dst, out,
                   first, step):
        started.set()
        time.sleep(0.3)
        os.fstat(fd)  # the fd is still this file's
        events.append("read done")
        return -1

    f = _open(path, queue_depth=1, engine="threads")  # one request: the read runs on the caller's thread, not the pool's
    f.direct = True
    monkeypatch.setattr(dfile, "_pread_copy", pread_copy)

    def reader():
        try:
            f.read_extents(np.array([0]), np.array([10]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    assert started.wait(60)
    f.close()
    events.append("closed")
    t.join(5)
    assert errors == [] and events == ["read done", "closed"]


def test_close_inside_a_read_is_refused(blob, monkeypatch):
    path, data = blob
    f = _open(path, queue_depth=1, engine="threads")
    f.direct = True

    def pread_copy(*args):
        f.close()  # e.g. from a signal handler on the reading thread: must not pull the fd away
        return -1

    monkeypatch.setattr(dfile, "_pread_copy", pread_copy)
    with pytest.raises(RuntimeError, match="inside a read"):
        f.read_extents(np.array([0]), np.array([10]))
    monkeypatch.undo()
    f.direct = probe_direct(path)
    assert np.array_equal(f.read_extents(np.array([5]), np.array([10])), data[5:15])  # still open, still right
    f.close()



@pytest.mark.parametrize("how", ["__del__", "close at interpreter exit"])
def test_finalizing_never_waits_for_a_lock_held_elsewhere(blob, monkeypatch, how):
    # At interpreter exit a daemon thread (the pipeline's stages are daemons) may be frozen while
    # it holds the file's lock: finalizing the file must neither block on it nor pull the fd away.
    path, data = blob
    f = _open(path)
    held, leave, leaving = threading.Event(), threading.Event(), threading.Event()

    class Watched:
        """The file's lock, noting every acquire that may wait (blocking, without a zero timeout)."""

        def __init__(self, lock):
            self.lock, self.waits = lock, []

        def acquire(self, blocking=True, timeout=-1):
            if blocking and timeout != 0:
                self.waits.append(threading.current_thread().name)
            return self.lock.acquire(blocking, timeout)

        def release(self):
            self.lock.release()

        def _is_owned(self):
            return self.lock._is_owned()

        def __enter__(self):
            return self.acquire()

        def __exit__(self, *exc):
            self.release()

    def frozen():
        with f._lock:
            held.set()
            leave.wait(60)
            leaving.set()  # still holding the lock

    f._lock = Watched(f._lock)
    t = threading.Thread(target=frozen, name="frozen", daemon=True)
    t.start()
    assert held.wait(60)
    try:
        if how == "__del__":
            f.__del__()
        else:
            monkeypatch.setattr(dfile.sys, "is_finalizing", lambda: True)
            f.close()
        # It returned while the frozen thread still held the lock (so it did not wait for the lock
        # to be let go), and it never tried a wait on the lock (not even a bounded one).
        assert not leaving.is_set() and t.is_alive()
        assert f._lock.waits == ["frozen"]
        assert f._fd >= 0  # left alone: the lock's holder may still be reading
    finally:
        leave.set()
        t.join(5)
    monkeypatch.undo()
    assert np.array_equal(f.read_extents(np.array([5]), np.array([10])), data[5:15])
    f.close()
    assert f._fd < 0


# -- the io_uring engine ------------------------------------------------------------------------

_ROWS = np.arange(0, SIZE // 512, 5, dtype=np.int64)  # 512-byte rows over every page


def test_ring_requests_that_fail_are_read_again(blob, monkeypatch):
    """Completions with an error (here EBADF: the requests name a file descriptor that is not open)
    mark their runs bad; each is read again with pread, so the caller still gets every byte."""
    path, data = blob
    _need("io_uring", path)
    real = dfile._Ring.read

    def bad_fd(self, fd, *a):
        return real(self, 1 << 20, *a)
    with _open(path, queue_depth=4, engine="io_uring") as f:
        monkeypatch.setattr(dfile._Ring, "read", bad_fd)
        got = f.read_rows(_ROWS, 512)
        assert np.array_equal(got, data.reshape(-1, 512)[_ROWS])
        assert f.engine == "io_uring"  # a failed request is not a failed ring


def test_a_ring_that_keeps_failing_hands_over_to_the_threads(blob):
    """io_uring_enter failing every time (the ring's fd is not open): the read gives the ring up after
    its retries, with nothing in flight, reads every run with pread and uses the threads from then on."""
    path, data = blob
    _need("io_uring", path)
    with _open(path, queue_depth=4, engine="io_uring") as f:
        ring = f._ring
        real_fd, ring.fd = ring.fd, os.open(os.devnull, os.O_RDONLY)  # not a ring: every enter fails
        try:
            got = f.read_rows(_ROWS, 512)
        finally:
            os.close(real_fd)
        assert np.array_equal(got, data.reshape(-1, 512)[_ROWS])
        assert f.engine == "threads" and f._ring is None
        assert np.array_equal(f.read_rows(_ROWS[::-1], 512), data.reshape(-1, 512)[_ROWS[::-1]])


def test_engine_choice_and_refusal(blob, monkeypatch):
    path, _ = blob
    if not probe_direct(path):
        pytest.skip("data/ is not on an O_DIRECT filesystem here")
    with pytest.raises(ValueError, match="engine='uring' is not accepted"):
        DirectFile(path, engine="uring")

    def refused(self, entries, staging):
        self.fd = -1
        raise OSError(1, "io_uring_setup: Operation not permitted")
    monkeypatch.setattr(dfile._Ring, "__init__", refused)
    with DirectFile(path) as f:  # auto: the threads, said so
        assert f.engine == "threads"
    with pytest.raises(LabkitError, match="engine='io_uring' is not available here"):
        DirectFile(path, engine="io_uring")
    monkeypatch.undo()
    monkeypatch.setenv("LABKIT_IO_ENGINE", "threads")
    with DirectFile(path) as f:
        assert f.engine == "threads"
    monkeypatch.setenv("LABKIT_IO_ENGINE", "fast")
    with pytest.raises(ValueError, match="LABKIT_IO_ENGINE='fast' is not accepted"):
        DirectFile(path)


def test_ring_closes_with_the_file(blob):
    path, _ = blob
    _need("io_uring", path)
    n0 = len(os.listdir("/proc/self/fd"))
    f = _open(path, engine="io_uring")
    assert len(os.listdir("/proc/self/fd")) > n0 + 1  # the file, its ring (and the ring maps' duplicates)
    f.read_rows(_ROWS, 512)
    f.close()
    assert len(os.listdir("/proc/self/fd")) == n0


def test_a_ring_that_cannot_read_the_file_is_not_used(blob, monkeypatch):
    """The test read at open fails (as on a filesystem io_uring cannot read): auto takes the threads
    and closes the ring; io_uring asked for by name is refused."""
    path, data = blob
    _need("io_uring", path)

    def fails(self, ring):
        raise OSError(5, "a test read through the ring failed")
    monkeypatch.setattr(DirectFile, "_probe_ring", fails)
    n0 = len(os.listdir("/proc/self/fd"))
    with DirectFile(path) as f:
        assert f.engine == "threads" and f._ring is None
        assert len(os.listdir("/proc/self/fd")) == n0 + 1  # the file only: the ring was closed
        assert np.array_equal(f.read_rows(_ROWS, 512), data.reshape(-1, 512)[_ROWS])
    with pytest.raises(LabkitError, match="engine='io_uring' is not available here"):
        DirectFile(path, engine="io_uring")
    assert len(os.listdir("/proc/self/fd")) == n0


def test_ring_pages_are_charged_to_the_budget(blob):
    """The ring's mapped pages are reserved beside the staging buffer; a budget with room for the
    staging but not the ring gets the threads (auto) or the budget's error (io_uring by name)."""
    path, _ = blob
    _need("io_uring", path)
    b = MemoryBudget(64 * PAGE)
    with _open(path, budget=b, owner="s") as f:
        owners = b.report()["owners"]
        assert f.engine == "io_uring" and owners["s"] == 16 * PAGE
        assert owners["s io_uring ring"] == f._ring.nbytes and f._ring.nbytes % PAGE == 0 and f._ring.nbytes > 0
        assert b.used == sum(owners.values())
    assert b.used == 0
    tight = MemoryBudget(16 * PAGE + 1)
    with _open(path, budget=tight, owner="s") as f:
        assert f.engine == "threads" and tight.report()["owners"] == {"s": 16 * PAGE}
    with pytest.raises(BudgetExceeded, match="io_uring ring"):
        _open(path, budget=tight, owner="s", engine="io_uring")
    assert tight.used == 0
