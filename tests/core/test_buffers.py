"""BufferPool: a pooled array is never handed out while any view or tensor of it is alive."""

import gc

import numpy as np
import pytest
import torch

from labkit.core.buffers import BufferPool, aligned_empty


@pytest.mark.parametrize("rows", [1000, 100_000])  # the second is large enough to be huge-page mapped
def test_pool_reuses_only_unreferenced_arrays(rows):
    pool = BufferPool(keep=3)
    a = pool.take((rows, 128))
    a[:] = 1.0
    t = torch.from_numpy(a)
    del a
    b = pool.take((rows, 128))
    assert b.ctypes.data != t.data_ptr()  # the tensor still holds the first array
    v = t[5:, :3]
    del t
    c = pool.take((rows, 128))
    assert c.ctypes.data not in (v.data_ptr() - 5 * 128 * 4, b.ctypes.data)  # a view of a view still counts
    b[:] = 2.0
    c[:] = 3.0
    assert float(v.sum()) == v.numel()  # nobody wrote into the memory v sees
    del b, c, v
    gc.collect()
    d = pool.take((rows // 2, 128))  # a smaller request fits a free pooled array
    assert d.shape == (rows // 2, 128) and d.flags.c_contiguous
    assert len(pool._entries) == 3


def test_pool_past_keep_hands_out_one_off_arrays():
    pool = BufferPool(keep=1)
    held = [pool.take((10, 4), np.int64) for _ in range(3)]
    assert len({h.ctypes.data for h in held}) == 3
    assert all(h.dtype == np.int64 for h in held)
    assert len(pool._entries) == 1


def test_aligned_empty_aligns_rows():
    a = aligned_empty((7, 16), np.float32)
    assert a.ctypes.data % 64 == 0 and a.shape == (7, 16) and a.dtype == np.float32
