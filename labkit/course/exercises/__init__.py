"""Every system's exercises (importing this package registers them all), and lookups over them."""

from __future__ import annotations

from labkit.core.errors import LabkitError
from labkit.course.exercise import Exercise, registered
from labkit.course.exercises import dataworkers, disk, graph, recsys, spmm  # noqa: F401  (each registers its own)


def exercises(system: str | None = None) -> list[Exercise]:
    """Every registered exercise (of `system`), in registration order."""
    return [e for e in registered().values() if system is None or e.system == system]


def get(exercise_id: str) -> Exercise:
    """The exercise named `exercise_id`, or a one-line error naming the ids there are."""
    try:
        return registered()[exercise_id]
    except KeyError:
        raise LabkitError(f"exercise={exercise_id!r} is not accepted; expected one of "
                          + ", ".join(registered())) from None
