"""The roofline figure: both roofs from the measured numbers, the ridge point, the measured kernels."""

import math

import pytest

from labkit.spmm import lab
from labkit.ui.spmm import roofline_figure

ROOF = {"bandwidth_GBps": 10.0, "gemm_fp32_GFLOPs": 100.0, "gemm_bf16_GFLOPs": 400.0,
        "ridge_flop_per_byte_bf16": 40.0, "threads": 2}


def _trace(fig, prefix):
    return next(t for t in fig.data if t.name.startswith(prefix))


def test_roofs_and_ridge_come_from_the_measured_numbers():
    fig = roofline_figure(ROOF)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    mem, roof, ridge = _trace(fig, "memory"), _trace(fig, "bf16 GEMM roof"), _trace(fig, "ridge point")
    # The memory slope is attainable = bandwidth x intensity; it meets the roof at the ridge point.
    assert all(math.isclose(y, 10.0 * x) for x, y in zip(mem.x, mem.y))
    assert math.isclose(mem.x[-1], 40.0) and math.isclose(mem.y[-1], 400.0)
    assert set(roof.y) == {400.0} and math.isclose(roof.x[0], 40.0) and roof.x[-1] > 40.0
    assert (ridge.x[0], ridge.y[0]) == (40.0, 400.0) and "40.0" in ridge.name
    assert set(_trace(fig, "fp32 GEMM roof").y) == {100.0}
    assert not any(t.name in ("dense_bf16", "tiled_csl_sparse") for t in fig.data)


def test_measured_points_are_placed_per_kernel():
    pts = [{"kernel": "dense_bf16", "n": 1, "intensity": 1.0, "GFLOPs": 8.0},
           {"kernel": "dense_bf16", "n": 16, "intensity": 16.0, "GFLOPs": 90.0},
           {"kernel": "tiled_csl_sparse", "n": 1, "intensity": 0.5, "GFLOPs": 4.0}]
    fig = roofline_figure(ROOF, pts)
    dense, sparse = _trace(fig, "dense_bf16"), _trace(fig, "tiled_csl_sparse")
    assert list(dense.x) == [1.0, 16.0] and list(dense.y) == [8.0, 90.0] and list(dense.text) == ["N=1", "N=16"]
    assert list(sparse.x) == [0.5] and list(sparse.text) == ["N=1"]
    # The axis range covers every point and the ridge.
    mem = _trace(fig, "memory")
    assert mem.x[0] <= 0.25 and _trace(fig, "bf16 GEMM roof").x[-1] >= 16.0 * 4


@pytest.mark.parametrize("roof, match", [
    ({"bandwidth_GBps": 0.0, "gemm_bf16_GFLOPs": 1.0}, r"roof=.*bandwidth_GBps"),
    ({"bandwidth_GBps": 1.0}, r"roof=.*'gemm_bf16_GFLOPs': None"),
    ({"bandwidth_GBps": float("nan"), "gemm_bf16_GFLOPs": 1.0}, r"roof="),
    ([1, 2], r"roof=\[1, 2\] is not accepted"),
])
def test_bad_roof(roof, match):
    with pytest.raises(ValueError, match=match):
        roofline_figure(roof)


def test_bad_points():
    with pytest.raises(ValueError, match=r"points\[0\]=.*'intensity'"):
        roofline_figure(ROOF, [{"kernel": "dense_bf16", "n": 1, "intensity": -1.0, "GFLOPs": 1.0}])
    with pytest.raises(ValueError, match=r"points\[1\]="):
        roofline_figure(ROOF, [{"kernel": "x", "n": 1, "intensity": 1.0, "GFLOPs": 1.0}, {"n": 2}])


def test_roofline_points_measure_every_kernel_at_every_n():
    w, enc = lab.sparse_case((64, 128), 0.75, seed=0)
    pts = lab.roofline_points(w, enc, ns=(1, 8), repeats=1)
    assert {(p["kernel"], p["n"]) for p in pts} == {(k, n) for n in (1, 8) for k in
                                                     ("dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile")}
    for p in pts:
        assert p["GFLOPs"] > 0 and p["ms"] > 0
        # Dense reads 2 bytes per weight for 2N FLOPs: intensity N. Tiled-CSL: 2·nnz·N over its bytes.
        want = p["n"] if p["kernel"] == "dense_bf16" else 2.0 * enc.nnz * p["n"] / enc.nbytes
        assert math.isclose(p["intensity"], want)
    assert len(roofline_figure({"bandwidth_GBps": 5.0, "gemm_bf16_GFLOPs": 50.0}, pts).data) == 3 + 3
    with pytest.raises(ValueError, match=r"ns=\(\) is not accepted"):
        lab.roofline_points(w, enc, ns=())
    with pytest.raises(ValueError, match=r"n=65"):
        lab.roofline_points(w, enc, ns=(65,))


def test_roofline_timing_is_the_best_of_a_warmed_sample(monkeypatch):
    """Slow first calls (cold threads, contention) neither count nor cut the sample short."""
    times = iter([0.5, 0.3] + [0.02] * 50)
    calls = []

    def fake_timed(fn):
        calls.append(fn)
        return next(times)
    monkeypatch.setattr(lab, "_timed", fake_timed)
    # Warm-up runs until half of min_sample_s (0.1 s: the 0.5 s call alone); then at least 3 timed
    # calls and 0.2 s: 0.3 + 0.02 + 0.02. The best of them is kept.
    assert lab._best_time(object(), 3, 0.2) == 0.02
    assert len(calls) == 1 + 3
    calls.clear()
    times = iter([0.01] * 100)
    assert lab._best_time(object(), 3, 0.0) == 0.01 and len(calls) == 1 + 3  # one warm-up, `repeats` timed


def test_machine_roofline_checks_its_sample_time():
    with pytest.raises(ValueError, match="min_sample_s"):
        lab.machine_roofline(16, min_sample_s=-1)
