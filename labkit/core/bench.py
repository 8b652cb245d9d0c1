"""The one bench harness: contenders run interleaved in one process, ratios taken pair by pair.

A system's bench is a function ``bench(b: Bench)``. It calls :meth:`Bench.compare` for each case
(same inputs for every contender), :meth:`Bench.record` for derived numbers, and
:meth:`Bench.measure` to fill in its claims. The harness renders tables and JSON itself, so what
lands in BENCHMARKS.md is what was measured (:mod:`labkit.records` writes the records and that file).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from labkit.core.errors import bad_value, check_choice, check_range
from labkit.core.machine import (cpu_ticks, machine_info, release_free_memory, reset_peak_rss, rss_bytes,
                                 steal_share)
from labkit.core.profiles import check_profile
from labkit.core.progress import progress_bar

if TYPE_CHECKING:
    from labkit.core.spread import Spread

#: A comparison's progress bar appears only after it has run this long (seconds): quick ones stay quiet.
PROGRESS_DELAY_S = 5.0

_OPS = {">=": lambda m, t: m >= t, "<=": lambda m, t: m <= t, "==": lambda m, t: m == t}


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread when a command gets a stop signal (SIGINT, SIGTERM, SIGHUP).

    A KeyboardInterrupt, so every clean-up path written for Ctrl-C (closing a Dask cluster,
    removing a temporary folder) runs for SIGTERM too.
    """

    def __init__(self, signum: int) -> None:
        import signal
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: Stop signals received by this process (the command-line handlers append), oldest first.
STOP_SIGNALS: list[int] = []


def check_interrupt() -> None:
    """Raise Interrupted if a stop signal has been received.

    The handler raises at once, but an exception raised while Python runs a finalizer or a
    callback is printed and dropped; this check, at each progress point of a bench, makes sure
    such a signal still stops the bench rather than letting it finish as if nothing happened.
    """
    if STOP_SIGNALS:
        raise Interrupted(STOP_SIGNALS[0])


#: What a claim's number is: "measured" (timed or counted here) or "modelled" (the output of a model or
#: simulator whose inputs the lab chose). Modelled claims get their own block, outside the pass count.
KINDS = ("measured", "modelled")

#: Verdicts a claim can have.
VERDICTS = ("pass", "miss", "inconclusive", "not measured")


@dataclass
class Claim:
    """A paper claim, the lab's target for it, and (once measured) the lab's number and its 95% interval.

    With an interval [low, high] the verdict is "pass" only if the whole interval clears the target,
    "miss" if none of it does, and "inconclusive" if it straddles the target. A claim without one
    (an exact count, a rate over a whole run, a modelled figure) is judged by its value.
    """

    id: str
    claim: str
    paper: str
    target: float
    unit: str = "x"
    op: str = ">="
    measured: float | None = None
    note: str = ""
    kind: str = "measured"
    low: float | None = None
    high: float | None = None
    rounds: int | None = None  #: how many rounds the interval rests on

    def __post_init__(self) -> None:
        check_choice("op", self.op, _OPS)
        check_choice("kind", self.kind, KINDS)

    def _unmeasured(self) -> bool:
        return self.measured is None or (isinstance(self.measured, float) and math.isnan(self.measured))

    @property
    def status(self) -> str:
        """One of VERDICTS: judged on the interval where there is one, else on the value."""
        if self._unmeasured():
            return "not measured"
        if self.low is not None and self.high is not None and self.op != "==":
            lo_ok, hi_ok = _OPS[self.op](self.low, self.target), _OPS[self.op](self.high, self.target)
            if lo_ok and hi_ok:
                return "pass"
            if not lo_ok and not hi_ok:
                return "miss"
            return "inconclusive"
        return "pass" if _OPS[self.op](self.measured, self.target) else "miss"

    @property
    def passed(self) -> bool | None:
        """True on a pass, False on a miss, None when inconclusive or not measured."""
        return {"pass": True, "miss": False}.get(self.status)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)

    @property
    def verdict(self) -> str:
        if self.status == "not measured" and self.note:
            return self.note
        return self.status

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["passed"] = self.passed
        d["verdict"] = self.status
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Claim":
        return cls(d["id"], d["claim"], d["paper"], d["target"], d.get("unit", "x"), d.get("op", ">="),
                   d.get("measured"), d.get("note", ""), d.get("kind", "measured"), d.get("low"), d.get("high"),
                   d.get("rounds"))


@dataclass
class Comparison:
    """Timings of several contenders on one case, collected interleaved round by round."""

    case: str
    times: dict[str, list[float]]
    peak_mem: dict[str, int | None] = field(default_factory=dict)
    work: float | None = None
    work_unit: str = ""

    @property
    def names(self) -> list[str]:
        return list(self.times)

    def median(self, name: str) -> float:
        """Median seconds per call of `name`."""
        return statistics.median(self._t(name))

    def min(self, name: str) -> float:
        return min(self._t(name))

    def max(self, name: str) -> float:
        return max(self._t(name))

    def ratio(self, base: str, new: str) -> float:
        """Speedup of `new` over `base`: median over rounds of time(base) / time(new) in that round."""
        tb, tn = self._t(base), self._t(new)
        return statistics.median(b / n for b, n in zip(tb, tn))

    def spread(self, base: str, new: str, **kw) -> "Spread":
        """Speedup of `new` over `base` with its spread: median of per-round ratios and a 95% interval."""
        from labkit.core.spread import ratio_spread
        return ratio_spread(self._t(base), self._t(new), **kw)

    def time_spread(self, name: str, **kw) -> "Spread":
        """Seconds per call of `name`: median over rounds and a 95% interval."""
        from labkit.core.spread import spread
        return spread(self._t(name), unit="s", **kw)

    def best_ratio(self, bases: Iterable[str], new: str) -> float:
        """Speedup of `new` over the fastest (by median) of `bases`."""
        best = min(bases, key=self.median)
        return self.ratio(best, new)

    def throughput(self, name: str) -> float:
        """Work per second of `name` at its median time (requires `work`)."""
        if self.work is None:
            raise ValueError(f"case {self.case!r} was compared without work=, so it has no throughput")
        return self.work / self.median(name)

    def rows(self, base: str | None = None) -> list[dict]:
        """One dict per contender: median, min, max (s), peak memory (bytes or None), speedup over
        `base` (default: the first contender) and throughput (None without `work`)."""
        base = self.names[0] if base is None else base
        self._t(base)
        return [{"contender": n, "median_s": self.median(n), "min_s": self.min(n), "max_s": self.max(n),
                 "peak_bytes": self.peak_mem.get(n), "speedup": self.ratio(base, n),
                 "throughput": None if self.work is None else self.throughput(n)} for n in self.names]

    def _t(self, name: str) -> list[float]:
        if name not in self.times:
            raise KeyError(f"contender={name!r} is not in case {self.case!r}; have {', '.join(self.times)}")
        return self.times[name]

    def to_json(self) -> dict:
        return {"case": self.case, "work": self.work, "work_unit": self.work_unit,
                "contenders": {n: {"median_s": self.median(n), "min_s": self.min(n),
                                   "max_s": self.max(n), "rounds": len(self.times[n]),
                                   "times_s": list(self.times[n]),
                                   "peak_mem_bytes": self.peak_mem.get(n)} for n in self.times}}

    @classmethod
    def from_json(cls, d: dict) -> "Comparison":
        """Rebuild a comparison from :meth:`to_json` (its per-round times included)."""
        cs = d["contenders"]
        return cls(d["case"], {n: list(c["times_s"]) for n, c in cs.items()},
                   {n: c.get("peak_mem_bytes") for n, c in cs.items()}, d.get("work"), d.get("work_unit", ""))


def interleave(contenders: dict[str, Callable[[], Any]], *, rounds: int = 7, warmup: int = 1,
               case: str = "live", min_sample_s: float = 0.0) -> Comparison:
    """Return a Comparison of `contenders` run interleaved (A B, B A, ...), quietly: the notebooks' timer.

    The same rounds as :meth:`Bench.compare`; read ratios with :meth:`Comparison.spread`.
    """
    b = Bench("live", "ci", progress=False)
    return b.compare(case, contenders, repeats=rounds, warmup=warmup, min_sample_s=min_sample_s)


def _fmt_s(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


def _si(x: float) -> str:
    """Return `x` with an SI prefix and a trailing space, e.g. '1.22 G'."""
    for p, f in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.3g} {p}"
    return f"{x:.3g} "


def _fmt_num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3g}"
        return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"
    return str(x)


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


@dataclass
class BenchReport:
    """Everything one bench run measured; renders itself as text, Markdown and JSON."""

    system: str
    profile: str
    machine: dict
    results: dict[str, float]
    claims: list[Claim]
    comparisons: list[Comparison]
    started: str
    seconds: float
    notes: list[str] = field(default_factory=list)
    title: str = ""
    pid: int | None = None  #: the process that ran the bench (reproduce runs each in its own)
    source: dict = field(default_factory=dict)  #: {"commit": hash or None, "dirty": bool or None}

    def to_json(self) -> dict:
        return {"system": self.system, "profile": self.profile, "machine": self.machine, "source": self.source,
                "results": self.results, "claims": [c.to_json() for c in self.claims],
                "comparisons": [c.to_json() for c in self.comparisons],
                "started": self.started, "seconds": self.seconds, "notes": self.notes, "title": self.title,
                "pid": self.pid}

    @classmethod
    def from_json(cls, d: dict) -> "BenchReport":
        """Rebuild a report from :meth:`to_json` (e.g. one a child process wrote)."""
        return cls(d["system"], d["profile"], d["machine"], d["results"],
                   [Claim.from_json(c) for c in d["claims"]], [Comparison.from_json(c) for c in d["comparisons"]],
                   d["started"], d["seconds"], list(d.get("notes", [])), d.get("title", ""), d.get("pid"),
                   dict(d.get("source") or {}))

    def comparisons_markdown(self) -> str:
        rows = []
        for c in self.comparisons:
            for i, r in enumerate(c.rows()):
                pm, tp = r["peak_bytes"], r["throughput"]
                rows.append([c.case, r["contender"], _fmt_s(r["median_s"]), f"{_fmt_s(r['min_s'])} - {_fmt_s(r['max_s'])}",
                             "-" if pm is None else f"{pm / 2**20:.1f}",
                             "1 (base)" if i == 0 else f"{r['speedup']:.2f}x",
                             "-" if tp is None else f"{_si(tp)}{c.work_unit}/s"])
        return _table(["case", "contender", "median", "min - max", "peak MB", "speedup vs first",
                       "throughput"], rows)

    def results_markdown(self) -> str:
        return _table(["metric", "value"], [[k, _fmt_num(v)] for k, v in self.results.items()])

    def to_markdown(self) -> str:
        m = self.machine
        head = (f"### {self.title or self.system} (`labkit bench {self.system} --profile {self.profile}`)\n\n"
                f"Run {self.started}, {self.seconds:.0f} s, on {m.get('cpu')} ("
                f"{m['cpu_detail'] + '; ' if m.get('cpu_detail') else ''}{m.get('cores')} cores, "
                f"{(m.get('memory') or 0) / 2**30:.0f} GiB, GPU: {m.get('gpu') or 'none'})"
                + ("" if m.get("cpu_steal") is None else
                   f"; the hypervisor stole {100 * m['cpu_steal']:.1f}% of the machine's CPU time during the run")
                + "." + _source_line(self.source) + "\n")
        parts = [head, "**Claims**\n", claims_markdown(self.claims)]
        if self.results:
            parts += ["\n**Results**\n", self.results_markdown()]
        if self.comparisons:
            parts += ["\n**Side by side** (interleaved rounds; speedup = median of per-round ratios)\n",
                      self.comparisons_markdown()]
        if self.notes:
            parts += ["\n" + "\n".join(f"- {n}" for n in self.notes)]
        return "\n".join(parts) + "\n"

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        from labkit.core.metrics import markdown_table_html
        return markdown_table_html(self.to_markdown())


def _fmt_measured(c: Claim) -> str:
    if c.measured is None:
        return "-"
    meas = _fmt_num(c.measured)
    if c.interval is None and c.passed is not None and _OPS[c.op](float(meas.replace(",", "")), c.target) != c.passed:
        meas = f"{c.measured:.5g}"  # rounding must not make a miss read like a pass
    if c.interval is not None:
        meas += f" [{_fmt_num(c.low)}, {_fmt_num(c.high)}]"
    return meas


def _claims_table(claims: list[Claim], system_col: dict[str, str] | None) -> str:
    rows = []
    for c in claims:
        tgt = "-" if c.target != c.target else f"{c.op} {_fmt_num(c.target)} {c.unit}".strip()
        row = [f"`{c.id}`", c.claim, c.paper, _fmt_measured(c), tgt,
               c.verdict + (f" ({c.note})" if c.note and c.note != c.verdict else "")]
        if system_col is not None:
            row.insert(0, system_col.get(c.id, ""))
        rows.append(row)
    header = ["id", "claim", "paper", "measured [95% interval]", "target", "verdict"]
    if system_col is not None:
        header.insert(0, "system")
    return _table(header, rows)


MODELLED_HEAD = ("**Modelled** (outputs of a model or simulator whose inputs the lab chose; "
                 "not counted as passes or misses)")


def _source_line(src: dict) -> str:
    if not src or not src.get("commit"):
        return ""
    state = {True: ", with uncommitted changes", False: ""}.get(src.get("dirty"), ", state unknown")
    return f" Code: commit `{src['commit'][:10]}`{state}."


#: The folder (beside BENCHMARKS.md) holding one JSON record per system and profile; BENCHMARKS.md is
#: rendered from these, and notebooks read them.
RECORDS_DIR = "records"


def source_info() -> dict:
    """The code a bench ran: this clone's commit and whether tracked files differed from it.

    Records and BENCHMARKS.md are left out of the dirty check (recording them is what a run
    does); anything else uncommitted makes the record say so. Outside a git clone both are None.
    """
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
        st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                             ".", f":!{RECORDS_DIR}", ":!BENCHMARKS.md"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(st.strip())}


def claims_markdown(claims: Iterable[Claim], system_col: dict[str, str] | None = None) -> str:
    """Render claims as Markdown: the measured claims' table, then the modelled ones' under their own head.

    The measured column reads ``1.94 [1.81, 2.07]`` where the claim has a 95% interval.
    """
    claims = list(claims)
    measured = [c for c in claims if c.kind == "measured"]
    modelled = [c for c in claims if c.kind == "modelled"]
    out = _claims_table(measured, system_col) if measured or not modelled else ""
    if modelled:
        out += ("\n\n" if out else "") + MODELLED_HEAD + "\n\n" + _claims_table(modelled, system_col)
    return out


def claims_summary(claims: Iterable[Claim]) -> str:
    """One line: how many measured claims pass, miss, are inconclusive or not measured; modelled apart."""
    claims = list(claims)
    st = [c.status for c in claims if c.kind == "measured"]
    line = ", ".join(f"{st.count(v)} {v}" for v in VERDICTS) + " (measured claims)"
    mod = [c.status for c in claims if c.kind == "modelled"]
    if mod:
        line += f"; {len(mod)} modelled ({mod.count('pass')} reach their target in the model)"
    return line


def fmt_claim(c: Claim) -> dict:
    """One claim as the strings a table shows (measured with its interval, target) and its raw numbers."""
    tgt = "-" if c.target != c.target else f"{c.op} {_fmt_num(c.target)} {c.unit}".strip()
    return {"id": c.id, "claim": c.claim, "paper": c.paper, "measured": _fmt_measured(c), "target": tgt,
            "verdict": c.verdict, "kind": c.kind, "value": c.measured, "low": c.low, "high": c.high}


class Bench:
    """Collects one system's side-by-side measurements for one profile."""

    def __init__(self, system: str, profile: str, claims: Iterable[Claim] = (), *,
                 progress: bool = True, out: Any = None, title: str = "") -> None:
        self.system = system
        self.profile = check_profile(profile)
        self.title = title
        self.claims = {c.id: dataclasses.replace(c) for c in claims}
        self.results: dict[str, float] = {}
        self.comparisons: list[Comparison] = []
        self.notes: list[str] = []
        self.progress = progress
        self.out = out if out is not None else sys.stderr
        self._t0 = time.perf_counter()
        self._started = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self._ticks0 = cpu_ticks()
        self._source = source_info()  # the code as it was when the run began
        # id(comparison) -> what more_rounds needs to run it again (contenders, calls per sample, memory)
        self._rerun: dict[int, tuple[dict, dict, bool]] = {}

    def log(self, msg: str) -> None:
        """Print a progress line (to stderr by default) when progress is on."""
        check_interrupt()
        if self.progress:
            print(f"[{self.system}] {msg}", file=self.out, flush=True)

    def compare(self, case: str, contenders: dict[str, Callable[[], Any]], *, repeats: int = 5,
                warmup: int = 1, min_sample_s: float = 0.0, memory: bool = False,
                work: float | None = None, work_unit: str = "") -> Comparison:
        """Time `contenders` on one case, interleaved: every round runs each once, order rotated.

        The first contender is the baseline the table's speedup column is relative to.
        `min_sample_s` batches very fast calls so one sample lasts at least that long.
        With `memory`, each contender's peak RSS growth during a call is recorded (freed heap memory is
        handed back to the OS before each call, so reused pages do not hide the growth).
        `work` (e.g. edges, tokens) gives throughput columns.
        """
        check_range("repeats", repeats, 1, integer=True)
        check_range("warmup", warmup, 0, integer=True)
        check_interrupt()
        if not contenders:
            raise ValueError("contenders={} is not accepted; expected at least one callable")
        names = list(contenders)
        number = {n: 1 for n in names}
        # One bar per comparison, shown only once it has run a few seconds (a large profile's rounds
        # take minutes); it is updated between calls, outside the timed region, and cleared when done.
        bar = progress_bar((warmup + repeats) * len(names), f"[{self.system}] {case}", self.progress,
                           file=self.out, delay=PROGRESS_DELAY_S, leave=False, unit="call")
        try:
            times, peak = self._rounds(contenders, names, number, bar, repeats, warmup, min_sample_s, memory)
        finally:
            bar.close()
        comp = Comparison(case, times, peak if memory else {}, work, work_unit)
        self.comparisons.append(comp)
        self._rerun[id(comp)] = (contenders, number, memory)
        self.log(f"{case}: " + ", ".join(f"{n} {_fmt_s(comp.median(n))}" for n in names))
        return comp

    def _rounds(self, contenders, names, number, bar, repeats, warmup, min_sample_s, memory):
        """Run `compare`'s warm-up and timed rounds; return (seconds per call, peak RSS growth) by name."""
        for _ in range(warmup):
            for n in names:
                bar.set_postfix_str(f"warm-up: {n}", refresh=False)
                check_interrupt()
                t = self._time(contenders[n], 1)
                bar.update(1)
                if min_sample_s > 0 and t < min_sample_s:
                    number[n] = max(number[n], math.ceil(min_sample_s / max(t, 1e-9)))
        times: dict[str, list[float]] = {n: [] for n in names}
        peak: dict[str, int | None] = {n: None for n in names}
        for r in range(repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                bar.set_postfix_str(f"round {r + 1}/{repeats}: {n}", refresh=False)
                check_interrupt()
                if memory:
                    gc.collect()
                    # Freed heap pages still resident would serve the contender's allocations without
                    # raising the peak: hand them back first, so its growth is its own.
                    release_free_memory()
                    ok = reset_peak_rss()
                    before, _ = rss_bytes()
                times[n].append(self._time(contenders[n], number[n]))
                bar.update(1)
                if memory and ok:
                    _, hwm = rss_bytes()
                    peak[n] = max(peak[n] or 0, hwm - before)
        return times, peak

    @staticmethod
    def _time(fn: Callable[[], Any], number: int) -> float:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number

    def record(self, key: str, value: float) -> float:
        """Record a named result (appears in JSON 'results' and the results table)."""
        self.results[key] = float(value)
        return float(value)

    def measure(self, claim_id: str, value: "float | Spread", note: str = "", *,
                interval: tuple[float, float] | None = None) -> float:
        """Fill in the measured value of a declared claim (and record it as a result).

        `value` may be a :class:`~labkit.core.spread.Spread`, whose interval then becomes the
        claim's; or pass `interval` (low, high) with a plain value.
        """
        c = self._claim(claim_id)
        rounds = None
        if hasattr(value, "lo") and hasattr(value, "median"):
            interval, rounds, value = (value.lo, value.hi), value.n, value.median
        c.measured = float(value)
        c.low, c.high = (None, None) if interval is None else (float(interval[0]), float(interval[1]))
        c.rounds = rounds
        if note:
            c.note = note
        self.record(claim_id, value)
        return float(value)

    def _claim(self, claim_id: str) -> Claim:
        if claim_id not in self.claims:
            raise KeyError(f"claim_id={claim_id!r} is not declared for {self.system}; declared: "
                           + ", ".join(self.claims))
        return self.claims[claim_id]

    def more_rounds(self, comp: Comparison, n: int) -> Comparison:
        """Run `n` more interleaved rounds of a comparison made by :meth:`compare`, appending its times."""
        check_range("n", n, 1, integer=True)
        if id(comp) not in self._rerun:
            raise bad_value("comp", comp.case, "a Comparison made by this bench's compare()")
        contenders, number, memory = self._rerun[id(comp)]
        names = list(contenders)
        bar = progress_bar(n * len(names), f"[{self.system}] {comp.case} (more rounds)", self.progress,
                           file=self.out, delay=PROGRESS_DELAY_S, leave=False, unit="call")
        try:
            times, peak = self._rounds(contenders, names, number, bar, n, 0, 0.0, memory)
        finally:
            bar.close()
        for k in names:
            comp.times[k].extend(times[k])
            if memory and peak[k] is not None:
                comp.peak_mem[k] = max(comp.peak_mem.get(k) or 0, peak[k])
        return comp

    def release(self, comp: Comparison) -> None:
        """Let go of `comp`'s contenders (and the tables and models they hold): no more rounds can run.

        :meth:`compare` keeps them so a straddling claim can get more rounds; call this once a case's
        claims are measured, before the next case allocates (the report keeps the times).
        """
        self._rerun.pop(id(comp), None)

    def _settle(self, claim_id: str, compute: "Callable[[], Spread]", grow: "Callable[[], bool]") -> "Spread":
        """Measure `claim_id` from `compute()`; while its interval straddles the target, `grow()` (more
        rounds; returns False when the bound is reached) and measure again. Returns the final spread."""
        sp = compute()
        self.measure(claim_id, sp)
        start = sp.n
        while self.claims[claim_id].status == "inconclusive" and grow():
            sp = compute()
            self.measure(claim_id, sp)
        if sp.n > start:
            self.log(f"{claim_id}: interval straddled the target; ran to {sp.n} rounds: "
                     f"{sp} -> {self.claims[claim_id].status}")
        return sp

    @staticmethod
    def _round_bound(have: int, max_rounds: int | None) -> int:
        return max(have, min(15, 3 * have) if max_rounds is None else max_rounds)

    def measure_ratio(self, claim_id: str, comp: Comparison, base: str, new: str, *,
                      max_rounds: int | None = None) -> "Spread":
        """Measure a claim as the speedup time(base) / time(new) in `comp`, with its 95% interval.

        While the interval straddles the claim's target, more interleaved rounds of `comp` run (in
        steps of a few rounds, up to `max_rounds` in all; default three times the rounds it had, at
        most 15); if it still straddles, the verdict is "inconclusive".
        """
        comp._t(base), comp._t(new)
        bound = self._round_bound(len(comp.times[base]), max_rounds)

        def grow() -> bool:
            have = len(comp.times[base])
            if have >= bound:
                return False
            self.more_rounds(comp, min(bound - have, max(2, have // 2)))
            return True

        return self._settle(claim_id, lambda: comp.spread(base, new), grow)

    def measure_geomean(self, claim_id: str, cases: "list[tuple[Comparison, str, str]]", *,
                        max_rounds: int | None = None) -> "Spread":
        """Measure a claim as the geometric mean over `cases` ((comp, base, new) each) of the speedups,
        bootstrapped jointly; straddling intervals get more rounds of every case, as in measure_ratio."""
        from labkit.core.spread import geomean_spread
        if not cases:
            raise bad_value("cases", "[]", "at least one (comparison, base, new)")
        bound = self._round_bound(min(len(c._t(b)) for c, b, _ in cases), max_rounds)

        def grow() -> bool:
            have = min(len(c.times[b]) for c, b, _ in cases)
            if have >= bound:
                return False
            for c, _, _ in cases:
                self.more_rounds(c, min(bound - have, max(2, have // 2)))
            return True

        return self._settle(claim_id, lambda: geomean_spread([(c._t(b), c._t(n)) for c, b, n in cases]), grow)

    def measure_samples(self, claim_id: str, values: Iterable[float], *,
                        more: "Callable[[], float] | None" = None, max_rounds: int = 15) -> "Spread":
        """Measure a claim from per-round values the bench computed itself (median, bootstrap 95% interval).

        With `more` (a callable returning one more round's value), rounds are added while the
        interval straddles the target, up to `max_rounds` values in all.
        """
        from labkit.core.spread import spread
        vals = [float(v) for v in values]
        c = self._claim(claim_id)

        def grow() -> bool:
            if more is None or len(vals) >= max_rounds:
                return False
            check_interrupt()
            vals.append(float(more()))
            return True

        return self._settle(claim_id, lambda: spread(vals, unit=c.unit), grow)

    def note(self, text: str, claim: str | None = None) -> None:
        """Add an explanatory sentence under the tables (e.g. why a target is missed).

        With `claim` (a declared claim id) the note is about that claim: it is written as
        ``"claim: text"``, so a reader (and :meth:`Recorded.notes_for`) finds it by the id.
        """
        if claim is not None:
            if claim not in self.claims:
                raise KeyError(f"claim={claim!r} is not declared for {self.system}; declared: " + ", ".join(self.claims))
            if not text.startswith(claim):
                text = f"{claim}: {text}"
        self.notes.append(text)

    def report(self) -> BenchReport:
        check_interrupt()  # an interrupted bench has no report, even if the signal was dropped
        self._rerun.clear()
        for c in self.claims.values():
            # An inconclusive verdict's reason is the interval itself: say so beside the claim, once.
            if c.status == "inconclusive" and not any(n.startswith(f"{c.id}:") for n in self.notes):
                self.note(f"its 95% interval [{_fmt_num(c.low)}, {_fmt_num(c.high)}] still holds the target "
                          f"{c.op} {_fmt_num(c.target)} after {c.rounds or 'all its'} rounds, so this machine "
                          "cannot tell pass from miss", claim=c.id)
        machine = dict(machine_info(), cpu_steal=steal_share(self._ticks0))
        return BenchReport(self.system, self.profile, machine, dict(self.results),
                           list(self.claims.values()), list(self.comparisons), self._started,
                           time.perf_counter() - self._t0, list(self.notes), self.title, os.getpid(),
                           dict(self._source))


def write_json(report: BenchReport | list[BenchReport], path: str, *, overwrite: bool = True) -> None:
    """Write one report (or a list, for reproduce) as JSON atomically.

    With ``overwrite=False`` a `path` that exists (even one that appeared while the bench ran)
    raises FileExistsError and is left as it is.
    """
    from labkit.core.atomic import atomic_write_json
    obj = report.to_json() if isinstance(report, BenchReport) else [r.to_json() for r in report]
    atomic_write_json(path, obj, overwrite=overwrite)
