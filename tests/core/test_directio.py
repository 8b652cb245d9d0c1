"""The direct-I/O engine returns exactly the requested bytes and counts what it read."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.directio import (PAGE, SWEEP, DirectFile, DirectIOUnsupported, DiskModel, extent_pages,
                                  probe_direct)
from labkit.core.memory import BudgetExceeded, MemoryBudget

SIZE = 64 * PAGE


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    # pytest's tmp dir may be tmpfs; the repo's data/ folder is on the real disk.
    root = os.environ.get("LABKIT_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "data")
    d = tmp_path_factory.mktemp("dio") if not os.path.isdir(root) else None
    path = os.path.join(root if d is None else str(d), f".test-directio-{os.getpid()}.bin")
    data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8)
    data.tofile(path)
    yield path, data
    os.unlink(path)


def _open(path, **kw):
    return DirectFile(path, fallback=True, staging_bytes=16 * PAGE, max_request=8 * PAGE,
                      sweep_request=8 * PAGE, **kw)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, SIZE - 1), st.integers(0, 3 * PAGE)), min_size=0, max_size=40),
       st.sampled_from([0, 1, 3, SWEEP]), st.sampled_from([1, 4]))
def test_extents_match_memory(blob, ext, gap, qd):
    path, data = blob
    starts = np.array([s for s, _ in ext], np.int64)
    lengths = np.array([min(n, SIZE - s) for s, n in ext], np.int64)
    with _open(path, queue_depth=qd) as f:
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
    p = "/dev/shm/.labkit-directio-test.bin"
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    np.zeros(2 * PAGE, np.uint8).tofile(p)
    try:
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
    with _open(path, budget=b):
        assert b.used == 16 * PAGE
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
    with _open(path) as f, pytest.raises(ValueError, match="outside"):
        f.read_extents(np.array([SIZE - 10]), np.array([20]))


def test_disk_model_prefers_sweep_for_dense_pages():
    m = DiskModel(seconds_per_request=80e-6, bytes_per_second=1e9)
    dense = np.arange(0, 10000, 1, dtype=np.int64)[::2]  # every other page
    sparse = np.arange(0, 10_000_000, 100_000, dtype=np.int64)
    assert m.best_gap(dense)[2] in ("sweep", "coalesced")
    assert m.best_gap(sparse)[2] == "random"
    assert m.break_even_gap == int(80e-6 * 1e9 // PAGE)


def test_disk_model_fit(blob):
    path, _ = blob
    with _open(path) as f:
        m = DiskModel.fit(f, requests=32, sweep_bytes=16 * PAGE)
        assert m.seconds_per_request > 0 and m.bytes_per_second > 0
        assert f.counters.requests == 0  # calibration is not counted as workload


def test_long_extent_is_split(blob):
    path, data = blob
    with _open(path) as f:  # requests hold at most 8 pages; this extent spans 40
        got = f.read_extents(np.array([100]), np.array([40 * PAGE]), gap_pages=0)
        assert np.array_equal(got, data[100:100 + 40 * PAGE])
        got = f.read_extents(np.array([5, 100]), np.array([3, 20 * PAGE]), gap_pages=SWEEP)
        assert np.array_equal(got, np.concatenate([data[5:8], data[100:100 + 20 * PAGE]]))


@pytest.mark.parametrize("qd", [1, 4])
def test_file_truncated_under_a_reader_is_a_clear_error(blob, qd):
    path, data = blob
    copy = path + ".trunc"
    data.tofile(copy)
    try:
        with _open(copy, queue_depth=qd) as f:
            os.truncate(copy, SIZE // 2)  # shrinks after open: reads past the new end come back short
            with pytest.raises(OSError, match="short read"):
                f.read_extents(np.arange(0, SIZE - PAGE, 2 * PAGE, dtype=np.int64), np.full(32, 100, np.int64))
            got = f.read_extents(np.array([5], np.int64), np.array([100], np.int64))  # the file still works
            assert np.array_equal(got, data[5:105])
    finally:
        os.unlink(copy)
