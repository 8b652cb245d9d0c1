"""What each `labkit` command does: doctor, lab, data, bench, reproduce (each bench in a fresh process), course."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from labkit.cli.outputs import check_outputs, write_json_report, write_output
from labkit.cli.signals import CHILD_ENV
from labkit.core.errors import LabkitError

LAB_PORT = 8888  # `labkit lab` serves on the first free port from this one when --port is not given


LAB_URL = "/lab/tree/notebooks/00_tour.ipynb"


def _bench(args: argparse.Namespace) -> int:
    from labkit import catalog
    if args.system not in catalog.NAMES:
        raise LabkitError(f"system={args.system!r} is not accepted; expected one of {', '.join(catalog.NAMES)}")
    system = catalog.load(args.system)
    if system is None:
        raise LabkitError(f"system {args.system} ({catalog.entry(args.system).title}) is not built yet")
    check_outputs(args)
    try:
        report = system.run_bench(args.profile, progress=not args.quiet)
    except (ValueError, KeyError) as exc:
        if isinstance(exc, LabkitError) or os.environ.get("LABKIT_DEBUG"):
            raise
        # Input the bench read (a dataset, $LABKIT_DATA) or a fault in it: one line still, but say
        # where it was raised, so a bug is not mistaken for bad input and can be found.
        raise LabkitError(f"{_message(exc)} (raised at {_origin(exc)}; LABKIT_DEBUG=1 shows the traceback)") from exc
    print(report.to_markdown())
    json_ok = write_json_report(args, report) if args.json else True
    if args.record:
        from labkit.records import record
        paths: list = []
        write_output("--record", args.record,
               lambda: paths.extend(record(report, args.record, force=args.force, arg="--record")))
        print(f"recorded in {paths[0] if paths else '?'}; {args.record} rendered from the records", file=sys.stderr)
    return 0 if json_ok else 2


def _message(exc: BaseException) -> object:
    return exc.args[0] if isinstance(exc, KeyError) and exc.args else exc


def _origin(exc: BaseException) -> str:
    """Return 'file:line' of the innermost frame that raised `exc`, the path relative to the package's folder."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "an unknown place"
    name = tb.tb_frame.f_code.co_filename
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.abspath(name).startswith(root + os.sep):
        name = os.path.relpath(name, root)
    return f"{name}:{tb.tb_lineno}"


def _bench_in_child(name: str, profile: str, quiet: bool):
    """Run ``labkit bench NAME`` in a fresh Python process and return its report.

    Each system's bench then starts from the same clean process a user's ``labkit bench``
    would: no heap, threads, thread-pool settings or forked-worker state left by the systems
    benched before it.
    """
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from labkit.core.bench import BenchReport
    with tempfile.TemporaryDirectory(prefix="labkit-reproduce-") as td:
        out = Path(td) / "report.json"
        cmd = [sys.executable, "-m", "labkit.cli", "bench", name, "--profile", profile, "--json", str(out), "--force"]
        # Its own process group: a signal for this process is forwarded to the child alone, which
        # closes its own workers; should it not stop, the whole group is killed, workers included.
        child = subprocess.Popen(cmd + (["--quiet"] if quiet else []), stdout=subprocess.DEVNULL, process_group=0,
                                 env={**os.environ, CHILD_ENV: "1"})
        try:
            rc = child.wait()
        except BaseException as exc:  # Interrupted (SIGINT, SIGTERM, SIGHUP) or anything else
            stop_child(child, getattr(exc, "signum", signal.SIGINT))
            raise
        if rc != 0 or not out.exists():
            raise LabkitError(f"labkit bench {name} --profile {profile} exited with status {rc}")
        return BenchReport.from_json(json.loads(out.read_text()))


def stop_child(child, signum: int = signal.SIGINT, grace_s: float = 60.0) -> None:
    """Stop `child` (the leader of its own process group) with `signum`, letting it clean up first.

    The child gets `signum` and up to `grace_s` seconds to run its own clean-up (worker processes,
    temporary files) and exit; then, or at once on a second interrupt here, its whole process
    group is killed, so nothing it started runs on. Returns once the child has exited.
    """
    import subprocess
    import time
    linger = 0.0
    try:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
        child.wait(timeout=grace_s)
        linger = min(5.0, grace_s)  # it stopped: what it started gets a moment to see it gone and exit
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    finally:
        end = time.monotonic() + linger
        with contextlib.suppress(ProcessLookupError, PermissionError):
            while time.monotonic() < end:
                os.killpg(child.pid, 0)  # ProcessLookupError once nothing is left in the group
                time.sleep(0.05)
            os.killpg(child.pid, signal.SIGKILL)
        if child.returncode is None:
            child.wait()


def _reproduce(args: argparse.Namespace) -> int:
    from labkit import catalog
    from labkit.core.bench import Claim, claims_markdown, claims_summary
    from labkit.records import record
    names = list(catalog.NAMES)
    if args.only is not None:
        names = list(dict.fromkeys(n.strip() for n in args.only.split(",") if n.strip()))
        if not names:
            raise LabkitError(f"--only={args.only!r} is not accepted; expected comma-separated names from "
                              f"{', '.join(catalog.NAMES)}")
        for n in names:
            if n not in catalog.NAMES:
                raise LabkitError(f"--only={n!r} is not accepted; expected names from {', '.join(catalog.NAMES)}")
    check_outputs(args)
    reports, claims, owner, failures = [], [], {}, []
    for n in names:
        e = catalog.entry(n)
        system = catalog.load(n)
        if system is None:
            c = Claim(f"{n}.*", f"{e.title}: not built yet", "-", float("nan"), "", note="not built yet")
            claims.append(c)
            owner[c.id] = e.title
            continue
        try:
            rep = (_bench_in_child(n, args.profile, args.quiet) if args.isolate
                   else system.run_bench(args.profile, progress=not args.quiet))
        except Exception as exc:  # one broken system must not hide the others' claims
            failures.append(f"{n}: {type(exc).__name__}: {exc}")
            for c in system.claims:
                claims.append(Claim(c.id, c.claim, c.paper, c.target, c.unit, c.op, None,
                                    note=f"bench failed: {type(exc).__name__}"))
                owner[c.id] = e.title
            continue
        reports.append(rep)
        for c in rep.claims:
            claims.append(c)
            owner[c.id] = e.title
    table = claims_markdown(claims, owner)
    print(f"## Claims table (profile {args.profile})\n")
    print(table)
    print(f"\n{claims_summary(claims)}")
    for f in failures:
        print(f"bench failed: {f}", file=sys.stderr)
    json_ok = write_json_report(args, reports) if args.json else True
    if args.record and reports:
        # Records are written one by one (each atomically), then the file is rendered once from all
        # of them under its lock: with --only, the other systems' records are read as they are.
        write_output("--record", args.record, lambda: record(reports, args.record, force=args.force, arg="--record"))
        print(f"recorded {len(reports)} system(s); {args.record} rendered from the records", file=sys.stderr)
    return 2 if not json_ok else 1 if failures else 0


def _data(args: argparse.Namespace) -> int:
    from labkit.core.datasets import DatasetError, dataset_dir, list_datasets, make_dataset, verify
    from labkit.core.units import fmt_bytes
    if args.data_cmd == "list":
        specs = list_datasets()
        if not specs:
            print("no datasets registered yet")
        for s in specs:
            built, damaged = [], []
            for p in s.profiles:
                d = dataset_dir(s.name, p)
                if not d.exists():
                    continue
                try:  # sizes by default: a full checksum of every file can read gigabytes
                    verify(d, s.name, p, full=args.verify, version=s.version)
                    built.append(p)
                except DatasetError:
                    damaged.append(p)
            # Sizes alone miss a flipped byte: without --verify a copy is never called plainly "built".
            state = "built (verified)" if args.verify else "built (not verified)"
            print(f"{s.name:<16} {s.description}")
            print(f"{'':<16} profiles: {', '.join(s.profiles)}; {state}: {', '.join(built) or 'none'}"
                  + (f"; damaged (labkit data make {s.name} --profile P --force): {', '.join(damaged)}"
                     if damaged else "") + f" ({dataset_dir(s.name, 'ci').parent})")
        return 0
    kept = not args.force and dataset_dir(args.name, args.profile).is_dir()  # verified and kept, not rebuilt
    ds = make_dataset(args.name, args.profile, force=args.force, progress=True)  # stages on stderr
    print(f"{ds.name} ({ds.profile}): {fmt_bytes(ds.nbytes)} in {ds.dir}"
          + (" (already built and valid; kept)" if kept else ""))
    return 0


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Return whether `port` on `host` can be listened on now (as Jupyter's server would bind it)."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the server sets it: a port left in TIME_WAIT by a closed server is free, not busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError:
            return False
    return True


def _lab_port(port: int | None, retries: int = 50) -> int:
    """Return the port `labkit lab` serves on: `port` if given and free, else the first free one from LAB_PORT.

    A given port that is busy is refused (Jupyter would move to the next one without saying so).
    """
    if port is not None:
        if not _port_free(port):
            raise LabkitError(f"--port={port} is not accepted; 127.0.0.1:{port} is already in use by another "
                              f"program: choose a free port, or leave out --port to use the first free one "
                              f"from {LAB_PORT}")
        return port
    for p in range(LAB_PORT, min(65535, LAB_PORT + retries) + 1):
        if _port_free(p):
            return p
    raise LabkitError(f"no free port from {LAB_PORT} to {LAB_PORT + retries} on 127.0.0.1; pass --port a free one")


def _lab(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parents[2]
    nb_dir = root / "notebooks"
    if not nb_dir.is_dir():
        raise LabkitError(f"no notebooks/ folder next to the labkit package ({root}); run from a clone")
    port = _lab_port(args.port)
    # port_retries=0: should the port be taken between the check and the server's bind, the server
    # stops rather than serving on another port than the one printed here.
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={root}", f"--ServerApp.default_url={LAB_URL}"]
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    print(f"labkit: serving JupyterLab at http://127.0.0.1:{port}{LAB_URL} (the token is in the server's log below)",
          file=sys.stderr, flush=True)
    os.execv(sys.executable, cmd)
    return 0  # pragma: no cover


def _course(args: argparse.Namespace) -> int:
    from labkit.course import grade, notebooks
    if args.course_cmd == "list":
        exs = notebooks.load_exercises()
        if not exs:
            print("no exercises registered yet")
        for system in notebooks.systems():
            mine = [e for e in exs if e.system == system]
            print(f"{system} ({notebooks.notebook_name(system)}): {len(mine)} exercises, "
                  f"{sum(e.minutes for e in mine)} minutes")
            for e in mine:
                print(f"  {e.id:<32} {e.minutes:>3} min  {e.points} pt  {e.title}")
        return 0
    if args.course_cmd == "build":
        if args.sources:
            paths = notebooks.build_sources()
            print(f"rendered {len(paths)} source notebooks into {notebooks.SOURCES}")
        else:
            paths = notebooks.build_release(args.out, force=args.force)
            print(f"released {len(paths)} student notebooks into {Path(args.out)}")
        for p in paths:
            print(f"  {p.name}")
        return 0
    try:
        return _course_grade(args, grade)
    except KeyboardInterrupt:  # the graded processes are already killed
        print("labkit: stopped (Ctrl-C); no grades written", file=sys.stderr)
        return 130


def _course_grade(args: argparse.Namespace, grade) -> int:
    if args.course_cmd == "check":
        results = grade.grade_notebook(args.notebook, timeout=args.timeout, jobs=args.jobs)
        print(grade.score_table(results))
        return 0
    folder = Path(args.folder)
    if not folder.is_dir():
        raise LabkitError(f"folder={args.folder!r} is not accepted; expected a folder of submitted notebooks")
    out = Path(args.csv or "grades.csv")
    if out.exists() and not args.force:
        raise LabkitError(f"--csv={str(out)!r} is not accepted; the file exists (pass --force to replace it)")
    if out.is_dir() or not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise LabkitError(f"--csv={str(out)!r} is not accepted; expected a file in an existing folder")
    # every notebook below FOLDER, but not Jupyter's checkpoints or other hidden folders
    paths = sorted(p for p in folder.rglob("*.ipynb") if not any(x.startswith(".") for x in p.relative_to(folder).parts))
    if not paths:
        raise LabkitError(f"folder={args.folder!r} is not accepted; it holds no .ipynb notebook")
    graded = grade.grade_notebooks(paths, timeout=args.timeout, jobs=args.jobs)
    for path, res in graded:
        print(f"{path.relative_to(folder)}:")
        print("  refused: " + res if isinstance(res, str) else "\n".join("  " + ln for ln in grade.score_table(res).splitlines()))
    rows = grade.csv_rows(graded, folder)
    grade.write_csv(rows, out)
    print(f"{len(paths)} notebooks, {len(rows)} rows in {out}")
    return 0


def run_command(args: argparse.Namespace) -> int:
    try:
        if args.cmd == "doctor":
            from labkit.doctor import run_doctor
            return run_doctor()
        if args.cmd == "lab":
            return _lab(args)
        if args.cmd == "data":
            return _data(args)
        if args.cmd == "bench":
            return _bench(args)
        if args.cmd == "reproduce":
            return _reproduce(args)
        if args.cmd == "course":
            return _course(args)
    except (LabkitError, ValueError, KeyError) as exc:
        if os.environ.get("LABKIT_DEBUG"):
            raise
        print(f"labkit: error: {_message(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`labkit data list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if args.cmd != "data":  # inside a bench an OSError is a fault to debug: keep its traceback
            raise
        where = f" ({exc.filename})" if exc.filename else ""  # a dataset path or LABKIT_DATA refused
        print(f"labkit: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    return 0  # pragma: no cover
