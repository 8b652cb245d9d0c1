"""Registry the systems add themselves to; core knows none of them by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from labkit.core.bench import Bench, BenchReport, Claim


@dataclass
class System:
    """One rebuilt paper: its bench entry point and the claims that bench measures."""

    name: str
    title: str
    paper: str
    bench: Callable[[Bench], None]
    claims: list[Claim] = field(default_factory=list)
    notebook: str = ""

    def run_bench(self, profile: str, *, progress: bool = True) -> BenchReport:
        """Run this system's bench at `profile` and return the report."""
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
