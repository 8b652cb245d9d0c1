"""Shared fixtures: BLAS threads for tests and a private data root per test."""

from __future__ import annotations

import os

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


def pytest_terminal_summary(terminalreporter):
    """Report how many fuzz cases ran (tests/fuzz.py), so CI's log says what the fuzz pass tried."""
    import sys

    fuzz = sys.modules.get("tests.fuzz")
    for line in (fuzz.summary_lines() if fuzz is not None else []):
        terminalreporter.write_line(line)
