"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


def _umask() -> int:
    """This process's umask, read without changing it (Linux), else the usual 022."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _resolve(path: str | os.PathLike) -> Path:
    """`path` with every symlink followed, so writing through a link updates the link's target."""
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, overwrite: bool = True) -> Iterator[IO]:
    """Yield a temporary file beside `path`; on success fsync it and rename it onto `path`.

    With ``overwrite=False`` an existing `path` raises FileExistsError before anything is written;
    a `path` whose folder does not exist raises FileNotFoundError (folders are not created).
    On any exception the temporary file is removed and `path` is untouched. A symlink at `path`
    is followed: its target is replaced and the link stays. The new file keeps the permission
    bits of the file it replaces (a new file gets 0o666 less the umask, like ``open()``), not
    the temporary file's private 0600.
    """
    given, path = path, _resolve(path)
    if not overwrite and path.exists():
        raise FileExistsError(f"path={str(given)!r} already exists; refusing to overwrite it")
    if not path.parent.is_dir():  # a mistyped folder is refused, not created
        raise FileNotFoundError(f"path={str(given)!r} is not accepted; its folder {str(path.parent)!r} "
                                "does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            try:
                perm = os.stat(path).st_mode & 0o7777
            except FileNotFoundError:
                perm = 0o666 & ~_umask()
            os.fchmod(fh.fileno(), perm)
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


def probe_writable(folder: str | os.PathLike) -> None:
    """Create and remove a temporary file in `folder`, as an atomic write would; OSError if it cannot.

    ``os.access`` says yes to root almost anywhere (``/proc``, ``/sys``): only a write tells.
    """
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".labkit-probe-", suffix=".tmp"):
        pass


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
