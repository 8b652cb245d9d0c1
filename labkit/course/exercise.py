"""What an exercise is: a function a student writes, the checks that grade it, a short measurement.

An exercise names one function (`func`) the student implements in a marked notebook cell; the
source notebook holds the reference body between nbgrader's ``### BEGIN SOLUTION`` / ``### END
SOLUTION`` markers, and the student release keeps only the signature, the docstring and
``raise NotImplementedError``. `check(fn)` grades a candidate: it yields :class:`Case` results, one
per property or edge case (empty rows, all-zero tiles, degree-0 vertices, ...), each named so the
feedback can say which case failed and why, without a traceback. `measure(fn)` plugs the candidate
into the real system for a short run and returns figures to show beside the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from labkit.core.errors import LabkitError


@dataclass(frozen=True)
class Case:
    """One graded case: its name (shown to the student), whether it passed, and what was wrong."""

    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Exercise:
    """One exercise. `id` is "<system>.<name>" (e.g. "spmm.tile_encode"); `points` its weight."""

    id: str
    system: str
    title: str
    func: str  # the name of the function the student defines
    stub: str  # the cell the student starts from: imports, signature and docstring (no body)
    solution: str  # the reference body, indented to sit inside the function
    check: Callable[[Callable], Iterable[Case]]
    measure: Callable[[Callable], dict] | None = None
    points: int = 1
    goal: str = ""  # one line: what the student learns (instructor notes read it)
    reference: str = ""  # "module:function" of labkit's own implementation, which the checks compare against
    forbid: tuple[str, ...] = ()  # modules a submission may not import (the reference's, at least)
    minutes: int = 15  # expected time for a student (instructor notes read it)
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, Exercise] = {}


def register(ex: Exercise) -> Exercise:
    """Add `ex` to the registry (an id may be registered once)."""
    if ex.id in _REGISTRY and _REGISTRY[ex.id] is not ex:
        raise LabkitError(f"exercise id={ex.id!r} is registered twice")
    if not ex.id.startswith(ex.system + "."):
        raise LabkitError(f"exercise id={ex.id!r} is not accepted; expected '{ex.system}.<name>'")
    _REGISTRY[ex.id] = ex
    return ex


def registered() -> dict[str, Exercise]:
    """The registry as it stands (labkit.course.exercises loads every system's exercises into it)."""
    return _REGISTRY
