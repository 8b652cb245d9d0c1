"""Every notebook: committed clean, parameterised, and (for the tour) run through papermill.

Each system's notebook is run by tests/<system>/test_notebook.py, which asserts on its metrics;
this file checks that every notebook has such a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _code_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(_code_cells(nb)) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: code cells {dirty} have outputs; run `make strip`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_has_parameters_cell(path):
    nb = json.loads(path.read_text())
    params = [c for c in _code_cells(nb) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, f"{path.name}: needs exactly one code cell tagged 'parameters'"
    src = "".join(params[0]["source"])
    assert "PROFILE" in src and "METRICS_OUT" in src
    last = "".join(_code_cells(nb)[-1]["source"])
    assert "record_metrics" in last and "METRICS_OUT" in last, f"{path.name}: last cell must record metrics"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name != "00_tour.ipynb"], ids=lambda p: p.name)
def test_every_system_notebook_has_a_metrics_test(path):
    tests = [t for t in (ROOT / "tests").rglob("test_*.py") if path.name in t.read_text()]
    assert tests, f"{path.name} is run by no test under tests/"


@pytest.mark.notebook
def test_tour_notebook_records_metrics():
    from labkit.core.notebooks import run_notebook
    m = run_notebook(ROOT / "notebooks" / "00_tour.ipynb", {"PROFILE": "lab"}, timeout=300)  # its default
    assert m["systems_listed"] == 5
    assert m["systems_built"] == 5                  # every system in the catalog has its bench
    assert m["claims_recorded"] >= 5               # the claims table of BENCHMARKS.md, one row per claim
    per_system = m["claims_per_system"]             # the compact summary at the top: every system, every claim
    assert set(per_system) == {"Flash-LLM", "AliGraph", "CaliEX", "GoldMiner", "PICASSO"}
    assert sum(per_system.values()) == m["claims_recorded"]
    assert 0 < m["sorted_gather_speedup_lo"] <= m["sorted_gather_speedup"] <= m["sorted_gather_speedup_hi"]
    assert m["dashboard_samples"] >= 3          # it sampled while the work ran (about 20 over 2 s)
    assert m["matmuls"] > 0
    series = m["dashboard_series"]
    assert "memory %" in series and "matmuls done" in series
    if not _has_gpu():
        assert not any("GPU" in s for s in series)   # no GPU series on a machine without one
    assert m["slider_updates"] >= 1 and m["slider_speedup"] > 0


def _has_gpu() -> bool:
    from labkit.ui.dashboard import gpu_present
    return gpu_present()
