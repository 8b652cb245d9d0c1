"""What a student calls in an exercise notebook: `check` a function, `report` the result, `measure` it.

The notebook's check cell is ``report(check("spmm.tile_encode", tile_encode))``: it runs the
exercise's cases in the kernel and prints one score line and one line per failing case (its name and
what was expected), never a traceback. The grader (:mod:`labkit.course.grade`) scores with the same
rule (:func:`score`), so what a student sees is what the instructor's CSV gets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from labkit.course.exercise import Case, Exercise
from labkit.course.exercises import get


def score(ex: Exercise, cases: list[Case]) -> float:
    """Partial credit: `points` times the share of cases passed (0 with no cases), to 2 decimals."""
    if not cases:
        return 0.0
    return round(ex.points * sum(c.passed for c in cases) / len(cases), 2)


@dataclass
class Result:
    """One exercise graded: its cases, its score out of `points`, and a one-line `reason` for a zero."""

    exercise: str
    points: int
    cases: list[Case] = field(default_factory=list)
    score: float = 0.0
    reason: str = ""  # why no case ran or why the whole exercise scored 0 (time limit, import, ...)

    @property
    def failing(self) -> list[Case]:
        return [c for c in self.cases if not c.passed]

    def line(self) -> str:
        """One line: 'score 0.5 / 1 (2 of 4 cases passed)' or the reason."""
        passed = sum(c.passed for c in self.cases)
        what = self.reason or f"{passed} of {len(self.cases)} cases passed"
        return f"score {_num(self.score)} / {self.points} ({what})"


def _num(x: float) -> str:
    return f"{x:g}"


class _Watch:
    """Wrap `fn` to note whether it ever raised NotImplementedError (the released stub's body)."""

    def __init__(self, fn: Callable):
        self.not_done = False
        self.fn = fn

        @functools.wraps(fn)
        def call(*a, **k):
            try:
                return fn(*a, **k)
            except NotImplementedError:
                self.not_done = True
                raise
        self.call = call


def run_check(ex: Exercise, fn: Callable) -> Result:
    """Run `ex.check` on `fn` in this process and score it; anything `fn` raises becomes a reason, not a traceback."""
    res = Result(ex.id, ex.points)
    if not callable(fn):
        res.reason = f"{ex.func} is not a function (got {type(fn).__name__})"
        return res
    watch = _Watch(fn)
    try:
        res.cases = [c for c in ex.check(watch.call)]
    except NotImplementedError:
        watch.not_done = True
    except Exception as exc:  # a check lets the candidate's error through: still a one-line zero
        res.reason = f"raised {type(exc).__name__}: {_one_line(exc)}"
        res.cases = []
    if watch.not_done and not any(c.passed for c in res.cases):
        res.cases, res.reason = [], f"not done yet: {ex.func} still raises NotImplementedError"
    elif not res.cases and not res.reason:
        res.reason = "the check ran no case"
    res.score = score(ex, res.cases) if not res.reason else 0.0
    return res


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check(exercise_id: str, fn: Callable) -> Result:
    """Grade `fn` against exercise `exercise_id` here, in the notebook's kernel (what the grader will run)."""
    return run_check(get(exercise_id), fn)


def format_result(res: Result, title: str = "") -> str:
    """The text a check cell shows: the score line, then one line per failing case."""
    head = f"{res.exercise}" + (f" ({title})" if title else "")
    lines = [f"{head}: {res.line()}"]
    for c in res.failing:
        lines.append(f"  FAIL {c.name}" + (f": {c.detail}" if c.detail else ""))
    if not res.reason and not res.failing:
        lines.append("  every case passed")
    return "\n".join(lines)


def report(res: Result) -> None:
    """Print `res` as a check cell shows it: the score line, then the failing cases by name."""
    try:
        title = get(res.exercise).title
    except Exception:  # an id the registry lost: the score line still says which exercise
        title = ""
    print(format_result(res, title))


def measure(exercise_id: str, fn: Callable) -> dict:
    """Run the exercise's short measurement with `fn` plugged into the real system; print and return its figures."""
    ex = get(exercise_id)
    if ex.measure is None:
        print(f"{ex.id}: no measurement for this exercise")
        return {}
    try:
        figures = dict(ex.measure(fn))
    except NotImplementedError:
        print(f"{ex.id}: not done yet: {ex.func} still raises NotImplementedError")
        return {}
    except Exception as exc:  # a student's bug: one line, as the check cell would say it
        print(f"{ex.id}: the measurement stopped: {type(exc).__name__}: {_one_line(exc)}")
        return {}
    width = max((len(k) for k in figures), default=0)
    print(f"{ex.id}: measured with your {ex.func}")
    for k, v in figures.items():
        print(f"  {k:<{width}}  {v:.4g}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    return figures
