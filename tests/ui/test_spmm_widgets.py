"""Flash-LLM widgets as a student reads them: labels that say what was measured, axes with titles."""

import pytest

from labkit.spmm import lab
from labkit.ui import spmm as ui


def test_roofline_names_a_ridge_below_one_and_a_slow_bf16_roof():
    # An AVX2 CPU without fast bf16 arithmetic: bf16 GEMM at 0.8 GFLOP/s, fp32 at 50, 40 GB/s.
    roof = {"bandwidth_GBps": 40.0, "gemm_fp32_GFLOPs": 50.0, "gemm_bf16_GFLOPs": 0.8, "threads": 2}
    fig = ui.roofline_figure(roof)
    title = fig.layout.title.text
    assert "below 0.02 FLOP/byte" in title and "0.0 FLOP" not in title   # was "below 0.0 FLOP/byte"
    assert "bf16 GEMM runs at 0.016x the fp32 rate" in title
    ridge = next(t for t in fig.data if t.name.startswith("ridge point"))
    assert "0.02" in ridge.name and ridge.text[0] == "ridge 0.02 FLOP/B"
    # A machine whose bf16 roof is above fp32's gets no such note.
    fast = ui.roofline_figure({**roof, "gemm_bf16_GFLOPs": 400.0})
    assert "fp32 rate" not in fast.layout.title.text and "below 10.0 FLOP/byte" in fast.layout.title.text


class _Ratios:
    """A stand-in for compare_once's Comparison: dense / kernel speedups fixed per N."""

    def __init__(self, sparse, dense_tile):
        self.r = {"tiled_csl_sparse": sparse, "tiled_csl_dense_tile": dense_tile}

    def ratio(self, base, other):
        return self.r[other]


@pytest.fixture
def fake_timings(monkeypatch):
    speedups = {1: (1.5, 0.9), 4: (0.5, 0.2), 16: (1.3, 0.6), 64: (0.4, 0.1)}
    monkeypatch.setattr(lab, "compare_once", lambda w, enc, n, repeats=3: _Ratios(*speedups[n]))


def test_n_explorer_does_not_say_dense_wins_from_n_when_a_larger_n_loses_again(fake_timings):
    view, fig, state = ui.n_explorer((64, 64), max_log2_n=6)
    assert state.result["n"] == 1 and "dense ahead" not in fig.layout.title.text
    state.controls["log2 N"].value = 2
    assert fig.layout.title.text.endswith("dense ahead from N=4 on, among the N tried")
    state.controls["log2 N"].value = 4     # sparse leads again at N=16
    title = fig.layout.title.text
    assert "from N=4" not in title and title.endswith("dense ahead at N=4 only, among the N tried")
    state.controls["log2 N"].value = 6
    assert fig.layout.title.text.endswith("dense ahead at N=4, 64 only, among the N tried")
    assert list(fig.data[0].x) == [1, 4, 16, 64] and list(fig.data[0].y) == [1.5, 0.5, 1.3, 0.4]


def test_sparsity_explorer_and_tile_picture_have_axis_titles():
    view, fig, state = ui.sparsity_explorer((64, 64), n=1, repeats=1)
    before = list(fig.data[1].y)
    state.controls["sparsity"].value = 0.95
    assert state.updates == 2 and list(fig.data[1].y) != before   # fewer bytes at 95% than at 80%
    assert fig.layout.yaxis.title.text == "ms per product" and fig.layout.yaxis2.title.text == "MiB of weights"
    w, enc = lab.sparse_case((64, 64), 0.8, seed=0)
    pic = ui.tile_picture(enc)
    assert (pic.layout.xaxis.title.text, pic.layout.yaxis.title.text) == ("column in tile", "row in tile")
    assert (pic.layout.xaxis2.title.text, pic.layout.yaxis2.title.text) == ("non-zeros in a tile", "tiles")
