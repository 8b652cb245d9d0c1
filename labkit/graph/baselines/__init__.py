"""What AliGraph's pieces are compared against, honestly implemented: same inputs, same outputs.

- :func:`scipy_builder`: scipy's COO->CSR (the CSR build's baseline, ``graph.build_speedup_scipy``);
- :class:`TorchSampler`: a vectorised torch multi-hop sampler (``graph.sample_speedup_torch``);
- :func:`anchor_sampler`: C++ neighbour samplers (pyg-lib, torch-sparse, GraphBolt) where they load.
"""

from labkit.graph.baselines.scipy_csr import scipy_builder
from labkit.graph.baselines.torch_sampler import ANCHORS, TorchSampler, anchor_sampler

__all__ = ["ANCHORS", "TorchSampler", "anchor_sampler", "scipy_builder"]
