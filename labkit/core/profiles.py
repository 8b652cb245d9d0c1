"""Run sizes shared by datasets, benches and notebooks."""

from __future__ import annotations

from labkit.core.errors import check_choice

#: ci: seconds, for tests and papermill; small: the size targets are measured at; large: hours.
PROFILES = ("ci", "small", "large")


def check_profile(profile: str, arg: str = "profile") -> str:
    """Return `profile` if it is a known profile, else raise ValueError listing them."""
    return check_choice(arg, profile, PROFILES)
