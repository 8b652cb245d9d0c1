"""Small array helpers the hot paths share.

:func:`unique` exists because ``np.unique`` in NumPy 2.4 goes through a hash table
(``_unique_hash``) and then sorts: on the int64 id arrays a sampler produces (10^5-10^6
entries) it measured about 50x slower here than sorting and dropping repeats, and it ran
inside every sampled hop and every read plan.
"""

from __future__ import annotations

import numpy as np


def unique(a) -> np.ndarray:
    """Return the sorted distinct values of a 1-d array (``np.unique(a)`` without the hash table)."""
    s = np.sort(np.asarray(a).reshape(-1))
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
