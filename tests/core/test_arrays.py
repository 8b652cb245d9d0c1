"""labkit.core.arrays.unique is np.unique for 1-d arrays, sort based."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.arrays import unique


@settings(deadline=None)  # a descheduled example on a busy machine is not a failure
@given(st.lists(st.integers(-2**40, 2**40), max_size=300))
def test_unique_equals_numpy(xs):
    a = np.array(xs, np.int64)
    got = unique(a)
    assert got.dtype == a.dtype
    assert np.array_equal(got, np.unique(a))


def test_unique_flattens_and_keeps_dtype():
    a = np.array([[3, 1], [3, 2]], np.int32)
    assert unique(a).tolist() == [1, 2, 3] and unique(a).dtype == np.int32
    assert unique(np.zeros(0, np.int64)).size == 0
