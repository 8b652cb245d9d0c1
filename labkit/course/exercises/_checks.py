"""What every system's checks share: running a candidate without letting it raise, showing values on one
line, timing, and the reference built from an exercise's own stub and solution."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from labkit.course.exercise import Case


def short(v: Any, n: int = 120, entries: int = 8) -> str:
    """One line showing a value: arrays as dtype, shape and their first `entries` values; else repr cut to n."""
    if isinstance(v, np.ndarray):
        head = np.array2string(v.ravel()[:entries], separator=", ", max_line_width=10**6)
        return f"{v.dtype}{list(v.shape)} {head}{' ...' if v.size > entries else ''}"
    s = repr(v).replace("\n", " ")
    return s if len(s) <= n else s[:n - 3] + "..."


def case(name: str, run: Callable[[], Any], ok: Callable[[Any], Any], expected: Any = None) -> Case:
    """Run the candidate (`run`), judge its result (`ok`: True, or a reason string), never raise."""
    try:
        got = run()
    except Exception as e:  # noqa: BLE001 - the student's code may raise anything; that is a failed case
        return Case(name, False, f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    try:
        verdict = ok(got)
    except Exception as e:  # noqa: BLE001 - a malformed result (wrong type or shape) fails the case
        return Case(name, False, f"result {short(got)} could not be read: {type(e).__name__}: {e}")
    if verdict is True:
        return Case(name, True, "")
    why = verdict if isinstance(verdict, str) else ""
    exp = f"expected {short(expected)}, " if expected is not None else ""
    return Case(name, False, (why + "; " if why else "") + f"{exp}got {short(got)}")


def judged(name: str, fn, args: tuple, judge) -> Case:
    """Call fn(*args) and judge what it returns (`judge`: None when right, else what is wrong); never raise."""
    try:
        got = fn(*args)
    except Exception as e:  # the submission's own error: a failed case with its message, no traceback
        return Case(name, False, f"raised {type(e).__name__}: {str(e)[:200]}")
    try:
        detail = judge(got)
    except Exception as e:  # the result had the wrong type or shape to be compared
        return Case(name, False, f"returned {short(got)}, which could not be checked "
                                 f"({type(e).__name__}: {str(e)[:120]})")
    return Case(name, detail is None, detail or "")


def best_time(f: Callable, *args, repeat: int = 3) -> float:
    """The fastest of `repeat` calls of f(*args), in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def compile_reference(stub: str, solution: str, func: str) -> Callable:
    """The reference: the exercise's own stub + solution, so checks and notebook agree by construction."""
    ns: dict[str, Any] = {}
    exec(compile(stub + solution, f"<reference {func}>", "exec"), ns)  # noqa: S102 - our own source
    return ns[func]
