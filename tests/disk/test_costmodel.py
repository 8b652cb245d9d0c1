"""CaliEX's disk cost model: which gap is cheapest, and a fit that leaves the workload's counters alone."""

from __future__ import annotations

import numpy as np

from labkit.core.directio import PAGE, DirectFile
from labkit.disk.costmodel import DiskModel


def test_disk_model_prefers_sweep_for_dense_pages():
    m = DiskModel(seconds_per_request=80e-6, bytes_per_second=1e9)
    dense = np.arange(0, 10000, 1, dtype=np.int64)[::2]  # every other page
    sparse = np.arange(0, 10_000_000, 100_000, dtype=np.int64)
    assert m.best_gap(dense)[2] in ("sweep", "coalesced")
    assert m.best_gap(sparse)[2] == "random"
    assert m.break_even_gap == int(80e-6 * 1e9 // PAGE)


def test_disk_model_plan_cost_counts_requests_and_bytes():
    m = DiskModel(seconds_per_request=1e-4, bytes_per_second=PAGE * 1e4)
    pages = np.array([0, 1, 5, 20], np.int64)  # gaps 0, 3, 14
    assert m.plan_cost(pages, 0)[1:] == (3, 4 * PAGE)  # 0-1, 5, 20
    assert m.plan_cost(pages, 3)[1:] == (2, 7 * PAGE)  # 0-5 read through, 20
    t, runs, nbytes = m.plan_cost(pages, 1 << 40)
    assert (runs, nbytes) == (1, 21 * PAGE) and t == m.cost(1, 21 * PAGE)


def test_disk_model_fit(tmp_path):
    path = tmp_path / "blob.bin"
    np.random.default_rng(0).integers(0, 256, 64 * PAGE, dtype=np.uint8).tofile(path)
    with DirectFile(path, fallback=True, staging_bytes=16 * PAGE, max_request=8 * PAGE,
                    sweep_request=8 * PAGE) as f:
        m = DiskModel.fit(f, requests=32, sweep_bytes=16 * PAGE)
        assert m.seconds_per_request > 0 and m.bytes_per_second > 0
        assert f.counters.requests == 0  # calibration is not counted as workload
