"""The CSR anchors: torch and scipy CSR (fp32 values), and CSR at Tiled-CSL's precision (bf16, numba)."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from numba import njit, prange

from labkit.core.errors import bad_value
from labkit.spmm.baselines.operator import WEIGHT_BITS, as_float, check_weight, check_x
from labkit.spmm.kernels_cpu import _as_activations, _ld, _u32_as_f32


@njit(parallel=True, cache=True)
def _csr_row_counts(bits, mask, counts):
    for i in prange(bits.shape[0]):
        c = 0
        for j in range(bits.shape[1]):
            if bits[i, j] & mask:
                c += 1
        counts[i] = c


@njit(parallel=True, cache=True)
def _csr_fill(bits, mask, indptr, cols, vals):
    for i in prange(bits.shape[0]):
        p = indptr[i]
        for j in range(bits.shape[1]):
            v = bits[i, j]
            if v & mask:
                cols[p] = j
                vals[p] = v
                p += 1


def csr_arrays(w: torch.Tensor) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """Return (indptr int64, column indices int32, values in w's dtype) of a bf16/fp16/fp32 matrix's CSR.

    The same non-zeros as ``w.to_sparse_csr()`` (-0.0 is a zero, NaN is not), found by two parallel
    passes over the value bits: on a 36864 x 9216 bf16 weight this takes about a second where torch's
    conversion took 15-30 s, which was most of the bench's set-up time for the CSR baselines.
    """
    w = check_weight(w)
    if w.dtype not in WEIGHT_BITS:
        raise bad_value("weight.dtype", w.dtype, "torch.bfloat16, torch.float16 or torch.float32")
    itype, mask = WEIGHT_BITS[w.dtype]
    bits = w.contiguous().view(itype).numpy()
    m = bits.shape[0]
    counts = np.empty(m, np.int64)
    _csr_row_counts(bits, bits.dtype.type(mask), counts)
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    cols = np.empty(nnz, np.int32)
    vals = np.empty(nnz, bits.dtype)
    _csr_fill(bits, bits.dtype.type(mask), indptr, cols, vals)
    return indptr, cols, torch.from_numpy(vals).view(w.dtype)


class TorchCSR:
    """W @ x with torch's sparse CSR (fp32 values, int32 indices; MKL sparse BLAS)."""

    name = "torch_csr"

    def __init__(self, weight: torch.Tensor) -> None:
        w = as_float(check_weight(weight))
        indptr, cols, vals = csr_arrays(w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.weight = torch.sparse_csr_tensor(torch.from_numpy(indptr.astype(np.int32)),
                                                  torch.from_numpy(cols), vals.float(),
                                                  size=w.shape, check_invariants=False)
        self.shape = tuple(w.shape)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return sum(t.numel() * t.element_size() for t in (w.crow_indices(), w.col_indices(), w.values()))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        check_x(x, self.shape[1])
        x = x.float()
        if x.dim() == 1:
            return torch.matmul(self.weight, x[:, None])[:, 0]
        return torch.matmul(self.weight, x)


class ScipyCSR:
    """W @ x with scipy.sparse CSR (fp32 values, int32 indices)."""

    name = "scipy_csr"

    def __init__(self, weight: torch.Tensor) -> None:
        w = as_float(check_weight(weight))
        indptr, cols, vals = csr_arrays(w)
        m, k = w.shape
        self.weight = sp.csr_array((vals.float().numpy(), cols, indptr.astype(np.int32)), shape=(m, k))
        self.shape = (m, k)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return int(w.data.nbytes + w.indices.nbytes + w.indptr.nbytes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        check_x(x, self.shape[1])
        return torch.from_numpy(self.weight @ x.float().numpy())


@njit(fastmath=True, boundscheck=False, inline="always", cache=True)
def _csr_row_dot(vals, cols, x):
    # Indexed from 0 over slices, as the lab's own row loop is: LLVM then loads the values and
    # columns contiguously and gathers only the activations.
    s = np.float32(0.0)
    for i in range(vals.shape[0]):
        s += _u32_as_f32(np.uint32(vals[i]) << np.uint32(16)) * _ld(x, cols[i])
    return s


@njit(parallel=True, fastmath=True, boundscheck=False, cache=True)
def _csr_bf16(indptr, cols, vals, x, y):
    """y[r, j] = sum over row r's non-zeros of bf16 value * x[j, col] (x float32 (N, K), C order)."""
    m = indptr.shape[0] - 1
    for j in range(x.shape[0]):
        xj = x[j]
        for r in prange(m):
            a, b = indptr[r], indptr[r + 1]
            y[r, j] = _csr_row_dot(vals[a:b], cols[a:b], xj)


class BF16CSR:
    """W @ x with CSR at Tiled-CSL's precision: bf16 values (as uint16 bits), int32 columns; numba."""

    name = "csr_bf16"

    def __init__(self, weight: torch.Tensor) -> None:
        w = check_weight(weight).to(torch.bfloat16)
        self.indptr, self.cols, vals = csr_arrays(w)
        self.vals = vals.view(torch.uint16).numpy()
        self.shape = tuple(w.shape)

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.cols.nbytes + self.vals.nbytes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        xn, one = _as_activations(x, self.shape[1])
        xt = np.ascontiguousarray(xn.T)  # (N, K): each column's activations contiguous
        y = np.empty((self.shape[0], xt.shape[0]), np.float32)
        _csr_bf16(self.indptr, self.cols, self.vals, xt, y)
        return torch.from_numpy(y[:, 0] if one else y)
