"""The Flash-LLM notebook runs headless at its default profile "lab" and shows the paper's effect.

At "lab" the timed weight is 7168 x 7168 (98 MiB of bf16: streamed from DRAM), so the N = 1
product is memory-bound and Tiled-CSL beats dense bf16 at 80% and 90% sparsity. The N sweep's
crossover is not asserted as a number, only that the notebook's title agrees with its intervals.
"""

from pathlib import Path

import pytest

from labkit.core.notebooks import run_notebook

NB = Path(__file__).resolve().parents[2] / "notebooks" / "01_flash_llm.ipynb"


@pytest.mark.notebook
@pytest.mark.slow
def test_flash_llm_notebook():
    m = run_notebook(NB, {"PROFILE": "lab"})
    assert m["profile"] == "lab" and m["shape"] == [7168, 7168]
    assert m["decode_exact"] is True
    assert 4.0 <= m["bytes_per_nnz"] <= 4.1
    assert m["spmm_rel_err"] < 1e-5
    assert m["bandwidth_GBps"] > 0.1 and m["ridge_flop_per_byte"] > 0
    # The roofline figure places every kernel at N = 1 and 4.
    assert {tuple(p) for p in m["roofline_points"]} == {
        (k, n) for k in ("dense_bf16", "tiled_csl_sparse", "tiled_csl_dense_tile") for n in (1, 4)}
    assert m["sparsity_slider_updates"] == 2          # initial draw + the 0.9 move
    # The headline, in the paper's direction: load-as-sparse beats dense at N = 1. At 90% the whole
    # interval lies above 1.0x in every run we saw; at 80% the median does (its lower bound once
    # dipped to 0.9x on a machine loaded 4x over its 2 cores).
    med, lo, hi = m["speedup_s90_n1"]
    assert 1.0 < lo <= med <= hi, m["speedup_s90_n1"]
    med, lo, hi = m["speedup_s80_n1"]
    assert lo <= med <= hi and med > 1.0, m["speedup_s80_n1"]
    # The N sweep: every N with its interval, and the title names dense as ahead exactly where an
    # interval lies wholly below 1.0x.
    assert m["n_points"] == [1, 4, 16, 64]
    assert m["n_dense"]["1"] == "dense_bf16"
    spreads = {int(n): v for n, v in m["n_speedups"].items()}
    assert all(lo <= med <= hi for med, lo, hi in spreads.values())
    losing = [n for n in sorted(spreads) if spreads[n][2] < 1.0]
    title = m["n_title"]
    if losing:
        assert f"dense ahead from N={losing[0]} on" in title or f"dense ahead at N={losing[0]}" in title
    else:
        assert "dense ahead" not in title
    assert m["decoder_same_tokens"] is True
    med, lo, hi = m["decoder_speedup_b1"]
    assert 0 < lo <= med <= hi
    assert m["dashboard_samples"] >= 1
