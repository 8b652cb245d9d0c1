"""Spreads: medians with intervals, the 'within noise' reading, and the notebooks' interleaved timer."""

import numpy as np
import pytest

from labkit.core.bench import Comparison, interleave
from labkit.core.errors import LabkitError
from labkit.core.spread import Spread, ratio_spread, spread


def test_a_few_rounds_give_their_range():
    s = spread([2.0, 1.0, 3.0])
    assert (s.median, s.lo, s.hi, s.n, s.method) == (2.0, 1.0, 3.0, 3, "range")
    assert str(s) == "2.00x [1.00, 3.00]"


def test_the_bootstrap_interval_holds_the_median_and_narrows_with_rounds():
    rng = np.random.default_rng(1)
    few, many = spread(rng.normal(2, 0.2, 8)), spread(rng.normal(2, 0.2, 200))
    for s in (few, many):
        assert s.lo <= s.median <= s.hi and s.method == "bootstrap 95%"
    assert many.hi - many.lo < few.hi - few.lo
    v = rng.normal(2, 0.2, 8)
    assert spread(v, seed=3) == spread(v, seed=3)  # seeded: the same interval each time


@pytest.mark.parametrize("values, reading", [([1.5, 1.6, 1.7, 1.55, 1.65], "faster"),
                                             ([0.5, 0.6, 0.55, 0.52, 0.58], "slower"),
                                             ([0.9, 1.1, 1.0, 0.95, 1.05], "within noise")])
def test_a_ratio_reads_faster_slower_or_within_noise(values, reading):
    s = spread(values)
    assert s.verdict() == reading and s.within_noise == (reading == "within noise")


def test_ratio_spread_pairs_rounds_and_refuses_bad_input():
    s = ratio_spread([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert (s.median, s.lo, s.hi) == (2.0, 2.0, 2.0)
    with pytest.raises(LabkitError, match="base, new="):
        ratio_spread([1.0, 2.0], [1.0])
    with pytest.raises(LabkitError, match="values="):
        spread([])
    with pytest.raises(LabkitError, match="values="):
        spread([1.0, float("nan")])
    with pytest.raises(LabkitError, match="conf="):
        spread([1.0], conf=1.0)


def test_comparison_spread_and_interleave_agree_with_the_rounds():
    c = Comparison("case", {"a": [2.0, 2.2, 1.8], "b": [1.0, 1.0, 1.0]})
    assert c.spread("a", "b").median == pytest.approx(c.ratio("a", "b"))
    assert c.time_spread("a").unit == "s" and "s [" in str(c.time_spread("a"))
    calls = []
    live = interleave({"x": lambda: calls.append("x"), "y": lambda: calls.append("y")}, rounds=4, warmup=1)
    assert len(live.times["x"]) == len(live.times["y"]) == 4
    assert calls[:2] == ["x", "y"] and calls[2:4] == ["x", "y"] and calls[4:6] == ["y", "x"]  # order rotates
    assert isinstance(live.spread("x", "y"), Spread)
