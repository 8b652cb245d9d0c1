"""The io_uring engine under concurrency: rings on several threads at once, deep queues, thousands of
4 KiB O_DIRECT reads, every completion's data checked and every submission completed exactly once."""

from __future__ import annotations

import os
import tempfile
import threading

import numba
import numpy as np
import pytest

from labkit.core.directio import PAGE, DirectFile, probe_direct
from labkit.core.directio.io_uring import load_acquire, store_release

BLOCKS = 4096  # a 16 MiB file
THREADS, ROUNDS, PER_ROUND, QD = 4, 5, 1500, 64  # 30,000 submissions, 64 in flight per ring


@numba.njit
def _bump(a, i):
    v = load_acquire(a, i)
    store_release(a, i, np.int64(v) + 0x1_0000_0001)  # wraps to 32 bits, as the ring indices do
    return load_acquire(a, i)


def test_acquire_release_helpers_read_and_write_32_bit_indices():
    a = np.array([7, 0xFFFFFFFF, 3], np.uint32)
    assert _bump(a, 0) == 8 and _bump(a, 1) == 0
    assert a.tolist() == [8, 0, 3]


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """A file of 4 KiB blocks, each holding its own byte offset (as int64s) and nothing else."""
    root = os.environ.get("LABKIT_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "data")
    if not os.path.isdir(root):
        root = str(tmp_path_factory.mktemp("uring"))
    fh = tempfile.NamedTemporaryFile(dir=root, prefix=".test-uring-", suffix=".bin", delete=False)
    try:
        offs = np.arange(BLOCKS, dtype=np.int64) * PAGE
        fh.write(np.repeat(offs, PAGE // 8).tobytes())
        fh.close()
        if not probe_direct(fh.name):
            pytest.skip("no O_DIRECT where the test data lives (LABKIT_DATA or data/ is tmpfs or refuses it)")
        with DirectFile(fh.name, queue_depth=QD, max_request=PAGE, sweep_request=PAGE, staging_bytes=QD * PAGE) as f:
            if f.engine != "io_uring":
                pytest.skip("io_uring is refused here (kernel.io_uring_disabled, a seccomp filter or an old kernel)")
        yield fh.name
    finally:
        fh.close()
        os.unlink(fh.name)


def _indices(ring):
    (sqh, sqt, _, _), (cqh, cqt, _, _) = ring.sq_at, ring.cq_at
    return int(ring.sq[sqh]), int(ring.sq[sqt]), int(ring.cq[cqh]), int(ring.cq[cqt])


def test_many_rings_deep_queues_every_completion_once(blocks, monkeypatch):
    redone = []
    real_redo = DirectFile._redo

    def redo(self, i, *a, **k):  # a completion that came back short or failed would be repaired here
        redone.append(i)
        return real_redo(self, i, *a, **k)

    monkeypatch.setattr(DirectFile, "_redo", redo)
    errors, submitted = [], [0] * THREADS
    go = threading.Barrier(THREADS)

    def reader(t: int) -> None:
        rng = np.random.default_rng(t)
        try:
            # One page per request (max_request = PAGE), QD slots of staging: each read keeps QD in flight.
            with DirectFile(blocks, queue_depth=QD, max_request=PAGE, sweep_request=PAGE, staging_bytes=QD * PAGE,
                            engine="io_uring") as f:
                ring = f._ring
                go.wait(60)
                for _ in range(ROUNDS):
                    pages = rng.choice(BLOCKS, PER_ROUND, replace=False)  # random order, no page twice
                    sh0, st0, ch0, ct0 = _indices(ring)
                    assert sh0 == st0 and ch0 == ct0  # idle between reads: nothing pending, nothing unreaped
                    out = np.full(PER_ROUND * PAGE, 0xAB, np.uint8)
                    f.read_extents(pages * PAGE, np.full(PER_ROUND, PAGE, np.int64), out)
                    assert f._ring is ring, "the read gave the ring up (io_uring_enter kept failing)"
                    sh1, st1, ch1, ct1 = _indices(ring)
                    # The kernel took exactly PER_ROUND submissions and posted exactly PER_ROUND
                    # completions, and we reaped all of them: none lost, none seen twice.
                    assert (sh1 - sh0) % 2**32 == PER_ROUND and st1 == sh1
                    assert (ch1 - ch0) % 2**32 == PER_ROUND and ct1 == ch1
                    got = out.view(np.int64).reshape(PER_ROUND, PAGE // 8)
                    want = pages.astype(np.int64)[:, None] * PAGE
                    bad = np.flatnonzero((got != want).any(axis=1))
                    assert bad.size == 0, f"blocks {pages[bad[:5]].tolist()} came back wrong"
                    submitted[t] += PER_ROUND
                assert f.engine == "io_uring" and f.counters.requests == ROUNDS * PER_ROUND
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a read never returned (a completion was lost)"
    if errors:
        raise errors[0]
    assert sum(submitted) == THREADS * ROUNDS * PER_ROUND
    assert redone == []  # every byte came from the ring, none from the pread repair path
