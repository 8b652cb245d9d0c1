"""The bench records and BENCHMARKS.md: one JSON record per system and profile, and the file rendered from them.

Above the systems (beside the catalogue, the CLI and the UI): rendering the claims table orders and
titles the systems by the catalogue, which core must not know. Notebooks read a system's latest
record with :func:`recorded`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from labkit import catalog
from labkit.core.bench import (MODELLED_HEAD, RECORDS_DIR, BenchReport, claims_markdown, claims_summary, fmt_claim,
                               write_json)
from labkit.core.errors import bad_value, check_choice
from labkit.core.profiles import check_profile

BEGIN = "<!-- labkit-bench:{key} begin -->"
END = "<!-- labkit-bench:{key} end -->"


_MARKER = re.compile(r"<!-- labkit-bench:(\S+) (begin|end) -->")


def _check_markers(text: str, arg: str, path: str) -> None:
    """Refuse a file whose sections are not whole: each key's begin marker, then its end, once.

    Recording replaces the text between a key's markers; with a marker missing, repeated or out
    of order that span could cut across other sections or hand-written notes.
    """
    seen, open_key = set(), None
    for m in _MARKER.finditer(text):
        key, kind = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if kind == "begin" and open_key is None and key not in seen:
            open_key = key
            continue
        if kind == "end" and open_key == key:
            seen.add(key)
            open_key = None
            continue
        what = (f"section {key!r} begins again" if kind == "begin" and key in seen else
                f"section {key!r} begins inside section {open_key!r}" if kind == "begin" else
                f"section {key!r} ends without its begin marker")
        raise bad_value(arg, path, f"a benchmarks file whose labkit-bench sections each have one begin and one "
                        f"end marker, in order; line {line}: {what} (mend the markers by hand; nothing was written)")
    if open_key is not None:
        raise bad_value(arg, path, f"a benchmarks file whose labkit-bench sections each have one begin and one "
                        f"end marker, in order; section {open_key!r} has no end marker (mend the markers by "
                        "hand; nothing was written)")


def update_benchmarks_md(path: str, key: str | None = None, markdown: str | None = None, *, top: bool = False,
                         sections: Iterable[tuple[str, str | Callable[[str | None], str], bool]] | None = None, force: bool = False,
                         arg: str = "path", whole: str | None = None) -> None:
    """Replace harness-owned sections of BENCHMARKS.md, atomically.

    One section: ``update_benchmarks_md(path, key, markdown, top=...)``; several in one
    replacement of the file: ``sections=[(key, markdown, top), ...]``, applied in order; a
    `markdown` that is callable is called with the section's recorded body (None if absent), read
    under the lock, and returns the new one (``reproduce --only`` merges its claims rows so). A new
    section is appended, or with `top` (the claims table) put right under the title. The read,
    edit and write happen under an exclusive lock on the file's folder, so two runs recording
    at once keep each other's sections.

    An existing file that is not a benchmarks file (no labkit-bench section and no
    ``# Benchmarks`` title, e.g. a README) is refused with a ValueError naming `arg` unless
    `force`; an empty one is fine. With ``sections=[]`` nothing is written: the call only checks
    that `path` may be recorded into. With `whole` (and ``sections=[]``) the file's text is replaced
    by `whole`, under the same checks and lock (rendering BENCHMARKS.md from the records).
    """
    import fcntl
    from pathlib import Path

    from labkit.core.atomic import atomic_write_text
    if sections is None:
        if key is None or markdown is None:
            raise TypeError("update_benchmarks_md() needs `key` and `markdown`, or `sections`")
        sections = [(key, markdown, top)]
    elif key is not None or markdown is not None:
        raise TypeError("update_benchmarks_md() takes `key` and `markdown`, or `sections`, not both")
    sections = list(sections)
    p = Path(os.path.realpath(path))  # a link's target is what gets edited, so lock its folder
    if sections or whole is not None:
        p.parent.mkdir(parents=True, exist_ok=True)
    elif not p.parent.is_dir():
        return
    lock = os.open(p.parent, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = p.read_text(encoding="utf-8") if p.exists() else ""
        hint = "--force" if arg.startswith("--") else "force=True"
        if (text.strip() and "<!-- labkit-bench:" not in text and not text.lstrip().startswith("# Benchmarks")
                and not force):
            raise bad_value(arg, str(path), "a benchmarks file (titled '# Benchmarks' or holding labkit-bench "
                            f"sections), an empty file or a new path; pass {hint} to write into it anyway")
        if p.exists() and not p.stat().st_mode & 0o222 and not force:
            raise bad_value(arg, str(path), f"a writable file (this one is read-only; make it writable or pass {hint})")
        _check_markers(text, arg, str(path))
        if whole is not None:
            atomic_write_text(p, whole)
            return
        if not sections:
            return
        if not text.strip():
            text = "# Benchmarks\n\nWritten by `labkit bench ... --record`; do not edit sections by hand.\n"
        for key, markdown, top in sections:
            b, e = BEGIN.format(key=key), END.format(key=key)
            if callable(markdown):  # made from the section as recorded, read under the lock
                markdown = markdown(text.split(b, 1)[1].split(e, 1)[0] if b in text and e in text else None)
            block = f"{b}\n{markdown.rstrip()}\n{e}"
            if b in text and e in text:
                pre, rest = text.split(b, 1)
                _, post = rest.split(e, 1)
                text = pre + block + post
            elif top and "<!-- labkit-bench:" in text:
                first = text.index("<!-- labkit-bench:")
                text = text[:first] + block + "\n\n" + text[first:]
            else:
                text = text.rstrip() + "\n\n" + block + "\n"
        atomic_write_text(p, text)
    finally:
        os.close(lock)  # releases the lock


def load_json(path: str) -> Any:
    with open(path) as fh:
        return json.load(fh)



HEADER = ("# Benchmarks\n\nRendered by `labkit bench SYSTEM --record` (or `labkit reproduce --record`) from the "
          f"JSON records in `{RECORDS_DIR}/`, one per system and profile; do not edit by hand. Each record "
          "names the commit it ran and whether the code had uncommitted changes.\n")


def _benchmarks_path() -> str:
    from pathlib import Path
    return str(Path(__file__).resolve().parents[1] / "BENCHMARKS.md")


def records_dir(md_path: str | None = None) -> str:
    """The records folder that belongs to the BENCHMARKS.md at `md_path` (the clone's by default)."""
    return os.path.join(os.path.dirname(os.path.realpath(md_path or _benchmarks_path())), RECORDS_DIR)


def record_path(system: str, profile: str, md_path: str | None = None) -> str:
    return os.path.join(records_dir(md_path), f"{system}.{profile}.json")


def write_record(report: BenchReport, md_path: str | None = None) -> str:
    """Write `report` as its system's record (atomically, replacing the previous run's); return the path."""
    path = record_path(report.system, report.profile, md_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(report, path)
    return path


def load_records(md_path: str | None = None) -> dict[tuple[str, str], BenchReport]:
    """Every record beside `md_path`, keyed by (system, profile). A record that cannot be read is an error
    naming its file (a silently skipped record would drop a system's rows from the table)."""
    folder = records_dir(md_path)
    out: dict[tuple[str, str], BenchReport] = {}
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        try:
            rep = BenchReport.from_json(load_json(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise bad_value("record", path, f"a JSON bench record written by labkit ({type(exc).__name__}: {exc})") from exc
        out[(rep.system, rep.profile)] = rep
    return out


def system_title(system: str, rep: BenchReport | None = None) -> str:
    """The catalogue's title of `system` (e.g. "AliGraph"), else the title its report carries, else its name."""
    if system in catalog.NAMES:
        return catalog.entry(system).title
    return (rep.title if rep is not None and rep.title else system)


def claims_section(reports: list[BenchReport], profile: str) -> str:
    """The claims table of one profile, from its systems' records: measured block, modelled block, and
    where each row comes from."""
    order = {n: i for i, n in enumerate(catalog.NAMES)}
    reports = sorted(reports, key=lambda r: (order.get(r.system, len(order)), r.system))
    claims, owner = [], {}
    for r in reports:
        for c in r.claims:
            claims.append(c)
            owner[c.id] = system_title(r.system, r)
    out = [f"## Claims table (`labkit reproduce --profile {profile}`)", "",
           claims_summary(claims) + ". A verdict with an interval passes only if the whole 95% interval "
           "clears the target; one that straddles it is inconclusive.", "", claims_markdown(claims, owner), "",
           "Rows come from these records:", ""]
    for r in reports:
        src = r.source or {}
        commit = f"`{src['commit'][:10]}`" if src.get("commit") else "unknown commit"
        state = " (uncommitted changes)" if src.get("dirty") else ""
        out.append(f"- {system_title(r.system, r)}: `{RECORDS_DIR}/{r.system}.{profile}.json`, run {r.started}, "
                   f"{r.seconds:.0f} s, {commit}{state}")
    missing = [catalog.entry(n).title for n in catalog.NAMES if n not in {r.system for r in reports}]
    if missing:
        out += ["", f"Not recorded at this profile: {', '.join(missing)}."]
    return "\n".join(out) + "\n"


def render_benchmarks(md_path: str | None = None, *, force: bool = False, arg: str = "path") -> str:
    """Rewrite BENCHMARKS.md (at `md_path`, the clone's by default) from the records beside it; return its text.

    Per profile (ci, small, large): the claims table, then each system's section. The same
    safety checks as :func:`update_benchmarks_md` apply (a file that is not a benchmarks file is
    refused unless `force`), and the write is atomic.
    """
    from labkit.core.profiles import PROFILES
    md_path = md_path or _benchmarks_path()
    recs = load_records(md_path)
    parts = [HEADER]
    profiles = sorted({p for _, p in recs}, key=lambda p: (PROFILES.index(p) if p in PROFILES else 99, p))
    profiles.sort(key=lambda p: p != "small")  # the lab's headline profile first
    for prof in profiles:
        reps = [r for (_, p), r in recs.items() if p == prof]
        parts.append(f"{BEGIN.format(key=f'claims:{prof}')}\n{claims_section(reps, prof).rstrip()}\n"
                     f"{END.format(key=f'claims:{prof}')}\n")
        for r in sorted(reps, key=lambda r: r.system):
            k = f"{r.system}:{prof}"
            parts.append(f"{BEGIN.format(key=k)}\n{r.to_markdown().rstrip()}\n{END.format(key=k)}\n")
    text = "\n".join(parts)
    update_benchmarks_md(md_path, sections=[], force=force, arg=arg, whole=text)
    return text


def record(report: BenchReport | list[BenchReport], md_path: str | None = None, *, force: bool = False,
           arg: str = "path") -> list[str]:
    """Write each report's JSON record, then render BENCHMARKS.md from every record; return the record paths.

    The benchmarks file is checked first, so a refused file leaves the records as they were.
    """
    reports = [report] if isinstance(report, BenchReport) else list(report)
    md_path = md_path or _benchmarks_path()
    update_benchmarks_md(md_path, sections=[], force=force, arg=arg)
    paths = [write_record(r, md_path) for r in reports]
    render_benchmarks(md_path, force=force, arg=arg)
    return paths


@dataclass
class Recorded:
    """One system's JSON record as the harness last wrote it: when, from which commit, its claims and notes.

    Notebooks show this instead of quoting numbers in their prose, so what a reader sees is always
    the latest recorded run (``labkit bench SYSTEM --profile small --record``), misses included.
    """

    system: str
    profile: str
    run: str                      # the "Run ..." line: date, duration, machine, commit
    claims: list[dict]            # id, claim, measured (with interval), target, verdict, kind, value, low, high
    notes: list[str]              # the harness's notes under the tables (why a claim missed, anchors)
    path: str = ""
    results: dict = field(default_factory=dict)

    def notes_for(self, claim_id: str) -> list[str]:
        """The notes that name `claim_id` (a bench writes a claim's notes as ``"claim_id: ..."``)."""
        return [n for n in self.notes if claim_id in n]

    def claim(self, claim_id: str) -> dict:
        for c in self.claims:
            if c["id"] == claim_id:
                return c
        raise bad_value("claim_id", claim_id, "one of " + ", ".join(c["id"] for c in self.claims))

    def _repr_markdown_(self) -> str:
        def rows(cs):
            out = ["| claim | measured [95% interval] | target | verdict |", "|---|---|---|---|"]
            for c in cs:
                v = f"**{c['verdict']}**" if c["verdict"] in ("miss", "inconclusive") else c["verdict"]
                out.append(f"| `{c['id']}`: {c['claim']} | {c['measured']} | {c['target']} | {v} |")
            return out
        measured = [c for c in self.claims if c.get("kind", "measured") == "measured"]
        modelled = [c for c in self.claims if c.get("kind") == "modelled"]
        out = [f"**Recorded** (`{RECORDS_DIR}/{self.system}.{self.profile}.json`, from `labkit bench "
               f"{self.system} --profile {self.profile} --record`). {self.run}", "", *rows(measured)]
        if modelled:
            out += ["", MODELLED_HEAD, "", *rows(modelled)]
        why = []
        for c in self.claims:
            if not c["verdict"].startswith("pass"):  # a miss, inconclusive, or not measured
                why += [f"- {n}" for n in self.notes_for(c["id"]) if f"- {n}" not in why]
        return "\n".join(out + ([""] + why if why else []))


def read_section(key: str, path: str | None = None) -> tuple[str | None, str]:
    """Return (the body of the harness-owned section `key` of BENCHMARKS.md, or None, and the file read);
    the clone's BENCHMARKS.md unless `path`."""
    from pathlib import Path
    p = Path(path or _benchmarks_path())
    text = p.read_text(encoding="utf-8") if p.exists() else ""
    b, e = BEGIN.format(key=key), END.format(key=key)
    if b not in text or e not in text:
        return None, str(p)
    return text.split(b, 1)[1].split(e, 1)[0], str(p)


def recorded(system: str, profile: str = "small", path: str | None = None) -> Recorded:
    """Read `system`'s JSON record (beside the clone's BENCHMARKS.md, or the one at `path`): claims and notes.

    Raises ValueError naming the system when there is no record at that profile yet.
    """
    check_choice("system", system, catalog.NAMES)
    profile = check_profile(profile)
    rp = record_path(system, profile, path)
    if not os.path.exists(rp):
        raise ValueError(f"system={system!r} has no record for profile {profile} at {rp}; record one with "
                         f"`labkit bench {system} --profile {profile} --record`")
    rep = BenchReport.from_json(load_json(rp))
    run = rep.to_markdown().split("\n")[2]  # the "Run ..." line, as BENCHMARKS.md shows it
    return Recorded(system, profile, run, [fmt_claim(c) for c in rep.claims], list(rep.notes), rp,
                    dict(rep.results))
