"""The naive disk baseline: both stores on disk, no caches, random page reads, stages in turn.

It opens the same direct-I/O stores as CaliEX with a fixed "random" I/O policy (pages shared
between requests, nothing coalesced) and caches nothing; every mini-batch is sampled, gathered
and trained one stage after another.
"""

from __future__ import annotations

import numpy as np

from labkit.disk.pipeline import RunStats, run_serial

#: How its stores read cache misses: one request per page run, never coalesced or swept.
IO_MODE = "random"


def run(system, seeds: list[np.ndarray], *, first_index: int = 0) -> RunStats:
    """Train `system` (a naive DiskGNN) on one mini-batch per entry of `seeds`, stages in turn."""
    return run_serial(system.sampler, system.features, system.trainer, seeds, system.labels, first_index=first_index)
