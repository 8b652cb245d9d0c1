"""The Flash-LLM notebook runs headless at its default profile "lab" and shows the paper's effect.

At "lab" the timed weight is 7168 x 7168 (98 MiB of bf16: streamed from DRAM), so the N = 1
product is memory-bound and Tiled-CSL beats dense bf16 at 80% and 90% sparsity. The N sweep's
crossover is not asserted as a number, only that the notebook's title agrees with its intervals.
"""

import json
import re
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


from tests.notebook_rules import unattributed_numbers  # noqa: E402  (the rule every notebook keeps)


def test_notebook_text_quotes_no_number_a_record_can_change():
    """Every markdown cell, collapsed caveats included: speedups only as the paper's (or the byte bound)."""
    nb = json.loads(NB.read_text())
    found = [(i, s) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
             for s in unattributed_numbers("".join(c["source"]))]
    assert not found, found
    # the paper's own figures are still quoted, attributed
    opening = "".join(nb["cells"][0]["source"])
    assert re.search(r"A100[^.]*1\.4x, 1\.7x and 2\.1x", opening)


@pytest.mark.parametrize("old", [
    # notebook 01 before issue 29: a record's batch-16 and N-sweep figures in the prose
    "lead is gone or nearly so (recorded runs on such a machine put `spmm.e2e_tokens_speedup_s90_b16` "
    "between about 0.8x and 1.2x), and where bf16 arithmetic is slow the dense bf16 decoder falls far behind;",
    "at N = 2 to 8 (all three run its 8-column build, so they cost it the same; recorded runs on such a "
    "CPU put it between about 0.9x and 1.5x there) and dense is ahead from N = 16; at 90% it leads.",
    "The bench measured 1.94x at 80% sparsity. Tiled-CSL read its words at 11 GB/s.",
    "Dense wins from N = 16 on this machine.",
    "A point whose interval holds 1.0x is fine, but this one ran 1.05x.",
])
def test_the_rule_catches_measured_numbers_in_prose(old):
    assert unattributed_numbers(old)


@pytest.mark.parametrize("ok", [
    "On an A100 GPU it beat dense cuBLAS by 1.4x, 1.7x and 2.1x at 70, 80 and 90% sparsity.",
    "the best possible speedup is the inverse, the *byte bound* 1/(2(1-s)): 2.5x at 80% and 5x at 90%.",
    "On a 7168 x 7168 weight the sparse product beats dense; as N grows, dense catches up and then wins.",
    "which is why Flash-LLM still wins at N = 8 to 64.",
    'A point whose interval holds 1.0x is marked "within noise".',
])
def test_the_rule_lets_the_papers_figures_and_shapes_through(ok):
    assert not unattributed_numbers(ok)
