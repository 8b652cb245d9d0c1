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
    lo, hi = _bootstrap((v,), lambda x, axis: np.median(x, axis=axis), conf, seed)
    return Spread(med, lo, hi, int(v.size), unit, f"bootstrap {conf:.0%}")


def _bootstrap(samples: tuple, statistic, conf: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` (scipy.stats.bootstrap; each sample resampled on its own).

    Percentile, not BCa: a median over few rounds has ties that make BCa's acceleration undefined.
    """
    from scipy import stats
    res = stats.bootstrap(samples, statistic, n_resamples=RESAMPLES, confidence_level=conf,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return lo, hi


def ratio_spread(base: Sequence[float], new: Sequence[float], **kw) -> Spread:
    """Return the spread of per-round speedups time(base) / time(new) (rounds paired, as run)."""
    b, n = np.asarray(base, np.float64), np.asarray(new, np.float64)
    if b.shape != n.shape or b.ndim != 1:
        raise bad_value("base, new", f"{b.shape} and {n.shape} rounds", "the same number of rounds, paired")
    return spread(b / n, **kw)


def geomean_spread(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, conf: float = 0.95,
                   seed: int = 0) -> Spread:
    """Return the geometric mean over cases of each case's median speedup, with a joint bootstrap interval.

    `pairs` holds one ``(base_times, new_times)`` per case (rounds paired, as run). Each resample
    draws every case's rounds with replacement and takes the geo-mean of the resampled medians,
    so the interval reflects the noise of every case at once. With fewer than 5 rounds in some
    case the interval is the geo-mean of the per-case ranges and `method` says so.
    """
    if not pairs:
        raise bad_value("pairs", "[]", "at least one (base_times, new_times) pair")
    check_range("conf", conf, 0, 1, lo_open=True, hi_open=True)
    ratios = []
    for i, (b, n) in enumerate(pairs):
        b, n = np.asarray(b, np.float64), np.asarray(n, np.float64)
        if b.shape != n.shape or b.ndim != 1 or b.size == 0:
            raise bad_value(f"pairs[{i}]", f"{b.shape} and {n.shape} rounds", "the same number of rounds, paired")
        r = b / n
        if not (np.isfinite(r).all() and (r > 0).all()):
            raise bad_value(f"pairs[{i}]", "non-finite or non-positive times", "positive finite times")
        ratios.append(r)
    logs = [np.log(r) for r in ratios]
    med = float(np.exp(np.mean([np.median(lg) for lg in logs])))
    n_min = min(r.size for r in ratios)
    if n_min < 5:
        lo = float(np.exp(np.mean([lg.min() for lg in logs])))
        hi = float(np.exp(np.mean([lg.max() for lg in logs])))
        return Spread(med, lo, hi, n_min, "x", "range")

    def geo(*logs_, axis):
        return np.exp(np.mean([np.median(lg, axis=axis) for lg in logs_], axis=0))

    lo, hi = _bootstrap(tuple(logs), geo, conf, seed)
    return Spread(med, lo, hi, n_min, "x", f"bootstrap {conf:.0%}")
