"""Run a lab notebook headless through papermill and return the metrics it recorded."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from labkit.core.atomic import atomic_open
from labkit.core.errors import bad_value


def _check_output(path: Path, output: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse an `output` that is the notebook itself, or that exists (unless `overwrite`)."""
    out = Path(output)
    same = os.path.realpath(out) == os.path.realpath(path)
    if not same and out.exists() and path.exists():
        same = os.path.samefile(out, path)  # a hard link to the committed notebook
    if same:
        raise bad_value("output", str(output), "a path other than the notebook being run (the committed "
                        "notebook is never written)")
    if out.is_dir():
        raise bad_value("output", str(output), "a file path, not a folder")
    if out.exists() and not overwrite:
        raise FileExistsError(f"output={str(output)!r} already exists; pass overwrite=True to replace it, "
                              "or choose a new path")
    return out


def run_notebook(path: str | os.PathLike, parameters: dict | None = None, *, timeout: int = 600,
                 kernel: str = "python3", output: str | os.PathLike | None = None,
                 overwrite: bool = False) -> dict:
    """Execute notebook `path` with `parameters` (METRICS_OUT is set for you) and return its metrics.

    Each cell may run at most `timeout` seconds. The executed copy goes to `output` (or a
    temporary file); the committed notebook is never written. An existing `output` is refused
    unless `overwrite`; it is replaced in one step once the run ends (a failed run's copy, with
    its traceback, too), so it never holds half a notebook.
    """
    path = Path(path)
    out = _check_output(path, output, overwrite) if output else None
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix="labkit-nb-") as tmp:
        metrics_out = Path(tmp) / "metrics.json"
        params = {"PROFILE": "ci", **(parameters or {}), "METRICS_OUT": str(metrics_out)}
        executed = Path(tmp) / path.name
        try:
            pm.execute_notebook(str(path), str(executed), parameters=params, kernel_name=kernel,
                                cwd=str(path.parent), execution_timeout=timeout, progress_bar=False)
        finally:
            if out is not None and executed.exists():
                with open(executed, "rb") as src, atomic_open(out, "wb", overwrite=overwrite) as dst:
                    shutil.copyfileobj(src, dst)
        if not metrics_out.exists():
            raise AssertionError(f"{path.name} ran but recorded no metrics (no record_metrics(..., METRICS_OUT) call)")
        return json.loads(metrics_out.read_text())
