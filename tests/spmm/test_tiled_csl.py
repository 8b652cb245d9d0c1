"""Tiled-CSL encode/decode: exact round trips, zeros, padding, bytes."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.spmm.prune import random_sparse
from labkit.spmm.tiled_csl import TiledCSL, byte_bound_speedup, decode, encode

TILES = [None, (4, 16), (8, 32), (16, 4096), (3, 20), (16, 3072), (128, 64)]


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy()


@st.composite
def matrices(draw):
    m = draw(st.integers(1, 70))
    k = draw(st.integers(1, 150))
    s = draw(st.sampled_from([0.0, 0.3, 0.7, 0.9, 0.99, 1.0]))
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float16]))
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(m, k, generator=g)
    w[torch.rand(m, k, generator=g) < s] = 0.0
    # sprinkle negative zeros, and sometimes a fully dense block
    w[torch.rand(m, k, generator=g) < 0.05] = -0.0
    if draw(st.booleans()):
        w[: min(m, 4), : min(k, 16)] = torch.randn(min(m, 4), min(k, 16), generator=g) + 5.0
    return w.to(dtype)


@settings(max_examples=60, deadline=None)
@given(matrices(), st.sampled_from(TILES), st.sampled_from([1, 4, 16]))
def test_round_trip_exact(w, tile, pad):
    enc = encode(w, tile=tile, pad=pad)
    back = decode(enc)
    nz = (_bits(w) & 0x7FFF) != 0
    # non-zeros come back bit-exactly; every zero (+0.0 or -0.0) comes back as +0.0
    assert np.array_equal(_bits(back)[nz], _bits(w)[nz])
    assert np.all(_bits(back)[~nz] == 0)
    assert enc.nnz == int(nz.sum())
    assert enc.row_nnz.sum() == enc.words.size and np.all(enc.row_nnz % pad == 0)
    assert enc.tile_offsets[0] == 0 and enc.tile_offsets[-1] == enc.words.size
    assert enc.tile_counts().sum() == enc.nnz


def test_negative_zero_is_a_zero():
    w = torch.tensor([[-0.0, 1.0, 0.0, -2.0]], dtype=torch.bfloat16)
    enc = encode(w, tile=(1, 4), pad=1)
    assert enc.nnz == 2
    assert enc.words.tolist() == [(0x3F80 << 16) | 1, (0xC000 << 16) | 3]   # value high, location low


def test_empty_and_full_tiles():
    w = torch.zeros(32, 64, dtype=torch.bfloat16)
    w[:16, :32] = 1.5          # tile (0, 0) full, the other three empty
    enc = encode(w, tile=(16, 32), pad=16)
    assert enc.tile_counts().tolist() == [[512, 0], [0, 0]]
    assert torch.equal(decode(enc), w)
    assert enc.nnz == 512 and enc.words.size == 512


def test_location_is_row_times_cols_plus_col():
    w = torch.zeros(20, 40, dtype=torch.bfloat16)
    w[19, 39] = 3.0   # last row/col: a partial tile in both directions
    enc = encode(w, tile=(16, 32), pad=1)
    tile = 1 * enc.grid[1] + 1
    word = int(enc.words[enc.tile_offsets[tile]])
    assert word & 0xFFFF == (3 << 5) | 7
    assert word >> 16 == 0x4040   # bf16 bits of 3.0


@pytest.mark.parametrize("s", [0.7, 0.8, 0.9])
def test_bytes_at_most_4_1_per_nonzero(s):
    m, k = 512, 9216
    enc = encode(random_sparse((m, k), s, seed=1))
    assert enc.nbytes <= 4.1 * (1 - s) * m * k
    assert enc.nbytes >= 4 * enc.nnz
    assert isinstance(enc, TiledCSL) and abs(enc.sparsity - s) < 0.01


def test_byte_bound():
    assert byte_bound_speedup(0.8) == pytest.approx(2.5)
    assert byte_bound_speedup(0.9) == pytest.approx(5.0)


def test_auto_tile_cuts_k_into_equal_tiles():
    from labkit.spmm.tiled_csl import auto_tile
    assert auto_tile(9216) == (8, 4608)
    assert auto_tile(36864) == (8, 7376)
    assert auto_tile(7168) == (8, 7168)
    assert auto_tile(100) == (8, 112)


def test_tile_dense_picture():
    w = random_sparse((40, 70), 0.5, seed=2)
    enc = encode(w, tile=(16, 32))
    t = enc.tile_dense(1, 1)
    assert t.shape == (16, 32)
    assert np.array_equal(t, w[16:32, 32:64].float().numpy())
