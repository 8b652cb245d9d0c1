"""One style of error for bad input: name the argument, the value, and what is accepted."""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any, Iterable


class LabkitError(Exception):
    """An error a user can act on; the CLI prints it on one line."""


def _fmt(value: Any) -> str:
    # A numpy scalar reads as its plain value (8, not np.int64(8)); arrays and the rest as repr.
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    return repr(value)


class BadInput(LabkitError, ValueError):
    """A value the API does not accept: a LabkitError that is also a ValueError, for older callers."""


_MIXED: dict[type, type] = {ValueError: BadInput}


def labkit_kind(exc: type[Exception]) -> type[Exception]:
    """Return `exc` if it is a LabkitError already, else a subclass of both (``TypeError`` -> ``BadType``-like).

    Callers that catch the built-in type (``except TypeError``) keep working, and every bad-input
    error can also be caught as one LabkitError.
    """
    if issubclass(exc, LabkitError):
        return exc
    mixed = _MIXED.get(exc)
    if mixed is None:
        name = f"Labkit{exc.__name__}"
        mixed = _MIXED[exc] = type(name, (LabkitError, exc), {"__module__": __name__, "__qualname__": name})
        globals()[name] = mixed  # importable by name, so it pickles (Dask workers send errors back)
    return mixed


def bad_value(arg: str, value: Any, accepted: str, exc: type[Exception] = ValueError) -> Exception:
    """Return (not raise) a LabkitError (also an `exc`) naming `arg`, `value` and what is accepted."""
    return labkit_kind(exc)(f"{arg}={_fmt(value)} is not accepted; expected {accepted}")


def check_choice(arg: str, value: Any, choices: Iterable[Any]) -> Any:
    """Return `value` if it is one of `choices`, else raise ValueError listing them."""
    choices = list(choices)
    if value not in choices:
        raise bad_value(arg, value, "one of " + ", ".join(map(str, choices)))
    return value


def check_range(arg: str, value: Any, lo: float | None = None, hi: float | None = None,
                *, lo_open: bool = False, hi_open: bool = False, integer: bool = False) -> Any:
    """Return `value` if it lies in the stated interval (and is an int when `integer`), else raise.

    Any real number is accepted (Python's or numpy's scalars, e.g. ``np.int64(8)``), but not a
    bool and not NaN; with `integer`, a whole-valued float such as ``4.0`` passes too.
    """
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)  # np.bool_ is not Real
            or value != value  # NaN
            or (integer and not isinstance(value, numbers.Integral) and not float(value).is_integer())
            or (lo is not None and (value < lo or (lo_open and value == lo)))
            or (hi is not None and (value > hi or (hi_open and value == hi)))):
        lb, rb = "(" if lo_open else "[", ")" if hi_open else "]"
        kind = "an integer" if integer else "a number"
        raise bad_value(arg, value, f"{kind} in {lb}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{rb}")
    return value


#: Seeds, epochs and streams are integers in [0, SEED_MAX] by default: numpy's generators take
#: them, and so do the numba kernels' int64 arguments. Seeds that only reach numpy and torch may use
#: all 64 bits (``bits=64``).
SEED_MAX = 2**63 - 1


def check_seed(seed: Any, arg: str = "seed", *, per: int = 1, bits: int = 63) -> int:
    """Return `seed` as an int if it is a whole number (``4.0`` too; not a bool) in [0, 2**bits), else raise.

    With `per` > 1 the caller derives `per` streams from it (``seed * per + k``), so it must stay
    below ``2**bits // per`` for those to fit the kernels' keys.
    """
    end = 2**bits if per == 1 else (2**bits - 1) // per  # first value refused
    whole = isinstance(seed, numbers.Integral) or (isinstance(seed, numbers.Real) and float(seed).is_integer())
    if isinstance(seed, bool) or not whole or not 0 <= int(seed) < end:
        shown = f"[0, 2**{end.bit_length() - 1})" if end & (end - 1) == 0 else f"[0, {end - 1}]"
        raise bad_value(arg, seed, f"an integer in {shown}")
    return int(seed)


def check_file(path: Any, kind: str, arg: str = "path") -> Path:
    """Return `path` as a Path if it names an existing regular file, else raise naming `arg` and `kind`."""
    if not isinstance(path, (str, os.PathLike)):
        shown = path if isinstance(path, (int, float, bytes, type(None))) else type(path).__name__
        raise bad_value(arg, shown, f"a path (str or os.PathLike) to a {kind} file")
    path = Path(path)
    if not path.exists():
        raise bad_value(arg, str(path), f"an existing {kind} file")
    if not path.is_file():
        raise bad_value(arg, str(path), f"a {kind} file, not a folder" if path.is_dir() else f"a {kind} file")
    return path


def not_parquet(path: Path, exc: Exception) -> ValueError:
    """Return the one-line error for a file pyarrow cannot read, naming the file and pyarrow's first line."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return bad_value("path", str(path), f"a readable Parquet file (pyarrow cannot read {path.name}: {msg})")


def open_parquet(path: Path):
    """Open `path` with pyarrow, turning its errors on a non-Parquet or corrupt file into one naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    # A damaged footer can surface as a decode or EOF error from pyarrow's metadata reader too.
    except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as exc:
        raise not_parquet(path, exc) from None
