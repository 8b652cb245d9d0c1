"""Exercise notebooks: the source (with solutions, committed) and the student release (solutions stripped).

One notebook per system, rendered from the registry (:func:`render_source`): for each exercise a
markdown cell (title, goal, minutes, points), the solution cell in nbgrader's markup (the stub, then
the reference body between ``### BEGIN SOLUTION`` / ``### END SOLUTION``; cell metadata
``nbgrader: {solution: true, grade_id: <id>}`` and ``labkit: {exercise: <id>}``), a check cell and a
measure cell. The notebook's metadata names the system and the release id (a digest of what a
student sees), so the grader can refuse a notebook that is not one of ours.

The student release runs nbgrader's own ``ClearSolutions`` and ``ClearOutput`` preprocessors over
the sources (no gradebook database, no ``nbgrader`` course folder): what instructors who know
nbgrader expect, and the same notebooks nbgrader's ``generate_assignment`` would produce.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.core.errors import LabkitError

#: Where the committed source notebooks live (regenerate: `labkit course build --sources`).
SOURCES = Path(__file__).resolve().parents[2] / "notebooks" / "course"
#: Environment variable: comma-separated modules that register more exercises (a course's own).
MODULES_ENV = "LABKIT_COURSE_MODULES"

if TYPE_CHECKING:
    import nbformat

BEGIN, END = "    ### BEGIN SOLUTION\n", "    ### END SOLUTION\n"


def load_exercises() -> list:
    """Every registered exercise: labkit's own, then those of the modules named in $LABKIT_COURSE_MODULES."""
    from labkit.course.exercises import exercises
    for name in filter(None, (m.strip() for m in os.environ.get(MODULES_ENV, "").split(","))):
        try:
            import_module(name)
        except ImportError as exc:
            raise LabkitError(f"{MODULES_ENV}={name!r} is not accepted; it does not import ({exc})") from None
    return exercises()


def systems() -> list[str]:
    """Systems that have exercises, in the labs' order (a course's own systems after them)."""
    from labkit.catalog import NAMES
    found = list(dict.fromkeys(e.system for e in load_exercises()))
    return [s for s in NAMES if s in found] + [s for s in found if s not in NAMES]


def notebook_name(system: str) -> str:
    """'01_spmm_exercises.ipynb': numbered as the system's guided notebook (a course's own: 90+)."""
    from labkit.catalog import CATALOG
    nn = next((e.notebook[:2] for e in CATALOG if e.name == system), "90")
    return f"{nn}_{system}_exercises.ipynb"


def _exercises_of(system: str) -> list:
    exs = [e for e in load_exercises() if e.system == system]
    if not exs:
        raise LabkitError(f"system={system!r} is not accepted; it has no exercises (systems with exercises: "
                          f"{', '.join(systems()) or 'none'})")
    return exs


def release_id(system: str) -> str:
    """A digest of what a student sees of `system`'s exercises (ids, functions, stubs, points)."""
    seen = [[e.id, e.func, e.stub, e.points, e.title] for e in _exercises_of(system)]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:12]


def solution_source(ex) -> str:
    """The source cell: the stub, then the reference body between nbgrader's solution markers."""
    stub = ex.stub if ex.stub.endswith("\n") else ex.stub + "\n"
    body = ex.solution if ex.solution.endswith("\n") else ex.solution + "\n"
    return (stub + BEGIN + body + END).rstrip("\n")


def _cell_id(ex_id: str, part: str) -> str:
    return f"{ex_id.replace('.', '-')}-{part}"[:64]


def _title(system: str) -> str:
    from labkit.catalog import CATALOG
    e = next((e for e in CATALOG if e.name == system), None)
    return f"{e.title} exercises" if e else f"{system} exercises"


INTRO = """\
# {title}

{paper}Each exercise asks for one function, a piece of the paper's idea, which labkit then plugs into
the real system. For each one:

1. write the body of the function in its cell (everything it needs must be inside that cell:
   the grader runs each exercise cell on its own, in a fresh process, with a time limit);
2. run the **check** cell below it: it prints your score and names each failing case
   (an empty row, an all-zero tile, ...) with what was expected;
3. run the **measure** cell: your function inside the system, timed beside labkit's own.

Do not import labkit's implementation of the piece you are writing: the grader gives that
exercise zero. Your instructor grades this notebook with `labkit course grade`; you can run the
same grading yourself with `labkit course check {name}`.
"""


def render_source(system: str) -> "nbformat.NotebookNode":
    """The source notebook (reference solutions in place) of `system`'s exercises."""
    import nbformat
    from labkit.catalog import CATALOG
    v4 = nbformat.v4
    exs = _exercises_of(system)
    entry = next((e for e in CATALOG if e.name == system), None)
    paper = f"Exercises on *{entry.paper}*, the lab of `notebooks/{entry.notebook}`.\n\n" if entry else ""
    total = sum(e.minutes for e in exs)
    cells = [v4.new_markdown_cell(INTRO.format(title=_title(system), paper=paper, name=notebook_name(system))
                                  + f"\n{len(exs)} exercises, about {total} minutes in all.", id="intro"),
             v4.new_code_cell("from labkit.course import check, measure, report", id="setup")]
    locked = {"editable": False, "deletable": False}
    for i, ex in enumerate(exs, 1):
        head = [f"## Exercise {i}: {ex.title}", ""]
        if ex.goal:
            head += [ex.goal, ""]
        head.append(f"Write `{ex.func}`. About {ex.minutes} minutes; {ex.points} point{'s' * (ex.points != 1)}, "
                    f"shared equally among the check's cases. (`{ex.id}`)")
        cells.append(v4.new_markdown_cell("\n".join(head), id=_cell_id(ex.id, "task")))
        cells.append(v4.new_code_cell(solution_source(ex), id=_cell_id(ex.id, "solution"), metadata={
            "nbgrader": {"grade": False, "solution": True, "locked": False, "grade_id": ex.id,
                         "schema_version": 3},
            "labkit": {"exercise": ex.id}}))
        cells.append(v4.new_code_cell(f'report(check("{ex.id}", {ex.func}))', id=_cell_id(ex.id, "check"),
                                      metadata=dict(locked, labkit={"check": ex.id})))
        if ex.measure is not None:
            cells.append(v4.new_code_cell(f'figures = measure("{ex.id}", {ex.func})', id=_cell_id(ex.id, "measure"),
                                          metadata=dict(locked, labkit={"measure": ex.id})))
    nb = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "labkit": {"course": system, "release": release_id(system)}})
    return nb


def release(nb: "nbformat.NotebookNode") -> "nbformat.NotebookNode":
    """The student version of source notebook `nb`: nbgrader's ClearSolutions, then ClearOutput."""
    from nbgrader.preprocessors import ClearOutput, ClearSolutions
    out = copy.deepcopy(nb)
    resources: dict = {}
    for pre in (ClearSolutions(), ClearOutput()):
        out, resources = pre.preprocess(out, resources)
    return out


def _write_folder(out: Path, notebooks: dict[str, "nbformat.NotebookNode"], force: bool, what: str) -> Path:
    """Write `notebooks` into folder `out` atomically: a temporary sibling, renamed into place.

    An existing non-empty folder is replaced only with `force` (the old one is removed after the swap).
    """
    import nbformat
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise LabkitError(f"{what}={str(out)!r} is not accepted; it is a file, expected a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise LabkitError(f"{what}={str(out)!r} is not accepted; the folder is not empty (pass --force to "
                          "replace it)")
    if out.is_dir() and force:  # --force replaces a release, never a folder of other work
        other = [p.name for p in out.iterdir() if not p.name.endswith("_exercises.ipynb")
                 and p.name != ".ipynb_checkpoints"]
        if other:
            raise LabkitError(f"{what}={str(out)!r} is not accepted; it holds more than exercise notebooks "
                              f"({', '.join(sorted(other)[:3])}), so --force will not replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, nb in notebooks.items():
            nbformat.write(nb, str(tmp / name))
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old.{os.getpid()}"
            out.rename(old)
        tmp.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def build_release(out: Path | str, force: bool = False) -> list[Path]:
    """Write every system's student notebook into folder `out` (atomic; a non-empty one only with `force`)."""
    nbs = {notebook_name(s): release(render_source(s)) for s in systems()}
    if not nbs:
        raise LabkitError("no exercises are registered; nothing to release")
    folder = _write_folder(Path(out), nbs, force, "--out")
    return [folder / n for n in nbs]


def build_sources(folder: Path | str = SOURCES) -> list[Path]:
    """Re-render the committed source notebooks (with solutions) into `folder`, replacing what is there."""
    nbs = {notebook_name(s): render_source(s) for s in systems()}
    folder = _write_folder(Path(folder), nbs, True, "sources")
    return [folder / n for n in nbs]
