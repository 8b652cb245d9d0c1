"""CaliEX's widgets: the split explorer's live hit-rate and bytes-read bars, the notebook's run helper."""

from __future__ import annotations

import pytest

from labkit.core.datasets import open_dataset
from labkit.core.memory import MemoryBudget
from labkit.disk.system import presample, workload
from labkit.ui.disk import (READ_COLORS, compare_systems, group_table, lab_settings, measure_splits, run_system,
                            side_by_side_table, speedup_table, split_explorer, stage_figure, tuner_figure)


@pytest.fixture(scope="module")
def setup():
    ds = open_dataset("caliex", "ci")
    _, cfg, budget, pseeds, seeds = workload("ci", "sage", 2, budget_fraction=2.0, presample_batches=2)
    return ds, cfg, budget, presample(ds, cfg, pseeds, MemoryBudget(budget)), seeds


def test_split_explorer_plots_hit_rates_and_bytes_read(setup):
    ds, cfg, budget, pre, seeds = setup
    mib = budget >> 20
    view, fig, state = split_explorer(ds, cfg, pre, seeds, budget_mib=(1, 2 * mib, mib), split=0.5, repeats=2)
    stages, hits, reads = fig.data
    assert state.error is None and state.updates == 1
    m = state.result
    assert m["batches"] == 2 and m["per_batch"].n == 2  # two timed mini-batches after a warm-up one
    assert m["per_batch"].lo <= m["per_batch_s"] <= m["per_batch"].hi
    assert "s per batch [" in fig.layout.title.text  # the median with its range
    assert tuple(hits.y) == (m["hit_rate_topology"], m["hit_rate_features"])
    assert all(0.0 <= h <= 1.0 for h in hits.y) and sum(hits.y) > 0
    assert tuple(reads.x) == tuple(READ_COLORS)
    assert reads.y[0] == m["bytes_read_topology"] / 2**20 / 2 and reads.y[1] == m["bytes_read_features"] / 2**20 / 2
    assert reads.y[2] == m["bytes_needed"] / 2**20 / 2  # MiB per mini-batch
    assert state.controls["budget MiB"].style.description_width == "initial"
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


def test_lab_settings_name_each_profile_and_refuse_others():
    assert lab_settings("lab")["dataset"] == "small" and lab_settings("lab")["fraction"] < 1
    assert lab_settings("ci")["dataset"] == "ci"
    with pytest.raises(ValueError, match="PROFILE"):
        lab_settings("huge")


def test_compare_systems_gives_spreads_a_table_and_stage_bars(setup):
    from labkit.disk.system import open_system
    ds, cfg, budget, pre, seeds = setup
    systems = {n: open_system(n, ds, budget, cfg, pre=pre) for n in ("naive", "caliex")}
    try:
        comp, runs = compare_systems(systems, [seeds[:1], seeds[1:2], seeds[:1]], rounds=2, progress=False)
    finally:
        for s in systems.values():
            s.close()
    assert [len(runs[n]) for n in systems] == [2, 2] and len(comp.times["caliex"]) == 2
    assert runs["naive"][0].losses == pytest.approx(runs["caliex"][0].losses, rel=1e-5)  # same batches
    t = speedup_table(comp, runs, epoch_batches=10)
    assert [r["system"] for r in t.rows] == ["naive", "caliex"]
    assert t.rows[0]["caliex speedup"].endswith("]") and t.rows[1]["caliex speedup"] == "-"
    assert t.rows[0]["s per mini-batch"].count("s [") == 1 and "min" in t.rows[0]["epoch (10 batches)"]
    fig = stage_figure(runs)
    assert [d.name for d in fig.data] == ["sample (busy)", "gather (busy)", "train (busy)", "wall clock"]
    assert all(y > 0 for y in fig.data[3].y)


def test_tuner_figure_draws_measured_spreads_as_error_bars(setup):
    ds, cfg, budget, pre, seeds = setup
    measured = measure_splits(ds, budget, cfg, pre, [seeds[:1], seeds[1:2], seeds[:1]], (0.0, 1.0), rounds=2,
                              progress=False)
    assert sorted(measured) == [0.0, 1.0] and all(m.unit == "s" and m.n == 2 for m in measured.values())
    curve = [{"f": f / 4, "total": 0.1, "sample": 0.02, "gather": 0.03} for f in range(5)]
    fig = tuner_figure(curve, measured, tuned=0.0)
    pts = fig.data[-1]
    assert list(pts.x) == [0.0, 1.0] and list(pts.y) == [measured[0.0].median, measured[1.0].median]
    assert list(pts.error_y.arrayminus) == [measured[f].median - measured[f].lo for f in (0.0, 1.0)]
    assert fig.layout.yaxis.title.text == "seconds per mini-batch"
