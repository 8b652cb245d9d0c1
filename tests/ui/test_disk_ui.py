"""CaliEX's widgets: the split explorer's live hit-rate and bytes-read bars, the notebook's run helper."""

from __future__ import annotations

import pytest

from labkit.core.datasets import open_dataset
from labkit.core.memory import MemoryBudget
from labkit.disk.system import presample, workload
from labkit.ui.disk import READ_COLORS, group_table, run_system, side_by_side_table, split_explorer


@pytest.fixture(scope="module")
def setup():
    ds = open_dataset("caliex", "ci")
    _, cfg, budget, pseeds, seeds = workload("ci", "sage", 2, budget_fraction=2.0, presample_batches=2)
    return ds, cfg, budget, presample(ds, cfg, pseeds, MemoryBudget(budget)), seeds


def test_split_explorer_plots_hit_rates_and_bytes_read(setup):
    ds, cfg, budget, pre, seeds = setup
    mib = budget >> 20
    view, fig, state = split_explorer(ds, cfg, pre, seeds, budget_mib=(1, 2 * mib, mib), split=0.5)
    stages, hits, reads = fig.data
    assert state.error is None and state.updates == 1
    m = state.result
    assert tuple(hits.y) == (m["hit_rate_topology"], m["hit_rate_features"])
    assert all(0.0 <= h <= 1.0 for h in hits.y) and sum(hits.y) > 0
    assert tuple(reads.x) == tuple(READ_COLORS)
    assert reads.y[0] == m["bytes_read_topology"] / 2**20 and reads.y[1] == m["bytes_read_features"] / 2**20
    assert reads.y[2] == m["bytes_needed"] / 2**20
    assert stages.xaxis == "x" and hits.xaxis == "x2" and reads.xaxis == "x3"  # three side-by-side panels
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text, fig.layout.yaxis3.title.text) == (
        "seconds", "hit rate", "MiB")  # each panel's axis says its unit
    # A budget too small for CaliEX raises BudgetExceeded (a MemoryError): shown, the bars kept.
    state.controls["budget MiB"].value = 1
    assert state.error and "too small for caliex" in state.error and "too small" in fig.layout.title.text
    assert tuple(fig.data[1].y) == tuple(hits.y)
    state.controls["budget MiB"].value = mib
    state.controls["topology share"].value = 1.0
    assert state.error is None and state.result["split_topology"] == 1.0 and state.updates == 4


def test_run_system_shows_progress_only_when_asked(setup, capsys):
    ds, cfg, budget, pre, seeds = setup
    r, m, s = run_system("naive", ds, budget, cfg, seeds, pre=pre)
    err = capsys.readouterr().err
    assert r.batches == len(seeds) and m["system"] == "naive" and m["bytes_read"] > 0
    assert "naive: " in err and f"{len(seeds)}/{len(seeds)}" in err
    assert "step" not in vars(s.trainer)  # the counting wrapper is gone after the run
    r2, _, _ = run_system("naive", ds, budget, cfg, seeds, pre=pre, progress=False)
    assert capsys.readouterr().err == ""
    assert r2.losses == pytest.approx(r.losses, rel=1e-5)  # same batches, same training


def test_side_by_side_table_has_one_row_per_system_per_mini_batch(setup):
    ds, cfg, budget, pre, seeds = setup
    naive, naive_m, _ = run_system("naive", ds, budget, cfg, seeds, pre=pre, progress=False)
    memory, memory_m, _ = run_system("memory", ds, 1 << 40, cfg, seeds, pre=pre, progress=False)
    t = side_by_side_table({"naive": (naive, naive_m), "memory": (memory, memory_m)})
    assert [r["system"] for r in t.rows] == ["naive", "memory"] and t.title == "per mini-batch"
    row = t.rows[0]
    assert row["s_per_batch"] == naive.per_batch and row["train"] == naive.busy["train"] / naive.batches
    assert row["MiB_read"] == naive_m["bytes_read"] / 2**20 > 0 and row["hit_features"] == 0
    assert t.rows[1]["MiB_read"] == 0 and t.rows[1]["loss"] == memory.losses[-1] == naive.losses[-1]


def test_group_table_marks_the_picked_group():
    from types import SimpleNamespace
    s = SimpleNamespace(group=2, info={"predicted_by_group": {4: 0.3, 1: 0.5, 2: 0.2}})
    t = group_table(s)
    assert [(r["sampling group G"], r["predicted s per mini-batch"], r["picked"]) for r in t.rows] == [
        (1, 0.5, ""), (2, 0.2, "yes"), (4, 0.3, "")]
    assert group_table(SimpleNamespace(group=1, info={})).rows == []  # a system the tuner did not size
