"""What both worker pools share: their error, their counters, the worker cap, and CPU time per process."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from labkit.core.errors import LabkitError


class WorkerError(LabkitError):
    """A data worker failed (its code raised), or no worker can make progress."""


@dataclass
class PoolStats:
    """Counters of one pool's life: what was delivered, re-issued, dropped and how workers fared."""

    delivered: int = 0
    reissued: int = 0
    duplicates_dropped: int = 0
    stale_dropped: int = 0
    speculative: int = 0
    worker_deaths: int = 0
    respawned: int = 0
    spawned: int = 0
    retired: int = 0
    inline: int = 0
    per_worker: dict[int, dict] = field(default_factory=dict)  # wid -> {"batches", "busy_s"}

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "per_worker"}
        return d


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` from /proc (None where /proc is missing or it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


#: The most worker processes one pool may run (``max_workers``).
MAX_WORKERS = 256
