"""A bounded, seeded fuzz pass over the public entry points that take user data.

Each fuzz test calls an entry point through `fuzz_call`: the call either returns (the caller then
checks the result) or raises a `LabkitError` whose message is one line naming the argument. Any
other exception is a defect and fails the test with the case that raised it. Every call is
counted per entry point, and the session's summary line reports the totals, so the CI log says
how much was tried.

Hypothesis drives the inputs with `FUZZ_SETTINGS`: derandomized (a fixed seed, the same cases on
every run) and bounded (a few seconds per entry point), so the pass runs in CI.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from hypothesis import HealthCheck, settings

from labkit.core.errors import LabkitError

#: entry point name -> [cases tried, refused with a LabkitError, raised anything else]
COUNTS: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])

#: A fixed seed (derandomize) and a bounded budget for every fuzz test.
FUZZ_SETTINGS = settings(derandomize=True, max_examples=150, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))


class Refused(Exception):
    """Raised by `fuzz_call` in place of the LabkitError, so a caller can tell refusal from a result."""

    def __init__(self, error: LabkitError):
        super().__init__(str(error))
        self.error = error


def fuzz_call(entry: str, fn: Callable[..., Any], *args: Any, refuse_ok: bool = True, **kwargs: Any) -> Any:
    """Call `fn(*args, **kwargs)` as fuzz case of `entry`; return its result or raise `Refused`.

    A LabkitError must carry a one-line message that names something (`arg=value` or a path); any
    other exception propagates and fails the test, with the case shown by hypothesis.
    """
    COUNTS[entry][0] += 1
    try:
        return fn(*args, **kwargs)
    except LabkitError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, f"{entry}: a LabkitError must be one line, got {msg!r}"
        COUNTS[entry][1] += 1
        if not refuse_ok:
            raise
        raise Refused(exc) from None
    except Exception:
        COUNTS[entry][2] += 1
        raise


def summary_lines() -> list[str]:
    """The lines the session's summary prints: the totals and one line per entry point."""
    if not COUNTS:
        return []
    total = sum(c[0] for c in COUNTS.values())
    refused = sum(c[1] for c in COUNTS.values())
    other = sum(c[2] for c in COUNTS.values())
    lines = [f"fuzz: {total} cases over {len(COUNTS)} entry points: {total - refused - other} returned a result, "
             f"{refused} refused with a one-line LabkitError, {other} raised anything else"]
    width = max(map(len, COUNTS))
    lines += [f"  {name:<{width}}  {c[0]:>6} cases, {c[1]:>6} refused, {c[2]:>3} other"
              for name, c in sorted(COUNTS.items())]
    return lines
