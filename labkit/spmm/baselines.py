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
* ``TiledCSLMatmul``: the lab's kernels over Tiled-CSL words (4 bytes per non-zero).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from labkit.core.errors import bad_value, check_choice
from labkit.spmm.kernels_cpu import KERNELS, spmm
from labkit.spmm.tiled_csl import TiledCSL, encode


def _to_csr(w: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # torch marks sparse CSR "beta" on every conversion
        warnings.simplefilter("ignore", UserWarning)
        return w.to_sparse_csr()


def _check_weight(weight) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise bad_value("weight", getattr(weight, "shape", type(weight).__name__), "a 2-D torch.Tensor (M, K)")
    return weight


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
        w = _check_weight(weight).float()
        csr = _to_csr(w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.weight = torch.sparse_csr_tensor(csr.crow_indices().to(torch.int32),
                                                  csr.col_indices().to(torch.int32), csr.values(),
                                                  size=w.shape, check_invariants=False)
        self.shape = tuple(w.shape)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return sum(t.numel() * t.element_size() for t in (w.crow_indices(), w.col_indices(), w.values()))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if x.dim() == 1:
            return torch.matmul(self.weight, x[:, None])[:, 0]
        return torch.matmul(self.weight, x)


class ScipyCSR:
    """W @ x with scipy.sparse CSR (fp32 values, int32 indices)."""

    name = "scipy_csr"

    def __init__(self, weight: torch.Tensor) -> None:
        w = _check_weight(weight).float()
        csr = _to_csr(w)
        m, k = w.shape
        self.weight = sp.csr_array((csr.values().numpy(), csr.col_indices().numpy().astype(np.int32),
                                    csr.crow_indices().numpy().astype(np.int32)), shape=(m, k))
        self.shape = (m, k)

    @property
    def nbytes(self) -> int:
        w = self.weight
        return int(w.data.nbytes + w.indices.nbytes + w.indptr.nbytes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.weight @ x.float().numpy())


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
    """Return the byte model: dense 16-bit weights 2MK, Tiled-CSL 4(1-s)MK, activations 2KN + 4MN."""
    io = 2 * k * n + 4 * m * n
    return {"dense": 2.0 * m * k + io, "tiled_csl": 4.0 * (1 - sparsity) * m * k + io}
