"""Opening the disk stores, a pre-sampling or a system gives back what it took when a step fails."""

from __future__ import annotations

import os

import pytest

from labkit.core.memory import BudgetExceeded, MemoryBudget, machine_limit
from labkit.disk import store, system
from labkit.disk.store import DiskTopology
from labkit.disk.system import open_system, presample, workload

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")

PAGE = 4096


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def _indptr_bytes(ds):
    probe = DiskTopology(ds, MemoryBudget(machine_limit()[0]), staging_bytes=PAGE, fallback=True)
    try:
        return probe.indptr.nbytes
    finally:
        probe.close()


def test_topology_refused_staging_keeps_no_phantom_bytes(ds):
    # Room for the indptr and a small staging buffer, not a large one: the first open is refused
    # at the file, and a retry on the same budget must find the indptr's bytes free again.
    b = MemoryBudget(_indptr_bytes(ds) + 8 * PAGE)
    n0 = _open_fds()
    with pytest.raises(BudgetExceeded, match="topology staging"):
        DiskTopology(ds, b, staging_bytes=64 * PAGE, fallback=True)
    assert b.used == 0 and _open_fds() == n0
    t = DiskTopology(ds, b, staging_bytes=8 * PAGE, fallback=True)  # the retry fits
    t.close()
    assert b.used == 0 and _open_fds() == n0


def test_topology_failed_open_releases_indptr(ds, monkeypatch):
    def unreadable(*a, **k):
        raise OSError("indices unreadable")

    monkeypatch.setattr(store, "_open_file", unreadable)
    b = MemoryBudget(machine_limit()[0])
    with pytest.raises(OSError, match="indices unreadable"):
        DiskTopology(ds, b, fallback=True)
    assert b.used == 0


@pytest.fixture(scope="module")
def work():
    _, cfg, budget, pseeds, _ = workload("ci", "sage", 1, budget_fraction=2.0, presample_batches=1)
    return cfg, budget, pseeds


def _features_fail(monkeypatch):
    def unreadable(*a, **k):
        raise OSError("features unreadable")

    monkeypatch.setattr(system, "DiskFeatures", unreadable)


def test_presample_closes_topology_when_features_fail(ds, work, monkeypatch):
    cfg, budget, pseeds = work
    _features_fail(monkeypatch)
    b = MemoryBudget(budget)
    n0 = _open_fds()
    with pytest.raises(OSError, match="features unreadable"):
        presample(ds, cfg, pseeds, b, fallback=True)
    assert b.used == 0 and _open_fds() == n0


@pytest.mark.parametrize("name", ["naive", "ginex"])
def test_open_system_closes_topology_when_features_fail(ds, work, monkeypatch, name):
    cfg, budget, _ = work
    _features_fail(monkeypatch)
    b = MemoryBudget(budget)
    n0 = _open_fds()
    with pytest.raises(OSError, match="features unreadable"):
        open_system(name, ds, b, cfg, fallback=True)
    assert b.used == 0 and _open_fds() == n0


def test_presample_and_open_system_give_everything_back_on_success(ds, work):
    cfg, budget, pseeds = work
    b = MemoryBudget(budget)
    n0 = _open_fds()
    pre = presample(ds, cfg, pseeds, b, train_batches=1)
    assert pre.batches and b.used == 0 and _open_fds() == n0
    s = open_system("naive", ds, b, cfg)
    try:
        assert b.used > 0
    finally:
        s.close()
    assert b.used == 0
