"""The `labkit` command: doctor, lab, data, bench, reproduce, course.

Modules: :mod:`~labkit.cli.parsing` (arguments, help, one-line errors), :mod:`~labkit.cli.commands`
(what each command does), :mod:`~labkit.cli.outputs` (--json and --record paths),
:mod:`~labkit.cli.signals` (stop signals and broken pipes).
"""

from __future__ import annotations

import sys

from labkit.cli.commands import run_command
from labkit.cli.parsing import build_parser
from labkit.cli.signals import PipeSafe, StopSignals, quiet_teardown, stopped

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    saved = sys.stdout, sys.stderr
    if args.cmd in ("bench", "reproduce"):  # they write files: a closed pipe must not stop them
        sys.stdout, sys.stderr = PipeSafe(sys.stdout), PipeSafe(sys.stderr)
    try:
        if args.cmd not in ("bench", "reproduce", "data"):  # `lab` execs Jupyter: it keeps the usual handling
            return run_command(args)
        with StopSignals(tracker=args.cmd == "bench" or not getattr(args, "isolate", True), restore=argv is not None):
            from labkit.core.bench import STOP_SIGNALS, Interrupted
            try:
                rc = run_command(args)
                if STOP_SIGNALS:  # raised where Python drops exceptions (a finalizer): still stopped
                    raise Interrupted(STOP_SIGNALS[0])
                return rc
            except BaseException as exc:
                stop = STOP_SIGNALS[0] if STOP_SIGNALS else getattr(exc, "signum", None)
                if stop is None and not isinstance(exc, KeyboardInterrupt):
                    raise
                quiet_teardown()
                return stopped(stop)
    finally:
        sys.stdout, sys.stderr = saved
