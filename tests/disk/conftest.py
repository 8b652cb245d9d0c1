"""Shared fixtures for the CaliEX tests: the ci dataset, opened once per module."""

import pytest

from labkit.core.datasets import open_dataset


@pytest.fixture(scope="module")
def ds():
    return open_dataset("caliex", "ci")
