"""Pins: pyproject.toml says compatible ranges, constraints.txt the exact versions `make install` uses,
and the runtime dependencies are what labkit imports at run time (plus what the notebooks run on)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {k: [Requirement(r) for r in v] for k, v in PROJECT["optional-dependencies"].items()}
#: The one exact pin in pyproject.toml: the CPU torch build every record was measured on.
EXACT = {"torch": "2.13.0"}
#: Runtime dependencies labkit does not import itself, and why they are runtime, not dev.
NOT_IMPORTED = {
    "anywidget": "plotly's FigureWidget (labkit.ui) needs it in the notebooks",
    "ipykernel": "the kernel the notebooks and `labkit lab` run on",
    "jupyterlab": "`labkit lab` runs python -m jupyterlab",
    "cryptography": "distributed's Security.temporary (labkit.core.dask_cluster's TLS) needs it",
}
#: Imported but not a runtime dependency: optional, guarded at import, installed another way.
OPTIONAL_IMPORTS = {"cupy": "gpu extra", "pynvml": "gpu extra", "torchrec": "requirements-nodeps.txt",
                    "fbgemm_gpu": "requirements-nodeps.txt", "pyg_lib": "not on PyPI; a baseline says so"}


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        assert m, f"{path.name}: {line!r} is not an exact pin (name==version)"
        name = canonicalize_name(m[1])
        assert name not in pins, f"{path.name}: {m[1]} pinned twice"
        pins[name] = m[2]
    return pins


def test_pyproject_gives_ranges_torch_alone_exact():
    for req in RUNTIME + [r for reqs in EXTRAS.values() for r in reqs]:
        ops = {s.operator for s in req.specifier}
        if req.name in EXACT:
            assert str(req.specifier) == f"=={EXACT[req.name]}", req
        else:
            # A lower bound (the tested version's release line) and an upper one (the next major, or
            # the next minor for 0.x and calendar versions): compatible, never exact.
            assert ">=" in ops and "<" in ops and "==" not in ops, f"{req} is not a compatible range"


def test_constraints_pin_every_dependency_exactly_inside_its_range():
    pins = _pins(ROOT / "constraints.txt")
    assert "labkit" not in pins
    for req in RUNTIME + [r for reqs in EXTRAS.values() for r in reqs]:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"constraints {name}=={pins[name]} outside {req}"
    assert pins["torch"] == "2.13.0+cpu"  # the CPU build, exactly
    nodeps = _pins(ROOT / "requirements-nodeps.txt")
    for name, version in nodeps.items():  # installed --no-deps from there; the same versions here
        assert pins.get(name) == version, f"requirements-nodeps.txt {name}=={version}, constraints {pins.get(name)}"


def test_make_install_and_conda_use_the_constraints():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r'pip install -c constraints\.txt -e "\.\[dev\]"', make)
    assert re.search(r"\$\(STAMP\):[^\n]*constraints\.txt", make)  # a new pin reinstalls
    env = (ROOT / "environment.yml").read_text()
    assert "- -c constraints.txt" in env and "- -e .[dev]" in env


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level modules imported anywhere in labkit (inside functions too), outside the stdlib."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "labkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top != "labkit" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_runtime_dependencies_are_what_labkit_imports():
    dists = metadata.packages_distributions()
    runtime = {canonicalize_name(r.name) for r in RUNTIME}
    imported = set()
    for mod, where in _third_party_imports().items():
        if mod in OPTIONAL_IMPORTS:
            continue
        assert mod in dists, f"{mod} (imported by {sorted(where)[0]}) is not installed"
        owners = {canonicalize_name(d) for d in dists[mod]}
        assert owners & runtime, f"{mod} (imported by {sorted(where)[0]}) is not a runtime dependency"
        imported |= owners & runtime
    for name in sorted(runtime - imported):  # never imported at run time: only the notebook-facing ones
        assert name in NOT_IMPORTED, f"{name} is a runtime dependency labkit never imports: drop it or move it to dev"
    assert set(NOT_IMPORTED) <= runtime
