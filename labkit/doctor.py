"""`labkit doctor`: what this machine has, one verdict line per item."""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

from labkit.core import machine
from labkit.core.memory import fmt_bytes

# Every runtime dependency pinned in pyproject.toml, by import name (PIL is pillow).
_PACKAGES = ("torch", "numpy", "numba", "scipy", "pandas", "pyarrow", "torch_geometric", "plotly", "ipywidgets",
             "anywidget", "ipykernel", "jupyterlab", "papermill", "nbformat", "dask", "distributed", "psutil",
             "tqdm", "PIL", "cryptography", "llvmlite", "tornado", "IPython", "nbgrader")
_OPTIONAL = ("cupy", "pynvml", "playwright", "torchrec", "fbgemm_gpu")


_DIST = {"torch_geometric": "torch-geometric", "pynvml": "nvidia-ml-py", "fbgemm_gpu": "fbgemm-gpu-cpu",
         "cupy": "cupy-cuda12x", "PIL": "pillow", "IPython": "ipython"}


def _version(mod: str) -> str | None:
    """Return the installed version of module `mod` (imported, so a broken install shows up), or None."""
    from importlib import metadata
    try:
        m = importlib.import_module(mod)
    except Exception:
        return None
    v = getattr(m, "__version__", None)
    if not v:
        try:
            v = metadata.version(_DIST.get(mod, mod))
        except metadata.PackageNotFoundError:
            v = "installed"
    return str(v)


def checks() -> list[tuple[str, str, str]]:
    """Return (item, status 'ok'|'warn'|'fail', detail) for each thing the lab needs."""
    out: list[tuple[str, str, str]] = []
    py = sys.version.split()[0]
    out.append(("python", "ok" if sys.version_info[:2] >= (3, 11) else "fail", py))
    for p in _PACKAGES:
        v = _version(p)
        out.append((p, "ok" if v else "fail", v or "missing: run `make lab` or `pip install -e .[dev]`"))
    for p in _OPTIONAL:
        v = _version(p)
        out.append((p, "ok" if v else "warn", v or "not installed (optional)"))
    cores = machine.cores()
    cpu = ", ".join(x for x in (machine.cpu_name(), machine.cpu_detail()) if x)
    out.append(("cores", "ok" if cores >= 2 else "warn", f"{cores} ({cpu})"))
    mem = machine.memory_bytes()
    out.append(("memory", "ok" if mem >= 8 << 30 else "warn", fmt_bytes(mem) + ("" if mem >= 8 << 30 else
                                                                          "; 'small' profiles want 8 GiB")))
    from labkit.core.datasets import data_root
    root = data_root()
    probe = root if root.exists() else Path.home()
    free = shutil.disk_usage(probe).free
    out.append(("disk", "ok" if free >= 10 << 30 else "warn", f"{fmt_bytes(free)} free at {probe}"
                + ("" if free >= 10 << 30 else "; 'small' datasets want ~10 GiB")))
    out.append(_data_folder(root))
    gpu = machine.gpu_info()
    out.append(("gpu", "ok" if gpu else "warn", f"{gpu['name']} ({fmt_bytes(gpu['memory_bytes'])})" if gpu else
                "none: GPU kernels and tests are skipped; CPU paths run"))
    chrome = machine.chromium_path()
    out.append(("chromium", "ok" if chrome else "warn", chrome or "absent: browser tests are skipped "
                "(apt-get install chromium)"))
    from labkit.core.cluster import can_shape
    netns, why = can_shape()  # optional: without it the shaped bench claims read "not measured"
    out.append(("network", "ok" if netns else "warn", "network namespaces for a shaped cluster: "
                + ("yes" if netns else f"no ({why}); shaped claims are marked 'not measured'")))
    return out


def _data_folder(root: Path) -> tuple[str, str, str]:
    """Can datasets be written under `root`, and are its files read with O_DIRECT (CaliEX's disk reads)?"""
    import os
    import tempfile

    from labkit.core.atomic import probe_writable
    from labkit.core.directio import PAGE, DirectFile, filesystem_type, probe_direct
    where = root
    while not where.exists() and where != where.parent:  # the folder `labkit data make` will create
        where = where.parent
    try:
        probe_writable(where)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".labkit-doctor-") as fh:  # a page to read directly
            fh.write(b"\0" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
            direct = probe_direct(fh.name)
            engine = ""
            if direct:  # which engine CaliEX's reads get: io_uring, or threads where the kernel refuses it
                with DirectFile(fh.name, staging_bytes=PAGE, max_request=PAGE, sweep_request=PAGE) as f:
                    engine = f.engine
    except OSError as exc:
        return ("data", "fail", f"cannot write under {where} ({exc.strerror or exc}), where datasets go "
                f"({root}); set LABKIT_DATA to a writable folder")
    fs = filesystem_type(where) or "unknown filesystem"
    if not direct:
        return ("data", "warn", f"{root}: {fs} refuses O_DIRECT or keeps files in RAM, so CaliEX's disk "
                "reads would not bypass the page cache; set LABKIT_DATA to a folder on a disk")
    return ("data", "ok", f"{root}: writable, O_DIRECT reads work ({fs}), issued through {engine}")


def run_doctor() -> int:
    """Print the checks; exit code 1 if anything required failed."""
    rows = checks()
    width = max(len(r[0]) for r in rows)
    for item, status, detail in rows:
        print(f"{status.upper():<5} {item:<{width}}  {detail}")
    fails = [r for r in rows if r[1] == "fail"]
    print(f"\nverdict: {'ready' if not fails else str(len(fails)) + ' required item(s) missing'}")
    return 1 if fails else 0
