"""The tour's package helpers: its report header, the recorded claims table, Markdown rendered as HTML."""

from __future__ import annotations

import pytest

from labkit import tour
from labkit.core.metrics import markdown_table_html

def _records(tmp_path):
    """Two systems' records beside tmp_path/BENCHMARKS.md: a pass, a miss, an inconclusive, a GPU claim not
    measured and a modelled claim."""
    from labkit.core.bench import Bench, Claim
    from labkit.records import write_record
    md = str(tmp_path / "BENCHMARKS.md")
    s = Bench("spmm", "small", [Claim("spmm.a", "a < b", "2x", 2.0), Claim("spmm.gpu", "on a GPU", "1.7x", 1.5),
                                Claim("spmm.c", "close call", "2x", 2.0)], progress=False)
    s.measure("spmm.a", 2.5, interval=(2.2, 2.8))
    s.measure("spmm.c", 2.1, interval=(1.9, 2.3))
    g = Bench("graph", "small", [Claim("graph.b", "cache", "40%", 1.4),
                                 Claim("graph.sim", "simulated", "2x", 2.0, kind="modelled")], progress=False)
    g.measure("graph.b", 0.99, interval=(0.95, 1.02))
    g.measure("graph.sim", 2.3)
    for b in (g, s):  # written in the other order: the table follows the lab's order
        write_record(b.report(), md)
    return md


def test_recorded_claims_reads_the_json_records(tmp_path):
    got = tour.recorded_claims(_records(tmp_path))
    assert [r["id"] for r in got.rows] == ["spmm.a", "spmm.gpu", "spmm.c", "graph.b", "graph.sim"]
    assert [r["verdict"] for r in got.rows] == ["pass", "not measured", "inconclusive", "miss", "pass"]
    assert got.rows[3]["system"] == "AliGraph" and got.rows[3]["measured"] == "0.99 [0.95, 1.02]"
    assert got.rows[4]["kind"] == "modelled"
    html = got._repr_html_()
    assert "<b>miss</b>" in html and "<code>spmm.a</code>" in html and "a &lt; b" in html
    assert "**inconclusive**" in got._repr_markdown_() and "**Modelled**" in got.markdown


def test_recorded_claims_names_a_folder_without_records(tmp_path):
    with pytest.raises(ValueError, match="records.*small-profile record"):
        tour.recorded_claims(str(tmp_path / "BENCHMARKS.md"))


def test_the_committed_records_cover_every_system():
    systems = {r["system"] for r in tour.recorded_claims().rows}
    assert {"Flash-LLM", "AliGraph", "CaliEX", "GoldMiner", "PICASSO"} <= systems


def test_tour_report_is_headed_as_the_tours_toy_bench():
    _, bench = tour.gather_bench(1 << 12, 1 << 10, repeats=1)
    report = tour.tour_report(bench)
    md = report.to_markdown()
    head = md.splitlines()[0]
    assert head.startswith("### ") and "toy bench" in head and "labkit bench" not in head
    assert "**Claims**" in md and "tour.sorted_gather_speedup" in md  # the harness's body is kept whole
    assert report.results == bench.report().results
    html = report._repr_html_()
    assert "<b>Claims</b>" in html and "<code>tour.sorted_gather_speedup</code>" in html and "**" not in html


def test_markdown_table_html_renders_bold_and_code_escaped():
    out = markdown_table_html("### t `a<b`\n\n**Claims** & more\n\n| `x&y` | **miss** |\n|---|---|\n| 1 | `odd")
    assert "<h4>t <code>a&lt;b</code></h4>" in out
    assert "<p><b>Claims</b> &amp; more</p>" in out
    assert "<th><code>x&amp;y</code></th><th><b>miss</b></th>" in out
    assert "<td>`odd</td>" in out  # an unmatched backtick stays literal


def test_claims_by_system_counts_each_verdict(tmp_path):
    got = tour.recorded_claims(_records(tmp_path))
    rows = got.by_system().rows
    assert [r["system"] for r in rows] == ["Flash-LLM", "AliGraph"]  # the lab's order
    assert rows[0] == {"system": "Flash-LLM", "claims": 3, "pass": 1, "miss": 0, "inconclusive": 1,
                       "not measured": 1, "modelled": 0}
    assert rows[1] == {"system": "AliGraph", "claims": 2, "pass": 0, "miss": 1, "inconclusive": 0,
                       "not measured": 0, "modelled": 1}
    html = got.details()._repr_html_()
    assert html.startswith("<details><summary>All 5 recorded claims</summary>") and html.endswith("</details>")
    assert "<code>spmm.a</code>" in html


def test_gather_table_shows_times_with_units_and_the_speedup_interval():
    c, _ = tour.gather_bench(1 << 12, 1 << 10, repeats=5)
    rows = tour.gather_table(c).rows
    assert [r["order"] for r in rows] == ["random order", "sorted order"]
    assert all(r["time per gather"].endswith("]") and " ms [" in r["time per gather"] for r in rows)
    assert all(r["throughput"].endswith(" GB/s") for r in rows)
    sp = c.spread("random order", "sorted order")
    assert rows[1]["speedup over random"] == f"{sp}: {sp.verdict()}"


def test_gather_explorer_draws_bars_with_intervals_and_redraws_on_a_move():
    from labkit.ui.tour import gather_explorer
    view, fig, state = gather_explorer(max_log2_rows=14, repeats=3)
    before = (tuple(fig.data[0].y), fig.layout.title.text)
    bar = fig.data[0]
    assert all(y > 0 for y in bar.y) and len(bar.error_y.array) == 2 and len(bar.error_y.arrayminus) == 2
    assert all(a >= 0 for a in bar.error_y.array) and all(a >= 0 for a in bar.error_y.arrayminus)
    assert "sorted is" in fig.layout.title.text and "[" in fig.layout.title.text
    state.controls["log2 rows"].value = 13
    assert state.updates == 2 and state.error is None
    assert (tuple(fig.data[0].y), fig.layout.title.text) != before
    assert fig.layout.title.text.startswith("8,192 rows")
    assert state.controls["log2 rows"].style.description_width == "initial"
