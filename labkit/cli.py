"""The `labkit` command: doctor, lab, data, bench, reproduce."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labkit.core.errors import LabkitError
from labkit.core.profiles import PROFILES

EPILOG = """examples:
  labkit doctor                              check this machine
  labkit data list                           datasets the systems register
  labkit data make rmat --profile ci         build one dataset (atomic; never overwrites without --force)
  labkit bench spmm --profile small          side-by-side benchmark of one system
  labkit bench spmm --profile small --record write the tables into BENCHMARKS.md
  labkit reproduce --profile ci              every system's claims in one table
  labkit lab                                 start JupyterLab at the tour notebook
"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input on one line and exits with code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"labkit: error: {message}", file=sys.stderr)
        sys.exit(2)


def _system_choices() -> tuple[str, ...]:
    from labkit.catalog import NAMES
    return NAMES


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="labkit", description="Rebuild, run and profile five ML-systems designs.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    sub.add_parser("doctor", help="versions, cores, memory, disk, GPU, Chromium: one verdict each")

    lab = sub.add_parser("lab", help="start JupyterLab on 127.0.0.1 at notebooks/00_tour.ipynb")
    lab.add_argument("--port", type=int, default=8888, help="port to listen on (default 8888)")
    lab.add_argument("--no-browser", action="store_true", help="do not open a browser")

    data = sub.add_parser("data", help="list or build datasets")
    dsub = data.add_subparsers(dest="data_cmd", metavar="ACTION", parser_class=_Parser)
    dsub.required = True
    dsub.add_parser("list", help="registered datasets and which profiles are built")
    mk = dsub.add_parser("make", help="build a dataset (no-op if a valid copy exists)")
    mk.add_argument("name", help="dataset name (see `labkit data list`)")
    mk.add_argument("--profile", default="ci", choices=PROFILES, help="size (default ci)")
    mk.add_argument("--force", action="store_true", help="rebuild and swap in even if a copy exists")

    systems = ", ".join(_system_choices())
    b = sub.add_parser("bench", help="one system's side-by-side benchmark",
                       description=f"Run one system's contenders interleaved and print ratios. Systems: {systems}.")
    b.add_argument("system", help=f"one of {systems}")
    b.add_argument("--profile", default="ci", choices=PROFILES, help="size (default ci)")
    b.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    b.add_argument("--record", nargs="?", const="BENCHMARKS.md", metavar="MD",
                   help="write the tables into BENCHMARKS.md (or MD)")
    b.add_argument("--quiet", action="store_true", help="no progress lines")

    r = sub.add_parser("reproduce", help="every system's bench and one claims table")
    r.add_argument("--profile", default="ci", choices=PROFILES, help="size (default ci)")
    r.add_argument("--json", metavar="PATH", help="also write all reports as JSON")
    r.add_argument("--record", nargs="?", const="BENCHMARKS.md", metavar="MD",
                   help="write the claims table and every system's tables into BENCHMARKS.md")
    r.add_argument("--only", metavar="NAMES", help="comma-separated subset of systems")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.add_argument("--in-process", dest="isolate", action="store_false",
                   help="run every bench in this process (default: each in a fresh process, as "
                        "`labkit bench SYSTEM` would run it)")
    return p


def _bench(args: argparse.Namespace) -> int:
    from labkit import catalog
    from labkit.core.bench import update_benchmarks_md, write_json
    if args.system not in catalog.NAMES:
        raise LabkitError(f"system={args.system!r} is not accepted; expected one of {', '.join(catalog.NAMES)}")
    system = catalog.load(args.system)
    if system is None:
        raise LabkitError(f"system {args.system} ({catalog.entry(args.system).title}) is not built yet")
    report = system.run_bench(args.profile, progress=not args.quiet)
    print(report.to_markdown())
    if args.json:
        write_json(report, args.json)
    if args.record:
        update_benchmarks_md(args.record, f"{args.system}:{args.profile}", report.to_markdown())
        print(f"recorded in {args.record}", file=sys.stderr)
    return 0


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
        cmd = [sys.executable, "-m", "labkit.cli", "bench", name, "--profile", profile, "--json", str(out)]
        r = subprocess.run(cmd + (["--quiet"] if quiet else []), stdout=subprocess.DEVNULL)
        if r.returncode != 0 or not out.exists():
            raise LabkitError(f"labkit bench {name} --profile {profile} exited with status {r.returncode}")
        return BenchReport.from_json(json.loads(out.read_text()))


def _reproduce(args: argparse.Namespace) -> int:
    from labkit import catalog
    from labkit.core.bench import Claim, claims_markdown, update_benchmarks_md, write_json
    names = list(catalog.NAMES)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        for n in names:
            if n not in catalog.NAMES:
                raise LabkitError(f"--only={n!r} is not accepted; expected names from {', '.join(catalog.NAMES)}")
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
    passed = [c.passed for c in claims]
    print(f"\n{passed.count(True)} pass, {passed.count(False)} miss, {passed.count(None)} not measured")
    for f in failures:
        print(f"bench failed: {f}", file=sys.stderr)
    if args.json:
        write_json(reports, args.json)
    if args.record:
        update_benchmarks_md(args.record, f"claims:{args.profile}",
                             f"## Claims table (`labkit reproduce --profile {args.profile}`)\n\n{table}\n", top=True)
        for rep in reports:
            update_benchmarks_md(args.record, f"{rep.system}:{rep.profile}", rep.to_markdown())
    return 1 if failures else 0


def _data(args: argparse.Namespace) -> int:
    from labkit.core.datasets import dataset_dir, list_datasets, make_dataset
    from labkit.core.memory import fmt_bytes
    if args.data_cmd == "list":
        specs = list_datasets()
        if not specs:
            print("no datasets registered yet")
        for s in specs:
            built = [p for p in s.profiles if (dataset_dir(s.name, p) / "manifest.json").exists()]
            print(f"{s.name:<16} {s.description}")
            print(f"{'':<16} profiles: {', '.join(s.profiles)}; built: {', '.join(built) or 'none'}"
                  f" ({dataset_dir(s.name, 'ci').parent})")
        return 0
    ds = make_dataset(args.name, args.profile, force=args.force)
    print(f"{ds.name} ({ds.profile}): {fmt_bytes(ds.nbytes)} in {ds.dir}")
    return 0


def _lab(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parents[1]
    nb_dir = root / "notebooks"
    if not nb_dir.is_dir():
        raise LabkitError(f"no notebooks/ folder next to the labkit package ({root}); run from a clone")
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={args.port}",
           f"--ServerApp.root_dir={root}", "--ServerApp.default_url=/lab/tree/notebooks/00_tour.ipynb"]
    if args.no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    os.execv(sys.executable, cmd)
    return 0  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    except (LabkitError, ValueError, KeyError, FileExistsError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"labkit: error: {msg}", file=sys.stderr)
        return 2
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
