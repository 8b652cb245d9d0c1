"""The `labkit` command: doctor, lab, data, bench, reproduce."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from labkit.core.errors import LabkitError
from labkit.core.profiles import PROFILES

LAB_PORT = 8888  # `labkit lab` serves on the first free port from this one when --port is not given
LAB_URL = "/lab/tree/notebooks/00_tour.ipynb"

PROFILE_HELP = "size: ci (seconds, what the tests use), small (where the targets are measured), large (an afternoon); default ci"

EPILOG = """examples:
  labkit doctor                              check this machine
  labkit data list                           datasets the systems register
  labkit data make rmat --profile ci         build one dataset (atomic; never overwrites without --force)
  labkit bench spmm --profile small          side-by-side benchmark of one system
  labkit bench spmm --profile small --record write the tables into BENCHMARKS.md
  labkit reproduce --profile ci              every system's claims in one table
  labkit lab                                 start JupyterLab at the tour notebook

Each command has its own help: labkit COMMAND --help. Profiles default to ci.
exit status: 0 done; 1 doctor found a required item missing, or a bench itself failed;
2 bad input (one line on stderr naming the argument, the value and what is accepted);
130, 143, 129 stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP: bench, reproduce and data clean up
(worker processes, temporary folders) and say so on one line.
LABKIT_DEBUG=1 in the environment shows the traceback behind such a line.
"""


def _port(text: str) -> int:
    """argparse type for --port: an integer in [1, 65535]."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted; expected an integer in [1, 65535]")
    return v


def _output(arg: str, path: str, *, replace: bool = True, markdown: bool = False) -> None:
    """Check an output path before any work starts, so a bad one costs a second, not a bench."""
    p = Path(path)
    where = p.parent
    if p.is_dir():
        raise LabkitError(f"{arg}={path!r} is not accepted; it is a folder, expected a file path")
    if not where.is_dir():
        raise LabkitError(f"{arg}={path!r} is not accepted; its folder {str(where)!r} does not exist")
    from labkit.core.atomic import probe_writable
    try:
        probe_writable(where)
    except OSError as exc:
        raise LabkitError(f"{arg}={path!r} is not accepted; no file can be written in its folder {str(where)!r} "
                          f"({exc.strerror or exc})") from None
    if p.exists() and markdown:
        try:
            p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise LabkitError(f"{arg}={path!r} is not accepted; it exists and is not a readable UTF-8 "
                              f"text file ({type(exc).__name__})") from None
    elif p.exists() and not replace:
        raise LabkitError(f"{arg}={path!r} already exists; pass --force to replace it, or choose a new path")


def _write(arg: str, path: str, write) -> None:
    """Run `write()` (an atomic write of `path`); an OSError becomes one line naming `arg`.

    FileExistsError (a path refused without --force) passes through for the caller to handle.
    """
    try:
        write()
    except FileExistsError:
        raise
    except OSError as exc:
        raise LabkitError(f"{arg}={path!r} could not be written: {exc.strerror or exc}") from None


def _check_outputs(args: argparse.Namespace) -> None:
    for flag, value in (("--json", args.json), ("--record", args.record)):
        if value is not None and not value.strip():  # given, but empty: not "not given"
            raise LabkitError(f"{flag}={value!r} is not accepted; expected a file path")
    if args.json:
        _output("--json", args.json, replace=args.force)
    if args.record:
        from labkit.records import update_benchmarks_md
        _output("--record", args.record, markdown=True)
        # A file that is not a benchmarks file (a README) is refused unless --force; nothing is written yet.
        update_benchmarks_md(args.record, sections=[], force=args.force, arg="--record")


def _write_json(args: argparse.Namespace, reports) -> bool:
    """Write --json without replacing a file unless --force; return False if it went elsewhere.

    The path was checked before the bench, but a file may appear there during an hour-long run:
    then the report is saved beside it under a new name (never replacing anything either) and
    one line says where, so neither that file nor the run's results are lost.
    """
    import datetime as dt

    from labkit.core.bench import write_json
    try:
        _write("--json", args.json, lambda: write_json(reports, args.json, overwrite=args.force))
        return True
    except FileExistsError:
        pass
    p = Path(args.json)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(100):
        alt = str(p.with_name(f"{p.stem}.{stamp}{'-' + str(i) if i else ''}{p.suffix or '.json'}"))
        try:
            _write("--json", alt, lambda: write_json(reports, alt, overwrite=False))
        except FileExistsError:
            continue
        print(f"labkit: error: --json={args.json!r} appeared during the run and was kept; the report was "
              f"saved to {alt!r} instead (pass --force to replace the file)", file=sys.stderr)
        return False
    raise LabkitError(f"--json={args.json!r} appeared during the run and was kept; no free name "
                      f"{p.stem}.{stamp}-N{p.suffix or '.json'} beside it for the report")


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input on one line, with what is accepted, and exits with code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        required = "the following arguments are required: "
        if message.startswith(required):  # say what the missing argument could be, not only its name
            names = [n.strip() for n in message[len(required):].split(",")]
            for a in self._actions:
                if a.required and (a.dest in names or a.metavar in names):
                    accepted = getattr(a, "accepted", None)
                    accepted = accepted() if callable(accepted) else accepted or a.choices
                    if accepted:
                        message += f"; {a.metavar or a.dest} is one of {', '.join(accepted)}"
            message += f" (see `{self.prog} --help`)"
        elif message.startswith("argument ") and message.endswith(": expected one argument"):
            flag = message[len("argument "):-len(": expected one argument")]
            for a in self._actions:
                if flag in a.option_strings:  # say what the value should be
                    what = f"one of {', '.join(a.choices)}" if a.choices else (a.help or "")
                    message += f" ({a.metavar + ': ' if a.metavar else ''}{what})"
        print(f"labkit: error: {message}", file=sys.stderr)
        sys.exit(2)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """Parse; an unknown flag is reported with the options its own command accepts."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            target = self._command(ns)
            opts = [s for a in target._actions for s in a.option_strings if s.startswith("--")]
            self.error(f"unrecognized arguments: {' '.join(extras)}; `{target.prog}` accepts "
                       f"{', '.join(opts)} (see `{target.prog} --help`)")
        return ns

    def _command(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The (sub)command parser that `ns` was parsed by: `labkit data make` for `labkit data make ...`."""
        for a in self._actions:
            if isinstance(a, argparse._SubParsersAction):
                chosen = a.choices.get(getattr(ns, a.dest, None) or "")
                if isinstance(chosen, _Parser):
                    return chosen._command(ns)
        return self


def _system_choices() -> tuple[str, ...]:
    from labkit.catalog import NAMES
    return NAMES


def _dataset_choices() -> list[str]:
    from labkit.core.datasets import list_datasets
    return [s.name for s in list_datasets()]


def _report_options(p: argparse.ArgumentParser, what: str, record: str) -> None:
    """--profile, --json, --force and --record, shared by bench and reproduce (`what` goes to JSON, `record` says what MD gets)."""
    p.add_argument("--profile", default="ci", choices=PROFILES, help=PROFILE_HELP)
    p.add_argument("--json", metavar="PATH", help=f"also write {what} as JSON (an existing file only with --force)")
    p.add_argument("--force", action="store_true",
                   help="let --json replace an existing file, and --record write into a file that is not a "
                        "benchmarks file")
    p.add_argument("--record", nargs="?", const="BENCHMARKS.md", metavar="MD", help=f"write {record}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="labkit", description="Rebuild, run and profile five ML-systems designs.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    from labkit import __version__
    p.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    raw = argparse.RawDescriptionHelpFormatter

    def command(name: str, help: str, description: str, examples: str, parent=sub):
        import textwrap
        return parent.add_parser(name, help=help, description=textwrap.fill(description, 100), formatter_class=raw,
                                 epilog="examples:\n" + examples)

    command("doctor", "versions, cores, memory, disk, data folder, GPU, Chromium: one verdict each",
            "Check what this machine has for the labs: Python packages, CPU cores, memory, the data "
            "disk (writable, O_DIRECT), a GPU, Chromium for the browser test. One verdict per line; exit 0, "
            "or 1 when a required item fails.",
            "  labkit doctor\n")

    lab = command("lab", "start JupyterLab on 127.0.0.1 at notebooks/00_tour.ipynb",
                  "Start JupyterLab from this clone, bound to 127.0.0.1 (never all interfaces), "
                  "opening the tour notebook. Stop it with Ctrl-C.",
                  "  labkit lab\n  labkit lab --port 8890 --no-browser\n")
    lab.add_argument("--port", type=_port, default=None,
                     help=f"port to listen on, 1-65535; a busy one is refused (default: the first free one "
                          f"from {LAB_PORT})")
    lab.add_argument("--no-browser", action="store_true", help="do not open a browser")

    data = command("data", "list or build datasets",
                   "List the datasets the systems register, or build one. Datasets are generated from "
                   "seeds (nothing is downloaded) into $LABKIT_DATA, else the clone's data/ folder, "
                   "else ~/.cache/labkit/data. Exit 0, or 2 with one line on stderr for a bad name or "
                   "profile, a damaged copy, or a folder where nothing can be written.",
                   "  labkit data list\n  labkit data make rmat --profile ci\n")
    dsub = data.add_subparsers(dest="data_cmd", metavar="ACTION", parser_class=_Parser)
    dsub.required = True
    lst = command("list", "registered datasets and which profiles are built",
                  "Print every registered dataset, its profiles, which of them are built or damaged, and "
                  "the folder they live in. Without --verify only each file's size is checked, so a copy "
                  "that passes reads 'built (not verified)'; with --verify every file's sha256 is read "
                  "and compared with its manifest, and a copy that passes reads 'built (verified)'. Exit 0.",
                  "  labkit data list\n  labkit data list --verify\n", parent=dsub)
    lst.add_argument("--verify", action="store_true",
                     help="read every built file and check its sha256 against the manifest (reads every byte)")
    mk = command("make", "build a dataset (no-op if a valid copy exists)",
                 "Build one dataset at one profile: written into a temporary folder and renamed into "
                 "place, so an interrupted build leaves nothing that loads. A valid copy is kept "
                 "(no-op, after its checksums are verified); a damaged one is refused unless --force, which "
                 "builds anew and swaps it in. Stages show on stderr; the dataset's folder is printed on "
                 "stdout. Exit 0, or 2 with one line on stderr.",
                 "  labkit data make rmat --profile ci\n  labkit data make caliex --profile small --force\n",
                 parent=dsub)
    mk.add_argument("name", help="dataset name (see `labkit data list`)").accepted = _dataset_choices
    mk.add_argument("--profile", default="ci", choices=PROFILES, help=PROFILE_HELP)
    mk.add_argument("--force", action="store_true", help="rebuild and swap in even if a copy exists")

    systems = ", ".join(_system_choices())
    b = command("bench", "one system's side-by-side benchmark",
                f"Run one system's contenders interleaved in this process and print ratios and the "
                f"claims they measure. Systems: {systems}. The report (claims, results, side-by-side "
                f"tables) goes to stdout as Markdown, progress lines (and a bar on any comparison that runs "
                f"past a few seconds) to stderr. Exit 0 when the bench ran "
                f"(a missed target is a result, not an error); 1 when the bench itself failed "
                f"(traceback); 2 on bad input, when the system states that the profile needs more memory "
                f"than is available (refused before it starts), or when --json had to be saved under "
                f"another name. A "
                f"ValueError or KeyError raised inside a bench is also one line, exit 2, naming the "
                f"file:line that raised it (LABKIT_DEBUG=1 shows the traceback).",
                "  labkit bench spmm --profile small\n"
                "  labkit bench disk --profile small --json disk.json --record\n")
    b.add_argument("system", help=f"one of {systems}").accepted = _system_choices()
    _report_options(b, "the report", "this run's JSON record into records/ beside MD (default ./BENCHMARKS.md, "
                    "in the current folder; the system's previous record at this profile is replaced) and "
                    "render MD from every record there")
    b.add_argument("--quiet", action="store_true", help="no progress lines or bars")

    r = command("reproduce", "every system's bench and one claims table",
                f"Run every system's bench (each in a fresh process, one after another) and print one "
                f"claims table: measured value with its 95% interval, target, and a verdict (pass, miss, or "
                f"inconclusive when the interval straddles the target); modelled claims (outputs of a "
                f"simulator) in their own block, outside the pass count. Systems: {systems}. The table goes "
                f"to stdout, each bench's progress lines to stderr. Exit 0 when every bench ran (misses "
                f"included); 1 when a bench failed (its claims read 'bench failed', the others are "
                f"still reported); 2 on bad input, or when --json had to be saved under another name.",
                "  labkit reproduce --profile ci\n"
                "  labkit reproduce --profile small --record\n"
                "  labkit reproduce --profile small --only graph,disk --json claims.json\n")
    _report_options(r, "all reports", "each system's JSON record into records/ beside MD (default "
                    "./BENCHMARKS.md, in the current folder) and render MD from every record there: the claims "
                    "table and each system's tables (with --only, the other systems' records stay as they were)")
    r.add_argument("--only", metavar="NAMES", help=f"comma-separated subset of systems ({systems})")
    r.add_argument("--quiet", action="store_true", help="no progress lines or bars")
    r.add_argument("--in-process", dest="isolate", action="store_false",
                   help="run every bench in this process (default: each in a fresh process, as "
                        "`labkit bench SYSTEM` would run it)")
    return p


def _bench(args: argparse.Namespace) -> int:
    from labkit import catalog
    if args.system not in catalog.NAMES:
        raise LabkitError(f"system={args.system!r} is not accepted; expected one of {', '.join(catalog.NAMES)}")
    system = catalog.load(args.system)
    if system is None:
        raise LabkitError(f"system {args.system} ({catalog.entry(args.system).title}) is not built yet")
    _check_outputs(args)
    try:
        report = system.run_bench(args.profile, progress=not args.quiet)
    except (ValueError, KeyError) as exc:
        if isinstance(exc, LabkitError) or os.environ.get("LABKIT_DEBUG"):
            raise
        # Input the bench read (a dataset, $LABKIT_DATA) or a fault in it: one line still, but say
        # where it was raised, so a bug is not mistaken for bad input and can be found.
        raise LabkitError(f"{_message(exc)} (raised at {_origin(exc)}; LABKIT_DEBUG=1 shows the traceback)") from exc
    print(report.to_markdown())
    json_ok = _write_json(args, report) if args.json else True
    if args.record:
        from labkit.records import record
        paths: list = []
        _write("--record", args.record,
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
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
                                 env={**os.environ, _CHILD_ENV: "1"})
        try:
            rc = child.wait()
        except BaseException as exc:  # Interrupted (SIGINT, SIGTERM, SIGHUP) or anything else
            _stop_child(child, getattr(exc, "signum", signal.SIGINT))
            raise
        if rc != 0 or not out.exists():
            raise LabkitError(f"labkit bench {name} --profile {profile} exited with status {rc}")
        return BenchReport.from_json(json.loads(out.read_text()))


def _stop_child(child, signum: int = signal.SIGINT, grace_s: float = 60.0) -> None:
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
    _check_outputs(args)
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
    json_ok = _write_json(args, reports) if args.json else True
    if args.record and reports:
        # Records are written one by one (each atomically), then the file is rendered once from all
        # of them under its lock: with --only, the other systems' records are read as they are.
        _write("--record", args.record, lambda: record(reports, args.record, force=args.force, arg="--record"))
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
    root = Path(__file__).resolve().parents[1]
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


class _PipeSafe:
    """A text stream that outlives its reader: after a broken pipe, writes go nowhere.

    A bench asked for ``--json`` or ``--record`` must still write them when whoever reads its
    progress goes away (``labkit bench spmm --json r.json 2>&1 | head``).
    """

    def __init__(self, stream) -> None:
        self._s = stream
        self.broken = False

    def _break(self) -> None:
        self.broken = True
        try:  # the stream's own buffer flushes into /dev/null at exit, not into the closed pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._s.fileno())
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._s.write(text)
            except BrokenPipeError:
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._s.flush()
            except BrokenPipeError:
                self._break()

    def __getattr__(self, name: str):
        return getattr(self._s, name)


#: Set in the environment of the child benches `labkit reproduce` runs.
_CHILD_ENV = "LABKIT_REPRODUCE_CHILD"

#: Exit status of a command stopped by each signal: 128 + its number, as a shell reports it.
_STOP_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


#: Code that an exception must not interrupt half-way: multiprocessing's finalizers and its
#: resource tracker's bookkeeping (each pairs an unlink with an unregister).
_CLEANUP_FILES = (os.sep + os.path.join("multiprocessing", "util.py"),
                  os.sep + os.path.join("multiprocessing", "synchronize.py"),
                  os.sep + os.path.join("multiprocessing", "resource_tracker.py"))


def _in_cleanup(frame) -> bool:
    """Return True if `frame` or a caller runs multiprocessing's clean-up code."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(_CLEANUP_FILES):
            return True
        frame = frame.f_back
    return False


class _StopSignals:
    """Turn SIGINT, SIGTERM and SIGHUP into `Interrupted` in the main thread, for one command.

    SIGINT is blocked in the main thread before anything else starts, so every thread and child
    process started afterwards (Dask workers, the multiprocessing resource tracker, a child
    bench) inherits it blocked: a Ctrl-C at the terminal, sent to the whole process group, then
    reaches none of them mid-way; this process alone gets it (a relay thread waits for it and
    interrupts the main thread, waking it from any wait with a second, private signal), and
    stops its workers through their own clean-up path. SIGTERM and SIGHUP are not sent to a
    whole group by a terminal's Ctrl-C; they are handled in the main thread as usual.
    Everything is put back on exit, so an in-process caller (a test) keeps its own handling.
    """

    _WAKE = signal.SIGUSR2
    _active = 0  # commands in progress with these handlers (see _forked)
    _hooked = False

    def __init__(self, tracker: bool = False, restore: bool = True) -> None:
        self.tracker = tracker  # start multiprocessing's resource tracker first (see __enter__)
        # False for the process's own command line: the stop signals then stay blocked to the end,
        # so a second Ctrl-C during the exit (Dask's exit hooks) cannot print a traceback.
        self.restore = restore

    def __enter__(self) -> "_StopSignals":
        import threading
        self.active = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
        if not self.active:
            return self
        if self.tracker:
            # multiprocessing starts its resource tracker on first use and then UNBLOCKS SIGINT in the
            # thread that started it (Dask's process-starting thread): start it now, from here.
            from multiprocessing import resource_tracker
            resource_tracker.ensure_running()
        # Before any import below: a thread they start (numpy's BLAS pool) would not inherit it.
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        from labkit.core.bench import STOP_SIGNALS
        STOP_SIGNALS.clear()
        self._closing = False
        self._stops_seen = 0  # stop signals the wake-up fd has reported
        names = ("SIGINT", "SIGTERM", "SIGHUP")
        self.signals = [getattr(signal, n) for n in names if hasattr(signal, n)]
        self._old = {s: signal.getsignal(s) for s in [*self.signals, self._WAKE]}
        for sig in self.signals:
            signal.signal(sig, self._raise)
        signal.signal(self._WAKE, lambda *_: None)  # only wakes the main thread from a blocking call
        self._main = threading.main_thread().ident
        self._relay = threading.Thread(target=self._relay_sigint, name="labkit-sigint-relay", daemon=True)
        self._relay.start()
        # A thread that was running before (an in-process caller's) may still take a signal: Python
        # then only flags it for the main thread, which a blocking wait would not notice. The
        # wake-up fd reports every signal Python's handler sees, whichever thread ran it.
        import socket
        self._wr, self._rd = socket.socketpair()
        self._wr.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wr.fileno(), warn_on_full_buffer=False)
        self._waker = threading.Thread(target=self._wake_on_stop, name="labkit-signal-waker", daemon=True)
        self._waker.start()
        if not _StopSignals._hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_StopSignals._forked)
            _StopSignals._hooked = True
        _StopSignals._active += 1
        return self

    @staticmethod
    def _forked() -> None:
        """In a child forked without exec (a worker pool): the usual handling, and no writes to our wake-up fd."""
        if not _StopSignals._active:
            return
        _StopSignals._active = 0
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)

    @staticmethod
    def _raise(signum, frame) -> None:
        from labkit.core.bench import STOP_SIGNALS, Interrupted
        if _in_cleanup(frame):
            # Raised here, the exception would cut a clean-up in two (a semaphore unlinked but not
            # unregistered: the resource tracker then reports it leaked): try again in a moment.
            import _thread
            import threading
            threading.Timer(0.02, _thread.interrupt_main, (signum,)).start()
            return
        if not STOP_SIGNALS:
            _quiet_teardown()
        STOP_SIGNALS.append(signum)
        raise Interrupted(signum)

    def _relay_sigint(self) -> None:
        import _thread
        while True:
            signal.sigwait({signal.SIGINT})
            if self._closing:
                return
            from labkit.core.bench import STOP_SIGNALS
            seen = len(STOP_SIGNALS)
            _thread.interrupt_main(signal.SIGINT)  # runs _raise in the main thread ...
            self._poke(seen + 1)  # ... now, not after its current wait

    def _poke(self, target: int) -> None:
        """Wake the main thread from a blocking call until its handler has run `target` times in all.

        One wake-up can land just before the main thread enters its wait, which then sleeps on
        with the signal flagged but unhandled: so it is repeated until the handler has run.
        """
        import time
        from labkit.core.bench import STOP_SIGNALS
        end = time.monotonic() + 60
        while len(STOP_SIGNALS) < target and not self._closing and time.monotonic() < end:
            signal.pthread_kill(self._main, self._WAKE)
            time.sleep(0.02)

    def _wake_on_stop(self) -> None:
        stops = set(self.signals)
        while True:
            try:
                got = self._rd.recv(64)
            except OSError:
                return
            if not got or self._closing:
                return
            n = sum(b in stops for b in got)  # not our own wake-up signal, which reports here too
            if n:
                self._stops_seen += n
                self._poke(self._stops_seen)

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        _StopSignals._active = max(0, _StopSignals._active - 1)
        from labkit.core.bench import STOP_SIGNALS
        # Quiet from here: a second signal must not turn the one-line exit into a traceback.
        signal.pthread_sigmask(signal.SIG_BLOCK, set(self.signals))
        self._closing = True
        signal.pthread_kill(self._relay.ident, signal.SIGINT)  # ends the relay's sigwait
        self._relay.join(5)
        signal.set_wakeup_fd(self._old_fd)
        self._wr.close()  # ends the waker's recv
        self._waker.join(5)
        self._rd.close()
        if not self.restore:
            return
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        STOP_SIGNALS.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    saved = sys.stdout, sys.stderr
    if args.cmd in ("bench", "reproduce"):  # they write files: a closed pipe must not stop them
        sys.stdout, sys.stderr = _PipeSafe(sys.stdout), _PipeSafe(sys.stderr)
    try:
        if args.cmd not in ("bench", "reproduce", "data"):  # `lab` execs Jupyter: it keeps the usual handling
            return _main(args)
        with _StopSignals(tracker=args.cmd == "bench" or not getattr(args, "isolate", True), restore=argv is not None):
            from labkit.core.bench import STOP_SIGNALS, Interrupted
            try:
                rc = _main(args)
                if STOP_SIGNALS:  # raised where Python drops exceptions (a finalizer): still stopped
                    raise Interrupted(STOP_SIGNALS[0])
                return rc
            except BaseException as exc:
                stop = STOP_SIGNALS[0] if STOP_SIGNALS else getattr(exc, "signum", None)
                if stop is None and not isinstance(exc, KeyboardInterrupt):
                    raise
                _quiet_teardown()
                return _stopped(stop)
    finally:
        sys.stdout, sys.stderr = saved


def _quiet_teardown() -> None:
    """Silence what tearing down half-started work prints once the user has asked to stop.

    A Dask cluster interrupted while its workers start cannot close cleanly: Dask logs the
    failed start, its exit hook's assertion and never-retrieved task errors, dozens of lines
    about a stop that was asked for. The processes still end (this process closes its clusters
    or, failing that, its workers exit with it); only the messages go, for the rest of the process.
    """
    import logging
    import warnings
    warnings.simplefilter("ignore")  # "coroutine ... was never awaited": a wait the interrupt cut short
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    sys.unraisablehook = lambda unraisable: None  # "Exception ignored in ..." from finalizers and exit hooks


def _stopped(signum: int | None) -> int:
    """Say on one line that the command was stopped by `signum` (None: a KeyboardInterrupt); return its exit status."""
    import signal
    name = signal.Signals(signum).name if signum else "SIGINT"
    # Whatever a clean-up interrupted half-way raised is not the story: the signal is.
    if not os.environ.get(_CHILD_ENV):  # a child bench of reproduce: the parent's line says it
        with contextlib.suppress(Exception):
            print(f"labkit: interrupted ({name}); stopped and cleaned up", file=sys.stderr, flush=True)
    return _STOP_EXIT.get(name, 128 + int(signum or 2))


def _main(args: argparse.Namespace) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
