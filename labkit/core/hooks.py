"""Hooks the layers above core install, so core reaches what the systems register without naming them.

Core never imports a system, not even lazily. The package root (``labkit/__init__.py``) installs the
dataset discoverer at import, so it is in place before any core module can need it.
"""

from __future__ import annotations

from typing import Callable

_DATASET_DISCOVERERS: list[Callable[[], None]] = []


def add_dataset_discoverer(fn: Callable[[], None]) -> None:
    """Have `fn` run before the dataset registry is read (it imports modules that register datasets)."""
    if fn not in _DATASET_DISCOVERERS:
        _DATASET_DISCOVERERS.append(fn)


def discover_datasets() -> None:
    """Run every installed dataset discoverer (each import happens once; later calls are cheap)."""
    for fn in list(_DATASET_DISCOVERERS):
        fn()
