"""The lab's own operator behind the same interface (Tiled-CSL words and its CPU kernels), and the byte model."""

from __future__ import annotations

import torch

from labkit.core.errors import check_choice, check_range
from labkit.spmm.baselines.operator import check_weight
from labkit.spmm.kernels_cpu import KERNELS, spmm
from labkit.spmm.prune import check_sparsity
from labkit.spmm.tiled_csl import TiledCSL, encode


class TiledCSLMatmul:
    """W @ x with W in Tiled-CSL and one of the lab's CPU kernels ("auto", "sparse", "dense_tile")."""

    def __init__(self, weight: torch.Tensor | TiledCSL, *, kernel: str = "auto",
                 tile: tuple[int, int] | None = None) -> None:
        check_choice("kernel", kernel, KERNELS)
        if isinstance(weight, TiledCSL):
            self.weight = weight
        else:
            self.weight = encode(check_weight(weight).to(torch.bfloat16), tile=tile)
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
