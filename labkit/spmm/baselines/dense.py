"""The dense anchor: torch.matmul on bf16 (or fp32) weights, torch's default threads."""

from __future__ import annotations

import torch

from labkit.core.errors import check_choice
from labkit.spmm.baselines.operator import check_weight, check_x


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
        self.weight = check_weight(weight).to(dtype).contiguous()
        self.name = {torch.bfloat16: "dense_bf16", torch.float32: "dense_fp32",
                     torch.float16: "dense_fp16"}[dtype] + ("_linear" if call == "linear" else "")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        check_x(x, self.weight.shape[1])
        x = x.to(self.weight.dtype)
        if self.call == "matmul":
            return torch.matmul(self.weight, x)
        if x.dim() == 1:
            return torch.nn.functional.linear(x[None, :], self.weight)[0]
        return torch.nn.functional.linear(x.T, self.weight).T
