"""Grading submissions: each exercise cell alone, in a fresh process, with a time limit.

The notebook is never run as a whole. For each exercise the cell whose metadata names it is
taken out and run in a new Python process (``python -m labkit.course.grade``), which then calls
the exercise's check on the function the cell defines. A cell that raises, loops (killed at the
time limit), is missing, still raises NotImplementedError, or imports the reference (the modules
in the exercise's ``forbid``, and ``labkit.course`` itself) scores 0 with a one-line reason; the
grader itself never stops on a bad submission. Scores use the same rule as the notebook's check
cell (:func:`labkit.course.feedback.score`: partial credit per case).

This stops honest mistakes and casual copying of the reference, not a determined attacker: the
submission runs as the grading user. Grade untrusted notebooks in a throwaway account or container.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.core.errors import LabkitError
from labkit.course.exercise import Case
from labkit.course.feedback import Result

TIME_LIMIT_S = 30.0
#: Never importable from a submission: the notebook's own helpers (they hold the checks).
ALWAYS_FORBID = ("labkit.course",)


@dataclass
class Submission:
    """One notebook read for grading: its path, system, and the source of each exercise cell found."""

    path: Path
    system: str
    cells: dict[str, str]


def read_submission(path: Path | str) -> Submission:
    """Read notebook `path`; refuse (LabkitError, one line) one that is not a release of our exercises."""
    import nbformat  # here, not at the top: the graded child process never needs it (and it costs a second)

    from labkit.course.notebooks import load_exercises, release_id, systems
    path = Path(path)
    try:
        nb = nbformat.read(str(path), as_version=4)
    except FileNotFoundError:
        raise LabkitError(f"notebook={str(path)!r} is not accepted; no such file") from None
    except Exception as exc:  # not JSON, not a notebook
        raise LabkitError(f"notebook={str(path)!r} is not accepted; it is not a readable notebook "
                          f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})") from None
    meta = nb.metadata.get("labkit", {}) if isinstance(nb.metadata.get("labkit"), dict) else {}
    system, release = meta.get("course"), meta.get("release")
    known = systems()
    if not system or not release:
        raise LabkitError(f"notebook={str(path)!r} is not accepted; it is not a labkit exercise notebook "
                          "(no labkit course metadata); expected one released by `labkit course build`")
    if system not in known:
        raise LabkitError(f"notebook={str(path)!r} is not accepted; its course {system!r} has no exercises "
                          f"here (expected one of {', '.join(known)})")
    if release != release_id(system):
        raise LabkitError(f"notebook={str(path)!r} is not accepted; it is release {release} of the {system} "
                          f"exercises and this labkit knows release {release_id(system)} (rebuild with "
                          "`labkit course build` and move the answers over)")
    ids = {e.id for e in load_exercises() if e.system == system}
    cells: dict[str, str] = {}
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        md = cell.get("metadata", {})
        ex_id = (md.get("labkit") or {}).get("exercise") or (md.get("nbgrader") or {}).get("grade_id")
        if ex_id in ids and ex_id not in cells:  # the first cell that names it, as nbgrader reads grade ids
            cells[ex_id] = cell.source
    return Submission(path, system, cells)


# ---------------------------------------------------------------------------------------------
# The child process: run one cell, check its function, write the result as JSON.


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _hits(name: str, forbid: tuple[str, ...]) -> str | None:
    return next((f for f in forbid if name == f or name.startswith(f + ".")), None)


def static_imports(source: str, forbid: tuple[str, ...]) -> str | None:
    """The first forbidden module `source` imports or names (``import x``, ``from x import y``, ``x.y.z``)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            d = _dotted(node)
            names = [d] if d else []
        for n in names:
            if _hits(n, forbid):
                return n
    return None


class _ImportGuard:
    """While installed, an import of a forbidden module from code of the submission raises ImportError."""

    def __init__(self, forbid: tuple[str, ...], filename: str):
        import builtins
        import importlib
        self.forbid, self.filename, self.hit = forbid, filename, None
        self._builtins, self._importlib = builtins, importlib
        self._import, self._import_module = builtins.__import__, importlib.import_module

    def _from_submission(self) -> bool:
        """Whether the import comes from the cell's code (or a string it exec'd), not from a library
        the cell called: library code may import what it needs lazily."""
        f = sys._getframe(3)  # the frame that called __import__ / import_module
        while f is not None:
            name = f.f_code.co_filename
            if name == self.filename:
                return True
            if not name.startswith("<"):  # a real file: library code
                return False
            f = f.f_back
        return False

    def _guard(self, name: str, fromlist=()) -> None:
        for n in [name, *(f"{name}.{x}" for x in (fromlist or ()) if isinstance(x, str))]:
            if _hits(n, self.forbid) and self._from_submission():
                self.hit = self.hit or n
                raise ImportError(f"{n} may not be imported in this exercise")

    def __enter__(self):
        def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
            if not level:
                self._guard(name, fromlist)
            return self._import(name, globals, locals, fromlist, level)

        def guarded_import_module(name, package=None):
            if not name.startswith("."):
                self._guard(name)
            return self._import_module(name, package)
        self._builtins.__import__ = guarded_import
        self._importlib.import_module = guarded_import_module
        return self

    def __exit__(self, *exc):
        self._builtins.__import__ = self._import
        self._importlib.import_module = self._import_module


def _reference_message(name: str) -> str:
    return f"imports the reference ({name})"


def run_cell(exercise_id: str, source: str) -> Result:
    """In this process: run the cell `source`, then check the function it defines (the child's work)."""
    from labkit.course.exercises import get
    from labkit.course.feedback import run_check
    from labkit.course.notebooks import load_exercises
    load_exercises()
    ex = get(exercise_id)
    res = Result(ex.id, ex.points)
    forbid = tuple(ex.forbid) + ALWAYS_FORBID
    filename = f"<submission {ex.id}>"
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # a cell may hold %magics
        code = TransformerManager().transform_cell(source)
        hit = static_imports(code, forbid)
        compiled = compile(code, filename, "exec")
    except SyntaxError as exc:
        res.reason = f"the cell does not parse: SyntaxError on line {exc.lineno}: {exc.msg}"
        return res
    if hit:
        res.reason = _reference_message(hit)
        return res
    ns: dict = {"__name__": "__submission__"}
    with _ImportGuard(forbid, filename) as guard:
        try:
            exec(compiled, ns)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: a submission never stops the grader
            if guard.hit:
                res.reason = _reference_message(guard.hit)
            else:
                res.reason = f"the cell raised {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            return res
        fn = ns.get(ex.func)
        if fn is None:
            res.reason = f"the cell does not define {ex.func}"
            return res
        try:
            res = run_check(ex, fn)
        except BaseException as exc:
            res = Result(ex.id, ex.points, reason=f"the check stopped: {type(exc).__name__}: {exc}"[:200])
    if guard.hit:
        return Result(ex.id, ex.points, reason=_reference_message(guard.hit))
    return res


def _child(job_path: str, result_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the student's code prints goes nowhere; stderr (crashes) to the log
    res = run_cell(job["exercise"], job["source"])
    tmp = result_path + ".tmp"
    Path(tmp).write_text(json.dumps({"exercise": res.exercise, "points": res.points, "score": res.score,
                                     "reason": res.reason,
                                     "cases": [[c.name, bool(c.passed), str(c.detail)] for c in res.cases]}))
    os.replace(tmp, result_path)
    # Exit now: threads the cell left running would keep the process past the time limit.
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# The parent: run jobs, at most `jobs` at a time, each killed at its time limit.


@dataclass
class _Job:
    key: tuple
    exercise: str
    points: int
    source: str
    proc: subprocess.Popen | None = None
    dir: Path | None = None
    deadline: float = 0.0
    pidfd: int | None = None


def _start(job: _Job, timeout: float, root: Path) -> None:
    job.dir = Path(tempfile.mkdtemp(prefix="job-", dir=root))
    (job.dir / "job.json").write_text(json.dumps({"exercise": job.exercise, "source": job.source}))
    env = dict(os.environ)
    # The submission's cwd is a scratch folder: keep the caller's folder importable for
    # $LABKIT_COURSE_MODULES (a course's own exercises), as it is for the caller.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # two graders share the cores; a check needs one thread
    log = open(job.dir / "log", "wb")
    job.proc = subprocess.Popen([sys.executable, "-m", "labkit.course.grade", str(job.dir / "job.json"),
                                 str(job.dir / "result.json")], cwd=job.dir, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    log.close()
    job.deadline = time.monotonic() + timeout
    try:
        job.pidfd = os.pidfd_open(job.proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel or not Linux): poll instead
        job.pidfd = None


def _kill(job: _Job) -> None:
    try:
        os.killpg(job.proc.pid, signal.SIGKILL)  # the cell's own children too
    except (ProcessLookupError, PermissionError):
        pass
    job.proc.wait()


def _finish(job: _Job, timed_out: bool, timeout: float) -> Result:
    if job.pidfd is not None:
        os.close(job.pidfd)
    try:
        if timed_out and not (job.dir / "result.json").exists():
            return Result(job.exercise, job.points,
                          reason=f"did not finish within the time limit of {timeout:g} s (an endless loop?)")
        out = job.dir / "result.json"
        if not out.exists():
            tail = (job.dir / "log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
            code = job.proc.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return Result(job.exercise, job.points,
                          reason=f"the process {how} before the check finished" + (f": {tail[0][:160]}" if tail[0] else ""))
        d = json.loads(out.read_text())
        return Result(d["exercise"], d["points"], [Case(*c) for c in d["cases"]], d["score"], d["reason"])
    finally:
        shutil.rmtree(job.dir, ignore_errors=True)


def _run_jobs(jobs: list[_Job], timeout: float, parallel: int) -> dict[tuple, Result]:
    results: dict[tuple, Result] = {}
    pending, running = list(jobs), []
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as root:
        try:
            while pending or running:
                while pending and len(running) < max(1, parallel):
                    job = pending.pop(0)
                    _start(job, timeout, Path(root))
                    running.append(job)
                now = time.monotonic()
                wait = max(0.0, min(j.deadline for j in running) - now)
                fds = [j.pidfd for j in running if j.pidfd is not None]
                if len(fds) == len(running):
                    select.select(fds, [], [], wait)  # wakes when a child exits or at the first deadline
                else:
                    time.sleep(min(wait, 0.05))
                for job in list(running):
                    late = job.proc.poll() is None and time.monotonic() >= job.deadline
                    if late:
                        _kill(job)
                    if job.proc.poll() is not None:
                        running.remove(job)
                        results[job.key] = _finish(job, late, timeout)
        finally:
            for job in running:  # interrupted: leave no submission running
                _kill(job)
    return results


def _missing(ex) -> Result:
    return Result(ex.id, ex.points, reason="missing: no cell for this exercise in the notebook")


def grade_notebooks(paths: list[Path], timeout: float = TIME_LIMIT_S, jobs: int = 2,
                    ) -> list[tuple[Path, list[Result] | str]]:
    """Grade every notebook in `paths`: per notebook its Results in exercise order, or why it was refused."""
    from labkit.course.notebooks import load_exercises
    if not timeout > 0:
        raise LabkitError(f"--timeout={timeout!r} is not accepted; expected seconds > 0")
    exs = load_exercises()
    subs: list[tuple[Path, Submission | str]] = []
    for p in paths:
        try:
            subs.append((Path(p), read_submission(p)))
        except LabkitError as exc:
            subs.append((Path(p), str(exc)))
    todo = [_Job((i, ex.id), ex.id, ex.points, sub.cells[ex.id])
            for i, (_, sub) in enumerate(subs) if isinstance(sub, Submission)
            for ex in exs if ex.system == sub.system and ex.id in sub.cells]
    done = _run_jobs(todo, timeout, jobs)
    out: list[tuple[Path, list[Result] | str]] = []
    for i, (p, sub) in enumerate(subs):
        if isinstance(sub, str):
            out.append((p, sub))
        else:
            out.append((p, [done.get((i, ex.id)) or _missing(ex) for ex in exs if ex.system == sub.system]))
    return out


def grade_notebook(path: Path | str, timeout: float = TIME_LIMIT_S, jobs: int = 2) -> list[Result]:
    """Grade one submission; a notebook that is not a release of ours raises LabkitError (one line)."""
    read_submission(path)  # refuse at once, with the reason
    (_, res), = grade_notebooks([Path(path)], timeout, jobs)
    if isinstance(res, str):
        raise LabkitError(res)
    return res


# ---------------------------------------------------------------------------------------------
# Tables and CSV.


def score_table(results: list[Result]) -> str:
    """exercise | score | failing cases (or the reason), and a total line."""
    rows = [(r.exercise, f"{r.score:g} / {r.points}",
             r.reason or ("; ".join(c.name for c in r.failing) if r.failing else "-")) for r in results]
    w0 = max([len("exercise")] + [len(r[0]) for r in rows])
    w1 = max([len("score")] + [len(r[1]) for r in rows])
    lines = [f"{'exercise':<{w0}}  {'score':>{w1}}  failing cases", f"{'-' * w0}  {'-' * w1}  {'-' * 13}"]
    lines += [f"{a:<{w0}}  {b:>{w1}}  {c}" for a, b, c in rows]
    total, points = sum(r.score for r in results), sum(r.points for r in results)
    lines.append(f"{'total':<{w0}}  {f'{round(total, 2):g} / {points}':>{w1}}")
    return "\n".join(lines)


CSV_FIELDS = ("submission", "exercise", "score", "points", "passed", "cases", "failing", "reason")


def csv_rows(graded: list[tuple[Path, list[Result] | str]], folder: Path | None = None) -> list[dict]:
    """One row per submission x exercise; a refused notebook is one row with exercise '-' and the reason.

    `submission` is the path relative to `folder` (one folder per student keeps names apart).
    """
    rows = []
    for path, res in graded:
        name = str(path.relative_to(folder)) if folder is not None else path.name
        if isinstance(res, str):
            rows.append(dict(submission=name, exercise="-", score=0, points=0, passed=0, cases=0,
                             failing="", reason=res))
            continue
        for r in res:
            rows.append(dict(submission=name, exercise=r.exercise, score=r.score, points=r.points,
                             passed=sum(c.passed for c in r.cases), cases=len(r.cases),
                             failing="; ".join(c.name for c in r.failing), reason=r.reason))
    return rows


def write_csv(rows: list[dict], path: Path | str) -> Path:
    """Write `rows` to `path` atomically (a temporary file beside it, renamed into place)."""
    path = Path(path)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
