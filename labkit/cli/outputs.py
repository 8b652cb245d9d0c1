"""--json and --record: each path checked before a bench starts (a bad one costs a second, not a bench),
and written after it, atomically, never replacing a file without --force."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labkit.core.errors import LabkitError


def check_output_path(arg: str, path: str, *, replace: bool = True, markdown: bool = False) -> None:
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


def write_output(arg: str, path: str, write) -> None:
    """Run `write()` (an atomic write of `path`); an OSError becomes one line naming `arg`.

    FileExistsError (a path refused without --force) passes through for the caller to handle.
    """
    try:
        write()
    except FileExistsError:
        raise
    except OSError as exc:
        raise LabkitError(f"{arg}={path!r} could not be written: {exc.strerror or exc}") from None


def check_outputs(args: argparse.Namespace) -> None:
    for flag, value in (("--json", args.json), ("--record", args.record)):
        if value is not None and not value.strip():  # given, but empty: not "not given"
            raise LabkitError(f"{flag}={value!r} is not accepted; expected a file path")
    if args.json:
        check_output_path("--json", args.json, replace=args.force)
    if args.record:
        from labkit.records import update_benchmarks_md
        check_output_path("--record", args.record, markdown=True)
        # A file that is not a benchmarks file (a README) is refused unless --force; nothing is written yet.
        update_benchmarks_md(args.record, sections=[], force=args.force, arg="--record")


def write_json_report(args: argparse.Namespace, reports) -> bool:
    """Write --json without replacing a file unless --force; return False if it went elsewhere.

    The path was checked before the bench, but a file may appear there during an hour-long run:
    then the report is saved beside it under a new name (never replacing anything either) and
    one line says where, so neither that file nor the run's results are lost.
    """
    import datetime as dt

    from labkit.core.bench import write_json
    try:
        write_output("--json", args.json, lambda: write_json(reports, args.json, overwrite=args.force))
        return True
    except FileExistsError:
        pass
    p = Path(args.json)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(100):
        alt = str(p.with_name(f"{p.stem}.{stamp}{'-' + str(i) if i else ''}{p.suffix or '.json'}"))
        try:
            write_output("--json", alt, lambda: write_json(reports, alt, overwrite=False))
        except FileExistsError:
            continue
        print(f"labkit: error: --json={args.json!r} appeared during the run and was kept; the report was "
              f"saved to {alt!r} instead (pass --force to replace the file)", file=sys.stderr)
        return False
    raise LabkitError(f"--json={args.json!r} appeared during the run and was kept; no free name "
                      f"{p.stem}.{stamp}-N{p.suffix or '.json'} beside it for the report")
