"""Dataset registry: named, seeded datasets built on first use, with verified manifests.

A dataset is a builder function registered with :func:`register_dataset`. It receives a
:class:`DatasetWriter` (files go into a temporary folder) and its profile's parameters. When the
builder returns, the writer records each file's shape, dtype, bytes and sha256 in
``manifest.json`` and the folder is renamed into place in one step, so an interrupted build
leaves nothing that loads as valid. Loading verifies the manifest; a truncated or corrupted
file raises :class:`DatasetError` naming the file and the command that rebuilds it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from labkit.core.atomic import _umask, atomic_write_json
from labkit.core.errors import LabkitError, bad_value
from labkit.core.profiles import check_profile
from labkit.core.progress import StageBar

MANIFEST = "manifest.json"
_CHUNK = 8 << 20


class DatasetError(LabkitError):
    """A dataset is missing, truncated, corrupted or of the wrong version."""


@dataclass
class DatasetSpec:
    """How to build one named dataset at each profile."""

    name: str
    description: str
    builder: Callable[["DatasetWriter", dict], None]
    profiles: dict[str, dict]
    seed: int = 0
    version: int = 1
    system: str = ""


_REGISTRY: dict[str, DatasetSpec] = {}


def register_dataset(name: str, *, description: str, profiles: dict[str, dict], seed: int = 0,
                     version: int = 1, system: str = "") -> Callable:
    """Decorator: register `builder(writer, params)` as dataset `name` with per-profile params."""
    for p in profiles:
        check_profile(p, "profiles")

    def deco(builder: Callable[["DatasetWriter", dict], None]) -> Callable:
        _REGISTRY[name] = DatasetSpec(name, description, builder, dict(profiles), seed, version, system)
        return builder
    return deco


def list_datasets() -> list[DatasetSpec]:
    """Return the registered dataset specs (after importing every system that registers some)."""
    _discover()
    return sorted(_REGISTRY.values(), key=lambda s: s.name)


def get_spec(name: str) -> DatasetSpec:
    _discover()
    if name not in _REGISTRY:
        raise bad_value("name", name, "one of " + (", ".join(sorted(_REGISTRY)) or "(none registered)"))
    return _REGISTRY[name]


def _discover() -> None:
    """Have the systems' datasets register themselves, through the hook the layers above installed."""
    from labkit.core.hooks import discover_datasets
    discover_datasets()


def data_root() -> Path:
    """Where datasets live: $LABKIT_DATA, else the repo's data/ folder, else ~/.cache/labkit/data."""
    env = os.environ.get("LABKIT_DATA")
    if env:
        if os.path.exists(env) and not os.path.isdir(env):
            raise DatasetError(f"LABKIT_DATA={env!r} is not accepted; it is a file, expected a folder "
                               "(created if missing)")
        return Path(env)
    repo_data = Path(__file__).resolve().parents[2] / "data"
    if repo_data.is_dir() and os.access(repo_data, os.W_OK):
        return repo_data
    return Path.home() / ".cache" / "labkit" / "data"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(_CHUNK)
            if not b:
                break
            h.update(b)
        with contextlib.suppress(OSError, AttributeError):
            # Hashing must not leave the file in the page cache: disk benches rely on cold reads.
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return h.hexdigest()


class _Stream:
    """Appends row chunks to one raw file, hashing as it goes."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.row_shape = path, np.dtype(dtype), tuple(row_shape)
        self.rows = 0
        self._h = hashlib.sha256()
        self._fh = open(path, "wb")

    def append(self, chunk: np.ndarray) -> None:
        a = np.ascontiguousarray(chunk, dtype=self.dtype)
        if a.shape[1:] != self.row_shape:
            raise ValueError(f"chunk shape {a.shape} does not match row shape {self.row_shape}")
        b = memoryview(a).cast("B")
        self._fh.write(b)
        self._h.update(b)
        self.rows += a.shape[0]

    def close(self) -> dict:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        return {"file": self.path.name, "shape": [self.rows, *self.row_shape], "dtype": self.dtype.str,
                "bytes": self.path.stat().st_size, "sha256": self._h.hexdigest()}


class DatasetWriter:
    """Collects a dataset's files in a temporary folder; the registry commits them atomically."""

    def __init__(self, tmpdir: Path, spec: DatasetSpec, profile: str, params: dict) -> None:
        self.dir = tmpdir
        self.spec, self.profile, self.params = spec, profile, params
        self.seed = int(params.get("seed", spec.seed))
        self.meta: dict[str, Any] = {}
        self.files: dict[str, dict] = {}

    def rng(self, stream: int = 0) -> np.random.Generator:
        """A generator seeded from the dataset seed and a stream number."""
        return np.random.default_rng([self.seed, stream])

    def array(self, key: str, arr: np.ndarray) -> None:
        """Store `arr` as raw bytes in ``key.bin`` (shape and dtype go in the manifest)."""
        with self.stream(key, arr.dtype, arr.shape[1:]) as s:
            flat = arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr
            step = max(1, _CHUNK // max(1, arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))))
            for i in range(0, arr.shape[0], step):
                s.append(flat[i:i + step].reshape((-1,) + arr.shape[1:]))
            if arr.shape[0] == 0:
                s.append(arr)

    @contextlib.contextmanager
    def stream(self, key: str, dtype: Any, row_shape: tuple[int, ...] = (), *,
               align: int = 0) -> Iterator[_Stream]:
        """Yield a stream that appends row chunks to ``key.bin``; for data larger than RAM.

        `align` pads the file with zeros to a multiple of that many bytes (for O_DIRECT reads);
        the manifest's shape counts only real rows.
        """
        self._check_key(key)
        s = _Stream(self.dir / f"{key}.bin", dtype, row_shape)
        try:
            yield s
            if align:
                pad = -(s.rows * s.dtype.itemsize * int(np.prod(s.row_shape, dtype=np.int64))) % align
                if pad:
                    s._fh.write(b"\0" * pad)
                    s._h.update(b"\0" * pad)
            info = s.close()
        finally:
            if not s._fh.closed:  # the builder failed: do not leak the handle until GC
                s._fh.close()
        info["align"] = align
        self.files[key] = info

    def path(self, key: str, suffix: str, **info: Any) -> Path:
        """Return a path for a file the builder writes itself (JPEGs, CSV, a raw array filled in
        place), hashed when committed. `info` joins its manifest entry: for a raw array, ``shape``,
        ``dtype`` (a numpy dtype string) and ``align``, so that :meth:`Dataset.array` can read it."""
        self._check_key(key)
        p = self.dir / f"{key}{suffix}"
        self.files[key] = {"file": p.name, **info}
        return p

    def _check_key(self, key: str) -> None:
        if not key or "/" in key or key.startswith(".") or key in self.files:
            raise ValueError(f"key={key!r} is not accepted; expected a new plain file name")

    def _finish(self) -> dict:
        for key, info in self.files.items():
            p = self.dir / info["file"]
            if "sha256" not in info:
                if p.is_dir():
                    raise ValueError(f"key={key!r} is a folder; expected a file")
                info.update(bytes=p.stat().st_size, sha256=_sha256_file(p))
        return {"name": self.spec.name, "profile": self.profile, "version": self.spec.version,
                "seed": self.seed, "params": self.params, "meta": self.meta, "files": self.files,
                "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}


@dataclass
class Dataset:
    """A built, verified dataset: files on disk plus their manifest."""

    name: str
    profile: str
    dir: Path
    manifest: dict = field(repr=False)

    @property
    def meta(self) -> dict:
        return self.manifest.get("meta", {})

    @property
    def params(self) -> dict:
        return self.manifest.get("params", {})

    def path(self, key: str) -> Path:
        return self.dir / self._info(key)["file"]

    def info(self, key: str) -> dict:
        return dict(self._info(key))

    def _info(self, key: str) -> dict:
        files = self.manifest["files"]
        if key not in files:
            raise KeyError(f"key={key!r} is not in dataset {self.name}; have {', '.join(files)}")
        return files[key]

    def array(self, key: str, *, mmap: bool = True) -> np.ndarray:
        """The array stored under `key`: a read-only memmap, or a copy in RAM with mmap=False."""
        info = self._info(key)
        shape, dtype = tuple(info["shape"]), np.dtype(info["dtype"])
        if int(np.prod(shape, dtype=np.int64)) == 0:
            return np.zeros(shape, dtype)
        if mmap:
            return np.memmap(self.path(key), dtype=dtype, mode="r", shape=shape)
        out = np.empty(shape, dtype)
        with open(self.path(key), "rb") as fh:
            fh.readinto(memoryview(out.reshape(-1)).cast("B"))
        return out

    @property
    def nbytes(self) -> int:
        return sum(int(f.get("bytes", 0)) for f in self.manifest["files"].values())


def _rebuild_hint(name: str, profile: str) -> str:
    return f"rebuild it with: labkit data make {name} --profile {profile} --force"


_VERIFIED: dict[tuple, bool] = {}


def _check_manifest(manifest: Any, mpath: Path, name: str, profile: str) -> None:
    """Refuse a manifest that parses as JSON but is not one: every field verify() reads, of its type."""
    def bad(what: str) -> DatasetError:
        return DatasetError(f"{mpath} is malformed ({what}); {_rebuild_hint(name, profile)}")
    if not isinstance(manifest, dict):
        raise bad(f"a JSON {type(manifest).__name__}, expected an object")
    files = manifest.get("files", {})
    if not isinstance(files, dict):
        raise bad(f"'files' is a JSON {type(files).__name__}, expected an object")
    for key, info in files.items():
        if not isinstance(info, dict):
            raise bad(f"files[{key!r}] is not an object")
        for fld, types in (("file", str), ("bytes", int), ("sha256", str)):
            if not isinstance(info.get(fld), types) or isinstance(info.get(fld), bool):
                raise bad(f"files[{key!r}] has no {fld!r} {types.__name__}")
        if "\0" in info["file"] or not Path(info["file"]).parts:
            raise bad(f"files[{key!r}] names {info['file']!r}, not a file name")
        if Path(info["file"]).is_absolute() or ".." in Path(info["file"]).parts:
            raise bad(f"files[{key!r}] names {info['file']!r}, outside the dataset's folder")
        if "shape" in info or "dtype" in info:  # a raw array: Dataset.array() reads it with these
            _check_array_info(info, key, bad)


def _check_array_info(info: dict, key: str, bad: Callable[[str], DatasetError]) -> None:
    """Refuse a raw array's shape or dtype that Dataset.array() could not read from its bytes."""
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise bad(f"files[{key!r}] has a 'shape' that is not a list of non-negative ints")
    try:
        dtype = np.dtype(info.get("dtype"))
    except (TypeError, ValueError):
        raise bad(f"files[{key!r}] has 'dtype' {info.get('dtype')!r}, not a numpy dtype") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise bad(f"files[{key!r}] has 'dtype' {info.get('dtype')!r}, not a fixed-size plain dtype")
    need = dtype.itemsize
    for n in shape:
        need *= n
    if need > info["bytes"]:
        raise bad(f"files[{key!r}] needs {need} bytes for its shape and dtype, the file has {info['bytes']}")


def verify(ds_dir: Path, name: str, profile: str, *, full: bool = True, version: int | None = None) -> dict:
    """Return the manifest of `ds_dir` after checking every file's size (and sha256 if `full`).

    With `version`, a manifest of another version is refused too (the layout it describes is not
    the one labkit reads).
    """
    mpath = ds_dir / MANIFEST
    try:
        manifest = json.loads(mpath.read_text())
    except (FileNotFoundError, NotADirectoryError):
        raise DatasetError(f"{mpath} is missing; {_rebuild_hint(name, profile)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise DatasetError(f"{mpath} is not valid JSON; {_rebuild_hint(name, profile)}") from None
    except OSError as exc:  # a folder where the manifest belongs, no permission to read it
        raise DatasetError(f"{mpath} cannot be read ({exc.strerror or exc}); {_rebuild_hint(name, profile)}") from None
    _check_manifest(manifest, mpath, name, profile)
    if version is not None and manifest.get("version") != version:
        raise DatasetError(f"{mpath} has version {manifest.get('version')}, labkit expects "
                           f"{version}; {_rebuild_hint(name, profile)}")
    for key, info in manifest.get("files", {}).items():
        p = ds_dir / info["file"]
        try:
            st = p.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise DatasetError(f"{p} is missing; {_rebuild_hint(name, profile)}") from None
        except OSError as exc:
            raise DatasetError(f"{p} cannot be read ({exc.strerror or exc}); {_rebuild_hint(name, profile)}") from None
        if st.st_size != info["bytes"]:
            raise DatasetError(f"{p} is truncated or altered ({st.st_size} bytes, manifest says "
                               f"{info['bytes']}); {_rebuild_hint(name, profile)}")
        if full:
            # The inode and ctime too: a same-size rewrite can restore its mtime (os.utime), but
            # any write or utime moves ctime, which no user can set back.
            k = (str(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if not _VERIFIED.get(k):
                try:
                    digest = _sha256_file(p)
                except IsADirectoryError:
                    raise DatasetError(f"{p} is a folder, expected a file; {_rebuild_hint(name, profile)}") from None
                except OSError as exc:
                    raise DatasetError(f"{p} cannot be read ({exc.strerror or exc}); "
                                       f"{_rebuild_hint(name, profile)}") from None
                if digest != info["sha256"]:
                    raise DatasetError(f"{p} is corrupted (sha256 does not match the manifest); "
                                       f"{_rebuild_hint(name, profile)}")
                _VERIFIED[k] = True
    return manifest


def dataset_dir(name: str, profile: str, root: Path | None = None) -> Path:
    return Path(root or data_root()) / name / profile


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def _sweep_leftovers(final: Path) -> None:
    """Clear what builds of `final` left behind when their process died (SIGKILL, power loss).

    A build works in ``.{profile}.building-<pid>-XXXX`` and, with --force, parks the copy it
    replaces at ``.{profile}.old-<pid>-XXXX`` for an instant. Such a folder whose pid is no
    longer alive is removed, except a parked copy with no dataset in its place: that one is
    renamed back, so a crash between the two renames loses nothing.
    """
    parent, profile = final.parent, final.name
    try:
        names = sorted(os.listdir(parent))
    except (FileNotFoundError, NotADirectoryError):
        return
    for kind in ("old", "building"):  # restore a parked copy before removing half-built ones
        prefix = f".{profile}.{kind}-"
        for n in names:
            pid = n[len(prefix):].split("-", 1)[0] if n.startswith(prefix) else ""
            if not pid.isdigit() or "-" not in n[len(prefix):] or _pid_alive(int(pid)):
                continue
            p = parent / n
            if kind == "old" and not os.path.lexists(final):
                with contextlib.suppress(OSError):  # kept as it is if it cannot go back
                    os.rename(p, final)
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()


def make_dataset(name: str, profile: str = "ci", *, root: str | Path | None = None, force: bool = False,
                 params: dict | None = None, progress: bool = False) -> Dataset:
    """Build dataset `name` at `profile` unless a valid copy exists; `force` rebuilds and swaps it in.

    An existing copy that fails verification is never silently rebuilt over: that raises
    DatasetError unless `force` is given. `progress` shows a one-line bar of the build's stages
    (generating, hashing, committing) when a build happens.
    """
    spec = get_spec(name)
    profile = check_profile(profile)
    if profile not in spec.profiles:
        raise bad_value("profile", profile, f"one of {', '.join(spec.profiles)} for dataset {name}")
    if root and os.path.exists(root) and not os.path.isdir(root):
        raise DatasetError(f"root={str(root)!r} is not accepted; it is a file, expected a folder (created if missing)")
    final = dataset_dir(name, profile, Path(root) if root else None)
    _sweep_leftovers(final)
    if final.exists() and not force:
        if not final.is_dir():
            raise DatasetError(f"{final} is a file, not a dataset folder; {_rebuild_hint(name, profile)}")
        return open_dataset(name, profile, root=root, build=False)
    p = dict(spec.profiles[profile])
    p.update(params or {})
    # Import the bar's module first (it takes a while), so an interrupt there leaves no folder to
    # remove; draw the bar only once the folder exists, so a refused folder prints one line only.
    import tqdm.auto  # noqa: F401
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{profile}.building-{os.getpid()}-", dir=final.parent))
    except OSError as exc:
        fix = f"pass root= a writable folder (root={str(root)!r})" if root else \
            "set LABKIT_DATA to a writable folder"
        raise DatasetError(f"cannot create a dataset under {final.parent} ({exc.strerror}); {fix}") from None
    old: Path | None = None
    stages = None
    try:
        stages = StageBar(f"building {name}/{profile}", ("generating", "hashing", "committing"), progress)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; a built dataset is as shareable as any folder
        w = DatasetWriter(tmp, spec, profile, p)
        spec.builder(w, p)
        stages.next()
        atomic_write_json(tmp / MANIFEST, w._finish())
        stages.next()
        if final.exists():
            old = final.parent / f".{profile}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:  # --force over a stray file where the folder belongs
                old.unlink()
        else:
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.exists():
                    raise
                # Another process finished the same build first; keep theirs.
                shutil.rmtree(tmp, ignore_errors=True)
        stages.next()
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and os.path.lexists(old) and not os.path.lexists(final):
            # Interrupted between the two renames: put the previous copy back, not leave it hidden.
            with contextlib.suppress(OSError):
                os.rename(old, final)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            from labkit.core.units import fmt_bytes
            kept = "the copy that was there is kept" if final.exists() else "nothing was kept"
            raise DatasetError(f"building {name}/{profile} ran out of disk space under {final.parent} "
                               f"({fmt_bytes(shutil.disk_usage(final.parent).free)} free once the partial build "
                               f"was removed; {kept}): free space, or set LABKIT_DATA to a folder on a larger "
                               "disk") from None
        raise
    finally:
        if stages is not None:
            stages.close()
    return open_dataset(name, profile, root=root, build=False)


def open_dataset(name: str, profile: str = "ci", *, root: str | Path | None = None, build: bool = True,
                 full_verify: bool = True, progress: bool = False) -> Dataset:
    """Return dataset `name` at `profile`, building it first if absent and `build` is true.

    `progress` shows the build's stages if a build happens (see :func:`make_dataset`).
    """
    spec = get_spec(name)
    profile = check_profile(profile)
    d = dataset_dir(name, profile, Path(root) if root else None)
    if not d.exists():
        _sweep_leftovers(d)  # a copy parked by a --force rebuild that was killed comes back
    if not d.exists():
        if not build:
            raise DatasetError(f"dataset {name} ({profile}) is not built at {d}; build it with: "
                               f"labkit data make {name} --profile {profile}")
        return make_dataset(name, profile, root=root, progress=progress)
    manifest = verify(d, name, profile, full=full_verify, version=spec.version)
    return Dataset(name, profile, d, manifest)
