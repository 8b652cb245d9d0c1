"""Field specs: each categorical field's table size, embedding dim, pooling and id statistics (and Criteo's)."""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from labkit.core.atomic import atomic_write_json
from labkit.core.errors import bad_value, check_choice, check_range, check_seed


POOLINGS = ("sum", "mean")


OUT_OF_RANGE = ("refuse", "hash")


N_DENSE_CRITEO = 13


N_CAT_CRITEO = 26


@dataclass(frozen=True)
class FieldSpec:
    """One categorical feature field: its table size, embedding dim, pooling and id statistics.

    `hotness` is the mean number of ids per sample (1 = single-hot); `zipf` the skew of the
    synthetic ids; `out_of_range` says whether ids >= `cardinality` are refused or hashed.
    """

    name: str
    cardinality: int
    dim: int = 16
    pooling: str = "sum"
    hotness: int = 1
    zipf: float = 1.05
    out_of_range: str = "refuse"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise bad_value("name", self.name, "a non-empty string")
        check_range(f"{self.name}.cardinality", self.cardinality, 1, integer=True)
        check_range(f"{self.name}.dim", self.dim, 1, 1024, integer=True)
        check_choice(f"{self.name}.pooling", self.pooling, POOLINGS)
        check_range(f"{self.name}.hotness", self.hotness, 1, 1000, integer=True)
        check_range(f"{self.name}.zipf", self.zipf, 0.0, 10.0)
        check_choice(f"{self.name}.out_of_range", self.out_of_range, OUT_OF_RANGE)
        for n in ("cardinality", "dim", "hotness"):  # 4.0 or np.int64(4) is kept as 4 (JSON-able)
            object.__setattr__(self, n, int(getattr(self, n)))
        object.__setattr__(self, "zipf", float(self.zipf))


def make_fields(n_fields: int, *, cardinality: int | Sequence[int] = 100_000,
                dims: int | Sequence[int] = 16, hotness: int | Sequence[int] = 1,
                zipf: float | Sequence[float] = 1.05, pooling: str | Sequence[str] = "sum",
                prefix: str = "C") -> list[FieldSpec]:
    """Return `n_fields` field specs; per-field values (table size, dim, hotness, Zipf skew, pooling)
    cycle through any sequence given."""
    n_fields = int(check_range("n_fields", n_fields, 1, 100_000, integer=True))

    for arg, v, what in (("cardinality", cardinality, "integers"), ("dims", dims, "integers"),
                         ("hotness", hotness, "integers"), ("zipf", zipf, "numbers"), ("pooling", pooling, "poolings")):
        if isinstance(v, (list, tuple, np.ndarray)) and len(v) == 0:
            raise bad_value(arg, list(v), f"a single value or a non-empty sequence of {what}")

    def pick(v, i):  # FieldSpec checks (and refuses 1.5, rather than truncating it here)
        return v[i % len(v)] if isinstance(v, (list, tuple, np.ndarray)) else v
    return [FieldSpec(f"{prefix}{i + 1}", pick(cardinality, i), pick(dims, i), pick(pooling, i), pick(hotness, i),
                      pick(zipf, i)) for i in range(n_fields)]


def check_lr(arg: str, lr: float) -> float:
    """Return learning rate `lr` as a float if it is finite and > 0, else raise naming `arg`."""
    return float(check_range(arg, lr, 0.0, math.inf, lo_open=True, hi_open=True))


def check_specs(specs: Sequence[FieldSpec]) -> list[FieldSpec]:
    """Return `specs` as a list if it holds at least one FieldSpec and nothing else, else raise."""
    if isinstance(specs, (str, bytes, FieldSpec)) or not isinstance(specs, (Sequence, np.ndarray)):
        raise bad_value("specs", type(specs).__name__, "a list of FieldSpec (see make_fields)")
    specs = list(specs)
    if not specs:
        raise bad_value("specs", specs, "at least one FieldSpec (see make_fields)")
    for i, s in enumerate(specs):
        if not isinstance(s, FieldSpec):
            raise bad_value(f"specs[{i}]", type(s).__name__, "a FieldSpec (see make_fields)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise bad_value("specs", next(n for n in names if names.count(n) > 1), "unique field names")
    return specs


def criteo_like_cardinalities(n_fields: int, *, max_rows: int = 1_000_000, min_rows: int = 10,
                              seed: int = 0) -> list[int]:
    """Return log-uniform table sizes between `min_rows` and `max_rows`, as Criteo's 26 fields spread."""
    n_fields = int(check_range("n_fields", n_fields, 1, 100_000, integer=True))
    check_range("min_rows", min_rows, 1, integer=True)
    check_range("max_rows", max_rows, min_rows, integer=True)
    rng = np.random.default_rng([check_seed(seed, bits=64), 7])
    return [int(x) for x in np.exp(rng.uniform(math.log(min_rows), math.log(max_rows), n_fields))]


def save_field_specs(specs: Sequence[FieldSpec], path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write a field spec file (JSON list of fields); refuses to overwrite unless asked."""
    atomic_write_json(path, {"fields": [asdict(s) for s in specs]}, overwrite=overwrite)


def load_field_specs(path: str | os.PathLike) -> list[FieldSpec]:
    """Read a field spec file written by :func:`save_field_specs` (or by hand).

    Raises ValueError naming the file (and the row, for a bad row) when it is missing, unreadable,
    not JSON or not a list of fields.
    """
    try:
        obj = json.loads(Path(path).read_text())
    except OSError as e:
        raise bad_value("path", str(path), f"a readable field spec file ({e.strerror or type(e).__name__})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise bad_value("path", str(path), f"a JSON field spec file ({where})") from None
    rows = obj.get("fields") if isinstance(obj, dict) else obj
    if not isinstance(rows, list) or not rows:
        raise bad_value("path", str(path), "a JSON file with a non-empty 'fields' list")
    known = set(FieldSpec.__dataclass_fields__)
    required = {n for n, f in FieldSpec.__dataclass_fields__.items()
                if f.default is MISSING and f.default_factory is MISSING}
    out = []
    for i, r in enumerate(rows):
        arg = f"{path}: fields[{i}]"
        if not isinstance(r, dict):
            raise bad_value(arg, r, "an object with keys among " + ", ".join(sorted(known)))
        extra = set(r) - known
        if extra:
            raise bad_value(arg, sorted(extra)[0], "keys among " + ", ".join(sorted(known)))
        missing = required - set(r)
        if missing:
            raise bad_value(arg, r, "an object with keys " + ", ".join(sorted(required)) +
                            f" (missing {sorted(missing)[0]!r})")
        try:
            out.append(FieldSpec(**r))
        except ValueError as e:
            raise ValueError(f"{arg}: {e}") from None
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise bad_value(f"{path}: fields.name", dup, "unique field names")
    return out


def criteo_field_specs(cardinality: int = 1_000_000, dim: int = 16, *, out_of_range: str = "hash") -> list[FieldSpec]:
    """Return specs for Criteo's 26 categorical columns C1..C26 (hex ids hashed into `cardinality`)."""
    return [FieldSpec(f"C{i + 1}", cardinality, dim, out_of_range=out_of_range) for i in range(N_CAT_CRITEO)]
