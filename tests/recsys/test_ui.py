"""The PICASSO widgets and the notebook's side-by-side table, driven without a browser."""

import pytest

from labkit.core.bench import Comparison
from labkit.recsys.bench import comparison_table, embedding_side_by_side


def test_technique_explorer_shows_live_numbers_in_coloured_panels():
    pytest.importorskip("ipywidgets")
    from labkit.ui.recsys import BASELINE_COLOR, TECH_COLORS, technique_explorer
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=200, steps=1)
    assert len(fig.data) == len(TECH_COLORS) == 3
    for tr, (metric, color) in zip(fig.data, TECH_COLORS.items()):
        assert tr.name == metric and color in tuple(tr.marker.color)
    r = state.result
    assert list(fig.data[0].y) == [r["baseline_samples_s"], r["samples_s"]]
    assert list(fig.data[1].y) == [r["baseline_ops"], r["ops"]] and r["baseline_ops"] > r["ops"]
    assert tuple(fig.data[1].marker.color)[0] == BASELINE_COLOR
    assert list(fig.data[2].y) == [0.0] and "no cache" in fig.data[2].x[0]  # caching off
    state.controls["caching"].value = True
    assert state.error is None
    assert list(fig.data[2].y) == [state.result["hit_rate"]] and 0 < state.result["hit_rate"] <= 1
    assert fig.data[0].x[1] == "packing+cache" and "lookups/step" in fig.layout.title.text


def test_comparison_table_rows_are_readable():
    c = Comparison("case x", {"per_field@1": [0.02, 0.03, 0.02], "packed@2": [0.005, 0.006, 0.004]},
                   work=1000, work_unit="samples")
    t = comparison_table(c, "per_field@1")
    assert t.title == "case x"
    assert [r["contender"] for r in t.rows] == ["per_field", "packed"] and [r["threads"] for r in t.rows] == [1, 2]
    pk = t.rows[1]
    assert pk["median ms"] == pytest.approx(5.0) and pk["ksamples/s"] == pytest.approx(200.0)
    assert pk["speedup vs per_field@1"] == pytest.approx(5.0)  # median of per-round ratios 4, 5, 5
    assert t.rows[0]["speedup vs per_field@1"] == 1.0


def test_embedding_side_by_side_runs_the_bench_case():
    table, ratios = embedding_side_by_side("ci", fields=4, rows=300, batch=64, repeats=1, torchrec=False)
    names = {(r["contender"]) for r in table.rows}
    assert names == {"per_field", "packed"} and ratios["packed_vs_per_field"] > 0
    assert all(r["median ms"] > 0 for r in table.rows)
    with pytest.raises(ValueError, match="fields=0"):
        embedding_side_by_side("ci", fields=0, rows=300, batch=64)
    with pytest.raises(ValueError, match="profile='huge'"):
        embedding_side_by_side("huge", fields=4, rows=300, batch=64)
