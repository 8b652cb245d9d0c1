"""Two toy exercises (system "toy") that exercise the course machinery without the labs' content.

Imported through $LABKIT_COURSE_MODULES (`tests.course.toy`), as a course's own exercises would be.
"""

import random

from labkit.course.exercise import Case, Exercise, register
from tests.course import toy_ref


def _cases(fn, inputs, expect):
    for name, args in inputs:
        want = expect(*args)
        try:
            got = fn(*[list(a) if isinstance(a, list) else a for a in args])
        except Exception as exc:
            yield Case(name, False, f"raised {type(exc).__name__}: {exc}")
            continue
        yield Case(name, got == want, "" if got == want else f"expected {want!r}, got {got!r}")


def _check_top_k(fn):
    rng = random.Random(0)
    inputs = [("empty list", ([], 3)), ("k larger than the list", ([3, 1, 2], 5)), ("k = 0", ([1, 2], 0)),
              ("ties", ([2, 2, 1, 2], 2))]
    inputs += [(f"random list {i}", ([rng.randint(-50, 50) for _ in range(rng.randint(1, 30))], rng.randint(1, 10)))
               for i in range(4)]
    return list(_cases(fn, inputs, toy_ref.top_k))


def _check_clip_sum(fn):
    rng = random.Random(1)
    inputs = [("empty list", ([], 1.0)), ("all above the cap", ([5, 6], 2)), ("negative values", ([-3, 4], 2))]
    inputs += [(f"random list {i}", ([rng.randint(-9, 9) for _ in range(20)], rng.randint(0, 5))) for i in range(3)]
    return list(_cases(fn, inputs, lambda v, cap: sum(min(x, cap) for x in v)))


def _measure_top_k(fn):
    import time
    data = list(range(2000))
    t = time.perf_counter()
    fn(data, 10)
    mid = time.perf_counter()
    toy_ref.top_k(data, 10)
    return {"student_s": mid - t, "reference_s": time.perf_counter() - mid}


TOP_K = register(Exercise(
    id="toy.top_k", system="toy", title="The k largest values", func="top_k",
    stub='def top_k(values, k):\n    """The k largest of `values`, largest first (all of them when k > len)."""\n',
    solution="    return sorted(values, reverse=True)[:k]\n",
    check=_check_top_k, measure=_measure_top_k, points=2, goal="Selection with edge cases.",
    reference="tests.course.toy_ref:top_k", forbid=("tests.course.toy_ref",), minutes=5))

CLIP_SUM = register(Exercise(
    id="toy.clip_sum", system="toy", title="A clipped sum", func="clip_sum",
    stub='def clip_sum(values, cap):\n    """Sum of `values`, each clipped to at most `cap`."""\n',
    solution="    total = 0\n    for x in values:\n        total += min(x, cap)\n    return total\n",
    check=_check_clip_sum, minutes=5))
