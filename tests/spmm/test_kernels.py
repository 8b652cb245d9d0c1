"""SpMM kernels against a float64 reference, with the output poisoned before every run.

Tolerance: W and x are exact in bf16 and widened exactly to fp32; each output is a sum of K
fp32 products accumulated in fp32, so |y - y64| <= K * 2**-24 * (|W| @ |x|) (the standard
gamma_K bound for recursive summation; vector and pairwise orders only do better).
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.spmm.baselines import BF16CSR, DenseTorch, ScipyCSR, TiledCSLMatmul, TorchCSR, roofline_bytes
from labkit.spmm.kernels_cpu import bucket, spmm
from labkit.spmm.prune import magnitude_prune, random_mask, random_sparse
from labkit.spmm.tiled_csl import encode

KERNELS = ["sparse", "dense_tile"]


def _check(w, enc, x, kernel):
    n = 1 if x.dim() == 1 else x.shape[1]
    out = np.full((enc.shape[0], bucket(n)), np.nan, np.float32)   # poison: unwritten rows stay NaN
    y = spmm(enc, x, kernel=kernel, out=out)
    x2 = x[:, None] if x.dim() == 1 else x
    ref = (w.double() @ x2.double()).numpy()
    bound = w.shape[1] * 2.0**-24 * (w.double().abs() @ x2.double().abs()).numpy() + 1e-30
    y2 = y[:, None] if y.ndim == 1 else y
    assert y.shape == ((enc.shape[0],) if x.dim() == 1 else (enc.shape[0], n))
    assert np.all(np.isfinite(y2)), "an output element was never written"
    assert np.all(np.abs(y2 - ref) <= bound)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 90), k=st.integers(1, 300), s=st.sampled_from([0.0, 0.5, 0.8, 0.95]),
       n=st.sampled_from([1, 2, 3, 4]), kernel=st.sampled_from(KERNELS),
       tile=st.sampled_from([None, (4, 32), (8, 64), (16, 16)]), seed=st.integers(0, 1000))
def test_matches_float64_reference(m, k, s, n, kernel, tile, seed):
    w = random_sparse((m, k), s, seed=seed)
    enc = encode(w, tile=tile)
    x = torch.randn(k, n, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    _check(w, enc, x if n > 1 else x[:, 0], kernel)


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 8, 16, 17, 33, 64])   # 17..64: the nb = 32 and 64 paths
@pytest.mark.parametrize("kernel", KERNELS)
def test_wider_n(n, kernel):
    w = random_sparse((200, 700), 0.8, seed=n)
    enc = encode(w, tile=(8, 256))
    _check(w, enc, torch.randn(700, n).to(torch.bfloat16), kernel)


def test_realistic_tile_and_fp32_input():
    w = random_sparse((300, 9216), 0.9, seed=3)
    enc = encode(w)
    assert enc.tile == (8, 4608)
    x = torch.randn(9216)
    _check(w, enc, x.to(torch.bfloat16), "sparse")
    # fp32 activations are used as given (not rounded to bf16)
    y = spmm(enc, x)
    ref = (w.double() @ x.double()).numpy()
    assert np.abs(y - ref).max() <= 9216 * 2.0**-24 * (w.double().abs() @ x.double().abs()).max().item()


def test_empty_matrix_and_empty_rows():
    w = torch.zeros(37, 50, dtype=torch.bfloat16)
    w[5, 7] = 2.0
    enc = encode(w, tile=(8, 16))
    for kernel in KERNELS:
        _check(w, enc, torch.ones(50, dtype=torch.bfloat16), kernel)
    enc0 = encode(torch.zeros(9, 9, dtype=torch.bfloat16))
    assert np.array_equal(spmm(enc0, torch.ones(9)), np.zeros(9, np.float32))


def test_all_operators_agree():
    w = random_sparse((64, 96), 0.7, seed=1)
    x = torch.randn(96, 3, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    # W and x are bf16, so every product is exact in fp32 (8 + 8 significant bits) and also exactly
    # representable in fp16 (values are normal there: checked). Per element, with
    # gamma = K * 2**-24 * (|W| @ |x|), the fp32-accumulation bound of any summation order:
    #   fp32 output (fp32 dense, torch/scipy fp32 CSR, bf16 CSR, Tiled-CSL): |y - y64| <= gamma;
    #   16-bit output (dense bf16 / fp16: fp32 accumulation, then one rounding of the result to
    #   unit roundoff u = 2**-8 for bf16, 2**-11 for fp16): |y - y64| <= gamma + u * (|y64| + gamma).
    assert torch.equal(w.half().float(), w.float()) and torch.equal(x.half().float(), x.float())
    ref = (w.double() @ x.double()).numpy()
    gamma = 96 * 2.0**-24 * (w.double().abs() @ x.double().abs()).numpy()
    rounding = {"dense_bf16": 2.0**-8, "dense_bf16_linear": 2.0**-8, "dense_fp16": 2.0**-11}
    ops = (DenseTorch(w), DenseTorch(w, call="linear"), DenseTorch(w, torch.float16), DenseTorch(w, torch.float32),
           TorchCSR(w), ScipyCSR(w), BF16CSR(w), TiledCSLMatmul(w), TiledCSLMatmul(w, kernel="dense_tile"))
    for op in ops:
        y = op(x).double().numpy()
        assert y.shape == (64, 3)
        u = rounding.get(op.name, 0.0)  # 0: fp32 result, no output rounding
        assert np.all(np.abs(y - ref) <= gamma + u * (np.abs(ref) + gamma)), op.name
    assert {op.name for op in ops} - set(rounding) >= {"dense_fp32", "torch_csr", "scipy_csr", "csr_bf16",
                                                       "tiled_csl", "tiled_csl_dense_tile"}
    assert TiledCSLMatmul(w).nbytes < DenseTorch(w).nbytes < DenseTorch(w, torch.float32).nbytes
    # bf16 CSR: 6 bytes per non-zero against the fp32 CSRs' 8, and exact on bf16 weights at N = 1
    nnz = int((w != 0).sum())
    assert BF16CSR(w).nbytes == 6 * nnz + 8 * 65 and ScipyCSR(w).nbytes == 8 * nnz + 4 * 65
    x1 = torch.randn(96).to(torch.bfloat16)
    y1 = BF16CSR(w)(x1)
    assert y1.shape == (64,) and np.allclose(y1.numpy(), (w.double() @ x1.double()).numpy(), rtol=1e-5, atol=1e-5)
    rb = roofline_bytes(1000, 1000, 1, 0.8)
    assert rb["dense"] / rb["tiled_csl"] == pytest.approx(2.5, rel=1e-2)


def test_magnitude_prune_and_masks():
    w = torch.arange(1, 21, dtype=torch.float32).reshape(4, 5) * torch.tensor([1, -1, 1, -1, 1])
    p = magnitude_prune(w, 0.5)
    assert int((p == 0).sum()) == 10 and bool((p[p != 0].abs() >= 11).all())
    r = magnitude_prune(w, 0.4, granularity="row")
    assert ((r == 0).sum(dim=1) == 2).all()
    mask = random_mask((100, 100), 0.8, seed=4)
    assert 0.75 < 1 - mask.float().mean().item() < 0.85
    assert torch.equal(mask, random_mask((100, 100), 0.8, seed=4))
    a, b = random_sparse((50, 60), 0.8, seed=9), random_sparse((50, 60), 0.9, seed=9)
    assert bool(((b != 0) <= (a != 0)).all())          # nested masks across sparsities
    assert torch.equal(a, random_sparse((50, 60), 0.8, seed=9))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_csr_arrays_find_the_same_non_zeros_as_torch(dtype):
    """The baselines' CSR builder (two numba passes over the value bits) gives torch.to_sparse_csr's
    arrays: -0.0 is a zero, NaN and the smallest subnormal are not; empty rows and an all-zero matrix."""
    import warnings

    from labkit.spmm.baselines import csr_arrays
    w = torch.randn(37, 70, generator=torch.Generator().manual_seed(1))
    w[w.abs() < 1] = 0
    w[3] = 0
    w[0, 0], w[1, 1], w[2, 2] = -0.0, float("nan"), torch.finfo(dtype).tiny / 2 if dtype != torch.bfloat16 else 1e-39
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for m in (w.to(dtype), torch.zeros(4, 5, dtype=dtype), w.to(dtype)[:, ::2]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ref = m.to_sparse_csr()
        indptr, cols, vals = csr_arrays(m)
        assert indptr.dtype == np.int64 and cols.dtype == np.int32 and vals.dtype == dtype
        assert np.array_equal(indptr, ref.crow_indices().numpy()) and np.array_equal(cols, ref.col_indices().numpy())
        assert torch.equal(vals.view(bits), ref.values().view(bits))


def test_csr_arrays_refuse_other_dtypes():
    from labkit.core.errors import LabkitError
    from labkit.spmm.baselines import csr_arrays
    with pytest.raises(LabkitError, match="weight.dtype"):
        csr_arrays(torch.zeros(2, 2, dtype=torch.float64))
