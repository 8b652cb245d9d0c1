import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from labkit.core.intrinsics import prefetch, prefetch2


@njit(cache=False)
def _sum_with_hints(a, b, ahead):
    s = 0.0
    for i in range(a.shape[0]):
        prefetch(a, i + ahead)          # past the end too: a hint never faults
        prefetch2(b, i % b.shape[0], 0)
        s += a[i]
    return s


def test_prefetch_hints_compile_and_leave_results_alone():
    a = np.arange(10_000, dtype=np.float32)
    b = np.ones((7, 3), np.float64)
    assert _sum_with_hints(a, b, 1024) == pytest.approx(float(a.sum()))
    assert _sum_with_hints(a[::3], b, 64) == pytest.approx(float(a[::3].sum()))  # strided views too


def test_prefetch_refuses_the_wrong_array_rank():
    @njit(cache=False)
    def bad(a):
        prefetch(a, 0)

    with pytest.raises(TypingError):
        bad(np.zeros((2, 2)))
