"""Run a lab notebook headless through papermill and return the metrics it recorded."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def run_notebook(path: str | os.PathLike, parameters: dict | None = None, *, timeout: int = 600,
                 kernel: str = "python3", output: str | os.PathLike | None = None) -> dict:
    """Execute notebook `path` with `parameters` (METRICS_OUT is set for you) and return its metrics.

    Each cell may run at most `timeout` seconds. The executed copy goes to `output` (or a
    temporary file); the committed notebook is never written.
    """
    import papermill as pm

    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="labkit-nb-") as tmp:
        metrics_out = Path(tmp) / "metrics.json"
        params = {"PROFILE": "ci", **(parameters or {}), "METRICS_OUT": str(metrics_out)}
        out = Path(output) if output else Path(tmp) / path.name
        pm.execute_notebook(str(path), str(out), parameters=params, kernel_name=kernel,
                            cwd=str(path.parent), execution_timeout=timeout, progress_bar=False)
        if not metrics_out.exists():
            raise AssertionError(f"{path.name} ran but recorded no metrics (no record_metrics(..., METRICS_OUT) call)")
        return json.loads(metrics_out.read_text())
