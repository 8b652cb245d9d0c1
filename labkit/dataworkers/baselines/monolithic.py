"""The monolithic program: its Dataset and collate run inline in the training process, no workers."""

from __future__ import annotations

from typing import Any, Iterator

from labkit.dataworkers.workloads import Program


def monolithic_batches(program: Program, epoch: int, limit: int | None = None) -> Iterator[Any]:
    """Yield batches the way the unmodified program does: load, then train, in one process."""
    for keys in program.batches(epoch, limit):
        yield program.load(keys)
