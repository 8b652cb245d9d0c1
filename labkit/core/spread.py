"""A measured ratio with its spread: the median over interleaved rounds and a 95% interval.

Notebooks show every live number this way ("1.94x [1.81, 2.07]"), never a single timing; a ratio
whose interval holds 1.0 reads "within noise".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from labkit.core.errors import bad_value, check_range

#: Bootstrap resamples for an interval: enough for a stable 95% percentile interval of a median.
RESAMPLES = 2000


@dataclass(frozen=True)
class Spread:
    """A median with a confidence interval [lo, hi] from `n` rounds (a range when n < 5)."""

    median: float
    lo: float
    hi: float
    n: int
    unit: str = "x"
    method: str = "bootstrap 95%"

    @property
    def within_noise(self) -> bool:
        """Return True if a ratio's interval holds 1.0 (no speedup or slowdown can be told apart)."""
        return self.lo <= 1.0 <= self.hi

    def verdict(self, faster: str = "faster", slower: str = "slower") -> str:
        """Return a short plain-words reading of a ratio: 'faster', 'slower' or 'within noise'."""
        if self.within_noise:
            return "within noise"
        return faster if self.lo > 1.0 else slower

    def __str__(self) -> str:
        u = self.unit
        sep = "" if u in ("x", "%") else " "
        return f"{_g(self.median)}{sep}{u} [{_g(self.lo)}, {_g(self.hi)}]"


def _g(x: float) -> str:
    # Three significant figures, plain notation: 1.94, 0.0153, 1240.
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{digits}f}"


def spread(values: Sequence[float], *, unit: str = "x", conf: float = 0.95, seed: int = 0) -> Spread:
    """Return the median of `values` with a bootstrap `conf` interval of the median.

    With fewer than 5 values a bootstrap interval means little, so the interval is the range
    (min, max) and `method` says so.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or not np.isfinite(v).all():
        raise bad_value("values", f"{v.size} values" if v.size == 0 else "non-finite values",
                        "at least one finite number")
    check_range("conf", conf, 0, 1, lo_open=True, hi_open=True)
    med = float(np.median(v))
    if v.size < 5:
        return Spread(med, float(v.min()), float(v.max()), int(v.size), unit, "range")
    rng = np.random.default_rng(seed)
    meds = np.median(v[rng.integers(0, v.size, (RESAMPLES, v.size))], axis=1)
    a = (1 - conf) / 2
    lo, hi = np.quantile(meds, [a, 1 - a])
    return Spread(med, float(lo), float(hi), int(v.size), unit, f"bootstrap {conf:.0%}")


def ratio_spread(base: Sequence[float], new: Sequence[float], **kw) -> Spread:
    """Return the spread of per-round speedups time(base) / time(new) (rounds paired, as run)."""
    b, n = np.asarray(base, np.float64), np.asarray(new, np.float64)
    if b.shape != n.shape or b.ndim != 1:
        raise bad_value("base, new", f"{b.shape} and {n.shape} rounds", "the same number of rounds, paired")
    return spread(b / n, **kw)
