"""Byte counts as people write them ('512MiB') and read them ('1.5 GiB'): no dependency on the machine."""

from __future__ import annotations

import math
import numbers
import re

import numpy as np

from labkit.core.errors import bad_value

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12,
          "tib": 1 << 40}


def parse_bytes(value: int | float | str, arg: str = "size") -> int:
    """Return a byte count from an int or a string like '512MiB', '1.5 GiB', '200mb'."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and value >= 0 \
            and math.isfinite(value):  # Python's or numpy's ints and floats
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise bad_value(arg, value, "a non-negative byte count such as 1048576, '512MiB' or '1.5GiB'")


def fmt_bytes(n: float) -> str:
    """Return `n` bytes in binary units, e.g. '1.5 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
