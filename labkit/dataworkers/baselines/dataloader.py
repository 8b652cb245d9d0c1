"""PyTorch's DataLoader over the program's unmodified Dataset and collate function, epoch after epoch."""

from __future__ import annotations

from typing import Iterator

from torch.utils.data import DataLoader

from labkit.core.errors import check_range
from labkit.dataworkers.workloads import Program


class EpochBatches:
    """A batch sampler whose epoch can be changed between passes (so DataLoader workers persist)."""

    def __init__(self, program: Program, epoch: int = 0, limit: int | None = None) -> None:
        self.program, self.epoch, self.limit = program, epoch, limit

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.program.batches(self.epoch, self.limit))

    def __len__(self) -> int:
        return len(self.program.batches(self.epoch, self.limit))


def dataloader(program: Program, num_workers: int, *, limit: int | None = None, prefetch_factor: int = 2,
               persistent: bool = True) -> tuple[DataLoader, EpochBatches]:
    """Return a tuned-as-usual DataLoader over the program (persistent workers) and its sampler.

    Set ``sampler.epoch`` before each ``iter(loader)``. The model prefix stays in the trainer:
    that is how the program is written.
    """
    check_range("num_workers", num_workers, 0, 64, integer=True)
    sampler = EpochBatches(program, 0, limit)
    kw: dict = {}
    if num_workers:
        kw = {"prefetch_factor": prefetch_factor, "persistent_workers": persistent}
    return DataLoader(program.dataset, batch_sampler=sampler, collate_fn=program.collate_fn,
                      num_workers=num_workers, **kw), sampler
