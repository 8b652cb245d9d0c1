"""What every operator shares: the weight and activation checks, and the bit masks that find non-zeros."""

from __future__ import annotations

import torch

from labkit.core.errors import bad_value


WEIGHT_BITS = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float16: (torch.int16, 0x7FFF),
         torch.float32: (torch.int32, 0x7FFFFFFF)}


def as_float(w: torch.Tensor) -> torch.Tensor:
    """w unchanged where fp32 holds its values exactly (bf16, fp16, fp32), else converted to fp32."""
    return w if w.dtype in WEIGHT_BITS else w.float()


def check_weight(weight) -> torch.Tensor:
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise bad_value("weight", getattr(weight, "shape", type(weight).__name__), "a 2-D torch.Tensor (M, K)")
    return weight


def check_x(x, k: int) -> None:
    """Refuse x unless it is a torch tensor of shape (K,) or (K, N) (a few attribute reads: the
    timed call stays as it was), in :func:`~labkit.spmm.kernels_cpu.spmm`'s words."""
    if not isinstance(x, torch.Tensor):
        raise bad_value("x", type(x).__name__, f"a torch.Tensor of shape ({k},) or ({k}, N)")
    shape = x.shape
    if not 1 <= len(shape) <= 2 or shape[0] != k:
        raise bad_value("x.shape", tuple(shape), f"({k},) or ({k}, N) (K = {k}, the weight's columns)")
