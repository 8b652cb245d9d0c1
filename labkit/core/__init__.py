"""Shared machinery every system uses: bench harness, datasets, memory budget, metrics."""

from labkit.core.errors import LabkitError, check_choice, check_range
from labkit.core.profiles import PROFILES, check_profile

__all__ = ["LabkitError", "check_choice", "check_range", "PROFILES", "check_profile"]
