"""Shared-memory transport: flatten/pack round trips and slot ownership."""

from __future__ import annotations

import os

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.dataworkers.transport import (SlotMapper, SlotPool, dense_order, flatten, pack, packed_size, slots_of,
                                         unflatten, unpack)

DTYPES = [np.float32, np.int64, np.uint8, np.float64, np.int16]


@settings(max_examples=25, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=3), min_size=1, max_size=4),
       dtypes=st.lists(st.sampled_from(DTYPES), min_size=4, max_size=4), as_tensor=st.booleans())
def test_pack_unpack_round_trip(shapes, dtypes, as_tensor):
    rng = np.random.default_rng(0)
    leaves = [np.asarray(rng.random(s) * 100).astype(dtypes[i % 4]) for i, s in enumerate(shapes)]
    batch = (tuple(torch.from_numpy(a) if as_tensor else a for a in leaves), {"meta": 3, "x": leaves[0]}, [leaves[-1]])
    layout, arrays = flatten(batch)
    buf = bytearray(packed_size(arrays) + 64)
    specs = pack(memoryview(buf), arrays)
    out = unflatten(layout, unpack(memoryview(buf), specs))
    for a, b in zip(leaves, out[0]):
        assert np.array_equal(a, np.asarray(b)) and np.asarray(b).dtype == a.dtype
    assert out[1]["meta"] == 3 and np.array_equal(out[1]["x"], leaves[0])


def test_slots_are_owned_and_unlinked():
    pool = SlotPool(4096, 3)
    names = [pool.acquire() for _ in range(3)]
    assert pool.acquire() is None  # capped
    m = SlotMapper()
    m.buffer(names[0])[:4] = b"abcd"
    assert bytes(pool.buffer(names[0])[:4]) == b"abcd"
    m.close()
    pool.release(names[0])
    pool.grow(10_000)  # the freed, now too small slot is destroyed
    assert len(slots_of(os.getpid())) == 2
    pool.close()
    assert slots_of(os.getpid()) == []


def _round_trip(batch):
    layout, arrays = flatten(batch)
    buf = bytearray(packed_size(arrays) + 64)
    specs = pack(memoryview(buf), arrays)
    return unflatten(layout, unpack(memoryview(buf), specs))


def test_dense_tensors_keep_their_memory_format():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 4, 5, 3).permute(0, 3, 1, 2)  # channels-last
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    t = torch.arange(12.0).reshape(3, 4).t()
    one = torch.zeros(2, 1, 3).permute(2, 1, 0)  # a size-1 dim's stride is arbitrary
    y, tt, o = _round_trip((x, t, one))
    assert torch.equal(y, x) and y.stride() == x.stride()
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(tt, t) and tt.stride() == t.stride()
    assert torch.equal(o, one) and o.shape == one.shape


def test_gapped_and_broadcast_tensors_travel_as_contiguous_copies():
    gapped = torch.arange(40.0).reshape(5, 8)[:, ::2]
    broadcast = torch.arange(3.0).expand(4, 3)
    assert dense_order(gapped) is None and dense_order(broadcast) is None
    g, b = _round_trip([gapped, broadcast])
    assert torch.equal(g, gapped) and g.is_contiguous()
    assert torch.equal(b, broadcast) and b.is_contiguous()
