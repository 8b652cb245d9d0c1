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

from labkit.core.bench import Bench, BenchReport, Claim
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


PROFILE = "small"  #: the profile whose records the tour shows


@dataclass
class RecordedClaims:
    """Every system's claims as their JSON records (``labkit bench SYSTEM --profile small --record``) hold them."""

    claims: list[Claim]
    owner: dict[str, str]        # claim id -> system title
    path: str                    # the records folder read

    @property
    def markdown(self) -> str:
        from labkit.core.bench import claims_markdown
        text = claims_markdown(self.claims, self.owner)
        return "\n".join(ln.replace(" | miss |", " | **miss** |").replace(" | inconclusive |", " | **inconclusive** |")
                         for ln in text.splitlines())

    @property
    def rows(self) -> list[dict]:
        """One dict per claim (system, id, claim, paper, measured, target, verdict, kind), measured ones first."""
        from labkit.core.bench import fmt_claim
        order = [c for c in self.claims if c.kind == "measured"] + [c for c in self.claims if c.kind == "modelled"]
        return [dict(system=self.owner.get(c.id, ""), **fmt_claim(c)) for c in order]

    def _repr_markdown_(self) -> str:
        return self.markdown

    def _repr_html_(self) -> str:
        from labkit.core.metrics import markdown_table_html
        return markdown_table_html(self.markdown)

    def by_system(self) -> "ResultTable":
        """One row per system (in the lab's order): measured claims that pass, miss, are inconclusive or
        not measured, and the modelled claims apart."""
        from labkit.core.bench import VERDICTS
        from labkit.core.metrics import ResultTable
        counts: dict[str, dict[str, int]] = {}
        for c in self.claims:
            n = counts.setdefault(self.owner.get(c.id, "?"), {v: 0 for v in VERDICTS} | {"modelled": 0})
            n["modelled" if c.kind == "modelled" else c.status] += 1
        t = ResultTable(title="claims per system, as last recorded (small profile)")
        for system, n in counts.items():
            t.add(system=system, claims=sum(n.values()), **n)
        return t

    def details(self) -> "Details":
        """The full table folded into a collapsed ``<details>`` block (click to open)."""
        return Details(f"All {len(self.claims)} recorded claims", self._repr_html_())

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
    """Read every system's JSON record at the small profile (beside the clone's BENCHMARKS.md, or the one at
    `path`): all claims in one table, misses and inconclusive verdicts in bold.

    Raises ValueError naming the folder when it holds no record at that profile.
    """
    from labkit import catalog
    from labkit.records import load_records, records_dir, system_title
    recs = {s: r for (s, p), r in load_records(path).items() if p == PROFILE}
    if not recs:
        raise ValueError(f"path={records_dir(path)!r} holds no {PROFILE}-profile record; write them with "
                         f"`labkit reproduce --profile {PROFILE} --record`")
    order = {n: i for i, n in enumerate(catalog.NAMES)}
    claims, owner = [], {}
    for s in sorted(recs, key=lambda s: (order.get(s, len(order)), s)):
        for c in recs[s].claims:
            claims.append(c)
            owner[c.id] = system_title(s, recs[s])
    return RecordedClaims(claims, owner, records_dir(path))


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
