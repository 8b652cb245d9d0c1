"""The anchors Flash-LLM is compared with, and Tiled-CSL itself, behind one interface.

Every operator holds one weight matrix W (M x K) and is called with activations x of shape (K,)
or (K, N) (a torch tensor, bf16 or fp32) and returns W @ x as a torch tensor. Swapping one for
another changes nothing else, which is how the bench and the decoder compare them.

* ``DenseTorch``: torch.matmul on bf16 (or fp32) weights, torch's default threads (MKL/oneDNN).
  At N = 1 a 1-D x goes through torch's matrix-vector path, the fastest torch has for decode.
* ``TorchCSR``: torch.sparse_csr_tensor @ x (MKL). CPU torch has no bf16 CSR matmul, so values
  are fp32 with int32 indices: 8 bytes per non-zero.
* ``ScipyCSR``: scipy.sparse.csr_array @ x, fp32 values and int32 indices (8 bytes per non-zero);
  scipy's CSR matvec is single-threaded.
* ``BF16CSR``: CSR at the precision Tiled-CSL has: bf16 values and int32 column indices
  (6 bytes per non-zero), with a numba row-parallel gather-dot written like the lab's own N = 1
  kernel. It separates what the format buys from what 16-bit values buy over the fp32 CSRs.
* ``TiledCSLMatmul``: the lab's kernels over Tiled-CSL words (4 bytes per non-zero).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from numba import njit, prange

from labkit.core.errors import bad_value, check_choice, check_range
from labkit.spmm.kernels_cpu import KERNELS, _as_activations, _ld, _u32_as_f32, spmm
from labkit.spmm.prune import check_sparsity
from labkit.spmm.tiled_csl import TiledCSL, encode


_BITS = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float16: (torch.int16, 0x7FFF),
         torch.float32: (torch.int32, 0x7FFFFFFF)}


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
    w = _check_weight(w)
    if w.dtype not in _BITS:
        raise bad_value("weight.dtype", w.dtype, "torch.bfloat16, torch.float16 or torch.float32")
    itype, mask = _BITS[w.dtype]
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


def _as_float(w: torch.Tensor) -> torch.Tensor:
    """w unchanged where fp32 holds its values exactly (bf16, fp16, fp32), else converted to fp32."""
    return w if w.dtype in _BITS else w.float()


def _check_weight(weight) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise bad_value("weight", getattr(weight, "shape", type(weight).__name__), "a 2-D torch.Tensor (M, K)")
    return weight


def _check_x(x, k: int) -> None:
    """Refuse x unless it is a torch tensor of shape (K,) or (K, N) (a few attribute reads: the
    timed call stays as it was), in :func:`~labkit.spmm.kernels_cpu.spmm`'s words."""
    if not isinstance(x, torch.Tensor):
        raise bad_value("x", type(x).__name__, f"a torch.Tensor of shape ({k},) or ({k}, N)")
    shape = x.shape
    if not 1 <= len(shape) <= 2 or shape[0] != k:
        raise bad_value("x.shape", tuple(shape), f"({k},) or ({k}, N) (K = {k}, the weight's columns)")


class DenseTorch:
    """W @ x with dense torch weights in `dtype` (bf16 by default).

    call "matmul": torch.matmul(W, x) (a 1-D x takes torch's matrix-vector path);
    call "linear": torch.nn.functional.linear(x^T, W)^T, the call a model's nn.Linear makes
    (a GEMM with N rows, oneDNN/AMX on this CPU). Which one is faster depends on shape and N,
    so the bench times both and compares against the faster.
    """

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16, *, call: str = "matmul") -> None:
        check_choice("dtype", dtype, (torch.bfloat16, torch.float32, torch.float16))
        self.call = check_choice("call", call, ("matmul", "linear"))
        self.weight = _check_weight(weight).to(dtype).contiguous()
        self.name = {torch.bfloat16: "dense_bf16", torch.float32: "dense_fp32",
                     torch.float16: "dense_fp16"}[dtype] + ("_linear" if call == "linear" else "")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        _check_x(x, self.weight.shape[1])
        x = x.to(self.weight.dtype)
        if self.call == "matmul":
            return torch.matmul(self.weight, x)
        if x.dim() == 1:
            return torch.nn.functional.linear(x[None, :], self.weight)[0]
        return torch.nn.functional.linear(x.T, self.weight).T


class TorchCSR:
    """W @ x with torch's sparse CSR (fp32 values, int32 indices; MKL sparse BLAS)."""

    name = "torch_csr"

    def __init__(self, weight: torch.Tensor) -> None:
        w = _as_float(_check_weight(weight))
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
        _check_x(x, self.shape[1])
        x = x.float()
        if x.dim() == 1:
            return torch.matmul(self.weight, x[:, None])[:, 0]
        return torch.matmul(self.weight, x)


class ScipyCSR:
    """W @ x with scipy.sparse CSR (fp32 values, int32 indices)."""

    name = "scipy_csr"

    def __init__(self, weight: torch.Tensor) -> None:
        w = _as_float(_check_weight(weight))
        indptr, cols, vals = csr_arrays(w)
        m, k = w.shape
        self.weight = sp.csr_array((vals.float().numpy(), cols, indptr.astype(np.int32)), shape=(m, k))
        self.shape = (m, k)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return int(w.data.nbytes + w.indices.nbytes + w.indptr.nbytes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        _check_x(x, self.shape[1])
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
        w = _check_weight(weight).to(torch.bfloat16)
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


class TiledCSLMatmul:
    """W @ x with W in Tiled-CSL and one of the lab's CPU kernels ("auto", "sparse", "dense_tile")."""

    def __init__(self, weight: torch.Tensor | TiledCSL, *, kernel: str = "auto",
                 tile: tuple[int, int] | None = None) -> None:
        check_choice("kernel", kernel, KERNELS)
        if isinstance(weight, TiledCSL):
            self.weight = weight
        else:
            self.weight = encode(_check_weight(weight).to(torch.bfloat16), tile=tile)
        self.kernel = kernel
        self.name = "tiled_csl" if kernel == "auto" else f"tiled_csl_{kernel}"

    @property
    def shape(self) -> tuple[int, int]:
        return self.weight.shape

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(spmm(self.weight, x, kernel=self.kernel))


def roofline_bytes(m: int, k: int, n: int, sparsity: float) -> dict[str, float]:
    """Return the byte model: dense 16-bit weights 2MK, Tiled-CSL 4(1-s)MK, activations 2KN + 4MN.

    M, K, N are integers >= 1 and `sparsity` a number in [0, 1) (as the pruners take it); anything
    else raises ValueError naming it.
    """
    for arg, v in (("m", m), ("k", k), ("n", n)):
        check_range(arg, v, 1, integer=True)
    sparsity = check_sparsity(sparsity)
    io = 2 * k * n + 4 * m * n
    return {"dense": 2.0 * m * k + io, "tiled_csl": 4.0 * (1 - sparsity) * m * k + io}
