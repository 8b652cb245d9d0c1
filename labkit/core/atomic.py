"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, overwrite: bool = True) -> Iterator[IO]:
    """Yield a temporary file beside `path`; on success fsync it and rename it onto `path`.

    With ``overwrite=False`` an existing `path` raises FileExistsError before anything is written.
    On any exception the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    if not overwrite and path.exists():
        raise FileExistsError(f"path={str(path)!r} already exists; refusing to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if not overwrite:
            # link() fails if the name appeared meanwhile, unlike rename().
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, *, overwrite: bool = True) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path, "w", overwrite=overwrite) as fh:
        fh.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, overwrite: bool = True) -> None:
    """Write `obj` as indented JSON to `path` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n",
                      overwrite=overwrite)


def _jsonable(o: Any) -> Any:
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"object of type {type(o).__name__} is not JSON serialisable")
