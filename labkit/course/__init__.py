"""The course kit: graded exercises for every lab (`labkit course build | check | grade`).

- :mod:`labkit.course.exercise`: what an exercise is (:class:`Exercise`, :class:`Case`) and the registry.
- :mod:`labkit.course.exercises`: the exercises of each system, each with its reference in labkit.
"""
