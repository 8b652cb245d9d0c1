"""The import graph of labkit has layers and no circle.

Every ``import`` in every module counts, including those inside functions (a lazy import still ties
the layers together) and relative ones. The layers, bottom up: ``labkit.core`` imports nothing else
of labkit; the systems import core, and the disk system (CaliEX) also the graph core; ``ui``,
``records``, ``catalog``, ``cli``, ``tour`` and ``doctor`` sit above the systems.
"""

from __future__ import annotations

import ast
from pathlib import Path

import labkit

ROOT = Path(labkit.__file__).resolve().parent
SYSTEMS = ("spmm", "graph", "disk", "dataworkers", "recsys")
ABOVE = ("ui", "cli", "catalog", "records", "tour", "doctor")
#: The only arrows between systems: CaliEX is built on the graph core.
SYSTEM_EDGES = {("disk", "graph")}


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ["labkit", *p.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = p
    return mods


def _targets(name: str, p: Path, mods: dict[str, Path]) -> set[str]:
    """The labkit modules `name` (at `p`) imports, each resolved to the module file it names."""
    pkg = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
    raw = set()
    for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
        if isinstance(node, ast.Import):
            raw |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            # `from labkit.graph import csr` names the module labkit.graph.csr; `from labkit.graph import x`
            # with x defined in its __init__ names the package.
            raw |= {f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in mods else base_name for a in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            raw.add(node.args[0].value)
    out = set()
    for t in raw:
        if t != "labkit" and not t.startswith("labkit."):
            continue
        while t not in mods and "." in t:  # `labkit.graph.csr.build_csr` -> labkit.graph.csr
            t = t.rsplit(".", 1)[0]
        if t in mods and t != name:
            out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _targets(m, p, mods) for m, p in mods.items()}


def _part(mod: str) -> str:
    """The layer a module belongs to: 'core', a system, 'ui', 'records', ... or 'labkit' for the package root."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "labkit"


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_walk_sees_lazy_and_relative_imports():
    """The checks below are only as good as the walk: it must see imports inside functions, and resolve
    relative ones and `from package import module`."""
    g = _graph()
    assert "labkit.catalog" in g["labkit"]  # imported inside a function of labkit/__init__.py
    assert "labkit.core.units" in g["labkit.core.memory"]
    assert g["labkit.core.systems"] >= {"labkit.core.bench", "labkit.core.machine"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_circle_between_modules():
    g = _graph()
    found = _cycles(g)
    lines = [" <-> ".join(c) + ": " + ", ".join(f"{a} -> {b}" for a in c for b in sorted(g[a]) if b in c)
             for c in found]
    assert not found, "import circles:\n" + "\n".join(lines)


def test_core_imports_nothing_above_it():
    bad = [f"{m} -> {t}" for m, ts in sorted(_graph().items()) if _part(m) == "core"
           for t in sorted(ts) if _part(t) != "core"]
    assert not bad, "labkit.core imports outside labkit.core:\n" + "\n".join(bad)


def test_systems_import_only_core_and_the_graph_core():
    bad = []
    for m, ts in sorted(_graph().items()):
        s = _part(m)
        if s not in SYSTEMS:
            continue
        for t in sorted(ts):
            u = _part(t)
            if u in ABOVE or u == "labkit" or (u in SYSTEMS and u != s and (s, u) not in SYSTEM_EDGES):
                bad.append(f"{m} -> {t}")
    assert not bad, "a system imports a layer above it or another system:\n" + "\n".join(bad)
