"""Registry the systems add themselves to; core knows none of them by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from labkit.core.bench import Bench, BenchReport, Claim
from labkit.core.machine import require_memory
from labkit.core.profiles import check_profile


@dataclass
class System:
    """One rebuilt paper: its bench entry point and the claims that bench measures."""

    name: str
    title: str
    paper: str
    bench: Callable[[Bench], None]
    claims: list[Claim] = field(default_factory=list)
    notebook: str = ""
    #: Estimated peak memory (bytes) of the bench at a profile, or None: a profile the machine cannot
    #: hold is refused before it starts, rather than killed by the OS an hour in.
    memory: Callable[[str], int] | None = None

    def run_bench(self, profile: str, *, progress: bool = True) -> BenchReport:
        """Run this system's bench at `profile` and return the report.

        Raises LabkitError first when :attr:`memory` says the profile needs more memory than is available.
        """
        if self.memory is not None:
            require_memory(f"labkit bench {self.name} --profile {profile}", self.memory(check_profile(profile)),
                           hint="close other programs or run a smaller --profile")
        b = Bench(self.name, profile, self.claims, progress=progress, title=f"{self.title} ({self.name})")
        self.bench(b)
        return b.report()


_REGISTRY: dict[str, System] = {}


def register(system: System) -> System:
    """Add `system` to the registry (re-registering the same name replaces it)."""
    _REGISTRY[system.name] = system
    return system


def registered() -> dict[str, System]:
    return dict(_REGISTRY)
