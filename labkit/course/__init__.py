"""The course kit: graded exercises for every lab (`labkit course build | check | grade | list`).

- :mod:`labkit.course.exercise`: what an exercise is (:class:`Exercise`, :class:`Case`) and the registry.
- :mod:`labkit.course.exercises`: the exercises of each system, each with its reference in labkit.
- :mod:`labkit.course.feedback`: what a notebook's cells call: :func:`check`, :func:`report`, :func:`measure`.
- :mod:`labkit.course.notebooks`: the source notebooks (with solutions) and the student release.
- :mod:`labkit.course.grade`: grading submissions, each exercise in a fresh process with a time limit.
"""

from labkit.course.feedback import check, measure, report

__all__ = ["check", "measure", "report"]
