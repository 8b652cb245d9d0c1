"""The anchors GoldMiner is compared with: the monolithic program and PyTorch's DataLoader.

Modules: :mod:`.monolithic`, :mod:`.dataloader`; their public names are importable from here.
"""

from __future__ import annotations

from labkit.dataworkers.baselines.dataloader import EpochBatches, dataloader
from labkit.dataworkers.baselines.monolithic import monolithic_batches

__all__ = ["EpochBatches", "dataloader", "monolithic_batches"]
