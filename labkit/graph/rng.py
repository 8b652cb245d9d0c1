"""Counter-based random numbers for numba kernels: draw i of stream s depends only on (seed, s, i).

Kernels that run in parallel (prange) cannot share one sequential generator and stay
deterministic, so every draw is a splitmix64 hash of a key built from the seed and the item's
position. The same seed then gives the same sample whatever the thread count or chunk size.
"""

from __future__ import annotations

import numpy as np
from numba import njit


GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@njit(inline="always", cache=True)
def mix64(x):
    """Return the splitmix64 finaliser of uint64 `x` (a bijective, well-mixed hash)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@njit(inline="always", cache=True)
def stream_key(seed, stream, index):
    """Return the uint64 starting state of item `index` in stream `stream` under `seed`."""
    k = mix64(np.uint64(seed) * GOLDEN + np.uint64(stream))
    return mix64(k + np.uint64(index) * GOLDEN)


@njit(inline="always", cache=True)
def uniform(state):
    """Return a float in [0, 1) from uint64 `state` (53 random bits)."""
    return float(mix64(state) >> _S11) * _INV53


@njit(inline="always", cache=True)
def randint(state, n):
    """Return an int in [0, n) from uint64 `state` (Lemire's multiply-shift; n < 2**32)."""
    return np.int64(((mix64(state) >> _S32) * np.uint64(n)) >> _S32)
