"""The in-memory reference: topology and features in RAM, the upper bound a disk system approaches.

It trains with CaliEX's pipelined schedule; only where the bytes live differs.
"""

from __future__ import annotations

from labkit.core.datasets import Dataset
from labkit.disk.store import MemoryFeatures, MemoryTopology


def open_stores(ds: Dataset) -> tuple[MemoryTopology, MemoryFeatures]:
    """Return (topology, features) of `ds` loaded whole into RAM."""
    return MemoryTopology.from_dataset(ds), MemoryFeatures.from_dataset(ds)
