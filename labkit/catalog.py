"""The lab's table of contents: the five systems, and where each one's bench lives.

Core knows no system by name; this catalogue sits above the systems (with the CLI and UI) so
that `labkit reproduce` can say which systems are built and which are not yet.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from labkit.core.errors import check_choice
from labkit.core.systems import System, registered


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    paper: str
    module: str
    notebook: str


CATALOG = (
    Entry("spmm", "Flash-LLM", "Flash-LLM: sparse LLM inference (VLDB 2024)", "labkit.spmm.bench",
          "01_flash_llm.ipynb"),
    Entry("graph", "AliGraph", "AliGraph: graph storage, sampling and caching (VLDB 2019)",
          "labkit.graph.bench", "02_aligraph.ipynb"),
    Entry("disk", "CaliEX", "CaliEX: disk-based GNN training (ICDE 2025)", "labkit.disk.bench",
          "03_caliex.ipynb"),
    Entry("dataworkers", "GoldMiner", "GoldMiner: elastic data workers (SIGMOD 2023)",
          "labkit.dataworkers.bench", "04_goldminer.ipynb"),
    Entry("recsys", "PICASSO", "PICASSO: packed recommender training (ICDE 2022)", "labkit.recsys.bench",
          "05_picasso.ipynb"),
)
NAMES = tuple(e.name for e in CATALOG)


def entry(name: str) -> Entry:
    check_choice("system", name, NAMES)
    return next(e for e in CATALOG if e.name == name)


def _import_if_built(module: str) -> bool:
    """Import `module`; False when it does not exist yet (a system not built, or one without it)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only "this module does not exist" means not built; a missing dependency inside a built
        # system is a real error.
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return False
        raise
    return True


def load(name: str) -> System | None:
    """Import system `name`'s bench (which registers it) and return it; None if not built yet."""
    e = entry(name)
    if not _import_if_built(e.module):
        return None
    return registered().get(name)


def import_datasets() -> None:
    """Import every system's ``datasets`` module, so its datasets register themselves.

    Installed into :mod:`labkit.core.hooks` by ``labkit/__init__.py``: core finds the systems'
    datasets without naming a system.
    """
    for e in CATALOG:
        _import_if_built(e.module.rsplit(".", 1)[0] + ".datasets")
