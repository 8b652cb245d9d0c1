"""The course kit end to end: source notebooks, the student release, grading, and `labkit course`.

The registry's own exercises (every system's) are graded through the CLI round trip: the reference
solutions score full marks, the released blanks zero. Wrong submissions are tried on two toy
exercises (tests/course/toy.py, loaded through $LABKIT_COURSE_MODULES as a course's own would be),
so each failure mode is checked once without waiting on the labs' heavier checks. The round trip
is marked slow (`make test` runs it; `make test-fast` does not).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit.catalog import NAMES
from labkit.core.errors import LabkitError
from labkit.course import notebooks
from labkit.course.exercises import exercises
from labkit.course.grade import grade_notebook, grade_notebooks, read_submission, static_imports

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.course.toy"


def _labkit(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), timeout=600)


def _forbid(ex_id: str) -> str:
    return next(e for e in exercises() if e.id == ex_id).forbid[0]


def _real_systems() -> list[str]:
    return [s for s in notebooks.systems() if s in NAMES]


def test_committed_source_notebooks_are_the_rendering_of_the_registry():
    """notebooks/course/ holds exactly render_source(system) for every system with exercises
    (after changing an exercise: `labkit course build --sources`)."""
    systems = _real_systems()
    assert systems, "no exercises registered"
    committed = sorted(p.name for p in notebooks.SOURCES.glob("*.ipynb"))
    assert committed == sorted(notebooks.notebook_name(s) for s in systems), \
        "notebooks/course/ is stale: run `labkit course build --sources`"
    for s in systems:
        on_disk = json.loads((notebooks.SOURCES / notebooks.notebook_name(s)).read_text())
        rendered = json.loads(nbformat.writes(notebooks.render_source(s)))
        assert on_disk == rendered, f"{notebooks.notebook_name(s)} is stale: run `labkit course build --sources`"


def test_top_level_notebook_tests_do_not_pick_up_the_course_folder():
    from tests import test_notebook_prose, test_notebooks
    for mod in (test_notebooks, test_notebook_prose):
        assert all(p.parent == ROOT / "notebooks" for p in mod.NOTEBOOKS)


def test_every_exercise_has_a_cell_trio_and_the_release_strips_every_solution():
    for s in _real_systems():
        src = notebooks.render_source(s)
        rel = notebooks.release(src)
        assert rel.metadata["labkit"] == {"course": s, "release": notebooks.release_id(s)}
        for ex in exercises(s):
            sol = [c for c in src.cells if c.metadata.get("labkit", {}).get("exercise") == ex.id]
            assert len(sol) == 1, ex.id
            assert sol[0].metadata["nbgrader"] == {"grade": False, "solution": True, "locked": False,
                                                   "grade_id": ex.id, "schema_version": 3}
            assert f'report(check("{ex.id}", {ex.func}))' in [c.source for c in src.cells]
            blank = next(c for c in rel.cells if c.metadata.get("labkit", {}).get("exercise") == ex.id)
            assert "BEGIN SOLUTION" not in blank.source and "raise NotImplementedError()" in blank.source
            assert blank.source.startswith(ex.stub.rstrip("\n")), ex.id
            assert ex.solution.strip().splitlines()[0].strip() not in blank.source.split('"""')[-1], ex.id
            compile(blank.source, ex.id, "exec")  # the student starts from a cell that runs
        assert all(not c.get("outputs") for c in rel.cells if c.cell_type == "code")


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    """`labkit course build`, then `labkit course grade` over the reference (source) notebooks, the
    released blanks, the references importing labkit's implementation, and one notebook that is not
    ours: the CSV's rows."""
    tmp = tmp_path_factory.mktemp("course")
    built = _labkit("course", "build", "--out", "release", cwd=tmp)
    assert built.returncode == 0, built.stderr
    subs = tmp / "submissions"
    (subs / "blank").mkdir(parents=True)
    (subs / "reference").mkdir()
    for p in (tmp / "release").glob("*.ipynb"):
        (subs / "blank" / p.name).write_text(p.read_text())
    (subs / "cheat").mkdir()
    for p in notebooks.SOURCES.glob("*.ipynb"):
        (subs / "reference" / p.name).write_text(p.read_text())
        nb = nbformat.read(str(p), as_version=4)
        for c in nb.cells:  # the reference solution, plus an import of labkit's own implementation
            ex_id = c.metadata.get("labkit", {}).get("exercise")
            if ex_id:
                c.source = f"import {_forbid(ex_id)}\n" + c.source
        nbformat.write(nb, str(subs / "cheat" / p.name))
    (subs / "not_ours.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    graded = _labkit("course", "grade", "submissions", "--csv", "grades.csv", cwd=tmp)
    assert graded.returncode == 0, graded.stderr
    with open(tmp / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return tmp, graded, rows


@pytest.mark.slow  # the round trip grades every exercise three times (about a minute)
def test_round_trip_reference_full_marks_for_every_registered_exercise(round_trip):
    _, _, rows = round_trip
    ref = {r["exercise"]: r for r in rows if r["submission"].startswith("reference/")}
    assert set(ref) == {e.id for s in _real_systems() for e in exercises(s)}
    for ex_id, r in ref.items():
        assert float(r["score"]) == float(r["points"]) > 0, (ex_id, r)
        assert r["passed"] == r["cases"] and int(r["cases"]) > 0 and not r["failing"] and not r["reason"], r


@pytest.mark.slow  # the round trip grades every exercise three times (about a minute)
def test_round_trip_blanks_score_zero_with_a_reason(round_trip):
    _, _, rows = round_trip
    blank = [r for r in rows if r["submission"].startswith("blank/")]
    assert len(blank) == sum(len(exercises(s)) for s in _real_systems())
    for r in blank:
        assert float(r["score"]) == 0 and "NotImplementedError" in r["reason"], r


@pytest.mark.slow  # the round trip grades every exercise three times (about a minute)
def test_round_trip_importing_the_reference_scores_zero_for_every_exercise(round_trip):
    _, _, rows = round_trip
    cheat = {r["exercise"]: r for r in rows if r["submission"].startswith("cheat/")}
    assert set(cheat) == {e.id for s in _real_systems() for e in exercises(s)}
    for ex_id, r in cheat.items():
        assert float(r["score"]) == 0 and r["reason"] == f"imports the reference ({_forbid(ex_id)})", r


@pytest.mark.slow  # the round trip grades every exercise three times (about a minute)
def test_round_trip_csv_names_a_notebook_that_is_not_ours(round_trip):
    tmp, graded, rows = round_trip
    bad = [r for r in rows if r["submission"] == "not_ours.ipynb"]
    assert len(bad) == 1 and bad[0]["exercise"] == "-" and "not a labkit exercise notebook" in bad[0]["reason"]
    assert list(rows[0]) == ["submission", "exercise", "score", "points", "passed", "cases", "failing", "reason"]
    assert "refused: " in graded.stdout
    # the CSV is never overwritten silently
    again = _labkit("course", "grade", "submissions", "--csv", "grades.csv", cwd=tmp)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr


@pytest.mark.slow  # the round trip grades every exercise three times (about a minute)
def test_build_refuses_a_non_empty_folder_without_force(round_trip):
    tmp, _, _ = round_trip
    before = sorted(p.name for p in (tmp / "release").iterdir())
    again = _labkit("course", "build", "--out", "release", cwd=tmp)
    assert again.returncode == 2 and "--force" in again.stderr and again.stderr.count("\n") == 1
    forced = _labkit("course", "build", "--out", "release", "--force", cwd=tmp)
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in (tmp / "release").iterdir()) == before
    assert not [p for p in tmp.iterdir() if p.name.startswith(".release")]  # no temporary folder left
    other = tmp / "work"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(LabkitError, match="more than exercise notebooks"):
        notebooks.build_release(other, force=True)  # --force replaces a release, not other work
    assert (other / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------------------------------------
# Wrong submissions, on the toy exercises.


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """The toy exercises' source and released notebooks; returns a function writing a submission
    whose `toy.top_k` cell holds `body` (the clip_sum cell keeps its reference solution)."""
    monkeypatch.setenv("LABKIT_COURSE_MODULES", TOY)
    monkeypatch.chdir(ROOT)  # the graded child imports tests.course.toy from here
    notebooks.load_exercises()
    src = notebooks.render_source("toy")

    def submission(top_k_cell: str | None, name: str = "sub.ipynb") -> Path:
        nb = nbformat.from_dict(json.loads(nbformat.writes(src)))
        cells = []
        for c in nb.cells:
            if c.metadata.get("labkit", {}).get("exercise") == "toy.top_k":
                if top_k_cell is None:
                    continue
                c.source = top_k_cell
            cells.append(c)
        nb.cells = cells
        path = tmp_path / name
        nbformat.write(nb, str(path))
        return path
    return submission


STUB = 'def top_k(values, k):\n    """doc"""\n'


def _by_id(results):
    return {r.exercise: r for r in results}


def test_wrong_submissions_each_get_zero_with_a_one_line_reason(toy):
    cases = {
        "raises": (STUB + "    raise ValueError('boom')\n", "raised ValueError"),
        "cell_raises": ("raise RuntimeError('at import')\n" + STUB + "    return []\n",
                        "the cell raised RuntimeError: at import"),
        "loops": (STUB + "    while True:\n        pass\n", "time limit of 8 s"),
        "imports": ("from tests.course.toy_ref import top_k as ref\n" + STUB + "    return ref(values, k)\n",
                    "imports the reference (tests.course.toy_ref"),
        "imports_at_call": (STUB + "    import importlib\n    m = importlib.import_module('tests.course.toy_ref')\n"
                            "    return m.top_k(values, k)\n", "imports the reference (tests.course.toy_ref)"),
        "imports_course": ("import labkit.course\n" + STUB + "    return []\n", "imports the reference (labkit.course)"),
        "exits": ("import os\nos._exit(3)\n", "exited with status 3"),
        "no_function": ("x = 1\n", "does not define top_k"),
        "syntax": (STUB + "    return (\n", "does not parse"),
        "missing": (None, "missing"),
    }
    paths = [toy(cell, f"{name}.ipynb") for name, (cell, _) in cases.items()]
    graded = dict(grade_notebooks(paths, timeout=8.0, jobs=2))
    for (name, (_, reason)), path in zip(cases.items(), paths):
        res = _by_id(graded[path])
        top = res["toy.top_k"]
        assert top.score == 0, (name, top)
        if name == "raises":  # the function raises: every case fails, each named with what it raised
            assert top.failing and all("raised ValueError: boom" in c.detail for c in top.failing), top
        else:
            assert reason in top.reason and "\n" not in top.reason, (name, top.reason)
        assert res["toy.clip_sum"].score == 1, (name, res["toy.clip_sum"])  # the other exercise unharmed


def test_a_thread_left_running_does_not_cost_the_marks(toy):
    cell = ("import threading, time\nthreading.Thread(target=lambda: time.sleep(3600)).start()\n"
            + STUB + "    return sorted(values, reverse=True)[:k]\n")
    top = _by_id(grade_notebook(toy(cell), timeout=20))["toy.top_k"]
    assert top.score == 2 and not top.reason, top


def test_a_wrong_answer_on_an_edge_case_is_named_and_scores_partial_credit(toy):
    edge = STUB + "    if k > len(values):\n        return []\n    return sorted(values, reverse=True)[:k]\n"
    top = _by_id(grade_notebook(toy(edge), timeout=30))["toy.top_k"]
    assert [c.name for c in top.failing] == ["k larger than the list"]
    assert "expected [3, 2, 1], got []" in top.failing[0].detail
    n = len(top.cases)
    assert top.score == round(2 * (n - 1) / n, 2) and not top.reason


def test_reference_and_blank_toy_notebooks(toy, tmp_path):
    full = grade_notebook(toy(notebooks.solution_source(exercises("toy")[0])))
    assert [(r.exercise, r.score) for r in full] == [("toy.top_k", 2), ("toy.clip_sum", 1)]
    blank = tmp_path / "blank.ipynb"
    nbformat.write(notebooks.release(notebooks.render_source("toy")), str(blank))
    assert [r.score for r in grade_notebook(blank)] == [0, 0]


def test_a_notebook_that_is_not_a_release_of_ours_is_refused_on_one_line(toy, tmp_path):
    path = toy(None)
    nb = json.loads(path.read_text())
    del nb["metadata"]["labkit"]
    path.write_text(json.dumps(nb))
    with pytest.raises(LabkitError, match="not a labkit exercise notebook"):
        read_submission(path)
    nb["metadata"]["labkit"] = {"course": "toy", "release": "0123456789ab"}
    path.write_text(json.dumps(nb))
    with pytest.raises(LabkitError, match="release 0123456789ab of the toy exercises"):
        grade_notebook(path)
    (tmp_path / "x.ipynb").write_text("not json")
    with pytest.raises(LabkitError, match="not a readable notebook"):
        read_submission(tmp_path / "x.ipynb")


def test_check_cell_reports_the_score_and_names_failing_cases(toy, capsys):
    from labkit.course import check, measure, report
    ns: dict = {}
    exec(STUB + "    return sorted(values, reverse=True)[:k] if k <= len(values) else []\n", ns)
    report(check("toy.top_k", ns["top_k"]))
    out = capsys.readouterr().out
    assert "toy.top_k (The k largest values): score 1.75 / 2 (7 of 8 cases passed)" in out
    assert "FAIL k larger than the list: expected [3, 2, 1], got []" in out and "Traceback" not in out
    figures = measure("toy.top_k", ns["top_k"])
    assert set(figures) == {"student_s", "reference_s"} and figures["student_s"] >= 0
    exec(STUB + "    raise NotImplementedError()\n", ns)
    report(check("toy.top_k", ns["top_k"]))
    assert "score 0 / 2 (not done yet: top_k still raises NotImplementedError)" in capsys.readouterr().out


def test_static_import_scan():
    forbid = ("labkit.spmm.tiles", "labkit.course")
    assert static_imports("import labkit.spmm.tiles as t", forbid) == "labkit.spmm.tiles"
    assert static_imports("from labkit.spmm import tiles", forbid) == "labkit.spmm.tiles"
    assert static_imports("import labkit\nx = labkit.spmm.tiles.encode", forbid) == "labkit.spmm.tiles.encode"
    assert static_imports("import numpy as np\nfrom labkit.spmm import format", forbid) is None


def test_cli_check_prints_a_score_table_and_refuses_bad_input(toy, tmp_path):
    env = {"LABKIT_COURSE_MODULES": TOY}
    ok = _labkit("course", "check", str(toy(None)), "--timeout", "20", cwd=ROOT, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "toy.top_k     0 / 2  missing: no cell for this exercise in the notebook" in ok.stdout
    assert "toy.clip_sum  1 / 1  -" in ok.stdout and "total         1 / 3" in ok.stdout
    for args, text in [(("check", str(tmp_path / "nope.ipynb")), "no such file"),
                       (("check", str(ROOT / "notebooks" / "00_tour.ipynb")), "not a labkit exercise notebook"),
                       (("grade", str(tmp_path / "nope")), "expected a folder"),
                       (("check", "x.ipynb", "--timeout", "-1"), "expected seconds > 0")]:
        r = _labkit("course", *args, cwd=tmp_path, env=env)
        assert r.returncode == 2 and text in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    listed = _labkit("course", "list", cwd=ROOT, env=env)
    assert listed.returncode == 0 and "toy.top_k" in listed.stdout and "5 min" in listed.stdout
