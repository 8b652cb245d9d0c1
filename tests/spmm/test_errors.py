"""Bad input: one-line ValueErrors that name the argument and what is accepted."""

import numpy as np
import pytest
import torch

from labkit.spmm.baselines import DenseTorch, TiledCSLMatmul
from labkit.spmm.decoder import DecoderConfig
from labkit.spmm.kernels_cpu import bucket, spmm
from labkit.spmm.prune import magnitude_prune, random_mask, random_sparse
from labkit.spmm.tiled_csl import encode


@pytest.fixture(scope="module")
def enc():
    return encode(random_sparse((32, 48), 0.5, seed=0))


@pytest.mark.parametrize("call, match", [
    (lambda e: spmm(e, torch.zeros(47)), r"x.shape=\(47,\) .*\(48,\) or \(48, N\) with 1 <= N <= 64"),
    (lambda e: spmm(e, torch.zeros(48, 65)), r"x.shape=.*1 <= N <= 64"),
    (lambda e: spmm(e, torch.zeros(48, 0)), r"x.shape="),
    (lambda e: spmm(e, torch.zeros(48, dtype=torch.int32)), r"x.dtype=torch.int32 .*float32"),
    (lambda e: spmm(e, [1.0] * 48), r"x='list'"),
    (lambda e: spmm(e, torch.zeros(48), kernel="magic"), r"kernel='magic' .*sparse"),
    (lambda e: spmm(e, torch.zeros(48), out=np.zeros((32, 2), np.float32)), r"out="),
    (lambda e: spmm("W", torch.zeros(48)), r"w='str'"),
])
def test_spmm_rejects(enc, call, match):
    with pytest.raises(ValueError, match=match):
        call(enc)


@pytest.mark.parametrize("s", [-0.1, 1.0, 1.5, float("nan"), "0.5"])
def test_sparsity_out_of_range(s):
    with pytest.raises(ValueError, match=r"sparsity=.* in \[0.0, 1.0\)"):
        random_sparse((4, 4), s)
    with pytest.raises(ValueError, match=r"sparsity="):
        magnitude_prune(torch.ones(4, 4), s)
    with pytest.raises(ValueError, match=r"sparsity="):
        random_mask((4, 4), s)


def test_encode_rejects():
    with pytest.raises(ValueError, match=r"weight.dtype=torch.float32 .*bfloat16"):
        encode(torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"weight.shape"):
        encode(torch.ones(4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"tile=\(16, 8192\) .*<= 16"):
        encode(torch.ones(4, 4, dtype=torch.bfloat16), tile=(16, 8192))
    with pytest.raises(ValueError, match=r"tile=\(0, 4\) .*positive integers"):
        encode(torch.ones(4, 4, dtype=torch.bfloat16), tile=(0, 4))
    with pytest.raises(ValueError, match=r"pad=3"):
        encode(torch.ones(4, 4, dtype=torch.bfloat16), pad=3)


def test_fp16_words_rejected_by_cpu_kernel():
    e = encode(torch.ones(4, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"w.dtype='fp16' .*'bf16'"):
        spmm(e, torch.ones(4))


def test_other_bad_input():
    with pytest.raises(ValueError, match=r"granularity='col'"):
        magnitude_prune(torch.ones(4, 4), 0.5, granularity="col")
    with pytest.raises(ValueError, match=r"dtype=torch.int8"):
        DenseTorch(torch.ones(4, 4), torch.int8)
    with pytest.raises(ValueError, match=r"kernel='gpu'"):
        TiledCSLMatmul(torch.ones(4, 4), kernel="gpu")
    with pytest.raises(ValueError, match=r"n_heads=5 .*divisor of d_model=64"):
        DecoderConfig(d_model=64, n_heads=5)


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, "0", True])
def test_bad_seeds_are_named(seed):
    # seed=-1 used to raise a raw OverflowError from numpy's uint64 conversion.
    with pytest.raises(ValueError, match=r"seed=.* is not accepted; expected an integer in \[0, 2\*\*64\)"):
        random_sparse((4, 4), 0.5, seed=seed)
    with pytest.raises(ValueError, match=r"seed="):
        random_mask((4, 4), 0.5, seed=seed)


def test_seed_accepts_numpy_integers_and_is_reproducible():
    assert torch.equal(random_sparse((8, 8), 0.5, seed=np.int64(3)), random_sparse((8, 8), 0.5, seed=3))
    assert torch.equal(random_mask((8, 8), 0.5, seed=np.uint64(2**64 - 1)), random_mask((8, 8), 0.5, seed=2**64 - 1))


@pytest.mark.parametrize("shape", [(8, -1), (0, 4), (4,), (4, 4, 4), "4x4", (4.0, 4), (True, 4)])
def test_bad_shapes_are_named(shape):
    for make in (random_mask, random_sparse):
        with pytest.raises(ValueError, match=r"shape=.* is not accepted; expected \(M, K\) with integers M, K >= 1"):
            make(shape, 0.5)


@pytest.mark.parametrize("n", [0, 65, 100, -1, 2.5, "8"])
def test_bucket_rejects_column_counts_out_of_range(n):
    # bucket(100) used to raise a bare StopIteration.
    with pytest.raises(ValueError, match=r"n=.* is not accepted; expected an integer in \[1, 64\]"):
        bucket(n)


def test_bucket_values():
    assert [bucket(n) for n in (1, 2, 8, 9, 16, 17, 33, 64)] == [1, 8, 8, 16, 16, 32, 64, 64]
