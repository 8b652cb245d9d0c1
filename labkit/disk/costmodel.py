"""CaliEX's disk cost model: the time of a read plan from two measured device parameters.

``requests * seconds_per_request + bytes / bytes_per_second``, fitted to a
:class:`~labkit.core.directio.DirectFile`'s device by :meth:`DiskModel.fit`; it says which gap
between needed pages is cheapest to read through (random, coalesced or a sequential sweep). It
lives with the disk system that plans with it; the direct-I/O engine in core knows nothing of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np

from labkit.core.arrays import unique
from labkit.core.directio import PAGE, SWEEP, DirectFile, IOCounters


@numba.njit(cache=True, nogil=True)
def _gap_stats(pages):
    """For sorted unique pages return the sorted gaps (unneeded pages) between neighbours."""
    n = pages.shape[0]
    if n <= 1:
        return np.zeros(0, np.int64)
    g = np.empty(n - 1, np.int64)
    for i in range(n - 1):
        g[i] = pages[i + 1] - pages[i] - 1
    g.sort()
    return g


@dataclass
class DiskModel:
    """Time of a read plan: ``requests * seconds_per_request + bytes / bytes_per_second``.

    ``seconds_per_request`` is the effective (queue-depth-parallel) cost of one small random
    request; ``bytes_per_second`` the sequential bandwidth. Fit both with :meth:`fit`.
    """

    seconds_per_request: float = 80e-6
    bytes_per_second: float = 1e9

    def cost(self, requests: float, nbytes: float) -> float:
        """Predicted seconds for `requests` requests moving `nbytes` bytes."""
        return requests * self.seconds_per_request + nbytes / self.bytes_per_second

    def scaled(self, factor: float) -> "DiskModel":
        """Return this model with every plan `factor` times slower (calibration to a workload)."""
        factor = max(1e-3, float(factor))
        return DiskModel(self.seconds_per_request * factor, self.bytes_per_second / factor)

    @property
    def break_even_gap(self) -> int:
        """Largest gap (pages) that is cheaper to read through than to skip with a new request."""
        return int(self.seconds_per_request * self.bytes_per_second // PAGE)

    def plan_cost(self, pages: np.ndarray, gap_pages: int, max_run_pages: int = 64) -> tuple[float, int, int]:
        """Return (seconds, requests, bytes) predicted for reading sorted unique `pages` with `gap_pages`."""
        n = int(pages.size)
        if n == 0:
            return 0.0, 0, 0
        gaps = _gap_stats(np.ascontiguousarray(pages, np.int64))
        k = int(np.searchsorted(gaps, min(gap_pages, SWEEP), side="right"))
        read_pages = n + int(gaps[:k].sum())
        runs = 1 + (gaps.size - k)
        runs = max(runs, -(-read_pages // max_run_pages))
        nbytes = read_pages * PAGE
        return self.cost(runs, nbytes), runs, nbytes

    def best_gap(self, pages: np.ndarray, max_request: int = 256 << 10,
                 sweep_request: int = 1 << 20) -> tuple[int, float, str]:
        """Return (gap_pages, predicted seconds, mode) of the cheapest plan for these pages.

        Modes: "random" (page-sharing only), "coalesced" (gaps up to the break-even gap are read
        through) and "sweep" (the whole region, in large sequential requests).
        """
        cands = {"random": (0, max_request // PAGE), "coalesced": (max(1, self.break_even_gap), max_request // PAGE),
                 "sweep": (SWEEP, sweep_request // PAGE)}
        best = None
        for mode, (g, cap) in cands.items():
            t = self.plan_cost(pages, g, cap)[0]
            if best is None or t < best[1]:
                best = (g, t, mode)
        return best  # type: ignore[return-value]

    @classmethod
    def fit(cls, f: DirectFile, *, requests: int = 2000, sweep_bytes: int = 64 << 20, seed: int = 0) -> "DiskModel":
        """Measure `f`'s device: random single-page requests at its queue depth, then a sweep."""
        rng = np.random.default_rng(seed)
        npages = max(1, f.size // PAGE)
        before = IOCounters(**{k: getattr(f.counters, k) for k in ("requests", "bytes_read", "bytes_used", "calls", "seconds")})
        f.read_extents(np.array([0]), np.array([PAGE]))  # first call: compile and fault in
        pages = unique(rng.integers(0, npages, size=min(requests, npages)))
        starts = pages * PAGE
        t0 = time.perf_counter()
        f.read_extents(starts, np.full(starts.size, PAGE, np.int64), gap_pages=0)
        t_req = (time.perf_counter() - t0) / max(1, starts.size)
        span = min(sweep_bytes, npages * PAGE)
        p0 = int(rng.integers(0, max(1, npages - span // PAGE)))
        t0 = time.perf_counter()
        f.read_extents(np.array([p0 * PAGE]), np.array([span]), gap_pages=SWEEP)
        dt = time.perf_counter() - t0
        # The sweep's own request overheads are small but not zero; take them out.
        nreq = -(-span // f.sweep_request)
        bw = span / max(1e-6, dt - nreq * t_req * 0.5)
        f.counters = before  # calibration reads are not the workload's
        return cls(seconds_per_request=t_req, bytes_per_second=bw)

