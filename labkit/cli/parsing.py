"""The `labkit` command line: every command's arguments, help and examples, and one-line errors."""

from __future__ import annotations

import argparse
import sys

from labkit.cli.commands import LAB_PORT
from labkit.core.profiles import PROFILES

PROFILE_HELP = "size: ci (seconds, what the tests use), small (where the targets are measured), large (an afternoon); default ci"


EPILOG = """examples:
  labkit doctor                              check this machine
  labkit data list                           datasets the systems register
  labkit data make rmat --profile ci         build one dataset (atomic; never overwrites without --force)
  labkit bench spmm --profile small          side-by-side benchmark of one system
  labkit bench spmm --profile small --record write the tables into BENCHMARKS.md
  labkit reproduce --profile ci              every system's claims in one table
  labkit lab                                 start JupyterLab at the tour notebook
  labkit course build --out release          student exercise notebooks (solutions stripped)
  labkit course grade submissions --csv grades.csv   grade a class's notebooks

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


class Parser(argparse.ArgumentParser):
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
                if isinstance(chosen, Parser):
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
    p = Parser(prog="labkit", description="Rebuild, run and profile five ML-systems designs.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    from labkit import __version__
    p.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
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
    dsub = data.add_subparsers(dest="data_cmd", metavar="ACTION", parser_class=Parser)
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
    _course(command)
    return p


def _seconds(text: str) -> float:
    """argparse type for --timeout: seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted; expected seconds > 0")
    return v


def _jobs(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted; expected an integer >= 1")
    return v


def _course(command) -> None:
    c = command("course", "exercise notebooks: build the student release, check or grade submissions",
                "Graded exercises for every lab. `build` writes the student notebooks (nbgrader's "
                "ClearSolutions over the source notebooks in notebooks/course/); `check` grades one "
                "submission and prints a score table; `grade` grades every notebook in a folder and "
                "writes a CSV; `list` shows the exercises. Each exercise cell runs alone in a fresh "
                "process with a time limit; a cell that raises, loops, is missing or imports the "
                "reference scores 0 with a reason. Exit 0, or 2 with one line on stderr.",
                "  labkit course list\n  labkit course build --out release\n"
                "  labkit course check release/01_spmm_exercises.ipynb\n"
                "  labkit course grade submissions --csv grades.csv\n")
    csub = c.add_subparsers(dest="course_cmd", metavar="ACTION", parser_class=Parser)
    csub.required = True
    command("list", "every exercise: id, title, minutes, points",
            "Print every registered exercise by system: its id, title, expected minutes and points. Exit 0.",
            "  labkit course list\n", parent=csub)
    b = command("build", "write the student notebooks into a folder (atomic)",
                "Release the student notebooks (solutions replaced by `raise NotImplementedError()`, outputs "
                "cleared) into a folder, written beside it and renamed into place; an existing non-empty "
                "folder is refused unless --force. With --sources, re-render the source notebooks "
                "(solutions in place) in notebooks/course/ from the exercise registry instead.",
                "  labkit course build --out release\n  labkit course build --out release --force\n"
                "  labkit course build --sources\n", parent=csub)
    b.add_argument("--out", default="release", metavar="DIR", help="folder for the student notebooks "
                   "(default ./release)")
    b.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    b.add_argument("--sources", action="store_true", help="re-render notebooks/course/*.ipynb (for instructors "
                   "after changing an exercise)")

    def grading(p) -> None:
        p.add_argument("--timeout", type=_seconds, default=30.0, metavar="S",
                       help="time limit per exercise in seconds (default 30)")
        p.add_argument("--jobs", type=_jobs, default=2, metavar="N",
                       help="exercises graded at once, each in its own process (default 2)")

    ch = command("check", "grade one submission and print a score table",
                 "Grade one exercise notebook as the instructor will: each exercise cell in a fresh process "
                 "with a time limit. Prints exercise, score and the failing cases (or why it scored 0). "
                 "A notebook that is not a release of these exercises is refused (exit 2).",
                 "  labkit course check release/01_spmm_exercises.ipynb\n", parent=csub)
    ch.add_argument("notebook", help="an exercise notebook released by `labkit course build`")
    grading(ch)
    g = command("grade", "grade every notebook in a folder and write a CSV",
                "Grade every *.ipynb in FOLDER (subfolders too: one per student is fine): one CSV row per "
                "submission and exercise (score, points, cases passed, failing cases, reason). A notebook "
                "that is not ours gets one row with the reason; the others are still graded. The CSV is "
                "written atomically; an existing file is replaced only with --force. The table per "
                "submission goes to stdout.",
                "  labkit course grade submissions --csv grades.csv\n"
                "  labkit course grade submissions --timeout 60 --jobs 1\n", parent=csub)
    g.add_argument("folder", help="folder of submitted notebooks")
    g.add_argument("--csv", metavar="FILE", help="write the grades here (default ./grades.csv)")
    g.add_argument("--force", action="store_true", help="replace an existing --csv file")
    grading(g)
