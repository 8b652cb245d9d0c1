"""Fixtures for the GoldMiner tests: ci-sized programs over a private data root."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def dw_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("dw-data"))


@pytest.fixture
def image_prog(dw_root):
    from labkit.dataworkers.workloads import image_program
    return image_program("ci", batch_size=8, root=dw_root)


@pytest.fixture
def ctr_prog(dw_root):
    from labkit.dataworkers.workloads import ctr_program
    return ctr_program("ci", batch_size=128, root=dw_root)


@pytest.fixture
def no_leaks():
    """Fail a test that leaves data-worker processes or shared-memory slots behind."""
    import multiprocessing as mp

    from labkit.dataworkers.transport import slots_of
    before = {p.pid for p in mp.active_children()}
    yield
    left = [p for p in mp.active_children() if p.pid not in before and p.name.startswith("labkit-dataworker")]
    assert not left, f"leaked worker processes: {left}"
    assert not slots_of(os.getpid()), f"leaked shared memory: {slots_of(os.getpid())}"
