"""The Dask worker plugin that installs a stateless part on every worker (imported only with Dask)."""

from __future__ import annotations

from typing import Any, Callable

from distributed import WorkerPlugin

from labkit.core.errors import LabkitError

PARTS: dict[str, Callable[[list[int]], Any]] = {}


class PartPlugin(WorkerPlugin):
    """Installs a stateless part on every Dask worker, including ones that join or restart later."""

    def __init__(self, name: str, part: Callable[[list[int]], Any]) -> None:
        self.name, self.part = name, part

    def setup(self, worker: Any) -> None:
        PARTS[self.name] = self.part

    def teardown(self, worker: Any) -> None:
        PARTS.pop(self.name, None)


def run_part(name: str, keys: list[int]) -> Any:
    """Run the installed part `name` on `keys` (executes on a Dask worker)."""
    part = PARTS.get(name)
    if part is None:
        raise LabkitError(f"stateless part {name!r} is not installed on this Dask worker")
    return part(keys)
