"""Flash-LLM widgets as a student reads them: labels that say what was measured, spread on every point,
a formatted table from the same timings as the plot."""

import re

import pytest

from labkit.core.bench import Comparison
from labkit.core.metrics import ResultTable
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


def test_roofline_table_has_units_not_raw_floats():
    roof = {"bandwidth_GBps": 12.345678, "gemm_fp32_GFLOPs": 50.12345, "gemm_bf16_GFLOPs": 0.812345,
            "ridge_flop_per_byte_bf16": 0.0658, "threads": 2}
    rows = {r["quantity"]: r["value"] for r in ui.roofline_table(roof).rows}
    assert rows["memory bandwidth"] == "12.3 GB/s" and rows["bf16 GEMM rate"] == "0.8 GFLOP/s"
    assert rows["bf16 ridge point"] == "0.066 FLOP/byte" and rows["torch threads"] == "2"


def _comparison(dense: str, speedup: float, jitter: float = 0.01, rounds: int = 7) -> Comparison:
    """A Comparison whose per-round speedup of tiled_csl_sparse over `dense` is `speedup` (+- jitter)."""
    base = [0.010 * (1 + jitter * ((i % 3) - 1)) for i in range(rounds)]
    return Comparison("fake", {dense: base, "tiled_csl_sparse": [0.010 / speedup] * rounds})


@pytest.fixture
def fake_timings(monkeypatch):
    speedups = {1: 1.5, 4: 0.5, 16: 1.3, 64: 0.4, 2: 1.0}
    seen = []

    def fake(w, enc, n, repeats=3, kernels=(), dense="dense_bf16", min_sample_s=0.0):
        seen.append((n, dense))
        return _comparison(dense, speedups[n], jitter=0.3 if n == 2 else 0.01)
    monkeypatch.setattr(lab, "compare_once", fake)
    return seen


def test_n_explorer_does_not_say_dense_wins_from_n_when_a_larger_n_loses_again(fake_timings):
    view, fig, state = ui.n_explorer((64, 64), max_log2_n=6)
    assert "dense ahead" not in fig.layout.title.text
    state.controls["N"].value = 4
    assert fig.layout.title.text.endswith("dense ahead from N=4 on, among the N tried")
    state.controls["N"].value = 16     # sparse leads again at N=16
    title = fig.layout.title.text
    assert "from N=4" not in title and title.endswith("dense ahead at N=4 only, among the N tried")
    state.controls["N"].value = 64
    assert fig.layout.title.text.endswith("dense ahead at N=4, 64 only, among the N tried")
    assert list(fig.data[0].x) == [1, 4, 16, 64]
    assert [round(y, 6) for y in fig.data[0].y] == [1.5, 0.5, 1.3, 0.4]


def test_n_explorer_shows_the_interval_and_marks_noise(fake_timings):
    view, fig, state = ui.n_explorer((64, 64), max_log2_n=6)
    state.controls["N"].value = 2          # N=2: per-round speedups 0.77..1.43 around 1.0
    tr = fig.data[0]
    assert list(tr.text) == ["1.50x", "within noise"]
    assert tr.error_y.array[1] > 0.1 and tr.error_y.arrayminus[1] > 0.1
    assert "dense ahead" not in fig.layout.title.text   # a point within noise is no win for dense
    table = state.result
    assert isinstance(table, ResultTable)
    assert [r["reading"] for r in table.rows] == ["Tiled-CSL faster", "within noise"]
    # The table and the title come from the same timings: the title's spread is the N=2 row's.
    assert table.rows[1]["speedup"] in fig.layout.title.text
    assert all(re.fullmatch(r"[\d.]+ ms \[[\d.]+, [\d.]+\]", r["dense time"]) for r in table.rows)


def test_n_explorer_races_fp32_where_bf16_gemm_is_slow(fake_timings):
    slow_bf16 = {"gemm_bf16_GFLOPs": 1.0, "gemm_fp32_GFLOPs": 50.0}
    view, fig, state = ui.n_explorer((64, 64), max_log2_n=6, roof=slow_bf16)
    state.controls["N"].value = 4
    assert fake_timings == [(1, "dense_bf16"), (4, "dense_fp32")]
    assert [r["dense"] for r in state.result.rows] == ["dense bf16", "dense fp32"]
    assert "vs dense fp32" in fig.layout.title.text
    assert state.controls["N"].style.description_width == "initial"


def test_dense_for():
    assert lab.dense_for(1, {"gemm_bf16_GFLOPs": 1.0, "gemm_fp32_GFLOPs": 50.0}) == "dense_bf16"
    assert lab.dense_for(8, {"gemm_bf16_GFLOPs": 1.0, "gemm_fp32_GFLOPs": 50.0}) == "dense_fp32"
    assert lab.dense_for(8, {"gemm_bf16_GFLOPs": 100.0, "gemm_fp32_GFLOPs": 50.0}) == "dense_bf16"
    assert lab.dense_for(8, None) == "dense_bf16"
    with pytest.raises(ValueError, match="n=0"):
        lab.dense_for(0, None)


def test_sparsity_explorer_redraws_with_spread_and_a_matching_table():
    view, fig, state = ui.sparsity_explorer((64, 64), n=1, repeats=3)
    sparse, dense_tile, bound, one, bars = fig.data
    assert list(sparse.x) == [0.8] and len(sparse.error_y.array) == 1
    state.controls["sparsity"].value = 0.9
    assert state.updates == 2
    sparse, dense_tile, bound, one, bars = fig.data
    assert list(sparse.x) == [0.8, 0.9] and list(dense_tile.x) == [0.8, 0.9]
    assert all(t == "within noise" or t.endswith("x") for t in sparse.text)
    assert list(bars.x) == ["dense bf16", "Tiled-CSL", "Tiled-CSL dense-tile"] and all(y > 0 for y in bars.y)
    table = state.result
    assert [r["sparsity"] for r in table.rows] == ["80%", "90%"]
    assert table.rows[1]["byte bound"] == "5.00x"
    sp90 = table.data[0.9]["speedup"]["tiled_csl_sparse"]
    assert str(sp90) in fig.layout.title.text and table.rows[1]["Tiled-CSL speedup"].startswith(str(sp90))
    # Formatted strings with units, never 16-digit floats.
    assert all(isinstance(v, str) and not re.search(r"\d\.\d{6}", v) for r in table.rows for v in r.values())
    assert fig.layout.yaxis.title.text == "speedup (x)" and fig.layout.yaxis2.title.text == "ms per product"
    assert state.controls["sparsity"].style.description_width == "initial"


def test_tile_picture_has_axis_titles():
    w, enc = lab.sparse_case((64, 64), 0.8, seed=0)
    pic = ui.tile_picture(enc)
    assert (pic.layout.xaxis.title.text, pic.layout.yaxis.title.text) == ("column in tile", "row in tile")
    assert (pic.layout.xaxis2.title.text, pic.layout.yaxis2.title.text) == ("non-zeros in a tile", "tiles")


def test_lab_settings():
    lab_p = ui.lab_settings("lab")
    assert lab_p["shape"] == (7168, 7168) and lab_p["rounds"] >= 5 and lab_p["dec"].d_model == 1024
    assert ui.lab_settings("ci")["shape"] == (1024, 1024)
    with pytest.raises(ValueError, match="PROFILE='huge'"):
        ui.lab_settings("huge")


def test_decoder_table_formats_tokens_per_second():
    c = Comparison("dec", {"dense_bf16": [0.2, 0.21, 0.19, 0.2, 0.2], "tiled_csl": [0.1, 0.1, 0.11, 0.1, 0.09]})
    t = ui.decoder_table({1: c}, tokens=8, d_model=768)
    row = t.rows[0]
    assert row["dense bf16"].startswith("40.0 tok/s [") and row["reading"] == "faster"
    assert row["speedup"] == str(t.data[1]) and t.data[1].median == pytest.approx(2.0)


def test_roofline_answer_reads_weight_bytes_per_second():
    roof = {"bandwidth_GBps": 10.0, "gemm_bf16_GFLOPs": 1.0}
    pts = [{"kernel": "dense_bf16", "n": 1, "intensity": 1.0, "GFLOPs": 4.0},
           {"kernel": "tiled_csl_sparse", "n": 1, "intensity": 0.5, "GFLOPs": 3.0},
           {"kernel": "dense_bf16", "n": 4, "intensity": 4.0, "GFLOPs": 1.0}]
    assert ui.roofline_answer(roof, pts) == ("At N = 1, measured bandwidth 10.0 GB/s: dense bf16 reads its weights "
                                              "at 4.0 GB/s (40%); Tiled-CSL reads its weights at 6.0 GB/s (60%).")
