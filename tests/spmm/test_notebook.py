"""The Flash-LLM notebook runs headless at profile ci and records sensible metrics."""

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "01_flash_llm.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_flash_llm_notebook():
    m = run_notebook(NB, {"PROFILE": "ci"})
    assert m["profile"] == "ci"
    assert m["decode_exact"] is True
    assert 4.0 <= m["bytes_per_nnz"] <= 4.3          # ci matrices are small, so padding shows a little
    assert m["spmm_rel_err"] < 1e-5
    assert m["bandwidth_GBps"] > 0.1 and m["ridge_flop_per_byte"] > 0
    # The roofline figure places every kernel at N = 1, 4, 16.
    assert {tuple(p) for p in m["roofline_points"]} == {
        (k, n) for k in ("dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile") for n in (1, 4, 16)}
    assert m["sparsity_slider_updates"] == 2          # initial draw + the 0.9 move
    assert m["speedup_s90_n1"] > 0
    assert m["n_points"] == [1, 4, 16]
    assert m["decoder_same_tokens"] is True
    assert m["decoder_speedup_b1"] > 0
    assert m["dashboard_samples"] >= 1
