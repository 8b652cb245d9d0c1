"""The CSR build's baseline: scipy's COO->CSR, on its cheapest path to labkit's canonical CSR."""

from __future__ import annotations

import numpy as np


def scipy_builder(src, dst, n):
    """scipy's cheapest COO->CSR to labkit's canonical pattern (one thread: sparsetools is serial C++).

    scipy has no pattern-only sparse matrix, so the values are 1-byte bools (the narrowest dtype it
    carries); ``tocsr()`` sums duplicates, which sorts every row: the same CSR as ``dedup=True``.
    """
    import scipy.sparse as sp
    pattern = np.ones(len(src), np.bool_)
    return lambda: sp.coo_array((pattern, (src, dst)), shape=(n, n)).tocsr()
