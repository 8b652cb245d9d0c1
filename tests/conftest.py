"""Shared fixtures: a private data root per test session, and GPU / Chromium detection."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session", autouse=True)
def _quiet_threads():
    # Tests assert correctness, not speed; keep BLAS from oversubscribing 2 cores.
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    yield


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """A fresh LABKIT_DATA folder for one test."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("LABKIT_DATA", str(root))
    return root


def has_gpu() -> bool:
    from labkit.core.machine import gpu_info
    return gpu_info() is not None


requires_gpu = pytest.mark.skipif(not shutil.which("nvidia-smi"), reason="needs an NVIDIA GPU (none found)")
