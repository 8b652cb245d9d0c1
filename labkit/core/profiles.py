"""Run sizes shared by datasets, benches and notebooks."""

from __future__ import annotations

from labkit.core.errors import check_choice

#: ci: seconds, for tests and papermill; small: the size targets are measured at; large: hours.
PROFILES = ("ci", "small", "large")


def check_profile(profile: str, arg: str = "profile") -> str:
    """Return `profile` if it is a known profile, else raise ValueError listing them."""
    return check_choice(arg, profile, PROFILES)

#: The notebooks' default profile. Each system's notebook helpers (labkit/ui/<system>.py) say what
#: it means for them: sized so Run All takes at most 2-3 minutes on 2 cores and the paper's effect
#: shows in its direction. It is not a dataset or bench profile: a notebook at "lab" builds its
#: datasets at one of PROFILES and sizes its live runs itself; "ci" stays what tests run.
LAB = "lab"
NOTEBOOK_PROFILES = (LAB,) + PROFILES


def check_notebook_profile(profile: str, arg: str = "PROFILE") -> str:
    """Return `profile` if a notebook accepts it ("lab" or a bench profile), else raise naming them."""
    return check_choice(arg, profile, NOTEBOOK_PROFILES)
