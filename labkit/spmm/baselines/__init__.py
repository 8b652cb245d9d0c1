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

Modules: :mod:`.dense`, :mod:`.csr`, :mod:`.tiled` (the lab's operator and the byte model) and
:mod:`.operator` (the checks they share); their public names are importable from here.
"""

from __future__ import annotations

from labkit.spmm.baselines.csr import BF16CSR, ScipyCSR, TorchCSR, csr_arrays
from labkit.spmm.baselines.dense import DenseTorch
from labkit.spmm.baselines.tiled import TiledCSLMatmul, roofline_bytes

__all__ = ["BF16CSR", "DenseTorch", "ScipyCSR", "TiledCSLMatmul", "TorchCSR", "csr_arrays", "roofline_bytes"]
