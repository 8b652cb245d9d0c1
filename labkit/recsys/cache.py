"""Hot-row caching: the cache itself and the slow tier behind it.

Three parts, kept apart as in Ginex: the *plan* (which rows are hot: data, built from observed
id counts by :func:`labkit.core.cacheplan.hot_rows`), the *cache* (a compact fast-tier copy of
those rows plus a row -> slot map) and the *slow tier* (the full table: a memory-mapped file behind RAM on a CPU, host memory behind a
GPU). Lookups and updates of cached rows go to the cache; the rest go to the slow tier.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labkit.core.errors import bad_value


class HotRowCache:
    """The fast tier of one packed table: cached rows (and their optimizer state) and a row -> slot map."""

    def __init__(self, n_rows: int, dim: int, state_dim: int) -> None:
        self.slot = np.full(n_rows, -1, np.int32)
        self.rows = np.zeros(0, np.int64)
        self.weights = np.zeros((1, dim), np.float32)
        self.state = np.zeros((1, max(1, state_dim)), np.float32)

    @property
    def size(self) -> int:
        return int(self.rows.size)

    def fill(self, rows: np.ndarray, slow_weights: np.ndarray, slow_state: np.ndarray) -> None:
        """Load `rows` from the slow tier into the cache (call :meth:`flush` first to keep updates)."""
        rows = np.asarray(rows, np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.slot.size):
            raise bad_value("rows", f"[{rows.min()}, {rows.max()}]", f"row numbers in [0, {self.slot.size})")
        self.slot[:] = -1
        self.rows = rows
        self.slot[rows] = np.arange(rows.size, dtype=np.int32)
        dim = slow_weights.shape[1]
        self.weights = np.ascontiguousarray(slow_weights[rows]) if rows.size else np.zeros((1, dim), np.float32)
        if slow_state.shape[0] == slow_weights.shape[0] and rows.size:
            self.state = np.ascontiguousarray(slow_state[rows])
        else:
            self.state = np.zeros((max(1, rows.size), slow_state.shape[1]), np.float32)

    def flush(self, slow_weights: np.ndarray, slow_state: np.ndarray) -> None:
        """Write cached rows (and state) back to the slow tier."""
        if self.rows.size:
            slow_weights[self.rows] = self.weights
            if slow_state.shape[0] == slow_weights.shape[0]:
                slow_state[self.rows] = self.state

    @property
    def nbytes(self) -> int:
        return int(self.weights.nbytes + self.state.nbytes + self.slot.nbytes)


def check_root(arg: str, root: str | os.PathLike) -> Path:
    """Return `root` as a Path if it is a folder, or does not exist yet but its parent folder does.

    Refuses (ValueError naming `arg` and the value) an existing file, a path that is not a str or
    os.PathLike, and a root whose parent folder is missing: a typo must not create a chain of folders.
    """
    if not isinstance(root, (str, os.PathLike)):
        raise bad_value(arg, root if isinstance(root, (int, float, bytes)) else type(root).__name__,
                        "None or the path (str or os.PathLike) of a folder for the slow tier's scratch files")
    path = Path(root)
    if path.is_dir():
        return path
    if path.exists():
        raise bad_value(arg, str(root), "a folder for the slow tier's scratch files, not a file")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise bad_value(arg, str(root), f"a folder, or a new folder in an existing one ({str(path.parent)!r} "
                        "is not a folder); make the parent folders first")
    return path


_ARRAY_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


@dataclass
class SlowTier:
    """Full tables in memory-mapped files under one scratch folder (removed by :meth:`close`).

    A tier made by :meth:`create` that is never closed removes its folder when it is garbage
    collected or, at the latest, when the interpreter exits.
    """

    dir: Path
    files: list[Path] = field(default_factory=list)
    _cleanup: Any = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def create(cls, root: str | os.PathLike | None = None, *, arg: str = "root") -> "SlowTier":
        """Make a fresh scratch folder (never reusing an existing one) under `root` or the temp dir.

        `root` must be a folder or a new one in an existing folder (made here); an existing file or
        a root whose parent is missing raises ValueError naming `arg` (the caller's argument name).
        """
        if root is not None:
            root = check_root(arg, root)
            root.mkdir(exist_ok=True)
        d = Path(tempfile.mkdtemp(prefix=f"picasso-slow-{uuid.uuid4().hex[:6]}-", dir=root))
        tier = cls(d)
        # Holds the path, not the tier; runs once (close(), garbage collection or exit).
        tier._cleanup = weakref.finalize(tier, shutil.rmtree, str(d), ignore_errors=True)
        return tier

    def array(self, name: str, init: np.ndarray | tuple[int, int]) -> np.ndarray:
        """Return a writable memory-mapped array `name`, filled from `init` (or zeros of that shape).

        `name` is a plain file name (letters, digits, ``_ . -``; no path separator, not starting
        with a dot), so every file stays inside the scratch folder that :meth:`close` removes.
        """
        if not isinstance(name, str) or not _ARRAY_NAME.fullmatch(name):
            raise bad_value("name", name, "a plain file name of letters, digits, '_', '.', '-' "
                            "(no path separator, not starting with '.')")
        p = self.dir / f"{name}.f32"
        if p.exists():
            raise FileExistsError(f"name={name!r} already has a file in {self.dir}; refusing to overwrite it")
        shape = init.shape if isinstance(init, np.ndarray) else tuple(init)
        mm = np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=shape)
        if isinstance(init, np.ndarray):
            mm[:] = init
        self.files.append(p)
        # A plain ndarray view of the mapping: numba kernels take it like any array.
        return np.asarray(mm)

    def close(self) -> None:
        """Remove the scratch folder and its files. Idempotent."""
        if self._cleanup is not None:
            self._cleanup()  # the finalizer: removes the folder at most once
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def hit_rate(hits: np.ndarray, lookups: np.ndarray) -> float:
    """Return hits / lookups, or 0 when nothing was looked up."""
    h, n = float(np.sum(hits)), float(np.sum(lookups))
    return h / n if n else 0.0
