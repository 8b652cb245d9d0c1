"""Notebooks that teach (issue 28): plain words, short, no bench ids, and "lab" as the default."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: A bench id in teaching text ("disk.speedup_ginex") means nothing to a student.
BENCH_ID = re.compile(r"\b(?:spmm|graph|disk|dw|recsys)\.[a-z][a-z_0-9]*_[a-z_0-9]+\b")


def _markdown(path: Path) -> str:
    nb = json.loads(path.read_text())
    # A collapsed cell (source_hidden: JupyterLab shows it folded) holds caveats a student opens on purpose.
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"
                     and not c.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def _outside_details(text: str) -> str:
    return re.sub(r"<details>.*?</details>", "", text, flags=re.S)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_is_under_700_words_outside_details(path):
    words = len(_markdown(path).split())  # a <details> block in a visible cell counts: it shows its summary open
    assert words < 700, f"{path.name}: {words} words of visible markdown (at most 699; caveats in collapsed cells)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_teaching_text_names_no_bench_id(path):
    ids = BENCH_ID.findall(_outside_details(_markdown(path)))
    assert not ids, f"{path.name}: bench ids in teaching text: {sorted(set(ids))}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_opening_is_at_most_150_words(path):
    nb = json.loads(path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    body = "\n".join(ln for ln in "".join(first["source"]).splitlines() if not ln.startswith("#"))  # not the title
    words = len(_outside_details(body).split())
    assert words <= 150, f"{path.name}: the opening cell has {words} words below its title (at most 150)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_default_profile_is_lab(path):
    nb = json.loads(path.read_text())
    params = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    assert re.search(r'^PROFILE\s*=\s*"lab"', "".join(params["source"]), re.M), f"{path.name}: PROFILE is not 'lab'"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_text_quotes_no_number_a_record_can_change(path):
    """Every markdown cell, collapsed caveats included: measured numbers come from records or live runs."""
    from tests.notebook_rules import unattributed_numbers
    nb = json.loads(path.read_text())
    found = [s for c in nb["cells"] if c["cell_type"] == "markdown" for s in unattributed_numbers("".join(c["source"]))]
    assert not found, f"{path.name}: numbers a record can change, in prose: {found}"
