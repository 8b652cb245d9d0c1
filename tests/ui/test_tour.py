"""The tour's package helpers: its report header, the recorded claims table, Markdown rendered as HTML."""

from __future__ import annotations

import pytest

from labkit import tour
from labkit.core.metrics import markdown_table_html

CLAIMS = """# Benchmarks

<!-- labkit-bench:claims:small begin -->
## Claims table (`labkit reproduce --profile small`)

| system | id | claim | paper | measured | target | verdict |
|---|---|---|---|---|---|---|
| Flash-LLM | `spmm.a` | a < b | 2x | 2.5 | >= 2 x | pass |
| AliGraph | `graph.b` | cache | 40% | 0.99 | >= 1.4 x | miss |
| Flash-LLM | `spmm.gpu` | on a GPU | 1.7x | - | >= 1.5 x | not measured |
<!-- labkit-bench:claims:small end -->

<!-- labkit-bench:graph:small begin -->
| `graph.b` | not | part | of | the | claims |
<!-- labkit-bench:graph:small end -->
"""


def test_recorded_claims_reads_only_the_claims_section(tmp_path):
    p = tmp_path / "BENCHMARKS.md"
    p.write_text(CLAIMS)
    got = tour.recorded_claims(str(p))
    assert [r["id"] for r in got.rows] == ["spmm.a", "graph.b", "spmm.gpu"]
    assert [r["verdict"] for r in got.rows] == ["pass", "miss", "not measured"]
    assert got.rows[1]["system"] == "AliGraph" and got.rows[1]["measured"] == "0.99"
    html = got._repr_html_()
    assert "<b>miss</b>" in html and "<code>spmm.a</code>" in html and "a &lt; b" in html
    assert "not part" not in got.markdown and "**miss**" in got._repr_markdown_()


def test_recorded_claims_names_a_file_without_the_section(tmp_path):
    p = tmp_path / "BENCHMARKS.md"
    p.write_text("# Benchmarks\n")
    with pytest.raises(ValueError, match="claims:small"):
        tour.recorded_claims(str(p))


def test_the_committed_benchmarks_file_has_every_system_in_its_claims_table():
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
    p = tmp_path / "BENCHMARKS.md"
    p.write_text(CLAIMS)
    got = tour.recorded_claims(str(p))
    rows = got.by_system().rows
    assert [r["system"] for r in rows] == ["Flash-LLM", "AliGraph"]  # the table's order
    assert rows[0] == {"system": "Flash-LLM", "claims": 2, "pass": 1, "miss": 0, "not measured": 1}
    assert rows[1] == {"system": "AliGraph", "claims": 1, "pass": 0, "miss": 1, "not measured": 0}
    html = got.details()._repr_html_()
    assert html.startswith("<details><summary>All 3 recorded claims</summary>") and html.endswith("</details>")
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
