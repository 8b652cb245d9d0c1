"""The tour's small real workload: gathering feature rows, in random versus sorted id order.

Every system in the lab gathers rows (embeddings, node features, weight tiles). Whether the ids
arrive in memory order decides how much of each cache line and page is used, which is the
lesson behind CaliEX's coalesced reads and PICASSO's packing. It is also a fair, quick way to
show the bench harness at work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from labkit.core.bench import Bench, BenchReport, Claim, read_section
from labkit.core.errors import check_range
from labkit.core.metrics import ResultTable

TOUR_CLAIMS = [Claim("tour.sorted_gather_speedup", "gathering rows in sorted id order beats random order",
                     "locality (no paper)", 1.0, "x", ">=")]


def feature_table(rows: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    """Return a seeded float32 table of `rows` x `dim` features."""
    check_range("rows", rows, 1, integer=True)
    check_range("dim", dim, 1, 4096, integer=True)
    return np.random.default_rng(seed).standard_normal((rows, dim), dtype=np.float32)


def batch_ids(rows: int, batch: int, seed: int = 1) -> np.ndarray:
    """Return `batch` distinct row ids in random order."""
    check_range("batch", batch, 1, rows, integer=True)
    return np.random.default_rng(seed).choice(rows, size=batch, replace=False)


def gather(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Return table[ids] (the work both contenders do)."""
    return np.take(table, ids, axis=0)


def gather_bench(rows: int, batch: int, dim: int = 16, repeats: int = 5, progress: bool = False):
    """Compare random-order and sorted-order gathers of the same ids; returns (Comparison, Bench)."""
    table = feature_table(rows, dim)
    ids = batch_ids(rows, batch)
    sorted_ids = np.sort(ids)
    b = Bench("tour", "ci", TOUR_CLAIMS, progress=progress, title="Tour: gather locality")
    c = b.compare(f"gather {batch} of {rows} rows x {dim}",
                  {"random order": lambda: gather(table, ids), "sorted order": lambda: gather(table, sorted_ids)},
                  repeats=repeats, warmup=1, min_sample_s=0.01, work=batch * dim * 4, work_unit="B")
    b.measure("tour.sorted_gather_speedup", c.ratio("random order", "sorted order"))
    return c, b


def gather_table(c) -> ResultTable:
    """The gather comparison as a table with units: time per gather and throughput (median [95% interval])
    and sorted order's speedup over random order, with its verdict."""
    t = ResultTable(title=f"{c.case}: {len(c.times['random order'])} interleaved rounds, median [95% interval]")
    sp = c.spread("random order", "sorted order")
    for name in ("random order", "sorted order"):
        s = c.time_spread(name)
        row = {"order": name, "time per gather": f"{s.median * 1e3:.3g} ms [{s.lo * 1e3:.3g}, {s.hi * 1e3:.3g}]",
               "throughput": f"{(c.work or 0) / 1e9 / s.median:.2f} GB/s",
               "speedup over random": "baseline" if name == "random order" else f"{sp}: {sp.verdict()}"}
        t.add(**row)
    return t


class TourReport(BenchReport):
    """The tour's bench report, headed as what it is: a toy bench run in the notebook, not a ``labkit bench`` system."""

    def to_markdown(self) -> str:
        head, _, rest = super().to_markdown().partition("\n")
        if not head.startswith("#"):  # the harness changed its layout: keep its text whole
            rest = head + "\n" + rest
        return f"### {self.title or 'Tour'} (the tour's toy bench, run here in the notebook)\n" + rest


def tour_report(bench: Bench) -> TourReport:
    """Return `bench`'s report as a :class:`TourReport` (same numbers, a header that names the tour)."""
    r = bench.report()
    return TourReport(**{f.name: getattr(r, f.name) for f in dataclasses.fields(r)})


CLAIMS_KEY = "claims:small"


@dataclass
class RecordedClaims:
    """The five systems' claims table as ``labkit reproduce --profile small --record`` last wrote it."""

    markdown: str
    path: str

    @property
    def rows(self) -> list[dict]:
        """One dict per claim row (system, id, claim, paper, measured, target, verdict)."""
        lines = [ln for ln in self.markdown.splitlines() if ln.startswith("|")]
        if len(lines) < 2:
            return []
        cols = [c.strip() for c in lines[0].strip("|").split("|")]
        return [dict(zip(cols, (c.strip().strip("`*") for c in ln.strip("|").split("|")))) for ln in lines[2:]]

    def _repr_markdown_(self) -> str:
        return self.markdown

    def _repr_html_(self) -> str:
        from labkit.core.metrics import markdown_table_html
        return markdown_table_html(self.markdown)

    def by_system(self) -> "ResultTable":
        """One row per system (in the table's order): how many claims passed, missed, or were not measured."""
        from labkit.core.metrics import ResultTable
        counts: dict[str, dict[str, int]] = {}
        for r in self.rows:
            c = counts.setdefault(r.get("system", "?"), {"pass": 0, "miss": 0, "not measured": 0})
            v = r.get("verdict", "")
            c[v if v in c else "not measured"] += 1
        t = ResultTable(title="claims per system, as last recorded (small profile)")
        for system, c in counts.items():
            t.add(system=system, claims=sum(c.values()), **c)
        return t

    def details(self) -> "Details":
        """The full table folded into a collapsed ``<details>`` block (click to open)."""
        return Details(f"All {len(self.rows)} recorded claims", self._repr_html_())

    def __str__(self) -> str:
        return self.markdown


@dataclass
class Details:
    """HTML folded into a collapsed ``<details>`` block under a one-line summary."""

    summary: str
    html: str

    def _repr_html_(self) -> str:
        import html
        return f"<details><summary>{html.escape(self.summary)}</summary>\n{self.html}\n</details>"


def recorded_claims(path: str | None = None) -> RecordedClaims:
    """Read the claims section of BENCHMARKS.md (the clone's, unless `path`): every system's claims in one table.

    Misses are shown in bold. Raises ValueError when the file has no such section (run
    ``labkit reproduce --profile small --record`` to write one).
    """
    body, p = read_section(CLAIMS_KEY, path)
    if body is None:
        raise ValueError(f"path={p!r} has no {CLAIMS_KEY} section; expected a BENCHMARKS.md written by "
                         "`labkit reproduce --profile small --record`")
    lines = body.strip().splitlines()
    lines = [ln.replace("| miss |", "| **miss** |") if ln.rstrip().endswith("| miss |") else ln for ln in lines]
    return RecordedClaims("\n".join(lines), p)


def busy_work(seconds: float = 2.0, n: int = 384) -> int:
    """Run matrix products for about `seconds` (load for the dashboard); returns how many ran."""
    import time

    import torch
    a = torch.randn(n, n)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = torch.tanh(a @ a.T / n)
        done += 1
    return done
