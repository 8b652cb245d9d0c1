"""Candidates built from an exercise's own stub: its reference (with nbgrader's markers) or another body."""

from labkit.course.exercises._checks import compile_reference


def reference(ex):
    return compile_reference(ex.stub, "    ### BEGIN SOLUTION\n" + ex.solution + "    ### END SOLUTION\n", ex.func)


def from_source(ex, body: str):
    """A candidate with the exercise's stub and another body (a wrong answer)."""
    return compile_reference(ex.stub, body, ex.func)
