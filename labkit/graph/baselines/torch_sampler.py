"""The sampler's baselines: a vectorised torch sampler, and the C++ samplers tried as anchors."""

from __future__ import annotations

import numpy as np


class TorchSampler:
    """The baseline: a vectorised torch sampler (torch.rand, a gather, torch.unique per hop), not a C++ one.

    Samples with replacement; each hop's frontier is the merged node set (as DGL blocks).
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, seed: int = 0) -> None:
        import torch
        self.torch = torch
        self.indptr = torch.from_numpy(indptr)
        self.indices = torch.from_numpy(indices.astype(np.int64))
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self, seeds: np.ndarray, fanouts: list[int]) -> int:
        """Sample `fanouts` hops from `seeds` (DGL-style merged frontier); return sampled edges."""
        torch = self.torch
        frontier = torch.from_numpy(seeds)
        total = 0
        for k in fanouts:
            start = self.indptr[frontier]
            deg = self.indptr[frontier + 1] - start
            has = deg > 0
            start, deg = start[has], deg[has]
            off = (torch.rand(len(start), k, generator=self.gen) * deg[:, None]).long()
            nbrs = self.indices[start[:, None] + off].flatten()
            total += nbrs.numel()
            frontier = torch.unique(torch.cat([frontier, nbrs]))
        return total


#: C++ neighbour samplers tried as anchors, in the order tried: (contender, module, how it installs here).
#: Each is imported lazily; one that is absent or fails to load is skipped with its reason recorded.
ANCHORS = (
    ("pyg_lib", "pyg_lib", "pyg-lib is not on PyPI; its wheels are only on PyG's own wheel index, which this "
                           "lab's machines cannot reach"),
    ("torch_sparse", "torch_sparse", "PyPI has only torch-sparse 0.6.18's source (2023): pip cannot build it in "
                                     "isolation (its setup imports torch), and built against the installed torch it "
                                     "compiles 23 C++ files plus torch-scatter's, minutes each on 2 cores; its "
                                     "neighbor_sample alone, compiled in a side environment, drew edges over 40x "
                                     "slower than labkit's, because each draw makes a one-element torch tensor "
                                     "(torch::randint), so it is no DGL-class anchor either"),
    ("dgl_graphbolt", "dgl.graphbolt", "PyPI's newest Linux cp311 DGL is 2.1.0, whose GraphBolt library is built "
                                       "for torch 2.0-2.2 only, so `import dgl` fails beside torch 2.13: it "
                                       "finds no libgraphbolt_pytorch_2.13.0.so"),
)


def anchor_sampler(name: str, indptr: np.ndarray, indices: np.ndarray, anchors=ANCHORS):
    """Return (sample(seeds, fanouts) -> sampled edges, None) for an anchor that loads, else (None, reason).

    `name` is looked up in `anchors` ((contender, module, how it installs) triples).

    The anchors sample PyG-style: each hop expands only the nodes first seen at the hop before
    (labkit's ``frontier="new"``), with replacement.
    """
    import importlib

    module = dict((n, m) for n, m, _ in anchors)[name]
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or a native library that does not load beside this torch
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    import torch
    rowptr, col = torch.from_numpy(indptr.astype(np.int64)), torch.from_numpy(indices.astype(np.int64))
    if name == "pyg_lib":
        import pyg_lib

        def sample(seeds, fanouts):
            out = pyg_lib.sampler.neighbor_sample(rowptr, col, torch.from_numpy(seeds), list(fanouts), replace=True)
            return int(out[0].numel())
    elif name == "torch_sparse":
        def sample(seeds, fanouts):
            out = torch.ops.torch_sparse.neighbor_sample(rowptr, col, torch.from_numpy(seeds), list(fanouts),
                                                         True, True)
            return int(out[1].numel())
    else:
        return None, "labkit has no adapter for it yet"
    try:
        sample(np.arange(min(4, len(indptr) - 1), dtype=np.int64), [2])
    except Exception as exc:  # loads but its kernel does not run with this torch
        return None, f"{type(exc).__name__} on a first call: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return sample, None
